/* sv_exec: a running exec: its output, time limit, kill, end and result
 * (sv_exec_start.c starts it). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervisor/sv_client.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_metrics.h"
#include "base/log.h"

__attribute__((format(printf, 3, 4))) void sv_exec_mark_killed(sv_exec *ex, const char *cause,
                                                              const char *fmt, ...)
{
    if (ex->kill_cause[0])
        return;
    snprintf(ex->kill_cause, sizeof ex->kill_cause, "%s", cause);
    ex->kill_ns = sg_now_mono_ns();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ex->kill_detail, sizeof ex->kill_detail, fmt, ap);
    va_end(ap);
}

void sv_exec_kill(sv_exec *ex)
{
    sg_err err = {0};
    if (!ex->s->cg) {
        /* No cgroup (rootless without delegation): the exec's session. */
        sg_spawn_hdr sp = {.type = SG_SPAWN_SIGNAL, .exec_id = ex->id, .sig = SIGKILL};
        if (send(ex->s->init_fd, &sp, sizeof sp, MSG_NOSIGNAL) < 0)
            sg_log(SG_LOG_ERROR, "kill of exec %u: %s", ex->num, strerror(errno));
        return;
    }
    if (sv_leaves_kill(ex->s, ex->leaf, 2000, &err) < 0)
        sg_log(SG_LOG_ERROR, "kill of exec %u: %s", ex->num, err.msg);
}


/* Output of the exec (a pipe's, or its terminal's): the output limit,
 * the capture, the caller. */
size_t sv_exec_output_take(sv_exec *ex, uint8_t type, const char *buf, size_t n)
{
    uint64_t limit = ex->s->meta.output_limit;
    size_t give = n;
    if (limit && ex->out_bytes + give > limit) {
        give = ex->out_bytes >= limit ? 0 : (size_t)(limit - ex->out_bytes);
        if (!ex->output_limit_hit) {
            ex->output_limit_hit = true;
            sv_exec_mark_killed(ex, "output_limit", "its output reached the output limit of %llu bytes",
                             (unsigned long long)limit);
            sv_exec_kill(ex);
        }
    }
    ex->out_bytes += give;
    if (give && ex->cx)
        sg_capture_exec_output(ex->cx, type == SG_CTL_STDERR, buf, give);
    return give;
}

void sv_exec_output(sv_exec *ex, uint8_t type, const char *buf, size_t n)
{
    size_t give = sv_exec_output_take(ex, type, buf, n);
    if (give && ex->cl)
        sv_client_send(ex->cl, type, buf, give);
}

/* Reads what is available on one output pipe. Returns false at EOF/error. */
static bool exec_read(sv_exec *ex, int fd, uint8_t type)
{
    char buf[SV_READ_CHUNK];
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        sv_exec_output(ex, type, buf, (size_t)n);
        if ((size_t)n < sizeof buf)
            return true;
    }
    return true;
}

void sv_exec_on_close_pending(uv_handle_t *h)
{
    sv_exec *ex = h->data;
    if (--ex->pending_closes == 0)
        free(ex);
}

static void exec_close_stream(sv_exec *ex, bool out)
{
    uv_poll_t *p = out ? &ex->out_poll : &ex->err_poll;
    bool *active = out ? &ex->out_active : &ex->err_active;
    int *fd = out ? &ex->out_fd : &ex->err_fd;
    if (!*active)
        return;
    *active = false;
    uv_poll_stop(p);
    ex->pending_closes++;
    uv_close((uv_handle_t *)p, sv_exec_on_close_pending);
    close(*fd);
    *fd = -1;
}

void sv_exec_on_output(uv_poll_t *p, int status, int events)
{
    sv_exec *ex = p->data;
    bool out = p == &ex->out_poll;
    if (!exec_read(ex, out ? ex->out_fd : ex->err_fd, out ? SG_CTL_STDOUT : SG_CTL_STDERR))
        exec_close_stream(ex, out);
    if (ex->cl && ex->cl->qbytes > SV_CLIENT_QUEUE_MAX) {
        /* Backpressure: the caller is slow; let the exec block on its pipe. */
        if (ex->out_active)
            uv_poll_stop(&ex->out_poll);
        if (ex->err_active)
            uv_poll_stop(&ex->err_poll);
    }
}

static void exec_slot_remove(sv_sup *s, sv_exec *ex)
{
    for (size_t i = 0; i < s->exec.n; i++) {
        if (s->exec.list[i] == ex) {
            s->exec.list[i] = s->exec.list[--s->exec.n];
            return;
        }
    }
}

sv_exec *sv_exec_find(sv_sup *s, uint32_t id)
{
    for (size_t i = 0; i < s->exec.n; i++)
        if (s->exec.list[i]->id == id)
            return s->exec.list[i];
    return NULL;
}

void sv_exec_on_timeout(uv_timer_t *t)
{
    sv_exec *ex = t->data;
    if (ex->finished)
        return;
    ex->timed_out = true;
    sv_exec_mark_killed(ex, "timeout", "it ran into its time limit of %g s", ex->timeout_s);
    sv_exec_kill(ex);
}

void sv_exec_deadlines(sv_sup *s)
{
    uint64_t now = sg_now_mono_ns();
    for (size_t i = 0; i < s->exec.n; i++) {
        sv_exec *ex = s->exec.list[i];
        if (ex->timeout_s > 0 && ex->start_ns && !ex->finished && !ex->timed_out &&
            now >= ex->start_ns + (uint64_t)(ex->timeout_s * 1e9))
            sv_exec_on_timeout(&ex->timer);
    }
}

/* The command's exit status as a shell gives it: 128+N for signal N. */
static int exec_exit_code(const sv_exec *ex)
{
    return WIFEXITED(ex->status) ? WEXITSTATUS(ex->status) : 128 + WTERMSIG(ex->status);
}

static void exec_send_code(sv_exec *ex)
{
    int32_t code = exec_exit_code(ex);
    sv_client_send(ex->cl, SG_CTL_EXIT, &code, sizeof code);
}

static json_t *exec_result_json(sv_exec *ex, const sg_cg_stats *after)
{
    double wall = (double)(sg_now_mono_ns() - ex->start_ns) / 1e9;
    int st = ex->status;
    json_t *exit_code = json_integer(exec_exit_code(ex));
    json_t *sig = WIFEXITED(st) ? json_null() : json_integer(WTERMSIG(st));
    uint64_t cpu_ns = after->cpu_ns >= ex->before.cpu_ns ? after->cpu_ns - ex->before.cpu_ns : 0;
    uint64_t rusage_ns = (uint64_t)(ex->exit_rep.utime_us + ex->exit_rep.stime_us) * 1000;
    if (cpu_ns < rusage_ns)
        cpu_ns = rusage_ns;
    uint64_t peak = after->memory_peak;
    if (!peak)
        peak = (uint64_t)ex->exit_rep.maxrss_kb * 1024;
    bool oom = after->oom_kills > ex->before.oom_kills;
    bool pids = after->pids_max_hits > ex->before.pids_max_hits;
    return json_pack("{s:o, s:o, s:f, s:f, s:I, s:b, s:b, s:b, s:I, s:b}",
        "exit_code", exit_code, "signal", sig,
        "wall_s", wall, "cpu_s", (double)cpu_ns / 1e9,
        "memory_peak", (json_int_t)peak,
        "oom_killed", oom, "pids_limit_hit", pids, "timed_out", ex->timed_out,
        "output_bytes", (json_int_t)ex->out_bytes,
        "output_limit_hit", ex->output_limit_hit);
}

/* The cgroup counters after the exec, for its result. */
static void exec_stats_after(sv_exec *ex, sg_cg_stats *after)
{
    sv_sup *s = ex->s;
    sg_err err = {0};
    memset(after, 0, sizeof *after);
    if (s->leaves.fast)
        /* cpu comes from the leaf; memory from the exec's rusage (the
         * sandbox's figure is its all-time peak) */
        sg_cgroup_counters(s->cg, &after->oom_kills, &after->pids_max_hits, &err);
    else if (s->cg)
        sg_cgroup_stats(s->cg, NULL, after, &err);
    sv_metrics_oom_seen(s, after->oom_kills);
    sg_cg_stats leaf = {0};
    int lr = ex->cpu_fd >= 0 ? sg_cgroup_cpu_stat_read(ex->cpu_fd, &leaf.cpu_ns, &err)
           : s->cg ? sg_cgroup_stats(s->cg, ex->leaf, &leaf, &err) : -1;
    if (lr == 0) {
        leaf.cpu_ns = leaf.cpu_ns >= ex->cpu_base_ns ? leaf.cpu_ns - ex->cpu_base_ns : 0;
        after->cpu_ns = leaf.cpu_ns + ex->before.cpu_ns;
        if (leaf.memory_peak)
            after->memory_peak = leaf.memory_peak;
    }
}

/* Why a command that died of SIGKILL died, when we know it: our own kill
 * (sv_exec_mark_killed), or the OOM killer (the sandbox's OOM counter moved
 * since the exec began, or since it was last read when the exec read no
 * counters). Read only on that path, never for a command that exited. */
static bool exec_find_kill_reason(sv_exec *ex)
{
    sv_sup *s = ex->s;
    if (!WIFSIGNALED(ex->status) || WTERMSIG(ex->status) != SIGKILL)
        return false;
    if (!ex->kill_cause[0] && s->cg) {
        uint64_t oom = 0, pids = 0;
        sg_err err = {0};
        if (sg_cgroup_counters(s->cg, &oom, &pids, &err) == 0) {
            uint64_t base = (!ex->code_only || ex->cx) ? ex->before.oom_kills : s->exec.oom_seen;
            if (oom > base)
                sv_exec_mark_killed(ex, "memory", "the sandbox reached its memory limit of %llu MiB "
                                 "(the kernel's OOM killer)", (unsigned long long)(s->meta.memory >> 20));
            sv_metrics_oom_seen(s, oom);
        }
    }
    return ex->kill_cause[0] != '\0';
}

/* What an exec handed to a ready child holds until the child takes it
 * (sv_handoff.c), let go. */
void sv_exec_handoff_release(sv_exec *ex)
{
    if (ex->awaiting_ack) {
        ex->awaiting_ack = false;
        if (ex->ack_timer.data) {
            uv_timer_stop(&ex->ack_timer);
            uv_close((uv_handle_t *)&ex->ack_timer, sv_exec_on_close_pending);
        }
        for (int i = 0; i < 3; i++)
            sg_close_reset(&ex->hold_fds[i]);
    }
    sg_close_reset(&ex->ready_sock);
    free(ex->held_msg);
    ex->held_msg = NULL;
}

/* The exec in the host's metrics (sv_metrics.h). */
static void exec_count(sv_exec *ex, bool killed, bool pids_hit)
{
    uint64_t now = sg_now_mono_ns();
    sg_ctr_exec outcome = !ex->spawned              ? SG_CTR_EXEC_ERROR
                          : !WIFEXITED(ex->status)  ? SG_CTR_EXEC_KILLED
                          : WEXITSTATUS(ex->status) ? SG_CTR_EXEC_FAILED
                                                    : SG_CTR_EXEC_OK;
    bool limits[SG_CTR_LIMIT_N] = {[SG_CTR_LIMIT_PIDS] = pids_hit, [SG_CTR_LIMIT_OUTPUT] = ex->output_limit_hit,
                                   [SG_CTR_LIMIT_TIME] = ex->timed_out};
    uint64_t wall = ex->start_ns && now > ex->start_ns ? now - ex->start_ns : 0;
    uint64_t kill = ex->kill_ns && now > ex->kill_ns ? now - ex->kill_ns : 0;
    sv_metrics_exec_end(ex->s, outcome, wall, killed ? ex->kill_cause : NULL, kill, limits);
}

void sv_exec_finish(sv_exec *ex)
{
    sv_sup *s = ex->s;
    if (ex->finished)
        return;
    ex->finished = true;
    s->hooks.activity(s);
    ks_disarm(s->ks.thread, ex->leaf); /* before its leaf can be reused */
    sv_exec_handoff_release(ex);
    /* Everything the command wrote before it exited is in the pipes now. */
    if (ex->out_active && !exec_read(ex, ex->out_fd, SG_CTL_STDOUT))
        exec_close_stream(ex, true);
    if (ex->err_active && !exec_read(ex, ex->err_fd, SG_CTL_STDERR))
        exec_close_stream(ex, false);
    s->hooks.tty_end(ex); /* its terminal ends with it (sv_tty.c, above) */
    exec_close_stream(ex, true);
    exec_close_stream(ex, false);
    uv_timer_stop(&ex->timer);

    sg_err err = {0};
    /* A caller that wants the exit code alone gets it first, with no JSON
     * made and no counter read for it; with a capture the code waits until
     * the exec_end event is spooled, as a full result does. */
    bool code_first = ex->spawned && ex->cl && ex->code_only && !ex->cx;
    /* A command we (or the OOM killer) killed does not end in silence: one
     * line on the caller's stderr says why, before its exit code. */
    bool killed = ex->spawned && exec_find_kill_reason(ex);
    if (killed && ex->cl) {
        char line[300];
        int n = snprintf(line, sizeof line, "sandglass: killed: %s\n", ex->kill_detail);
        sv_client_send(ex->cl, SG_CTL_STDERR, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    if (code_first)
        exec_send_code(ex);
    bool pids_hit = false;
    if (ex->spawned && !code_first) {
        sg_cg_stats after;
        exec_stats_after(ex, &after);
        pids_hit = after.pids_max_hits > ex->before.pids_max_hits;
        json_t *res = exec_result_json(ex, &after);
        if (killed)
            json_object_set_new(res, "killed_by", json_pack("{s:s, s:s}", "cause", ex->kill_cause,
                                                            "detail", ex->kill_detail));
        if (s->ks.aborted)
            json_object_set_new(res, "aborted", json_string(s->ks.reason));
        if (ex->cx)
            sg_capture_exec_end(ex->cx, res);
        ex->cx = NULL;
        if (ex->cl && !ex->code_only) {
            sv_client_send_json(ex->cl, SG_CTL_RESULT, res);
        } else {
            json_decref(res);
            if (ex->cl)
                exec_send_code(ex);
        }
    }
    exec_count(ex, killed, pids_hit);
    /* A leaf with background processes stays until they end or destroy.
     * A fast leaf that emptied is kept for a later exec; leaves on v1
     * hierarchies are checked first. */
    if (!s->cg || (s->leaves.fast ? sv_leaves_recycle(s, ex)
                   : sg_cgroup_populated(s->cg, ex->leaf, &err) == 0 &&
                     sg_cgroup_leaf_remove(s->cg, ex->leaf, &err) == 0))
        sv_leaves_untrack(s, ex->leaf);
    sg_close_reset(&ex->cpu_fd);
    sg_close_reset(&ex->events_fd);
    sg_close_reset(&ex->leaf_fd);
    if (ex->cl) {
        sv_client *cl = ex->cl;
        cl->ex = NULL;
        ex->cl = NULL;
        cl->close_after_flush = true;
        if (cl->test_drop)
            sv_client_close(cl); /* its request unread (sv_client.c, tests only) */
        else
            sv_client_flush(cl);
    }
    exec_slot_remove(s, ex);
    /* Drops the reference the exec held since sv_exec_start. */
    uv_close((uv_handle_t *)&ex->timer, sv_exec_on_close_pending);
    sv_leaves_ready_next(s);
}

void sv_exec_fail(sv_exec *ex, const char *msg)
{
    if (ex->cx) {
        sg_autojson json_t *res = json_pack("{s:n, s:f, s:b, s:s}", "exit_code", "wall_s", 0.0,
                                            "timed_out", 0, "error", msg);
        sg_capture_exec_end(ex->cx, res);
        ex->cx = NULL;
    }
    if (ex->cl)
        sv_client_error(ex->cl, msg);
    ex->cl = NULL;
    ex->spawned = false;
    sv_exec_finish(ex);
}

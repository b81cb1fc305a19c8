/* sv_exec: the exec lifecycle: start, output, timeout, kill, finish, result. */
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

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "base/log.h"

__attribute__((format(printf, 3, 4))) void exec_mark_killed(exec_ctx *ex, const char *cause,
                                                              const char *fmt, ...)
{
    if (ex->kill_cause[0])
        return;
    snprintf(ex->kill_cause, sizeof ex->kill_cause, "%s", cause);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ex->kill_detail, sizeof ex->kill_detail, fmt, ap);
    va_end(ap);
}

void exec_kill(exec_ctx *ex)
{
    sg_err err = {0};
    if (!ex->s->cg) {
        /* No cgroup (rootless without delegation): the exec's session. */
        sg_spawn_hdr sp = {.type = SG_SPAWN_SIGNAL, .exec_id = ex->id, .sig = SIGKILL};
        if (send(ex->s->init_fd, &sp, sizeof sp, MSG_NOSIGNAL) < 0)
            sg_log(SG_LOG_ERROR, "kill of exec %u: %s", ex->num, strerror(errno));
        return;
    }
    if (leaf_kill(ex->s, ex->leaf, 2000, &err) < 0)
        sg_log(SG_LOG_ERROR, "kill of exec %u: %s", ex->num, err.msg);
}


/* An MCP tool call that changes nothing needs no checkpoint after it. */
static bool tool_is_read_only(const char *tool)
{
    return tool && strcmp(tool, "read_file") == 0;
}

/* Output of the exec (a pipe's, or its terminal's): the output limit,
 * the capture, the caller. */
size_t exec_output_take(exec_ctx *ex, uint8_t type, const char *buf, size_t n)
{
    uint64_t limit = ex->s->meta.output_limit;
    size_t give = n;
    if (limit && ex->out_bytes + give > limit) {
        give = ex->out_bytes >= limit ? 0 : (size_t)(limit - ex->out_bytes);
        if (!ex->output_limit_hit) {
            ex->output_limit_hit = true;
            exec_mark_killed(ex, "output_limit", "its output reached the output limit of %llu bytes",
                             (unsigned long long)limit);
            exec_kill(ex);
        }
    }
    ex->out_bytes += give;
    if (give && ex->cx)
        sg_capture_exec_output(ex->cx, type == SG_CTL_STDERR, buf, give);
    return give;
}

void exec_output(exec_ctx *ex, uint8_t type, const char *buf, size_t n)
{
    size_t give = exec_output_take(ex, type, buf, n);
    if (give && ex->cl)
        client_send(ex->cl, type, buf, give);
}

/* Reads what is available on one output pipe. Returns false at EOF/error. */
static bool exec_read(exec_ctx *ex, int fd, uint8_t type)
{
    char buf[SUP_READ_CHUNK];
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        exec_output(ex, type, buf, (size_t)n);
        if ((size_t)n < sizeof buf)
            return true;
    }
    return true;
}

void on_close_pending(uv_handle_t *h)
{
    exec_ctx *ex = h->data;
    if (--ex->pending_closes == 0)
        free(ex);
}

static void exec_close_stream(exec_ctx *ex, bool out)
{
    uv_poll_t *p = out ? &ex->out_poll : &ex->err_poll;
    bool *active = out ? &ex->out_active : &ex->err_active;
    int *fd = out ? &ex->out_fd : &ex->err_fd;
    if (!*active)
        return;
    *active = false;
    uv_poll_stop(p);
    ex->pending_closes++;
    uv_close((uv_handle_t *)p, on_close_pending);
    close(*fd);
    *fd = -1;
}

void on_exec_output(uv_poll_t *p, int status, int events)
{
    exec_ctx *ex = p->data;
    bool out = p == &ex->out_poll;
    if (!exec_read(ex, out ? ex->out_fd : ex->err_fd, out ? SG_CTL_STDOUT : SG_CTL_STDERR))
        exec_close_stream(ex, out);
    if (ex->cl && ex->cl->qbytes > SUP_CLIENT_QUEUE_MAX) {
        /* Backpressure: the caller is slow; let the exec block on its pipe. */
        if (ex->out_active)
            uv_poll_stop(&ex->out_poll);
        if (ex->err_active)
            uv_poll_stop(&ex->err_poll);
    }
}

static void exec_slot_remove(sup *s, exec_ctx *ex)
{
    for (size_t i = 0; i < s->nexecs; i++) {
        if (s->execs[i] == ex) {
            s->execs[i] = s->execs[--s->nexecs];
            return;
        }
    }
}

exec_ctx *exec_find(sup *s, uint32_t id)
{
    for (size_t i = 0; i < s->nexecs; i++)
        if (s->execs[i]->id == id)
            return s->execs[i];
    return NULL;
}

static void on_exec_timeout(uv_timer_t *t)
{
    exec_ctx *ex = t->data;
    if (ex->finished)
        return;
    ex->timed_out = true;
    exec_mark_killed(ex, "timeout", "it ran into its time limit of %g s", ex->timeout_s);
    exec_kill(ex);
}

void execs_deadlines(sup *s)
{
    uint64_t now = sg_now_mono_ns();
    for (size_t i = 0; i < s->nexecs; i++) {
        exec_ctx *ex = s->execs[i];
        if (ex->timeout_s > 0 && ex->start_ns && !ex->finished && !ex->timed_out &&
            now >= ex->start_ns + (uint64_t)(ex->timeout_s * 1e9))
            on_exec_timeout(&ex->timer);
    }
}

/* The command's exit status as a shell gives it: 128+N for signal N. */
static int exec_exit_code(const exec_ctx *ex)
{
    return WIFEXITED(ex->status) ? WEXITSTATUS(ex->status) : 128 + WTERMSIG(ex->status);
}

static void exec_send_code(exec_ctx *ex)
{
    int32_t code = exec_exit_code(ex);
    client_send(ex->cl, SG_CTL_EXIT, &code, sizeof code);
}

static json_t *exec_result_json(exec_ctx *ex, const sg_cg_stats *after)
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
static void exec_stats_after(exec_ctx *ex, sg_cg_stats *after)
{
    sup *s = ex->s;
    sg_err err = {0};
    memset(after, 0, sizeof *after);
    if (s->fast_leaves)
        /* cpu comes from the leaf; memory from the exec's rusage (the
         * sandbox's figure is its all-time peak) */
        sg_cgroup_counters(s->cg, &after->oom_kills, &after->pids_max_hits, &err);
    else if (s->cg)
        sg_cgroup_stats(s->cg, NULL, after, &err);
    if (after->oom_kills > s->oom_seen)
        s->oom_seen = after->oom_kills;
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
 * (exec_mark_killed), or the OOM killer (the sandbox's OOM counter moved
 * since the exec began, or since it was last read when the exec read no
 * counters). Read only on that path, never for a command that exited. */
static bool exec_find_kill_reason(exec_ctx *ex)
{
    sup *s = ex->s;
    if (!WIFSIGNALED(ex->status) || WTERMSIG(ex->status) != SIGKILL)
        return false;
    if (!ex->kill_cause[0] && s->cg) {
        uint64_t oom = 0, pids = 0;
        sg_err err = {0};
        if (sg_cgroup_counters(s->cg, &oom, &pids, &err) == 0) {
            uint64_t base = (!ex->code_only || ex->cx) ? ex->before.oom_kills : s->oom_seen;
            if (oom > base)
                exec_mark_killed(ex, "memory", "the sandbox reached its memory limit of %llu MiB "
                                 "(the kernel's OOM killer)", (unsigned long long)(s->meta.memory >> 20));
            s->oom_seen = oom;
        }
    }
    return ex->kill_cause[0] != '\0';
}

void exec_finish(exec_ctx *ex)
{
    sup *s = ex->s;
    if (ex->finished)
        return;
    ex->finished = true;
    ks_disarm(s->ks, ex->leaf); /* before its leaf can be reused */
    handoff_release(ex);
    /* Everything the command wrote before it exited is in the pipes now. */
    if (ex->out_active && !exec_read(ex, ex->out_fd, SG_CTL_STDOUT))
        exec_close_stream(ex, true);
    if (ex->err_active && !exec_read(ex, ex->err_fd, SG_CTL_STDERR))
        exec_close_stream(ex, false);
    sv_tty_end(ex);
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
        client_send(ex->cl, SG_CTL_STDERR, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    if (code_first)
        exec_send_code(ex);
    if (ex->spawned && !code_first) {
        sg_cg_stats after;
        exec_stats_after(ex, &after);
        json_t *res = exec_result_json(ex, &after);
        if (killed)
            json_object_set_new(res, "killed_by", json_pack("{s:s, s:s}", "cause", ex->kill_cause,
                                                            "detail", ex->kill_detail));
        if (s->aborted)
            json_object_set_new(res, "aborted", json_string(s->abort_reason));
        if (ex->cx)
            sg_capture_exec_end(ex->cx, res);
        ex->cx = NULL;
        if (ex->cl && !ex->code_only) {
            client_send_json(ex->cl, SG_CTL_RESULT, res);
        } else {
            json_decref(res);
            if (ex->cl)
                exec_send_code(ex);
        }
    }
    /* A leaf with background processes stays until they end or destroy.
     * A fast leaf that emptied is kept for a later exec; leaves on v1
     * hierarchies are checked first. */
    if (!s->cg || (s->fast_leaves ? leaf_recycle(s, ex)
                   : sg_cgroup_populated(s->cg, ex->leaf, &err) == 0 &&
                     sg_cgroup_leaf_remove(s->cg, ex->leaf, &err) == 0))
        leaf_untrack(s, ex->leaf);
    sg_close_reset(&ex->cpu_fd);
    sg_close_reset(&ex->events_fd);
    sg_close_reset(&ex->leaf_fd);
    if (ex->cl) {
        ex->cl->ex = NULL;
        ex->cl->close_after_flush = true;
        client_flush(ex->cl);
    }
    exec_slot_remove(s, ex);
    /* Drops the reference the exec held since exec_start. */
    uv_close((uv_handle_t *)&ex->timer, on_close_pending);
    ready_next(s);
}

void exec_fail(exec_ctx *ex, const char *msg)
{
    if (ex->cx) {
        sg_autojson json_t *res = json_pack("{s:n, s:f, s:b, s:s}", "exit_code", "wall_s", 0.0,
                                            "timed_out", 0, "error", msg);
        sg_capture_exec_end(ex->cx, res);
        ex->cx = NULL;
    }
    if (ex->cl)
        client_error(ex->cl, msg);
    ex->cl = NULL;
    ex->spawned = false;
    exec_finish(ex);
}

static char **build_env(const sg_exec_req *req, const char *cwd)
{
    static const char *defaults[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ("HOME=" SG_ROOTFS_HOME), /* parenthesized: one string, not a missing comma */
        "USER=sandbox", "LOGNAME=sandbox", "SHELL=/bin/sh",
        "LANG=C.UTF-8",
    };
    size_t nextra = 0;
    while (req->env && req->env[nextra])
        nextra++;
    size_t cap = SG_ARRAY_LEN(defaults) + nextra + 2;
    char **env = calloc(cap, sizeof *env);
    if (!env)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < SG_ARRAY_LEN(defaults); i++) {
        const char *d = defaults[i];
        size_t kl = (size_t)(strchr(d, '=') - d) + 1;
        bool overridden = false;
        for (size_t k = 0; k < nextra; k++)
            if (strncmp(req->env[k], d, kl) == 0)
                overridden = true;
        if (!overridden)
            env[n++] = strdup(d);
    }
    env[n++] = sg_strdup_printf("PWD=%s", cwd);
    for (size_t k = 0; k < nextra; k++)
        env[n++] = strdup(req->env[k]);
    env[n] = NULL;
    return env;
}

/* Whether the sandbox takes an exec now. A cap the exec would pass aborts
 * the session first (the first reason wins). Answers the caller and
 * returns false when it does not. */
static bool exec_admit(sup *s, client *c, const sg_exec_req *req)
{
    char why[128];
    if (!s->aborted && sg_caps_exec_reached(&s->meta, s->execs_total, s->calls_total,
                                            req->tool_name != NULL, why, sizeof why))
        json_decref(sup_abort(s, "cap", why));
    if (s->aborted) {
        char m[400];
        snprintf(m, sizeof m, "session aborted: %s", s->abort_reason);
        client_error(c, m);
        return false;
    }
    if (s->destroying || s->init_dead || s->init_fd < 0) {
        client_error(c, s->init_dead ? "the sandbox's init is gone; destroy it"
                                     : "the sandbox is being destroyed");
        return false;
    }
    if (sg_grow(&s->execs, &s->capexecs, s->nexecs + 1, sizeof *s->execs) < 0) {
        client_error(c, "out of memory");
        return false;
    }
    return true;
}

/* A new exec, registered with its caller. direct: it goes to the ready
 * child, under the exec id reserved for that child. */
static exec_ctx *exec_new(sup *s, client *c, const sg_exec_req *req, bool direct)
{
    exec_ctx *ex = sg_xcalloc(1, sizeof *ex);
    ex->s = s;
    ex->cl = c;
    ex->id = direct ? s->ready_exec_id : exec_id_new(s);
    ex->num = exec_num_new(s);
    ex->out_fd = ex->err_fd = ex->cpu_fd = ex->ready_sock = ex->leaf_fd = -1;
    ex->events_fd = -1;
    ex->hold_fds[0] = ex->hold_fds[1] = ex->hold_fds[2] = -1;
    ex->pending_closes = 1; /* released when exec_finish closes the timer */
    /* A terminal session (shell, exec -t, the browser's) is a learner's
     * sitting, not one command: the sandbox's per-exec limit is not its
     * end (exit, abort, destroy and the caps are); an explicit one is. */
    ex->timeout_s = req->timeout_s > 0 ? req->timeout_s : req->tty ? 0 : s->meta.timeout_s;
    ex->code_only = req->code_only;
    ex->detachable = req->detachable;
    uv_timer_init(&s->loop, &ex->timer);
    ex->timer.data = ex;
    s->execs[s->nexecs++] = ex;
    c->ex = ex;
    return ex;
}

/* The checkpoint before an exec, unless the call only reads or the
 * sandbox takes its checkpoints by hand. An unchanged workspace reuses the
 * newest checkpoint: the exec path then writes no object and no ref. */
static void exec_checkpoint(sup *s, const exec_ctx *ex, const sg_exec_req *req)
{
    if (tool_is_read_only(req->tool_name) || s->meta.manual_checkpoints)
        return;
    char label[160];
    sg_autofree char *line = sg_exec_cmdline(req->argv);
    snprintf(label, sizeof label, "before exec %u: %.120s", ex->num, line ? line : "");
    ckpt_exec(s, label);
}

/* The exec's leaf: the ready child's, where it sits already (direct), else
 * a new one. Returns how many cgroup fds init needs to clone the exec into
 * it (cgfds; 0 when direct or without cgroups), or -1 with err. */
static int exec_leaf(sup *s, exec_ctx *ex, bool direct, int cgfds[SG_CG_MAX_FDS], sg_err *err)
{
    if (direct) {
        memcpy(ex->leaf, s->rl.name, sizeof ex->leaf);
        ex->leaf_fd = sg_steal_fd(&s->rl.dirfd);
        ex->cpu_fd = sg_steal_fd(&s->rl.cpufd);
        ex->events_fd = sg_steal_fd(&s->rl.evfd);
        ex->cpu_base_ns = s->rl.cpu_base;
        ex->ready_sock = sg_steal_fd(&s->ready_sock);
        ex->ready_pid = s->ready_pid;
        s->ready = false;
        s->ready_taken = true;
        leaf_track(s, ex->leaf);
        return 0;
    }
    snprintf(ex->leaf, sizeof ex->leaf, "x%u", ++s->next_leaf);
    leaf_track(s, ex->leaf);
    if (!s->cg)
        return 0; /* rootless without cgroups */
    if (sg_cgroup_leaf_create(s->cg, ex->leaf, err) < 0)
        return -1;
    if (!s->fast_leaves)
        return sg_cgroup_procs_fds(s->cg, ex->leaf, cgfds, err);
    /* one v2 leaf directory: init clones straight into it */
    cgfds[0] = sg_cgroup_leaf_dirfd(s->cg, ex->leaf, err);
    return cgfds[0] < 0 ? -1 : 1;
}

/* Sends the encoded exec (s->spawn_msg, len bytes) with its fds (stdio,
 * then the cgroup's): to the ready child (direct), which keeps message and
 * fds until it answers "k" (exec_handoff_done) or never does
 * (exec_handoff_failed); else to init. Returns 0 or -errno; *lost when
 * the ready child's socket refused it (the exec then goes through init). */
static int exec_send(sup *s, exec_ctx *ex, bool direct, size_t len, const int *fds, int nfds, bool *lost)
{
    if (!direct)
        return sg_seqpacket_send(s->init_fd, s->spawn_msg, len, fds, (size_t)nfds);
    ex->held_msg = malloc(len);
    if (!ex->held_msg)
        return -ENOMEM;
    memcpy(ex->held_msg, s->spawn_msg, len);
    ex->held_len = len;
    memcpy(ex->hold_fds, fds, sizeof ex->hold_fds);
    ex->awaiting_ack = true;
    if (s->ready_pidfd >= 0) {
        syscall(SYS_pidfd_send_signal, s->ready_pidfd, SIGCONT, NULL, 0);
        sg_close_reset(&s->ready_pidfd);
    }
    *lost = sg_seqpacket_send_typed(ex->ready_sock, SG_SPAWN_READY_TYPE, s->spawn_msg, len, fds, 3) < 0;
    return 0;
}

/* The exec's output pipes (read ends), polled once the exec is sent. */
static void exec_pipes(sup *s, exec_ctx *ex, int out_r, int err_r)
{
    ex->out_fd = out_r;
    ex->err_fd = err_r;
    fcntl(ex->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(ex->err_fd, F_SETFL, O_NONBLOCK);
    uv_poll_init(&s->loop, &ex->out_poll, ex->out_fd);
    uv_poll_init(&s->loop, &ex->err_poll, ex->err_fd);
    ex->out_poll.data = ex->err_poll.data = ex;
    ex->out_active = ex->err_active = true;
}

/* The exec is on its way: its clock, its counters before, its output,
 * its time limit, and the wait for the ready child's "k". */
static void exec_running(sup *s, exec_ctx *ex, bool handoff_lost)
{
    sg_err err = {0};
    ex->start_ns = sg_now_mono_ns();
    /* Counters before the exec, read while the child starts; a caller
     * that wants the exit code alone, uncaptured, gets none of them. */
    bool want_stats = !ex->code_only || ex->cx;
    if (want_stats && s->fast_leaves)
        sg_cgroup_counters(s->cg, &ex->before.oom_kills, &ex->before.pids_max_hits, &err);
    else if (want_stats && s->cg)
        sg_cgroup_stats(s->cg, NULL, &ex->before, &err);
    uv_poll_start(&ex->out_poll, UV_READABLE, on_exec_output);
    uv_poll_start(&ex->err_poll, UV_READABLE, on_exec_output);
    if (ex->timeout_s > 0) {
        uv_timer_start(&ex->timer, on_exec_timeout, (uint64_t)(ex->timeout_s * 1000.0), 0);
        /* the kill itself beside the loop; this timer records why */
        ks_arm(s->ks, ex->leaf, sg_now_mono_ns() + (uint64_t)(ex->timeout_s * 1e9));
    }
    if (!ex->awaiting_ack)
        return;
    if (handoff_lost) {
        exec_handoff_failed(ex);
        return;
    }
    /* The "k" is not polled for: it is read when init reports the exit,
     * or when this timer fires (a child stopped before it took the exec),
     * so an exec wakes the supervisor once less. */
    uv_timer_init(&s->loop, &ex->ack_timer);
    ex->ack_timer.data = ex;
    ex->pending_closes++;
    uv_timer_start(&ex->ack_timer, on_handoff_timeout, SG_SPAWN_READY_ACK_MS, 0);
}

static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

void exec_start(sup *s, client *c, sg_exec_req *in, int stdin_fd)
{
    sg_err err = {0};
    sg_exec_req req = *in;
    memset(in, 0, sizeof *in);
    if (!exec_admit(s, c, &req)) {
        close(stdin_fd);
        sg_exec_req_free(&req);
        return;
    }
    s->execs_total++;
    if (req.tool_name)
        s->calls_total++;
    leaves_sweep(s);
    /* A ready child whose socket init has sent takes the exec directly;
     * else init clones a child. */
    bool direct = s->ready && s->cg && s->ready_sock >= 0;
    exec_ctx *ex = exec_new(s, c, &req, direct);
    const char *cwd = req.cwd ? req.cwd : "/workspace";
    exec_checkpoint(s, ex, &req);
    ex->cx = s->cap ? sg_capture_exec_begin(s->cap, ex->num, req.argv, cwd, req.tool) : NULL;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int cgfds[SG_CG_MAX_FDS];
    sg_autostrv char **env = build_env(&req, cwd);
    int ncg = exec_leaf(s, ex, direct, cgfds, &err);
    if (ncg >= 0)
        killswitch_exec(s, ex->leaf, ex->num);
    if (ncg < 0)
        sg_err_prefix(&err, "cannot create the exec's cgroup");
    else if (req.tty && sv_tty_start(s, ex, &req, &stdin_fd, &err) < 0)
        sg_err_prefix(&err, "cannot make the exec's terminal");
    else if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || !env)
        sg_err_sys(&err, "cannot create output pipes");
    if (ncg < 0 || errp[1] < 0 || !env) {
        close_fds(outp, 2);
        close_fds(errp, 2);
        close_fds(cgfds, ncg);
        close(stdin_fd);
        sg_exec_req_free(&req);
        exec_fail(ex, err.msg);
        return;
    }
    /* Message: header, argv..., env..., cwd (NUL-separated). */
    sg_spawn_hdr sp = {.type = SG_SPAWN_EXEC, .exec_id = ex->id,
                       .uid = s->meta.uid, .gid = s->meta.gid,
                       .nfds_cg = (uint32_t)ncg, .cg_into = s->fast_leaves,
                       .rlimit_as = s->cg ? 0 : s->meta.memory};
    ssize_t len = sg_spawn_encode(s->spawn_msg, SG_SPAWN_MSG_MAX, &sp, req.argv, env, cwd);
    sg_exec_req_free(&req);
    int fds[3 + SG_CG_MAX_FDS] = {stdin_fd, outp[1], errp[1]};
    for (int i = 0; i < ncg; i++)
        fds[3 + i] = cgfds[i];
    bool lost = false;
    int r = len < 0 ? (int)len : exec_send(s, ex, direct, (size_t)len, fds, 3 + ncg, &lost);
    if (!ex->awaiting_ack)
        close_fds(fds, 3 + ncg);
    exec_pipes(s, ex, outp[0], errp[0]);
    if (r < 0) {
        exec_fail(ex, r == -E2BIG ? "command line and environment are too long (at most 64 KiB)"
                      : r == -ENOMEM ? "out of memory" : "cannot reach the sandbox's init");
        return;
    }
    exec_running(s, ex, lost);
    /* The next exec's ready child is made while this one runs: the caller
     * is waiting then, and a command runs on one CPU, so this work rarely
     * delays anyone (after the result it would meet the next exec). */
    ready_next(s);
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

/* "exec": the caller's stdin crosses into the sandbox only as a pipe or
 * /dev/null (docs/SECURITY.md); none given is /dev/null. */
void op_exec(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    if (fd_in >= 0 && !sg_ctl_stdin_ok(fd_in)) {
        close(fd_in);
        client_error(c, "an exec's stdin must be a pipe or /dev/null (sandglass exec relays "
                        "anything else): refused");
        return;
    }
    if (fd_in < 0)
        fd_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    exec_start(s, c, &req->u.exec, fd_in);
}

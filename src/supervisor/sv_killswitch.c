/* sv_killswitch: the kill switch and the caps. */
#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_handoff.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_metrics.h"
#include "capture/watch.h"
#include "base/log.h"

/* Host pids of the processes in the sandbox's pid namespace (init
 * included), found through /proc: the kill path when there is no cgroup. */
static size_t pidns_members(sv_sup *s, pid_t *out, size_t max)
{
    char want[64], path[64], got[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)s->init_pid);
    ssize_t wl = readlink(path, want, sizeof want - 1);
    if (wl <= 0)
        return 0;
    want[wl] = '\0';
    sg_autoclosedir DIR *d = opendir("/proc");
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
        ssize_t l = readlink(path, got, sizeof got - 1);
        if (l <= 0)
            continue;
        got[l] = '\0';
        if (strcmp(got, want) == 0 && sg_state_pid_alive((pid_t)pid))
            out[n++] = (pid_t)pid;
    }
    return n;
}

/* SIGKILLs every process of the pid namespace (but init unless with_init)
 * until none is left; returns how many remain. */
size_t sv_killswitch_pidns_kill(sv_sup *s, bool with_init, int timeout_ms)
{
    if (!s->ks.pidns_pids)
        s->ks.pidns_pids = sg_xcalloc(SV_PIDNS_MAX, sizeof *s->ks.pidns_pids);
    pid_t *pids = s->ks.pidns_pids;
    uint64_t deadline = sg_now_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        size_t n = pidns_members(s, pids, SV_PIDNS_MAX), left = 0;
        for (size_t i = 0; i < n; i++) {
            if (pids[i] == s->init_pid && !with_init)
                continue;
            kill(pids[i], SIGKILL);
            left++;
        }
        if (!left || sg_now_mono_ns() > deadline)
            return left;
        usleep(1000);
    }
}

json_t *sv_killswitch_caps_now(sv_sup *s)
{
    sg_err err = {0};
    sg_cg_stats st = {0};
    if (s->cg)
        sg_cgroup_stats(s->cg, NULL, &st, &err);
    sg_caps_usage u = {.wall_s = (double)(sg_now_mono_ns() - s->ks.start_ns) / 1e9,
                       .cpu_s = (double)st.cpu_ns / 1e9,
                       .execs = s->exec.total, .calls = s->exec.calls};
    return sg_caps_json(&s->meta, &u);
}

/* Kills every process of the sandbox but its init, and proves it: the
 * sandbox's cgroup then holds exactly the init. out: what it killed and
 * the proof (the caller frees it: sg_ctl_kill_report_free). */
void sv_killswitch_kill_all(sv_sup *s, const char *cause, const char *detail, sg_ctl_kill_report *out)
{
    sg_err err = {0};
    memset(out, 0, sizeof *out);
    out->execs_killed = s->exec.n ? calloc(s->exec.n, sizeof *out->execs_killed) : NULL;
    for (size_t i = 0; i < s->exec.n; i++) {
        if (!s->exec.list[i]->finished) {
            if (out->execs_killed)
                out->execs_killed[out->n_execs_killed++] = s->exec.list[i]->num;
            sv_exec_mark_killed(s->exec.list[i], cause, "%s", detail);
        }
    }
    pid_t *before = NULL;
    size_t nbefore = 0;
    uint64_t t0 = sg_now_mono_ns();
    bool ok = true;
    pid_t *after = NULL;
    size_t nafter = 0;
    size_t nready = 0; /* the ready child: not a user process, not counted */
    /* The checkpoint worker is work for the sandbox, in its cgroup: killed
     * too, never waited for (a new one comes for the next call). */
    sv_ckpt_kill(s);
    if (s->cg) {
        pid_t *ready = NULL;
        if (s->leaves.ready && sg_cgroup_pids(s->cg, s->leaves.rl.name, &ready, &nready, &err) < 0)
            nready = 0;
        free(ready);
        sg_cgroup_pids(s->cg, NULL, &before, &nbefore, &err);
        t0 = sg_now_mono_ns();
        for (size_t i = 0; i < s->leaves.set.n; i++)
            if (sv_leaves_kill(s, s->leaves.set.names[i], 5000, &err) < 0)
                ok = false;
        /* The idle ready child last: killed first, its exit would wait for
         * a CPU that a fork bomb holds, and the bomb's kill behind it. */
        sv_leaves_ready_retire(s);
    } else {
        before = calloc(SV_PIDNS_MAX, sizeof *before);
        nbefore = before ? pidns_members(s, before, SV_PIDNS_MAX) : 0;
        t0 = sg_now_mono_ns();
        ok = sv_killswitch_pidns_kill(s, false, 5000) == 0;
    }
    double kill_ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    if (s->cg) {
        sg_cgroup_pids(s->cg, NULL, &after, &nafter, &err);
    } else {
        after = calloc(SV_PIDNS_MAX, sizeof *after);
        nafter = after ? pidns_members(s, after, SV_PIDNS_MAX) : 0;
    }
    sg_ctl_kill_proof *p = &out->proof;
    p->left_pids = nafter ? calloc(nafter, sizeof *p->left_pids) : NULL;
    for (size_t i = 0; i < nafter; i++)
        if (after[i] != s->init_pid) {
            p->processes_left++;
            if (p->left_pids)
                p->left_pids[p->n_left_pids++] = after[i];
        }
    p->cgroup_holds_only_init = ok && p->processes_left == 0;
    p->init_pid = s->init_pid;
    p->kill_ms = kill_ms;
    p->checked_by = strdup(s->cg ? "cgroup" : "pid namespace");
    out->processes_killed = (long long)(nbefore > 1 + nready ? nbefore - 1 - nready : 0);
    free(before);
    free(after);
}

/* How long an abort waits for init's reports of the execs it killed: they
 * are dead (the proof held), only their reports are on the way. */
#define SG_ABORT_SETTLE_MS 5000

/* The kill switch. Returns the abort record (new reference). */
json_t *sv_killswitch_abort(sv_sup *s, const char *by, const char *reason)
{
    if (s->ks.aborted)
        return sg_ctl_encode_abort_reply(&(sg_ctl_abort_reply){
            .aborted = true, .already = true, .by = s->ks.by, .reason = s->ks.reason});
    s->ks.aborted = true;
    __atomic_store_n(&s->ks.stopping, 1, __ATOMIC_RELEASE); /* a cp running stops */
    snprintf(s->ks.by, sizeof s->ks.by, "%s", by);
    snprintf(s->ks.reason, sizeof s->ks.reason, "%s", reason);
    sv_killswitch_publish(s);
    if (strcmp(by, "cap") == 0 && !s->life.expired) /* an expiry is counted as one (sv_lifecycle.c) */
        sv_metrics_limit(s, SG_CTR_LIMIT_CAP);
    if (!s->life.expired)
        sv_metrics_set_state(s, SG_CTR_STATE_ABORTED);
    sg_err err = {0};
    if (sg_state_abort_save(s->meta.id, by, reason, &err) < 0)
        sg_log(SG_LOG_ERROR, "%s", err.msg);
    sg_autojson json_t *caps = sv_killswitch_caps_now(s);
    char detail[300];
    snprintf(detail, sizeof detail, "the session was aborted (%s)", reason);
    /* The killed execs' ends flush the watcher: one turn's worth each, the
     * rest of a learner's pile of changes comes after the answer. */
    sg_watch_hurry(sg_capture_watch(s->cap), true);
    sg_ctl_abort_reply r = {.aborted = true, .by = (char *)by, .reason = (char *)reason, .caps = caps,
                            .killed = true};
    sv_killswitch_kill_all(s, "abort", detail, &r.kill);
    /* The proof held: the killed execs' results are read before the
     * answer, so nothing counts as running after it (SG_ABORT_SETTLE_MS). */
    if (r.kill.proof.cgroup_holds_only_init)
        sv_handoff_settle_killed(s, SG_ABORT_SETTLE_MS);
    sg_watch_hurry(sg_capture_watch(s->cap), false);
    sg_autojson json_t *actor = sv_actor_current(strcmp(by, "cap") == 0 ? reason : NULL, reason);
    r.actor = actor;
    r.checkpoint = s->ckpt.last[0] ? s->ckpt.last : NULL;
    json_t *rec = sg_ctl_encode_abort_reply(&r);
    sg_ctl_kill_report_free(&r.kill);
    if (rec)
        sv_sup_emit(s, SG_EV_SESSION_ABORT, json_deep_copy(rec));
    return rec;
}

/* The keep of an ended session is over: the sandbox goes, saying why. */
void sv_killswitch_on_expire(uv_timer_t *t)
{
    sv_sup *s = t->data;
    if (s->destroying)
        return;
    sg_log(SG_LOG_INFO, "the sandbox's keep after its session ended is over: destroying it");
    sv_sup_emit(s, SG_EV_SANDBOX, json_pack("{s:s, s:s}", "state", "expired", "reason",
                                         "its agent session ended and the keep (mcp --keep) passed"));
    sv_sup_destroy(s, NULL);
}

void sv_killswitch_publish(sv_sup *s)
{
    ks_state st = {.max_wall_s = s->meta.max_wall_s, .max_cpu_s = s->meta.max_cpu_s,
                   .max_execs = s->meta.max_execs, .max_calls = s->meta.max_calls,
                   .execs = s->exec.total, .calls = s->exec.calls, .start_ns = s->ks.start_ns,
                   .init_pid = s->init_pid, .aborted = s->ks.aborted};
    snprintf(st.by, sizeof st.by, "%s", s->ks.by);
    snprintf(st.reason, sizeof st.reason, "%s", s->ks.reason);
    ks_publish(s->ks.thread, &st);
}

void sv_killswitch_exec(sv_sup *s, const char *leaf, unsigned num)
{
    ks_exec_begin(s->ks.thread, leaf, num);
    sv_killswitch_publish(s); /* the counts against the caps */
}

/* An operator's abort the kill switch's thread answered: recorded here,
 * once, in order (before init's reports of the deaths it caused). */
static void on_ks_abort(void *ud, const char *reason, const struct ucred *who, const char *via)
{
    sv_sup *s = ud;
    ks_kill_barrier(s->ks.thread); /* the thread's kill done: not raced by the loop's */
    sv_actor_begin_cred(who, via); /* the requester, as the loop's own abort records them */
    json_decref(sv_killswitch_abort(s, "operator", reason));
    sv_actor_end();
}

void sv_killswitch_caps_arm(sv_sup *s)
{
    sv_killswitch_publish(s); /* the caps (a claim sets them) */
    if (!sg_caps_timed(&s->meta))
        return;
    uv_timer_start(&s->ks.cap_timer, sv_killswitch_on_cap_timer, 100, 100);
    if (s->meta.max_wall_s > 0) /* the kill at once; the timer records why */
        ks_arm(s->ks.thread, NULL, s->ks.start_ns + (uint64_t)(s->meta.max_wall_s * 1e9));
}

/* The supervisor's heap, bounded before its second thread starts (its
 * RSS counts against its cgroup, and the "under 4 MiB at rest"):
 * one arena (the kill switch's thread allocates a few small objects per
 * abort; its own arena would be one more heap to fragment), and glibc's
 * sliding mmap threshold pinned: once a big buffer was freed (a 1 MiB
 * spool record, a rescan's arrays) the threshold rose to its size and the
 * heap kept up to twice that free and untrimmed, where the watcher's
 * 60 KiB texts then came and went (RSS 62 MB after the diffcache attack). */
static void heap_bounds(void)
{
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024);
}

void sv_killswitch_start(sv_sup *s)
{
    heap_bounds();
    sg_err err = {0};
    sg_autofree char *cg = s->cg ? sg_cgroup_path(s->cg, NULL) : NULL;
    sg_autofree char *quota = s->cg ? sg_cgroup_cpu_quota_path(s->cg) : NULL;
    s->ks.thread = ks_start(&s->loop, s->ctl_fd, cg, quota, s->meta.id, sv_client_adopt, on_ks_abort, s, &err);
    ks_set_stop_flag(s->ks.thread, &s->ks.stopping);
    if (!s->ks.thread)
        sg_log(SG_LOG_WARN, "%s: the loop alone accepts and kills", err.msg);
    sv_killswitch_publish(s);
    uv_poll_start(&s->ctl_poll, UV_READABLE, sv_client_on_accept);
}

bool sv_killswitch_check_wall(sv_sup *s)
{
    char why[128];
    double wall = (double)(sg_now_mono_ns() - s->ks.start_ns) / 1e9;
    if (s->ks.aborted || s->destroying || !sg_caps_wall_reached(&s->meta, wall, why, sizeof why))
        return false;
    json_decref(sv_killswitch_abort(s, "cap", why));
    return true;
}

void sv_killswitch_on_cap_timer(uv_timer_t *t)
{
    sv_sup *s = t->data;
    if (s->ks.aborted || s->destroying || sv_killswitch_check_wall(s))
        return;
    char why[128];
    /* The cgroup's CPU time is read only for a CPU cap. */
    sg_err err = {0};
    sg_cg_stats st = {0};
    if (s->meta.max_cpu_s > 0 && s->cg && sg_cgroup_stats(s->cg, NULL, &st, &err) == 0 &&
        sg_caps_cpu_reached(&s->meta, (double)st.cpu_ns / 1e9, why, sizeof why))
        json_decref(sv_killswitch_abort(s, "cap", why));
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

void sv_killswitch_op_abort(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    const char *reason = req->u.abort.reason;
    char r[256];
    snprintf(r, sizeof r, "operator: %s", reason && *reason ? reason : "abort requested");
    sv_actor_begin(c);
    json_t *rec = sv_killswitch_abort(s, "operator", r);
    sv_actor_end();
    sv_client_result(c, rec);
}

/* Clears an operator's or a signal's abort, never a cap's. */
void sv_killswitch_op_resume(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    if (!s->ks.aborted) {
        sv_client_error(c, "the session is not aborted");
        return;
    }
    if (!sg_caps_resumable(s->ks.by)) {
        char m[400];
        snprintf(m, sizeof m, "an abort by a cap stays: %s", s->ks.reason);
        sv_client_error(c, m);
        return;
    }
    json_t *r = json_pack("{s:b, s:s}", "resumed", 1, "was", s->ks.reason);
    s->ks.aborted = false;
    __atomic_store_n(&s->ks.stopping, 0, __ATOMIC_RELEASE);
    s->ks.reason[0] = s->ks.by[0] = '\0';
    sv_killswitch_publish(s);
    sv_metrics_set_state(s, SG_CTR_STATE_RUNNING);
    sg_state_abort_clear(s->meta.id);
    if (s->expire_init)
        uv_timer_stop(&s->expire_timer); /* in use again: no expiry */
    sv_sup_emit(s, SG_EV_ACTIVITY, json_pack("{s:s, s:o, s:o}", "state", "resumed", "actor",
                                          sv_actor(c, NULL, NULL), "checkpoint", sv_last_checkpoint(s)));
    sv_leaves_ready_next(s);
    sv_client_result(c, r);
}

/* The caps' clock starts and their timer is made, on the loop (before it
 * runs). */
void sv_killswitch_init(sv_sup *s)
{
    s->ks.start_ns = sg_now_mono_ns();
    uv_timer_init(&s->loop, &s->ks.cap_timer);
    s->ks.cap_timer.data = s;
}

/* A pooled sandbox claimed: the caps count from now. */
void sv_killswitch_caps_restart(sv_sup *s)
{
    s->ks.start_ns = sg_now_mono_ns();
    sv_killswitch_caps_arm(s);
}

/* An adopted sandbox: the abort its record holds (the first reason stays). */
void sv_killswitch_abort_load(sv_sup *s)
{
    s->ks.aborted = sg_state_abort_load(s->meta.id, s->ks.by, sizeof s->ks.by, s->ks.reason,
                                        sizeof s->ks.reason) == 1;
}

/* The thread stopped (it takes no more connections). */
void sv_killswitch_stop(sv_sup *s)
{
    ks_stop(s->ks.thread);
    s->ks.thread = NULL;
}

void sv_killswitch_caps_stop(sv_sup *s)
{
    uv_timer_stop(&s->ks.cap_timer);
}

void sv_killswitch_free(sv_sup *s)
{
    free(s->ks.pidns_pids);
    s->ks.pidns_pids = NULL;
}

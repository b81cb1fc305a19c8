/* supervisor: the sandbox's life: the run (sg_supervisor_run), signals,
 * destroy and shutdown. See supervisor.h; the state is sv_sup.h's, each
 * object has its own header (sv_exec.h, sv_client.h, sv_leaves.h,
 * sv_killswitch.h with killswitch.h, sv_checkpoint.h, sv_dispatch.h). */
#include "supervisor/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_execnotify.h"
#include "supervisor/sv_handoff.h"
#include "supervisor/sv_tty.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_lifecycle.h"
#include "supervisor/sv_metrics.h"
#include "supervisor/sv_start.h"
#include "supervisor/sv_sup.h"
#include "supervisor/sv_dispatch.h"
#include "capture/watch.h"
#include "base/log.h"

static void stop_loop_handles(sv_sup *s)
{
    uv_poll_stop(&s->ctl_poll);
    sv_killswitch_stop(s);
    uv_signal_stop(&s->sigterm);
    uv_signal_stop(&s->sigint);
    uv_signal_stop(&s->sigchld);
    sv_killswitch_caps_stop(s);
    if (s->gone_fd >= 0)
        uv_poll_stop(&s->gone_poll);
    if (s->expire_init)
        uv_timer_stop(&s->expire_timer);
    uv_stop(&s->loop);
}

/* The sandbox's end (s->hooks.destroy): every process killed and the
 * proof, the cgroup removed; c, the destroy's caller, answered last. */
static void sup_destroy(sv_sup *s, sv_client *c)
{
    sg_err err = {0};
    s->destroying = true;
    __atomic_store_n(&s->ks.stopping, 1, __ATOMIC_RELEASE); /* a cp running stops */
    /* the watcher's last flushes do one turn each: a destroy never waits
     * for a learner's pile of changes */
    sg_watch_hurry(sg_capture_watch(s->cap), true);
    /* The checkpoint worker is killed with the sandbox, never waited for
     * (it comes back only for a last diff of the capture). */
    sv_ckpt_kill(s);
    for (size_t i = s->exec.n; i-- > 0;) {
        sv_exec *ex = s->exec.list[i];
        if (ex->cl) {
            /* Detached first: sv_client_error may close the client at once,
             * and sv_client_close would reach back into the exec. */
            sv_client *cl = ex->cl;
            cl->ex = NULL;
            ex->cl = NULL;
            sv_client_error(cl, "the sandbox was destroyed");
        }
    }
    uint64_t t0 = sg_now_mono_ns();
    int killed, populated;
    sg_err oerr = {0};
    sg_cgroup *still = s->cg ? sg_cgroup_open(s->meta.id, &oerr) : NULL;
    sg_cgroup_free(still);
    if (s->cg && !still && oerr.code == ENOENT) {
        /* The cgroup is gone (removed by hand, or by an earlier destroy
         * that did not finish): nothing can be in it. Destroy stays
         * idempotent: init, if it lives, goes the way of the rootless
         * kill, and the rest of the teardown goes on. */
        size_t left = sv_killswitch_pidns_kill(s, true, 10000);
        killed = left ? sg_err_set(&err, ETIMEDOUT, "%zu process(es) survived SIGKILL", left) : 0;
        populated = left != 0;
        sg_cgroup_free(s->cg);
        s->cg = NULL;
    } else if (s->cg) {
        killed = sg_cgroup_kill(s->cg, NULL, 10000, &err);
        populated = sg_cgroup_populated(s->cg, NULL, &err);
    } else {
        /* Killing pid 1 of a pid namespace kills all of it; then prove it. */
        size_t left = sv_killswitch_pidns_kill(s, true, 10000);
        killed = left ? sg_err_set(&err, ETIMEDOUT, "%zu process(es) survived SIGKILL", left) : 0;
        populated = left != 0;
    }
    double kill_ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    if (s->init_pid > 0) {
        int st;
        if (waitpid(s->init_pid, &st, 0) == s->init_pid)
            s->init_pid = 0;
    }
    if (killed < 0 || populated != 0) {
        s->destroy.type = SG_CTL_ERROR;
        s->destroy.res = json_pack("{s:s}", "error", killed < 0 ? err.msg : "the sandbox's cgroup still holds processes");
        s->exit_code = 1;
    } else {
        int removed = s->cg ? sg_cgroup_remove(s->cg, &err) : 0;
        s->destroy.type = SG_CTL_RESULT;
        s->destroy.res = sg_ctl_encode_destroy_reply(&(sg_ctl_destroy_reply){
            .destroyed = s->meta.id, .cgroup_empty = true, .cgroup_removed = removed == 0, .kill_ms = kill_ms,
            .events_undelivered = -1});
        s->exit_code = removed == 0 ? 0 : 1;
        sg_capture_processes_end(s->cap);
        sv_sup_emit(s, SG_EV_SANDBOX, json_pack("{s:s, s:O, s:o, s:o}", "state", "destroyed", "proof",
            s->destroy.res, "actor", sv_actor(c, NULL, s->life.expired ? "the session expired (--idle-timeout, --ttl)" :
                                                        "the keep after the session passed"),
            "checkpoint", sv_last_checkpoint(s)));
    }
    if (c) {
        /* Answered after the capture is delivered (sg_supervisor_run). */
        s->destroy.fd = dup(c->fd);
        if (s->destroy.fd >= 0) {
            int flags = fcntl(s->destroy.fd, F_GETFL);
            fcntl(s->destroy.fd, F_SETFL, flags & ~O_NONBLOCK);
        }
        /* The dup answers; close the client now so its struct is freed
         * (the shutdown walk closes leftover handles without freeing). */
        sv_client_close(c);
    }
    stop_loop_handles(s);
}

static void on_signal(uv_signal_t *h, int signum)
{
    sv_sup *s = h->data;
    if (signum == SIGCHLD) {
        int st;
        if (s->init_pid > 0 && waitpid(s->init_pid, &st, WNOHANG) == s->init_pid) {
            s->init_pid = 0;
            s->init_dead = true;
        }
        sv_ckpt_reap(s);
        return;
    }
    /* SIGINT/SIGTERM to a session is an abort, not a teardown: the
     * operator may still roll back or destroy. */
    if (!s->destroying)
        json_decref(sv_killswitch_abort(s, "signal", signum == SIGINT ? "received SIGINT" : "received SIGTERM"));
}

static void close_walk(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* After a destroy: the state goes, or the spool of events not delivered
 * stays, under undelivered/, for `sandglass flush`. Returns the exit code. */
static int sup_keep_or_remove(sv_sup *s, int code, json_int_t undelivered)
{
    sg_err err = {0};
    sg_autofree char *dir = sg_state_sandbox_path(s->meta.id, NULL);
    if (code == 0 && undelivered) {
        /* Never lose capture: the spool stays, under undelivered/, for
         * `sandglass flush`. */
        sg_autofree char *udir = sg_state_path("undelivered");
        sg_autofree char *dst = sg_strdup_printf("%s/%s", udir, s->meta.id);
        sg_autofree char *spool = sg_state_sandbox_path(s->meta.id, "spool");
        sg_autofree char *meta = sg_state_sandbox_path(s->meta.id, "meta.json");
        sg_autofree char *dmeta = sg_strdup_printf("%s/meta.json", dst);
        sg_autofree char *dspool = sg_strdup_printf("%s/spool", dst);
        if (sg_mkdir_p(dst, 0700, &err) < 0 || rename(meta, dmeta) < 0 || rename(spool, dspool) < 0) {
            sg_log(SG_LOG_ERROR, "cannot keep the undelivered spool: %s", strerror(errno));
            code = 1;
        }
    }
    if (code == 0) {
        /* Destroy's answer does not wait for the disk's release (disk.h):
         * its reclaimer gives the uid slot back once the mount is gone. */
        bool reclaimer = sg_disk_release_workspace(&s->meta);
        sv_metrics_stop(s);
        if (sg_counters_retire(s->meta.id, &err) < 0) /* the host's counters keep what it counted */
            sg_log(SG_LOG_WARN, "%s", err.msg);
        sg_state_archive_log(s->meta.id);
        if (!reclaimer)
            sg_state_uid_release(s->meta.uid, s->meta.id);
        sg_rm_rf(dir, &err);
    }
    return code;
}

/* After the loop: deliver the capture, answer destroy, remove the state. */
static int sup_shutdown(sv_sup *s)
{
    sg_err err = {0};
    json_int_t undelivered = 0;
    /* A terminal still open (a shell the sandbox went under, a signal):
     * its last command and its recording end before the capture is
     * delivered, and it is freed with its handles below (LeakSanitizer
     * found it left behind). */
    for (size_t i = 0; i < s->exec.n; i++)
        sv_tty_end(s->exec.list[i]);
    if (s->cap) {
        if (sg_capture_finish(s->cap, SG_CAPTURE_DRAIN_MS, &err) < 0) {
            undelivered = (json_int_t)sg_capture_pending(s->cap);
            sg_log(SG_LOG_WARN, "%s", err.msg);
        }
        /* The capture closes its own handles (lws owns some of them)
         * before we close whatever else is left. */
        sg_capture_close(s->cap);
        sg_capture_free(s->cap);
        s->cap = NULL;
    }
    /* Execs still running when the sandbox went (a destroy, a signal):
     * a reference of the shutdown's own keeps each until its handles are
     * closed with the loop's, then what it holds is freed here. */
    for (size_t i = 0; i < s->exec.n; i++)
        s->exec.list[i]->pending_closes++;
    sv_killswitch_stop(s); /* when the loop ended by another way than stop_loop_handles */
    uv_walk(&s->loop, close_walk, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    for (size_t i = 0; i < s->exec.n; i++) {
        sv_exec *ex = s->exec.list[i];
        if (ex->awaiting_ack) /* its handles are closed: only the memory and fds */
            for (int k = 0; k < 3; k++)
                sg_close_reset(&ex->hold_fds[k]);
        sg_close_reset(&ex->ready_sock);
        free(ex->held_msg);
        free(ex);
    }
    s->exec.n = 0;
    sg_ctl_destroy_reply proof;
    if (s->destroy.res && s->destroy.type == SG_CTL_RESULT && sg_ctl_decode_destroy_reply(s->destroy.res, &proof, NULL) == 0) {
        proof.events_undelivered = undelivered;
        json_decref(s->destroy.res);
        s->destroy.res = sg_ctl_encode_destroy_reply(&proof);
        sg_ctl_destroy_reply_free(&proof);
    }
    int code = s->exit_code;
    if (s->orphaned) {
        /* Nothing of the state directory is left to keep things in: the
         * workspace's mount goes, and events the ingest did not get were
         * removed with the spool (README). */
        if (undelivered)
            sg_log(SG_LOG_ERROR, "%lld captured event(s) not delivered: their spool was removed with the "
                   "state directory", (long long)undelivered);
        sg_disk_remove_workspace(&s->meta);
        sg_state_uid_release(s->meta.uid, s->meta.id); /* the slot is host-wide, not in the state dir */
    } else {
        code = sup_keep_or_remove(s, code, undelivered);
    }
    if (s->destroy.fd >= 0) {
        sg_autofree char *body = s->destroy.res ? sg_json_dump(s->destroy.res) : NULL;
        if (body)
            sg_seqpacket_send_typed(s->destroy.fd, s->destroy.type, body, strlen(body), NULL, 0);
        close(s->destroy.fd);
    }
    json_decref(s->destroy.res);
    return code;
}

/* A new sandbox: the syscall filter, the cgroup (marked as this state
 * directory's), and init cloned into new namespaces. */
static int sup_create(sv_sup *s, sg_err *err)
{
    if (sg_seccomp_build_init(&s->prog, err) < 0) {
        sg_err_prefix(err, "cannot build the syscall filter");
        return -1;
    }
    sg_cg_limits lim = {.memory_bytes = s->meta.memory, .pids = s->meta.pids, .cpus = s->meta.cpus};
    s->cg = sg_cgroup_create(s->meta.id, &lim, err);
    if (!s->cg && s->rootless) {
        /* No delegated cgroup: run without cgroup limits (README). */
        sg_log(SG_LOG_WARN, "rootless without a cgroup (%s): memory is an RLIMIT_AS per process, "
                            "no pids or cpu limit, kills by pid namespace", err->msg);
    } else if (!s->cg) {
        sg_err_prefix(err, "cannot create the sandbox's cgroup");
        return -1;
    }
    if (s->cg) {
        /* gc of another state directory must leave this cgroup alone */
        sg_err oerr = {0};
        const char *state = sg_state_dir(&oerr);
        if (!state || sg_cgroup_set_owner(s->cg, state, &oerr) < 0)
            sg_log(SG_LOG_WARN, "no owner mark on the cgroup (gc --orphan-cgroups will leave it "
                                "alone): %s", oerr.msg);
    }
    sv_start_oom_baseline(s);
    sv_leaves_fast_set(s);
    return sv_start_init(s, err);
}

/* The three names our record hangs from, each in the directory a watch
 * of gone_wd[] looks at: <state>/sb/<id>, <state>/sb, <state>. */
static void gone_names(sv_sup *s, const char *names[3], char **state_copy)
{
    sg_err err = {0};
    const char *state = sg_state_dir(&err);
    *state_copy = state ? strdup(state) : NULL;
    char *slash = *state_copy ? strrchr(*state_copy, '/') : NULL;
    names[0] = s->meta.id;
    names[1] = "sb";
    names[2] = slash ? slash + 1 : "";
}

/* Our record, the sandboxes' directory or the state directory was removed
 * or moved away (an `rm -rf` of a test's state directory): no command can
 * reach this sandbox any more, so it ends now, as a destroy would, rather
 * than live on for good. The parents are watched, not the directories:
 * a directory's own delete event waits for every file open in it (ours)
 * to close. */
static void on_gone(uv_poll_t *h, int status, int events)
{
    sv_sup *s = h->data;
    (void)status;
    (void)events;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    const char *names[3];
    sg_autofree char *state = NULL;
    gone_names(s, names, &state);
    bool gone = false;
    ssize_t n;
    while ((n = read(s->gone_fd, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + n; p += sizeof(struct inotify_event) + ((struct inotify_event *)p)->len) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            for (int i = 0; i < 3; i++)
                gone |= ev->wd == s->gone_wd[i] && ev->len && strcmp(ev->name, names[i]) == 0;
        }
    }
    if (!gone || s->destroying)
        return;
    sg_log(SG_LOG_WARN, "the sandbox's state directory was removed: ending the sandbox");
    s->orphaned = true;
    sup_destroy(s, NULL);
}

/* Watches the directories our record hangs from, for removals and moves
 * (cheap: a wake-up per removal there). Without inotify the sandbox is
 * only ended by a destroy. */
static void watch_gone(sv_sup *s)
{
    s->gone_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (s->gone_fd < 0)
        return;
    sg_err err = {0};
    const char *state = sg_state_dir(&err);
    sg_autofree char *sb = sg_state_path("sb");
    sg_autofree char *parent = state ? strdup(state) : NULL;
    char *slash = parent ? strrchr(parent, '/') : NULL;
    if (slash)
        *(slash == parent ? slash + 1 : slash) = '\0';
    const char *dirs[3] = {sb, state, slash ? parent : NULL};
    for (int i = 0; i < 3; i++)
        s->gone_wd[i] = dirs[i] ? inotify_add_watch(s->gone_fd, dirs[i], IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR) : -1;
    uv_poll_init(&s->loop, &s->gone_poll, s->gone_fd);
    s->gone_poll.data = s;
    uv_poll_start(&s->gone_poll, UV_READABLE, on_gone);
}

/* The loop's handles: init's socket, the control socket, the caps' and
 * the checkpoint worker's timers, the signals. */
static void sup_watch(sv_sup *s)
{
    uv_poll_init(&s->loop, &s->init_poll, s->init_fd);
    s->init_poll.data = s;
    uv_poll_start(&s->init_poll, UV_READABLE, sv_handoff_on_init_msg);
    uv_poll_init(&s->loop, &s->ctl_poll, s->ctl_fd);
    s->ctl_poll.data = s;
    sv_killswitch_start(s);
    sv_killswitch_init(s);
    sv_ckpt_timer_init(s);
    sv_killswitch_caps_arm(s);
    sv_life_arm(s);
    uv_signal_init(&s->loop, &s->sigchld);
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    s->sigchld.data = s->sigterm.data = s->sigint.data = s;
    uv_signal_start(&s->sigchld, on_signal, SIGCHLD);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    watch_gone(s);
}

/* Everything up to serving: the sandbox made (or adopted), its record
 * saved, the capture started, the checkpoint worker and the control
 * socket open, the loop's handles set. */
#define SUP_SEED_WAIT_MS (600 * 1000) /* a fork's rebuild, bounded by its fetches' own timeouts */

/* seed_fd's "ok\n": the creator filled the workspace (bounded wait; its
 * end, as when the creator died, fails). Closes it. 0, or -1 with err. */
static int sup_wait_seed(int seed_fd, sg_err *err)
{
    char buf[4];
    size_t have = 0;
    while (have < 3) {
        struct pollfd pf = {.fd = seed_fd, .events = POLLIN};
        int r = poll(&pf, 1, SUP_SEED_WAIT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t n = read(seed_fd, buf + have, 3 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    close(seed_fd);
    if (have == 3 && memcmp(buf, "ok\n", 3) == 0)
        return 0;
    return sg_err_set(err, EIO, "the workspace's seed did not complete");
}

static int sup_start(sv_sup *s, const char *id, bool adopt, int seed_fd, sg_err *err)
{
    if (!s->exec.spawn_msg || !s->clients.buf)
        return sg_err_set(err, ENOMEM, "out of memory");
    /* The lock first: an adopt reads the record its predecessor left. */
    if (!sg_state_dir(err) || sv_start_hold_lock(s, id, adopt, err) < 0 ||
        sg_sandbox_meta_load(id, &s->meta, err) < 0)
        return -1;
    if (adopt && sv_start_adopt(s, err) < 0) {
        sg_err_prefix(err, "cannot take over sandbox %s", id);
        return -1;
    }
    if (!adopt && sup_create(s, err) < 0)
        return -1;
    s->meta.supervisor_pid = getpid();
    s->meta.init_pid = s->init_pid;
    if (sg_sandbox_meta_save(&s->meta, err) < 0)
        return -1;
    /* the workspace is complete before the seed and the first checkpoint
     * read it */
    if (seed_fd >= 0 && sup_wait_seed(seed_fd, err) < 0)
        return -1;
    if (s->meta.task && sv_start_capture(s, adopt, err) < 0)
        return -1;
    /* The first checkpoint is taken right after "ready", before the loop
     * serves any request: create does not wait for it. */
    if (sv_ckpt_open(s, err) < 0)
        return -1;
    sg_autofree char *ctl = sg_state_sandbox_path(id, "ctl.sock");
    s->ctl_fd = sg_ctl_listen(ctl, 128, err);
    if (s->ctl_fd < 0)
        return -1;
    sup_watch(s);
    return 0;
}

/* A start that failed: a new sandbox's init and cgroup go (an adopted
 * one is left as it was), and the error goes to the ready fd or stderr. */
static void sup_start_failed(sv_sup *s, bool adopt, int ready_fd, const sg_err *err)
{
    if (!adopt && s->init_pid > 0) {
        sg_err e2 = {0};
        if (s->cg)
            sg_cgroup_kill(s->cg, NULL, 5000, &e2);
        kill(s->init_pid, SIGKILL);
        waitpid(s->init_pid, NULL, 0);
    }
    if (!adopt && s->cg) {
        sg_err e2 = {0};
        sg_cgroup_remove(s->cg, &e2);
    }
    if (ready_fd >= 0) {
        dprintf(ready_fd, "error: %s\n", err->msg);
        close(ready_fd);
    } else {
        sg_log(SG_LOG_ERROR, "%s", err->msg);
    }
    if (s->cap) {
        sg_capture_close(s->cap);
        sg_capture_free(s->cap);
    }
    uv_walk(&s->loop, close_walk, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
}

static void sup_free(sv_sup *s)
{
    if (s->gone_fd >= 0)
        close(s->gone_fd);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    if (s->ctl_fd >= 0)
        close(s->ctl_fd);
    if (s->init_fd >= 0)
        close(s->init_fd);
    if (s->notify.fd >= 0)
        close(s->notify.fd);
    sv_execnotify_unmap(s);
    sv_ckpt_free(s);
    sv_leaves_free(s);
    sg_cgroup_free(s->cg);
    sg_seccomp_prog_free(&s->prog);
    sg_sandbox_meta_clear(&s->meta);
    free(s->exec.list);
    free(s->exec.spawn_msg);
    free(s->clients.buf);
    sv_killswitch_free(s);
    free(s);
}

/* The calls a lower object makes up (sv_sup_hooks), to the objects that
 * answer them. */
static void sup_hooks_set(sv_sup *s)
{
    s->hooks = (sv_sup_hooks){
        .destroy = sup_destroy,
        .abort = sv_killswitch_abort,
        .check_wall = sv_killswitch_check_wall,
        .kill_all = sv_killswitch_kill_all,
        .tty_end = sv_tty_end,
        .request = sv_dispatch_request,
        .client_msg = sv_exec_client_msg,
        .client_gone = sv_exec_client_gone,
        .client_holds = sv_exec_client_holds,
        .client_drained = sv_exec_client_drained,
        .activity = sv_life_activity,
    };
}

int sg_supervisor_run(const char *id, int ready_fd, int seed_fd, bool adopt)
{
    sg_log_init("supervisor");
    sg_err err = {0};
    sv_sup *s = calloc(1, sizeof *s);
    if (!s)
        return 1;
    sup_hooks_set(s);
    s->init_fd = s->ctl_fd = s->lock_fd = s->gone_fd = s->destroy.fd = s->notify.fd = s->metrics.fd = -1;
    sv_leaves_init(s);
    /* Not calloc: pages the supervisor never writes stay unmapped. */
    s->exec.spawn_msg = malloc(SG_SPAWN_MSG_MAX);
    s->clients.buf = malloc(SG_CTL_MSG_MAX);
    prctl(PR_SET_NAME, "sg-supervisor");
    signal(SIGPIPE, SIG_IGN);
    s->rootless = geteuid() != 0;
    uv_loop_init(&s->loop);
    if (seed_fd >= 0) /* never a child's */
        fcntl(seed_fd, F_SETFD, FD_CLOEXEC);
    if (sup_start(s, id, adopt, seed_fd, &err) < 0) {
        sup_start_failed(s, adopt, ready_fd, &err);
        sup_free(s);
        return 1;
    }
    /* The move into its own cgroup waits for the kernel (an RCU grace
     * period per hierarchy): a pool's spare makes it before it is ready
     * (listed, claimable: a claim never waits for it), any other sandbox
     * right after "ready" (create does not wait for it). */
    bool spare = !adopt && s->meta.learner && strcmp(s->meta.learner, SG_POOL_LEARNER) == 0;
    if (spare)
        sv_start_join_own_cgroup(s);
    if (ready_fd >= 0) {
        sg_write_all(ready_fd, "ok\n", 3);
        close(ready_fd);
    }
    sv_metrics_start(s);
    if (!spare)
        sv_start_join_own_cgroup(s);
    if (!adopt && !sv_ckpt_take(s, "create", NULL))
        sg_log(SG_LOG_ERROR, "the first checkpoint of the workspace failed");
    sv_leaves_ready_next(s);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    close(s->ctl_fd);
    s->ctl_fd = -1;
    int code = sup_shutdown(s);
    /* Ended with no destroy request waiting to remove it (on its own, its
     * record gone, an expired keep): out of its own cgroup, and that
     * removed. */
    if (s->destroy.fd < 0)
        sg_cgroup_supervisor_release(s->meta.id);
    sup_free(s);
    return code;
}

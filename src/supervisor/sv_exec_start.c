/* sv_exec_start: an exec started: admitted, its leaf, its message to init
 * or to the ready child (the hand-off: sv_handoff.c), its pipes or its
 * terminal (sv_tty.c); and the exec's side of its caller's connection. */
#include "supervisor/sv_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_handoff.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_tty.h"
#include "base/log.h"

/* An MCP tool call that changes nothing needs no checkpoint after it. */
static bool tool_is_read_only(const char *tool)
{
    return tool && strcmp(tool, "read_file") == 0;
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
static bool exec_admit(sv_sup *s, sv_client *c, const sg_exec_req *req)
{
    char why[128];
    if (!s->ks.aborted && sg_caps_exec_reached(&s->meta, s->exec.total, s->exec.calls,
                                            req->tool_name != NULL, why, sizeof why))
        json_decref(s->hooks.abort(s, "cap", why));
    if (s->ks.aborted) {
        char m[400];
        snprintf(m, sizeof m, "session aborted: %s", s->ks.reason);
        sv_client_error(c, m);
        return false;
    }
    if (s->destroying || s->init_dead || s->init_fd < 0) {
        sv_client_error(c, s->init_dead ? "the sandbox's init is gone; destroy it"
                                     : "the sandbox is being destroyed");
        return false;
    }
    if (sg_grow(&s->exec.list, &s->exec.cap, s->exec.n + 1, sizeof *s->exec.list) < 0) {
        sv_client_error(c, "out of memory");
        return false;
    }
    return true;
}

/* A new exec, registered with its caller. direct: it goes to the ready
 * child, under the exec id reserved for that child. */
static sv_exec *exec_new(sv_sup *s, sv_client *c, const sg_exec_req *req, bool direct)
{
    sv_exec *ex = sg_xcalloc(1, sizeof *ex);
    ex->s = s;
    ex->cl = c;
    ex->id = direct ? s->leaves.ready_exec_id : sv_sup_exec_id_new(s);
    ex->num = sv_sup_exec_num_new(s);
    ex->out_fd = ex->err_fd = ex->cpu_fd = ex->ready_sock = ex->leaf_fd = -1;
    ex->events_fd = -1;
    ex->hold_fds[0] = ex->hold_fds[1] = ex->hold_fds[2] = -1;
    ex->pending_closes = 1; /* released when sv_exec_finish closes the timer */
    /* A terminal session (shell, exec -t, the browser's) is a learner's
     * sitting, not one command: the sandbox's per-exec limit is not its
     * end (exit, abort, destroy and the caps are); an explicit one is. */
    ex->timeout_s = req->timeout_s > 0 ? req->timeout_s : req->tty ? 0 : s->meta.timeout_s;
    ex->code_only = req->code_only;
    ex->detachable = req->detachable;
    sg_autofree char *line = req->tool_name ? sg_strdup_printf("%s (tool)", req->tool_name) : sg_exec_cmdline(req->argv);
    if (line)
        snprintf(ex->now, sizeof ex->now, "%.*s", (int)sg_utf8_cut(line, strlen(line), SG_CTL_NOW_MAX), line);
    uv_timer_init(&s->loop, &ex->timer);
    ex->timer.data = ex;
    s->exec.list[s->exec.n++] = ex;
    c->ex = ex;
    return ex;
}

/* The checkpoint before an exec, unless the call only reads or the
 * sandbox takes its checkpoints by hand. An unchanged workspace reuses the
 * newest checkpoint: the exec path then writes no object and no ref. */
static void exec_checkpoint(sv_sup *s, const sv_exec *ex, const sg_exec_req *req)
{
    if (tool_is_read_only(req->tool_name) || s->meta.manual_checkpoints)
        return;
    char label[160];
    sg_autofree char *line = sg_exec_cmdline(req->argv);
    snprintf(label, sizeof label, "before exec %u: %.120s", ex->num, line ? line : "");
    sv_ckpt_exec(s, label);
}

/* The exec's leaf: the ready child's, where it sits already (direct), else
 * a new one. Returns how many cgroup fds init needs to clone the exec into
 * it (cgfds; 0 when direct or without cgroups), or -1 with err. */
static int exec_leaf(sv_sup *s, sv_exec *ex, bool direct, int cgfds[SG_CG_MAX_FDS], sg_err *err)
{
    if (direct) {
        sv_leaves_ready_take(s, ex);
        sv_leaves_track(s, ex->leaf);
        return 0;
    }
    snprintf(ex->leaf, sizeof ex->leaf, "x%u", ++s->leaves.next_leaf);
    sv_leaves_track(s, ex->leaf);
    if (!s->cg)
        return 0; /* rootless without cgroups */
    if (sg_cgroup_leaf_create(s->cg, ex->leaf, err) < 0)
        return -1;
    if (!s->leaves.fast)
        return sg_cgroup_procs_fds(s->cg, ex->leaf, cgfds, err);
    /* one v2 leaf directory: init clones straight into it */
    cgfds[0] = sg_cgroup_leaf_dirfd(s->cg, ex->leaf, err);
    return cgfds[0] < 0 ? -1 : 1;
}

/* Sends the encoded exec (s->exec.spawn_msg, len bytes) with its fds (stdio,
 * then the cgroup's): to the ready child (direct), which keeps message and
 * fds until it answers "k" (sv_handoff_done) or never does
 * (sv_handoff_failed); else to init. Returns 0 or -errno; *lost when
 * the ready child's socket refused it (the exec then goes through init). */
static int exec_send(sv_sup *s, sv_exec *ex, bool direct, size_t len, const int *fds, int nfds, bool *lost)
{
    if (!direct)
        return sg_seqpacket_send(s->init_fd, s->exec.spawn_msg, len, fds, (size_t)nfds);
    ex->held_msg = malloc(len);
    if (!ex->held_msg)
        return -ENOMEM;
    memcpy(ex->held_msg, s->exec.spawn_msg, len);
    ex->held_len = len;
    memcpy(ex->hold_fds, fds, sizeof ex->hold_fds);
    ex->awaiting_ack = true;
    sv_leaves_ready_wake(s);
    *lost = sg_seqpacket_send_typed(ex->ready_sock, SG_SPAWN_READY_TYPE, s->exec.spawn_msg, len, fds, 3) < 0;
    return 0;
}

/* The exec's output pipes (read ends), polled once the exec is sent. */
static void exec_pipes(sv_sup *s, sv_exec *ex, int out_r, int err_r)
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

/* How long the ready child has to answer "k" (SG_SPAWN_READY_ACK_MS).
 * Tests only (test_exec_once.py): $SANDGLASS_TEST_READY_ACK_MS shortens it,
 * to 0 for a wait that always ends before the child answers: the window a
 * loaded host hits by chance. Unset (always, outside tests): the default. */
static uint64_t ready_ack_ms(void)
{
    static long ms = -2;
    if (ms == -2) {
        const char *env = getenv("SANDGLASS_TEST_READY_ACK_MS");
        char *end = NULL;
        ms = env && *env ? strtol(env, &end, 10) : -1;
        if (!end || *end || ms < 0 || ms > SG_SPAWN_READY_ACK_MS)
            ms = -1;
    }
    return ms < 0 ? SG_SPAWN_READY_ACK_MS : (uint64_t)ms;
}

/* The exec is on its way: its clock, its counters before, its output,
 * its time limit, and the wait for the ready child's "k". */
static void exec_running(sv_sup *s, sv_exec *ex, bool handoff_lost)
{
    sg_err err = {0};
    ex->start_ns = sg_now_mono_ns();
    /* Counters before the exec, read while the child starts; a caller
     * that wants the exit code alone, uncaptured, gets none of them. */
    bool want_stats = !ex->code_only || ex->cx;
    if (want_stats && s->leaves.fast)
        sg_cgroup_counters(s->cg, &ex->before.oom_kills, &ex->before.pids_max_hits, &err);
    else if (want_stats && s->cg)
        sg_cgroup_stats(s->cg, NULL, &ex->before, &err);
    uv_poll_start(&ex->out_poll, UV_READABLE, sv_exec_on_output);
    uv_poll_start(&ex->err_poll, UV_READABLE, sv_exec_on_output);
    if (ex->timeout_s > 0) {
        uv_timer_start(&ex->timer, sv_exec_on_timeout, (uint64_t)(ex->timeout_s * 1000.0), 0);
        /* the kill itself beside the loop; this timer records why */
        ks_arm(s->ks.thread, ex->leaf, sg_now_mono_ns() + (uint64_t)(ex->timeout_s * 1e9));
    }
    if (!ex->awaiting_ack)
        return;
    if (handoff_lost) {
        sv_handoff_failed(ex);
        return;
    }
    /* The "k" is not polled for: it is read when init reports the exit,
     * or when this timer fires (a child stopped before it took the exec),
     * so an exec wakes the supervisor once less. */
    uv_timer_init(&s->loop, &ex->ack_timer);
    ex->ack_timer.data = ex;
    ex->pending_closes++;
    uv_timer_start(&ex->ack_timer, sv_handoff_on_timeout, ready_ack_ms(), 0);
}

static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* The exec a copy of request id rid started, or 0: none of the last
 * SV_EXEC_RIDS. */
static uint32_t rid_started(const sv_sup *s, const char *rid)
{
    for (size_t i = 0; i < SV_EXEC_RIDS; i++)
        if (s->exec.rids[i].rid[0] && strcmp(s->exec.rids[i].rid, rid) == 0)
            return s->exec.rids[i].num;
    return 0;
}

static void rid_remember(sv_sup *s, const char *rid, uint32_t num)
{
    sv_exec_rid *r = &s->exec.rids[s->exec.rid_next++ % SV_EXEC_RIDS];
    snprintf(r->rid, sizeof r->rid, "%s", rid);
    r->num = num;
}

/* "exec": the caller's stdin crosses into the sandbox only as a pipe or
 * /dev/null (docs/SECURITY.md); none given is /dev/null. */
void sv_exec_start(sv_sup *s, sv_client *c, sg_exec_req *in, int stdin_fd)
{
    sg_err err = {0};
    sg_exec_req req = *in;
    memset(in, 0, sizeof *in);
    if (!exec_admit(s, c, &req)) {
        close(stdin_fd);
        sg_exec_req_free(&req);
        return;
    }
    s->exec.total++;
    s->hooks.activity(s);
    if (req.tool_name)
        s->exec.calls++;
    sv_leaves_sweep(s);
    /* A ready child whose socket init has sent takes the exec directly;
     * else init clones a child. */
    bool direct = s->leaves.ready && s->cg && s->leaves.ready_sock >= 0;
    sv_exec *ex = exec_new(s, c, &req, direct);
    if (req.rid[0])
        rid_remember(s, req.rid, ex->num);
    const char *cwd = req.cwd ? req.cwd : "/workspace";
    exec_checkpoint(s, ex, &req);
    ex->cx = s->cap ? sg_capture_exec_begin(s->cap, ex->num, req.argv, cwd, req.tool) : NULL;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int cgfds[SG_CG_MAX_FDS];
    sg_autostrv char **env = build_env(&req, cwd);
    int ncg = exec_leaf(s, ex, direct, cgfds, &err);
    if (ncg >= 0)
        sv_killswitch_exec(s, ex->leaf, ex->num);
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
        sv_exec_fail(ex, err.msg);
        return;
    }
    /* Message: header, argv..., env..., cwd (NUL-separated). */
    sg_spawn_hdr sp = {.type = SG_SPAWN_EXEC, .exec_id = ex->id,
                       .uid = s->meta.uid, .gid = s->meta.gid,
                       .nfds_cg = (uint32_t)ncg, .cg_into = s->leaves.fast,
                       .rlimit_as = s->cg ? 0 : s->meta.memory};
    ssize_t len = sg_spawn_encode(s->exec.spawn_msg, SG_SPAWN_MSG_MAX, &sp, req.argv, env, cwd);
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
        sv_exec_fail(ex, r == -E2BIG ? "command line and environment are too long (at most 64 KiB)"
                      : r == -ENOMEM ? "out of memory" : "cannot reach the sandbox's init");
        return;
    }
    exec_running(s, ex, lost);
    /* The next exec's ready child is made while this one runs: the caller
     * is waiting then, and a command runs on one CPU, so this work rarely
     * delays anyone (after the result it would meet the next exec). */
    sv_leaves_ready_next(s);
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

void sv_exec_op(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    const char *rid = req->u.exec.rid;
    uint32_t seen = rid[0] ? rid_started(s, rid) : 0;
    if (seen) {
        /* A copy of a request we started: its caller lost the connection
         * before any answer and sent it again (sg_revive_unread). */
        char m[200];
        snprintf(m, sizeof m, SG_CTL_RID_SEEN " (exec %u): not run again; its end is unknown to this "
                 "caller (sandglass events shows it)", seen);
        if (fd_in >= 0)
            close(fd_in);
        sv_client_error(c, m);
        return;
    }
    if (fd_in >= 0 && !sg_ctl_stdin_ok(fd_in)) {
        close(fd_in);
        sv_client_error(c, "an exec's stdin must be a pipe or /dev/null (sandglass exec relays "
                        "anything else): refused");
        return;
    }
    if (fd_in < 0)
        fd_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sv_exec_start(s, c, &req->u.exec, fd_in);
}

/* ---- the exec's side of its caller's connection (sv_client's hooks) ---- */

/* A message other than a request: what is typed and the window's size (a
 * tty exec), a detach, a signal. */
void sv_exec_client_msg(sv_client *c, uint8_t type, const char *buf, size_t n, int *fds, size_t nfds)
{
    if ((type == SG_CTL_STDIN || type == SG_CTL_WINSZ) && c->requested && !nfds) {
        sv_tty_client_msg(c, type, buf, n);
    } else if (type == SG_CTL_DETACH && n == 0 && !nfds && c->ex && !c->ex->finished) {
        if (c->ex->detachable && c->ex->tty)
            sv_tty_detach(c, true);
        else
            sv_client_error(c, "this exec cannot be detached (it was started without detach keys)");
    } else if (type == SG_CTL_SIGNAL && n == 1 && c->ex && !c->ex->finished) {
        sg_spawn_hdr sp = {.type = SG_SPAWN_SIGNAL, .exec_id = c->ex->id, .sig = (unsigned char)buf[0]};
        if (send(c->s->init_fd, &sp, sizeof sp, MSG_NOSIGNAL) < 0)
            sv_exec_kill(c->ex);
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
    } else {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        sv_client_error(c, "unexpected message type");
    }
}

/* The caller of c->ex is closing. */
void sv_exec_client_gone(sv_client *c)
{
    sv_exec *ex = c->ex;
    if (ex->detachable && ex->tty && !ex->finished) {
        /* A detachable terminal's caller went away (its window closed):
         * the shell runs on, to be attached again. */
        sv_tty_detach(c, false);
        return;
    }
    /* The caller went away mid-exec: stop the command, as a terminal
     * hangup would. */
    ex->cl = NULL;
    c->ex = NULL;
    if (!ex->finished)
        sv_exec_kill(ex);
}

bool sv_exec_client_holds(sv_client *c)
{
    return c->ex->tty && sg_sup_tty_input_full(c->ex->tty);
}

/* c's queue is down to half: c->ex's output is read again. */
void sv_exec_client_drained(sv_client *c)
{
    sv_exec *ex = c->ex;
    if (ex->tty)
        sg_sup_tty_pause(ex->tty, false);
    if (ex->out_active)
        uv_poll_start(&ex->out_poll, UV_READABLE, sv_exec_on_output);
    if (ex->err_active)
        uv_poll_start(&ex->err_poll, UV_READABLE, sv_exec_on_output);
}

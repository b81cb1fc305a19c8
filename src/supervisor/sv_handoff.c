/* sv_handoff: the init connection (wire/spawn.h): its replies, and the direct
 * hand-off of an exec to the ready child. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <unistd.h>

#include "supervisor/sv_exec.h"
#include "supervisor/sv_execnotify.h"
#include "supervisor/sv_handoff.h"
#include "supervisor/sv_leaves.h"

/* 1: the child took the exec ("k"); 0: not yet; -1: it never will (its
 * socket closed: it died). The "k" is sent before the command runs, so it
 * is there by the time init reports the child's exit. */
static int handoff_ack(sv_exec *ex)
{
    char k = 0;
    ssize_t n = recv(ex->ready_sock, &k, 1, MSG_DONTWAIT);
    if (n == 1 && k == 'k')
        return 1;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    return -1;
}

void sv_handoff_done(sv_exec *ex)
{
    ex->spawned = true;
    ex->pid = ex->ready_pid;
    sv_exec_handoff_release(ex);
}

/* The ready child did not take the exec (killed or stopped just before):
 * it is killed, and init clones the exec into the same leaf under a new id
 * (the dead child's exit report keeps the old one). */
void sv_handoff_failed(sv_exec *ex)
{
    sv_sup *s = ex->s;
    sg_spawn_hdr kill_it = {.type = SG_SPAWN_SIGNAL, .exec_id = ex->id, .sig = SIGKILL};
    send(s->init_fd, &kill_it, sizeof kill_it, MSG_NOSIGNAL);
    if (s->ks.aborted || s->destroying || s->init_dead || ex->timed_out || ex->leaf_fd < 0) {
        sv_exec_handoff_release(ex);
        sv_exec_fail(ex, s->ks.aborted ? "session aborted" : ex->timed_out ? "timed out before it started"
                                 : "the sandbox's init is gone");
        return;
    }
    ex->id = sv_sup_exec_id_new(s);
    sg_spawn_hdr sp;
    memcpy(&sp, ex->held_msg, sizeof sp);
    sp.exec_id = ex->id;
    sp.nfds_cg = 1;
    sp.cg_into = 1;
    memcpy(ex->held_msg, &sp, sizeof sp);
    int fds[4] = {ex->hold_fds[0], ex->hold_fds[1], ex->hold_fds[2], ex->leaf_fd};
    int r = sg_seqpacket_send(s->init_fd, ex->held_msg, ex->held_len, fds, 4);
    sv_exec_handoff_release(ex);
    if (r < 0)
        sv_exec_fail(ex, "cannot reach the sandbox's init");
}

/* Settles the hand-off once the ready child is dead (init reported its
 * exit): its "k", sent before the command runs, is there or never will
 * be. With it the exit is the exec's; without it the command never ran
 * and init clones the exec. */
static void handoff_check(sv_exec *ex)
{
    if (!ex->awaiting_ack)
        return;
    if (handoff_ack(ex) > 0) {
        if (ex->handoff_killed)
            sv_exec_mark_killed(ex, "start", "the sandbox did not start it in time (a stopped or "
                                "overloaded sandbox): it was killed as it started");
        sv_handoff_done(ex);
    } else {
        sv_handoff_failed(ex);
    }
}

/* Whether the ready child has read the exec off its socket (nothing we
 * sent is left in it): it runs the command, its "k" on the way. */
static bool handoff_taken(const sv_exec *ex)
{
    int q = -1;
    return ioctl(ex->ready_sock, SIOCOUTQ, &q) == 0 && q == 0;
}

/* The wait for the "k" is over. The child may take the exec at any moment
 * still (a loaded host runs it late): cloning it now could run the
 * command twice. One that read it runs it: left to it. One that did not is
 * killed, and its exit report settles the hand-off (handoff_check): an
 * exec runs once. */
void sv_handoff_on_timeout(uv_timer_t *t)
{
    sv_exec *ex = t->data;
    if (!ex->awaiting_ack)
        return;
    int a = handoff_ack(ex);
    if (a > 0) {
        sv_handoff_done(ex);
        return;
    }
    if (a < 0) { /* its socket closed with no "k": it died before it took the exec */
        sv_handoff_failed(ex);
        return;
    }
    if (handoff_taken(ex))
        return;
    sg_spawn_hdr kill_it = {.type = SG_SPAWN_SIGNAL, .exec_id = ex->id, .sig = SIGKILL};
    if (send(ex->s->init_fd, &kill_it, sizeof kill_it, MSG_NOSIGNAL) < 0) {
        sv_handoff_failed(ex); /* init is gone: nothing runs the exec any more */
        return;
    }
    ex->handoff_killed = true;
}

/* Reads every report init has sent; false when init is gone. */
static bool init_drain(sv_sup *s)
{
    for (;;) {
        char buf[sizeof(sg_spawn_reply)];
        sg_spawn_reply rep;
        int fds[2] = {-1, -1}; /* NOTIFY has two, others at most one */
        size_t nfds = 2;
        ssize_t n = sg_seqpacket_recv(s->init_fd, buf, sizeof buf, MSG_DONTWAIT, fds, &nfds);
        int fd = fds[0];
        if (nfds == 2 && !(n > 0 && sg_spawn_reply_decode(buf, (size_t)n, &rep) == 0 &&
                           rep.type == SG_SPAWN_NOTIFY)) {
            close(fds[1]);
            nfds = 1;
        }
        if (n == -EAGAIN || n == -EINTR)
            return true;
        if (n <= 0 && n != -EMSGSIZE) {
            /* init is gone: the whole pid namespace died with it. */
            uv_poll_stop(&s->init_poll);
            sv_execnotify_stop(s);
            s->init_dead = true;
            for (size_t i = s->exec.n; i-- > 0;)
                sv_exec_fail(s->exec.list[i], "the sandbox's init died");
            return false;
        }
        bool ok = n > 0 && sg_spawn_reply_decode(buf, (size_t)n, &rep) == 0;
        if (ok && rep.type == SG_SPAWN_READY && nfds == 1 && sv_leaves_ready_socket(s, rep.exec_id, fd, rep.pid))
            continue;
        if (ok && rep.type == SG_SPAWN_NOTIFY && nfds >= 1) {
            sv_execnotify_attach(s, fd, nfds == 2 ? fds[1] : -1);
            continue;
        }
        if (nfds == 1)
            close(fd);
        if (!ok)
            continue;
        sv_exec *ex = sv_exec_find(s, rep.exec_id);
        if (!ex) {
            if (rep.type == SG_SPAWN_EXITED && s->leaves.ready && rep.exec_id == s->leaves.ready_exec_id)
                sv_leaves_ready_lost(s);
            continue;
        }
        if (rep.type == SG_SPAWN_SPAWNED) {
            if (rep.err) {
                char m[160];
                snprintf(m, sizeof m, "cannot start the command: %s", strerror(rep.err));
                sv_exec_fail(ex, m);
            } else {
                ex->spawned = true;
                ex->pid = rep.pid;
            }
        } else if (rep.type == SG_SPAWN_EXITED) {
            if (ex->awaiting_ack) {
                handoff_check(ex);
                if (!ex->spawned)
                    continue; /* the ready child died before it took the exec */
            }
            ex->exited = true;
            ex->status = rep.status;
            ex->exit_rep = rep;
            sv_exec_finish(ex);
        }
    }
}

void sv_handoff_on_init_msg(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    sv_sup *s = p->data;
    /* the kill switch's abort first: the deaths init reports are its */
    ks_take_killed(s->ks.thread);
    sv_exec_deadlines(s);
    s->hooks.check_wall(s);
    (void)init_drain(s);
}

static bool killed_exec_running(const sv_sup *s)
{
    for (size_t i = 0; i < s->exec.n; i++)
        if (!s->exec.list[i]->finished && s->exec.list[i]->kill_cause[0])
            return true;
    return false;
}

/* After a kill whose proof held, the killed execs' exit reports are on
 * their way from init: they are read now, so that the answer to the kill
 * (an abort) is followed by no exec still counted as running (a rollback
 * right after it would refuse "under them"), and each killed exec's
 * result comes before the abort's record. Bounded by timeout_ms. */
void sv_handoff_settle_killed(sv_sup *s, int timeout_ms)
{
    uint64_t end = sg_now_mono_ns() + (uint64_t)timeout_ms * 1000000u;
    while (s->init_fd >= 0 && !s->init_dead && killed_exec_running(s)) {
        uint64_t now = sg_now_mono_ns();
        if (now >= end)
            break;
        struct pollfd pfd = {.fd = s->init_fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)((end - now) / 1000000u) + 1);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && !init_drain(s))
            break;
    }
}

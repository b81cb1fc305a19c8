/* uplink_daemon: the per-host uplink daemon. See delivery/uplink_daemon.h. */
#include "delivery/uplink_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "delivery/spool.h"
#include "delivery/uplink.h"
#include "state/state.h"
#include "wire/ctl.h"
#include "wire/token.h"
#include "wire/uplinkd.h"

typedef struct daemon_ctx daemon_ctx;

/* One supervisor's connection: its spool, read-only, and its uplink. */
typedef struct session {
    daemon_ctx *d;
    struct session *next;
    int fd;
    uv_poll_t poll;
    bool started;        /* hello accepted */
    bool dead;           /* ended: freed by reap_sessions, outside uv_run */
    bool poll_closed;
    char sandbox[80];
    int64_t ack_owed;    /* an ack the full socket did not take, -1: none */
    sg_spool *spool;
    sg_uplink *up;
} session;

struct daemon_ctx {
    uv_loop_t loop;
    int listen_fd;
    uv_poll_t listen_poll;
    uv_timer_t idle;
    uv_signal_t sigterm, sigint;
    session *sessions;
    size_t live;
    uint64_t idle_ms;
    bool stop;
    char rbuf[SG_UPLINKD_MSG_MAX]; /* one message from a supervisor */
};


static void on_session(uv_poll_t *p, int status, int events);

/* An event that does not fit in the socket now is dropped (it is only
 * informative); an ack is kept and sent once the socket takes it. */
static int session_send(session *s, const sg_uplinkd_reply *r)
{
    sg_autofree char *text = sg_uplinkd_reply_encode(r);
    if (!text)
        return -ENOMEM;
    if (s->dead)
        return -EPIPE;
    return sg_seqpacket_send(s->fd, text, strlen(text), NULL, 0);
}

static void send_ack(session *s, int64_t seq)
{
    if (session_send(s, &(sg_uplinkd_reply){.kind = SG_UPLINKD_ACK, .ack = seq}) == -EAGAIN) {
        /* Acks are cumulative: only the newest one is owed. */
        if (s->ack_owed < 0)
            uv_poll_start(&s->poll, UV_READABLE | UV_WRITABLE, on_session);
        s->ack_owed = seq;
        return;
    }
    if (s->ack_owed >= 0 && s->ack_owed <= seq) {
        s->ack_owed = -1;
        uv_poll_start(&s->poll, UV_READABLE, on_session);
    }
}

static void on_session_poll_closed(uv_handle_t *h)
{
    session *s = h->data;
    s->poll_closed = true;
    close(s->fd);
    s->fd = -1;
}

static void on_idle(uv_timer_t *t)
{
    daemon_ctx *d = t->data;
    if (d->live == 0) {
        sg_log(SG_LOG_INFO, "idle for %" PRIu64 " ms: exiting", d->idle_ms);
        d->stop = true;
    }
}

static void session_end(session *s, const char *why)
{
    if (s->dead)
        return;
    if (why)
        sg_log(SG_LOG_INFO, "sandbox %s: %s", s->sandbox[0] ? s->sandbox : "?", why);
    s->dead = true;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, on_session_poll_closed);
    if (s->up)
        sg_uplink_close(s->up);
    daemon_ctx *d = s->d;
    if (--d->live == 0)
        uv_timer_start(&d->idle, on_idle, d->idle_ms, 0);
}

static void session_fail(session *s, const char *msg)
{
    session_send(s, &(sg_uplinkd_reply){.kind = SG_UPLINKD_REFUSED, .reason = msg});
    session_end(s, msg);
}

static void on_reader_ack(void *ud, int64_t seq)
{
    send_ack(ud, seq);
}

static void on_uplink_event(void *ud, const sg_uplink_event *ev)
{
    static const char *const names[] = {"connected", "disconnected", "refused", "error"};
    session *s = ud;
    const char *name = names[ev->type <= SG_UPLINK_ERROR ? ev->type : SG_UPLINK_ERROR];
    /* refusals and errors in this log too: a frame refused by its seq, or
     * given up on, must be findable without the supervisor's log */
    if (ev->type == SG_UPLINK_REFUSED || ev->type == SG_UPLINK_ERROR)
        sg_log(SG_LOG_INFO, "sandbox %s: %s (%d): %s%s", s->sandbox[0] ? s->sandbox : "?", name, ev->code, ev->reason,
                 ev->type == SG_UPLINK_REFUSED && ev->retry_ms == 0 ? " [stopped]" : "");
    session_send(s, &(sg_uplinkd_reply){.kind = SG_UPLINKD_EVENT, .event = (int)ev->type, .code = ev->code,
                                        .reason = ev->reason, .retry_ms = ev->retry_ms});
}

/* The hello: make the token, open the spool read-only, start the uplink. */
static int session_start(session *s, const sg_uplinkd_msg *m, sg_err *err)
{
    snprintf(s->sandbox, sizeof s->sandbox, "%s", m->sandbox);
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    int r = m->secret_create ? sg_token_secret_ensure(m->secret_file, secret, err)
                             : sg_token_secret_load(m->secret_file, secret, err);
    if (r < 0)
        return -1;
    sg_autofree char *token = sg_token_make(secret, m->learner, m->task, m->sandbox, SG_TOKEN_STREAM_TTL_S, err);
    memset(secret, 0, sizeof secret);
    if (!token)
        return -1;
    s->spool = sg_spool_open_reader(m->spool, on_reader_ack, s, err);
    if (!s->spool)
        return -1;
    sg_spool_reader_set_synced(s->spool, m->seq);
    s->up = sg_uplink_new(&s->d->loop, m->url, token, s->spool, m->ca_file, err);
    if (!s->up)
        return -1;
    sg_uplink_set_event_cb(s->up, on_uplink_event, s);
    s->started = true;
    sg_log(SG_LOG_INFO, "sandbox %s: streaming %s to %s%s%s%s", m->sandbox, m->spool, m->url,
           m->ca_file ? " (CA file " : "", m->ca_file ? m->ca_file : "", m->ca_file ? ")" : "");
    return 0;
}

static void on_session(uv_poll_t *p, int status, int events)
{
    session *s = p->data;
    if (status < 0) {
        session_end(s, "connection error");
        return;
    }
    if ((events & UV_WRITABLE) && s->ack_owed >= 0)
        send_ack(s, s->ack_owed);
    if (!(events & UV_READABLE))
        return;
    char *buf = s->d->rbuf;
    for (;;) {
        ssize_t n = sg_seqpacket_recv(s->fd, buf, sizeof s->d->rbuf - 1, MSG_DONTWAIT, NULL, NULL);
        if (n == -EAGAIN || n == -EINTR)
            return;
        if (n == 0) {
            session_end(s, "supervisor gone");
            return;
        }
        if (n < 0) {
            session_fail(s, n == -EMSGSIZE ? "message too large" : "cannot read from the supervisor");
            return;
        }
        sg_err err = {0};
        sg_uplinkd_msg m;
        if (sg_uplinkd_msg_parse(buf, (size_t)n, &m, &err) < 0) {
            session_fail(s, err.msg);
            return;
        }
        int r = 0;
        if (!s->started && m.op != SG_UPLINKD_HELLO) {
            sg_err_set(&err, EPROTO, "the first message must be the hello");
            r = -1;
        } else if (m.op == SG_UPLINKD_HELLO) {
            r = s->started ? sg_err_set(&err, EPROTO, "a second hello") : session_start(s, &m, &err);
        } else {
            sg_spool_reader_set_synced(s->spool, m.seq);
            sg_uplink_notify(s->up);
        }
        sg_uplinkd_msg_clear(&m);
        if (r < 0) {
            session_fail(s, err.msg);
            return;
        }
    }
}

static void on_accept(uv_poll_t *p, int status, int events)
{
    daemon_ctx *d = p->data;
    for (;;) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        session *s = d->live < SG_UPLINK_DAEMON_MAX_SESSIONS ? calloc(1, sizeof *s) : NULL;
        if (!s) {
            close(fd);
            continue;
        }
        s->d = d;
        s->fd = fd;
        s->ack_owed = -1;
        s->next = d->sessions;
        d->sessions = s;
        d->live++;
        uv_timer_stop(&d->idle);
        uv_poll_init(&d->loop, &s->poll, fd);
        s->poll.data = s;
        uv_poll_start(&s->poll, UV_READABLE, on_session);
    }
}

/* Frees ended sessions. Outside uv_run only: sg_uplink_free runs the loop
 * to let lws close its handles, which may end other sessions. */
static void reap_sessions(daemon_ctx *d)
{
    for (bool again = true; again;) {
        again = false;
        for (session **pp = &d->sessions; *pp; pp = &(*pp)->next) {
            session *s = *pp;
            if (!s->dead || !s->poll_closed)
                continue;
            *pp = s->next;
            sg_uplink_free(s->up);
            if (s->spool)
                sg_spool_close(s->spool);
            free(s);
            again = true;
            break;
        }
    }
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    daemon_ctx *d = h->data;
    sg_log(SG_LOG_INFO, "signal %d: exiting", signum);
    d->stop = true;
}

static void close_walk(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int sg_uplink_daemon_serve(sg_err *err)
{
    if (!sg_state_dir(err))
        return -1;
    sg_autofree char *lock_path = sg_state_path("uplink.lock");
    sg_autofree char *sock_path = sg_state_path("uplink.sock");
    sg_autoclose int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0)
        return sg_err_sys(err, "open %s", lock_path);
    if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK)
            return 1; /* another daemon serves this state directory */
        return sg_err_sys(err, "lock %s", lock_path);
    }
    char pid[24];
    int pl = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(lock, 0) < 0 || pwrite(lock, pid, (size_t)pl, 0) != pl)
        return sg_err_sys(err, "write %s", lock_path);

    daemon_ctx d = {.listen_fd = -1, .idle_ms = SG_UPLINK_DAEMON_IDLE_MS};
    const char *env = getenv("SANDGLASS_UPLINK_IDLE_MS");
    uint64_t v;
    sg_err ignored = {0};
    if (env && sg_parse_uint(env, 24ull * 3600 * 1000, &v, &ignored) == 0 && v > 0)
        d.idle_ms = v;
    /* We hold the lock: a socket file left there is a dead daemon's. */
    d.listen_fd = sg_ctl_listen(sock_path, 128, err);
    if (d.listen_fd < 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&d.loop);
    uv_poll_init(&d.loop, &d.listen_poll, d.listen_fd);
    d.listen_poll.data = &d;
    uv_poll_start(&d.listen_poll, UV_READABLE, on_accept);
    uv_timer_init(&d.loop, &d.idle);
    d.idle.data = &d;
    uv_timer_start(&d.idle, on_idle, d.idle_ms, 0);
    uv_signal_init(&d.loop, &d.sigterm);
    uv_signal_init(&d.loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_stop_signal, SIGINT);
    sg_log(SG_LOG_INFO, "serving %s (pid %d)", sock_path, (int)getpid());

    while (!d.stop) {
        uv_run(&d.loop, UV_RUN_ONCE);
        reap_sessions(&d);
    }

    /* No new session from here; the socket goes while we hold the lock. */
    uv_poll_stop(&d.listen_poll);
    unlink(sock_path);
    for (session *s = d.sessions; s; s = s->next)
        session_end(s, NULL);
    for (int i = 0; i < 100 && d.sessions; i++) {
        uv_run(&d.loop, UV_RUN_NOWAIT);
        reap_sessions(&d);
    }
    uv_walk(&d.loop, close_walk, NULL);
    uv_run(&d.loop, UV_RUN_DEFAULT);
    uv_loop_close(&d.loop);
    close(d.listen_fd);
    return 0;
}

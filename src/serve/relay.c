/* relay: a browser terminal's supervisor side (serve_internal.h).
 *
 * Nothing here may wait on a supervisor: serve's one loop carries every
 * learner's terminal and /healthz, and a supervisor that does not accept
 * (stopped, wedged, its backlog full of connections nobody accepted) must
 * delay only its own sandbox's terminals. So the connect is non-blocking,
 * retried on a timer while the backlog is full, and given up with 1013
 * after SG_SERVE_CONNECT_TIMEOUT_S; a supervisor that accepted but does
 * not answer the shell's request (stopped after the accept) is given up
 * the same way after SG_SERVE_ANSWER_TIMEOUT_S; a takeover (a dead supervisor: start
 * a new one and wait until it is ready, up to 30 s) runs on libuv's
 * thread pool. */
#include "serve/serve_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "wire/revive.h"
#include "wire/seqpacket.h"

#define IN_CHUNK (32u * 1024)     /* one STDIN message */
#define CONNECT_RETRY_MS 100      /* a full backlog: the next try */
#define TERM_ENV "TERM=xterm-256color"
#define SHELL_LAUNCHER "/etc/sandglass/shell" /* sandbox/rootfs.c writes it */
#define BUSY_REASON "the sandbox is busy (its supervisor does not answer): try again"

static void on_ctl(uv_poll_t *h, int status, int events);
static void connect_try(tsess *t);
static void on_no_answer(uv_timer_t *h);

void serve_poll_update(tsess *t)
{
    if (!t->poll_on || !t->shell_on || t->closing)
        return;
    int want = 0;
    if (t->qbytes < SERVE_OUT_PAUSE)
        want |= UV_READABLE;
    if (t->in.len || t->winsz_pending)
        want |= UV_WRITABLE;
    if (want == t->poll_events)
        return;
    t->poll_events = want;
    if (want)
        uv_poll_start(&t->poll, want, on_ctl);
    else
        uv_poll_stop(&t->poll);
}

/* Sends what the browser typed, and a pending resize; -1: the supervisor
 * is gone. What the supervisor does not take stays queued here, and past
 * SERVE_IN_PAUSE the browser is not read (the supervisor, in turn, stops
 * reading us while its terminal's queue is full): a paste into a program
 * that does not read waits, in the end in the browser. */
static int ctl_flush(tsess *t)
{
    if (t->winsz_pending) {
        int r = sg_seqpacket_send_typed(t->ctl, SG_CTL_WINSZ, &t->winsz, sizeof t->winsz, NULL, 0);
        if (r == -EAGAIN)
            return 0;
        if (r < 0)
            return -1;
        t->winsz_pending = false;
    }
    size_t off = 0;
    while (off < t->in.len) {
        size_t n = t->in.len - off < IN_CHUNK ? t->in.len - off : IN_CHUNK;
        int r = sg_seqpacket_send_typed(t->ctl, SG_CTL_STDIN, t->in.data + off, n, NULL, 0);
        if (r == -EAGAIN)
            break;
        if (r < 0)
            return -1;
        off += n;
    }
    sg_buf_consume(&t->in, off);
    if (t->rx_off && t->in.len < SERVE_IN_PAUSE / 2 && t->wsi) {
        t->rx_off = false;
        lws_rx_flow_control(t->wsi, 1);
    }
    return 0;
}

static void ctl_output(void *ud, uint8_t type, const char *buf, size_t len)
{
    tsess *t = ud;
    (void)type; /* STDERR: the supervisor's own lines, e.g. why it killed */
    if (serve_queue_out(t, false, buf, len) < 0)
        return serve_refuse(t, "out of memory");
    serve_watch_output(t, buf, len);
}

/* One message from the supervisor (the call helper's step, ctl.h); false
 * when the exchange is over. */
static bool ctl_message(tsess *t, uint8_t type, const char *buf, ssize_t n)
{
    if (!t->call.answered)
        uv_timer_stop(&t->timer); /* the first answer: no deadline from here */
    t->call.on_output = ctl_output;
    t->call.ud = t;
    switch (sg_ctl_call_feed(&t->call, type, buf, (size_t)n)) {
    case SG_CTL_CALL_MORE:
        return true;
    case SG_CTL_CALL_EXIT:
        serve_queue_msg(t, &(sg_termws_msg){.kind = SG_TERMWS_EXIT, .exit_code = t->call.exit_code});
        serve_watch_exit(t, t->call.exit_code);
        serve_close_after(t, LWS_CLOSE_STATUS_NORMAL, "the shell ended");
        return false;
    case SG_CTL_CALL_ERROR:
        /* A supervisor of the build before versions (the sandbox lived
         * through an upgrade): this serve cannot speak to it. */
        serve_refuse(t, sg_ctl_is_v0_refusal(t->call.error)
                            ? "this sandbox's supervisor was started by an older sandglass (control protocol "
                              "0): open its terminal with `sandglass shell`, or destroy and create it again"
                            : t->call.error);
        return false;
    default: /* RESULT */
        serve_close_after(t, LWS_CLOSE_STATUS_NORMAL, "the shell ended");
        return false;
    }
}

static void on_ctl(uv_poll_t *h, int status, int events)
{
    tsess *t = h->data;
    if (status < 0) {
        serve_refuse(t, "lost the connection to the sandbox's supervisor");
        return;
    }
    if ((events & UV_WRITABLE) && ctl_flush(t) < 0) {
        serve_refuse(t, "the sandbox's supervisor went away");
        return;
    }
    if (events & UV_READABLE) {
        char *buf = t->srv->rbuf;
        /* A few messages a turn, so that one busy shell does not hold the loop. */
        for (int i = 0; i < 16 && !t->closing && t->qbytes < SERVE_OUT_PAUSE; i++) {
            uint8_t type = 0;
            ssize_t n = sg_seqpacket_recv_typed(t->ctl, &type, buf, sizeof t->srv->rbuf, NULL, NULL);
            if (n == -EAGAIN)
                break;
            if (n < 0 || type == 0) {
                serve_refuse(t, "the sandbox's supervisor closed the connection (the sandbox was destroyed?)");
                return;
            }
            if (!ctl_message(t, type, buf, n))
                return;
        }
    }
    serve_poll_update(t);
}

/* ---- connecting ---------------------------------------------------------- */

/* The tty exec of the sandbox's shell launcher, as `sandglass shell` asks,
 * on the connection just made. */
static void send_request(tsess *t)
{
    char *argv[] = {"/bin/sh", SHELL_LAUNCHER, NULL}, *env[] = {TERM_ENV, NULL};
    sg_ctl_req req = {.op = SG_OP_EXEC, .v = SG_CTL_VERSION,
                      .u.exec = {.argv = argv, .env = env, .tty = true, .winsz = t->start_ws, .code_only = true}};
    sg_autofree char *body = sg_ctl_req_dump(&req);
    if (!body)
        return serve_refuse(t, "out of memory");
    /* A new connection's buffer is empty: EAGAIN would be a supervisor
     * that has not taken one byte, which is busy too. */
    int r = sg_seqpacket_send_typed(t->ctl, SG_CTL_REQ, body, strlen(body), NULL, 0);
    if (r == -EAGAIN)
        return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN, BUSY_REASON);
    if (r < 0) {
        char why[96];
        snprintf(why, sizeof why, "cannot reach the sandbox's supervisor: %s", strerror(-r));
        return serve_refuse(t, why);
    }
    /* A supervisor that accepted and then stopped (or stops now) never
     * answers: its first answer, too, has a deadline. */
    uv_timer_start(&t->timer, on_no_answer, SG_SERVE_ANSWER_TIMEOUT_S * 1000, 0);
    t->shell_on = true;
    t->poll_events = 0;
    serve_poll_update(t);
}

/* The connect, or the supervisor's first answer, took too long: busy. The
 * supervisor's connection is closed at once (were the shell to start
 * later, it sees its client gone and ends), and the terminal's slot is
 * free at once, not when the browser has taken the close. */
static void on_no_answer(uv_timer_t *h)
{
    tsess *t = h->data;
    if (t->call.answered || t->closing)
        return;
    t->shell_on = false;
    if (t->poll_on) {
        t->poll_on = false;
        uv_close((uv_handle_t *)&t->poll, serve_on_handle_closed); /* closes t->ctl */
    }
    serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN, BUSY_REASON);
}

/* A connect that did not finish at once (not a Unix socket's way, but
 * the call allows it): writable means done, one way or the other. */
static void on_connecting(uv_poll_t *h, int status, int events)
{
    tsess *t = h->data;
    (void)events;
    sg_err err = {0};
    uv_poll_stop(&t->poll);
    sg_revive_state st = status < 0 ? SG_REVIVE_FAILED : sg_revive_connect_finish(t->ctl, t->sandbox, &err);
    if (st == SG_REVIVE_CONNECTED)
        return send_request(t);
    if (st == SG_REVIVE_BUSY)
        return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN, BUSY_REASON);
    serve_refuse(t, err.msg[0] ? err.msg : "cannot reach the sandbox's supervisor");
}

/* The connection's fd becomes the session's (closed with it). */
static void adopt_fd(tsess *t, int fd, bool connected)
{
    if (uv_poll_init(t->srv->loop, &t->poll, fd) < 0) {
        close(fd);
        return serve_refuse(t, "cannot watch the supervisor's connection");
    }
    t->ctl = fd;
    t->poll.data = t;
    t->poll_on = true;
    t->handles++;
    if (connected)
        return send_request(t);
    uv_poll_start(&t->poll, UV_WRITABLE, on_connecting);
    uv_timer_start(&t->timer, on_no_answer,
                   t->deadline > uv_now(t->srv->loop) ? t->deadline - uv_now(t->srv->loop) : 0, 0);
}

static void on_retry(uv_timer_t *h)
{
    tsess *t = h->data;
    if (t->wsi && !t->closing)
        connect_try(t);
}

/* ---- a takeover, off the loop -------------------------------------------- */

typedef struct takeover_job {
    uv_work_t req;
    tsess *t;
    char sandbox[SG_NAME_MAX + 1];
    int r;
    sg_err err;
} takeover_job;

static void takeover_work(uv_work_t *req)
{
    takeover_job *j = req->data;
    j->r = sg_revive_takeover(j->sandbox, "serve", &j->err);
}

static void takeover_done(uv_work_t *req, int status)
{
    sg_autofree takeover_job *j = req->data;
    tsess *t = j->t;
    t->handles--;
    t->takeover_pending = false;
    t->took_over = true;
    if (!t->wsi || t->closing) /* the browser left meanwhile */
        return serve_sess_free_if_done(t);
    if (status < 0 || j->r < 0)
        return serve_refuse(t, status < 0 ? "the takeover of the sandbox was cancelled" : j->err.msg);
    t->deadline = uv_now(t->srv->loop) + SG_SERVE_CONNECT_TIMEOUT_S * 1000;
    connect_try(t);
}

static bool takeover_running(const sg_serve *srv, const char *sandbox)
{
    for (const tsess *o = srv->sessions; o; o = o->next)
        if (o->takeover_pending && strcmp(o->sandbox, sandbox) == 0)
            return true;
    return false;
}

/* No supervisor listens: one takeover per sandbox at a time runs on the
 * thread pool (it waits for the new supervisor); the sandbox's other
 * terminals wait for it on their timers. */
static void takeover(tsess *t, const sg_err *why)
{
    sg_serve *srv = t->srv;
    if (t->took_over)
        return serve_refuse(t, why->msg);
    if (takeover_running(srv, t->sandbox)) {
        t->deadline = uv_now(srv->loop) + SG_SERVE_CONNECT_TIMEOUT_S * 1000;
        uv_timer_start(&t->timer, on_retry, CONNECT_RETRY_MS, 0);
        return;
    }
    takeover_job *j = calloc(1, sizeof *j);
    if (!j)
        return serve_refuse(t, "out of memory");
    j->t = t;
    j->req.data = j;
    snprintf(j->sandbox, sizeof j->sandbox, "%s", t->sandbox);
    if (uv_queue_work(srv->loop, &j->req, takeover_work, takeover_done) < 0) {
        free(j);
        return serve_refuse(t, "cannot start the sandbox's takeover");
    }
    t->handles++;
    t->takeover_pending = true;
}

static void connect_try(tsess *t)
{
    sg_err err = {0};
    sg_revive_state st;
    int fd = sg_revive_connect_nb(t->sandbox, &st, &err);
    switch (st) {
    case SG_REVIVE_CONNECTED:
    case SG_REVIVE_IN_PROGRESS:
        return adopt_fd(t, fd, st == SG_REVIVE_CONNECTED);
    case SG_REVIVE_BUSY:
        if (uv_now(t->srv->loop) >= t->deadline)
            return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN, BUSY_REASON);
        uv_timer_start(&t->timer, on_retry, CONNECT_RETRY_MS, 0);
        return;
    case SG_REVIVE_DEAD:
        return takeover(t, &err);
    default:
        return serve_refuse(t, err.msg);
    }
}

void serve_shell_open(tsess *t)
{
    uv_timer_stop(&t->timer);
    t->deadline = uv_now(t->srv->loop) + SG_SERVE_CONNECT_TIMEOUT_S * 1000;
    connect_try(t);
}

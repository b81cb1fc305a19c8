/* terminal: the browser's terminal into a sandbox (see terminal.h). */
#include "serve/terminal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libwebsockets.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "wire/revive.h"
#include "ingest/http.h"
#include "ingest/ingest.h"
#include "state/state.h"
#include "wire/ctl.h"
#include "wire/seqpacket.h"
#include "wire/token.h"

#define TEXT_MAX 4096               /* a text message from the browser */
#define OUT_PAUSE (1u << 20)        /* queued for the browser: stop reading the sandbox */
#define OUT_RESUME (OUT_PAUSE / 2)
#define IN_PAUSE (256u * 1024)      /* queued for the sandbox: stop reading the browser */
#define IN_CHUNK (32u * 1024)       /* one STDIN message */
#define WINSZ_MAX 1000              /* rows or columns */
#define TERM_ENV "TERM=xterm-256color"
#define SHELL_LAUNCHER "/etc/sandglass/shell" /* sandbox/rootfs.c writes it */
#define WS_PATH "/v1/terminal"

typedef struct outmsg {
    struct outmsg *next;
    bool text;
    size_t len;
    unsigned char data[]; /* LWS_PRE of headroom, then len bytes */
} outmsg;

typedef struct tsess tsess;

struct sg_serve {
    uv_loop_t *loop;
    struct lws_context *ctx;
    int port;
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    char web_dir[512];
    tsess *sessions; /* every WebSocket connection, for the limits and stop */
    unsigned nconns;
    bool stopping;
    char rbuf[SG_CTL_CHUNK + 1024]; /* one message from a supervisor */
};

/* One browser terminal. Its memory is ours, not lws's: its uv handles
 * close asynchronously and outlive the wsi. */
struct tsess {
    sg_serve *srv;
    struct lws *wsi;   /* NULL once lws has closed the connection */
    tsess *next, *prev;
    char sandbox[SG_NAME_MAX + 1];
    bool authed;
    int ctl;           /* the exec's connection to the supervisor, -1 before */
    uv_poll_t poll;
    bool poll_on;      /* initialized (closed with the session) */
    int poll_events;
    uv_timer_t auth_timer;
    int handles;       /* uv handles still open */
    char text[TEXT_MAX + 1];
    size_t text_len;
    bool text_over;
    outmsg *qhead, *qtail;
    size_t qbytes;
    sg_buf in;         /* keystrokes not yet taken by the supervisor */
    sg_ctl_winsz winsz;
    bool winsz_pending;
    bool rx_off;       /* lws_rx_flow_control(wsi, 0) in force */
    bool closing;      /* close once the queue is sent */
    bool close_sent;
    uint16_t close_code;
    char close_reason[120];
};

/* ---- sessions ------------------------------------------------------------ */

static unsigned sessions_of(const sg_serve *srv, const char *sandbox)
{
    unsigned n = 0;
    for (const tsess *t = srv->sessions; t; t = t->next)
        n += t->authed && strcmp(t->sandbox, sandbox) == 0;
    return n;
}

static void sess_free_if_done(tsess *t)
{
    if (t->wsi || t->handles > 0)
        return;
    for (outmsg *m = t->qhead, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    sg_buf_free(&t->in);
    free(t);
}

static void on_handle_closed(uv_handle_t *h)
{
    tsess *t = h->data;
    if (h == (uv_handle_t *)&t->poll && t->ctl >= 0) {
        close(t->ctl);
        t->ctl = -1;
    }
    t->handles--;
    sess_free_if_done(t);
}

/* The connection is gone (lws closed it): the supervisor sees its exec's
 * connection close and ends the shell, as when a CLI goes away. */
static void sess_detach(tsess *t)
{
    sg_serve *srv = t->srv;
    if (t->prev)
        t->prev->next = t->next;
    else if (srv->sessions == t)
        srv->sessions = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->next = t->prev = NULL;
    srv->nconns--;
    t->wsi = NULL;
    if (t->poll_on) {
        t->poll_on = false;
        uv_close((uv_handle_t *)&t->poll, on_handle_closed);
    } else if (t->ctl >= 0) {
        close(t->ctl);
        t->ctl = -1;
    }
    if (!uv_is_closing((uv_handle_t *)&t->auth_timer))
        uv_close((uv_handle_t *)&t->auth_timer, on_handle_closed);
    sess_free_if_done(t);
}

static int queue_out(tsess *t, bool text, const void *p, size_t len)
{
    outmsg *m = malloc(sizeof *m + LWS_PRE + len);
    if (!m)
        return -1;
    m->next = NULL;
    m->text = text;
    m->len = len;
    memcpy(m->data + LWS_PRE, p, len);
    if (t->qtail)
        t->qtail->next = m;
    else
        t->qhead = m;
    t->qtail = m;
    t->qbytes += len;
    if (t->wsi)
        lws_callback_on_writable(t->wsi);
    return 0;
}

static void queue_json(tsess *t, json_t *j)
{
    sg_autojson json_t *o = j;
    sg_autofree char *s = o ? sg_json_dump(o) : NULL;
    if (s)
        queue_out(t, true, s, strlen(s));
}

/* Ends the session once everything queued is sent: code 1000 for an end,
 * 1008 with the reason for a refusal. */
static void close_after(tsess *t, uint16_t code, const char *reason)
{
    if (t->closing)
        return;
    t->closing = true;
    t->close_code = code;
    snprintf(t->close_reason, sizeof t->close_reason, "%s", reason);
    if (t->poll_on) {
        uv_poll_stop(&t->poll);
        t->poll_events = 0;
    }
    if (t->wsi)
        lws_callback_on_writable(t->wsi);
}

static void refuse(tsess *t, const char *why)
{
    queue_json(t, json_pack("{s:s}", "error", why));
    close_after(t, LWS_CLOSE_STATUS_POLICY_VIOLATION, why);
}

/* ---- the supervisor's side ----------------------------------------------- */

static void on_ctl(uv_poll_t *h, int status, int events);

static void poll_update(tsess *t)
{
    if (!t->poll_on || t->closing)
        return;
    int want = 0;
    if (t->qbytes < OUT_PAUSE)
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
 * is gone. */
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
    memmove(t->in.data, t->in.data + off, t->in.len - off);
    t->in.len -= off;
    if (t->in.data)
        t->in.data[t->in.len] = '\0';
    if (t->rx_off && t->in.len < IN_PAUSE / 2 && t->wsi) {
        t->rx_off = false;
        lws_rx_flow_control(t->wsi, 1);
    }
    return 0;
}

/* One message from the supervisor; false when the exchange is over. */
static bool ctl_message(tsess *t, uint8_t type, const char *buf, ssize_t n)
{
    switch (type) {
    case SG_CTL_STDOUT:
    case SG_CTL_STDERR: /* the supervisor's own lines, e.g. why it killed */
        if (queue_out(t, false, buf, (size_t)n) < 0)
            refuse(t, "out of memory");
        return true;
    case SG_CTL_EXIT: {
        int32_t code = 0;
        if (n == (ssize_t)sizeof code)
            memcpy(&code, buf, sizeof code);
        queue_json(t, json_pack("{s:i}", "exit", (int)code));
        close_after(t, LWS_CLOSE_STATUS_NORMAL, "the shell ended");
        return false;
    }
    case SG_CTL_ERROR: {
        sg_err e = {0};
        sg_autojson json_t *j = sg_json_parse(buf, (size_t)n, &e);
        const char *msg = json_string_value(json_object_get(j, "error"));
        refuse(t, msg ? msg : "the supervisor refused the shell");
        return false;
    }
    case SG_CTL_RESULT_PART:
        return true;
    default: /* RESULT, or a type this relay does not know */
        close_after(t, LWS_CLOSE_STATUS_NORMAL, "the shell ended");
        return false;
    }
}

static void on_ctl(uv_poll_t *h, int status, int events)
{
    tsess *t = h->data;
    if (status < 0) {
        refuse(t, "lost the connection to the sandbox's supervisor");
        return;
    }
    if ((events & UV_WRITABLE) && ctl_flush(t) < 0) {
        refuse(t, "the sandbox's supervisor went away");
        return;
    }
    if (events & UV_READABLE) {
        char *buf = t->srv->rbuf;
        /* A few messages a turn, so that one busy shell does not hold the loop. */
        for (int i = 0; i < 16 && !t->closing && t->qbytes < OUT_PAUSE; i++) {
            uint8_t type = 0;
            ssize_t n = sg_seqpacket_recv_typed(t->ctl, &type, buf, sizeof t->srv->rbuf, NULL, NULL);
            if (n == -EAGAIN)
                break;
            if (n < 0 || type == 0) {
                refuse(t, "the sandbox's supervisor closed the connection (the sandbox was destroyed?)");
                return;
            }
            if (!ctl_message(t, type, buf, n))
                return;
        }
    }
    poll_update(t);
}

/* The tty exec of the sandbox's shell launcher, as `sandglass shell` asks. */
static int start_shell(tsess *t, const sg_ctl_winsz *ws, sg_err *err)
{
    sg_autoclose int fd = sg_revive_connect(t->sandbox, "serve", err);
    if (fd < 0)
        return -1;
    sg_autojson json_t *req = json_pack("{s:s, s:[s, s], s:{s:i, s:i}, s:[s], s:s}", "op", "exec",
        "argv", "/bin/sh", SHELL_LAUNCHER, "tty", "rows", (int)ws->rows, "cols", (int)ws->cols,
        "env", TERM_ENV, "result", "code");
    sg_autofree char *body = req ? sg_json_dump(req) : NULL;
    if (!body)
        return sg_err_set(err, ENOMEM, "out of memory");
    int r = sg_seqpacket_send_typed(fd, SG_CTL_REQ, body, strlen(body), NULL, 0);
    if (r < 0)
        return sg_err_set(err, -r, "cannot reach the sandbox's supervisor: %s", strerror(-r));
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
        return sg_err_sys(err, "fcntl");
    if (uv_poll_init(t->srv->loop, &t->poll, fd) < 0)
        return sg_err_set(err, EIO, "cannot watch the supervisor's connection");
    t->ctl = fd;
    fd = -1;
    t->poll.data = t;
    t->poll_on = true;
    t->handles++;
    poll_update(t);
    return 0;
}

/* ---- the browser's side -------------------------------------------------- */

/* rows and cols of obj, each an integer in 1..WINSZ_MAX. */
static bool parse_winsz(json_t *obj, sg_ctl_winsz *ws)
{
    json_t *r = json_object_get(obj, "rows"), *c = json_object_get(obj, "cols");
    if (!json_is_integer(r) || !json_is_integer(c))
        return false;
    json_int_t rv = json_integer_value(r), cv = json_integer_value(c);
    if (rv < 1 || rv > WINSZ_MAX || cv < 1 || cv > WINSZ_MAX)
        return false;
    ws->rows = (uint16_t)rv;
    ws->cols = (uint16_t)cv;
    return true;
}

/* The first message: the token and the size. */
static void on_auth(tsess *t, json_t *j)
{
    sg_serve *srv = t->srv;
    const char *token = json_string_value(json_object_get(j, "token"));
    sg_ctl_winsz ws;
    if (!token || !parse_winsz(j, &ws) || json_object_size(j) != 3)
        return refuse(t, "the first message is {\"token\": T, \"rows\": R, \"cols\": C}");
    sg_token_claims cl;
    sg_err err = {0};
    if (sg_token_verify_terminal(srv->secret, token, (int64_t)time(NULL), &cl, &err) < 0)
        return refuse(t, err.msg);
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(cl.sandbox, &m, &err) < 0)
        return refuse(t, "no such sandbox on this host");
    bool same = strcmp(m.learner, cl.learner) == 0 && m.task && strcmp(m.task, cl.task) == 0;
    sg_sandbox_meta_clear(&m);
    if (!same)
        return refuse(t, "the token's learner or task is not the sandbox's");
    if (sessions_of(srv, cl.sandbox) >= SG_SERVE_PER_SANDBOX)
        return refuse(t, "too many terminals open on this sandbox");
    snprintf(t->sandbox, sizeof t->sandbox, "%s", cl.sandbox);
    if (start_shell(t, &ws, &err) < 0)
        return refuse(t, err.msg);
    t->authed = true;
    uv_timer_stop(&t->auth_timer);
}

static void on_text(tsess *t)
{
    sg_err err = {0};
    sg_autojson json_t *j = sg_json_parse(t->text, t->text_len, &err);
    if (!json_is_object(j))
        return refuse(t, "a text message is a JSON object");
    if (!t->authed)
        return on_auth(t, j);
    json_t *rs = json_object_get(j, "resize");
    sg_ctl_winsz ws;
    if (!rs || json_object_size(j) != 1 || !parse_winsz(rs, &ws) || json_object_size(rs) != 2)
        return refuse(t, "after the token, a text message is {\"resize\": {\"rows\": R, \"cols\": C}}");
    t->winsz = ws;
    t->winsz_pending = true;
    poll_update(t);
}

static int on_receive(tsess *t, const void *in, size_t len)
{
    if (t->closing)
        return 0;
    struct lws *wsi = t->wsi;
    bool final = lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0;
    if (lws_frame_is_binary(wsi)) {
        if (!t->authed) {
            refuse(t, "send the token first");
            return 0;
        }
        if (sg_buf_append(&t->in, in, len) < 0) {
            refuse(t, "out of memory");
            return 0;
        }
        if (t->in.len >= IN_PAUSE && !t->rx_off) {
            t->rx_off = true;
            lws_rx_flow_control(wsi, 0);
        }
        poll_update(t);
        return 0;
    }
    if (t->text_len + len > TEXT_MAX)
        t->text_over = true;
    else {
        memcpy(t->text + t->text_len, in, len);
        t->text_len += len;
    }
    if (!final)
        return 0;
    if (t->text_over)
        refuse(t, "a text message is at most 4096 bytes");
    else
        on_text(t);
    t->text_len = 0;
    t->text_over = false;
    return 0;
}

static void on_auth_timeout(uv_timer_t *h)
{
    tsess *t = h->data;
    if (!t->authed)
        refuse(t, "no token within 5 s");
}

/* Sends one queued message, or the close frame once the queue is empty. */
static int on_writeable(tsess *t)
{
    struct lws *wsi = t->wsi;
    outmsg *m = t->qhead;
    if (m) {
        t->qhead = m->next;
        if (!t->qhead)
            t->qtail = NULL;
        t->qbytes -= m->len;
        int n = lws_write(wsi, m->data + LWS_PRE, m->len, m->text ? LWS_WRITE_TEXT : LWS_WRITE_BINARY);
        free(m);
        if (n < 0)
            return -1;
        if (t->qhead || t->closing)
            lws_callback_on_writable(wsi);
        if (t->qbytes < OUT_RESUME)
            poll_update(t);
        return 0;
    }
    if (!t->closing || t->close_sent)
        return 0;
    /* Outside RECEIVE lws would close without the reason: the close frame
     * is written here (4: lws's internal LWS_WRITE_CLOSE), as the ingest does. */
    t->close_sent = true;
    unsigned char cb[LWS_PRE + 2 + sizeof t->close_reason];
    size_t rl = strnlen(t->close_reason, 120);
    cb[LWS_PRE] = (unsigned char)(t->close_code >> 8);
    cb[LWS_PRE + 1] = (unsigned char)(t->close_code & 0xff);
    memcpy(cb + LWS_PRE + 2, t->close_reason, rl);
    if (lws_write(wsi, cb + LWS_PRE, rl + 2, (enum lws_write_protocol)4) < 0)
        return -1;
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, SG_SERVE_AUTH_TIMEOUT_S);
    return 0;
}

static int handshake_ok(sg_serve *srv, struct lws *wsi)
{
    char uri[64];
    if (srv->stopping || srv->nconns >= SG_SERVE_CONNS)
        return -1;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0 ||
        lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 || strcmp(uri, WS_PATH) != 0)
        return -1;
    return 0;
}

static int cb_terminal(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    sg_serve *srv = lws_context_user(lws_get_context(wsi));
    tsess **slot = user;
    tsess *t = slot ? *slot : NULL;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return handshake_ok(srv, wsi);
    case LWS_CALLBACK_ESTABLISHED:
        t = calloc(1, sizeof *t);
        if (!t)
            return -1;
        t->srv = srv;
        t->wsi = wsi;
        t->ctl = -1;
        t->next = srv->sessions;
        if (t->next)
            t->next->prev = t;
        srv->sessions = t;
        srv->nconns++;
        uv_timer_init(srv->loop, &t->auth_timer);
        t->auth_timer.data = t;
        t->handles++;
        uv_timer_start(&t->auth_timer, on_auth_timeout, SG_SERVE_AUTH_TIMEOUT_S * 1000, 0);
        *slot = t;
        return 0;
    case LWS_CALLBACK_RECEIVE:
        return t ? on_receive(t, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return t ? on_writeable(t) : 0;
    case LWS_CALLBACK_CLOSED:
        if (t) {
            *slot = NULL;
            sess_detach(t);
        }
        return 0;
    default:
        return 0;
    }
}

/* ---- HTTP ---------------------------------------------------------------- */


/* The page's files: name -> (path under the web directory, type). */
static const struct {
    const char *uri, *path, *mime;
} web_files[] = {
    {"/", "terminal.html", "text/html; charset=utf-8"},
    {"/terminal.js", "terminal.js", "text/javascript"},
    {"/xterm.js", "node_modules/@xterm/xterm/lib/xterm.js", "text/javascript"},
    {"/xterm.css", "node_modules/@xterm/xterm/css/xterm.css", "text/css"},
    {"/addon-fit.js", "node_modules/@xterm/addon-fit/lib/addon-fit.js", "text/javascript"},
};

/* Only the page's own script and styles, only its own WebSocket. */
static const char web_headers[] =
    "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self'\x0d\x0a"
    "x-content-type-options: nosniff\x0d\x0a"
    "referrer-policy: no-referrer\x0d\x0a";

static int http_file(sg_serve *srv, struct lws *wsi, const char *rel, const char *mime)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", srv->web_dir, rel);
    int n = lws_serve_http_file(wsi, path, mime, web_headers, (int)strlen(web_headers));
    if (n < 0 || (n > 0 && lws_http_transaction_completed(wsi)))
        return -1;
    return 0;
}

static int cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
    sg_serve *srv = lws_context_user(lws_get_context(wsi));
    sg_http_req *req = user;
    (void)len;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return -1; /* WebSockets only as SG_SERVE_PROTOCOL */
    case LWS_CALLBACK_HTTP: {
        const char *uri = in;
        memset(req, 0, sizeof *req);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED,
                             json_pack("{s:s}", "error", "only GET is supported"));
        if (strcmp(uri, "/healthz") == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                             json_pack("{s:b, s:i}", "ok", 1, "terminals", (int)srv->nconns));
        if (strcmp(uri, WS_PATH) == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                             json_pack("{s:s}", "error", "WebSocket upgrade required (" SG_SERVE_PROTOCOL ")"));
        for (size_t i = 0; i < SG_ARRAY_LEN(web_files); i++)
            if (strcmp(uri, web_files[i].uri) == 0)
                return http_file(srv, wsi, web_files[i].path, web_files[i].mime);
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, json_pack("{s:s}", "error", "not found"));
    }
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return sg_http_writeable(wsi, req);
    case LWS_CALLBACK_HTTP_FILE_COMPLETION:
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        sg_http_req_release(req);
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"http", cb_http, sizeof(sg_http_req), 0, 0, NULL, 0},
    {SG_SERVE_PROTOCOL, cb_terminal, sizeof(tsess *), TEXT_MAX, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

sg_serve *sg_serve_start(uv_loop_t *loop, const sg_serve_opts *opts, sg_err *err)
{
    char page[600];
    snprintf(page, sizeof page, "%s/terminal.html", opts->web_dir);
    if (access(page, R_OK) < 0) {
        sg_err_set(err, ENOENT, "the terminal page %s is missing (--web DIR)", page);
        return NULL;
    }
    snprintf(page, sizeof page, "%s/node_modules/@xterm/xterm/lib/xterm.js", opts->web_dir);
    if (access(page, R_OK) < 0) {
        sg_err_set(err, ENOENT, "xterm.js is missing: run 'npm install' in %s", opts->web_dir);
        return NULL;
    }
    sg_serve *srv = calloc(1, sizeof *srv);
    if (!srv) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    srv->loop = loop;
    snprintf(srv->web_dir, sizeof srv->web_dir, "%s", opts->web_dir);
    if (sg_token_secret_load(opts->secret_path, srv->secret, err) < 0 ||
        (opts->port > 0 && sg_ingest_bind_probe(opts->host, opts->port, err) < 0)) {
        free(srv);
        return NULL;
    }
    lws_set_log_level(getenv("SG_SERVE_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE : LLL_ERR,
                      sg_log_lws);
    struct lws_context_creation_info info;
    void *foreign_loops[1] = {loop};
    sg_http_server_info(&info, foreign_loops, opts->host, opts->port, protocols, srv,
                        SG_SERVE_AUTH_TIMEOUT_S);
    srv->ctx = lws_create_context(&info);
    if (!srv->ctx) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d", opts->host, opts->port);
        free(srv);
        return NULL;
    }
    srv->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(srv->ctx, "default"));
    return srv;
}

int sg_serve_port(const sg_serve *s)
{
    return s->port;
}

void sg_serve_stop(sg_serve *s)
{
    s->stopping = true;
    for (tsess *t = s->sessions; t; t = t->next)
        close_after(t, LWS_CLOSE_STATUS_GOINGAWAY, "sandglass serve is stopping");
    /* Inside the loop: lws closes its handles; the loop then drains, and
     * sg_serve_free destroys the context a second time (as the ingest). */
    if (s->ctx)
        lws_context_destroy(s->ctx);
}

void sg_serve_free(sg_serve *s)
{
    if (!s)
        return;
    if (s->ctx)
        lws_context_destroy(s->ctx);
    memset(s->secret, 0, sizeof s->secret);
    free(s);
}

/* terminal: the browser's terminal into a sandbox (see terminal.h). */
#include "serve/terminal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "ingest/http.h"
#include "ingest/ingest.h"
#include "ingest/tls.h"
#include "serve/serve_internal.h"
#include "state/state.h"

#define WS_PATH "/v1/terminal"

/* ---- sessions ------------------------------------------------------------ */

void serve_sess_free_if_done(tsess *t)
{
    if (t->wsi || t->handles > 0)
        return;
    for (outmsg *m = t->qhead, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    sg_buf_free(&t->in);
    sg_ctl_call_free(&t->call);
    free(t->ring);
    free(t);
}

void serve_on_handle_closed(uv_handle_t *h)
{
    tsess *t = h->data;
    if (h == (uv_handle_t *)&t->poll && t->ctl >= 0) {
        close(t->ctl);
        t->ctl = -1;
    }
    t->handles--;
    serve_sess_free_if_done(t);
}

/* The connection is gone (lws closed it): the supervisor sees its exec's
 * connection close and ends the shell, as when a CLI goes away. */
static void sess_detach(tsess *t)
{
    sg_serve *srv = t->srv;
    serve_watch_end(t);
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
        uv_close((uv_handle_t *)&t->poll, serve_on_handle_closed);
    } else if (t->ctl >= 0) {
        close(t->ctl);
        t->ctl = -1;
    }
    if (!uv_is_closing((uv_handle_t *)&t->timer))
        uv_close((uv_handle_t *)&t->timer, serve_on_handle_closed);
    serve_sess_free_if_done(t);
}

int serve_queue_out(tsess *t, bool text, const void *p, size_t len)
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

void serve_queue_msg(tsess *t, const sg_termws_msg *m)
{
    size_t len = 0;
    sg_autofree char *s = sg_termws_encode(m, &len);
    if (s)
        serve_queue_out(t, true, s, len);
}

void serve_close_after(tsess *t, uint16_t code, const char *reason)
{
    if (t->closing)
        return;
    t->closing = true;
    serve_watch_end(t);
    t->close_code = code;
    snprintf(t->close_reason, sizeof t->close_reason, "%s", reason);
    if (t->poll_on) {
        uv_poll_stop(&t->poll);
        t->poll_events = 0;
    }
    uv_timer_stop(&t->timer);
    if (t->wsi)
        lws_callback_on_writable(t->wsi);
}

void serve_refuse_code(tsess *t, uint16_t code, const char *why)
{
    if (t->closing)
        return;
    sg_log(SG_LOG_INFO, "closed the connection from %s%s%s (%u): %s", t->addr, t->sandbox[0] ? " to sandbox " : "",
           t->sandbox, code, why);
    serve_queue_msg(t, &(sg_termws_msg){.kind = SG_TERMWS_ERROR, .error = (char *)why});
    serve_close_after(t, code, why);
}

void serve_refuse(tsess *t, const char *why)
{
    serve_refuse_code(t, LWS_CLOSE_STATUS_POLICY_VIOLATION, why);
}

/* ---- the limits ---------------------------------------------------------- */

/* What the sessions hold: terminal slots (a good token, the shell open or
 * being opened, until its connection is gone), connections without a
 * token yet, and each of both from one address; a session refused before
 * its shell started holds only its connection while it closes. */
typedef struct slots {
    unsigned terminals, unauth, addr_conns, addr_unauth, sandbox;
} slots;

static slots slots_of(const sg_serve *srv, const char *addr, const char *sandbox)
{
    slots n = {0};
    for (const tsess *t = srv->sessions; t; t = t->next) {
        bool here = addr && strcmp(t->addr, addr) == 0, unauth = !t->authed && !t->closing;
        bool term = t->authed && !t->watcher && (t->shell_on || !t->closing);
        n.terminals += term;
        n.unauth += unauth;
        n.addr_conns += here;
        n.addr_unauth += here && unauth;
        n.sandbox += term && sandbox && strcmp(t->sandbox, sandbox) == 0;
    }
    return n;
}

static void peer_addr(struct lws *wsi, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!lws_get_peer_simple(wsi, buf, len))
        snprintf(buf, len, "?");
}

/* A new connection, before lws answers its upgrade: refused here (no
 * reason: nothing is open yet to carry one) only past the caps on
 * connections in all, and from one address. */
static int handshake_ok(sg_serve *srv, struct lws *wsi)
{
    char uri[64], addr[SERVE_ADDR_MAX];
    if (srv->stopping)
        return -1;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0 ||
        lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 || strcmp(uri, WS_PATH) != 0)
        return -1;
    peer_addr(wsi, addr, sizeof addr);
    slots n = slots_of(srv, addr, NULL);
    if (srv->nconns >= srv->lim.max_terminals + srv->lim.max_unauth ||
        n.addr_conns >= srv->lim.max_conns_per_addr) {
        /* 1, 2, 4, ...: a flood does not flood the log. */
        srv->refused++;
        if ((srv->refused & (srv->refused - 1)) == 0)
            sg_log(SG_LOG_WARN, "refused a WebSocket from %s: %s (%llu so far)", addr,
                   n.addr_conns >= srv->lim.max_conns_per_addr ? "too many from one address" : "too many in all",
                   (unsigned long long)srv->refused);
        return -1;
    }
    return 0;
}

/* A connection opened: without a token it holds no terminal slot, only one
 * of the bounded places for a connection still to authenticate. */
static void admit(tsess *t)
{
    sg_serve *srv = t->srv;
    slots n = slots_of(srv, t->addr, NULL);
    n.unauth--; /* t itself */
    n.addr_unauth--;
    if (n.addr_unauth >= srv->lim.max_unauth_per_addr)
        serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN,
                          "too many connections from your address are waiting to send a token: try again");
    else if (n.unauth >= srv->lim.max_unauth)
        serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN,
                          "too many connections are waiting to send a token: try again");
}

/* ---- the browser's side -------------------------------------------------- */

/* The first message: the token and the size. A good token takes a
 * terminal slot at once, while the shell is still being opened: the
 * per-sandbox limit counts connections still reaching a supervisor. */
static void on_auth(tsess *t, const sg_termws_msg *auth)
{
    sg_serve *srv = t->srv;
    sg_ctl_winsz ws = {auth->rows, auth->cols};
    sg_token_claims cl;
    sg_err err = {0};
    /* A watch token watches; any other kind is refused as a terminal
     * token's verifier says why. */
    bool watch = sg_token_verify_watch(srv->secret, auth->token, (int64_t)time(NULL), &cl, &err) == 0;
    if (!watch && sg_token_verify_terminal(srv->secret, auth->token, (int64_t)time(NULL), &cl, &err) < 0)
        return serve_refuse(t, err.msg);
    if (serve_token_revoked(srv, cl.id, err.msg, sizeof err.msg))
        return serve_refuse(t, err.msg);
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(cl.sandbox, &m, &err) < 0)
        return serve_refuse(t, "no such sandbox on this host");
    bool same = strcmp(m.learner, cl.learner) == 0 && m.task && strcmp(m.task, cl.task) == 0;
    sg_sandbox_meta_clear(&m);
    if (!same)
        return serve_refuse(t, "the token's learner or task is not the sandbox's");
    if (watch)
        return serve_watch_open(t, cl.sandbox, cl.id);
    slots n = slots_of(srv, NULL, cl.sandbox);
    if (n.sandbox >= SG_SERVE_PER_SANDBOX)
        return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN, "too many terminals open on this sandbox");
    if (n.terminals >= srv->lim.max_terminals)
        return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN, "too many terminals open on this host: try again");
    snprintf(t->sandbox, sizeof t->sandbox, "%s", cl.sandbox);
    snprintf(t->token_id, sizeof t->token_id, "%s", cl.id);
    t->start_ws = ws;
    t->authed = true;
    serve_shell_open(t);
}

static void on_text(tsess *t)
{
    sg_err err = {0};
    sg_termws_msg m;
    if (t->watcher)
        return serve_watch_input(t, true);
    if (sg_termws_decode_browser(t->text, t->text_len, t->authed, &m, &err) < 0)
        return serve_refuse(t, err.msg);
    if (m.kind == SG_TERMWS_AUTH) {
        on_auth(t, &m);
        sg_termws_msg_free(&m);
        return;
    }
    t->winsz = (sg_ctl_winsz){m.rows, m.cols};
    t->winsz_pending = true;
    serve_poll_update(t);
}

/* Keystrokes are queued for the supervisor; at SERVE_IN_PAUSE the browser
 * is no longer read until the supervisor has taken half of them. */
static void on_keys(tsess *t, const void *in, size_t len)
{
    if (!t->authed)
        return serve_refuse(t, "send the token first");
    if (t->watcher)
        return serve_watch_input(t, false);
    if (sg_buf_append(&t->in, in, len) < 0)
        return serve_refuse(t, "out of memory");
    if (t->in.len >= SERVE_IN_PAUSE && !t->rx_off) {
        t->rx_off = true;
        lws_rx_flow_control(t->wsi, 0);
    }
    serve_poll_update(t);
}

static int on_receive(tsess *t, const void *in, size_t len)
{
    if (t->closing)
        return 0;
    struct lws *wsi = t->wsi;
    bool final = lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0;
    if (lws_frame_is_binary(wsi)) {
        on_keys(t, in, len);
        return 0;
    }
    if (t->text_len + len > SERVE_TEXT_MAX)
        t->text_over = true;
    else {
        memcpy(t->text + t->text_len, in, len);
        t->text_len += len;
    }
    if (!final)
        return 0;
    if (t->text_over)
        serve_refuse(t, "a text message is at most 4096 bytes");
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
        serve_refuse(t, "no token within 5 s");
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
        if (t->qbytes < SERVE_OUT_RESUME)
            serve_poll_update(t);
        return 0;
    }
    if (!t->closing || t->close_sent)
        return 0;
    /* Outside RECEIVE lws would close without the reason: the close frame
     * is written here (4: lws's internal LWS_WRITE_CLOSE), as the ingest does. */
    t->close_sent = true;
    unsigned char cb[LWS_PRE + 2 + sizeof t->close_reason];
    size_t rl = strnlen(t->close_reason, sizeof t->close_reason);
    cb[LWS_PRE] = (unsigned char)(t->close_code >> 8);
    cb[LWS_PRE + 1] = (unsigned char)(t->close_code & 0xff);
    memcpy(cb + LWS_PRE + 2, t->close_reason, rl);
    if (lws_write(wsi, cb + LWS_PRE, rl + 2, (enum lws_write_protocol)4) < 0)
        return -1;
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, SG_SERVE_AUTH_TIMEOUT_S);
    return 0;
}

static tsess *sess_new(sg_serve *srv, struct lws *wsi)
{
    tsess *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->srv = srv;
    t->wsi = wsi;
    t->ctl = -1;
    peer_addr(wsi, t->addr, sizeof t->addr);
    t->next = srv->sessions;
    if (t->next)
        t->next->prev = t;
    srv->sessions = t;
    srv->nconns++;
    uv_timer_init(srv->loop, &t->timer);
    t->timer.data = t;
    t->handles++;
    uv_timer_start(&t->timer, on_auth_timeout, SG_SERVE_AUTH_TIMEOUT_S * 1000, 0);
    admit(t);
    return t;
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
        *slot = t = sess_new(srv, wsi);
        return t ? 0 : -1;
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


/* The page's files: name -> (path under the web directory, type). The web
 * directory is laid out as meson.build stages and installs it: web/'s own
 * files, and under vendor/ those from npm (scripts/stage-web.py). */
static const struct {
    const char *uri, *path, *mime;
} web_files[] = {
    {"/", "terminal.html", "text/html; charset=utf-8"},
    {"/terminal.js", "terminal.js", "text/javascript"},
    {"/xterm.js", "vendor/xterm.js", "text/javascript"},
    {"/xterm.css", "vendor/xterm.css", "text/css"},
    {"/addon-fit.js", "vendor/addon-fit.js", "text/javascript"},
};

/* Only the page's own script and styles, only its own WebSocket; never
 * inside another site's frame (which could lay itself over the terminal
 * and have the learner type into it: frame-ancestors, and X-Frame-Options
 * for browsers without it). */
static const char web_headers[] =
    "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'\x0d\x0a"
    "x-frame-options: DENY\x0d\x0a"
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
    serve_http *h = user;
    sg_http_req *req = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return -1; /* WebSockets only as SG_SERVE_PROTOCOL */
    case LWS_CALLBACK_HTTP: {
        const char *uri = in;
        memset(h, 0, sizeof *h);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0 &&
            (strcmp(uri, "/v1/abort") == 0 || strcmp(uri, "/v1/destroy") == 0))
            return serve_action_post(srv, wsi, h, uri + 4);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED,
                             json_pack("{s:s}", "error", "only GET is supported (and POST /v1/abort, /v1/destroy)"));
        if (strcmp(uri, "/healthz") == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                             json_pack("{s:b, s:i, s:i, s:i}", "ok", 1, "terminals",
                                       (int)slots_of(srv, NULL, NULL).terminals, "watchers",
                                       (int)serve_watchers(srv, NULL), "connections", (int)srv->nconns));
        if (strcmp(uri, WS_PATH) == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                             json_pack("{s:s}", "error", "WebSocket upgrade required (" SG_SERVE_PROTOCOL ")"));
        for (size_t i = 0; i < SG_ARRAY_LEN(web_files); i++)
            if (strcmp(uri, web_files[i].uri) == 0)
                return http_file(srv, wsi, web_files[i].path, web_files[i].mime);
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, json_pack("{s:s}", "error", "not found"));
    }
    case LWS_CALLBACK_HTTP_BODY:
        return h ? serve_action_body(h, in, len) : -1;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return h ? serve_action_body_done(srv, wsi, h) : -1;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return sg_http_writeable(wsi, req);
    case LWS_CALLBACK_HTTP_FILE_COMPLETION:
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (h)
            serve_action_detach(h);
        sg_http_req_release(req);
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"http", cb_http, sizeof(serve_http), 0, 0, NULL, 0},
    {SG_SERVE_PROTOCOL, cb_terminal, sizeof(tsess *), SERVE_TEXT_MAX, 0, NULL, 0},
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
    snprintf(page, sizeof page, "%s/vendor/xterm.js", opts->web_dir);
    if (access(page, R_OK) < 0) {
        sg_err_set(err, ENOENT, "xterm.js is missing from %s/vendor (the build stages it from web/node_modules: "
                   "scripts/install-deps.sh runs npm ci)", opts->web_dir);
        return NULL;
    }
    sg_serve *srv = calloc(1, sizeof *srv);
    if (!srv) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    srv->loop = loop;
    srv->lim = *opts;
    srv->lim.max_terminals = opts->max_terminals ? opts->max_terminals : SG_SERVE_CONNS;
    srv->lim.max_unauth = opts->max_unauth ? opts->max_unauth : SG_SERVE_UNAUTH;
    srv->lim.max_unauth_per_addr = opts->max_unauth_per_addr ? opts->max_unauth_per_addr
                                                               : SG_SERVE_UNAUTH_PER_ADDR;
    srv->lim.max_conns_per_addr = opts->max_conns_per_addr ? opts->max_conns_per_addr
                                                             : SG_SERVE_CONNS_PER_ADDR;
    snprintf(srv->web_dir, sizeof srv->web_dir, "%s", opts->web_dir);
    snprintf(srv->secret_path, sizeof srv->secret_path, "%s", opts->secret_path);
    snprintf(srv->cli, sizeof srv->cli, "%s", opts->cli ? opts->cli : "");
    if (sg_token_secret_load(opts->secret_path, srv->secret, err) < 0 ||
        (opts->tls_cert && sg_tls_server_check(opts->tls_cert, opts->tls_key, err) < 0) ||
        (opts->port > 0 && sg_ingest_bind_probe(opts->host, opts->port, err) < 0)) {
        free(srv);
        return NULL;
    }
    /* lws's own lines at level debug only (base/log.h: sg_log_lws). */
    bool lws_lines = getenv("SG_SERVE_DEBUG") || sg_log_enabled(SG_LOG_DEBUG);
    lws_set_log_level(lws_lines ? LLL_ERR | LLL_WARN | LLL_NOTICE : 0, sg_log_lws);
    struct lws_context_creation_info info;
    void *foreign_loops[1] = {loop};
    sg_http_server_info(&info, foreign_loops, opts->host, opts->port, protocols, srv,
                        SG_SERVE_AUTH_TIMEOUT_S);
    sg_tls_server_info(&info, opts->tls_cert, opts->tls_key);
    srv->ctx = lws_create_context(&info);
    if (!srv->ctx) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d", opts->host, opts->port);
        free(srv);
        return NULL;
    }
    srv->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(srv->ctx, "default"));
    sg_log(SG_LOG_INFO, "started (sandglass " SG_VERSION "): listening on %s:%d, secret %s, page %s", opts->host,
           srv->port, opts->secret_path, opts->web_dir);
    return srv;
}

int sg_serve_port(const sg_serve *s)
{
    return s->port;
}

int sg_serve_reload(sg_serve *s, sg_err *err)
{
    uint8_t fresh[SG_TOKEN_SECRET_LEN];
    if (sg_token_secret_load(s->secret_path, fresh, err) < 0) {
        sg_err_prefix(err, "reload: the secret");
        sg_log(SG_LOG_ERROR, "%s (the old secret is kept)", err->msg);
        return -1;
    }
    if (memcmp(fresh, s->secret, sizeof fresh) == 0) {
        sg_log(SG_LOG_INFO, "reload: the secret %s is unchanged", s->secret_path);
        return 0;
    }
    memcpy(s->secret, fresh, sizeof fresh);
    memset(fresh, 0, sizeof fresh);
    unsigned n = 0;
    for (tsess *t = s->sessions; t; t = t->next, n++) /* every one was let in by the old secret */
        serve_close_after(t, LWS_CLOSE_STATUS_POLICY_VIOLATION,
                          "the secret was replaced: a token of the new secret is needed");
    sg_log(SG_LOG_WARN, "reload: the secret %s was replaced: tokens of the old one are refused from now on; "
           "closing %u open connection(s)", s->secret_path, n);
    return 0;
}

static int id_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

bool serve_token_revoked(const sg_serve *s, const char *id, char *why, size_t why_len)
{
    if (!s->nrevoked || !bsearch(id, s->revoked, s->nrevoked, sizeof *s->revoked, id_cmp))
        return false;
    snprintf(why, why_len, "token revoked (id %s)", id);
    return true;
}

int sg_serve_set_revoked(sg_serve *s, const char *const *ids, size_t n, sg_err *err)
{
    char(*list)[SG_TOKEN_ID_LEN + 1] = n ? calloc(n, sizeof *list) : NULL;
    if (n && !list)
        return sg_err_set(err, ENOMEM, "out of memory");
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(ids[i]) == SG_TOKEN_ID_LEN) /* another length is no token's id */
            memcpy(list[kept++], ids[i], SG_TOKEN_ID_LEN + 1);
    if (kept > 1) /* the ingest sorts them; not trusted to (and no qsort of NULL) */
        qsort(list, kept, sizeof *list, id_cmp);
    free(s->revoked);
    s->revoked = list;
    s->nrevoked = kept;
    unsigned closed = 0;
    char why[64];
    for (tsess *t = s->sessions; t; t = t->next)
        if (t->authed && !t->closing && serve_token_revoked(s, t->token_id, why, sizeof why)) {
            sg_log(SG_LOG_INFO, "%s of sandbox %s from %s closed: %s", t->watcher ? "watch" : "terminal", t->sandbox,
                   t->addr, why);
            serve_refuse(t, why);
            closed++;
        }
    if (closed)
        sg_log(SG_LOG_WARN, "%u open connection(s) closed: their tokens were revoked", closed);
    return 0;
}

void sg_serve_stop(sg_serve *s)
{
    s->stopping = true;
    serve_actions_stop(s);
    for (tsess *t = s->sessions; t; t = t->next)
        serve_close_after(t, LWS_CLOSE_STATUS_GOINGAWAY, "sandglass serve is stopping");
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
    free(s->revoked);
    free(s);
}

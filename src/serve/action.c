/* action: POST /v1/abort and POST /v1/destroy, an operator's abort or
 * destroy of one of this host's sandboxes asked from another host
 * (`sandglass abort|destroy ID` where ID lives here: terminal.h).
 *
 * The request carries an action token (wire/token.h: Authorization:
 * Bearer) of the endpoint's action and the body {"sandbox": ID[,
 * "reason": TEXT][, "by": USER@HOST]} (abort's reason, 200 characters at
 * most; who asked, on which host: recorded as the action's "via",
 * "remote: USER@HOST", beside this host's operator that runs it), ID the
 * token's. The token is checked before any of the body is kept (a
 * refusal is answered once the body is in, as the ingest's POST
 * /v1/hosts does), then its nonce: a token is taken once, its nonce
 * remembered until its exp (SG_TOKEN_NONCES_MAX at once; past that the request
 * is refused with 503, never let through).
 *
 * The action itself is this host's own CLI, `sandglass abort ID --json
 * --via V [--reason R]` or `sandglass destroy ID --json --via V`
 * (opts->cli), run as a
 * child of serve on the loop, never blocking it: the answer is that
 * command's JSON (200), or its error ({"error": ...}, 409), so the asking
 * CLI prints what a local abort or destroy would. SERVE_ACTIONS children
 * at once; one that has not ended within SERVE_ACTION_TIMEOUT_S is
 * killed (504). A connection closed before the answer leaves its action
 * running to its end. */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "serve/serve_internal.h"

#define SERVE_ACTION_BODY_MAX 1024      /* the request's body */
#define SERVE_ACTION_OUT_MAX (64 * 1024) /* what the child prints, each of stdout and stderr */
#define SERVE_ACTION_REASON_MAX 200     /* as `sandglass abort --reason` */
#define SERVE_ACTION_BY_MAX 64          /* the asker's USER@HOST */

struct serve_action {
    sg_serve *srv;
    serve_action *next, *prev;
    serve_http *h;             /* the request, NULL once its connection closed */
    char what[8];              /* "abort" or "destroy" */
    char sandbox[SG_NAME_MAX + 1];
    char token_id[SG_TOKEN_ID_LEN + 1];
    uv_process_t proc;
    uv_pipe_t out, err;
    uv_timer_t timer;
    int handles;               /* open uv handles */
    sg_buf obuf, ebuf;
    bool exited, timed_out;
    int64_t status;
    int signal;
};

/* ---- the request --------------------------------------------------------- */

static json_t *error_json(const char *msg)
{
    return json_pack("{s:s}", "error", msg);
}

static void refuse_later(serve_http *h, unsigned status, const char *why)
{
    h->req.post_status = status;
    snprintf(h->why, sizeof h->why, "%s", why);
}

int serve_action_post(sg_serve *srv, struct lws *wsi, serve_http *h, const char *what)
{
    char token[SG_TOKEN_MAX + 64], clen[32] = "";
    int cn = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    if (cn <= 0 || cn >= (int)sizeof clen || lws_hdr_copy(wsi, clen, sizeof clen, WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0)
        return sg_http_answer(wsi, &h->req, HTTP_STATUS_LENGTH_REQUIRED, error_json("an action needs a Content-Length"));
    char *end = NULL;
    unsigned long long n = strtoull(clen, &end, 10);
    if (end == clen || *end || n == 0 || n > SERVE_ACTION_BODY_MAX)
        return sg_http_answer(wsi, &h->req, HTTP_STATUS_REQ_ENTITY_TOO_LARGE,
                              error_json("an action's body is 1..1024 bytes of JSON"));
    h->req.post_max = (size_t)n;
    h->req.post = malloc(h->req.post_max);
    if (!h->req.post)
        return -1;
    snprintf(h->action, sizeof h->action, "%s", what);
    sg_err err = {0};
    const char *why = sg_http_bearer(wsi, token, sizeof token,
                                     "missing action token (Authorization: Bearer <token>; sandglass abort and "
                                     "destroy make it)");
    if (why)
        refuse_later(h, HTTP_STATUS_UNAUTHORIZED, why);
    else if (sg_token_verify_action(srv->secret, token + 7, (int64_t)time(NULL), &h->claims, &err) < 0 ||
             serve_token_revoked(srv, h->claims.id, err.msg, sizeof err.msg))
        refuse_later(h, HTTP_STATUS_UNAUTHORIZED, err.msg);
    else if (strcmp(h->claims.action, what) != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "this action token may %s, not %s", h->claims.action, what);
        refuse_later(h, HTTP_STATUS_FORBIDDEN, msg);
    }
    return 0;
}

int serve_action_body(serve_http *h, const void *in, size_t len)
{
    if (!h->req.post) /* answered at once: the body is dropped */
        return 0;
    if (len > h->req.post_max - h->req.post_len)
        return -1; /* lws gives no more than Content-Length */
    memcpy(h->req.post + h->req.post_len, in, len);
    h->req.post_len += len;
    return 0;
}

/* The asker's "by": USER@HOST of [A-Za-z0-9._-] and one '@',
 * SERVE_ACTION_BY_MAX bytes at most. */
static bool by_ok(const char *by)
{
    size_t n = strlen(by), at = 0;
    if (n == 0 || n > SERVE_ACTION_BY_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = by[i];
        at += c == '@';
        if (!(c == '@' || c == '.' || c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
              (c >= 'A' && c <= 'Z')))
            return false;
    }
    return at == 1;
}

/* The body checked against the token: NULL, or what is wrong. reason:
 * the abort's, or NULL; by: who asked, or NULL. */
static const char *body_check(serve_http *h, json_t *body, const char **reason, const char **by)
{
    const char *key;
    json_t *v;
    *reason = *by = NULL;
    if (!json_is_object(body))
        return "the body must be a JSON object {\"sandbox\": ID[, \"reason\": TEXT][, \"by\": USER@HOST]}";
    json_object_foreach(body, key, v) {
        if (strcmp(key, "reason") == 0 && strcmp(h->action, "abort") == 0) {
            if (!json_is_string(v) || json_string_length(v) > SERVE_ACTION_REASON_MAX)
                return "reason: a string of 200 characters at most";
            *reason = json_string_value(v);
        } else if (strcmp(key, "by") == 0) {
            if (!json_is_string(v) || !by_ok(json_string_value(v)))
                return "by: USER@HOST, of letters, digits, '.', '_' and '-', 64 characters at most";
            *by = json_string_value(v);
        } else if (strcmp(key, "sandbox") != 0) {
            return "the body has a field this action does not take (sandbox, by, and an abort's reason)";
        }
    }
    const char *sb = json_string_value(json_object_get(body, "sandbox"));
    if (!sb)
        return "sandbox: missing, or not a string";
    if (strcmp(sb, h->claims.sandbox) != 0)
        return "wrong sandbox: the action token is for another sandbox";
    return NULL;
}

/* ---- the child ----------------------------------------------------------- */

static void on_action_closed(uv_handle_t *hd)
{
    serve_action *a = hd->data;
    if (--a->handles > 0)
        return;
    sg_buf_free(&a->obuf);
    sg_buf_free(&a->ebuf);
    free(a);
}

static void action_close(serve_action *a)
{
    if (a->prev)
        a->prev->next = a->next;
    else
        a->srv->actions = a->next;
    if (a->next)
        a->next->prev = a->prev;
    a->srv->nactions--;
    if (a->h)
        a->h->act = NULL;
    a->h = NULL;
    uv_handle_t *hs[] = {(uv_handle_t *)&a->proc, (uv_handle_t *)&a->out, (uv_handle_t *)&a->err,
                         (uv_handle_t *)&a->timer};
    for (size_t i = 0; i < SG_ARRAY_LEN(hs); i++)
        if (hs[i]->type != UV_UNKNOWN_HANDLE && !uv_is_closing(hs[i]))
            uv_close(hs[i], on_action_closed);
}

/* The child's error: its --json error's message, else its stderr's last line. */
static json_t *child_error(serve_action *a)
{
    char what[96];
    if (a->timed_out) {
        snprintf(what, sizeof what, "%s did not end within %d s (killed)", a->what, SERVE_ACTION_TIMEOUT_S);
        return error_json(what);
    }
    size_t n = a->ebuf.len;
    const char *text = a->ebuf.data ? (const char *)a->ebuf.data : "";
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    size_t start = n;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    if (start == n) {
        snprintf(what, sizeof what, "%s failed (exit %lld, signal %d)", a->what, (long long)a->status, a->signal);
        return error_json(what);
    }
    sg_err jerr;
    sg_autojson json_t *j = sg_json_parse(text + start, n - start, &jerr);
    const char *m = json_string_value(json_object_get(j, "error"));
    if (m)
        return error_json(m);
    sg_autofree char *line = strndup(text + start, n - start);
    return error_json(line ? line : "?");
}

/* Every handle's end: the answer, when its connection is still there. */
static void action_maybe_done(serve_action *a)
{
    if (!a->exited || uv_is_active((uv_handle_t *)&a->out) || uv_is_active((uv_handle_t *)&a->err))
        return;
    bool ok = a->status == 0 && a->signal == 0 && !a->timed_out;
    sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, "%s of %s (action token %s): %s", a->what, a->sandbox, a->token_id,
           ok ? "done" : "failed");
    if (a->h) {
        sg_err err;
        json_t *ans = ok && a->obuf.len ? sg_json_parse((const char *)a->obuf.data, a->obuf.len, &err) : NULL;
        if (ok && !ans)
            ans = error_json("the local command's answer is not JSON");
        struct lws *wsi = a->h->wsi;
        sg_http_answer(wsi, &a->h->req,
                       !ok && a->timed_out ? HTTP_STATUS_GATEWAY_TIMEOUT
                       : ok && json_is_object(ans) && !json_object_get(ans, "error") ? HTTP_STATUS_OK
                                                                                     : HTTP_STATUS_CONFLICT,
                       ok ? ans : child_error(a));
    }
    action_close(a);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
    static char chunk[16384];
    (void)hd;
    (void)suggested;
    *buf = uv_buf_init(chunk, sizeof chunk);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    serve_action *a = st->data;
    sg_buf *b = (uv_pipe_t *)st == &a->out ? &a->obuf : &a->ebuf;
    if (n > 0 && b->len + (size_t)n <= SERVE_ACTION_OUT_MAX)
        sg_buf_append(b, buf->base, (size_t)n);
    if (n < 0) {
        uv_read_stop(st);
        action_maybe_done(a);
    }
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    serve_action *a = p->data;
    a->exited = true;
    a->status = status;
    a->signal = sig;
    uv_timer_stop(&a->timer);
    action_maybe_done(a);
}

static void on_timeout(uv_timer_t *t)
{
    serve_action *a = t->data;
    a->timed_out = true;
    uv_process_kill(&a->proc, SIGKILL);
}

/* The local command, started: 0, or -1 with err (nothing left running). */
static int action_spawn(serve_action *a, const char *reason, const char *by, sg_err *err)
{
    sg_serve *srv = a->srv;
    /* recorded as whom the action is for: from another host, through us */
    char via[SERVE_ACTION_BY_MAX + 16];
    snprintf(via, sizeof via, "remote: %s", by ? by : "?");
    char *argv[10] = {(char *)"sandglass", a->what, a->sandbox, (char *)"--json", (char *)"--via", via, NULL};
    if (reason) {
        argv[6] = (char *)"--reason";
        argv[7] = (char *)reason;
    }
    uv_pipe_init(srv->loop, &a->out, 0);
    uv_pipe_init(srv->loop, &a->err, 0);
    uv_timer_init(srv->loop, &a->timer);
    a->out.data = a->err.data = a->timer.data = a->proc.data = a;
    a->handles = 3;
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&a->out},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&a->err},
    };
    uv_process_options_t o = {.exit_cb = on_exit_cb, .file = srv->cli, .args = argv, .stdio_count = 3,
                              .stdio = stdio};
    int r = uv_spawn(srv->loop, &a->proc, &o);
    a->handles++; /* uv_spawn initialises the handle even when it fails */
    if (r < 0)
        return sg_err_set(err, -r, "cannot run %s: %s", srv->cli, uv_strerror(r));
    uv_read_start((uv_stream_t *)&a->out, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&a->err, on_alloc, on_read);
    uv_timer_start(&a->timer, on_timeout, SERVE_ACTION_TIMEOUT_S * 1000, 0);
    return 0;
}

/* The checked request's action, started; the answer comes when it ends. */
static int action_start(sg_serve *srv, struct lws *wsi, serve_http *h, const char *reason, const char *by)
{
    if (!srv->cli[0])
        return sg_http_answer(wsi, &h->req, HTTP_STATUS_SERVICE_UNAVAILABLE,
                              error_json("this serve cannot find the sandglass program (set SANDGLASS_CLI)"));
    serve_action *a = calloc(1, sizeof *a);
    if (!a)
        return -1;
    a->srv = srv;
    a->h = h;
    h->act = a;
    h->wsi = wsi;
    snprintf(a->what, sizeof a->what, "%s", h->action);
    snprintf(a->sandbox, sizeof a->sandbox, "%s", h->claims.sandbox);
    snprintf(a->token_id, sizeof a->token_id, "%s", h->claims.id);
    a->next = srv->actions;
    if (a->next)
        a->next->prev = a;
    srv->actions = a;
    srv->nactions++;
    sg_err err = {0};
    if (action_spawn(a, reason, by, &err) < 0) {
        sg_log(SG_LOG_ERROR, "%s of %s: %s", a->what, a->sandbox, err.msg);
        action_close(a);
        return sg_http_answer(wsi, &h->req, HTTP_STATUS_INTERNAL_SERVER_ERROR, error_json(err.msg));
    }
    /* the command may take longer than lws's idle timeout */
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, SERVE_ACTION_TIMEOUT_S + 10);
    sg_log(SG_LOG_INFO, "%s of %s asked by %s (action token %s)", a->what, a->sandbox, by ? by : "?", a->token_id);
    return 0;
}

int serve_action_body_done(sg_serve *srv, struct lws *wsi, serve_http *h)
{
    if (!h->req.post) /* answered at once */
        return 0;
    unsigned status = h->req.post_status;
    const char *why = h->why[0] ? h->why : NULL;
    const char *reason = NULL, *by = NULL;
    sg_err jerr;
    sg_autojson json_t *body = NULL;
    if (!why && h->req.post_len != h->req.post_max)
        status = HTTP_STATUS_BAD_REQUEST, why = "the body is shorter than its Content-Length";
    if (!why && !(body = sg_json_parse((const char *)h->req.post, h->req.post_len, &jerr)))
        status = HTTP_STATUS_BAD_REQUEST, why = "the body is not JSON";
    if (!why && (why = body_check(h, body, &reason, &by)))
        status = strncmp(why, "wrong sandbox", 13) == 0 ? HTTP_STATUS_FORBIDDEN : HTTP_STATUS_BAD_REQUEST;
    if (!why && srv->nactions >= SERVE_ACTIONS) /* before the nonce: the token is not spent */
        status = HTTP_STATUS_SERVICE_UNAVAILABLE, why = "too many actions running: try again later";
    int t = why ? 0 : sg_token_nonce_take(&srv->nonces, h->claims.nonce, h->claims.exp, (int64_t)time(NULL));
    if (t > 0)
        status = HTTP_STATUS_UNAUTHORIZED, why = "action token already used (each is good for one request)";
    else if (t < 0)
        status = HTTP_STATUS_SERVICE_UNAVAILABLE, why = "too many actions in the last minute: try again later";
    if (why) {
        char addr[SERVE_ADDR_MAX] = "?";
        lws_get_peer_simple(wsi, addr, sizeof addr);
        sg_log(SG_LOG_WARN, "refused %s %s from %s: %s", h->action, h->claims.sandbox[0] ? h->claims.sandbox : "-",
               addr, why);
        return sg_http_answer(wsi, &h->req, status, error_json(why));
    }
    return action_start(srv, wsi, h, reason, by);
}

void serve_action_detach(serve_http *h)
{
    if (h->act)
        h->act->h = NULL;
    h->act = NULL;
}

void serve_actions_stop(sg_serve *srv)
{
    while (srv->actions) { /* each command goes on alone: an abort half done is not undone */
        serve_action *a = srv->actions;
        sg_log(SG_LOG_WARN, "stopping: the %s of %s runs on without its answer", a->what, a->sandbox);
        action_close(a);
    }
}

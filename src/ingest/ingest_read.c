/* ingest_read: the ingest's HTTP side, the read endpoints and their
 * tokens (see ingest.h, and ingest_internal.h for the files). */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"
#include "ingest/http.h"
#include "ingest/query.h"
#include "wire/event.h"

/* ---------------------------------------------------------------- HTTP */


json_t *ingest_error_json(const char *msg)
{
    return json_pack("{s:s}", "error", msg);
}

/* Optional query argument: 0 absent, 1 present (copied), -1 too long. */
static int http_arg(struct lws *wsi, const char *name_eq, char *buf, int len)
{
    return ingest_urlarg(wsi, name_eq, buf, len);
}

static int parse_i64_arg(struct lws *wsi, const char *name_eq, int64_t min, int64_t *out,
                         const char **bad)
{
    if (sg_query_i64(ingest_lws_frag, wsi, name_eq, min, out) < 0) {
        *bad = name_eq;
        return -1;
    }
    return 0;
}

/* The request's read token (Authorization: Bearer; with or_query and no
 * such header, ?token=, which a browser's EventSource must use): 0 and
 * *cl, or 1 with the 401 answer sent. Stream tokens are refused: they
 * only write. revoked_later: the revoked tokens are looked up by whoever
 * serves the request (a page read off the loop), not here. */
static int http_auth(sg_ingest *ing, struct lws *wsi, sg_http_req *req, sg_token_claims *cl,
                     bool or_query, bool revoked_later)
{
    char token[SG_TOKEN_MAX + 64];
    sg_err err;
    const char *why = sg_http_bearer(wsi, token, sizeof token,
                             "missing read token (Authorization: Bearer <token>; see sandglass token --read)");
    if (why && or_query && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) <= 0) {
        int r = http_arg(wsi, "token=", token + 7, (int)sizeof token - 7);
        why = r < 0 ? "malformed token: too long or given twice" : r == 0 ? why : NULL;
    }
    if (!why && sg_token_verify_read(ing->secret, token + 7, (int64_t)time(NULL), cl, &err) < 0)
        why = err.msg;
    unsigned status = HTTP_STATUS_UNAUTHORIZED;
    if (!why && (revoked_later || !ingest_token_revoked(ing, cl, &status, &why)))
        return 0;
    if (status == HTTP_STATUS_UNAUTHORIZED)
        ing->metrics.refusals[INGEST_REFUSED_READ_TOKEN]++;
    ingest_log_refused(wsi, "a read", status, why);
    sg_http_answer(wsi, req, status, ingest_error_json(why));
    return 1;
}

/* /v1/token: whether this ingest would take a stream token (Authorization:
 * Bearer), without opening a stream or writing anything. `sandglass create`
 * asks before a capture starts, so that a key the ingest does not share is
 * refused at once instead of failing in the uplink's log. It tells no more
 * than the /v1/ingest handshake does. */
static int http_token_check(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    char token[SG_TOKEN_MAX + 64];
    sg_token_claims cl;
    sg_err err;
    const char *why = sg_http_bearer(wsi, token, sizeof token, "missing stream token (Authorization: Bearer <token>)");
    if (!why && sg_token_verify(ing->secret, token + 7, (int64_t)time(NULL), &cl, &err) < 0)
        why = err.msg;
    if (why) {
        ingest_log_refused(wsi, "a token check (/v1/token)", HTTP_STATUS_UNAUTHORIZED, why);
        return sg_http_answer(wsi, req, HTTP_STATUS_UNAUTHORIZED, ingest_error_json(why));
    }
    return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                       json_pack("{s:b, s:s, s:s, s:s}", "ok", 1, "learner", cl.learner, "task", cl.task,
                                 "sandbox", cl.sandbox));
}

/* A query filter under the token's scope: a scoped token fills in its
 * value where the query has none and refuses (403) another one. NULL and
 * the answer sent on refusal. */
bool ingest_scope_filter(struct lws *wsi, sg_http_req *req, const char *what, const char *claim,
                         char *val, int present, const char **out)
{
    *out = present ? val : NULL;
    if (!claim[0])
        return true;
    if (present && strcmp(val, claim) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "this read token is scoped to %s %s", what, claim);
        sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN, ingest_error_json(msg));
        return false;
    }
    *out = claim;
    return true;
}

/* The learner=, task= and sandbox= filters of q under the token's scope
 * (into l, t, sb): 0, or 1 with the 400 or 403 answer sent. */
static int read_filters(struct lws *wsi, sg_http_req *req, const sg_token_claims *cl, sg_store_query *q,
                        char l[SG_NAME_MAX + 8], char t[SG_NAME_MAX + 8], char sb[SG_NAME_MAX + 8])
{
    int rl = http_arg(wsi, "learner=", l, SG_NAME_MAX + 8), rt = http_arg(wsi, "task=", t, SG_NAME_MAX + 8),
        rs = http_arg(wsi, "sandbox=", sb, SG_NAME_MAX + 8);
    if (rl < 0 || rt < 0 || rs < 0) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                       ingest_error_json("learner, task or sandbox too long or given twice"));
        return 1;
    }
    if (!ingest_scope_filter(wsi, req, "learner", cl->learner, l, rl, &q->learner) ||
        !ingest_scope_filter(wsi, req, "task", cl->task, t, rt, &q->task) ||
        !ingest_scope_filter(wsi, req, "sandbox", cl->sandbox, sb, rs, &q->sandbox))
        return 1;
    return 0;
}

/* ?kind=a,b or ?except_kind=a,b (/v1/events; name_eq: "kind="): each a
 * known event kind. 0 and *out (NULL when absent), or 1 with the 400
 * answer sent. */
static int kinds_arg(struct lws *wsi, sg_http_req *req, const char *name_eq, char buf[INGEST_KINDS_ARG_MAX],
                     const char **out)
{
    *out = NULL;
    int r = http_arg(wsi, name_eq, buf, INGEST_KINDS_ARG_MAX);
    if (r == 0)
        return 0;
    char msg[200];
    snprintf(msg, sizeof msg, "%.*s: too long or given twice", (int)strlen(name_eq) - 1, name_eq);
    for (const char *k = buf; r > 0;) {
        size_t n = strcspn(k, ",");
        char one[64];
        snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one ? n : sizeof one - 1), k);
        if (n == 0 || n >= sizeof one || sg_event_kind_from_name(one) < 0) {
            char vis[80];
            snprintf(msg, sizeof msg, "%.*s: unknown event kind '%s'", (int)strlen(name_eq) - 1, name_eq,
                     sg_vis(k, n, vis, sizeof vis));
            r = -1;
            break;
        }
        if (!k[n])
            break;
        k += n + 1;
    }
    if (r < 0) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(msg));
        return 1;
    }
    *out = buf;
    return 0;
}

#define SG_OMIT_MAX 8        /* ?omit=: its names */

/* ?omit=a,b (/v1/events): payload members left out of every row, each
 * 1-63 of [a-z0-9_], at most SG_OMIT_MAX. 0 (buf "" when absent), or 1
 * with the 400 answer sent. */
static int omit_arg(struct lws *wsi, sg_http_req *req, char buf[INGEST_OMIT_ARG_MAX])
{
    int r = http_arg(wsi, "omit=", buf, INGEST_OMIT_ARG_MAX);
    size_t names = 1, run = 0;
    for (const char *c = r > 0 ? buf : ""; r > 0 && r != -1; c++) {
        if (*c == ',' || !*c) {
            if (run == 0 || run > 63 || (*c && ++names > SG_OMIT_MAX))
                r = -1;
            run = 0;
            if (!*c)
                break;
        } else if ((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_') {
            run++;
        } else {
            r = -1;
        }
    }
    if (r < 0) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                       ingest_error_json("omit: up to 8 payload member names of [a-z0-9_], comma-separated"));
        return 1;
    }
    if (r == 0)
        buf[0] = '\0';
    return 0;
}

/* The end of the JSON value starting at p[i] (p: a stored payload, valid
 * JSON), or 0 when it is not one this scan understands. */
static size_t value_end(const char *p, size_t n, size_t i)
{
    int depth = 0;
    for (size_t at = i; at < n; at++) {
        char c = p[at];
        if (c == '"') { /* to the first quote after it that no odd run of backslashes escapes */
            for (;;) {
                const char *q = memchr(p + at + 1, '"', n - at - 1);
                if (!q)
                    return 0;
                at = (size_t)(q - p);
                size_t bs = 0;
                while (p[at - 1 - bs] == '\\')
                    bs++;
                if (bs % 2 == 0)
                    break;
            }
            if (depth == 0)
                return at + 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return at > i ? at : 0; /* a scalar's end at its object's close */
            if (--depth == 0)
                return at + 1;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
            return at > i ? at : 0;
        }
    }
    return 0;
}

static bool omitted(const char *omit, const char *key, size_t len)
{
    for (const char *c = omit; *c;) {
        size_t n = strcspn(c, ",");
        if (n == len && memcmp(c, key, len) == 0)
            return true;
        c += n + (c[n] == ',');
    }
    return false;
}

/* The payload object p without its top-level members named in omit (the
 * key's bytes as stored), into out: 0, or -1 when p is not an object this
 * scan understands (the caller writes it whole). */
static int payload_omit(const char *p, size_t n, const char *omit, sg_buf *out)
{
    out->len = 0;
    size_t i = 0;
#define WS() while (i < n && strchr(" \t\r\n", p[i]) && p[i]) i++
    WS();
    if (i >= n || p[i++] != '{' || sg_buf_append(out, "{", 1) < 0)
        return -1;
    bool first = true;
    for (;;) {
        WS();
        if (i < n && p[i] == '}' && first)
            break;
        if (i >= n || p[i] != '"')
            return -1;
        size_t ks = i, ke = value_end(p, n, i);
        if (!ke)
            return -1;
        i = ke;
        WS();
        if (i >= n || p[i++] != ':')
            return -1;
        WS();
        size_t ve = value_end(p, n, i);
        if (!ve)
            return -1;
        i = ve;
        if (!omitted(omit, p + ks + 1, ke - ks - 2) &&
            ((out->len > 1 && sg_buf_append(out, ",", 1) < 0) || sg_buf_append(out, p + ks, ve - ks) < 0))
            return -1;
        first = false;
        WS();
        if (i < n && p[i] == ',') {
            i++;
            continue;
        }
        if (i < n && p[i] == '}')
            break;
        return -1;
    }
    i++;
    WS();
#undef WS
    return i == n && sg_buf_append(out, "}", 1) == 0 ? 0 : -1;
}

/* A /v1/events page, its rows written as the store holds them (the
 * payloads validated at ingest are not parsed again): the bytes jansson
 * would have dumped for the same rows (store.h: sg_store_event_json);
 * with ?omit=, each payload without the members it names. */
typedef struct events_page {
    sg_buf *b;
    size_t n, limit;  /* rows written, and the page's bound */
    bool ahead;       /* the row past the bound came: more follow */
    int64_t last_id, last_seq;
    const char *omit; /* "" or the names, comma-separated */
    sg_buf trimmed;   /* one row's payload with them left out */
} events_page;

static int page_row(void *ud, const sg_store_event *e)
{
    events_page *pg = ud;
    sg_store_event t;
    if (pg->n == pg->limit) { /* the row asked past the page: not written */
        pg->ahead = true;
        return 0;
    }
    if (pg->omit[0] && e->payload && payload_omit(e->payload, e->payload_len, pg->omit, &pg->trimmed) == 0) {
        t = *e;
        t.payload = pg->trimmed.data;
        t.payload_len = pg->trimmed.len;
        e = &t;
    }
    if ((pg->n++ > 0 && sg_buf_append(pg->b, ",", 1) < 0) || sg_store_event_json(pg->b, e) < 0)
        return -1;
    pg->last_id = e->id;
    pg->last_seq = e->seq;
    return 0;
}

int ingest_events_body(sg_store *s, ingest_events_args *a, sg_buf *body, sg_err *err)
{
    bool cut = false;
    sg_store_query *q = &a->q;
    q->cut = &cut;
    /* One row more than the page's bound is asked for: a page that ends a
     * stream exactly full says so ("more": false) and its reader asks no
     * empty page after it (an export of 100 streams asked 100). */
    events_page pg = {.b = body, .omit = a->omit, .limit = q->limit};
    q->limit++;
    int n = sg_buf_puts(body, "{\"events\":[") < 0 ? -1 : sg_store_scan(s, q, page_row, &pg, err);
    q->limit--;
    sg_buf_free(&pg.trimmed);
    q->cut = NULL;
    if (n < 0)
        return -1;
    /* "more": rows follow past the row bound, or the page stopped at its
     * byte bound; the client continues after the last row's id (or seq). */
    bool more = cut || pg.ahead;
    n = (int)pg.n;
    if (sg_buf_printf(body, "],\"more\":%s", more ? "true" : "false") < 0 ||
        (more && n > 0 && /* where the next page starts */
         sg_buf_printf(body, ",\"next_after_id\":%" PRId64 ",\"next_after_seq\":%" PRId64, pg.last_id,
                       pg.last_seq) < 0) ||
        sg_buf_puts(body, "}") < 0)
        return sg_err_set(err, ENOMEM, "a page of events: out of memory");
    return 0;
}

/* v in buf (a claim of the token, which lives as long as the callback,
 * copied into the request's arguments). */
static const char *arg_own(const char *v, char buf[SG_NAME_MAX + 8])
{
    if (v && v != buf)
        snprintf(buf, SG_NAME_MAX + 8, "%s", v);
    return v ? buf : NULL;
}

int ingest_events_query(struct lws *wsi, sg_http_req *req, const sg_token_claims *cl, ingest_events_args *a)
{
    a->q = (sg_store_query){.after_seq = -1, .after_id = -1};
    if (read_filters(wsi, req, cl, &a->q, a->learner, a->task, a->sandbox) ||
        kinds_arg(wsi, req, "kind=", a->kinds, &a->q.kinds) ||
        kinds_arg(wsi, req, "except_kind=", a->except_kinds, &a->q.except_kinds) || omit_arg(wsi, req, a->omit))
        return 1;
    a->q.learner = arg_own(a->q.learner, a->learner);
    a->q.task = arg_own(a->q.task, a->task);
    a->q.sandbox = arg_own(a->q.sandbox, a->sandbox);
    const char *bad = NULL;
    int64_t limit = 0;
    if (parse_i64_arg(wsi, "after_seq=", -1, &a->q.after_seq, &bad) < 0 ||
        parse_i64_arg(wsi, "after_id=", -1, &a->q.after_id, &bad) < 0 ||
        parse_i64_arg(wsi, "limit=", 1, &limit, &bad) < 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "bad value for %.*s", (int)strlen(bad) - 1, bad);
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(msg));
        return 1;
    }
    a->q.limit = limit == 0 || limit > SG_STORE_QUERY_MAX ? SG_STORE_QUERY_MAX : (size_t)limit;
    a->q.max_bytes = HTTP_PAGE_BYTES;
    return 0;
}

/* /v1/events: on PostgreSQL read off the loop (ingest_pages.c); on
 * SQLite here, a page being a few milliseconds of the loop's. */
static int http_events(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    if (ingest_pages_events_off_loop(ing))
        return ingest_pages_get(ing, wsi, req, cl);
    ingest_events_args a;
    if (ingest_events_query(wsi, req, cl, &a))
        return 0;
    sg_err err;
    sg_autobuf sg_buf page = {0};
    if (ingest_events_body(ing->store, &a, &page, &err) < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    return sg_http_answer_text(wsi, req, HTTP_STATUS_OK, page.data, page.len);
}

/* /v1/sessions?learner=&task=&sandbox=&after=&limit=: the sessions within
 * the token's scope, with their state (store.h: sg_store_sessions), in the
 * order they began; a full page says "more" and the next page starts
 * after its last row's "cursor". */
static int http_sessions(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    char l[SG_NAME_MAX + 8], t[SG_NAME_MAX + 8], sb[SG_NAME_MAX + 8];
    sg_store_query q = {.after_seq = -1, .after_id = -1};
    if (read_filters(wsi, req, cl, &q, l, t, sb))
        return 0;
    const char *bad = NULL;
    int64_t limit = 0, before = -1;
    if (parse_i64_arg(wsi, "after=", -1, &q.after_id, &bad) < 0 || parse_i64_arg(wsi, "limit=", 1, &limit, &bad) < 0 ||
        parse_i64_arg(wsi, "before=", -1, &before, &bad) < 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "bad value for %.*s", (int)strlen(bad) - 1, bad);
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(msg));
    }
    if (before >= 0 && q.after_id >= 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("give after= or before=, not both"));
    q.limit = limit == 0 || limit > SG_STORE_QUERY_MAX ? SG_STORE_QUERY_MAX : (size_t)limit;
    sg_err err;
    json_t *rows = ingest_sessions_list(ing, &q, before, &err);
    if (!rows)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                          json_pack("{s:o, s:b}", "sessions", rows, "more", json_array_size(rows) >= q.limit));
}

int ingest_sandboxes_body(sg_store *s, const sg_token_claims *cl, const char *prefix, sg_buf *body, sg_err *err)
{
    json_t *sbs = sg_store_sandboxes(s, err);
    if (!sbs)
        return -1;
    const char *keys[] = {"learner", "task", "sandbox"};
    const char *claims[] = {cl->learner, cl->task, cl->sandbox};
    for (size_t i = json_array_size(sbs); i-- > 0;) {
        json_t *row = json_array_get(sbs, i);
        if (prefix && !sg_id_matches(json_string_value(json_object_get(row, "sandbox")) ?: "", prefix)) {
            json_array_remove(sbs, i);
            continue;
        }
        for (size_t k = 0; k < SG_ARRAY_LEN(keys); k++) {
            const char *v = json_string_value(json_object_get(row, keys[k]));
            if (claims[k][0] && (!v || strcmp(v, claims[k]) != 0)) {
                json_array_remove(sbs, i);
                break;
            }
        }
    }
    sg_autojson json_t *answer = json_pack("{s:o}", "sandboxes", sbs);
    sg_autofree char *text = answer ? json_dumps(answer, JSON_COMPACT) : NULL;
    if (!text || sg_buf_puts(body, text) < 0)
        return sg_err_set(err, ENOMEM, "the list of sandboxes: out of memory");
    return 0;
}

int ingest_sandboxes_prefix(struct lws *wsi, sg_http_req *req, char prefix[SG_NAME_MAX + 8], const char **out)
{
    int hasp = http_arg(wsi, "prefix=", prefix, SG_NAME_MAX + 8);
    if (hasp < 0) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("prefix= is too long or given twice"));
        return 1;
    }
    *out = hasp ? prefix : NULL;
    return 0;
}

/* /v1/sandboxes[?prefix=P]: the streams within the token's scope; with
 * P, only those of the sandbox P names by the one prefix rule
 * (base/idprefix.h: P itself, or the sandboxes it begins when it has
 * SG_ID_MIN_PREFIX characters at least), so that a client resolves a
 * prefix without the list of every stream. On PostgreSQL read off the
 * loop (ingest_pages.c): its count of every stream's rows takes the
 * database a while on a large store. */
static int http_sandboxes(sg_ingest *ing, struct lws *wsi, sg_http_req *req,
                          const sg_token_claims *cl)
{
    if (ingest_pages_events_off_loop(ing))
        return ingest_pages_sandboxes(ing, wsi, req, cl);
    char prefix[SG_NAME_MAX + 8];
    const char *p;
    if (ingest_sandboxes_prefix(wsi, req, prefix, &p))
        return 0;
    sg_err err;
    sg_autobuf sg_buf body = {0};
    if (ingest_sandboxes_body(ing->store, cl, p, &body, &err) < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    return sg_http_answer_text(wsi, req, HTTP_STATUS_OK, body.data, body.len);
}

/* /v1/stats: the counters, for an operator token only. */
static int http_stats(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    if (cl->learner[0] || cl->task[0] || cl->sandbox[0])
        return sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN,
                           ingest_error_json("/v1/stats needs an operator read token (no scope)"));
    const sg_ingest_stats *st = &ing->stats;
    size_t reading = 0, waiting = 0;
    ingest_pages_counts(ing, &reading, &waiting);
    return sg_http_answer(
        wsi, req, HTTP_STATUS_OK,
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "frames", (json_int_t)st->frames,
                  "inserted", (json_int_t)st->inserted, "duplicates",
                  (json_int_t)st->duplicates, "refused", (json_int_t)st->refused,
                  "seq_refused", (json_int_t)st->seq_refused, "conn_refused",
                  (json_int_t)st->conn_refused, "commits", (json_int_t)st->commits,
                  "throttled", (json_int_t)st->throttled,
                  "connections", (json_int_t)ing->nconns, "subscribers",
                  (json_int_t)st->subscribers, "stream_overflows",
                  (json_int_t)st->stream_overflows, "pages_reading", (json_int_t)reading, "pages_waiting",
                  (json_int_t)waiting));
}

int ingest_cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
    sg_ingest *ing = lws_context_user(lws_get_context(wsi));
    sg_http_req *req = user;

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* "Sec-WebSocket-Protocol: http" would bind an upgrade here, past
         * the token check: WebSockets are only for PROTO_NAME. */
        return ingest_refuse_handshake(wsi, HTTP_STATUS_BAD_REQUEST,
                                "unknown WebSocket subprotocol (use " PROTO_NAME " or none)");

    case LWS_CALLBACK_HTTP: {
        const char *uri = in;
        memset(req, 0, sizeof *req);
        bool post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
        bool op = post && (strcmp(uri, "/v1/import") == 0 || strcmp(uri, "/v1/purge") == 0);
        if (post && (op || strcmp(uri, "/v1/hosts") == 0))
            return ingest_limits_is_reserve(ing, wsi)
                       ? sg_http_answer(wsi, req, HTTP_STATUS_SERVICE_UNAVAILABLE,
                                        ingest_error_json("too many connections (only /healthz answers)"))
                   : op ? ingest_ops_post(ing, wsi, req, uri)
                        : ingest_hosts_post(ing, wsi, req);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED,
                               ingest_error_json("only GET is supported (and POST /v1/hosts, /v1/import, /v1/purge)"));
        if (strcmp(uri, "/healthz") == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                               json_pack("{s:b, s:I}", "ok", 1, "port", (json_int_t)ing->port));
        if (strcmp(uri, INGEST_PATH) == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                               ingest_error_json("WebSocket upgrade required"));
        if (ingest_limits_is_reserve(ing, wsi))
            return sg_http_answer(wsi, req, HTTP_STATUS_SERVICE_UNAVAILABLE,
                               ingest_error_json("too many connections (only /healthz answers)"));
        if (strcmp(uri, "/metrics") == 0) /* counts, no learner's data: its own rule */
            return ingest_metrics_http(ing, wsi, req);
        if (strcmp(uri, "/v1/token") == 0)
            return http_token_check(ing, wsi, req);
        if (strcmp(uri, "/v1/revoke") == 0)
            return ingest_revoke(ing, wsi, req);
        if (ingest_console_is_file(uri)) /* the page: no data, no token */
            return ingest_console_serve(ing, wsi, req, uri);
        /* Everything else reads learners' data: a read token first, even
         * to learn that a path does not exist. */
        sg_token_claims cl;
        bool stream = strcmp(uri, "/v1/stream") == 0;
        /* a page read off the loop looks its token up there too (ingest_pages.c) */
        bool off_loop = ingest_pages_events_off_loop(ing) && (strcmp(uri, "/v1/events") == 0 || strcmp(uri, "/v1/sandboxes") == 0);
        if (http_auth(ing, wsi, req, &cl, stream, off_loop))
            return 0;
        ingest_read_log(wsi, uri, &cl);
        if (stream)
            return ingest_sse_open(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/sandboxes") == 0)
            return http_sandboxes(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/sessions") == 0)
            return http_sessions(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/events") == 0)
            return http_events(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/contents") == 0)
            return ingest_http_contents(ing, wsi, req);
        if (strcmp(uri, "/v1/casts") == 0 || strcmp(uri, "/v1/cast") == 0)
            return (uri[8] ? ingest_http_casts : ingest_http_cast)(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/stats") == 0)
            return http_stats(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/watch") == 0)
            return ingest_http_watch(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/hosts") == 0)
            return ingest_http_hosts(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/revoked") == 0)
            return ingest_http_revoked(ing, wsi, req, &cl);
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, ingest_error_json("not found"));
    }

    case LWS_CALLBACK_HTTP_BODY:
        return !req ? -1 : req->op ? ingest_ops_body(wsi, req, in, len) : ingest_hosts_body(wsi, req, in, len);
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return !req ? -1 : req->op ? ingest_ops_body_done(ing, wsi, req) : ingest_hosts_body_done(ing, wsi, req);

    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (req && req->stream)
            return ingest_sse_writeable(ing, wsi, req);
        if (req && req->page)
            return ingest_pages_writeable(ing, wsi, req);
        if (req && req->op)
            return ingest_ops_writeable(ing, wsi, req);
        return sg_http_writeable(wsi, req);

    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        return ingest_limits_admit(ing, (int)(intptr_t)in);
    case LWS_CALLBACK_WSI_CREATE:
        ingest_limits_bind(ing, wsi);
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        ingest_sse_gone(ing, wsi);
        ingest_limits_release(ing, wsi);
        return 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        ingest_sse_closed(ing, req);
        ingest_pages_closed(req);
        ingest_ops_closed(req);
        sg_http_req_release(req);
        return 0;

    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}


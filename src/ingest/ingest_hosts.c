/* ingest_hosts: the sandbox hosts' registrations (docs/man/sandglass-ingest.md,
 * "POST /v1/hosts", "GET /v1/hosts").
 *
 * A host daemon (`sandglass host`, its heartbeat) POSTs its registration
 * (wire/hostreg.h) with a host token (wire/token.h) naming itself: the
 * token is checked (signature, kind, expiry, revocation) before any of the
 * body is kept, the body is bounded by its Content-Length (at most
 * SG_HOSTREG_BODY_MAX; none given: refused), then parsed strictly, its
 * name held to the token's, and its canonical form upserted into the
 * store's sg_hosts with the ingest's clock as last_seen. Every node on
 * the store shares the table, so a host registers with whichever node
 * answers.
 *
 * GET /v1/hosts (an operator read token: the hosts' sandboxes are every
 * learner's) lists them with their age and whether they are stale: not
 * seen for more than INGEST_HOST_STALE_BEATS of their own heartbeats; in
 * pages of SG_STORE_HOSTS_MAX by name (after=, the answer's "next"); with
 * sandbox=, only the hosts listing a sandbox that begins so (a session's
 * host: its sandbox id is what ties them). */
#include "ingest/ingest_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "wire/hostreg.h"

#define INGEST_HOST_STALE_BEATS 3

/* The refusal to answer once the body is in (read whole first: a client
 * that sends its body before reading gets its answer, not a reset). */
static int post_refuse(sg_http_req *req, unsigned status, const char *why)
{
    req->post_status = status;
    req->post_why = why;
    return 0;
}

int ingest_hosts_post(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    static __thread char why_buf[sizeof ((sg_err *)0)->msg];
    char token[SG_TOKEN_MAX + 64], clen[32] = "";
    sg_token_claims cl;
    sg_err err;
    int cn = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    if (cn <= 0 || cn >= (int)sizeof clen || lws_hdr_copy(wsi, clen, sizeof clen, WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0) {
        ing->metrics.host_regs_refused++;
        return sg_http_answer(wsi, req, HTTP_STATUS_LENGTH_REQUIRED,
                              ingest_error_json("a registration needs a Content-Length"));
    }
    char *end = NULL;
    unsigned long long n = strtoull(clen, &end, 10);
    if (end == clen || *end || n == 0 || n > SG_HOSTREG_BODY_MAX) {
        ing->metrics.host_regs_refused++;
        snprintf(why_buf, sizeof why_buf, "registration: Content-Length must be 1..%d bytes", SG_HOSTREG_BODY_MAX);
        return sg_http_answer(wsi, req, HTTP_STATUS_REQ_ENTITY_TOO_LARGE, ingest_error_json(why_buf));
    }
    req->post_max = (size_t)n;
    req->post = malloc(req->post_max);
    if (!req->post)
        return -1;
    const char *why = sg_http_bearer(wsi, token, sizeof token,
                                    "missing host token (Authorization: Bearer <token>; sandglass host makes it)");
    if (!why && sg_token_verify_host(ing->secret, token + 7, (int64_t)time(NULL), &cl, &err) < 0) {
        snprintf(why_buf, sizeof why_buf, "%s", err.msg);
        why = why_buf;
    }
    unsigned status = HTTP_STATUS_UNAUTHORIZED;
    if (!why && ingest_token_revoked(ing, &cl, &status, &why))
        return post_refuse(req, status, why);
    if (why)
        return post_refuse(req, HTTP_STATUS_UNAUTHORIZED, why);
    req->post_to = strdup(cl.host);
    return req->post_to ? 0 : -1;
}

int ingest_hosts_body(struct lws *wsi, sg_http_req *req, const void *in, size_t len)
{
    (void)wsi;
    if (!req->post) /* a POST answered at once (405, 411, 413): its body is dropped */
        return 0;
    if (len > req->post_max - req->post_len)
        return -1; /* lws gives no more than Content-Length: not a request of ours */
    memcpy(req->post + req->post_len, in, len);
    req->post_len += len;
    return 0;
}

/* The registration in req checked and stored: the answer. Counted for
 * /metrics: stored, or refused (whatever the reason). */
static int hosts_store(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    ing->metrics.host_regs_refused++; /* until it is stored */
    sg_err err = {0};
    sg_autojson json_t *reg = sg_hostreg_parse((const char *)req->post, req->post_len, &err);
    if (!reg) {
        ingest_log_refused(wsi, "a host's registration", HTTP_STATUS_BAD_REQUEST, err.msg);
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(err.msg));
    }
    const char *name = json_string_value(json_object_get(reg, "name"));
    if (strcmp(name, req->post_to) != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "name: this host token registers the host %s, not %s", req->post_to, name);
        ingest_log_refused(wsi, "a host's registration", HTTP_STATUS_FORBIDDEN, msg);
        return sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN, ingest_error_json(msg));
    }
    sg_autofree char *text = sg_json_dump(reg);
    int64_t now = (int64_t)time(NULL);
    if (!text)
        return -1;
    if (sg_store_host_put(ing->store, name, text, now, &err) < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    ing->metrics.host_regs_refused--;
    ing->metrics.host_regs++;
    sg_log(SG_LOG_DEBUG, "host %s registered (%zu sandboxes listed)", name,
           json_array_size(json_object_get(reg, "sandboxes")));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                          json_pack("{s:b, s:s, s:I}", "ok", 1, "name", name, "last_seen", (json_int_t)now));
}

int ingest_hosts_body_done(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    if (!req->post) /* answered at once */
        return 0;
    if (!req->post_to) {
        ing->metrics.host_regs_refused++;
        ingest_log_refused(wsi, "a host's registration", req->post_status, req->post_why);
        return sg_http_answer(wsi, req, req->post_status, ingest_error_json(req->post_why));
    }
    if (req->post_len != req->post_max) {
        ing->metrics.host_regs_refused++;
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                              ingest_error_json("registration: shorter than its Content-Length"));
    }
    return hosts_store(ing, wsi, req);
}

/* A host's sandboxes cut to those whose id begins with prefix. */
static void keep_sandboxes(json_t *h, const char *prefix)
{
    json_t *sbs = json_object_get(json_object_get(h, "info"), "sandboxes");
    size_t n = strlen(prefix);
    for (size_t k = json_array_size(sbs); k-- > 0;) {
        const char *id = json_string_value(json_object_get(json_array_get(sbs, k), "id"));
        if (!id || strncmp(id, prefix, n) != 0)
            json_array_remove(sbs, k);
    }
}

/* name=, after= and sandbox= of GET /v1/hosts into q (bufs: their room):
 * NULL, or what is wrong. */
static const char *hosts_args(struct lws *wsi, char bufs[3][SG_NAME_MAX + 8], sg_store_hosts_query *q)
{
    static const char *const keys[] = {"name=", "after=", "sandbox="};
    const char **dst[] = {&q->name, &q->after, &q->sandbox};
    for (size_t i = 0; i < 3; i++) {
        int r = ingest_urlarg(wsi, keys[i], bufs[i], SG_NAME_MAX + 8);
        if (r < 0 || (r > 0 && !sg_valid_name(bufs[i])))
            return i == 0 ? "name= is not a host name, or given twice"
                   : i == 1 ? "after= is not a host name (the last page's \"next\"), or given twice"
                            : "sandbox= is not a sandbox id or prefix, or given twice";
        *dst[i] = r > 0 ? bufs[i] : NULL;
    }
    if (q->sandbox && strlen(q->sandbox) < SG_ID_MIN_PREFIX)
        return "sandbox= needs 4 characters at least (a sandbox id or a prefix of it)";
    return NULL;
}

int ingest_http_hosts(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    if (cl->learner[0] || cl->task[0] || cl->sandbox[0])
        return sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN,
                              ingest_error_json("/v1/hosts needs an operator read token (no scope)"));
    char bufs[3][SG_NAME_MAX + 8];
    sg_store_hosts_query q = {0};
    const char *bad = hosts_args(wsi, bufs, &q);
    if (bad)
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(bad));
    sg_err err;
    json_t *hosts = sg_store_hosts(ing->store, &q, &err);
    if (!hosts)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    int64_t now = (int64_t)time(NULL);
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h) {
        int64_t seen = json_integer_value(json_object_get(h, "last_seen"));
        int64_t beat = json_integer_value(json_object_get(json_object_get(h, "info"), "heartbeat_s"));
        json_object_set_new(h, "age_s", json_integer(now - seen));
        json_object_set_new(h, "stale", json_boolean(now - seen > INGEST_HOST_STALE_BEATS * beat));
        if (q.sandbox)
            keep_sandboxes(h, q.sandbox);
    }
    /* a full page may have a next one: it starts after this page's last name */
    size_t n = json_array_size(hosts);
    json_t *next = n == SG_STORE_HOSTS_MAX ? json_incref(json_object_get(json_array_get(hosts, n - 1), "name"))
                                           : json_null();
    return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                          json_pack("{s:o, s:I, s:i, s:o}", "hosts", hosts, "now", (json_int_t)now,
                                    "stale_after_beats", INGEST_HOST_STALE_BEATS, "next", next));
}

static void hosts_count(uv_timer_t *t)
{
    sg_ingest *ing = t->data;
    int64_t known = 0, stale = 0;
    sg_err err = {0};
    if (sg_store_hosts_count(ing->store, (int64_t)time(NULL), INGEST_HOST_STALE_BEATS, &known, &stale, &err) < 0) {
        sg_log(SG_LOG_WARN, "counting the hosts for /metrics: %s", err.msg);
        return;
    }
    ing->metrics.hosts_known = known;
    ing->metrics.hosts_stale = stale;
}

void ingest_hosts_start(sg_ingest *ing)
{
    uv_timer_init(ing->loop, &ing->metrics.hosts_timer);
    ing->metrics.hosts_timer.data = ing;
    ing->metrics.hosts_timer_on = true;
    uv_timer_start(&ing->metrics.hosts_timer, hosts_count, 0, INGEST_HOSTS_COUNT_EVERY_S * 1000);
}

void ingest_hosts_stop(sg_ingest *ing)
{
    if (!ing->metrics.hosts_timer_on)
        return;
    ing->metrics.hosts_timer_on = false;
    uv_close((uv_handle_t *)&ing->metrics.hosts_timer, NULL);
}

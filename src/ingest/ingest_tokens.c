/* ingest_tokens: revoked tokens and the read log (docs/CONSOLE.md, "The
 * token").
 *
 * A token is withdrawn by its id (wire/token.h: sg_token_id) without
 * rotating the secret: GET /v1/revoke with a revoke token (one the secret
 * signs for that id only, `sandglass token revoke`) records the id in the
 * store's sg_revoked_tokens. Every node on the store looks each request's
 * token up there when it checks the token (read endpoints, /v1/stream, the
 * /v1/ingest handshake; a /v1/events page on PostgreSQL by the connection
 * that reads it, ingest_pages.c): one primary-key read, as fresh as the store, so a
 * revocation made through one node holds on all at once, with no cache to
 * go stale or notice to miss. A store that cannot answer fails the request
 * (500, as any store error), it never lets a token through unchecked. An open /v1/stream
 * of the token is ended at once by the node that took the revoke
 * (ingest_sse_revoked, once the store has it); another node's is checked
 * again at each ping (ingest_sse.c) and closed once revoked.
 *
 * Every read is logged (info) with its token's id and scope: who read
 * what, without the token itself.
 *
 * Rotating the secret (sg_ingest_reload, on SIGHUP) withdraws every token
 * at once: the new secret alone signs from then on, and what the old one
 * let in is closed. */
#include "ingest/ingest_internal.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

static __thread char msg[sizeof ((sg_err *)0)->msg + 64];

/* The reason a revoked token is refused with (and its open streams ended). */
static const char *revoked_msg(const char *id)
{
    snprintf(msg, sizeof msg, "token revoked (id %s)", id);
    return msg;
}

int ingest_token_revoked(sg_ingest *ing, const sg_token_claims *cl, unsigned *status, const char **why)
{
    return ingest_token_revoked_in(ing->store, cl->id, status, why);
}

int ingest_token_revoked_in(sg_store *s, const char *id, unsigned *status, const char **why)
{
    bool yes = false;
    sg_err err;
    if (sg_store_revoked(s, id, &yes, &err) < 0) {
        snprintf(msg, sizeof msg, "cannot check the token's revocation: %s", err.msg);
        *status = HTTP_STATUS_INTERNAL_SERVER_ERROR; /* as every store error: its server named */
        *why = msg;
        return 1;
    }
    if (!yes)
        return 0;
    *status = HTTP_STATUS_UNAUTHORIZED;
    *why = revoked_msg(id);
    return 1;
}

void ingest_read_log(struct lws *wsi, const char *uri, const sg_token_claims *cl)
{
    if (!sg_log_enabled(SG_LOG_INFO))
        return;
    char q[512] = "";
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS);
    if (n > 0 && n < (int)sizeof q && lws_hdr_copy(wsi, q, sizeof q, WSI_TOKEN_HTTP_URI_ARGS) < 0)
        q[0] = '\0';
    /* ?token= is the token itself: never logged */
    if (strncasecmp(q, "token=", 6) == 0 || strstr(q, "&token="))
        snprintf(q, sizeof q, "(arguments not logged: they hold a token)");
    sg_log(SG_LOG_INFO, "read %s%s%s token %s (scope learner=%s task=%s sandbox=%s)", uri, q[0] ? "?" : "", q,
           cl->id, cl->learner[0] ? cl->learner : "*", cl->task[0] ? cl->task : "*",
           cl->sandbox[0] ? cl->sandbox : "*");
}

/* GET /v1/revoke, Authorization: Bearer <revoke token>: the id it names is
 * revoked on every node of this store. */
int ingest_revoke(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    char token[SG_TOKEN_MAX + 64];
    sg_token_claims cl;
    sg_err err;
    const char *why = sg_http_bearer(wsi, token, sizeof token,
                                    "missing revoke token (Authorization: Bearer <token>; see sandglass token revoke)");
    if (!why && sg_token_verify_revoke(ing->secret, token + 7, (int64_t)time(NULL), &cl, &err) < 0)
        why = err.msg;
    if (why)
        return sg_http_answer(wsi, req, HTTP_STATUS_UNAUTHORIZED, ingest_error_json(why));
    if (sg_store_revoke(ing->store, cl.revoke, &err) < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    sg_log(SG_LOG_INFO, "token %s revoked (revoke token %s)", cl.revoke, cl.id);
    ingest_sse_revoked(ing, cl.revoke, revoked_msg(cl.revoke));
    ingest_streams_gone(ing, cl.revoke, revoked_msg(cl.revoke));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:b, s:s}", "ok", 1, "revoked", cl.revoke));
}

/* GET /v1/revoked (an operator read token): every revoked id, sorted, for
 * a `sandglass serve` that checks its terminal and watch tokens against
 * them (it has no store: docs/SECURITY.md, "Tokens"). */
int ingest_http_revoked(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    if (cl->learner[0] || cl->task[0] || cl->sandbox[0])
        return sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN,
                              ingest_error_json("/v1/revoked needs an operator read token (no scope)"));
    sg_err err;
    json_t *ids = sg_store_revoked_ids(ing->store, &err);
    if (!ids)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:o}", "revoked", ids));
}

/* The secret's file again: 1 changed, 0 the same, -1 kept (err says why). */
static int reload_secret(sg_ingest *ing, sg_err *err)
{
    uint8_t fresh[SG_TOKEN_SECRET_LEN];
    if (sg_token_secret_load(ing->secret_path, fresh, err) < 0) {
        sg_err_prefix(err, "reload: the secret");
        return -1;
    }
    int changed = CRYPTO_memcmp(fresh, ing->secret, sizeof fresh) != 0;
    memcpy(ing->secret, fresh, sizeof fresh);
    OPENSSL_cleanse(fresh, sizeof fresh);
    return changed;
}

int sg_ingest_reload(sg_ingest *ing, sg_err *err)
{
    int rc = 0;
    sg_err e = {0};
    int r = reload_secret(ing, &e);
    if (r < 0) {
        sg_log(SG_LOG_ERROR, "%s (the old secret is kept)", e.msg);
        *err = e;
        rc = -1;
    } else if (r == 0) {
        sg_log(SG_LOG_INFO, "reload: the secret %s is unchanged", ing->secret_path);
    } else {
        size_t n = 0;
        for (conn *c = ing->conns; c; c = c->next)
            n += !c->gone[0];
        sg_log(SG_LOG_WARN, "reload: the secret %s was replaced: tokens of the old one are refused from now on; "
               "closing %zu open stream(s) and the read streams they let in", ing->secret_path, n);
        ingest_streams_gone(ing, NULL, INGEST_ROTATED_MSG);
        ingest_sse_revoked(ing, NULL, INGEST_ROTATED_MSG);
    }
    if (ing->metrics_token_path) {
        if (ingest_metrics_reload(ing, &e) < 0) {
            sg_log(SG_LOG_ERROR, "reload: %s (the old metrics token is kept)", e.msg);
            if (rc == 0)
                *err = e;
            rc = -1;
        } else {
            sg_log(SG_LOG_INFO, "reload: the metrics token read again from %s", ing->metrics_token_path);
        }
    }
    return rc;
}

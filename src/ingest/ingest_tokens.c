/* ingest_tokens: revoked tokens and the read log (docs/CONSOLE.md, "The
 * token").
 *
 * A token is withdrawn by its id (wire/token.h: sg_token_id) without
 * rotating the secret: GET /v1/revoke with a revoke token (one the secret
 * signs for that id only, `sandglass token revoke`) records the id in the
 * store's sg_revoked_tokens. Every node on the store looks each request's
 * token up there when it checks the token (read endpoints, /v1/stream, the
 * /v1/ingest handshake): one primary-key read, as fresh as the store, so a
 * revocation made through one node holds on all at once, with no cache to
 * go stale or notice to miss. A store that cannot answer fails the request
 * (500, as any store error), it never lets a token through unchecked. An open /v1/stream
 * of the token is ended at once by the node that took the revoke
 * (ingest_sse_revoked, once the store has it); another node's is checked
 * again at each ping (ingest_sse.c) and closed once revoked.
 *
 * Every read is logged (info) with its token's id and scope: who read
 * what, without the token itself. */
#include "ingest/ingest_internal.h"

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
    bool yes = false;
    sg_err err;
    if (sg_store_revoked(ing->store, cl->id, &yes, &err) < 0) {
        snprintf(msg, sizeof msg, "cannot check the token's revocation: %s", err.msg);
        *status = HTTP_STATUS_INTERNAL_SERVER_ERROR; /* as every store error: its server named */
        *why = msg;
        return 1;
    }
    if (!yes)
        return 0;
    *status = HTTP_STATUS_UNAUTHORIZED;
    *why = revoked_msg(cl->id);
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
    const char *why = ingest_bearer(wsi, token, sizeof token,
                                    "missing revoke token (Authorization: Bearer <token>; see sandglass token revoke)");
    if (!why && sg_token_verify_revoke(ing->secret, token + 7, (int64_t)time(NULL), &cl, &err) < 0)
        why = err.msg;
    if (why)
        return sg_http_answer(wsi, req, HTTP_STATUS_UNAUTHORIZED, ingest_error_json(why));
    if (sg_store_revoke(ing->store, cl.revoke, &err) < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    sg_log(SG_LOG_INFO, "token %s revoked (revoke token %s)", cl.revoke, cl.id);
    ingest_sse_revoked(ing, cl.revoke, revoked_msg(cl.revoke));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:b, s:s}", "ok", 1, "revoked", cl.revoke));
}

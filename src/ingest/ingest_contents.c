/* ingest_contents: the read endpoints of the contents and recordings
 * (store_contents.h), with a read token:
 *   GET /v1/contents?sha256=HEX          the content's bytes
 *   GET /v1/contents?sha256=H1,H2,...    up to SG_CONTENTS_BATCH of them, each
 *                                        as "HEX LEN\n" then its LEN bytes
 *                                        ("HEX -1\n": not stored whole)
 *   GET /v1/casts?sandbox=ID             the sandbox's recordings (JSON)
 *   GET /v1/cast?sandbox=ID&session=NAME one recording's bytes
 * A content is found by its hash alone: it is shared by every session that
 * made it, so a scoped token reads a content it can name (its events name
 * their contents' hashes). Recordings are read under the token's scope.
 * Contents are read off the loop, by ingest_pages.c's readers (a batch is
 * up to 32 MiB: on the loop it held every stream's frames and acks while
 * it was read). */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "ingest/store_contents.h"

static int buf_take(void *ud, const void *data, size_t len)
{
    return sg_buf_append(ud, data, len);
}

/* The bytes read into a buffer with LWS_PRE of headroom, answered. */
static int answer_bytes(struct lws *wsi, sg_http_req *req, sg_buf *b, const char *mime)
{
    size_t len = b->len - LWS_PRE;
    unsigned char *data = (unsigned char *)b->data;
    *b = (sg_buf){0};
    return sg_http_answer_body(wsi, req, HTTP_STATUS_OK, mime, data, len, NULL, 0);
}

static int read_failed(struct lws *wsi, sg_http_req *req, const sg_err *err)
{
    return sg_http_answer(wsi, req, err->code == ENOENT ? HTTP_STATUS_NOT_FOUND
                                                        : HTTP_STATUS_INTERNAL_SERVER_ERROR,
                          ingest_error_json(err->msg));
}

static int head_take(void *ud, const char *sha, int64_t size)
{
    return sg_buf_printf(ud, "%s %lld\n", sha, (long long)size);
}

int ingest_contents_body(sg_store *s, const char *const *sha, size_t n, bool batch, sg_buf *body, sg_err *err)
{
    if (batch)
        return sg_store_contents_each(s, sha, n, head_take, buf_take, body, err);
    return sg_store_content_read(s, sha[0], buf_take, body, err);
}

/* One content, or several (the framed form): read off the loop by a
 * reader (ingest_pages.c), or on it when the ingest has none. */
static int contents_answer(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *const *shas, size_t n,
                           bool batch)
{
    if (ing->pages)
        return ingest_pages_contents(ing, wsi, req, shas, n, batch);
    sg_autobuf sg_buf b = {0};
    if (sg_buf_reserve(&b, LWS_PRE) < 0)
        return -1;
    b.len = LWS_PRE;
    sg_err err = {0};
    if (ingest_contents_body(ing->store, shas, n, batch, &b, &err) < 0)
        return read_failed(wsi, req, &err);
    return answer_bytes(wsi, req, &b, "application/octet-stream");
}

/* Several contents, each framed "HEX LEN\n" + bytes, in one answer. */
static int contents_batch(sg_ingest *ing, struct lws *wsi, sg_http_req *req, char *list)
{
    const char *shas[SG_CONTENTS_BATCH];
    size_t n = 0;
    for (char *save = NULL, *sha = strtok_r(list, ",", &save); sha; sha = strtok_r(NULL, ",", &save)) {
        if (!sg_store_sha256_valid(sha) || n == SG_CONTENTS_BATCH)
            return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                                  ingest_error_json("sha256=: up to 32 hashes of 64 lowercase hex digits"));
        shas[n++] = sha;
    }
    return contents_answer(ing, wsi, req, shas, n, true);
}

int ingest_http_contents(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    char sha[SG_CONTENTS_BATCH * 65 + 8];
    int got = ingest_urlarg(wsi, "sha256=", sha, sizeof sha);
    if (got == 1 && strchr(sha, ','))
        return contents_batch(ing, wsi, req, sha);
    if (got != 1 || !sg_store_sha256_valid(sha))
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                              ingest_error_json("sha256= must be 64 lowercase hex digits"));
    const char *one[1] = {sha};
    return contents_answer(ing, wsi, req, one, 1, false);
}

/* sandbox= (required), learner= and task= under the token's scope. */
static int cast_filters(struct lws *wsi, sg_http_req *req, const sg_token_claims *cl,
                        const char *id[3], char l[SG_NAME_MAX + 8], char t[SG_NAME_MAX + 8],
                        char sb[SG_NAME_MAX + 8])
{
    int rl = ingest_urlarg(wsi, "learner=", l, SG_NAME_MAX + 8),
        rt = ingest_urlarg(wsi, "task=", t, SG_NAME_MAX + 8),
        rs = ingest_urlarg(wsi, "sandbox=", sb, SG_NAME_MAX + 8);
    if (rl < 0 || rt < 0 || rs < 0) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                       ingest_error_json("learner, task or sandbox too long or given twice"));
        return 1;
    }
    if (!ingest_scope_filter(wsi, req, "learner", cl->learner, l, rl, &id[0]) ||
        !ingest_scope_filter(wsi, req, "task", cl->task, t, rt, &id[1]) ||
        !ingest_scope_filter(wsi, req, "sandbox", cl->sandbox, sb, rs, &id[2]))
        return 1;
    if (!id[2]) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("sandbox= is required"));
        return 1;
    }
    return 0;
}

int ingest_http_casts(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    char l[SG_NAME_MAX + 8], t[SG_NAME_MAX + 8], sb[SG_NAME_MAX + 8];
    const char *id[3];
    if (cast_filters(wsi, req, cl, id, l, t, sb))
        return 0;
    sg_err err = {0};
    json_t *rows = sg_store_casts(ing->store, id[0], id[1], id[2], &err);
    if (!rows)
        return read_failed(wsi, req, &err);
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:o}", "casts", rows));
}

int ingest_http_cast(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    char l[SG_NAME_MAX + 8], t[SG_NAME_MAX + 8], sb[SG_NAME_MAX + 8], session[SG_BLOB_SESSION_MAX + 8];
    const char *id[3];
    if (cast_filters(wsi, req, cl, id, l, t, sb))
        return 0;
    if (ingest_urlarg(wsi, "session=", session, sizeof session) != 1 || !sg_blob_session_valid(session))
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("bad or missing session="));
    sg_err err = {0};
    json_t *rows = sg_store_casts(ing->store, id[0], id[1], id[2], &err);
    if (!rows)
        return read_failed(wsi, req, &err);
    /* The one (learner, task) the sandbox's recording is under. */
    json_t *row = NULL, *r;
    size_t i;
    json_array_foreach(rows, i, r)
        if (strcmp(json_string_value(json_object_get(r, "session")), session) == 0)
            row = r;
    if (!row) {
        json_decref(rows);
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, ingest_error_json("no such recording"));
    }
    sg_autobuf sg_buf b = {0};
    int rc = sg_buf_reserve(&b, LWS_PRE);
    b.len = LWS_PRE;
    if (rc == 0)
        rc = sg_store_cast_read(ing->store, json_string_value(json_object_get(row, "learner")),
                                json_string_value(json_object_get(row, "task")), id[2], session,
                                buf_take, &b, &err);
    json_decref(rows);
    if (rc < 0)
        return read_failed(wsi, req, &err);
    return answer_bytes(wsi, req, &b, "application/x-asciicast");
}

/* ingest_ops: the operator's writes to the ingest's store, POST /v1/import
 * and POST /v1/purge (docs/EXPORT.md, "Authority"), each with an operator
 * write token (wire/token.h: {"o": "import"|"purge"}, one minute) that only
 * the ingest's secret makes; every other kind (a read token too) is
 * refused 401, an import token at /v1/purge (or the reverse) 403.
 *
 * POST /v1/import: the body is a JSONL export (at most
 * INGEST_IMPORT_BODY_MAX bytes, its Content-Length required), written as it
 * comes to an unlinked temporary file (never held in memory), then loaded
 * by store_import.h's one transaction on libuv's thread pool over a
 * connection of its own: a bad line answers 400 naming its number, and
 * nothing is committed. POST /v1/purge?learner=&task=&sandbox=
 * &older_than_days= (no body) runs store_export.h's sg_store_purge there.
 * The loop only takes the body and writes the answer, so the ingest keeps
 * serving everyone else; its writer waits for the import's transaction as
 * any of the store's writers does (store.h: sg_store_load_*), its streams
 * held, not closed. One operation at a time per node (another is answered
 * 503); each token is taken once (its nonce remembered on this node until
 * its exp: a replay is 401). A request refused after its headers has its
 * body read and dropped first, so that a client sending it gets the
 * answer, not a reset.
 *
 * Each operation is logged in one line: what, its filter, its counts, the
 * peer's address and the token's id (sg_log escapes what a line carries). */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/query.h"
#include "ingest/store_export.h"
#include "ingest/store_import.h"

typedef struct op_job {
    struct ingest_ops *ops;
    struct lws *wsi;            /* NULL: the client went away */
    sg_http_req *req;
    uv_work_t work;
    bool import;
    bool slot;                  /* holds the node's one operation */
    bool queued, done;
    unsigned status;            /* a refusal answered once the body is in (0: none) */
    char why[256];
    int fd;                     /* the import's body, an unlinked temporary file */
    size_t want, got;
    int write_errno;
    char learner[SG_NAME_MAX + 1], task[SG_NAME_MAX + 1], sandbox[SG_NAME_MAX + 1];
    char cutoff[64], days[16];
    sg_store_purge_q q;
    char peer[64], token_id[SG_TOKEN_ID_LEN + 1];
    int rc;
    sg_err err;
    sg_store_import_result res;
    int64_t removed;
} op_job;

struct ingest_ops {
    char *url;
    op_job *running;            /* the one operation accepted, until its answer is made */
    sg_token_nonces nonces;     /* the tokens taken: each is good for one operation */
};

int ingest_ops_init(sg_ingest *ing, const char *store_url, sg_err *err)
{
    struct ingest_ops *ops = calloc(1, sizeof *ops);
    if (!ops || !(ops->url = strdup(store_url))) {
        free(ops);
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    ing->ops = ops;
    return 0;
}

static void job_free(op_job *j)
{
    if (j->slot && j->ops->running == j)
        j->ops->running = NULL;
    if (j->fd >= 0)
        close(j->fd);
    free(j);
}

/* A refusal to answer when the body is in (status, the message). */
static int job_refuse(op_job *j, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int job_refuse(op_job *j, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->why, sizeof j->why, fmt, ap);
    va_end(ap);
    j->status = status;
    return 0;
}

/* The body's temporary file: unlinked from the start (O_TMPFILE, else a
 * name removed at once), in $TMPDIR or /tmp. */
static int body_file(sg_err *err)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    sg_autofree char *path = sg_strdup_printf("%s/sg-import-XXXXXX", dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "temporary file in %s", dir);
    unlink(path);
    return fd;
}

/* ?learner=&task=&sandbox=&older_than_days= into j's filter, and nothing
 * else (a misspelt filter would widen the purge): 0, or -1 refused. */
static int purge_args(struct lws *wsi, op_job *j)
{
    static const char *const known[] = {"learner", "task", "sandbox", "older_than_days"};
    char msg[sizeof j->why];
    const char *why = ingest_query_names(wsi, known, SG_ARRAY_LEN(known),
                                         "POST /v1/purge takes learner, task, sandbox, older_than_days", msg,
                                         sizeof msg);
    if (why)
        return job_refuse(j, HTTP_STATUS_BAD_REQUEST, "%s", why), -1;
    char *const bufs[] = {j->learner, j->task, j->sandbox};
    const char **dst[] = {&j->q.learner, &j->q.task, &j->q.sandbox};
    for (int i = 0; i < 3; i++) {
        char name_eq[16];
        snprintf(name_eq, sizeof name_eq, "%s=", known[i]);
        int r = ingest_urlarg(wsi, name_eq, bufs[i], SG_NAME_MAX + 1);
        if (r < 0 || (r > 0 && !sg_valid_name(bufs[i])))
            return job_refuse(j, HTTP_STATUS_BAD_REQUEST, "%s: not a valid name (or given twice)", known[i]), -1;
        if (r > 0)
            *dst[i] = bufs[i];
    }
    int64_t days = 0;
    if (sg_query_i64(ingest_lws_frag, wsi, "older_than_days=", 1, &days) < 0 || days > 100000)
        return job_refuse(j, HTTP_STATUS_BAD_REQUEST, "%s", "older_than_days: a number of days (1..100000)"), -1;
    if (days > 0) {
        sg_store_cutoff((double)days, j->cutoff, sizeof j->cutoff);
        snprintf(j->days, sizeof j->days, "%" PRId64, days);
        j->q.older_than = j->cutoff;
    }
    if (!j->q.learner && !j->q.task && !j->q.sandbox && !j->q.older_than)
        return job_refuse(j, HTTP_STATUS_BAD_REQUEST, "%s", "give learner, task, sandbox or older_than_days"), -1;
    return 0;
}

/* The pool's thread: the import or the purge, on connections of its own. */
static void job_work(uv_work_t *w)
{
    op_job *j = w->data;
    if (!j->import) {
        j->rc = sg_store_purge(j->ops->url, &j->q, &j->removed, &j->err);
        return;
    }
    j->rc = -1;
    int fd = lseek(j->fd, 0, SEEK_SET) == 0 ? dup(j->fd) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
    if (!f) {
        sg_err_sys(&j->err, "the body's temporary file");
        if (fd >= 0)
            close(fd);
        return;
    }
    sg_store *s = sg_store_open(j->ops->url, &j->err);
    if (s) {
        j->rc = sg_store_import(s, f, &j->res, &j->err);
        sg_store_close(s);
    }
    fclose(f);
}

static const char *filter_of(const op_job *j, char *buf, size_t n)
{
    snprintf(buf, n, "learner=%s task=%s sandbox=%s older_than_days=%s", j->q.learner ? j->q.learner : "*",
             j->q.task ? j->q.task : "*", j->q.sandbox ? j->q.sandbox : "*", j->days[0] ? j->days : "-");
    return buf;
}

static void job_done(uv_work_t *w, int status)
{
    op_job *j = w->data;
    j->done = true;
    if (status != 0) {
        j->rc = -1;
        sg_err_set(&j->err, ECANCELED, "the ingest is stopping");
    }
    char f[SG_NAME_MAX * 3 + 96];
    if (j->import && j->rc == 0)
        sg_log(SG_LOG_INFO, "import from %s (token %s): %zu events imported, %zu already in the store", j->peer,
               j->token_id, j->res.inserted, j->res.total - j->res.inserted);
    else if (j->import)
        sg_log(SG_LOG_WARN, "import from %s (token %s) failed, nothing imported: %s", j->peer, j->token_id,
               j->err.msg);
    else if (j->rc == 0)
        sg_log(SG_LOG_INFO, "purge from %s (token %s): %s: %" PRId64 " events removed", j->peer, j->token_id,
               filter_of(j, f, sizeof f), j->removed);
    else
        sg_log(SG_LOG_WARN, "purge from %s (token %s) failed, nothing removed: %s: %s", j->peer, j->token_id,
               filter_of(j, f, sizeof f), j->err.msg);
    if (j->slot && j->ops->running == j)
        j->ops->running = NULL; /* the next may run while this answer is written */
    if (j->wsi)
        lws_callback_on_writable(j->wsi);
    else
        job_free(j);
}

/* j accepted (its body in, for an import): onto the thread pool. */
static int job_queue(sg_ingest *ing, struct lws *wsi, sg_http_req *req, op_job *j)
{
    j->work.data = j;
    if (uv_queue_work(ing->loop, &j->work, job_work, job_done) != 0) {
        req->op = NULL;
        job_free(j);
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR,
                              ingest_error_json("cannot queue the operation"));
    }
    j->queued = true;
    /* lws closes a request left unanswered for its idle timeout: this one
     * waits for its transaction */
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, INGEST_OP_WAIT_S);
    return 0;
}

/* A refused request answered (logged), its job gone. */
static int job_answer_refusal(sg_ingest *ing, struct lws *wsi, sg_http_req *req, op_job *j)
{
    (void)ing;
    ingest_log_refused(wsi, j->import ? "an import (POST /v1/import)" : "a purge (POST /v1/purge)", j->status,
                       j->why);
    unsigned status = j->status;
    json_t *body = ingest_error_json(j->why);
    req->op = NULL;
    job_free(j);
    return sg_http_answer(wsi, req, status, body);
}

int ingest_ops_post(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *uri)
{
    op_job *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->fd = -1;
    j->ops = ing->ops;
    j->wsi = wsi;
    j->req = req;
    j->import = strcmp(uri, "/v1/import") == 0;
    req->op = j;
    const char *what = j->import ? "import" : "purge";
    ingest_peer_of(wsi, j->peer);
    char clen[32] = "";
    int cn = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    unsigned long long n = 0;
    if (cn > 0 && (cn >= (int)sizeof clen || lws_hdr_copy(wsi, clen, sizeof clen, WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0))
        cn = -1;
    char *end = NULL;
    if (cn > 0)
        n = strtoull(clen, &end, 10);
    bool clen_ok = cn > 0 && end != clen && !*end;
    /* Answered at once, no body read: without a Content-Length lws could not
     * tell the body's end; past the bound it is not read at all. */
    if (j->import && (!clen_ok || n == 0 || n > INGEST_IMPORT_BODY_MAX)) {
        job_refuse(j, clen_ok ? HTTP_STATUS_REQ_ENTITY_TOO_LARGE : HTTP_STATUS_LENGTH_REQUIRED,
                   clen_ok ? "an import's body (a JSONL export) must be 1..%llu bytes"
                           : "an import needs a Content-Length (%llu bytes at most)",
                   (unsigned long long)INGEST_IMPORT_BODY_MAX);
        return job_answer_refusal(ing, wsi, req, j);
    }
    if (!j->import && cn > 0 && (!clen_ok || n != 0)) {
        job_refuse(j, HTTP_STATUS_BAD_REQUEST, "%s", "POST /v1/purge takes no body (its filter is the query)");
        return job_answer_refusal(ing, wsi, req, j);
    }
    j->want = (size_t)n;
    char token[SG_TOKEN_MAX + 64];
    sg_token_claims cl;
    sg_err err;
    const char *why = sg_http_bearer(wsi, token, sizeof token,
                                     "missing operator write token (Authorization: Bearer <token>; `sandglass "
                                     "import|purge --ingest URL` makes it from the ingest's secret)");
    if (!why && sg_token_verify_op(ing->secret, token + 7, (int64_t)time(NULL), &cl, &err) < 0)
        why = err.msg;
    unsigned status = HTTP_STATUS_UNAUTHORIZED;
    int t;
    if (why || ingest_token_revoked(ing, &cl, &status, &why)) {
        job_refuse(j, status, "%s", why);
    } else if (strcmp(cl.op, what) != 0) {
        snprintf(j->why, sizeof j->why, "this operator write token is for %s, not %s", cl.op, what);
        j->status = HTTP_STATUS_FORBIDDEN;
    } else if (!j->import && purge_args(wsi, j) < 0) {
        /* j->status and why set */
    } else if (strstr(ing->ops->url, ":memory:")) {
        job_refuse(j, HTTP_STATUS_NOT_IMPLEMENTED, "%s", "an in-memory store takes no import or purge");
    } else if (ing->ops->running) { /* before the nonce: the token is not spent */
        job_refuse(j, HTTP_STATUS_SERVICE_UNAVAILABLE, "%s",
                   "an import or a purge is running on this ingest: ask again when it ends");
    } else if ((t = sg_token_nonce_take(&ing->ops->nonces, cl.nonce, cl.exp, (int64_t)time(NULL))) != 0) {
        job_refuse(j, t > 0 ? HTTP_STATUS_UNAUTHORIZED : HTTP_STATUS_SERVICE_UNAVAILABLE, "%s",
                   t > 0 ? "operator write token already used (each is good for one operation)"
                         : "too many operator write tokens in the last minute: ask again later");
    } else if (j->import && (j->fd = body_file(&err)) < 0) {
        job_refuse(j, HTTP_STATUS_INTERNAL_SERVER_ERROR, "%s", err.msg);
    } else {
        snprintf(j->token_id, sizeof j->token_id, "%s", cl.id);
        j->slot = true;
        ing->ops->running = j;
    }
    if (!j->import && j->status)
        return job_answer_refusal(ing, wsi, req, j);
    /* lws ends a request that has a Content-Length (0 for a purge) with its
     * BODY_COMPLETION, answered after it; a purge without one goes now */
    if (!j->import && cn <= 0)
        return job_queue(ing, wsi, req, j);
    /* an import: answered when its body is in (read whole, refused or not) */
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, INGEST_OP_WAIT_S);
    return 0;
}

int ingest_ops_body(struct lws *wsi, sg_http_req *req, const void *in, size_t len)
{
    (void)wsi;
    op_job *j = req->op;
    if (len > j->want - j->got)
        return -1; /* lws gives no more than Content-Length: not a request of ours */
    j->got += len;
    if (j->status || j->write_errno)
        return 0; /* refused: dropped */
    if (sg_write_all(j->fd, in, len) < 0)
        j->write_errno = errno ? errno : EIO;
    /* each part restarts lws's idle timer: give the whole wait back */
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, INGEST_OP_WAIT_S);
    return 0;
}

int ingest_ops_body_done(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    op_job *j = req->op;
    if (!j->status && j->write_errno)
        job_refuse(j, HTTP_STATUS_INTERNAL_SERVER_ERROR, "writing the import's body: %s", strerror(j->write_errno));
    if (!j->status && j->got != j->want)
        job_refuse(j, HTTP_STATUS_BAD_REQUEST, "%s", "the import's body is shorter than its Content-Length");
    if (j->status)
        return job_answer_refusal(ing, wsi, req, j);
    return job_queue(ing, wsi, req, j);
}

int ingest_ops_writeable(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    (void)ing;
    op_job *j = req->op;
    if (!j->done)
        return 0; /* its answer comes later */
    req->op = NULL;
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
    json_t *body;
    unsigned status = HTTP_STATUS_OK;
    if (j->rc == 0 && j->import)
        body = json_pack("{s:b, s:I, s:I}", "ok", 1, "imported", (json_int_t)j->res.inserted, "already",
                         (json_int_t)(j->res.total - j->res.inserted));
    else if (j->rc == 0)
        body = json_pack("{s:b, s:I}", "ok", 1, "removed", (json_int_t)j->removed);
    else {
        char msg[sizeof j->err.msg + 32];
        snprintf(msg, sizeof msg, "%s (nothing %s)", j->err.msg, j->import ? "imported" : "removed");
        body = ingest_error_json(msg);
        if (j->import && j->res.bad_line) {
            status = HTTP_STATUS_BAD_REQUEST;
            json_object_set_new(body, "line", json_integer((json_int_t)j->res.bad_line));
        } else {
            status = j->err.code == ECANCELED ? HTTP_STATUS_SERVICE_UNAVAILABLE : HTTP_STATUS_INTERNAL_SERVER_ERROR;
        }
    }
    job_free(j);
    return sg_http_answer(wsi, req, status, body);
}

void ingest_ops_closed(sg_http_req *req)
{
    op_job *j = req ? req->op : NULL;
    if (!j)
        return;
    req->op = NULL;
    if (j->queued && !j->done) { /* its work runs: job_done frees it */
        j->wsi = NULL;
        j->req = NULL;
        return;
    }
    job_free(j);
}

void ingest_ops_stop(sg_ingest *ing)
{
    struct ingest_ops *ops = ing->ops;
    if (ops && ops->running && ops->running->queued && !ops->running->done)
        uv_cancel((uv_req_t *)&ops->running->work); /* not begun yet; a running one ends */
}

void ingest_ops_free(sg_ingest *ing)
{
    if (!ing->ops)
        return;
    if (ing->ops->running)
        ing->ops->running->slot = false; /* the job goes with its request */
    free(ing->ops->url);
    free(ing->ops);
    ing->ops = NULL;
}

/* ingest_pages: GET /v1/events and /v1/sandboxes on PostgreSQL, and GET
 * /v1/contents on both backends, read off the loop.
 *
 * On the loop, a page's query waited for PostgreSQL and its JSON was built
 * while nothing else ran: the database's work and the ingest's never
 * overlapped, and every stream's frames and acks, every other request
 * waited meanwhile (an export asks a page after another, for minutes).
 * Here the loop only reads the request's arguments and writes the
 * finished answer; the query and the page's JSON (ingest_events_body, the
 * same bytes as on the loop) run on libuv's thread pool, on one of
 * INGEST_READERS connections of this node's own, each opened at its first
 * page. While the loop writes one page, PostgreSQL executes the next (the
 * export's two fetchers ask two at a time). /v1/sandboxes, which an
 * export asks first and whose count of each stream's rows takes the
 * database a while on a large store (0.4 s at 1,000,000 events not yet
 * vacuumed), is read the same way.
 *
 * Threads, not libpq's asynchronous API with the socket watched by the
 * loop: that would take the wait off the loop but not the page's JSON (a
 * large part of the ingest's CPU in an export), and libpq 15 has no
 * chunked-rows mode, so the rows would come one PGresult at a time on the
 * loop.
 *
 * The request's token is looked up in the revoked tokens by the reader
 * too, just before its page: a token revoked on any node is refused (401)
 * as on the loop, without a round trip to the database on the loop.
 *
 * Bounds: INGEST_READERS pages in the making at once (so as many
 * connections), INGEST_READ_QUEUE_MAX requests waiting for a reader (more
 * are answered 503), each statement INGEST_READ_TIMEOUT_MS at most, and
 * a request left without its answer INGEST_PAGE_WAIT_S is closed. A
 * reader is held for the query only, never while a client reads: the page
 * is whole before its first byte is written, so a slow or silent client
 * holds its answer (bounded as every answer is, SG_HTTP_BODY_MAX) and no
 * connection to the database.
 *
 * Contents (ingest_contents.c) are read the same way on both backends: a
 * batch of 32 is up to 32 MiB, most of its time copies of the bytes, which
 * on the loop held every stream's frames and acks, and let one fetcher's
 * batch be read only while the other's was not. On SQLite a reader is a
 * connection of its own to the same file (WAL: it reads beside the
 * writer, never blocks it), /v1/events and /v1/sandboxes staying on the
 * loop. The loop checks a contents request's token (as every read's on
 * SQLite): its reader does not look it up again.
 *
 * A request that lws closes (its client gone,
 * found at the latest when its answer is written; or INGEST_PAGE_WAIT_S
 * passed) leaves the queue, or has its page thrown away when it comes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "ingest/ingest_internal.h"
#include "ingest/store_backend.h"

typedef struct page_job page_job;

typedef struct reader {
    sg_store *store; /* NULL until its first page (opened on the pool's thread) */
    page_job *job;   /* the page it reads; NULL: free */
} reader;

struct page_job {
    page_job *next;          /* the queue */
    struct ingest_pages *pp;
    struct lws *wsi;         /* NULL: the client went away */
    sg_http_req *req;
    reader *rd;              /* while read */
    uv_work_t work;
    int (*build)(page_job *j, sg_store *s); /* the answer into body, on the pool's thread */
    ingest_events_args a;                   /* a page of /v1/events */
    char sha[SG_CONTENTS_BATCH][65];        /* /v1/contents: the hashes, */
    size_t nsha;
    bool batch;                             /* and its form */
    sg_token_claims cl;                     /* /v1/sandboxes: the token's scope, */
    char prefix[SG_NAME_MAX + 8];           /* and ?prefix= ("" and has_prefix false: none) */
    bool has_prefix;
    char token_id[SG_TOKEN_ID_LEN + 1]; /* looked up in the revoked tokens by the reader */
    bool done;
    int rc;                  /* ingest_events_body's (or the reader's open) */
    unsigned status;         /* when rc < 0: 500, 401 for a revoked token, 404 (a content) */
    const char *mime;        /* set: body has LWS_PRE of headroom, handed over as this type */
    bool bounded;            /* and its size bound is sg_http_answer_text's (a page of events) */
    sg_err err;
    sg_buf body;
};

struct ingest_pages {
    uv_loop_t *loop;
    char *url;
    bool sqlite;             /* contents only: events and sandboxes on the loop */
    reader readers[INGEST_READERS];
    page_job *head, *tail;   /* waiting for a reader, first come first served */
    size_t queued;
};

int ingest_pages_init(sg_ingest *ing, const char *store_url, sg_err *err)
{
    if (strstr(store_url, ":memory:"))
        return 0; /* a store only its own connection sees: everything on the loop */
    struct ingest_pages *pp = calloc(1, sizeof *pp);
    if (!pp || !(pp->url = strdup(store_url))) {
        free(pp);
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    pp->sqlite = strncmp(store_url, "sqlite:", 7) == 0; /* its pages stay on the loop (ingest_read.c) */
    pp->loop = ing->loop;
    ing->pages = pp;
    return 0;
}

static void job_free(page_job *j)
{
    sg_buf_free(&j->body);
    free(j);
}

/* The request forgets its page (the page, its request). */
static void job_detach(page_job *j)
{
    if (j->req)
        j->req->page = NULL;
    j->req = NULL;
    j->wsi = NULL;
}

/* The pool's thread: the reader's connection (opened at its first page,
 * opened again by the store when lost), the query, the page's JSON. */
static void job_work(uv_work_t *w)
{
    page_job *j = w->data;
    reader *rd = j->rd;
    if (!rd->store) {
        rd->store = sg_store_open(j->pp->url, &j->err);
        if (rd->store && !j->pp->sqlite &&
            sg_store_pg_statement_timeout(rd->store, INGEST_READ_TIMEOUT_MS, &j->err) < 0) {
            sg_store_close(rd->store);
            rd->store = NULL;
        }
        if (!rd->store) {
            sg_err_prefix(&j->err, "a reader's connection");
            j->rc = -1;
            return;
        }
    }
    unsigned status = HTTP_STATUS_INTERNAL_SERVER_ERROR;
    const char *why = NULL;
    if (j->token_id[0] && ingest_token_revoked_in(rd->store, j->token_id, &status, &why)) {
        j->status = status;
        j->rc = sg_err_set(&j->err, 0, "%s", why);
        return;
    }
    j->rc = j->build(j, rd->store);
}

/* The page made after LWS_PRE bytes of headroom and ended with its
 * newline, as sg_http_answer_text would send it: handed to lws as it is
 * (that copy of each page, a fresh allocation of its size, was 7% of the
 * ingest's CPU in an export). */
static int build_events(page_job *j, sg_store *s)
{
    if (sg_buf_reserve(&j->body, LWS_PRE) < 0)
        return sg_err_set(&j->err, ENOMEM, "out of memory");
    j->body.len = LWS_PRE;
    j->mime = "application/json";
    j->bounded = true;
    if (ingest_events_body(s, &j->a, &j->body, &j->err) < 0)
        return -1;
    return sg_buf_append(&j->body, "\n", 1) < 0 ? sg_err_set(&j->err, ENOMEM, "out of memory") : 0;
}

static int build_sandboxes(page_job *j, sg_store *s)
{
    return ingest_sandboxes_body(s, &j->cl, j->has_prefix ? j->prefix : NULL, &j->body, &j->err);
}

static int build_contents(page_job *j, sg_store *s)
{
    const char *sha[SG_CONTENTS_BATCH];
    for (size_t i = 0; i < j->nsha; i++)
        sha[i] = j->sha[i];
    if (sg_buf_reserve(&j->body, LWS_PRE) < 0)
        return sg_err_set(&j->err, ENOMEM, "out of memory");
    j->body.len = LWS_PRE;
    int rc = ingest_contents_body(s, sha, j->nsha, j->batch, &j->body, &j->err);
    if (rc < 0 && j->err.code == ENOENT)
        j->status = HTTP_STATUS_NOT_FOUND;
    return rc;
}

static void job_done(uv_work_t *w, int status);

/* The next waiting pages to the free readers. */
static void pages_pump(struct ingest_pages *pp)
{
    for (size_t i = 0; i < INGEST_READERS && pp->head; i++) {
        reader *rd = &pp->readers[i];
        if (rd->job)
            continue;
        page_job *j = pp->head;
        pp->head = j->next;
        if (!pp->head)
            pp->tail = NULL;
        pp->queued--;
        j->next = NULL;
        j->rd = rd;
        rd->job = j;
        j->work.data = j;
        if (uv_queue_work(pp->loop, &j->work, job_work, job_done) != 0) {
            rd->job = NULL;
            j->rc = sg_err_set(&j->err, EAGAIN, "the thread pool refused the page's read");
            j->done = true;
            if (j->wsi)
                lws_callback_on_writable(j->wsi);
            else
                job_free(j);
        }
    }
}

static void job_done(uv_work_t *w, int status)
{
    page_job *j = w->data;
    struct ingest_pages *pp = j->pp;
    j->rd->job = NULL;
    j->rd = NULL;
    if (status != 0 && j->rc == 0)
        j->rc = sg_err_set(&j->err, ECANCELED, "the page's read was cancelled");
    j->done = true;
    if (j->wsi)
        lws_callback_on_writable(j->wsi); /* answered from HTTP_WRITEABLE */
    else
        job_free(j);
    pages_pump(pp);
}

/* A new request's job, or NULL with its 503 (or nothing: out of memory)
 * answered in *r. */
static page_job *job_new(struct ingest_pages *pp, struct lws *wsi, sg_http_req *req, int *r)
{
    *r = -1;
    if (pp->queued >= INGEST_READ_QUEUE_MAX) {
        *r = sg_http_answer(wsi, req, HTTP_STATUS_SERVICE_UNAVAILABLE,
                            ingest_error_json("too many reads waiting for the database: ask again later"));
        return NULL;
    }
    return calloc(1, sizeof(page_job));
}

/* j, its arguments read, queued for a reader. */
static int job_queue(struct ingest_pages *pp, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl,
                     page_job *j)
{
    snprintf(j->token_id, sizeof j->token_id, "%s", cl->id);
    j->status = HTTP_STATUS_INTERNAL_SERVER_ERROR;
    j->pp = pp;
    j->wsi = wsi;
    j->req = req;
    req->page = j;
    if (pp->tail)
        pp->tail->next = j;
    else
        pp->head = j;
    pp->tail = j;
    pp->queued++;
    /* lws closes a request left unanswered for its idle timeout (5 s):
     * this one may wait for a reader and then for its query */
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, INGEST_PAGE_WAIT_S);
    pages_pump(pp);
    return 0;
}

int ingest_pages_get(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    int r;
    page_job *j = job_new(ing->pages, wsi, req, &r);
    if (!j)
        return r;
    if (ingest_events_query(wsi, req, cl, &j->a)) {
        free(j);
        return 0;
    }
    j->build = build_events;
    return job_queue(ing->pages, wsi, req, cl, j);
}

int ingest_pages_sandboxes(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    int r;
    page_job *j = job_new(ing->pages, wsi, req, &r);
    if (!j)
        return r;
    const char *p;
    if (ingest_sandboxes_prefix(wsi, req, j->prefix, &p)) {
        free(j);
        return 0;
    }
    j->has_prefix = p != NULL;
    j->cl = *cl;
    j->build = build_sandboxes;
    return job_queue(ing->pages, wsi, req, cl, j);
}

bool ingest_pages_events_off_loop(const sg_ingest *ing)
{
    return ing->pages && !ing->pages->sqlite;
}

int ingest_pages_contents(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *const *sha, size_t n,
                          bool batch)
{
    int r;
    page_job *j = job_new(ing->pages, wsi, req, &r);
    if (!j)
        return r;
    for (size_t i = 0; i < n && i < SG_CONTENTS_BATCH; i++)
        snprintf(j->sha[i], sizeof j->sha[i], "%s", sha[i]);
    j->nsha = n < SG_CONTENTS_BATCH ? n : SG_CONTENTS_BATCH;
    j->batch = batch;
    j->mime = "application/octet-stream";
    j->build = build_contents;
    const sg_token_claims none = {0}; /* checked on the loop already: no id to look up */
    return job_queue(ing->pages, wsi, req, &none, j);
}

int ingest_pages_writeable(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    page_job *j = req->page;
    if (!j->done)
        return 0; /* not ours: the page comes later */
    job_detach(j);
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0); /* as an answer made at once: written at the client's pace */
    if (j->rc < 0 && j->status == HTTP_STATUS_UNAUTHORIZED) { /* as ingest_read.c's http_auth refuses */
        ing->metrics.refusals[INGEST_REFUSED_READ_TOKEN]++;
        ingest_log_refused(wsi, "a read", j->status, j->err.msg);
    }
    int r;
    if (j->rc < 0) {
        r = sg_http_answer(wsi, req, j->status, ingest_error_json(j->err.msg));
    } else if (j->bounded && j->body.len - LWS_PRE > SG_HTTP_BODY_MAX) { /* as sg_http_answer_text refuses */
        lws_return_http_status(wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "answer too big");
        r = -1;
    } else if (j->mime) { /* the bytes as made, handed over (their LWS_PRE in front) */
        size_t len = j->body.len - LWS_PRE;
        unsigned char *data = (unsigned char *)j->body.data;
        j->body = (sg_buf){0};
        r = sg_http_answer_body(wsi, req, HTTP_STATUS_OK, j->mime, data, len, NULL, 0);
    } else {
        r = sg_http_answer_text(wsi, req, HTTP_STATUS_OK, j->body.data, j->body.len);
    }
    job_free(j);
    return r;
}

/* A waiting page out of the queue. */
static void queue_remove(struct ingest_pages *pp, page_job *j)
{
    page_job **pj = &pp->head, *prev = NULL;
    while (*pj && *pj != j) {
        prev = *pj;
        pj = &(*pj)->next;
    }
    if (!*pj)
        return;
    *pj = j->next;
    if (pp->tail == j)
        pp->tail = prev;
    pp->queued--;
}

/* The request is gone: a page waiting leaves the queue; one being read
 * is thrown away when it comes (job_done); one done is freed. */
static void job_abandon(page_job *j)
{
    job_detach(j);
    if (j->rd)
        return;
    if (!j->done)
        queue_remove(j->pp, j);
    job_free(j);
}

void ingest_pages_closed(sg_http_req *req)
{
    if (req && req->page)
        job_abandon(req->page);
}

void ingest_pages_counts(const sg_ingest *ing, size_t *reading, size_t *waiting)
{
    const struct ingest_pages *pp = ing->pages;
    *reading = *waiting = 0;
    if (!pp)
        return;
    for (size_t i = 0; i < INGEST_READERS; i++)
        *reading += pp->readers[i].job != NULL;
    *waiting = pp->queued;
}

void ingest_pages_stop(sg_ingest *ing)
{
    struct ingest_pages *pp = ing->pages;
    if (!pp)
        return;
    while (pp->head)
        job_abandon(pp->head);
    for (size_t i = 0; i < INGEST_READERS; i++)
        if (pp->readers[i].job) {
            job_detach(pp->readers[i].job);
            uv_cancel((uv_req_t *)&pp->readers[i].job->work); /* one not begun yet; a running one ends */
        }
}

void ingest_pages_free(sg_ingest *ing)
{
    struct ingest_pages *pp = ing->pages;
    if (!pp)
        return;
    for (size_t i = 0; i < INGEST_READERS; i++)
        sg_store_close(pp->readers[i].store);
    free(pp->url);
    free(pp);
    ing->pages = NULL;
}

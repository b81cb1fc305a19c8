/* ingest: WebSocket + HTTP server storing event streams (see ingest.h). */
#include "ingest.h"

#include <errno.h>
#include <pthread.h>
#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "event.h"
#include "framescan.h"
#include "jsonutil.h"
#include "limits.h"
#include "store.h"
#include "token.h"
#include "util.h"

#define PROTO_NAME "sg-ingest"
#define INGEST_PATH "/v1/ingest"
#define HTTP_BODY_MAX (8 * 1024 * 1024) /* bound of one HTTP answer (1000 events) */

/* A stream identity, shared by a connection and its uncommitted rows (the
 * connection may close before its rows are committed). */
typedef struct ident {
    int refs;
    int64_t contig;   /* highest contiguous committed seq known to this node */
    int64_t beyond;   /* highest committed seq seen above a gap */
    bool gap;         /* committed seqs above a gap: ask the store */
    char learner[SG_NAME_MAX + 1];
    char task[SG_NAME_MAX + 1];
    char sandbox[SG_NAME_MAX + 1];
} ident;

static void ident_unref(ident *id)
{
    if (id && --id->refs == 0)
        free(id);
}

/* An accepted frame waiting for its commit: what the store needs, copied
 * out of the frame (no JSON tree; see framescan.h). */
typedef struct pending {
    ident *id;
    int64_t seq;
    int kind;           /* sg_event_kind */
    char *data;         /* owned: the payload's JSON text, NUL, ts, NUL */
    size_t payload_len;
    const char *ts;     /* into data */
    char received[40];
} pending;

typedef struct conn {
    struct conn *prev, *next;
    struct lws *wsi;
    ident *id;
    char *buf;            /* a message arriving in parts */
    size_t have, cap;
    int64_t acked;        /* highest contiguous committed seq known */
    bool ack_pending;
    bool dirty;           /* rows of this stream in the filling batch */
    bool inflight;        /* rows of this stream in the writer's batch */
    bool paused;          /* not read until the writer catches up */
} conn;

typedef struct http_req {
    unsigned char *body;  /* LWS_PRE bytes of headroom, then the body */
    size_t len;
} http_req;

struct sg_ingest {
    uv_loop_t *loop;
    struct lws_context *ctx;
    sg_store *store;
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    sg_store *wstore;             /* the writer thread's connection */
    uv_check_t check;
    uv_async_t done_async;
    bool check_init, async_init;
    char now[40];                 /* receive time, refreshed per callback */
    time_t now_sec;               /* the second now's date and time stand for */
    size_t now_prefix;            /* their length in now */
    pending *batch;               /* filling (loop thread) */
    size_t nbatch, batch_cap, batch_bytes;
    pending *spare;
    size_t spare_cap;
    /* Hand-over to the writer, under mu. */
    pthread_t writer;
    bool writer_started, writer_quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pending *job;
    size_t njob, job_cap, job_inserted;
    bool job_done;
    int job_rc;
    sg_err job_err;
    bool paused, mu_init;
    const struct lws_protocols *protocols;
    conn *conns;
    bool stopping;
    int port;
    sg_ingest_stats stats;
    sg_err last_err;
    /* A batch whose commit failed is kept and retried with backoff. */
    uv_timer_t retry;
    bool retry_init;
    uint64_t retry_ms;
};

/* ---------------------------------------------------------------- batch
 *
 * The loop thread validates frames and fills `batch`. A writer thread owns
 * a second store connection and commits one batch at a time (durably: the
 * fsync does not stall the loop), then wakes the loop (uv_async), which
 * computes each touched stream's contiguous seq on its own connection and
 * sends the acks. While the writer is busy the next batch grows (group
 * commit); past SG_INGEST_PENDING_MAX rows or SG_INGEST_BATCH_BYTES the
 * connection that delivers stops being read until the writer catches up. */

static void rows_release(pending *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ident_unref(rows[i].id);
        free(rows[i].data);
        rows[i].data = NULL;
    }
}

/* Writer side: put rows. Touches only the job's rows and the writer's
 * store; identities are read, never refcounted, here. */
static int job_commit(sg_store *store, pending *batch, size_t n, size_t *inserted, sg_err *err)
{
    sg_autofree sg_store_row *rows = calloc(n, sizeof *rows);
    if (!rows)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        pending *p = &batch[i];
        rows[i] = (sg_store_row){
            .learner = p->id->learner, .task = p->id->task, .sandbox = p->id->sandbox,
            .seq = p->seq, .kind = sg_event_kind_name(p->kind), .ts = p->ts,
            .received = p->received, .payload = p->data, .payload_len = p->payload_len,
        };
    }
    int r = sg_store_put(store, rows, n, inserted, err);
    /* Free the rows' bytes here, off the loop; the loop drops the
     * identities. A failed batch keeps them: the loop requeues the rows. */
    for (size_t i = 0; r == 0 && i < n; i++) {
        free(batch[i].data);
        batch[i].data = NULL;
    }
    return r;
}

static void *writer_main(void *arg)
{
    sg_ingest *ing = arg;
    pthread_mutex_lock(&ing->mu);
    for (;;) {
        while (!ing->job && !ing->writer_quit)
            pthread_cond_wait(&ing->cv, &ing->mu);
        if (!ing->job)
            break;
        pending *job = ing->job;
        size_t n = ing->njob;
        pthread_mutex_unlock(&ing->mu);
        size_t inserted = 0;
        sg_err err = {0};
        int r = job_commit(ing->wstore, job, n, &inserted, &err);
        pthread_mutex_lock(&ing->mu);
        ing->job_rc = r;
        ing->job_err = err;
        ing->job_inserted = inserted;
        ing->job_done = true;
        pthread_cond_broadcast(&ing->cv);
        uv_async_send(&ing->done_async);
        while (ing->job_done && !ing->writer_quit)
            pthread_cond_wait(&ing->cv, &ing->mu);
        if (ing->job_done) /* quitting with an unreaped job: the loop reaps it */
            break;
    }
    pthread_mutex_unlock(&ing->mu);
    return NULL;
}

static void queue_ack(conn *c)
{
    /* Acks even when the value did not move: a client replaying duplicates
     * learns that they are safe to drop. */
    c->ack_pending = true;
    lws_callback_on_writable(c->wsi);
}

static void submit(sg_ingest *ing);

/* Loop side: the writer finished a job. */
/* Puts a failed job's rows back in front of the filling batch. */
static int requeue(sg_ingest *ing, pending *job, size_t n)
{
    size_t total = n + ing->nbatch;
    size_t cap = total > 1024 ? total : 1024;
    pending *merged = malloc(cap * sizeof *merged);
    if (!merged)
        return -1;
    memcpy(merged, job, n * sizeof *job);
    if (ing->nbatch)
        memcpy(merged + n, ing->batch, ing->nbatch * sizeof *merged);
    free(ing->batch);
    ing->batch = merged;
    ing->nbatch = total;
    ing->batch_cap = cap;
    return 0;
}

static void submit(sg_ingest *ing);

static void on_retry(uv_timer_t *t)
{
    submit(t->data);
}

static void reap_job(sg_ingest *ing)
{
    pthread_mutex_lock(&ing->mu);
    if (!ing->job || !ing->job_done) {
        pthread_mutex_unlock(&ing->mu);
        return;
    }
    pending *job = ing->job;
    size_t n = ing->njob;
    int r = ing->job_rc;
    sg_err err = ing->job_err;
    size_t inserted = ing->job_inserted;
    ing->job = NULL;
    ing->njob = 0;
    ing->job_done = false;
    pthread_cond_broadcast(&ing->cv);
    pthread_mutex_unlock(&ing->mu);

    if (r == 0) {
        ing->stats.commits++;
        ing->stats.inserted += inserted;
        ing->stats.duplicates += n - inserted;
        ing->retry_ms = 0;
        /* Advance each stream's watermark from what this commit holds (in
         * order, the usual case), so acks need no query; a gap (frames out
         * of order) falls back to asking the store. */
        for (size_t i = 0; i < n; i++) {
            ident *id = job[i].id;
            if (job[i].seq == id->contig + 1)
                id->contig = job[i].seq;
            else if (job[i].seq > id->beyond)
                id->beyond = job[i].seq;
            if (id->beyond > id->contig)
                id->gap = true;
        }
        rows_release(job, n);
    } else {
        /* No ack, and the accepted rows are kept: they go first into the
         * next batch, retried with backoff (the clients' spools also
         * still hold them). */
        lwsl_err("sandglass ingest: commit failed (retrying): %s\n", err.msg);
        ing->last_err = err;
        if (requeue(ing, job, n) < 0)
            rows_release(job, n);
        for (conn *c = ing->conns; c; c = c->next)
            if (c->inflight)
                c->dirty = true;
        ing->retry_ms = ing->retry_ms ? ing->retry_ms * 2 : SG_INGEST_RETRY_MIN_MS;
        if (ing->retry_ms > SG_INGEST_RETRY_MAX_MS)
            ing->retry_ms = SG_INGEST_RETRY_MAX_MS;
        if (ing->retry_init)
            uv_timer_start(&ing->retry, on_retry, ing->retry_ms, 0);
    }
    /* Keep the larger array for the next batch. */
    if (!ing->spare || ing->spare_cap < ing->job_cap) {
        free(ing->spare);
        ing->spare = job;
        ing->spare_cap = ing->job_cap;
    } else {
        free(job);
    }
    for (conn *c = ing->conns; c; c = c->next) {
        if (!c->inflight)
            continue;
        c->inflight = false;
        sg_err qerr;
        if (r != 0)
            continue;
        if (!c->id->gap) {
            if (c->id->contig > c->acked)
                c->acked = c->id->contig;
            queue_ack(c);
        } else if (sg_store_contiguous(ing->store, c->id->learner, c->id->task,
                                       c->id->sandbox, &c->acked, &qerr) == 0) {
            c->id->contig = c->acked;
            c->id->gap = c->id->beyond > c->id->contig;
            queue_ack(c);
        }
    }
    if (ing->paused) {
        ing->paused = false;
        for (conn *c = ing->conns; c; c = c->next)
            if (c->paused) {
                c->paused = false;
                lws_rx_flow_control(c->wsi, 1);
            }
    }
    if (ing->nbatch > 0 && r == 0)
        submit(ing); /* what piled up meanwhile goes at once */
}

static void on_done_async(uv_async_t *h)
{
    reap_job(h->data);
}

/* Hands the current batch to the writer if it is idle. */
static void submit(sg_ingest *ing)
{
    if (ing->nbatch == 0 || ing->job)
        return;
    if (ing->retry_ms && ing->retry_init && uv_is_active((uv_handle_t *)&ing->retry))
        return; /* the last commit failed: wait for the retry timer */
    for (conn *c = ing->conns; c; c = c->next) {
        if (c->dirty) {
            c->dirty = false;
            c->inflight = true;
        }
    }
    pthread_mutex_lock(&ing->mu);
    ing->job = ing->batch;
    ing->njob = ing->nbatch;
    ing->job_cap = ing->batch_cap;
    ing->job_done = false;
    pthread_cond_broadcast(&ing->cv);
    pthread_mutex_unlock(&ing->mu);
    ing->batch = ing->spare;
    ing->batch_cap = ing->spare_cap;
    ing->spare = NULL;
    ing->spare_cap = 0;
    ing->nbatch = 0;
    ing->batch_bytes = 0;
}

/* Runs once per loop iteration, after the I/O callbacks: everything read
 * in this iteration goes into one transaction (group commit). */
static void on_check(uv_check_t *h)
{
    submit(h->data);
}

static int batch_add(sg_ingest *ing, conn *c, const sg_frame_view *v, size_t bytes)
{
    if (ing->nbatch == ing->batch_cap) {
        size_t cap = ing->batch_cap ? ing->batch_cap * 2 : 1024;
        pending *nb = realloc(ing->batch, cap * sizeof *nb);
        if (!nb)
            return -1;
        ing->batch = nb;
        ing->batch_cap = cap;
    }
    /* The payload's own bytes and ts in one block: the frame's buffer
     * belongs to lws, and the store takes the payload as it came. */
    char *data = malloc(v->payload_len + v->ts_len + 2);
    if (!data)
        return -1;
    memcpy(data, v->payload, v->payload_len);
    data[v->payload_len] = '\0';
    memcpy(data + v->payload_len + 1, v->ts, v->ts_len);
    data[v->payload_len + 1 + v->ts_len] = '\0';
    pending *p = &ing->batch[ing->nbatch++];
    p->id = c->id;
    c->id->refs++;
    p->seq = v->seq;
    p->kind = v->kind;
    p->data = data;
    p->payload_len = v->payload_len;
    p->ts = data + v->payload_len + 1;
    memcpy(p->received, ing->now, sizeof p->received);
    ing->batch_bytes += bytes;
    ing->stats.frames++;
    c->dirty = true;
    if (ing->nbatch >= SG_INGEST_BATCH_ROWS)
        submit(ing);
    if (ing->nbatch >= SG_INGEST_PENDING_MAX || ing->batch_bytes >= SG_INGEST_BATCH_BYTES) {
        /* Writer behind: stop reading this connection until it catches up. */
        if (!c->paused)
            lws_rx_flow_control(c->wsi, 0);
        c->paused = true;
        ing->paused = true;
    }
    return 0;
}

/* Stops the writer after its current job; commits what is left from here. */
static int drain_and_stop_writer(sg_ingest *ing, sg_err *err)
{
    if (!ing->writer_started)
        return 0;
    pthread_mutex_lock(&ing->mu);
    while (ing->job && !ing->job_done)
        pthread_cond_wait(&ing->cv, &ing->mu);
    pthread_mutex_unlock(&ing->mu);
    reap_job(ing); /* may submit the rest: wait for that too */
    pthread_mutex_lock(&ing->mu);
    while (ing->job && !ing->job_done)
        pthread_cond_wait(&ing->cv, &ing->mu);
    pthread_mutex_unlock(&ing->mu);
    int had_err = ing->job && ing->job_rc < 0;
    if (had_err)
        *err = ing->job_err;
    reap_job(ing);
    pthread_mutex_lock(&ing->mu);
    ing->writer_quit = true;
    pthread_cond_broadcast(&ing->cv);
    pthread_mutex_unlock(&ing->mu);
    pthread_join(ing->writer, NULL);
    ing->writer_started = false;
    int r = had_err ? -1 : 0;
    if (ing->nbatch > 0) { /* left when the last reap found no idle writer */
        size_t inserted = 0;
        if (job_commit(ing->wstore, ing->batch, ing->nbatch, &inserted, err) < 0)
            r = -1;
        rows_release(ing->batch, ing->nbatch);
        ing->nbatch = 0;
    }
    return r;
}

/* ---------------------------------------------------------------- WebSocket */

static int refuse_handshake(struct lws *wsi, unsigned int status, const char *reason)
{
    lwsl_notice("sandglass ingest: handshake refused (%u): %s\n", status, reason);
    lws_return_http_status(wsi, status, reason);
    return -1;
}

/* Copies a query argument's value; 1 if present, 0 if absent, -1 if too long. */
static int urlarg(struct lws *wsi, const char *name_eq, char *buf, int len)
{
    const char *v = lws_get_urlarg_by_name(wsi, name_eq, buf, len);
    if (!v)
        return 0;
    size_t vl = strlen(v);
    if ((int)vl >= len - 1)
        return -1;
    memmove(buf, v, vl + 1);
    return 1;
}

static int check_handshake(sg_ingest *ing, struct lws *wsi, conn *c)
{
    char uri[256];
    int ulen = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    if (ulen <= 0 || ulen >= (int)sizeof uri ||
        lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 ||
        strcmp(uri, INGEST_PATH) != 0)
        return refuse_handshake(wsi, HTTP_STATUS_NOT_FOUND, "unknown path (use " INGEST_PATH ")");

    char token[SG_TOKEN_MAX + 64];
    token[0] = '\0';
    int alen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (alen > 0) {
        if (alen >= (int)sizeof token ||
            lws_hdr_copy(wsi, token, sizeof token, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
            return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED, "malformed token: too long");
        if (strncasecmp(token, "Bearer ", 7) != 0)
            return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED,
                                    "Authorization must be 'Bearer <token>'");
        memmove(token, token + 7, strlen(token + 7) + 1);
    } else {
        int r = urlarg(wsi, "token=", token, sizeof token);
        if (r < 0)
            return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED, "malformed token: too long");
        if (r == 0)
            return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED,
                                    "missing token (Authorization: Bearer or ?token=)");
    }
    sg_token_claims cl;
    sg_err err;
    if (sg_token_verify(ing->secret, token, (int64_t)time(NULL), &cl, &err) < 0)
        return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED, err.msg);

    /* The original agent's URL names the identity: it must be the token's. */
    static const char *const names[] = {"learner_id=", "task_id=", "sandbox_id="};
    const char *want[] = {cl.learner, cl.task, cl.sandbox};
    for (size_t i = 0; i < SG_ARRAY_LEN(names); i++) {
        char v[SG_NAME_MAX + 8];
        int r = urlarg(wsi, names[i], v, sizeof v);
        if (r < 0 || (r > 0 && strcmp(v, want[i]) != 0)) {
            char msg[96];
            snprintf(msg, sizeof msg, "query %.*s does not match the token",
                     (int)strlen(names[i]) - 1, names[i]);
            return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED, msg);
        }
    }

    ident *id = calloc(1, sizeof *id);
    if (!id)
        return refuse_handshake(wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "out of memory");
    id->refs = 1;
    memcpy(id->learner, cl.learner, sizeof id->learner);
    memcpy(id->task, cl.task, sizeof id->task);
    memcpy(id->sandbox, cl.sandbox, sizeof id->sandbox);
    memset(c, 0, sizeof *c);
    c->id = id;
    c->acked = -1;
    return 0;
}

static int close_with(struct lws *wsi, int code, const char *reason)
{
    /* A close reason fits in a 125-byte control frame. */
    size_t n = strnlen(reason, 123);
    lwsl_notice("sandglass ingest: closing connection (%d): %s\n", code, reason);
    lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)reason, n);
    return -1;
}

static int on_frame(sg_ingest *ing, conn *c, const char *buf, size_t len)
{
    sg_frame_view v;
    sg_err err;
    int r = sg_frame_scan(buf, len, c->id->sandbox, &v, &err);
    if (r < 0) {
        if (r != -SG_FRAMESCAN_CLOSE_INTERNAL)
            ing->stats.refused++;
        return close_with(c->wsi, -r, err.msg);
    }
    r = batch_add(ing, c, &v, len);
    sg_frame_view_clear(&v);
    if (r < 0)
        return close_with(c->wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
    return 0;
}

static int on_receive(sg_ingest *ing, conn *c, const char *in, size_t len)
{
    if (lws_frame_is_binary(c->wsi)) {
        ing->stats.refused++;
        return close_with(c->wsi, SG_CLOSE_UNSUPPORTED, "binary messages are not accepted");
    }
    size_t remaining = lws_remaining_packet_payload(c->wsi);
    bool final = lws_is_final_fragment(c->wsi) && remaining == 0;
    /* lws 4.1 has no message size limit: enforce ours before buffering. */
    if (c->have + len + remaining > SG_FRAME_MAX) {
        ing->stats.refused++;
        return close_with(c->wsi, SG_CLOSE_TOO_BIG, "frame exceeds the size limit");
    }
    if (c->have == 0 && final) /* the common case: a whole message at once */
        return on_frame(ing, c, in, len);
    if (c->have + len > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->have + len + remaining)
            cap *= 2;
        if (cap > SG_FRAME_MAX)
            cap = SG_FRAME_MAX;
        char *nb = realloc(c->buf, cap);
        if (!nb)
            return close_with(c->wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
        c->buf = nb;
        c->cap = cap;
    }
    memcpy(c->buf + c->have, in, len);
    c->have += len;
    if (!final)
        return 0;
    int r = on_frame(ing, c, c->buf, c->have);
    c->have = 0;
    return r;
}

static void conn_link(sg_ingest *ing, conn *c)
{
    c->prev = NULL;
    c->next = ing->conns;
    if (ing->conns)
        ing->conns->prev = c;
    ing->conns = c;
}

static void conn_unlink(sg_ingest *ing, conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (ing->conns == c)
        ing->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* ing->now = sg_now_iso8601(), with the date and time of day formatted
 * once a second: gmtime and strftime per message were a tenth of the
 * loop's instructions. */
static void stamp_now(sg_ingest *ing)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ing->now_prefix == 0 || ts.tv_sec != ing->now_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        ing->now_prefix = strftime(ing->now, sizeof ing->now - 14, "%Y-%m-%dT%H:%M:%S", &tm);
        ing->now_sec = ts.tv_sec;
    }
    char *p = ing->now + ing->now_prefix;
    long us = ts.tv_nsec / 1000;
    *p++ = '.';
    for (int d = 5; d >= 0; d--, us /= 10)
        p[d] = (char)('0' + us % 10);
    memcpy(p + 6, "+00:00", 7);
}

static int cb_ingest(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
    sg_ingest *ing = lws_context_user(lws_get_context(wsi));
    conn *c = user;

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        if (ing->stopping)
            return refuse_handshake(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "shutting down");
        return check_handshake(ing, wsi, c);

    case LWS_CALLBACK_ESTABLISHED: {
        c->wsi = wsi;
        conn_link(ing, c);
        /* Tell a reconnecting client where the server is. */
        sg_err err;
        if (sg_store_contiguous(ing->store, c->id->learner, c->id->task, c->id->sandbox,
                                &c->acked, &err) < 0)
            return close_with(wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "store unavailable");
        c->id->contig = c->id->beyond = c->acked;
        c->ack_pending = true;
        lws_callback_on_writable(wsi);
        return 0;
    }

    case LWS_CALLBACK_RECEIVE:
        stamp_now(ing);
        return on_receive(ing, c, in, len);

    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (!c->ack_pending)
            return 0;
        unsigned char buf[LWS_PRE + 48];
        int n = snprintf((char *)buf + LWS_PRE, 48, "{\"ack\":%lld}", (long long)c->acked);
        if (lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_TEXT) < n)
            return -1;
        c->ack_pending = false;
        return 0;
    }

    case LWS_CALLBACK_CLOSED:
        conn_unlink(ing, c);
        free(c->buf);
        c->buf = NULL;
        ident_unref(c->id);
        c->id = NULL;
        return 0;

    default:
        return 0;
    }
}

/* ---------------------------------------------------------------- HTTP */

static int http_answer(struct lws *wsi, http_req *req, unsigned int status, json_t *body_json)
{
    sg_autofree char *text = body_json ? json_dumps(body_json, JSON_COMPACT) : NULL;
    json_decref(body_json);
    if (!text)
        return -1;
    size_t len = strlen(text);
    if (len + 1 > HTTP_BODY_MAX)
        return lws_return_http_status(wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "answer too big"),
               -1;
    req->body = malloc(LWS_PRE + len + 1);
    if (!req->body)
        return -1;
    memcpy(req->body + LWS_PRE, text, len);
    req->body[LWS_PRE + len] = '\n';
    req->len = len + 1;

    unsigned char hbuf[LWS_PRE + 1024], *start = hbuf + LWS_PRE, *p = start,
                                        *end = hbuf + sizeof hbuf - 1;
    if (lws_add_http_common_headers(wsi, status, "application/json", req->len, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    lws_callback_on_writable(wsi);
    return 0;
}

static json_t *error_json(const char *msg)
{
    return json_pack("{s:s}", "error", msg);
}

/* Optional query argument: 0 absent, 1 present (copied), -1 too long. */
static int http_arg(struct lws *wsi, const char *name_eq, char *buf, int len)
{
    return urlarg(wsi, name_eq, buf, len);
}

static int parse_i64_arg(struct lws *wsi, const char *name_eq, int64_t min, int64_t *out,
                         const char **bad)
{
    char v[32];
    int r = http_arg(wsi, name_eq, v, sizeof v);
    if (r == 0)
        return 0;
    char *endp = NULL;
    errno = 0;
    long long x = r > 0 ? strtoll(v, &endp, 10) : 0;
    if (r < 0 || errno || !*v || *endp || x < min) {
        *bad = name_eq;
        return -1;
    }
    *out = x;
    return 0;
}

static int http_events(sg_ingest *ing, struct lws *wsi, http_req *req)
{
    char l[SG_NAME_MAX + 8], t[SG_NAME_MAX + 8], sb[SG_NAME_MAX + 8];
    sg_store_query q = {.after_seq = -1, .after_id = -1};
    int rl = http_arg(wsi, "learner=", l, sizeof l), rt = http_arg(wsi, "task=", t, sizeof t),
        rs = http_arg(wsi, "sandbox=", sb, sizeof sb);
    if (rl < 0 || rt < 0 || rs < 0)
        return http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, error_json("name too long"));
    q.learner = rl > 0 ? l : NULL;
    q.task = rt > 0 ? t : NULL;
    q.sandbox = rs > 0 ? sb : NULL;
    const char *bad = NULL;
    int64_t limit = 0;
    if (parse_i64_arg(wsi, "after_seq=", -1, &q.after_seq, &bad) < 0 ||
        parse_i64_arg(wsi, "after_id=", -1, &q.after_id, &bad) < 0 ||
        parse_i64_arg(wsi, "limit=", 1, &limit, &bad) < 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "bad value for %.*s", (int)strlen(bad) - 1, bad);
        return http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, error_json(msg));
    }
    q.limit = limit > SG_STORE_QUERY_MAX ? SG_STORE_QUERY_MAX : (size_t)limit;
    sg_err err;
    json_t *events = sg_store_events(ing->store, &q, &err);
    if (!events)
        return http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, error_json(err.msg));
    return http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:o}", "events", events));
}

static int cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
    sg_ingest *ing = lws_context_user(lws_get_context(wsi));
    http_req *req = user;

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* "Sec-WebSocket-Protocol: http" would bind an upgrade here, past
         * the token check: WebSockets are only for PROTO_NAME. */
        return refuse_handshake(wsi, HTTP_STATUS_BAD_REQUEST,
                                "unknown WebSocket subprotocol (use " PROTO_NAME " or none)");

    case LWS_CALLBACK_HTTP: {
        const char *uri = in;
        memset(req, 0, sizeof *req);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
            return http_answer(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED,
                               error_json("only GET is supported"));
        if (strcmp(uri, "/healthz") == 0)
            return http_answer(wsi, req, HTTP_STATUS_OK,
                               json_pack("{s:b, s:I}", "ok", 1, "port", (json_int_t)ing->port));
        if (strcmp(uri, "/v1/sandboxes") == 0) {
            sg_err err;
            json_t *sbs = sg_store_sandboxes(ing->store, &err);
            if (!sbs)
                return http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR,
                                   error_json(err.msg));
            return http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:o}", "sandboxes", sbs));
        }
        if (strcmp(uri, "/v1/events") == 0)
            return http_events(ing, wsi, req);
        if (strcmp(uri, INGEST_PATH) == 0)
            return http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                               error_json("WebSocket upgrade required"));
        return http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, error_json("not found"));
    }

    case LWS_CALLBACK_HTTP_WRITEABLE: {
        if (!req->body)
            return -1;
        int n = lws_write(wsi, req->body + LWS_PRE, req->len, LWS_WRITE_HTTP_FINAL);
        free(req->body);
        req->body = NULL;
        if (n < (int)req->len)
            return -1;
        if (lws_http_transaction_completed(wsi))
            return -1;
        return 0;
    }

    case LWS_CALLBACK_CLOSED_HTTP:
        free(req->body);
        req->body = NULL;
        return 0;

    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"http", cb_http, sizeof(http_req), 0, 0, NULL, 0},
    {PROTO_NAME, cb_ingest, sizeof(conn), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* An upgrade without Sec-WebSocket-Protocol would otherwise bind to
 * protocols[0] and skip the token check (DEPENDENCY-NOTES). */
static const struct lws_protocol_vhost_options pvo_default = {NULL, NULL, "default", "1"};
static const struct lws_protocol_vhost_options pvo = {NULL, &pvo_default, PROTO_NAME, ""};

/* ---------------------------------------------------------------- lifecycle */

int sg_ingest_parse_listen(const char *s, char *host, size_t host_len, int *port, sg_err *err)
{
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s)
        return sg_err_set(err, EINVAL, "listen address '%s': expected HOST:PORT", s ? s : "");
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= host_len)
        return sg_err_set(err, EINVAL, "listen address '%s': bad host", s);
    char *endp = NULL;
    errno = 0;
    long p = strtol(colon + 1, &endp, 10);
    if (errno || !colon[1] || *endp || p < 0 || p > 65535)
        return sg_err_set(err, EINVAL, "listen address '%s': bad port", s);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

static void lws_log_emit(int level, const char *line)
{
    /* lws logs go to stderr with a prefix; stdout is for the listen line. */
    fprintf(stderr, "%s", line);
    (void)level;
}

sg_ingest *sg_ingest_start(uv_loop_t *loop, const sg_ingest_opts *opts, sg_err *err)
{
    sg_ingest *ing = calloc(1, sizeof *ing);
    if (!ing) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    ing->loop = loop;
    if (sg_token_secret_ensure(opts->secret_path, ing->secret, err) < 0)
        goto fail;
    ing->store = sg_store_open(opts->store_url, err);
    if (!ing->store)
        goto fail;
    ing->wstore = sg_store_open(opts->store_url, err);
    if (!ing->wstore)
        goto fail;
    ing->protocols = protocols;

    lws_set_log_level(getenv("SG_INGEST_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE : LLL_ERR,
                      lws_log_emit);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    void *foreign_loops[1] = {loop};
    info.port = opts->port;
    info.iface = opts->host;
    info.protocols = protocols;
    info.pvo = &pvo;
    info.options = LWS_SERVER_OPTION_LIBUV;
    info.foreign_loops = foreign_loops;
    info.user = ing;
    info.gid = (gid_t)-1;
    info.uid = (uid_t)-1;
    info.max_http_header_data = SG_TOKEN_MAX + 4096;
    info.vhost_name = "default";
    ing->ctx = lws_create_context(&info);
    if (!ing->ctx) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d (address in use or not local?)",
                   opts->host, opts->port);
        goto fail;
    }
    ing->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(ing->ctx, "default"));
    if (ing->port <= 0) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d", opts->host, opts->port);
        goto fail;
    }
    pthread_mutex_init(&ing->mu, NULL);
    pthread_cond_init(&ing->cv, NULL);
    ing->mu_init = true;
    uv_async_init(loop, &ing->done_async, on_done_async);
    ing->done_async.data = ing;
    ing->async_init = true;
    int pr = pthread_create(&ing->writer, NULL, writer_main, ing);
    if (pr != 0) {
        errno = pr;
        sg_err_sys(err, "start the writer thread");
        goto fail;
    }
    ing->writer_started = true;
    uv_timer_init(loop, &ing->retry);
    ing->retry.data = ing;
    ing->retry_init = true;
    uv_check_init(loop, &ing->check);
    ing->check.data = ing;
    ing->check_init = true;
    uv_check_start(&ing->check, on_check);
    return ing;
fail:
    if (ing->ctx) {
        lws_context_destroy(ing->ctx);
        ing->ctx = NULL;
    }
    sg_ingest_free(ing);
    return NULL;
}

int sg_ingest_port(const sg_ingest *ing)
{
    return ing->port;
}

void sg_ingest_get_stats(const sg_ingest *ing, sg_ingest_stats *out)
{
    *out = ing->stats;
}

int sg_ingest_stop(sg_ingest *ing, sg_err *err)
{
    if (ing->stopping)
        return 0;
    ing->stopping = true;
    int r = drain_and_stop_writer(ing, err);
    if (ing->check_init) {
        uv_check_stop(&ing->check);
        uv_close((uv_handle_t *)&ing->check, NULL);
        ing->check_init = false;
    }
    if (ing->async_init) {
        uv_close((uv_handle_t *)&ing->done_async, NULL);
        ing->async_init = false;
    }
    if (ing->retry_init) {
        uv_timer_stop(&ing->retry);
        uv_close((uv_handle_t *)&ing->retry, NULL);
        ing->retry_init = false;
    }
    /* Inside the loop: lws closes its handles; the loop then drains. */
    if (ing->ctx)
        lws_context_destroy(ing->ctx);
    return r;
}

void sg_ingest_free(sg_ingest *ing)
{
    if (!ing)
        return;
    if (ing->ctx)
        lws_context_destroy(ing->ctx); /* second call after the loop drained */
    sg_err err;
    drain_and_stop_writer(ing, &err);
    rows_release(ing->batch, ing->nbatch);
    free(ing->batch);
    free(ing->spare);
    if (ing->mu_init) {
        pthread_mutex_destroy(&ing->mu);
        pthread_cond_destroy(&ing->cv);
    }
    sg_store_close(ing->store);
    sg_store_close(ing->wstore);
    OPENSSL_cleanse(ing->secret, sizeof ing->secret);
    free(ing);
}

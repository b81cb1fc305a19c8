/* ingest: WebSocket + HTTP server storing event streams (see ingest.h). */
#include "ingest/ingest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/framescan.h"
#include "ingest/http.h"
#include "ingest/query.h"
#include "ingest/store.h"
#include "wire/event.h"
#include "wire/token.h"

#define PROTO_NAME "sg-ingest"
#define INGEST_PATH "/v1/ingest"
#define HTTP_PAGE_BYTES (4 * 1024 * 1024) /* payload bytes of one /v1/events page, about */
#define HTTP_HEADER_DATA (SG_TOKEN_MAX + 4096) /* lws's buffer for one request's headers */

#define LIMITS_BUCKETS 1024

/* A client address and its connections. */
typedef struct peer {
    struct peer *next;
    unsigned char addr[16];  /* IPv4 as ::ffff:a.b.c.d */
    unsigned conns, reserve;
} peer;

/* A connection counted against its peer. */
typedef struct tracked {
    struct tracked *next;
    struct lws *wsi;
    peer *peer;
    bool reserve;
} tracked;

/* A stream identity, shared by a connection and its uncommitted rows (the
 * connection may close before its rows are committed). */
typedef struct ident {
    int refs;
    int64_t contig;   /* highest contiguous committed seq known to this node */
    int64_t beyond;   /* highest committed seq seen above a gap */
    bool gap;         /* committed seqs above a gap: ask the store */
    bool refused;     /* the store refused a row of this connection's stream */
    char reason[124]; /* why (the first refusal) */
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
    uint8_t verdict;    /* sg_store_verdict, set by the writer */
} pending;

typedef struct conn {
    struct conn *prev, *next;
    struct lws *wsi;
    ident *id;
    char *buf;            /* a message arriving in parts */
    size_t have, cap;
    int64_t acked;        /* highest contiguous committed seq known */
    int64_t next_seq;     /* the seq this connection may send next (more is a gap) */
    /* After the first ack (where the stream is), an ack covers no more than
     * this connection's own committed frames: a frame another holder of the
     * token stored there is never acked to this client as if it were its
     * own (its resend is compared, and refused if it differs). */
    int64_t recv_high;    /* highest seq this connection put in a batch */
    int64_t job_high;     /* recv_high when its rows went to the writer */
    int64_t own_high;     /* highest seq of its own committed, -1: none */
    bool greeted;         /* the first ack is sent */
    bool kill;            /* close at the next WRITEABLE (the store refused a row) */
    bool killed;          /* its close frame is sent */
    bool ack_pending;
    bool dirty;           /* rows of this stream in the filling batch */
    bool inflight;        /* rows of this stream in the writer's batch */
    bool paused;          /* not read until the writer catches up */
} conn;


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
    /* Connection limits (see ingest.h). */
    unsigned max_conns, max_per_addr;
    size_t nconns, nreserve;
    struct peer *peers[LIMITS_BUCKETS];     /* by address */
    struct tracked *tracked[LIMITS_BUCKETS]; /* by wsi */
    struct peer *admitted;                 /* admitted, its wsi not created yet */
    bool admitted_reserve;
    bool stopping;
    int port;
    sg_ingest_stats stats;
    sg_err last_err;
    /* A batch whose commit failed is kept and retried with backoff. */
    uv_timer_t retry;
    bool retry_init;
    uint64_t retry_ms;
};

static bool limits_is_reserve(sg_ingest *ing, struct lws *wsi);

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
    sg_autofree uint8_t *verdicts = calloc(n, 1);
    if (!rows || !verdicts)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        pending *p = &batch[i];
        rows[i] = (sg_store_row){
            .learner = p->id->learner, .task = p->id->task, .sandbox = p->id->sandbox,
            .seq = p->seq, .kind = sg_event_kind_name(p->kind), .ts = p->ts,
            .received = p->received, .payload = p->data, .payload_len = p->payload_len,
        };
    }
    int r = sg_store_append(store, rows, n, verdicts, inserted, err);
    /* Free the rows' bytes here, off the loop; the loop drops the
     * identities. A failed batch keeps them: the loop requeues the rows. */
    for (size_t i = 0; r == 0 && i < n; i++) {
        batch[i].verdict = verdicts[i];
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

/* A row the store refused (sg_store_append): counted, logged once per
 * connection, and its connection is closed with the reason. */
static void refuse_row(sg_ingest *ing, const pending *p)
{
    ident *id = p->id;
    ing->stats.seq_refused++;
    ing->stats.duplicates--; /* counted as not inserted */
    if (id->refused)
        return;
    id->refused = true;
    snprintf(id->reason, sizeof id->reason,
             p->verdict == SG_STORE_GAP ? "seq %lld is not the stream's next seq"
                                        : "seq %lld is stored with other content",
             (long long)p->seq);
    sg_log(SG_LOG_ERROR, "refused a frame of %s/%s/%s: %s", id->learner, id->task,
             id->sandbox, id->reason);
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
        ing->stats.duplicates += n - inserted; /* refused rows are taken off below */
        ing->retry_ms = 0;
        /* Advance each stream's watermark from what this commit holds (in
         * order, the usual case), so acks need no query; a gap (frames out
         * of order) falls back to asking the store. */
        for (size_t i = 0; i < n; i++) {
            ident *id = job[i].id;
            if (job[i].verdict == SG_STORE_GAP || job[i].verdict == SG_STORE_CONFLICT) {
                refuse_row(ing, &job[i]);
                continue;
            }
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
        ing->retry_ms = ing->retry_ms ? ing->retry_ms * 2 : SG_INGEST_RETRY_MIN_MS;
        if (ing->retry_ms > SG_INGEST_RETRY_MAX_MS)
            ing->retry_ms = SG_INGEST_RETRY_MAX_MS;
        sg_log(SG_LOG_ERROR, "commit failed (retrying in %llu ms): %s",
                 (unsigned long long)ing->retry_ms, err.msg);
        ing->last_err = err;
        if (requeue(ing, job, n) < 0)
            rows_release(job, n);
        for (conn *c = ing->conns; c; c = c->next)
            if (c->inflight)
                c->dirty = true;
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
        if (c->id->refused && !c->kill) {
            c->kill = true; /* closed from its WRITEABLE callback */
            lws_callback_on_writable(c->wsi);
        }
        if (!c->inflight)
            continue;
        c->inflight = false;
        sg_err qerr;
        if (r != 0)
            continue;
        if (c->job_high > c->own_high)
            c->own_high = c->job_high;
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
            c->job_high = c->recv_high;
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
    if (v->seq > c->recv_high)
        c->recv_high = v->seq;
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
    sg_log(SG_LOG_DEBUG, "handshake refused (%u): %s", status, reason);
    lws_return_http_status(wsi, status, reason);
    return -1;
}

/* One fragment of the request's query, for query.c (query.h). */
static int lws_frag(void *ud, int i, char *buf, size_t size)
{
    struct lws *wsi = ud;
    int fl = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
    if (fl <= 0)
        return -1;
    if ((size_t)fl >= size || lws_hdr_copy_fragment(wsi, buf, (int)size, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
        return -2;
    return fl;
}

/* A query argument's value: 1 present, 0 absent, -1 too long or given
 * twice. (lws_get_urlarg_by_name reports an argument longer than its
 * buffer as absent: a filter dropped, not refused.) */
static int urlarg(struct lws *wsi, const char *name_eq, char *buf, int len)
{
    return sg_query_arg(lws_frag, wsi, name_eq, buf, (size_t)len);
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
            return refuse_handshake(wsi, HTTP_STATUS_UNAUTHORIZED,
                                    "malformed token: too long or given twice");
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
    c->recv_high = c->job_high = c->own_high = -1;
    return 0;
}

static int close_with(struct lws *wsi, int code, const char *reason)
{
    /* A close reason fits in a 125-byte control frame. */
    size_t n = strnlen(reason, 123);
    sg_log(SG_LOG_DEBUG, "closing connection (%d): %s", code, reason);
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
    /* The ts the clients write (event.h); then the order rule's cheap half:
     * a seq ahead of this connection's next is a gap, refused at once. The
     * rest (resends, other connections of the stream, other nodes) is the
     * writer's, against the store (sg_store_append). */
    if (!sg_event_ts_valid(v.ts, v.ts_len)) {
        sg_frame_view_clear(&v);
        ing->stats.refused++;
        return close_with(c->wsi, SG_CLOSE_BAD_DATA, "ts is not an RFC 3339 date-time");
    }
    if (v.seq > c->next_seq) {
        /* Other connections (or nodes) may have stored the stream further
         * since this one began: ask the store once before calling it a gap. */
        int64_t contig = c->acked;
        sg_err qerr;
        if (sg_store_contiguous(ing->store, c->id->learner, c->id->task, c->id->sandbox, &contig,
                                &qerr) == 0 &&
            contig + 1 > c->next_seq)
            c->next_seq = contig + 1;
    }
    if (v.seq > c->next_seq) {
        char msg[124];
        snprintf(msg, sizeof msg, "seq %lld skips ahead: the stream's next seq is %lld",
                 (long long)v.seq, (long long)c->next_seq);
        sg_frame_view_clear(&v);
        ing->stats.refused++;
        ing->stats.seq_refused++;
        sg_log(SG_LOG_ERROR, "refused a frame of %s/%s/%s: %s", c->id->learner,
                 c->id->task, c->id->sandbox, msg);
        return close_with(c->wsi, SG_CLOSE_POLICY, msg);
    }
    if (v.seq == c->next_seq)
        c->next_seq++;
    if (c->id->refused) { /* closing: nothing more of this stream is stored */
        sg_frame_view_clear(&v);
        return 0;
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
        if (limits_is_reserve(ing, wsi))
            return refuse_handshake(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "too many connections");
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
        c->next_seq = c->acked + 1;
        c->ack_pending = true;
        lws_callback_on_writable(wsi);
        return 0;
    }

    case LWS_CALLBACK_RECEIVE:
        stamp_now(ing);
        return on_receive(ing, c, in, len);

    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (c->kill) {
            /* Outside RECEIVE, lws closes without sending the reason set
             * by lws_close_reason: send the close frame ourselves. */
            unsigned char cb[LWS_PRE + 2 + sizeof c->id->reason];
            size_t rl = strnlen(c->id->reason, 123);
            cb[LWS_PRE] = (unsigned char)(SG_CLOSE_POLICY >> 8);
            cb[LWS_PRE + 1] = (unsigned char)(SG_CLOSE_POLICY & 0xff);
            memcpy(cb + LWS_PRE + 2, c->id->reason, rl);
            sg_log(SG_LOG_DEBUG, "closing connection (%d): %s", SG_CLOSE_POLICY,
                        c->id->reason);
            if (c->killed)
                return 0;
            c->killed = true;
            ing->stats.refused++;
            /* 4: lws's internal LWS_WRITE_CLOSE (lws-write.h reserves it). */
            if (lws_write(wsi, cb + LWS_PRE, rl + 2, (enum lws_write_protocol)4) < 0)
                return -1;
            /* The peer answers the close and lws ends the connection; if it
             * does not, this does. */
            lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, SG_INGEST_HANDSHAKE_TIMEOUT_S);
            return 0;
        }
        if (!c->ack_pending)
            return 0;
        unsigned char buf[LWS_PRE + 48];
        int64_t ack = c->greeted && c->own_high < c->acked ? c->own_high : c->acked;
        int n = snprintf((char *)buf + LWS_PRE, 48, "{\"ack\":%lld}", (long long)ack);
        if (lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_TEXT) < n)
            return -1;
        c->ack_pending = false;
        c->greeted = true;
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

/* ---------------------------------------------------------------- limits
 *
 * lws hands us the accepted fd (FILTER_NETWORK_CONNECTION, where we may
 * refuse it), then creates its wsi (WSI_CREATE, same call stack), and
 * destroys the wsi at the end (WSI_DESTROY): the peer admitted is bound to
 * the wsi created next. */

static size_t bucket_of(const void *p, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
    return (size_t)(h % LIMITS_BUCKETS);
}

static void peer_put(sg_ingest *ing, peer *pe, bool reserve)
{
    pe->conns--;
    if (reserve) {
        pe->reserve--;
        ing->nreserve--;
    }
    ing->nconns--;
    if (pe->conns > 0)
        return;
    peer **pp = &ing->peers[bucket_of(pe->addr, sizeof pe->addr)];
    while (*pp != pe)
        pp = &(*pp)->next;
    *pp = pe->next;
    free(pe);
}

static int limits_admit(sg_ingest *ing, int fd)
{
    if (ing->admitted) { /* the last one admitted never got its wsi */
        peer_put(ing, ing->admitted, ing->admitted_reserve);
        ing->admitted = NULL;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    unsigned char addr[16] = {0};
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return -1;
    if (ss.ss_family == AF_INET) {
        addr[10] = addr[11] = 0xff;
        memcpy(addr + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else {
        return -1;
    }
    size_t b = bucket_of(addr, sizeof addr);
    peer *pe = ing->peers[b];
    while (pe && memcmp(pe->addr, addr, sizeof addr) != 0)
        pe = pe->next;
    unsigned have = pe ? pe->conns : 0, have_reserve = pe ? pe->reserve : 0;
    bool reserve = ing->nconns - ing->nreserve >= ing->max_conns;
    if (have - have_reserve >= ing->max_per_addr ||
        (reserve && (ing->nreserve >= SG_INGEST_CONNS_RESERVE || have_reserve > 0))) {
        ing->stats.conn_refused++;
        if ((ing->stats.conn_refused & (ing->stats.conn_refused - 1)) == 0) /* 1, 2, 4, ... */
            sg_log(SG_LOG_ERROR, "connection refused: %s (%llu so far)",
                     reserve ? "too many connections" : "too many connections from one address",
                     (unsigned long long)ing->stats.conn_refused);
        return -1;
    }
    if (!pe) {
        pe = calloc(1, sizeof *pe);
        if (!pe)
            return -1;
        memcpy(pe->addr, addr, sizeof addr);
        pe->next = ing->peers[b];
        ing->peers[b] = pe;
    }
    pe->conns++;
    ing->nconns++;
    if (reserve) {
        pe->reserve++;
        ing->nreserve++;
    }
    ing->admitted = pe;
    ing->admitted_reserve = reserve;
    return 0;
}

static void limits_bind(sg_ingest *ing, struct lws *wsi)
{
    peer *pe = ing->admitted;
    if (!pe)
        return; /* not an accepted connection (the listener) */
    ing->admitted = NULL;
    tracked *t = calloc(1, sizeof *t);
    if (!t) { /* uncounted from here: give its place back */
        peer_put(ing, pe, ing->admitted_reserve);
        return;
    }
    t->wsi = wsi;
    t->peer = pe;
    t->reserve = ing->admitted_reserve;
    size_t b = bucket_of(&wsi, sizeof wsi);
    t->next = ing->tracked[b];
    ing->tracked[b] = t;
}

static tracked **limits_find(sg_ingest *ing, struct lws *wsi)
{
    tracked **tp = &ing->tracked[bucket_of(&wsi, sizeof wsi)];
    while (*tp && (*tp)->wsi != wsi)
        tp = &(*tp)->next;
    return tp;
}

static void limits_release(sg_ingest *ing, struct lws *wsi)
{
    tracked **tp = limits_find(ing, wsi);
    tracked *t = *tp;
    if (!t)
        return;
    *tp = t->next;
    peer_put(ing, t->peer, t->reserve);
    free(t);
}

static bool limits_is_reserve(sg_ingest *ing, struct lws *wsi)
{
    tracked *t = *limits_find(ing, wsi);
    return t && t->reserve;
}

static void limits_free(sg_ingest *ing)
{
    for (size_t b = 0; b < LIMITS_BUCKETS; b++) {
        for (tracked *t = ing->tracked[b], *n; t; t = n) {
            n = t->next;
            free(t);
        }
        for (peer *pe = ing->peers[b], *n; pe; pe = n) {
            n = pe->next;
            free(pe);
        }
        ing->tracked[b] = NULL;
        ing->peers[b] = NULL;
    }
}

/* ---------------------------------------------------------------- HTTP */


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
    if (sg_query_i64(lws_frag, wsi, name_eq, min, out) < 0) {
        *bad = name_eq;
        return -1;
    }
    return 0;
}

/* The Authorization header of an HTTP request into token ("Bearer T": the
 * token at token + 7): NULL, or what is wrong with it (missing: the
 * message given). */
static const char *bearer(struct lws *wsi, char *token, size_t size, const char *missing)
{
    int alen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (alen <= 0)
        return missing;
    if ((size_t)alen >= size || lws_hdr_copy(wsi, token, (int)size, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
        return "malformed token: too long";
    if (strncasecmp(token, "Bearer ", 7) != 0)
        return "Authorization must be 'Bearer <token>'";
    return NULL;
}

/* The request's read token (Authorization: Bearer): 0 and *cl, or 1 with
 * the 401 answer sent. Stream tokens are refused: they only write. */
static int http_auth(sg_ingest *ing, struct lws *wsi, sg_http_req *req, sg_token_claims *cl)
{
    char token[SG_TOKEN_MAX + 64];
    sg_err err;
    const char *why = bearer(wsi, token, sizeof token,
                             "missing read token (Authorization: Bearer <token>; see sandglass token --read)");
    if (!why && sg_token_verify_read(ing->secret, token + 7, (int64_t)time(NULL), cl, &err) < 0)
        why = err.msg;
    if (!why)
        return 0;
    sg_http_answer(wsi, req, HTTP_STATUS_UNAUTHORIZED, error_json(why));
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
    const char *why = bearer(wsi, token, sizeof token, "missing stream token (Authorization: Bearer <token>)");
    if (!why && sg_token_verify(ing->secret, token + 7, (int64_t)time(NULL), &cl, &err) < 0)
        why = err.msg;
    if (why)
        return sg_http_answer(wsi, req, HTTP_STATUS_UNAUTHORIZED, error_json(why));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                       json_pack("{s:b, s:s, s:s, s:s}", "ok", 1, "learner", cl.learner, "task", cl.task,
                                 "sandbox", cl.sandbox));
}

/* A query filter under the token's scope: a scoped token fills in its
 * value where the query has none and refuses (403) another one. NULL and
 * the answer sent on refusal. */
static bool scope_filter(struct lws *wsi, sg_http_req *req, const char *what, const char *claim,
                         char *val, int present, const char **out)
{
    *out = present ? val : NULL;
    if (!claim[0])
        return true;
    if (present && strcmp(val, claim) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "this read token is scoped to %s %s", what, claim);
        sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN, error_json(msg));
        return false;
    }
    *out = claim;
    return true;
}

static int http_events(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    char l[SG_NAME_MAX + 8], t[SG_NAME_MAX + 8], sb[SG_NAME_MAX + 8];
    bool cut = false;
    sg_store_query q = {.after_seq = -1, .after_id = -1, .cut = &cut};
    int rl = http_arg(wsi, "learner=", l, sizeof l), rt = http_arg(wsi, "task=", t, sizeof t),
        rs = http_arg(wsi, "sandbox=", sb, sizeof sb);
    if (rl < 0 || rt < 0 || rs < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                           error_json("learner, task or sandbox too long or given twice"));
    if (!scope_filter(wsi, req, "learner", cl->learner, l, rl, &q.learner) ||
        !scope_filter(wsi, req, "task", cl->task, t, rt, &q.task) ||
        !scope_filter(wsi, req, "sandbox", cl->sandbox, sb, rs, &q.sandbox))
        return 0;
    const char *bad = NULL;
    int64_t limit = 0;
    if (parse_i64_arg(wsi, "after_seq=", -1, &q.after_seq, &bad) < 0 ||
        parse_i64_arg(wsi, "after_id=", -1, &q.after_id, &bad) < 0 ||
        parse_i64_arg(wsi, "limit=", 1, &limit, &bad) < 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "bad value for %.*s", (int)strlen(bad) - 1, bad);
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, error_json(msg));
    }
    q.limit = limit == 0 || limit > SG_STORE_QUERY_MAX ? SG_STORE_QUERY_MAX : (size_t)limit;
    q.max_bytes = HTTP_PAGE_BYTES;
    sg_err err;
    json_t *events = sg_store_events(ing->store, &q, &err);
    if (!events)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, error_json(err.msg));
    /* "more": the page stopped at its row or byte bound, not at the end;
     * the client continues after the last row's id (or seq). */
    bool more = cut || json_array_size(events) >= q.limit;
    json_t *ans = json_pack("{s:o, s:b}", "events", events, "more", more);
    json_t *last = json_array_get(events, json_array_size(events) - 1);
    if (ans && more && last) { /* where the next page starts */
        json_object_set(ans, "next_after_id", json_object_get(last, "id"));
        json_object_set(ans, "next_after_seq", json_object_get(last, "seq"));
    }
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, ans);
}

/* /v1/sandboxes: the streams within the token's scope. */
static int http_sandboxes(sg_ingest *ing, struct lws *wsi, sg_http_req *req,
                          const sg_token_claims *cl)
{
    sg_err err;
    json_t *sbs = sg_store_sandboxes(ing->store, &err);
    if (!sbs)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, error_json(err.msg));
    const char *keys[] = {"learner", "task", "sandbox"};
    const char *claims[] = {cl->learner, cl->task, cl->sandbox};
    for (size_t i = json_array_size(sbs); i-- > 0;) {
        json_t *row = json_array_get(sbs, i);
        for (size_t k = 0; k < SG_ARRAY_LEN(keys); k++) {
            const char *v = json_string_value(json_object_get(row, keys[k]));
            if (claims[k][0] && (!v || strcmp(v, claims[k]) != 0)) {
                json_array_remove(sbs, i);
                break;
            }
        }
    }
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:o}", "sandboxes", sbs));
}

/* /v1/stats: the counters, for an operator token only. */
static int http_stats(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    if (cl->learner[0] || cl->task[0] || cl->sandbox[0])
        return sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN,
                           error_json("/v1/stats needs an operator read token (no scope)"));
    const sg_ingest_stats *st = &ing->stats;
    return sg_http_answer(
        wsi, req, HTTP_STATUS_OK,
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "frames", (json_int_t)st->frames,
                  "inserted", (json_int_t)st->inserted, "duplicates",
                  (json_int_t)st->duplicates, "refused", (json_int_t)st->refused,
                  "seq_refused", (json_int_t)st->seq_refused, "conn_refused",
                  (json_int_t)st->conn_refused, "commits", (json_int_t)st->commits,
                  "connections", (json_int_t)ing->nconns));
}

static int cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
    sg_ingest *ing = lws_context_user(lws_get_context(wsi));
    sg_http_req *req = user;

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
            return sg_http_answer(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED,
                               error_json("only GET is supported"));
        if (strcmp(uri, "/healthz") == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                               json_pack("{s:b, s:I}", "ok", 1, "port", (json_int_t)ing->port));
        if (strcmp(uri, INGEST_PATH) == 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                               error_json("WebSocket upgrade required"));
        if (limits_is_reserve(ing, wsi))
            return sg_http_answer(wsi, req, HTTP_STATUS_SERVICE_UNAVAILABLE,
                               error_json("too many connections (only /healthz answers)"));
        if (strcmp(uri, "/v1/token") == 0)
            return http_token_check(ing, wsi, req);
        /* Everything else reads learners' data: a read token first, even
         * to learn that a path does not exist. */
        sg_token_claims cl;
        if (http_auth(ing, wsi, req, &cl))
            return 0;
        if (strcmp(uri, "/v1/sandboxes") == 0)
            return http_sandboxes(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/events") == 0)
            return http_events(ing, wsi, req, &cl);
        if (strcmp(uri, "/v1/stats") == 0)
            return http_stats(ing, wsi, req, &cl);
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, error_json("not found"));
    }

    case LWS_CALLBACK_HTTP_WRITEABLE:
        return sg_http_writeable(wsi, req);

    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        return limits_admit(ing, (int)(intptr_t)in);
    case LWS_CALLBACK_WSI_CREATE:
        limits_bind(ing, wsi);
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        limits_release(ing, wsi);
        return 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        sg_http_req_release(req);
        return 0;

    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"http", cb_http, sizeof(sg_http_req), 0, 0, NULL, 0},
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
    /* A numeric address only: lws reads anything else as an interface
     * name, and a name can stand for more than one address. */
    char hcopy[INET6_ADDRSTRLEN + 1];
    unsigned char abuf[sizeof(struct in6_addr)];
    bool bracketed = h != s;
    if (hl >= sizeof hcopy)
        return sg_err_set(err, EINVAL, "listen address '%s': not a numeric IP address", s);
    memcpy(hcopy, h, hl);
    hcopy[hl] = '\0';
    bool v4 = inet_pton(AF_INET, hcopy, abuf) == 1, v6 = inet_pton(AF_INET6, hcopy, abuf) == 1;
    if ((!v4 && !v6) || (v6 && !bracketed) || (v4 && bracketed))
        return sg_err_set(err, EINVAL,
                          "listen address '%s': expected an IPv4 address or [IPv6] address", s);
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

int sg_ingest_bind_probe(const char *host, int port, sg_err *err)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof *v6;
    } else {
        return sg_err_set(err, EINVAL, "--listen %s: not an IPv4 or IPv6 address", host);
    }
    sg_autoclose int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        return sg_err_sys(err, "socket");
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
        if (errno == EADDRINUSE)
            return sg_err_set(err, EADDRINUSE, "%s%s%s:%d is in use (another ingest, or another program, "
                              "listens there)", ss.ss_family == AF_INET6 ? "[" : "", host,
                              ss.ss_family == AF_INET6 ? "]" : "", port);
        return sg_err_sys(err, "cannot listen on %s:%d", host, port);
    }
    return 0;
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
                      sg_log_lws);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    void *foreign_loops[1] = {loop};
    info.port = opts->port;
    info.iface = opts->host;
    info.protocols = protocols;
    info.pvo = &pvo;
    info.options = LWS_SERVER_OPTION_LIBUV;
    /* Bind exactly the address asked for: with IPv6 enabled, lws 4.1 binds
     * an IPv4 iface as AF_INET6 "::" (the address lands in sin6_flowinfo),
     * i.e. every interface. An IPv6 address binds v6-only. */
    if (strchr(opts->host, ':'))
        info.options |= LWS_SERVER_OPTION_IPV6_V6ONLY_MODIFY | LWS_SERVER_OPTION_IPV6_V6ONLY_VALUE;
    else
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    info.foreign_loops = foreign_loops;
    info.user = ing;
    info.gid = (gid_t)-1;
    info.uid = (uid_t)-1;
    info.max_http_header_data = HTTP_HEADER_DATA;
    /* Connection limits (ingest.h): lws's own table is sized past ours, so
     * that it keeps accepting (and we keep refusing) when ours is full. */
    struct rlimit rl;
    unsigned fds = SG_INGEST_CONNS_MAX + SG_INGEST_CONNS_RESERVE + SG_INGEST_FDS_SPARE;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < fds && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max < fds ? rl.rlim_max : fds;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur < fds)
            fds = (unsigned)rl.rlim_cur;
    }
    if (fds < SG_INGEST_CONNS_RESERVE + SG_INGEST_FDS_SPARE + 16) {
        sg_err_set(err, EMFILE, "too few file descriptors (RLIMIT_NOFILE %u)", fds);
        goto fail;
    }
    unsigned cap = fds - SG_INGEST_CONNS_RESERVE - SG_INGEST_FDS_SPARE;
    ing->max_conns = opts->max_conns ? opts->max_conns : SG_INGEST_CONNS_MAX;
    if (ing->max_conns > cap)
        ing->max_conns = cap;
    ing->max_per_addr = opts->max_conns_per_addr ? opts->max_conns_per_addr
                                                 : SG_INGEST_CONNS_PER_ADDR;
    info.fd_limit_per_thread = ing->max_conns + SG_INGEST_CONNS_RESERVE + SG_INGEST_FDS_SPARE;
    info.timeout_secs = SG_INGEST_HANDSHAKE_TIMEOUT_S;
    info.timeout_secs_ah_idle = SG_INGEST_HANDSHAKE_TIMEOUT_S;
    info.keepalive_timeout = SG_INGEST_HANDSHAKE_TIMEOUT_S;
    info.vhost_name = "default";
    /* An address in use is found here, with a plain bind: lws 4.1 fails
     * its vhost on a foreign loop and then crashes in its teardown. */
    if (opts->port > 0 && sg_ingest_bind_probe(opts->host, opts->port, err) < 0)
        goto fail;
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
    limits_free(ing);
    OPENSSL_cleanse(ing->secret, sizeof ing->secret);
    free(ing);
}

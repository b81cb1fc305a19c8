/* ingest_batch: the batch of accepted frames and the writer thread that
 * commits it (see ingest.h, and ingest_internal.h for the files). */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/store_backend.h"
#include "ingest/store_contents.h"
#include "wire/event.h"

void ingest_ident_unref(ident *id)
{
    if (id && --id->refs == 0)
        free(id);
}

/* ---------------------------------------------------------------- batch
 *
 * The loop thread validates frames and fills `batch`. A writer thread owns
 * a second store connection and commits one batch at a time (durably: the
 * fsync does not stall the loop), then wakes the loop (uv_async), which
 * computes each touched stream's contiguous seq on its own connection and
 * sends the acks. While the writer is busy the next batch grows (group
 * commit); past SG_INGEST_PENDING_MAX rows or SG_INGEST_BATCH_BYTES the
 * connection that delivers stops being read until the writer catches up. */

void ingest_rows_release(pending *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ingest_ident_unref(rows[i].id);
        free(rows[i].data);
        rows[i].data = NULL;
        sg_blob_clear(rows[i].blob);
        free(rows[i].blob);
        rows[i].blob = NULL;
    }
}

/* A job's blobs, gathered for the store (borrowing the job's bytes). */
typedef struct blobset {
    sg_content_part *cp;
    sg_cast_part *kp;
    size_t nc, nk;
} blobset;

static void blobset_free(blobset *b)
{
    free(b->cp);
    free(b->kp);
}

static int job_blobs(pending *batch, size_t n, blobset *set, sg_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (batch[i].blob)
            batch[i].blob->kind == SG_BLOB_CONTENT ? set->nc++ : set->nk++;
    set->cp = calloc(set->nc + 1, sizeof *set->cp);
    set->kp = calloc(set->nk + 1, sizeof *set->kp);
    if (!set->cp || !set->kp)
        return sg_err_set(err, ENOMEM, "out of memory");
    set->nc = set->nk = 0;
    for (size_t i = 0; i < n; i++) {
        const sg_blob *b = batch[i].blob;
        if (!b)
            continue;
        if (b->kind == SG_BLOB_CONTENT)
            set->cp[set->nc++] = (sg_content_part){b->sha256, b->size, b->off, b->data, b->len};
        else
            set->kp[set->nk++] = (sg_cast_part){batch[i].id->learner, batch[i].id->task, batch[i].id->sandbox,
                                                b->session, b->off, b->data, b->len};
    }
    return 0;
}

static int blobs_in_tx(sg_store *s, void *ud, sg_err *err)
{
    const blobset *b = ud;
    return sg_store_put_blobs_in_tx(s, b->cp, b->nc, b->kp, b->nk, err);
}

/* The blobs before the events: on SQLite inside the events' transaction
 * (one commit, one fsync: *hooked); elsewhere committed lazily just before
 * it (its log flush covers them), or durably when no event follows. */
static int blobs_store(sg_store *store, blobset *set, bool events, bool *hooked, sg_err *err)
{
    *hooked = false;
    if (!set->nc && !set->nk)
        return 0;
    if (events && sg_store_sqlite_db(store, NULL)) {
        store->in_tx = blobs_in_tx;
        store->in_tx_ud = set;
        *hooked = true;
        return 0;
    }
    if ((set->nc && (events ? sg_store_put_contents_lazy : sg_store_put_contents)(store, set->cp, set->nc, err) < 0) ||
        (set->nk && (events ? sg_store_put_casts_lazy : sg_store_put_casts)(store, set->kp, set->nk, err) < 0))
        return -1;
    return 0;
}

/* Writer side: put rows. Touches only the job's rows and the writer's
 * store; identities are read, never refcounted, here. */
static int job_commit(sg_store *store, pending *batch, size_t n, size_t *inserted, sg_err *err)
{
    size_t k = 0;
    __attribute__((cleanup(blobset_free))) blobset set = {0};
    if (job_blobs(batch, n, &set, err) < 0)
        return -1;
    size_t nblobs = set.nc + set.nk;
    bool hooked; /* the append's transaction takes them (SQLite) */
    sg_autofree sg_store_row *rows = calloc(n + 1, sizeof *rows);
    sg_autofree uint8_t *verdicts = calloc(n + 1, 1);
    if (!rows || !verdicts)
        return sg_err_set(err, ENOMEM, "out of memory");
    if (blobs_store(store, &set, nblobs < n, &hooked, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        pending *p = &batch[i];
        if (p->blob)
            continue;
        rows[k++] = (sg_store_row){
            .learner = p->id->learner, .task = p->id->task, .sandbox = p->id->sandbox,
            .seq = p->seq, .kind = sg_event_kind_name(p->kind), .ts = p->ts,
            .received = p->received, .payload = p->data, .payload_len = p->payload_len,
        };
    }
    int r = k ? sg_store_append(store, rows, k, verdicts, inserted, err) : 0;
    store->in_tx = NULL;
    store->in_tx_ud = NULL;
    /* Free the rows' bytes here, off the loop; the loop drops the
     * identities. A failed batch keeps them: the loop requeues the rows. */
    for (size_t i = 0, j = 0; r == 0 && i < n; i++) {
        batch[i].verdict = batch[i].blob ? SG_STORE_NEW : verdicts[j++];
        free(batch[i].data);
        batch[i].data = NULL;
    }
    if (r == 0)
        *inserted += nblobs; /* not counted as duplicates */
    return r;
}

void *ingest_writer_main(void *arg)
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
        uint64_t t0 = sg_now_mono_ns();
        int r = job_commit(ing->wstore, job, n, &inserted, &err);
        uint64_t ns = sg_now_mono_ns() - t0;
        pthread_mutex_lock(&ing->mu);
        ing->job_ns = ns;
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

/* Puts a failed job's rows back in front of the filling batch. */
static int requeue(sg_ingest *ing, pending *job, size_t n)
{
    if (sg_grow(&ing->batch, &ing->batch_cap, n + ing->nbatch, sizeof *ing->batch) < 0)
        return -1;
    memmove(ing->batch + n, ing->batch, ing->nbatch * sizeof *ing->batch);
    memcpy(ing->batch, job, n * sizeof *job);
    ing->nbatch += n;
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

/* A committed job: the counters, and each stream's watermark advanced from
 * what this commit holds (in order, the usual case), so acks need no query;
 * a gap (frames out of order) falls back to asking the store. */
static void job_committed(sg_ingest *ing, pending *job, size_t n, size_t inserted)
{
    ing->stats.commits++;
    ing->stats.inserted += inserted;
    ing->stats.duplicates += n - inserted; /* refused rows are taken off below */
    ing->retry_ms = 0;
    for (size_t i = 0; i < n; i++) {
        ident *id = job[i].id;
        if (job[i].blob) {
            ing->metrics.blobs_stored++; /* stored by what it is: always new */
            continue;
        }
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
    ingest_rows_release(job, n);
}

/* A failed job: no ack, and the accepted rows are kept: they go first into
 * the next batch, retried with backoff (the clients' spools also still
 * hold them). */
static void job_failed(sg_ingest *ing, pending *job, size_t n, const sg_err *err)
{
    ing->retry_ms = ing->retry_ms ? ing->retry_ms * 2 : SG_INGEST_RETRY_MIN_MS;
    if (ing->retry_ms > SG_INGEST_RETRY_MAX_MS)
        ing->retry_ms = SG_INGEST_RETRY_MAX_MS;
    sg_log(SG_LOG_ERROR, "commit failed (retrying in %llu ms): %s",
             (unsigned long long)ing->retry_ms, err->msg);
    ing->last_err = *err;
    if (requeue(ing, job, n) < 0)
        ingest_rows_release(job, n);
    for (conn *c = ing->conns; c; c = c->next)
        if (c->inflight)
            c->dirty = true;
    if (ing->retry_init)
        uv_timer_start(&ing->retry, on_retry, ing->retry_ms, 0);
}

/* After a job: the refused streams' connections closed, the acks of the
 * ones in it queued (committed: r == 0), the paused connections read. */
static void conns_after_job(sg_ingest *ing, int r)
{
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
                ingest_conn_flow(c); /* unless its rate holds it */
            }
    }
}

/* Loop side: the writer finished a job. */
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
    uint64_t ns = ing->job_ns;
    ing->job = NULL;
    ing->njob = 0;
    ing->job_done = false;
    pthread_cond_broadcast(&ing->cv);
    pthread_mutex_unlock(&ing->mu);

    if (r == 0) {
        ingest_metrics_commit(ing, ns, n);
        job_committed(ing, job, n, inserted);
    } else {
        ing->metrics.store_errors++;
        job_failed(ing, job, n, &err);
    }
    /* Keep the larger array for the next batch. */
    if (!ing->spare || ing->spare_cap < ing->job_cap) {
        free(ing->spare);
        ing->spare = job;
        ing->spare_cap = ing->job_cap;
    } else {
        free(job);
    }
    conns_after_job(ing, r);
    if (r == 0 && inserted > 0)
        ingest_sse_on_commit(ing); /* the new rows to the stream's subscribers */
    if (ing->nbatch > 0 && r == 0)
        submit(ing); /* what piled up meanwhile goes at once */
}

void ingest_on_done_async(uv_async_t *h)
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

static void on_hold(uv_timer_t *t)
{
    submit(t->data);
}

/* Runs once per loop iteration, after the I/O callbacks: everything read
 * in this iteration goes into one transaction (group commit). A batch that
 * ends with a file's content waits (SG_INGEST_BLOB_HOLD_MS at most, from
 * the first such iteration) for the event its uplink sends right after
 * it, which the loop may read an iteration later: alone, the content
 * would be committed with an fsync of its own, and the event after it. */
void ingest_on_check(uv_check_t *h)
{
    sg_ingest *ing = h->data;
    const pending *last = ing->nbatch ? &ing->batch[ing->nbatch - 1] : NULL;
    if (last && last->blob && last->blob->kind == SG_BLOB_CONTENT && ing->hold_init && !ing->job) {
        if (!uv_is_active((uv_handle_t *)&ing->hold))
            uv_timer_start(&ing->hold, on_hold, SG_INGEST_BLOB_HOLD_MS, 0);
        return;
    }
    if (ing->hold_init)
        uv_timer_stop(&ing->hold);
    submit(ing);
}

int ingest_batch_add(sg_ingest *ing, conn *c, const sg_frame_view *v, size_t bytes)
{
    if (sg_grow(&ing->batch, &ing->batch_cap, ing->nbatch + 1, sizeof *ing->batch) < 0)
        return -1;
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
    p->blob = NULL;
    p->data = data;
    p->payload_len = v->payload_len;
    p->ts = data + v->payload_len + 1;
    memcpy(p->received, ing->now, sizeof p->received);
    ing->batch_bytes += bytes;
    ing->metrics.received_bytes += bytes;
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

int ingest_batch_add_blob(sg_ingest *ing, conn *c, sg_blob *b, size_t bytes)
{
    sg_blob *own = malloc(sizeof *own);
    if (!own || sg_grow(&ing->batch, &ing->batch_cap, ing->nbatch + 1, sizeof *ing->batch) < 0) {
        free(own);
        sg_blob_clear(b);
        return -1;
    }
    *own = *b;
    pending *p = &ing->batch[ing->nbatch++];
    memset(p, 0, sizeof *p);
    p->id = c->id;
    c->id->refs++;
    p->seq = -1;
    p->kind = -1;
    p->blob = own;
    memcpy(p->received, ing->now, sizeof p->received);
    ing->batch_bytes += bytes;
    ing->metrics.received_bytes += bytes;
    c->dirty = true;
    if (ing->nbatch >= SG_INGEST_BATCH_ROWS || ing->batch_bytes >= SG_INGEST_BATCH_BYTES)
        submit(ing);
    if (ing->nbatch >= SG_INGEST_PENDING_MAX || ing->batch_bytes >= SG_INGEST_BATCH_BYTES) {
        if (!c->paused)
            lws_rx_flow_control(c->wsi, 0);
        c->paused = true;
        ing->paused = true;
    }
    return 0;
}

/* Stops the writer after its current job; commits what is left from here. */
int ingest_drain_and_stop_writer(sg_ingest *ing, sg_err *err)
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
        ingest_rows_release(ing->batch, ing->nbatch);
        ing->nbatch = 0;
    }
    return r;
}


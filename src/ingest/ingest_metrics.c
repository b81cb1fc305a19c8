/* ingest_metrics: GET /metrics, the ingest's counters in Prometheus's text
 * exposition format 0.0.4 (docs/METRICS.md lists every metric).
 *
 * A scrape never asks the store: the counters are plain integers kept on
 * the loop thread where things happen (sg_ingest_stats, ingest_metrics),
 * and the one walk is over the open streams (their unacknowledged frames),
 * a list in memory. Labels are a fixed set (a refusal's reason, a
 * connection's kind): no learner, task or sandbox id, no string a client
 * sent, ever becomes a label.
 *
 * Access (ingest.h, sg_ingest_opts): --metrics-listen serves it on its own
 * address (a second lws vhost on the same context and loop) and not on the
 * main port; --metrics-token makes every scrape carry the file's token,
 * compared by SHA-256 in constant time (the rule and text helpers are
 * prom.h's, shared with the sandbox host's /metrics); with neither, the main port
 * answers loopback peers only. */
#include "ingest/ingest_internal.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "ingest/tls.h"

#define METRICS_PATH "/metrics"

/* Bucket bounds: a commit's seconds (SQLite's fsync to a slow PostgreSQL),
 * a commit's rows (1 to SG_INGEST_PENDING_MAX). */
static const double commit_bounds[INGEST_COMMIT_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double batch_bounds[INGEST_BATCH_BUCKETS] = {
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};

static const char *const refusal_names[INGEST_REFUSED_N] = {
    [INGEST_REFUSED_TOKEN] = "token",
    [INGEST_REFUSED_READ_TOKEN] = "read_token",
    [INGEST_REFUSED_CONN_LIMIT] = "conn_limit",
    [INGEST_REFUSED_ADDR_LIMIT] = "addr_limit",
    [INGEST_REFUSED_FRAME] = "frame",
    [INGEST_REFUSED_ORDER] = "order",
    [INGEST_REFUSED_SUBSCRIBERS] = "subscribers",
    [INGEST_REFUSED_METRICS] = "metrics",
};

/* ---------------------------------------------------------------- counting */

static void observe(const double *bounds, size_t n, uint64_t *le, double v)
{
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    le[i]++;
}

void ingest_metrics_commit(sg_ingest *ing, uint64_t ns, size_t rows)
{
    ingest_metrics *m = &ing->metrics;
    double secs = (double)ns / 1e9;
    observe(commit_bounds, INGEST_COMMIT_BUCKETS, m->commit_le, secs);
    m->commit_count++;
    m->commit_sum += secs;
    observe(batch_bounds, INGEST_BATCH_BUCKETS, m->batch_le, (double)rows);
    m->batch_count++;
    m->batch_sum += rows;
}

/* ---------------------------------------------------------------- the text */

/* The open streams and their frames received but not yet acknowledged
 * (received, not committed, or committed and the ack not yet sent). */
static int streams(sg_ingest *ing, sg_buf *b, uint64_t *nstreams)
{
    uint64_t n = 0, lag = 0, lag_max = 0;
    for (const conn *c = ing->conns; c; c = c->next) {
        n++;
        int64_t l = c->recv_high - (c->greeted && c->own_high < c->acked ? c->own_high : c->acked);
        if (l > 0) {
            lag += (uint64_t)l;
            if ((uint64_t)l > lag_max)
                lag_max = (uint64_t)l;
        }
    }
    *nstreams = n;
    if (sg_prom_gauge(b, "sandglass_ingest_streams", "Event streams (WebSocket connections past the handshake) open.",
              (double)n) < 0 ||
        sg_prom_gauge(b, "sandglass_ingest_stream_unacked_events",
              "Events received on the open streams and not yet acknowledged (the ack lag, summed).",
              (double)lag) < 0 ||
        sg_prom_gauge(b, "sandglass_ingest_stream_unacked_events_max",
              "The largest number of events one open stream has received and not yet had acknowledged.",
              (double)lag_max) < 0)
        return -1;
    return 0;
}

static int connections(sg_ingest *ing, sg_buf *b, uint64_t nstreams)
{
    uint64_t sse = ing->stats.subscribers, all = ing->nconns;
    uint64_t http = all > nstreams + sse ? all - nstreams - sse : 0;
    if (sg_prom_head(b, "sandglass_ingest_connections", "gauge",
             "Connections open on the main port, by kind: stream (WebSocket event streams), sse "
             "(GET /v1/stream subscribers), http (the rest: requests, handshakes under way).") < 0)
        return -1;
    return sg_buf_printf(b,
                         "sandglass_ingest_connections{kind=\"stream\"} %llu\n"
                         "sandglass_ingest_connections{kind=\"sse\"} %llu\n"
                         "sandglass_ingest_connections{kind=\"http\"} %llu\n",
                         (unsigned long long)nstreams, (unsigned long long)sse, (unsigned long long)http);
}

static int refusals(sg_ingest *ing, sg_buf *b)
{
    return sg_prom_labeled(b, "sandglass_ingest_refusals_total", "counter",
                           "Connections and requests refused, and streams closed, by reason (docs/METRICS.md).",
                           "reason", refusal_names, ing->metrics.refusals, INGEST_REFUSED_N);
}

static int counters(sg_ingest *ing, sg_buf *b)
{
    const sg_ingest_stats *st = &ing->stats;
    const ingest_metrics *m = &ing->metrics;
    return sg_prom_counter(b, "sandglass_ingest_events_received_total", "Valid event frames received.", st->frames) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_events_stored_total", "Events newly committed to the store.",
                   st->inserted - m->blobs_stored) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_events_duplicate_total",
                   "Event frames that were already stored (identical resends).", st->duplicates) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_blobs_received_total",
                   "Blob frames (file contents, terminal recordings) received.", st->blobs) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_blobs_stored_total", "Blob frames committed to the store.",
                   m->blobs_stored) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_received_bytes_total", "Bytes of the valid frames received.",
                   m->received_bytes) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_order_refused_events_total",
                   "Event frames refused by the order rule (a gap, a conflicting resend).", st->seq_refused) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_commits_total", "Store transactions committed.", st->commits) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_store_errors_total",
                   "Commits that failed (their rows are kept and retried).", m->store_errors) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_stream_throttles_total",
                   "Times a stream's reading paused for its rate (--max-stream-rate).", st->throttled) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_subscriber_overflows_total",
                   "GET /v1/stream subscribers closed for reading too slowly.", st->stream_overflows) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_host_registrations_total",
                   "Sandbox hosts' registrations (POST /v1/hosts) this node stored.", m->host_regs) < 0 ||
           sg_prom_counter(b, "sandglass_ingest_host_registrations_refused_total",
                   "Sandbox hosts' registrations this node refused (a token, a body, the store).",
                   m->host_regs_refused) < 0 ||
           sg_prom_gauge(b, "sandglass_ingest_hosts", "Sandbox hosts registered in the store (counted every 10 s).",
                   (double)m->hosts_known) < 0 ||
           sg_prom_gauge(b, "sandglass_ingest_hosts_stale",
                   "Of those, hosts not seen for more than 3 of their heartbeats (counted every 10 s).",
                   (double)m->hosts_stale) < 0
               ? -1
               : 0;
}

/* The whole scrape into b. */
static int render(sg_ingest *ing, sg_buf *b)
{
    const ingest_metrics *m = &ing->metrics;
    uint64_t nstreams = 0;
    if (counters(ing, b) < 0 || refusals(ing, b) < 0 || streams(ing, b, &nstreams) < 0 ||
        connections(ing, b, nstreams) < 0 ||
        sg_prom_histogram(b, "sandglass_ingest_commit_duration_seconds",
                  "Time the writer took to commit one batch (group commit).", commit_bounds,
                  INGEST_COMMIT_BUCKETS, m->commit_le, m->commit_count, m->commit_sum) < 0 ||
        sg_prom_histogram(b, "sandglass_ingest_batch_rows", "Rows (events and blobs) in one committed batch.",
                  batch_bounds, INGEST_BATCH_BUCKETS, m->batch_le, m->batch_count, (double)m->batch_sum) < 0 ||
        sg_prom_gauge(b, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
              m->start_time) < 0)
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- access */

static int scrape(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    static const char headroom[LWS_PRE];
    sg_autobuf sg_buf b = {0};
    if (sg_buf_reserve(&b, LWS_PRE + 16384) < 0 || sg_buf_append(&b, headroom, LWS_PRE) < 0 ||
        render(ing, &b) < 0)
        return -1;
    return sg_prom_answer(wsi, req, &b);
}

/* The access rule (the file's comment), then the scrape. */
static int serve(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    unsigned status;
    const char *why = sg_prom_refusal(&ing->metrics.access, wsi, &status);
    if (why) {
        ing->metrics.refusals[INGEST_REFUSED_METRICS]++;
        ingest_log_refused(wsi, "a scrape of /metrics", status, why);
        return sg_http_answer(wsi, req, status, ingest_error_json(why));
    }
    return scrape(ing, wsi, req);
}

int ingest_metrics_http(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    if (ing->metrics.access.own) /* served on --metrics-listen's address only */
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, ingest_error_json("not found"));
    return serve(ing, wsi, req);
}

/* The metrics vhost's one protocol: GET /metrics and nothing else. */
static int cb_metrics(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    sg_ingest *ing = lws_context_user(lws_get_context(wsi));
    sg_http_req *req = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return ingest_refuse_handshake(wsi, HTTP_STATUS_BAD_REQUEST, "no WebSocket here (only GET " METRICS_PATH ")");
    case LWS_CALLBACK_HTTP:
        memset(req, 0, sizeof *req);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED,
                                  ingest_error_json("only GET is supported"));
        if (strcmp((const char *)in, METRICS_PATH) != 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND,
                                  ingest_error_json("not found (only " METRICS_PATH " here)"));
        return serve(ing, wsi, req);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return sg_http_writeable(wsi, req);
    case LWS_CALLBACK_CLOSED_HTTP:
        sg_http_req_release(req);
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols metrics_protocols[] = {
    {"http", cb_metrics, sizeof(sg_http_req), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---------------------------------------------------------------- start */

/* SIGHUP: the --metrics-token file read again; a bad file keeps the old token. */
int ingest_metrics_reload(sg_ingest *ing, sg_err *err)
{
    sg_prom_access fresh = {0};
    if (sg_prom_token_load(&fresh, ing->metrics_token_path, err) < 0)
        return -1;
    memcpy(ing->metrics.access.token_sha, fresh.token_sha, sizeof fresh.token_sha);
    OPENSSL_cleanse(&fresh, sizeof fresh);
    return 0;
}

int ingest_metrics_init(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err)
{
    ing->metrics.start_time = sg_now_wall();
    ing->metrics.access.own = opts->metrics_host != NULL;
    if (opts->metrics_token_path && sg_prom_token_load(&ing->metrics.access, opts->metrics_token_path, err) < 0)
        return -1;
    /* Before the lws context exists (as the main port's probe): lws 4.1
     * fails a vhost on a foreign loop badly. */
    if (opts->metrics_host && opts->metrics_port > 0 &&
        sg_ingest_bind_probe(opts->metrics_host, opts->metrics_port, err) < 0) {
        sg_err_prefix(err, "--metrics-listen");
        return -1;
    }
    return 0;
}

int ingest_metrics_listen(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err)
{
    if (!opts->metrics_host)
        return 0;
    struct lws_context_creation_info info;
    sg_http_server_info(&info, NULL, opts->metrics_host, opts->metrics_port, metrics_protocols, ing,
                        SG_INGEST_HANDSHAKE_TIMEOUT_S);
    sg_tls_server_info(&info, opts->tls_cert, opts->tls_key);
    info.vhost_name = "metrics";
    struct lws_vhost *vh = lws_create_vhost(ing->ctx, &info);
    int port = vh ? lws_get_vhost_listen_port(vh) : -1;
    if (port <= 0)
        return sg_err_set(err, EADDRINUSE, "--metrics-listen: cannot listen on %s:%d", opts->metrics_host,
                          opts->metrics_port);
    ing->metrics.port = port;
    return 0;
}

int sg_ingest_metrics_port(const sg_ingest *ing)
{
    return ing->metrics.access.own ? ing->metrics.port : 0;
}

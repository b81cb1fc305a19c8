/* ingest_internal: the ingest's private interface, shared by its files and
 * by nothing else (ingest.h is the public one):
 *   ingest_batch.c   the batch the loop fills and the writer thread that
 *                    commits it (group commit, acks, retries)
 *   ingest_stream.c  the WebSocket side: handshake, frames, the seq rule,
 *                    acks and refusals written back
 *   ingest_read.c    the HTTP side: /healthz, /v1/token and the read
 *                    endpoints (/v1/events, /v1/sandboxes, /v1/stats)
 *   ingest_pages.c   /v1/events and /v1/sandboxes on PostgreSQL, read off
 *                    the loop
 *   ingest_limits.c  the connection limits, per address and in all, and
 *                    the per-stream rate
 *   ingest_sse.c     GET /v1/stream: the pushed event stream (SSE), its
 *                    subscribers, the fan-out after each commit
 *   ingest_console.c the console's page and scripts (web/console) at /
 *   ingest_sessions.c GET /v1/sessions from summaries kept in memory
 *   ingest_tokens.c  revoked tokens (GET /v1/revoke, the check), the read log,
 *                    the secret's reload (sg_ingest_reload, on SIGHUP)
 *   ingest_ops.c     POST /v1/import and /v1/purge: the operator's writes,
 *                    with an operator write token, off the loop
 *   ingest_metrics.c GET /metrics (Prometheus): the counters kept where
 *                    things happen, its access rule, its own listener
 *   ingest.c         start, stop, free; the listen address
 * http.c answers the HTTP requests, query.c reads their arguments.
 * Names shared between these files carry the ingest_ prefix. */
#ifndef SG_INGEST_INTERNAL_H
#define SG_INGEST_INTERNAL_H

#include <libwebsockets.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/err.h"
#include "ingest/prom.h"
#include "ingest/framescan.h"
#include "ingest/http.h"
#include "ingest/ingest.h"
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
    sg_blob *blob;      /* owned: a blob frame (kind < 0), stored by what it is, no seq */
} pending;

typedef struct conn {
    struct conn *prev, *next;
    struct lws *wsi;
    ident *id;
    sg_buf msg;           /* a message arriving in parts */
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
    char token_id[SG_TOKEN_ID_LEN + 1]; /* its token's (wire/token.h: sg_token_id) */
    char gone[96];        /* "" or why its token no longer holds: the secret replaced (SIGHUP), or revoked */
    bool ack_pending;
    bool dirty;           /* rows of this stream in the filling batch */
    bool inflight;        /* rows of this stream in the writer's batch */
    bool paused;          /* not read until the writer catches up */
    bool throttled;       /* not read until its rate allows (ingest_limits.c) */
    double tokens;        /* frames its rate allows now (a token bucket) */
    uint64_t tokens_ns;   /* when tokens was last filled */
} conn;


/* Why a connection or request was refused (or a stream closed): the fixed
 * label set of sandglass_ingest_refusals_total{reason} (ingest_metrics.c
 * names them; docs/METRICS.md). Never a learner-controlled string. */
typedef enum ingest_refusal {
    INGEST_REFUSED_TOKEN,       /* a stream's handshake: no token, a bad, expired or revoked one */
    INGEST_REFUSED_READ_TOKEN,  /* a read request without a valid read token */
    INGEST_REFUSED_CONN_LIMIT,  /* past --max-conns */
    INGEST_REFUSED_ADDR_LIMIT,  /* past --max-conns-per-addr */
    INGEST_REFUSED_FRAME,       /* a frame that is not valid closed its stream */
    INGEST_REFUSED_ORDER,       /* the order rule (a gap, a conflicting resend) closed it */
    INGEST_REFUSED_SUBSCRIBERS, /* GET /v1/stream past its subscriber caps */
    INGEST_REFUSED_METRICS,     /* a scrape without the metrics token, or from a peer not allowed */
    INGEST_REFUSED_N
} ingest_refusal;

#define INGEST_COMMIT_BUCKETS 14 /* commit latency bounds, seconds (ingest_metrics.c) */
#define INGEST_BATCH_BUCKETS 12  /* rows per commit bounds */

/* What /metrics shows beyond sg_ingest_stats: plain integers, all touched
 * on the loop thread only (the writer's commit time is handed over under
 * mu with its job). A scrape reads them and walks the open streams; it
 * never asks the store. */
typedef struct ingest_metrics {
    double start_time;          /* unix seconds */
    uint64_t refusals[INGEST_REFUSED_N];
    uint64_t received_bytes;    /* frame bytes of the accepted frames */
    uint64_t store_errors;      /* commits that failed (retried) */
    uint64_t blobs_stored;      /* blob rows of the committed jobs (stats.inserted counts them too) */
    uint64_t commit_le[INGEST_COMMIT_BUCKETS + 1]; /* per bucket, the last +Inf; not cumulative */
    uint64_t commit_count;
    double commit_sum;
    uint64_t batch_le[INGEST_BATCH_BUCKETS + 1];
    uint64_t batch_count, batch_sum;
    sg_prom_access access;      /* --metrics-token's SHA-256; own: --metrics-listen (prom.h) */
    int port;
    /* the hosts' registrations (ingest_hosts.c): this node's POSTs, and the
     * store's hosts as counted every INGEST_HOSTS_COUNT_EVERY_S */
    uint64_t host_regs, host_regs_refused;
    int64_t hosts_known, hosts_stale;
    uv_timer_t hosts_timer;
    bool hosts_timer_on;
} ingest_metrics;

struct sg_ingest {
    uv_loop_t *loop;
    struct lws_context *ctx;
    sg_store *store;
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    char *secret_path, *metrics_token_path; /* read again on sg_ingest_reload */
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
    uint64_t job_ns;              /* the job's commit time (the writer's clock) */
    bool job_done;
    int job_rc;
    sg_err job_err;
    bool paused, mu_init;
    const struct lws_protocols *protocols;
    conn *conns;
    /* Connection limits (see ingest.h). */
    unsigned max_conns, max_per_addr;
    unsigned stream_rate;         /* frames/s per stream */
    uv_timer_t throttle;          /* reads the throttled streams again */
    bool throttle_init;
    size_t nconns, nreserve;
    struct peer *peers[LIMITS_BUCKETS];     /* by address */
    struct tracked *tracked[LIMITS_BUCKETS]; /* by wsi */
    struct peer *admitted;                 /* admitted, its wsi not created yet */
    bool admitted_reserve;
    bool stopping;
    int port;
    sg_ingest_stats stats;
    ingest_metrics metrics;       /* GET /metrics (ingest_metrics.c) */
    sg_err last_err;
    /* A batch whose commit failed is kept and retried with backoff. */
    uv_timer_t retry;
    bool retry_init;
    /* A batch ending in a content blob waits for its event (ingest.h). */
    uv_timer_t hold;
    bool hold_init;
    uint64_t retry_ms;
    struct sse_hub *sse; /* GET /v1/stream (ingest_sse.c) */
    struct ingest_pages *pages; /* /v1/events off the loop (ingest_pages.c); NULL: SQLite */
    struct ingest_ops *ops; /* POST /v1/import, /v1/purge (ingest_ops.c) */
    struct ingest_retain *retain; /* --retain-days (ingest_retain.c); NULL: none */
    char console_dir[4096]; /* web/console (ingest_console.c); "": not installed */
    struct ingest_sessions *sessions; /* GET /v1/sessions' summaries (ingest_sessions.c) */
    char serves[SG_INGEST_SERVES_MAX][SG_INGEST_SERVE_URL_MAX + 1]; /* --serve (ingest_watch.c) */
    unsigned nserves;
    char watch_csp[SG_INGEST_SERVES_MAX * (SG_INGEST_SERVE_URL_MAX + 8) + 512]; /* the watch page's policy */
};

/* ---- ingest_batch.c ---- */

void ingest_ident_unref(ident *id);
void ingest_rows_release(pending *rows, size_t n);
/* The writer thread: commits one job at a time on its own connection. */
void *ingest_writer_main(void *arg);
/* Loop side: the writer finished a job. */
void ingest_on_done_async(uv_async_t *h);
/* Once per loop iteration: what was read goes into one transaction. */
void ingest_on_check(uv_check_t *h);
/* Copies an accepted frame into the filling batch. -1: out of memory. */
/* A blob frame (wire/event.h) into the batch: stored before the events
 * that follow it on its connection, so their ack covers it. Takes b. */
/* ingest_contents.c: GET /v1/contents, /v1/casts, /v1/cast. */
int ingest_http_contents(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
#define SG_CONTENTS_BATCH 32 /* hashes one GET /v1/contents asks for at most */
/* The answer of GET /v1/contents for the n hashes (batch: framed; else
 * n == 1, its bytes alone) appended to body, which has LWS_PRE of
 * headroom: 0, or -1 with err (ENOENT: the one content is not stored
 * whole). Touches s and body only: any thread that holds s. */
int ingest_contents_body(sg_store *s, const char *const *sha, size_t n, bool batch, sg_buf *body, sg_err *err);
int ingest_http_casts(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
int ingest_http_cast(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
int ingest_batch_add_blob(sg_ingest *ing, conn *c, sg_blob *b, size_t bytes);
int ingest_batch_add(sg_ingest *ing, conn *c, const sg_frame_view *v, size_t bytes);
/* Stops the writer after its current job; commits what is left from here. */
int ingest_drain_and_stop_writer(sg_ingest *ing, sg_err *err);

/* ---- ingest_stream.c ---- */

/* One line (info) for each refused connection or request: the peer's
 * address, what was refused (a WebSocket, a read, a scrape, ...), the
 * status answered and why. */
void ingest_log_refused(struct lws *wsi, const char *what, unsigned status, const char *why);
/* The peer's address for a log line ("?" when lws cannot say). */
const char *ingest_peer_of(struct lws *wsi, char addr[64]);
/* Logged, then the status and reason answered (-1: lws closes). */
int ingest_refuse_handshake(struct lws *wsi, unsigned int status, const char *reason);
/* One fragment of the request's query, for query.c (query.h). */
int ingest_lws_frag(void *ud, int i, char *buf, size_t size);
/* A query of only the names known: NULL, or why not (into msg, naming the
 * unknown one escaped, then takes: what the endpoint takes). */
const char *ingest_query_names(struct lws *wsi, const char *const *known, size_t nknown, const char *takes, char *msg,
                               size_t n);
/* A query argument's value: 1 present, 0 absent, -1 too long or twice. */
int ingest_urlarg(struct lws *wsi, const char *name_eq, char *buf, int len);
/* The PROTO_NAME protocol's lws callback. */
int ingest_cb_stream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len);
/* The secret changed (sg_ingest_reload): every open stream, whose token
 * the old secret signed, is closed (policy, saying why). */
/* The open streams whose token id is id (NULL: every one) closed with
 * why (1008): the secret replaced, or the token revoked. */
void ingest_streams_gone(sg_ingest *ing, const char *id, const char *why);
/* The open streams whose token the store lists as revoked (another
 * node's revoke), closed: at each ping of the read streams. */
void ingest_streams_check_revoked(sg_ingest *ing);
#define INGEST_ROTATED_MSG "the ingest's secret was replaced: a token of the new secret is needed"

/* ---- ingest_read.c ---- */

/* The "http" protocol's lws callback (it also sees every connection's
 * accept, creation and end: the limits). */
int ingest_cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len);

json_t *ingest_error_json(const char *msg);
/* A query filter under the read token's scope (claim, "" for none): the
 * token's value where the query has none; another value is answered 403
 * (false). */
bool ingest_scope_filter(struct lws *wsi, sg_http_req *req, const char *what, const char *claim,
                         char *val, int present, const char **out);

/* GET /v1/events' arguments under the token's scope: the query and the
 * strings it points into. */
#define INGEST_KINDS_ARG_MAX 512
#define INGEST_OMIT_ARG_MAX 128 /* ?omit=: its bytes */
typedef struct ingest_events_args {
    sg_store_query q;
    char learner[SG_NAME_MAX + 8], task[SG_NAME_MAX + 8], sandbox[SG_NAME_MAX + 8];
    char kinds[INGEST_KINDS_ARG_MAX], except_kinds[INGEST_KINDS_ARG_MAX];
    char omit[INGEST_OMIT_ARG_MAX]; /* ?omit=: "" or payload members' names */
} ingest_events_args;
/* The request's arguments into a (its pointers into a itself): 0, or 1
 * with the 400 or 403 answer sent. */
int ingest_events_query(struct lws *wsi, sg_http_req *req, const sg_token_claims *cl, ingest_events_args *a);
/* A page's answer, {"events":[...],"more":...}, appended to body: 0, or -1
 * with err. Touches s, q and body only, so it runs on any thread that
 * holds s. */
int ingest_events_body(sg_store *s, ingest_events_args *a, sg_buf *body, sg_err *err);
/* GET /v1/sandboxes' answer for the token cl (its scope) and prefix
 * (NULL: none), appended to body: 0, or -1 with err. Any thread. */
int ingest_sandboxes_body(sg_store *s, const sg_token_claims *cl, const char *prefix, sg_buf *body, sg_err *err);
/* Its ?prefix= into prefix (*out NULL when absent): 0, or 1 with the 400 sent. */
int ingest_sandboxes_prefix(struct lws *wsi, sg_http_req *req, char prefix[SG_NAME_MAX + 8], const char **out);
/* ---- ingest_pages.c ---- */
/* GET /v1/events and /v1/sandboxes on PostgreSQL, and GET /v1/contents on
 * both backends: each answer read and built on libuv's thread pool by one
 * of INGEST_READERS connections of its own, the loop only writing it. */
#define INGEST_READERS 2            /* pages in the making at once (each a connection) */
#define INGEST_READ_QUEUE_MAX 64    /* requests waiting for a reader; past it 503 */
#define INGEST_READ_TIMEOUT_MS 30000 /* a page's query at most (statement_timeout) */
#define INGEST_PAGE_WAIT_S 60        /* from a request to its page's answer at most; then closed */
int ingest_pages_init(sg_ingest *ing, const char *store_url, sg_err *err);
/* GET /v1/events with its read token checked: the page queued (or the
 * request's 400, 403 or 503 answered). */
int ingest_pages_get(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
/* GET /v1/sandboxes alike: the list is read as a page is. */
int ingest_pages_sandboxes(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
/* Whether /v1/events and /v1/sandboxes are read off the loop (PostgreSQL). */
bool ingest_pages_events_off_loop(const sg_ingest *ing);
/* GET /v1/contents with its read token checked and its n hashes valid
 * (copied): the answer queued (or the request's 503 answered). batch: the
 * framed form ("HEX LEN\n" + bytes each), else the one content's bytes. */
int ingest_pages_contents(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *const *sha, size_t n,
                          bool batch);
/* HTTP_WRITEABLE of a request whose page is queued or being read. */
int ingest_pages_writeable(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
/* CLOSED_HTTP: a page not begun is dropped, one being read thrown away. */
void ingest_pages_closed(sg_http_req *req);
/* /v1/stats: pages being read, and waiting for a reader (contents only on SQLite). */
void ingest_pages_counts(const sg_ingest *ing, size_t *reading, size_t *waiting);
/* sg_ingest_stop: every request forgotten (lws closes them). */
void ingest_pages_stop(sg_ingest *ing);
/* After the loop drained (nothing in the thread pool): the connections. */
void ingest_pages_free(sg_ingest *ing);
/* ---- ingest_sse.c ---- */

int ingest_sse_init(sg_ingest *ing, const char *store_url, sg_err *err);
/* Closes its loop handles (sg_ingest_stop). */
void ingest_sse_stop(sg_ingest *ing);
void ingest_sse_free(sg_ingest *ing);
/* GET /v1/stream with its read token checked. */
int ingest_sse_open(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
int ingest_sse_writeable(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
void ingest_sse_closed(sg_ingest *ing, sg_http_req *req);
void ingest_sse_gone(sg_ingest *ing, struct lws *wsi);
/* Rows were committed (by this node): push them. */
void ingest_sse_on_commit(sg_ingest *ing);
/* Token id was revoked through this node: its open streams end now, with
 * the `revoked` notice saying why (other nodes' at their ping). id NULL:
 * every token (the secret was replaced). */
void ingest_sse_revoked(sg_ingest *ing, const char *id, const char *why);

/* ---- ingest_watch.c ---- */

/* --serve's URLs and the watch page's policy from opts, at start. */
int ingest_watch_init(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err);
/* GET /v1/watch with its read token checked: a watch token and the serves. */
int ingest_http_watch(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);

/* ---- ingest_hosts.c ---- */

/* POST /v1/hosts, its headers in: the host token checked and the body's
 * buffer made (its Content-Length); a refusal waits for the body. */
int ingest_hosts_post(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
/* LWS_CALLBACK_HTTP_BODY: a part of it. */
int ingest_hosts_body(struct lws *wsi, sg_http_req *req, const void *in, size_t len);
/* LWS_CALLBACK_HTTP_BODY_COMPLETION: checked and stored, or refused. */
int ingest_hosts_body_done(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
/* GET /v1/hosts with its read token checked (an operator's). */
int ingest_http_hosts(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
/* The count of the store's hosts for /metrics, at start and every
 * INGEST_HOSTS_COUNT_EVERY_S on the loop (a scrape never asks the store). */
#define INGEST_HOSTS_COUNT_EVERY_S 10
void ingest_hosts_start(sg_ingest *ing);
void ingest_hosts_stop(sg_ingest *ing);

/* ---- ingest_console.c ---- */

/* Where the console's files are (console_dir), at start. */
void ingest_console_find(sg_ingest *ing);
/* Whether uri is one of the console's files (served without a token). */
bool ingest_console_is_file(const char *uri);
int ingest_console_serve(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *uri);

/* ---- ingest_sessions.c ---- */

typedef struct ingest_sessions ingest_sessions;
/* sg_store_sessions's answer to q, from the summaries kept up to date;
 * with before >= 0 (q->after_id unused), those that began before the
 * cursor `before`, newest first (0: from the newest). */
json_t *ingest_sessions_list(sg_ingest *ing, const sg_store_query *q, int64_t before, sg_err *err);
void ingest_sessions_free(sg_ingest *ing);

/* ---- ingest_tokens.c ---- */

/* Whether cl's token is revoked: 0 no; 1 yes, or the store could not say,
 * with the answer's status and message. */
int ingest_token_revoked(sg_ingest *ing, const sg_token_claims *cl, unsigned *status, const char **why);
/* The same on store s, from any thread (*why is the calling thread's). */
int ingest_token_revoked_in(sg_store *s, const char *id, unsigned *status, const char **why);
/* GET /v1/revoke (a revoke token). */
int ingest_revoke(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
int ingest_http_revoked(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl);
/* One line per read: the path, its arguments, the token's id and scope. */
void ingest_read_log(struct lws *wsi, const char *uri, const sg_token_claims *cl);
/* ---- ingest_metrics.c ---- */

/* The start time and --metrics-token's file, before the listeners. */
int ingest_metrics_init(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err);
/* --metrics-listen's listener: a second lws vhost, once the context is up. */
int ingest_metrics_listen(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err);
/* --metrics-token's file read again (SIGHUP): the old token kept when
 * the file is bad. */
int ingest_metrics_reload(sg_ingest *ing, sg_err *err);
/* GET /metrics on the main port: its access rule, then the scrape. */
int ingest_metrics_http(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
/* A committed job: its time and rows into the histograms. */
void ingest_metrics_commit(sg_ingest *ing, uint64_t ns, size_t rows);

/* ---- ingest_ops.c ---- */

#define INGEST_IMPORT_BODY_MAX (1024ULL * 1024 * 1024) /* bytes of one POST /v1/import */
#define INGEST_OP_WAIT_S 3600 /* an operation's request unanswered at most (its transaction) */
int ingest_ops_init(sg_ingest *ing, const char *store_url, sg_err *err);
/* POST /v1/import or /v1/purge (uri), its headers in: the token checked,
 * a purge queued, an import's body awaited; a refusal (of an import: once
 * its body is in) answered. */
int ingest_ops_post(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *uri);
/* LWS_CALLBACK_HTTP_BODY of an import: a part, into its file. */
int ingest_ops_body(struct lws *wsi, sg_http_req *req, const void *in, size_t len);
/* LWS_CALLBACK_HTTP_BODY_COMPLETION: the import queued, or refused. */
int ingest_ops_body_done(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
/* HTTP_WRITEABLE of a request whose operation runs or ran. */
int ingest_ops_writeable(sg_ingest *ing, struct lws *wsi, sg_http_req *req);
/* CLOSED_HTTP: a running operation ends unanswered (it is not undone). */
void ingest_ops_closed(sg_http_req *req);
void ingest_ops_stop(sg_ingest *ing);
void ingest_ops_free(sg_ingest *ing);

/* ---- ingest_retain.c ---- */

int ingest_retain_start(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err);
void ingest_retain_stop(sg_ingest *ing);
void ingest_retain_free(sg_ingest *ing);

/* ---- ingest_limits.c ---- */

int ingest_limits_admit(sg_ingest *ing, int fd);
void ingest_limits_bind(sg_ingest *ing, struct lws *wsi);
void ingest_limits_release(sg_ingest *ing, struct lws *wsi);
/* Admitted past max_conns, into the reserve: only /healthz answers. */
bool ingest_limits_is_reserve(sg_ingest *ing, struct lws *wsi);
void ingest_limits_free(sg_ingest *ing);
/* The per-stream rate: a connection's reading follows both its pauses
 * (the writer's, the rate's); a new stream starts with a full bucket; an
 * accepted frame takes a token, and a stream out of tokens is throttled
 * until it has one again. */
void ingest_conn_flow(conn *c);
void ingest_rate_start(sg_ingest *ing, conn *c);
void ingest_rate_take(sg_ingest *ing, conn *c);
void ingest_rate_stop(sg_ingest *ing);

#endif

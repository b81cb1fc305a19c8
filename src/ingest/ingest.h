/* ingest: the WebSocket + HTTP server that receives event streams and
 * stores them (libwebsockets on the caller's libuv loop).
 *
 *   ws   /v1/ingest   token in "Authorization: Bearer T" or ?token=T; the
 *                     original agent's ?learner_id=&task_id=&sandbox_id= are
 *                     accepted when they match the token. Refused with 401.
 *                     Server -> client: {"ack": N} (highest contiguous
 *                     committed seq, -1 if none) right after the handshake
 *                     and after every commit that touched the stream; after
 *                     the first, N is no higher than the connection's own
 *                     highest committed frame (another token holder's frames
 *                     are never acked as this client's: it resends them).
 *   GET  /v1/token      with a stream token in "Authorization: Bearer T":
 *                     200 {"ok", "learner", "task", "sandbox"} when /v1/ingest
 *                     would take it, else 401 {"error": why}; opens and
 *                     writes nothing (`sandglass create` checks its key).
 *   GET  /healthz (open), and with a read token (token.h) in
 *        "Authorization: Bearer T" (401 without one, 403 out of its scope):
 *        /v1/sandboxes, /v1/stats (operator token only),
 *        /v1/events?learner=&task=&sandbox=&after_seq=&after_id=&limit=
 *        -> {"events": [...], "more": bool[, "next_after_id": N,
 *        "next_after_seq": N]}. A page holds at most limit (<= 1000)
 *        events and about 4 MiB of payloads; "more" says to ask again with
 *        after_id = next_after_id (paging by id) or after_seq =
 *        next_after_seq (one stream, by seq). A read token scoped to a
 *        learner, task or sandbox fills in that filter; a query naming
 *        another is refused with 403. A filter value that is too long or
 *        given twice is refused with 400.
 *   GET  /v1/stream?learner=&task=&sandbox=&after=&after_seq=   (read token as above,
 *        or ?token=) -> text/event-stream: every committed event in row id
 *        order ("id: ID\ndata: {the /v1/events row}\n\n"), pushed after
 *        each commit (this node's, and others' through the store's commit
 *        notices), from after= (absent: now) or Last-Event-ID on; an
 *        "event: live" once caught up, ": ping" every 15 s, and on a full
 *        queue "event: overflow" with {"after": the last id sent}, then the
 *        close (ingest_sse.c; framed by wire/sse.h). Unknown parameters, a
 *        bad cursor: 400.
 *   GET  /metrics    the counters in Prometheus's text format (ingest_metrics.c,
 *                     docs/METRICS.md): on the main port to loopback peers, or
 *                     on opts.metrics_host's own listener, with the token of
 *                     opts.metrics_token_path when given.
 *
 * Order: a stream's frames must come in seq order - each the stream's next
 * seq, or an identical resend of a stored one (store.h); a gap or a
 * conflicting resend closes the connection with 1008 and a reason, is
 * logged and counted (seq_refused), and is not stored. A ts that is not an
 * RFC 3339 date-time (sg_event_ts_valid) closes it with 1007.
 *
 * Frames are checked by sg_frame_scan (framescan.h: the verdict of
 * sg_event_validate without a JSON tree); a refused frame closes only its
 * connection, with the close code documented in event.h. Valid frames are
 * batched: a batch goes to the writer thread (its own store connection)
 * when the loop has drained pending input (uv_check) or at
 * SG_INGEST_BATCH_ROWS rows; while the writer commits, the next batch grows
 * (group commit) up to SG_INGEST_PENDING_MAX rows / SG_INGEST_BATCH_BYTES,
 * then reading pauses. Acks go out only after the commit. A batch whose
 * last frame is a file's content (a blob, sent just before its file_diff
 * event) waits for that event up to SG_INGEST_BLOB_HOLD_MS: committed alone
 * it would take a commit (an fsync) of its own before the event's. */
#ifndef SG_INGEST_H
#define SG_INGEST_H

#include <uv.h>

#include "base/err.h"
#include "ingest/prom.h"

#define SG_INGEST_BATCH_ROWS 1000
#define SG_INGEST_BATCH_BYTES (16 * 1024 * 1024)
#define SG_INGEST_BLOB_HOLD_MS 2
/* Connection limits: one client address may hold SG_INGEST_CONNS_PER_ADDR
 * connections (an uplink holds one per sandbox of its host), all together
 * SG_INGEST_CONNS_MAX; past those a new connection is closed at once. Past
 * the total, SG_INGEST_CONNS_RESERVE more are kept for health checks (one
 * per address): they may only GET /healthz. A connection must finish its
 * HTTP request or handshake within SG_INGEST_HANDSHAKE_TIMEOUT_S. */
#define SG_INGEST_CONNS_MAX 8192
#define SG_INGEST_CONNS_PER_ADDR 1024
#define SG_INGEST_CONNS_RESERVE 16
#define SG_INGEST_FDS_SPARE 64           /* fds kept for the store, logs, the listener */
#define SG_INGEST_HANDSHAKE_TIMEOUT_S 5
#define SG_INGEST_PENDING_MAX (8 * SG_INGEST_BATCH_ROWS) /* rows waiting on the writer */
/* GET /v1/stream: subscribers in all and per client address (past them:
 * 503 / 429), and each one's queue of events not yet written (past it the
 * subscriber is closed with the cursor to resume from: a slow reader never
 * holds the ingest back). */
#define SG_INGEST_STREAMS_MAX 1024
#define SG_INGEST_STREAMS_PER_ADDR 128
#define SG_INGEST_STREAM_QUEUE 4096                 /* events */
#define SG_INGEST_STREAM_QUEUE_BYTES (16 * 1024 * 1024)
/* Frames a second one stream (one connection) may send, with a burst of
 * a second's worth: past it the ingest stops reading that connection until
 * its rate allows the next frame (back-pressure: its acks come later, the
 * uplink's window closes and its spool keeps the rest; nothing is dropped
 * and no gap is made). Far above what a session's budgets let a
 * supervisor send (capture/budget.h); a forged stream could come from
 * elsewhere. */
#define SG_INGEST_STREAM_RATE 10000

typedef struct sg_ingest_opts {
    const char *host;        /* listen address, e.g. "127.0.0.1" */
    int port;                /* 0: ephemeral */
    const char *store_url;   /* "sqlite:/path" */
    const char *secret_path; /* created (0600) if missing */
    unsigned max_conns;          /* 0: SG_INGEST_CONNS_MAX (lowered to fit RLIMIT_NOFILE) */
    unsigned max_conns_per_addr; /* 0: SG_INGEST_CONNS_PER_ADDR */
    unsigned stream_rate;        /* frames/s per stream; 0: SG_INGEST_STREAM_RATE */
    /* > 0: sessions whose last event is older than this many days are
     * removed, at start and every SG_INGEST_RETAIN_EVERY_S (ingest_retain.c). */
    double retain_days;
    /* The `sandglass serve`s a console's watch connects to (http://HOST:PORT),
     * in the order tried: GET /v1/watch answers them, and the watch page's
     * policy allows connections to their origins only (ingest_watch.c). */
    const char *const *serves;
    unsigned nserves;            /* at most SG_INGEST_SERVES_MAX */
    /* GET /metrics (ingest_metrics.c, docs/METRICS.md): with metrics_host,
     * served on that address only (its own listener; port 0: any free
     * port) instead of on the main one; with metrics_token_path, a scrape
     * must carry that file's token ("Authorization: Bearer T", compared in
     * constant time); with neither, served on the main port to loopback
     * peers only. */
    const char *metrics_host;
    int metrics_port;
    const char *metrics_token_path;
    /* TLS (ingest/tls.h): PEM files, both or neither; checked before
     * anything listens. Every listener (the main one and metrics_host's)
     * then speaks https/wss only. */
    const char *tls_cert, *tls_key;
} sg_ingest_opts;

/* A --metrics-token file's token: at most this many bytes, printable
 * ASCII without spaces (it travels in a header), one trailing newline
 * allowed; a file that every user may read is refused. */
#define SG_INGEST_METRICS_TOKEN_MAX SG_PROM_TOKEN_MAX

#define SG_INGEST_SERVES_MAX 8
#define SG_INGEST_SERVE_URL_MAX 200

/* url, a serve's address for --serve: http:// or https://, a host (a name,
 * an IPv4 address or [IPv6]) and an optional port, no path (a trailing /
 * is dropped). Into out (size bytes), or -1 with why. */
int sg_ingest_serve_url_check(const char *url, char *out, size_t size, sg_err *err);

#define SG_INGEST_RETAIN_EVERY_S 3600

typedef struct sg_ingest sg_ingest;

/* Opens the store and the secret and starts listening on loop. */
sg_ingest *sg_ingest_start(uv_loop_t *loop, const sg_ingest_opts *opts, sg_err *err);
/* The port actually listened on. */
int sg_ingest_port(const sg_ingest *ing);
/* The port /metrics has its own listener on (opts.metrics_host), or 0. */
int sg_ingest_metrics_port(const sg_ingest *ing);
/* SIGHUP: the secret's file and --metrics-token's read again, each line
 * logged; neither drops a connection by itself. A file that cannot be read
 * or is not a secret (a token) keeps the old one, logged as an error, and
 * makes this return -1 (err: the first). A secret that changed applies to
 * every token checked from now on (a token of the old secret is refused:
 * a leaked secret is replaced to lock out what it signed), and ends the
 * connections that were let in by a token of the old secret: the open
 * /v1/ingest streams (closed 1008, saying why) and /v1/stream subscribers
 * (their `revoked` notice). Each node sharing a store reloads on its own
 * SIGHUP. */
int sg_ingest_reload(sg_ingest *ing, sg_err *err);
/* Stops accepting, commits what is pending, closes every connection. The
 * loop then drains; call sg_ingest_free after uv_run returns. Returns < 0 if
 * the final commit failed. */
int sg_ingest_stop(sg_ingest *ing, sg_err *err);
void sg_ingest_free(sg_ingest *ing);

/* The ingest's counters (served at /v1/stats to an operator token). */
typedef struct sg_ingest_stats {
    uint64_t frames;       /* valid frames received */
    uint64_t inserted;     /* new rows committed */
    uint64_t duplicates;   /* frames that were already stored */
    uint64_t blobs;        /* blob frames (contents, recordings) received */
    uint64_t refused;      /* connections closed for a bad frame */
    uint64_t seq_refused;  /* frames refused by the order rule (gap, conflicting resend) */
    uint64_t conn_refused; /* connections refused by a connection limit */
    uint64_t commits;
    uint64_t subscribers;      /* GET /v1/stream connections open */
    uint64_t stream_overflows; /* subscribers closed for reading too slowly */
    uint64_t throttled;    /* times a stream's reading paused for its rate */
} sg_ingest_stats;

/* Splits "HOST:PORT" (host may be "[v6]"); port 0..65535. */
int sg_ingest_parse_listen(const char *s, char *host, size_t host_len, int *port, sg_err *err);

/* Whether host:port can be listened on: a bind of our own, closed at once
 * (SO_REUSEADDR, as lws binds). Fills err with what the user can act on
 * ("127.0.0.1:7433 is in use ..."). Also `sandglass serve`'s check. */
int sg_ingest_bind_probe(const char *host, int port, sg_err *err);

#endif

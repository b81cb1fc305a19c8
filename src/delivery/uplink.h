/* uplink: streams a spool to the ingest over WebSocket (libwebsockets
 * client on the supervisor's libuv loop, as a foreign loop).
 *
 * Protocol: connect to ws://HOST:PORT/v1/ingest (subprotocol "sg-ingest",
 * token in "Authorization: Bearer"); the ingest sends {"ack": N, "v": 1}
 * (wire/ack.h) after the handshake and after each commit (N: highest
 * contiguous committed seq, -1 <= N <= INT64_MAX - SG_UPLINK_WINDOW; any
 * other message is an error event and changes nothing; an ack of a newer
 * version than wire/ack.h's stops the uplink, as a refused seq does, with
 * SG_UPLINK_REFUSED saying what to do).
 * On an ack the spool is trimmed (sg_spool_ack) — never on "sent", and
 * never past the highest seq sent on that connection: the first ack of a
 * connection (where the ingest's copy of the stream is) trims nothing
 * beyond the spool's own ack, as seqs above it may hold another token
 * holder's frames. Every synced record after the spool's ack is sent (an
 * identical resend is acked; a conflicting one refused), oldest first, one text frame
 * each, writing while the socket is not choked. After a close, an error, a
 * refused handshake (401) or a refused frame the uplink reconnects with
 * exponential backoff, 0.25 s doubling to 8 s, full jitter, and replays
 * from the spool's ack. Refusals are reported through the event callback
 * and retried (an operator may fix the token) — but a frame the ingest
 * refuses by its seq (close 1008 naming "seq N": a gap, or other content
 * stored at N by another holder of the token) is refused again on every
 * replay: after SG_UPLINK_SEQ_REFUSALS_MAX refusals of the same seq in a
 * row the uplink stops (no more connections; SG_UPLINK_REFUSED with
 * retry_ms 0 says why; the spool keeps the frame and all after it, for an
 * operator; drain fails at once with that reason). At most SG_UPLINK_WINDOW
 * frames are in flight beyond the ack; a connection that leaves sent frames
 * unacked for SG_UPLINK_ACK_TIMEOUT_MS (a dead peer, a stalled ingest) is
 * dropped and replayed on a new one.
 *
 * Several ingest nodes of one store (url "ws://A:1,ws://B:2", at most
 * SG_UPLINK_URLS_MAX): they share the store, so any node's ack is the
 * store's. A failed or lost connection moves to the next node at once;
 * only after every node failed in a row does the backoff above apply
 * (then the next node is tried after it). A healthy connection (its first
 * ack) resets that count. The replay from the spool's ack is the same on
 * every node: an identical resend is acked, so a failover leaves no gap
 * and no duplicate.
 *
 * Everything runs on the loop's thread. */
#ifndef SG_UPLINK_H
#define SG_UPLINK_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/err.h"
#include "delivery/spool.h"

#define SG_UPLINK_BACKOFF_MIN_MS 250
#define SG_UPLINK_BACKOFF_MAX_MS 8000
#define SG_UPLINK_RX_MAX 4096            /* one message from the ingest */
#define SG_UPLINK_WINDOW 8192            /* frames sent beyond the last ack */
#define SG_UPLINK_ACK_TIMEOUT_MS 15000   /* unacked frames and no ack this long:
                                            the connection is dead, reconnect */
#define SG_UPLINK_TOKEN_MAX 4096
#define SG_UPLINK_SEQ_REFUSALS_MAX 3     /* the same seq refused this often: stop */
#define SG_UPLINK_URLS_MAX 8             /* ingest nodes in one --ingest list */

typedef struct sg_uplink sg_uplink;

typedef enum sg_uplink_event_type {
    SG_UPLINK_CONNECTED,      /* handshake done */
    SG_UPLINK_DISCONNECTED,   /* connection lost or could not be made */
    SG_UPLINK_REFUSED,        /* handshake refused (HTTP status in code) or
                                 closed by the ingest with a close code */
    SG_UPLINK_ERROR,          /* local trouble, e.g. a spool read error */
} sg_uplink_event_type;

typedef struct sg_uplink_event {
    sg_uplink_event_type type;
    int code;                 /* HTTP status or WebSocket close code; 0 */
    const char *reason;       /* never NULL */
    uint32_t retry_ms;        /* next attempt in (DISCONNECTED/REFUSED) */
} sg_uplink_event;

typedef void (*sg_uplink_event_fn)(void *ud, const sg_uplink_event *ev);

typedef struct sg_uplink_stats {
    bool connected;           /* handshake done and the first ack received */
    int64_t acked_seq;        /* the ingest's last ack, -1 if none yet */
    int64_t sent_seq;         /* highest seq sent on this connection */
    uint64_t sent;            /* frames sent, replays included */
    uint64_t connects;        /* successful handshakes */
    uint64_t reconnects;      /* attempts after a failure or a close */
    uint64_t refusals;        /* 401s and refusal close codes */
    int last_close_code;
    int64_t stuck_seq;        /* the seq the uplink gave up on, -1 if none */
    uint64_t resent_at_connect; /* frames the ingest had at a connect but
                                   the spool's ack did not cover (resent,
                                   compared there), summed over connects */
    uint64_t failovers;       /* moves to another node after a failure */
    unsigned node;            /* the node connected to or tried (0-based) */
    unsigned nodes;           /* nodes in the list */
} sg_uplink_stats;

/* url: ws://HOST:PORT[/PATH] or wss://... (PATH defaults to /v1/ingest),
 * or several such, comma-separated (nodes of one store; none empty, at most
 * SG_UPLINK_URLS_MAX). Connects at once (asynchronously) to the first.
 * The spool must outlive the uplink. wss: the ingest's certificate is
 * verified, its name or address against the URL's host, by the CAs of
 * ca_file (PEM, checked here by sg_uplink_ca_check) or, when NULL, of the
 * system's trust store (OpenSSL's default paths); there is no way to skip
 * it. A failed verification is a DISCONNECTED event naming it, retried as
 * any failed connection. */
sg_uplink *sg_uplink_new(uv_loop_t *loop, const char *url, const char *token, sg_spool *spool,
                         const char *ca_file, sg_err *err);
/* Whether path is a CA file TLS clients can use: readable, holding at
 * least one PEM certificate. -1 with err naming path and why. */
int sg_uplink_ca_check(const char *path, sg_err *err);
void sg_uplink_set_event_cb(sg_uplink *u, sg_uplink_event_fn fn, void *ud);
/* Default SG_UPLINK_ACK_TIMEOUT_MS (tests use short ones). */
void sg_uplink_set_ack_timeout(sg_uplink *u, uint32_t ms);
/* New synced records are in the spool. */
void sg_uplink_notify(sg_uplink *u);
void sg_uplink_get_stats(const sg_uplink *u, sg_uplink_stats *out);

/* Outside uv_run only: runs the loop until every synced record is acked
 * (0) or timeout_ms passes (-1, ETIMEDOUT). A pending backoff is cut short. */
int sg_uplink_drain(sg_uplink *u, uint64_t timeout_ms, sg_err *err);

/* Ends a running sg_uplink_drain at its next turn of the loop (it then
 * fails as a timeout does): for an event callback that knows waiting is
 * useless (a token the ingest rejects). */
void sg_uplink_drain_stop(sg_uplink *u);

/* Starts closing (connection, timer, lws context); may be called inside
 * the loop. The loop then drains the uplink's handles. */
void sg_uplink_close(sg_uplink *u);
/* Outside uv_run only. Closes if needed, lets the loop drain what lws
 * still has open, then frees. NULL is fine. */
void sg_uplink_free(sg_uplink *u);

#endif

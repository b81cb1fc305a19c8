/* uplink_internal: the uplink's state (uplink.c), shared with nothing but
 * fuzz/fuzz_uplink.c, which drives the ingest's messages through
 * sg_uplink_handle_message on a real spool without a WebSocket (uplink.h is
 * the interface). */
#ifndef SG_UPLINK_INTERNAL_H
#define SG_UPLINK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "delivery/spool.h"
#include "delivery/uplink.h"

struct lws_context;
struct lws;

typedef enum state {
    ST_IDLE,        /* nothing going on (before the first connect) */
    ST_CONNECTING,
    ST_OPEN,        /* handshake done */
    ST_WAITING,     /* backoff timer running */
    ST_CLOSING,
    ST_STOPPED,     /* gave up: the ingest refuses a frame by its seq */
} state;

/* One ingest node of the store (--ingest URL,URL,...). */
typedef struct sg_uplink_ep {
    char *host, *path;
    int port;
    bool tls;
} sg_uplink_ep;

struct sg_uplink {
    uv_loop_t *loop;
    sg_spool *spool;
    struct lws_context *ctx;
    struct lws *wsi;
    sg_spool_cursor *cur;
    char *auth;
    char *ca_file;          /* wss: the CAs to trust; NULL: the system's */
    struct ssl_ctx_st *ssl_ctx; /* wss: the client TLS context (ours, lws uses it) */
    sg_uplink_ep eps[SG_UPLINK_URLS_MAX];
    unsigned n_eps;
    unsigned ep;            /* the node connected to or tried now */
    unsigned fails;         /* connections failed or lost in a row since
                               the last healthy one (first ack) */

    state st;
    uintptr_t gen;          /* id of the current connection attempt */
    bool ready;             /* first ack of this connection received */
    int64_t acked_at_connect;
    unsigned attempt;       /* backoff exponent */
    uint64_t rng;

    uv_timer_t retry;
    uv_timer_t drain_timer;
    uv_timer_t watchdog;    /* 250 ms tick: ack timeout */
    uint64_t last_progress_ns;
    uint32_t ack_timeout_ms;
    bool killing;           /* watchdog asked lws to drop the connection */
    int open_handles;       /* our timers not yet closed */
    bool draining, drain_timed_out;

    char rx[SG_UPLINK_RX_MAX];
    size_t rx_len;
    bool rx_overflow;
    int close_code;
    char close_reason[128];

    /* the seq the ingest last refused with 1008, and how often in a row */
    int64_t refused_seq;
    unsigned refused_times;
    char stuck[300];        /* why the uplink stopped (ST_STOPPED) */

    sg_uplink_event_fn ev_fn;
    void *ev_ud;
    sg_uplink_stats stats;
};

/* The ingest's message in u->rx (rx_len bytes): an ack is taken (trims the
 * spool, sends more), anything else is one SG_UPLINK_ERROR event. */
void sg_uplink_handle_message(sg_uplink *u);

#endif

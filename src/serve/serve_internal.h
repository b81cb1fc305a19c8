/* serve_internal: what terminal.c (the browser's side, the limits, HTTP)
 * and relay.c (the supervisor's side: connecting, relaying) share. */
#ifndef SG_SERVE_INTERNAL_H
#define SG_SERVE_INTERNAL_H

#include <jansson.h>
#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/util.h"
#include "ingest/http.h"
#include "serve/terminal.h"
#include "wire/ctl.h"
#include "wire/termws.h"
#include "wire/token.h"

#define SERVE_TEXT_MAX SG_TERMWS_TEXT_MAX /* a text message from the browser */
#define SERVE_OUT_PAUSE (1u << 20)     /* queued for the browser: stop reading the sandbox */
#define SERVE_OUT_RESUME (SERVE_OUT_PAUSE / 2)
#define SERVE_IN_PAUSE (256u * 1024)   /* queued for the sandbox: stop reading the browser */
#define SERVE_ADDR_MAX 64              /* a peer's address, as text */
#define SERVE_CLOSE_TRY_AGAIN 1013     /* RFC 6455: try again later (lws has no name for it) */
#define SERVE_WATCH_REPLAY (64u * 1024) /* a learner's last output, shown to a new watcher */
/* Queued for one watcher: past it, the watcher is closed. Above
 * SERVE_OUT_PAUSE (the learner's own queue, at which the relay stops
 * reading the sandbox): a watcher as fast as the learner's browser is never
 * closed, one 512 KiB behind it is. */
#define SERVE_WATCH_QUEUE (SERVE_OUT_PAUSE + 512u * 1024)

typedef struct outmsg {
    struct outmsg *next;
    bool text;
    size_t len;
    unsigned char data[]; /* LWS_PRE of headroom, then len bytes */
} outmsg;

typedef struct tsess tsess;
typedef struct serve_action serve_action;

#define SERVE_ACTIONS 16            /* abort/destroy commands running at once (action.c) */
#define SERVE_ACTION_TIMEOUT_S 60   /* ... each, at most: then killed */

/* An HTTP request's memory (lws's per-session data of the "http"
 * protocol): the shared answer's, then a POST /v1/abort|destroy's. */
typedef struct serve_http {
    sg_http_req req;
    char action[8];               /* the endpoint's: "abort" or "destroy" */
    sg_token_claims claims;       /* its action token's, once checked */
    char why[sizeof ((sg_err *)0)->msg]; /* a refusal to answer once the body is in */
    serve_action *act;            /* the action running for it, or NULL */
    struct lws *wsi;              /* its connection (while act is set) */
} serve_http;

struct sg_serve {
    uv_loop_t *loop;
    struct lws_context *ctx;
    int port;
    sg_serve_opts lim; /* the limits in force (0s replaced by defaults) */
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    char secret_path[4096]; /* read again by sg_serve_reload */
    char web_dir[512];
    tsess *sessions; /* every WebSocket connection, for the limits and stop */
    unsigned nconns;
    uint64_t refused; /* upgrades refused past the caps */
    char cli[4096];   /* the sandglass program the actions run ("": none found) */
    serve_action *actions; /* running (action.c) */
    unsigned nactions;
    sg_token_nonces nonces; /* the action tokens taken, until their exp (wire/token.h) */
    char (*revoked)[SG_TOKEN_ID_LEN + 1]; /* revoked token ids, sorted (sg_serve_set_revoked) */
    size_t nrevoked;
    bool stopping;
    char rbuf[SG_CTL_CHUNK + 1024]; /* one message from a supervisor */
};

/* One browser terminal. Its memory is ours, not lws's: its uv handles
 * (and a takeover running off the loop) outlive the wsi. */
struct tsess {
    sg_serve *srv;
    struct lws *wsi;   /* NULL once lws has closed the connection */
    tsess *next, *prev;
    char addr[SERVE_ADDR_MAX]; /* the peer's address, for the per-address caps */
    char sandbox[SG_NAME_MAX + 1];
    bool authed;       /* the token was good: holds a terminal slot from here */
    bool watcher;      /* ... a watch token: follows `watched`, read-only, no terminal slot */
    tsess *watched;    /* a watcher's learner session; NULL once it ended */
    char token_id[SG_TOKEN_ID_LEN + 1]; /* its token's: the log, a revocation */
    char *ring;        /* a learner's last SERVE_WATCH_REPLAY bytes of output (watch.c) */
    size_t ring_pos;   /* where the next byte goes */
    bool ring_full;    /* ... and the ring has wrapped */
    bool shell_on;     /* the exec request went to the supervisor */
    bool takeover_pending; /* a takeover of the sandbox runs off the loop for us */
    bool took_over;    /* ... and has run: no second one */
    uint64_t deadline; /* uv_now() past which a busy supervisor refuses us */
    sg_ctl_winsz start_ws; /* the size the shell starts with */
    int ctl;           /* the exec's connection to the supervisor, -1 before */
    sg_ctl_call call;  /* its answer, message by message */
    uv_poll_t poll;
    bool poll_on;      /* initialized (closed with the session) */
    int poll_events;
    uv_timer_t timer;  /* the token's timeout, then the connect's retries */
    int handles;       /* uv handles (and takeovers) still open */
    char text[SERVE_TEXT_MAX + 1];
    size_t text_len;
    bool text_over;
    outmsg *qhead, *qtail;
    size_t qbytes;
    sg_buf in;         /* keystrokes not yet taken by the supervisor */
    sg_ctl_winsz winsz;
    bool winsz_pending;
    bool rx_off;       /* lws_rx_flow_control(wsi, 0) in force */
    bool closing;      /* close once the queue is sent */
    bool close_sent;
    uint16_t close_code;
    char close_reason[120];
};

/* terminal.c */
/* Whether id is among the revoked ids in force; if so, why holds the
 * refusal ("token revoked (id X)", why_len bytes). */
bool serve_token_revoked(const sg_serve *s, const char *id, char *why, size_t why_len);
/* One text message (wire/termws.h) to the browser. */
void serve_queue_msg(tsess *t, const sg_termws_msg *m);
int serve_queue_out(tsess *t, bool text, const void *p, size_t len);
/* Ends the session once everything queued is sent, with code and reason. */
void serve_close_after(tsess *t, uint16_t code, const char *reason);
/* {"error": why} first, then the close (code) with why as the reason. */
void serve_refuse_code(tsess *t, uint16_t code, const char *why);
void serve_refuse(tsess *t, const char *why); /* 1008 */
void serve_sess_free_if_done(tsess *t);
void serve_on_handle_closed(uv_handle_t *h);

/* watch.c: a watcher (a watch token, read-only) of a learner's terminal. */
/* t's token was a watch token (claims cl): attach it to the newest open
 * terminal of the sandbox, replay, count; or refuse with why. */
void serve_watch_open(tsess *t, const char *sandbox, const char *token_id);
/* What the learner t's terminal printed: into its ring and to its
 * watchers (a watcher past SERVE_WATCH_QUEUE is closed, the learner never
 * waits). */
void serve_watch_output(tsess *t, const void *p, size_t len);
/* The learner t's shell ended with code: its watchers are told (EXIT). */
void serve_watch_exit(tsess *t, int code);
/* A watcher sent something: refused (ERROR) and ignored. */
void serve_watch_input(tsess *t, bool text);
/* t (a learner or a watcher) is closing or gone: a learner's watchers are
 * closed, a watcher's learner told the new count. */
void serve_watch_end(tsess *t);
/* Watchers of sandbox (all when NULL), not closing. */
unsigned serve_watchers(const sg_serve *srv, const char *sandbox);

/* action.c: POST /v1/abort and /v1/destroy (an action token, wire/token.h). */
/* The request's headers: its token checked (a refusal is kept for the
 * body's end), its body's buffer made; what the lws callback returns. */
int serve_action_post(sg_serve *srv, struct lws *wsi, serve_http *h, const char *what);
int serve_action_body(serve_http *h, const void *in, size_t len);
/* The body's end: the refusal, or the body checked, the nonce taken and
 * the local command started (its answer sent when it ends). */
int serve_action_body_done(sg_serve *srv, struct lws *wsi, serve_http *h);
/* The request's connection closed: its action runs on, unanswered. */
void serve_action_detach(serve_http *h);
/* serve stops: every running action's handles closed (the commands go on). */
void serve_actions_stop(sg_serve *srv);

/* relay.c: connects t (authed, t->sandbox and t->start_ws set) to its
 * supervisor without blocking the loop, starts the shell there and relays;
 * refuses t with the reason when it cannot. */
void serve_shell_open(tsess *t);
/* Reads or writes the supervisor's side as the queues allow. */
void serve_poll_update(tsess *t);

#endif

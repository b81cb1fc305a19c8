/* terminal: `sandglass serve`, a sandbox host's web front door for the
 * learner's terminal in a browser (xterm.js, web/terminal.html).
 *
 * Why a server on the sandbox host and not the ingest: a terminal needs the
 * supervisors' control sockets, which exist only on the host the sandboxes
 * run on, while the ingest may run anywhere and only receives events; and
 * a terminal runs code, which the ingest's tokens never allow. serve keeps
 * no state of its own: each browser connection is one `sandglass shell`,
 * the same tty exec on the sandbox's ctl.sock (the PTY is made inside the
 * sandbox, wire/ctl.h), relayed — so capture, limits and the kill switch
 * are the shell's.
 *
 * HTTP:
 *   GET /              the terminal page (web/terminal.html)
 *   GET /terminal.js   its script
 *   GET /xterm.js, /xterm.css, /addon-fit.js   xterm.js (vendor/, from npm)
 *   GET /healthz       {"ok": true}
 *   POST /v1/abort, POST /v1/destroy   an operator's abort or destroy of one
 *                      of this host's sandboxes from another host, with an
 *                      action token (wire/token.h), single use: action.c
 * WebSocket /v1/terminal, subprotocol "sandglass-terminal": the messages
 * are wire/termws.h's (typed there, encoded and decoded only there):
 *   browser -> first, within SG_SERVE_AUTH_TIMEOUT_S, a text message
 *              {"token": T, "rows": R, "cols": C}: T a terminal token
 *              (wire/token.h) whose sandbox is live on this host with the
 *              token's learner and task
 *           -> binary messages: keystrokes (the terminal's input)
 *           -> text {"resize": {"rows": R, "cols": C}}
 *   server  -> binary messages: what the terminal prints
 *           -> text {"watchers": N}: how many watch this terminal now
 *           -> text {"exit": N} when the shell ends, or {"error": "..."};
 *              then it closes (1000, or 1008 with the reason for a refusal)
 *              (a text message that does not decode is refused with what
 *              it must be and what was wrong in it)
 * Watching (watch.c): an AUTH with a watch token (wire/token.h) instead
 * of a terminal token opens no shell: the connection follows the newest
 * terminal open in that sandbox on this serve, read-only — the last 64 KiB
 * it printed, then its output live; its input and resizes are answered
 * with an ERROR and dropped; SG_SERVE_WATCHERS_PER_SANDBOX watchers a
 * sandbox (1013 past it), no terminal slot, but a connection of its
 * address; closed (1000) when the terminal ends; a watcher with 1.5 MiB
 * unread is closed (1013) and never slows the learner; the learner's page
 * gets {"watchers": N} at each change. Without an open terminal a watch
 * is refused (1013: nothing to watch yet). Each terminal keeps its last
 * 64 KiB of output for a watcher to come (a ring, allocated at its first
 * output).
 * Refusals of a shell that could open later (a busy sandbox, a limit)
 * close with 1013 ("try again later") instead of 1008.
 * Bounds: SG_SERVE_CONNS terminals in all and SG_SERVE_PER_SANDBOX per
 * sandbox, counted from the token's acceptance (while the supervisor is
 * still being reached, too); a connection without a token yet holds no
 * terminal slot, but one of SG_SERVE_UNAUTH (SG_SERVE_UNAUTH_PER_ADDR
 * from one address), and one address holds SG_SERVE_CONNS_PER_ADDR
 * WebSockets at most (past it the upgrade is refused); a supervisor that
 * does not accept the connection within SG_SERVE_CONNECT_TIMEOUT_S, or
 * does not answer the shell's request within SG_SERVE_ANSWER_TIMEOUT_S,
 * refuses the terminal (1013, its slot free at once), and never delays another sandbox's
 * terminal or /healthz (relay.c); a text message of 4 KiB at most;
 * output queued for a slow browser stops the relay from reading the
 * sandbox (at 1 MiB), input queued for the sandbox stops reading the
 * browser (at 256 KiB: a paste into a program that does not read waits
 * in the browser). */
#ifndef SG_SERVE_TERMINAL_H
#define SG_SERVE_TERMINAL_H

#include <uv.h>

#include "base/err.h"
#include "wire/termws.h"

#define SG_SERVE_DEFAULT_PORT 7434
#define SG_SERVE_CONNS 64
#define SG_SERVE_PER_SANDBOX 4
#define SG_SERVE_WATCHERS_PER_SANDBOX 4
#define SG_SERVE_UNAUTH 256
#define SG_SERVE_UNAUTH_PER_ADDR 8
#define SG_SERVE_CONNS_PER_ADDR 32
#define SG_SERVE_AUTH_TIMEOUT_S 5
#define SG_SERVE_CONNECT_TIMEOUT_S 5
/* From the shell's request to the supervisor's first answer (the shell's
 * first output, or an error): longer than the connect's, as a shell's start
 * on a loaded host takes seconds. */
#define SG_SERVE_ANSWER_TIMEOUT_S 30
#define SG_SERVE_PROTOCOL SG_TERMWS_PROTOCOL

typedef struct sg_serve sg_serve;

typedef struct sg_serve_opts {
    const char *host;        /* exactly this address */
    int port;                /* 0: any free port */
    const char *secret_path; /* the tokens' HMAC secret */
    const char *web_dir;     /* terminal.html, terminal.js, vendor/ (base/webdir.h) */
    /* The limits; 0: the default (SG_SERVE_CONNS, ...). */
    unsigned max_terminals, max_unauth, max_unauth_per_addr, max_conns_per_addr;
    /* TLS (ingest/tls.h): PEM files, both or neither, checked before the
     * listener exists; then https/wss only. */
    const char *tls_cert, *tls_key;
    /* The sandglass program POST /v1/abort and /v1/destroy run (NULL:
     * none; they answer 503). */
    const char *cli;
} sg_serve_opts;

/* Listens on opts' address in loop. NULL with err (an address in use, a
 * secret that cannot be read, a web directory without the page, a
 * certificate or key that cannot serve). */
sg_serve *sg_serve_start(uv_loop_t *loop, const sg_serve_opts *opts, sg_err *err);
int sg_serve_port(const sg_serve *s);
/* SIGHUP: the secret's file read again. A file that cannot be read or is
 * not a secret keeps the old secret (-1, logged as an error). A secret
 * that changed refuses the old one's tokens from now on and closes every
 * open connection (1008, saying why), as the ingest does (ingest.h:
 * sg_ingest_reload); the same secret changes nothing. */
int sg_serve_reload(sg_serve *s, sg_err *err);
/* The revoked token ids (n strings of SG_TOKEN_ID_LEN hex digits, as the
 * ingest's GET /v1/revoked lists them; others are ignored), replacing the
 * ones in force: a terminal, watch or action token among them is refused
 * from now on, and every open terminal or watch its token let in is
 * closed (1008, "token revoked (id X)"). 0, or -1 with err (out of
 * memory: the old list kept). */
int sg_serve_set_revoked(sg_serve *s, const char *const *ids, size_t n, sg_err *err);
/* Closes every connection (their shells end as if the browser left) and
 * the listener; then run the loop once more and free. */
void sg_serve_stop(sg_serve *s);
void sg_serve_free(sg_serve *s);

#endif

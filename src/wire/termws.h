/* termws: the terminal WebSocket's messages, between a browser (the page
 * web/terminal.js, or any client) and `sandglass serve`
 * (src/serve/terminal.h), typed: the one encoder and strict decoder of
 * each text message, for both ends and for fuzz/fuzz_termws.c.
 *
 * WebSocket /v1/terminal, subprotocol SG_TERMWS_PROTOCOL:
 *   browser -> serve   first a text {"token": T, "rows": R, "cols": C}
 *                      (AUTH); then binary messages (keystrokes, raw) and
 *                      text {"resize": {"rows": R, "cols": C}} (RESIZE)
 *   serve -> browser   binary messages (what the terminal prints, raw);
 *                      text {"watchers": N} (WATCHERS: how many watch this
 *                      terminal now, sent to the learner whenever it
 *                      changes; N in 0..SG_TERMWS_WATCHERS_MAX);
 *                      text {"exit": N} (EXIT) when the shell ends, or
 *                      {"error": "..."} (ERROR); then it closes, except
 *                      that a watcher's refused input or resize gets an
 *                      ERROR and the watch goes on
 * A watcher (AUTH with a watch token, wire/token.h) receives the
 * terminal's output and the same EXIT/ERROR, and sends nothing after its
 * AUTH: serve refuses (ERROR) and ignores whatever it sends.
 * R and C are integers in 1..SG_TERMWS_WINSZ_MAX; a text message is at
 * most SG_TERMWS_TEXT_MAX bytes; a message has exactly its fields (an
 * unknown one is refused by name). The binary messages are not framed:
 * the bytes are the terminal's.
 *
 * No version field: the page and serve come from one install (serve
 * serves the page), so they always speak the same protocol. */
#ifndef SG_WIRE_TERMWS_H
#define SG_WIRE_TERMWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_TERMWS_PROTOCOL "sandglass-terminal"
#define SG_TERMWS_TEXT_MAX 4096 /* one text message, either way */
#define SG_TERMWS_WINSZ_MAX 1000 /* rows or columns */
#define SG_TERMWS_WATCHERS_MAX 1000 /* a WATCHERS count */

typedef enum sg_termws_kind {
    SG_TERMWS_NONE = 0,
    SG_TERMWS_AUTH,   /* browser -> serve, first */
    SG_TERMWS_RESIZE, /* browser -> serve */
    SG_TERMWS_EXIT,   /* serve -> browser */
    SG_TERMWS_ERROR,  /* serve -> browser */
    SG_TERMWS_WATCHERS, /* serve -> browser (the learner's) */
} sg_termws_kind;

typedef struct sg_termws_msg {
    sg_termws_kind kind;
    char *token;         /* AUTH: the terminal token (wire/token.h), owned */
    uint16_t rows, cols; /* AUTH, RESIZE */
    int exit_code;       /* EXIT: the shell's exit code */
    char *error;         /* ERROR: why, owned */
    unsigned watchers;   /* WATCHERS: how many watch */
} sg_termws_msg;

/* The text message of m, NUL-terminated, *len its length (without the
 * NUL). Caller frees. NULL for a string that is not UTF-8 (or without
 * memory, or a kind without a message). */
char *sg_termws_encode(const sg_termws_msg *m, size_t *len);

/* A text message from the browser: AUTH while !authed, then RESIZE. err
 * says what the message must be and what was wrong in it. out is zeroed
 * first and holds nothing on failure. */
int sg_termws_decode_browser(const char *buf, size_t len, bool authed, sg_termws_msg *out, sg_err *err);
/* A text message from serve: EXIT, ERROR or WATCHERS. */
int sg_termws_decode_serve(const char *buf, size_t len, sg_termws_msg *out, sg_err *err);
void sg_termws_msg_free(sg_termws_msg *m);

#endif

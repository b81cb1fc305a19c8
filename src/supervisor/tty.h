/* tty: the supervisor's end of an exec's terminal. The PTY is made inside
 * the sandbox (src/sandbox/pty.h); its master comes back on the socket the
 * exec child got as stdin, and the supervisor relays it: what the terminal
 * prints goes to ops->output (the exec's output path: the output limit,
 * the capture, the caller), what the caller types is queued here and
 * written to the master as the terminal takes it.
 *
 * The terminal is an object of its own, not the caller's connection's, so
 * a second client can attach to it later. */
#ifndef SG_SUP_TTY_H
#define SG_SUP_TTY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "wire/ctl.h"

/* Typed input queued for a terminal that does not read it: the caller's
 * connection is not read while more waits (backpressure, not loss). */
#define SG_SUP_TTY_INPUT_MAX (256 * 1024)

typedef struct sg_sup_tty sg_sup_tty;

typedef struct sg_sup_tty_ops {
    /* Bytes the terminal printed. */
    void (*output)(void *ud, const char *buf, size_t len);
    /* The input queue went below half of SG_SUP_TTY_INPUT_MAX again. */
    void (*input_room)(void *ud);
} sg_sup_tty_ops;

/* Takes sock (the supervisor's end of the exec child's stdin socket).
 * NULL when out of memory (sock is closed). */
sg_sup_tty *sg_sup_tty_new(uv_loop_t *loop, int sock, sg_ctl_winsz ws, const sg_sup_tty_ops *ops, void *ud);

/* Queues typed bytes for the terminal. Returns -1 (and drops them) past
 * SG_SUP_TTY_INPUT_MAX: a caller that ignores sg_sup_tty_input_full. */
int sg_sup_tty_input(sg_sup_tty *t, const char *buf, size_t len);
bool sg_sup_tty_input_full(const sg_sup_tty *t);
/* Typed bytes written to the terminal so far: a line the shell reads was
 * typed after a prompt only if some were written after it was read. */
uint64_t sg_sup_tty_input_written(const sg_sup_tty *t);

/* A new window size (TIOCSWINSZ on the master: the foreground job gets
 * SIGWINCH). Kept for the master when it has not come yet. */
void sg_sup_tty_resize(sg_sup_tty *t, sg_ctl_winsz ws);

/* Stops (or resumes) reading the terminal: the caller is slow. */
void sg_sup_tty_pause(sg_sup_tty *t, bool paused);

/* The exec ended: passes on what the terminal still holds (at most a
 * bounded amount), without waiting. */
void sg_sup_tty_drain(sg_sup_tty *t);

/* Reads what the terminal already holds, now (at most a bounded amount;
 * nothing while paused): its output and marks are passed on before the
 * caller goes on (the watcher's settled changes, which a command marked
 * earlier made). */
void sg_sup_tty_catch_up(sg_sup_tty *t);

/* Closes the master; the memory goes once the loop has closed its handles. */
void sg_sup_tty_free(sg_sup_tty *t);

#endif

/* echoline: a sans-I/O reader of a command line from a terminal's echo.
 *
 * sh (dash) has no hook before a command: its prompt ends with a B mark
 * carrying cmdline=echo (marks.h), the terminal is in canonical mode and
 * the kernel echoes what is typed. The text the terminal shows after that
 * mark, up to the first newline, is the line the shell reads:
 *
 *  - printable bytes (and tab, and UTF-8) are kept;
 *  - "\b" erases the last character (a whole UTF-8 sequence): the kernel's
 *    erase echo "\b \b" erases one (the space is written, then erased);
 *  - CR and other control bytes are dropped; escape sequences (CSI, OSC
 *    and the other string sequences, two-byte ESC X) are skipped;
 *  - at most SG_ECHOLINE_MAX bytes are kept: past that the line is
 *    truncated (erases take back the dropped bytes first);
 *  - the line is a command when, trimmed of blanks, it is not empty and
 *    does not end in "^C" (the kernel's echo of an interrupt: the shell
 *    drops the line).
 *
 * The bytes come from inside the sandbox: any byte sequence is valid
 * input, split anywhere across calls. */
#ifndef SG_ECHOLINE_H
#define SG_ECHOLINE_H

#include <stdbool.h>
#include <stddef.h>

#define SG_ECHOLINE_MAX 4096 /* bytes of a command line kept */

typedef enum sg_echoline_state {
    SG_ECHOLINE_IDLE = 0, /* not reading (no prompt, or the line was taken) */
    SG_ECHOLINE_READING,  /* after a prompt, before its newline */
    SG_ECHOLINE_LINE,     /* the newline came: a command (sg_echoline_text) */
    SG_ECHOLINE_NONE,     /* the newline came: blank or interrupted, no command */
} sg_echoline_state;

typedef struct sg_echoline {
    sg_echoline_state state;
    int esc;               /* escape-sequence state */
    size_t len;            /* bytes kept in buf */
    size_t dropped;        /* characters past SG_ECHOLINE_MAX */
    bool skip;             /* the character being read is dropped */
    char tail[2];          /* the last two bytes read (kept or dropped) */
    char buf[SG_ECHOLINE_MAX + 1];
} sg_echoline;

void sg_echoline_init(sg_echoline *e);
/* A prompt ended: the next line shown is read (any line being read is
 * dropped). */
void sg_echoline_start(sg_echoline *e);
/* Stops reading (a mark came before the newline): back to IDLE. */
void sg_echoline_stop(sg_echoline *e);
/* While READING: reads buf up to and including the line's newline and
 * returns how many bytes it took (the rest is what the command printed);
 * the state is then LINE or NONE, or still READING when no newline came.
 * Otherwise takes nothing and returns 0. */
size_t sg_echoline_feed(sg_echoline *e, const char *buf, size_t len);
/* In state LINE: the command line, trimmed, NUL-terminated; *truncated
 * when it was longer than SG_ECHOLINE_MAX. Then call sg_echoline_stop. */
const char *sg_echoline_text(sg_echoline *e, size_t *len, bool *truncated);

#endif

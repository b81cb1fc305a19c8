/* marks: a sans-I/O parser of the shell integration's OSC 133 marks
 * (src/sandbox/shellrc.h) in a terminal's output stream. The bytes come
 * from inside the sandbox: any byte sequence is valid input, split
 * anywhere across calls; a mark longer than SG_MARKS_OSC_MAX is not a mark
 * (its bytes are passed on as text). Nothing is lost: every input byte is
 * either text or part of exactly one mark.
 *
 *   ESC ] 133 ; A [; cwd=DIR]                 prompt
 *   ESC ] 133 ; B [; cmdline=echo]            prompt end (typing starts); cmdline=echo:
 *                                             the command line is the terminal's echo
 *                                             of what is typed next (sh: echoline.h)
 *   ESC ] 133 ; C [; cwd=DIR] [; cmd=TEXT]    command (TEXT: the rest, ';' included)
 *   ESC ] 133 ; D [; STATUS]                  command done
 * each ended by BEL or ESC \. Other OSC kinds and unknown letters are text. */
#ifndef SG_MARKS_H
#define SG_MARKS_H

#include <stdbool.h>
#include <stddef.h>

#define SG_MARKS_OSC_MAX 8192 /* bytes of one mark's body */

typedef enum sg_mark_kind {
    SG_MARK_TEXT = 0,
    SG_MARK_PROMPT,   /* A */
    SG_MARK_INPUT,    /* B */
    SG_MARK_COMMAND,  /* C */
    SG_MARK_DONE,     /* D */
} sg_mark_kind;

typedef struct sg_mark {
    sg_mark_kind kind;
    const char *text;   /* TEXT: the bytes (not NUL-terminated) */
    size_t text_len;
    const char *cwd;    /* A, C: NULL when absent; not NUL-terminated */
    size_t cwd_len;
    const char *cmd;    /* C */
    size_t cmd_len;
    int status;         /* D: 0..255, -1 when absent or not a number */
    bool echo_line;     /* B: cmdline=echo */
    const char *raw;    /* the bytes the piece took in the stream, as they came */
    size_t raw_len;     /* (TEXT: the text itself) */
} sg_mark;

/* Called for each piece, in stream order; the pointers live until it returns. */
typedef void (*sg_marks_fn)(void *ud, const sg_mark *m);

typedef struct sg_marks {
    int state;
    size_t held;
    char hold[SG_MARKS_OSC_MAX + 8];
} sg_marks;

void sg_marks_init(sg_marks *p);
void sg_marks_feed(sg_marks *p, const char *buf, size_t len, sg_marks_fn fn, void *ud);
/* The end of the stream: held bytes of an unfinished mark are text. */
void sg_marks_end(sg_marks *p, sg_marks_fn fn, void *ud);

#endif

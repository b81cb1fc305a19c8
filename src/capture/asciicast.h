/* asciicast: a shell session's terminal as an asciicast v3 file (the
 * format asciinema's player plays): a header line (size, TERM, start
 * time), then one line an event, [interval since the previous event, code,
 * data]: "o" output, "i" input (unless not recorded), "r" a resize
 * ("COLSxROWS"), "m" a marker (each command the shell's marks announce),
 * "x" the exit status. The supervisor writes it on the host from the
 * terminal's master, so it holds what the terminal really carried, marks or
 * no marks. Data is JSON text: invalid UTF-8 becomes U+FFFD (the player
 * wants text), a character split across two reads is kept whole (one still
 * unfinished at the exit is U+FFFD). The file is bounded (SG_CAST_MAX):
 * past it, one marker says so and the rest is not recorded. */
#ifndef SG_ASCIICAST_H
#define SG_ASCIICAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_CAST_MAX (64ull * 1024 * 1024)

typedef struct sg_cast {
    int fd;
    uint64_t last_ns;      /* the previous event's time (monotonic) */
    uint64_t bytes;        /* written so far */
    bool full;             /* SG_CAST_MAX reached */
    char hold[2][4];       /* an unfinished UTF-8 character per stream (o, i) */
    size_t held[2];
    /* The recording streamed to the ingest as written (contents.h); NULL:
     * not captured. Set after sg_cast_open; ended by sg_cast_close. */
    struct sg_contents_cast *stream;
} sg_cast;

/* Creates path (0600, not there before) and writes the header. */
int sg_cast_open(sg_cast *c, const char *path, unsigned cols, unsigned rows, const char *term,
                 const char *command, uint64_t now_ns, sg_err *err);
void sg_cast_output(sg_cast *c, uint64_t now_ns, const char *buf, size_t len);
void sg_cast_input(sg_cast *c, uint64_t now_ns, const char *buf, size_t len);
void sg_cast_resize(sg_cast *c, uint64_t now_ns, unsigned cols, unsigned rows);
void sg_cast_marker(sg_cast *c, uint64_t now_ns, const char *label, size_t len);
/* The exit event, then the file is closed. */
void sg_cast_exit(sg_cast *c, uint64_t now_ns, int status);
void sg_cast_close(sg_cast *c);

/* JSON string contents for buf (no quotes): escapes, U+FFFD for invalid
 * bytes; an incomplete character at the end is left out and its length
 * returned in *tail (when tail is NULL it is replaced too). out needs
 * 6 * len + 1 bytes. Returns the length written. */
size_t sg_cast_escape(char *out, const char *buf, size_t len, size_t *tail);

#endif

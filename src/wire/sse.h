/* sse: Server-Sent Events framing (the WHATWG HTML spec's "event stream"),
 * the one encoder and the one decoder, for both ends of the ingest's
 * pushed stream (GET /v1/stream: ingest/ingest_sse.c writes it,
 * `sandglass events --follow` in cli/cmd_events.c reads it) and for
 * fuzz/fuzz_sse.c.
 *
 * A frame is a block of "field: value" lines ended by a blank line:
 *   retry: MS        the client's reconnect delay
 *   : TEXT           a comment (a keep-alive, a note)
 *   id: ID           the event's id (a client resumes with Last-Event-ID)
 *   event: NAME      the event's type (none: "message")
 *   data: LINE       one line of the data; data holding line breaks takes
 *                    one data line per line
 * The encoder writes the fields in that order (only those given), the
 * decoder takes them in any order. Lines end with LF, CRLF or CR; a UTF-8
 * BOM opening the stream is skipped; a field's value loses one leading
 * space; a line without a colon is a field with an empty value; unknown
 * fields are ignored, and so is a retry that is not all digits and an id
 * holding a NUL (as the spec says).
 *
 * The decoder is sans-I/O: bytes are fed as they come, in any cuts, and
 * each complete frame comes back as an sg_sse_frame pointing into the
 * decoder. A line longer than line_max or a frame larger than frame_max
 * (its values together) is an error that names the bound; the decoder then
 * stays failed. Unlike a browser's EventSource, it hands out every frame
 * that held a known field (also comment-only and retry-only frames): the
 * caller decides which it acts on. */
#ifndef SG_WIRE_SSE_H
#define SG_WIRE_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

typedef struct sg_sse_frame {
    long long retry;       /* the retry field's value; < 0: none */
    const char *comment;   /* NULL: none; comment lines joined with '\n' */
    const char *id;        /* NULL: no id field */
    const char *event;     /* NULL: no event field (the type is "message") */
    const char *data;      /* NULL: no data field; else data_len bytes (+ a NUL) */
    size_t data_len;
} sg_sse_frame;

/* Appends f's frame (its lines, then the blank line) to b. -1 with errno
 * EINVAL for an id or event holding a line break (CR or LF), ENOMEM
 * without memory (b is then left as it was). The data's
 * and comment's line breaks (LF, CRLF or CR) start a new line of the
 * field: they decode as '\n'. */
int sg_sse_encode(sg_buf *b, const sg_sse_frame *f);

typedef struct sg_sse_decoder {
    size_t line_max, frame_max;
    sg_buf line;             /* the line being read */
    sg_buf id, event, comment, data;
    bool has_id, has_event, has_comment, has_data;
    long long retry;
    size_t frame_bytes;      /* the frame's values so far */
    bool cr;                 /* the last byte was a CR (an LF next is its CRLF) */
    bool started;            /* past the stream's first line (its BOM) */
    bool handed;             /* the last call handed out a frame: clear it first */
    bool failed;
    char why[160];
} sg_sse_decoder;

/* A decoder whose lines are at most line_max bytes and frames at most
 * frame_max bytes of values (both > 0). */
void sg_sse_decoder_init(sg_sse_decoder *d, size_t line_max, size_t frame_max);
/* Reads from buf (len bytes) up to the end of the next frame: 1 with the
 * frame in *out (valid until the next call or sg_sse_decoder_free), 0 when
 * all of buf was taken and no frame ended; *used: the bytes taken. -1
 * (EMSGSIZE) past a bound, naming it, and for every call after that; -1
 * (ENOMEM) without memory. */
int sg_sse_decode(sg_sse_decoder *d, const void *buf, size_t len, size_t *used, sg_sse_frame *out, sg_err *err);
void sg_sse_decoder_free(sg_sse_decoder *d);

#endif

/* framescan: the ingest's hot-path frame check, without building a JSON tree.
 *
 * sg_frame_scan gives the verdict sg_event_validate (event.h) gives for the
 * same bytes - same close code, same order of checks, the schema and policy
 * refusals with the same messages - in one pass over the bytes and with no
 * allocation, and hands out seq, kind, and where ts and the payload object
 * stand in the buffer. That is all the store needs; jansson's tree for every
 * frame was half of the ingest's CPU.
 *
 * Strict as jansson's json_loadb(JSON_REJECT_DUPLICATES): RFC 8259 grammar
 * for the whole frame, valid UTF-8 (no overlongs, no surrogates, nothing
 * above U+10FFFF), no raw control characters in strings, no \u0000, paired
 * surrogate escapes only, integers within int64, no real that overflows to
 * infinity, no duplicate key in any object, nothing but whitespace after
 * the frame, a top-level object or array.
 *
 * A few rare constructs are left to sg_event_validate itself (the fallback;
 * the view then owns the parsed tree): a frame over SG_FRAME_MAX (refused
 * before any parsing, -1009), a key written with a backslash
 * escape, kind/ts/sandbox_id values written with one, more than
 * SG_FRAMESCAN_OBJ_KEYS keys in one object or SG_FRAMESCAN_KEYS in all open
 * objects, nesting deeper than SG_FRAMESCAN_DEPTH, a real within a factor
 * ten of DBL_MAX, and a NUL byte outside a string (jansson 2.14 skips one
 * NUL right after a number or literal: the fallback keeps that verdict too).
 * Differential fuzzing (fuzz/fuzz_frame.c) checks the two agree. */
#ifndef SG_FRAMESCAN_H
#define SG_FRAMESCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_FRAMESCAN_DEPTH 64     /* nesting scanned inline (jansson allows 2048) */
#define SG_FRAMESCAN_OBJ_KEYS 32  /* keys of one object, compared pairwise */
#define SG_FRAMESCAN_KEYS 512     /* keys of all objects open at once */

/* Returned (negated) only when the fallback runs out of memory. */
#define SG_FRAMESCAN_CLOSE_INTERNAL 1011

typedef struct sg_frame_view {
    int64_t seq;
    int kind;                /* sg_event_kind */
    const char *ts;          /* ts_len bytes, unescaped; not NUL-terminated */
    size_t ts_len;
    const char *payload;     /* the payload object's JSON text, payload_len bytes */
    size_t payload_len;
    bool fallback;           /* sg_event_validate decided this frame */
    /* Owned, fallback only: the tree ts points into, and the dumped
     * payload when its bytes could not be found in the frame. */
    json_t *root;
    char *dump;
} sg_frame_view;

/* Checks one untrusted frame. expect_sandbox_id as for sg_event_validate.
 * Returns 0 and fills out (ts and payload borrow from buf, or from out's
 * own fields after a fallback), or the negated close code (-1007, -1008,
 * -1009; -1011 out of memory) with err saying what is wrong and, for a
 * JSON error, at which byte. Clear out with sg_frame_view_clear. */
int sg_frame_scan(const char *buf, size_t len, const char *expect_sandbox_id,
                  sg_frame_view *out, sg_err *err);

void sg_frame_view_clear(sg_frame_view *v);

#endif

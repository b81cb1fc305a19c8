/* libFuzzer target: Server-Sent Events framing (wire/sse.h), network bytes
 * `sandglass events --follow` reads from an ingest's GET /v1/stream.
 *
 * Invariants:
 *  - the decoder takes any bytes, fed whole or cut anywhere (the first
 *    byte picks the cut), and hands out the same frames either way;
 *  - a frame's fields are within the bounds (no line over LINE_MAX, no
 *    frame over FRAME_MAX), data_len is the data's length, and past a
 *    bound the error names it;
 *  - round trip: every decoded frame encodes, and decoding that gives the
 *    same frame back (a frame's values hold no line break but data's and
 *    comment's '\n', so encode(decode(x)) is a fixed point). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINE_MAX_ 256
#define FRAME_MAX 1024

static bool same_str(const char *a, const char *b)
{
    return (!a) == (!b) && (!a || strcmp(a, b) == 0);
}

static bool same(const sg_sse_frame *a, const sg_sse_frame *b)
{
    return a->retry == b->retry && same_str(a->comment, b->comment) && same_str(a->id, b->id) &&
           same_str(a->event, b->event) && (!a->data) == (!b->data) && a->data_len == b->data_len &&
           (!a->data || memcmp(a->data, b->data, a->data_len) == 0);
}

/* Frames of buf, fed in pieces of cut bytes, each encoded into out. -1
 * past a bound. */
static int decode_all(const char *buf, size_t len, size_t cut, sg_buf *out)
{
    sg_sse_decoder d;
    sg_sse_decoder_init(&d, LINE_MAX_, FRAME_MAX);
    int rc = 0;
    for (size_t at = 0; at < len && rc == 0;) {
        size_t n = len - at < cut ? len - at : cut;
        const char *p = buf + at;
        at += n;
        while (n > 0) {
            sg_sse_frame f;
            size_t used = 0;
            sg_err err = {0};
            int r = sg_sse_decode(&d, p, n, &used, &f, &err);
            if (r < 0) {
                if (err.code != EMSGSIZE || !strstr(err.msg, "SSE"))
                    abort();
                rc = -1;
                break;
            }
            if (used > n || (r == 0 && used != n) || (r == 1 && used == 0))
                abort();
            p += used;
            n -= used;
            if (r == 0)
                continue;
            if ((f.data && memchr(f.data, '\0', f.data_len) == NULL && strlen(f.data) != f.data_len) ||
                (!f.data && f.data_len) || f.data_len > FRAME_MAX || (f.id && strpbrk(f.id, "\r\n")) ||
                (f.event && strpbrk(f.event, "\r\n")))
                abort();
            if (sg_sse_encode(out, &f) < 0)
                abort();
            /* the frame encoded decodes to itself */
            sg_sse_decoder again;
            sg_sse_decoder_init(&again, (size_t)-1, (size_t)-1);
            sg_autobuf sg_buf one = {0};
            if (sg_sse_encode(&one, &f) < 0)
                abort();
            sg_sse_frame g;
            size_t u2 = 0;
            if (sg_sse_decode(&again, one.data, one.len, &u2, &g, &err) != 1 || u2 != one.len || !same(&f, &g))
                abort();
            sg_sse_decoder_free(&again);
        }
    }
    sg_sse_decoder_free(&d);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t cut = 1 + data[0] % 64;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    sg_autobuf sg_buf whole = {0}, pieces = {0};
    int a = decode_all(buf, len, len ? len : 1, &whole);
    int b = decode_all(buf, len, cut, &pieces);
    if (a != b || whole.len != pieces.len || (whole.len && memcmp(whole.data, pieces.data, whole.len) != 0))
        abort();
    return 0;
}

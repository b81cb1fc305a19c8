/* libFuzzer target: the attach replay's filter (src/supervisor/ttyreplay.c)
 * on a terminal's output, which the learner controls byte for byte.
 *
 * Invariants:
 *  - where the input is split does not matter: fed whole, in two pieces
 *    (cut where the first byte says) and a byte at a time, the output is
 *    the same bytes, from the start of a stream and from its middle;
 *  - the output holds none of the well-known queries (DSR, DA1/DA2,
 *    DECID, DECRQSS, XTGETTCAP, XTVERSION, the colour and clipboard OSCs,
 *    an APC): every ESC in it starts a sequence a terminal reads as such;
 *  - the output filtered again is itself (it is text and whole, harmless
 *    sequences only);
 *  - it is bounded: at most the input and an ST for each ESC or C1 byte. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/ttyreplay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct out {
    char *buf;
    size_t len, cap;
} out;

static void collect(void *ud, const char *b, size_t n)
{
    out *o = ud;
    if (!n)
        abort(); /* empty pieces are never given */
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2 + 64;
        o->buf = realloc(o->buf, o->cap);
        if (!o->buf)
            abort();
    }
    memcpy(o->buf + o->len, b, n);
    o->len += n;
}

static out run(const uint8_t *data, size_t size, bool mid, size_t cut, size_t step)
{
    static sg_ttyreplay f;
    out o = {0};
    sg_ttyreplay_init(&f, mid, collect, &o);
    for (size_t off = 0; off < size;) {
        size_t n = off < cut ? cut - off : size - off;
        if (step && n > step)
            n = step;
        sg_ttyreplay_feed(&f, (const char *)data + off, n);
        off += n;
    }
    sg_ttyreplay_end(&f);
    return o;
}

static bool same(const out *a, const out *b)
{
    return a->len == b->len && (!a->len || memcmp(a->buf, b->buf, a->len) == 0);
}

static const char *const never[] = {
    "\x1b[6n", "\x1b[5n", "\x1b[?6n", "\x1b[c", "\x1b[0c", "\x1b[>c", "\x1b[>0c", "\x1b[=c", "\x1bZ",
    "\x1bP$q", "\x1bP+q", "\x1b[>q", "\x1b[?u", "\x1b[14t", "\x1b[18t", "\x1b]10;?", "\x1b]11;?",
    "\x1b]12;?", "\x1b]52;", "\x1b_", "\x1b^", "\x1bX",
};

static void check_clean(const out *o)
{
    for (size_t i = 0; i < sizeof never / sizeof *never; i++)
        if (o->len && memmem(o->buf, o->len, never[i], strlen(never[i])))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t cut = size ? data[0] % (size + 1) : 0;
    size_t escs = 0;
    for (size_t i = 0; i < size; i++)
        escs += data[i] == 0x1b || (data[i] >= 0x80 && data[i] <= 0x9f);
    for (int mid = 0; mid < 2; mid++) {
        out whole = run(data, size, mid, size, 0);
        out split = run(data, size, mid, cut, 0);
        out bytes = run(data, size, mid, 0, 1);
        if (!same(&whole, &split) || !same(&whole, &bytes))
            abort();
        if (whole.len > size + 2 * escs)
            abort();
        check_clean(&whole);
        if (!mid) {
            out again = run((const uint8_t *)whole.buf, whole.len, false, whole.len, 0);
            if (!same(&whole, &again))
                abort();
            free(again.buf);
        }
        free(whole.buf);
        free(split.buf);
        free(bytes.buf);
    }
    return 0;
}

/* libFuzzer target: the OSC 133 mark parser (src/capture/marks.c) on a
 * terminal's output, which the learner controls byte for byte.
 *
 * Invariants:
 *  - nothing lost, nothing made up: the pieces' raw bytes, joined, are
 *    the input exactly;
 *  - where the input is split does not matter: fed whole and fed in two
 *    pieces (cut where the first byte says), the marks are the same and
 *    the text is the same bytes;
 *  - a mark's fields lie inside the parser's buffer and are bounded;
 *  - a D mark's status is -1 or 0..255. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capture/marks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct log {
    char *buf;          /* the marks, serialized */
    size_t len, cap;
    char *text;         /* the text pieces, joined */
    size_t text_len, text_cap;
    char *raws;         /* every piece's raw bytes, joined */
    size_t raws_len, raws_cap;
    size_t raw;         /* every piece's raw length */
} log;

static void append(char **buf, size_t *len, size_t *cap, const void *b, size_t n)
{
    if (*len + n > *cap) {
        *cap = (*len + n) * 2 + 64;
        *buf = realloc(*buf, *cap);
        if (!*buf)
            abort();
    }
    memcpy(*buf + *len, b, n);
    *len += n;
}

static void add(log *l, const void *b, size_t n)
{
    append(&l->buf, &l->len, &l->cap, b, n);
}

static void on_mark(void *ud, const sg_mark *m)
{
    log *l = ud;
    l->raw += m->raw_len;
    if (!m->raw && m->raw_len)
        abort();
    append(&l->raws, &l->raws_len, &l->raws_cap, m->raw, m->raw_len);
    if (m->kind == SG_MARK_TEXT) {
        if (!m->text || !m->text_len || m->raw_len != m->text_len)
            abort(); /* empty text pieces are never given */
        append(&l->text, &l->text_len, &l->text_cap, m->text, m->text_len);
        return;
    }
    unsigned char k = (unsigned char)m->kind;
    add(l, &k, 1);
    if (m->raw_len < 8 || m->raw_len > SG_MARKS_OSC_MAX + 8)
        abort();
    if (m->cwd_len > SG_MARKS_OSC_MAX || m->cmd_len > SG_MARKS_OSC_MAX)
        abort();
    if (m->status < -1 || m->status > 255 || (m->kind != SG_MARK_DONE && m->status != -1))
        abort();
    if (m->cwd)
        add(l, m->cwd, m->cwd_len);
    add(l, "|", 1);
    if (m->cmd)
        add(l, m->cmd, m->cmd_len);
    add(l, &m->status, sizeof m->status);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sg_marks p;
    log whole = {0}, split = {0};
    sg_marks_init(&p);
    sg_marks_feed(&p, (const char *)data, size, on_mark, &whole);
    sg_marks_end(&p, on_mark, &whole);
    size_t cut = size ? data[0] % (size + 1) : 0;
    sg_marks_init(&p);
    sg_marks_feed(&p, (const char *)data, cut, on_mark, &split);
    sg_marks_feed(&p, (const char *)data + cut, size - cut, on_mark, &split);
    sg_marks_end(&p, on_mark, &split);
    if (whole.raw != size || split.raw != size)
        abort();
    if (size && (memcmp(whole.raws, data, size) || memcmp(split.raws, data, size)))
        abort();
    free(whole.raws);
    free(split.raws);
    if (whole.text_len != split.text_len || (whole.text_len && memcmp(whole.text, split.text, whole.text_len)))
        abort();
    if (whole.len != split.len || (whole.len && memcmp(whole.buf, split.buf, whole.len)))
        abort();
    free(whole.buf);
    free(split.buf);
    free(whole.text);
    free(split.text);
    return 0;
}

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
 *  - a D mark's status is -1 or 0..255; only B has cmdline=echo;
 *  - echoline (src/capture/echoline.c), fed the text after each B with
 *    cmdline=echo as the supervisor feeds it: it takes a prefix ending at
 *    the first newline, or all; a line is trimmed, not empty, bounded, with
 *    no control byte but tab; the lines are the same however the input is
 *    split; fed the input on its own from the start, whole and a byte at a
 *    time, it finds the same lines. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capture/echoline.h"
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
    sg_echoline echo;
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

/* Feeds echoline from b as sv_tty.c does; each line read goes to the log
 * ('L' and the text, or 'N'). Returns the bytes it took. */
static size_t echo_feed(sg_echoline *e, const char *b, size_t n, char **buf, size_t *len, size_t *cap)
{
    size_t used = sg_echoline_feed(e, b, n);
    if (used > n || (e->state == SG_ECHOLINE_READING && used != n))
        abort();
    if (e->state == SG_ECHOLINE_READING)
        return used;
    if (!used || b[used - 1] != '\n' || memchr(b, '\n', used - 1))
        abort();
    size_t tl = 0;
    bool cut = false;
    const char *t = sg_echoline_text(e, &tl, &cut);
    if (e->state == SG_ECHOLINE_LINE) {
        if (!tl || tl > SG_ECHOLINE_MAX || strlen(t) != tl || t[0] == ' ' || t[tl - 1] == ' ')
            abort();
        for (size_t i = 0; i < tl; i++)
            if (((unsigned char)t[i] < 0x20 && t[i] != '\t') || t[i] == 0x7f)
                abort();
        append(buf, len, cap, "L", 1);
        append(buf, len, cap, t, tl + 1);
    } else if (e->state == SG_ECHOLINE_NONE) {
        if (tl)
            abort();
        append(buf, len, cap, "N", 1);
    } else {
        abort();
    }
    sg_echoline_stop(e);
    return used;
}

static void on_mark(void *ud, const sg_mark *m)
{
    log *l = ud;
    l->raw += m->raw_len;
    if (!m->raw && m->raw_len)
        abort();
    append(&l->raws, &l->raws_len, &l->raws_cap, m->raw, m->raw_len);
    if (m->kind == SG_MARK_TEXT) {
        if (!m->text || !m->text_len || m->raw_len != m->text_len || m->echo_line)
            abort(); /* empty text pieces are never given */
        append(&l->text, &l->text_len, &l->text_cap, m->text, m->text_len);
        if (l->echo.state == SG_ECHOLINE_READING)
            echo_feed(&l->echo, m->text, m->text_len, &l->buf, &l->len, &l->cap);
        return;
    }
    if (m->echo_line && m->kind != SG_MARK_INPUT)
        abort();
    sg_echoline_stop(&l->echo);
    if (m->echo_line)
        sg_echoline_start(&l->echo);
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

/* echoline on its own: the lines in data, read from its start (a new
 * line after each), fed in pieces of step bytes. */
static void echo_alone(const uint8_t *data, size_t size, size_t step, char **buf, size_t *len, size_t *cap)
{
    static sg_echoline e;
    sg_echoline_start(&e);
    for (size_t off = 0; off < size;) {
        size_t n = size - off < step ? size - off : step;
        size_t used = echo_feed(&e, (const char *)data + off, n, buf, len, cap);
        if (e.state == SG_ECHOLINE_IDLE)
            sg_echoline_start(&e);
        off += used;
    }
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
    char *a = NULL, *b = NULL;
    size_t al = 0, ac = 0, bl = 0, bc = 0;
    echo_alone(data, size, size ? size : 1, &a, &al, &ac);
    echo_alone(data, size, 1, &b, &bl, &bc);
    if (al != bl || (al && memcmp(a, b, al)))
        abort();
    free(a);
    free(b);
    free(whole.text);
    free(split.text);
    return 0;
}

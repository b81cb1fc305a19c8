/* marks: the OSC 133 parser. See marks.h. */
#include "capture/marks.h"

#include <stdbool.h>
#include <string.h>

enum { ST_TEXT, ST_PREFIX, ST_BODY, ST_BODY_ESC };

static const char prefix[] = "\x1b]133;";
#define PREFIX_LEN (sizeof prefix - 1)

void sg_marks_init(sg_marks *p)
{
    memset(p, 0, sizeof *p);
}

static void emit_text(const char *b, size_t n, sg_marks_fn fn, void *ud)
{
    if (!n)
        return;
    sg_mark m = {.kind = SG_MARK_TEXT, .text = b, .text_len = n, .status = -1, .raw = b, .raw_len = n};
    fn(ud, &m);
}

static void give_up(sg_marks *p, sg_marks_fn fn, void *ud)
{
    emit_text(p->hold, p->held, fn, ud);
    p->held = 0;
    p->state = ST_TEXT;
}

/* "cwd=..." up to the next ';'; "cmd=" takes the rest; B's "cmdline=echo". */
static void parse_params(const char *s, const char *end, sg_mark *m)
{
    bool first = true;
    while (s < end) {
        if (end - s >= 4 && memcmp(s, "cmd=", 4) == 0) {
            m->cmd = s + 4;
            m->cmd_len = (size_t)(end - s - 4);
            return;
        }
        const char *semi = memchr(s, ';', (size_t)(end - s));
        const char *pe = semi ? semi : end;
        if (m->kind == SG_MARK_INPUT && pe - s == 12 && memcmp(s, "cmdline=echo", 12) == 0) {
            m->echo_line = true;
        } else if (pe - s >= 4 && memcmp(s, "cwd=", 4) == 0) {
            m->cwd = s + 4;
            m->cwd_len = (size_t)(pe - s - 4);
        } else if (first && m->kind == SG_MARK_DONE && pe > s && pe - s <= 3) {
            int v = 0;
            const char *q = s;
            while (q < pe && *q >= '0' && *q <= '9')
                v = v * 10 + (*q++ - '0');
            if (q == pe && v <= 255)
                m->status = v;
        }
        first = false;
        s = semi ? semi + 1 : end;
    }
}

/* A whole mark's body is in hold after the prefix: one mark, or text. */
static void finish(sg_marks *p, size_t body_end, size_t total, sg_marks_fn fn, void *ud)
{
    const char *body = p->hold + PREFIX_LEN, *end = p->hold + body_end;
    sg_mark m = {.status = -1, .raw = p->hold, .raw_len = total};
    if (body < end) {
        switch (*body) {
        case 'A': m.kind = SG_MARK_PROMPT; break;
        case 'B': m.kind = SG_MARK_INPUT; break;
        case 'C': m.kind = SG_MARK_COMMAND; break;
        case 'D': m.kind = SG_MARK_DONE; break;
        default: break;
        }
    }
    bool shaped = m.kind != SG_MARK_TEXT && (body + 1 == end || body[1] == ';');
    if (!shaped) {
        emit_text(p->hold, total, fn, ud);
    } else {
        parse_params(body + 1 < end ? body + 2 : end, end, &m);
        fn(ud, &m);
    }
    p->held = 0;
    p->state = ST_TEXT;
}

void sg_marks_feed(sg_marks *p, const char *buf, size_t len, sg_marks_fn fn, void *ud)
{
    size_t text_start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        switch (p->state) {
        case ST_TEXT:
            if (c != '\x1b')
                continue;
            emit_text(buf + text_start, i - text_start, fn, ud);
            p->hold[0] = c;
            p->held = 1;
            p->state = ST_PREFIX;
            break;
        case ST_PREFIX:
            if (c == prefix[p->held]) {
                p->hold[p->held++] = c;
                if (p->held == PREFIX_LEN)
                    p->state = ST_BODY;
                break;
            }
            give_up(p, fn, ud);
            i--; /* this byte again, as text (or a new ESC) */
            break;
        case ST_BODY:
            if (c == '\x07') {
                p->hold[p->held] = c;
                finish(p, p->held, p->held + 1, fn, ud);
            } else if (c == '\x1b') {
                p->hold[p->held++] = c;
                p->state = ST_BODY_ESC;
            } else if (p->held - PREFIX_LEN >= SG_MARKS_OSC_MAX) {
                give_up(p, fn, ud);
                i--;
            } else {
                p->hold[p->held++] = c;
            }
            break;
        case ST_BODY_ESC:
            if (c == '\\') {
                p->hold[p->held] = c;
                finish(p, p->held - 1, p->held + 1, fn, ud);
            } else { /* an ESC that does not end it: not a mark, and maybe the next one's start */
                p->held--;
                give_up(p, fn, ud);
                p->hold[0] = '\x1b';
                p->held = 1;
                p->state = ST_PREFIX;
                i--; /* this byte again, after that ESC */
            }
            break;
        }
        if (p->state == ST_TEXT)
            text_start = i + 1;
    }
    if (p->state == ST_TEXT)
        emit_text(buf + text_start, len - text_start, fn, ud);
}

void sg_marks_end(sg_marks *p, sg_marks_fn fn, void *ud)
{
    if (p->state != ST_TEXT)
        give_up(p, fn, ud);
}

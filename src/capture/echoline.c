/* echoline: a command line from a terminal's echo. See echoline.h. */
#include "capture/echoline.h"

#include <string.h>

enum { ESC_NONE, ESC_START, ESC_CSI, ESC_STRING, ESC_STRING_ESC };

void sg_echoline_init(sg_echoline *e)
{
    memset(e, 0, sizeof *e);
}

void sg_echoline_start(sg_echoline *e)
{
    sg_echoline_init(e);
    e->state = SG_ECHOLINE_READING;
}

void sg_echoline_stop(sg_echoline *e)
{
    sg_echoline_init(e);
}

static void erase(sg_echoline *e)
{
    e->tail[0] = e->tail[1] = 0;
    if (e->dropped) {
        e->dropped--;
        return;
    }
    /* back over UTF-8 continuation bytes to the character's first byte */
    while (e->len > 0) {
        unsigned char c = (unsigned char)e->buf[--e->len];
        if ((c & 0xC0) != 0x80)
            break;
    }
}

static size_t seq_len(unsigned char c)
{
    return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
}

/* Past the bound whole characters are dropped, never half of one. */
static void keep(sg_echoline *e, unsigned char c)
{
    e->tail[0] = e->tail[1];
    e->tail[1] = (char)c;
    if ((c & 0xC0) == 0x80) { /* continues the character before */
        if (!e->skip && e->len < SG_ECHOLINE_MAX)
            e->buf[e->len++] = (char)c;
        return;
    }
    e->skip = e->dropped || e->len + seq_len(c) > SG_ECHOLINE_MAX;
    if (e->skip)
        e->dropped++;
    else
        e->buf[e->len++] = (char)c;
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The newline: trims the line's end and says whether it is a command. */
static void line_end(sg_echoline *e)
{
    while (e->len > 0 && blank(e->buf[e->len - 1]))
        e->len--;
    e->buf[e->len] = '\0';
    size_t lead = strspn(e->buf, " \t");
    /* past the bound the "^C" was dropped: the last bytes seen say it */
    bool interrupted = e->dropped ? e->tail[0] == '^' && e->tail[1] == 'C'
                                  : e->len >= 2 && e->buf[e->len - 2] == '^' && e->buf[e->len - 1] == 'C';
    e->state = e->len > lead && !interrupted ? SG_ECHOLINE_LINE : SG_ECHOLINE_NONE;
    e->esc = ESC_NONE;
}

/* One byte inside an escape sequence: consumed. */
static void in_escape(sg_echoline *e, unsigned char c)
{
    switch (e->esc) {
    case ESC_START:
        if (c == '[')
            e->esc = ESC_CSI;
        else if (c == ']' || c == 'P' || c == '_' || c == '^' || c == 'X')
            e->esc = ESC_STRING;
        else if (c < 0x20 || c > 0x2f) /* intermediates (ESC ( B) continue it */
            e->esc = ESC_NONE;
        break;
    case ESC_CSI:
        if (c >= 0x40 && c <= 0x7e)
            e->esc = ESC_NONE;
        break;
    case ESC_STRING:
        if (c == 0x07)
            e->esc = ESC_NONE;
        else if (c == 0x1b)
            e->esc = ESC_STRING_ESC;
        break;
    case ESC_STRING_ESC: /* ST ends it; another ESC X starts a new sequence */
        e->esc = ESC_START;
        if (c == '\\')
            e->esc = ESC_NONE;
        else
            in_escape(e, c);
        break;
    }
}

size_t sg_echoline_feed(sg_echoline *e, const char *buf, size_t len)
{
    if (e->state != SG_ECHOLINE_READING)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n') {
            line_end(e);
            return i + 1;
        }
        if (e->esc != ESC_NONE)
            in_escape(e, c);
        else if (c == 0x1b)
            e->esc = ESC_START;
        else if (c == '\b')
            erase(e);
        else if (c >= 0x20 ? c != 0x7f : c == '\t')
            keep(e, c);
        /* CR and the other control bytes move nothing we keep */
    }
    return len;
}

const char *sg_echoline_text(sg_echoline *e, size_t *len, bool *truncated)
{
    if (e->state != SG_ECHOLINE_LINE) {
        *len = 0;
        *truncated = false;
        return "";
    }
    size_t lead = strspn(e->buf, " \t");
    *len = e->len - lead;
    *truncated = e->dropped > 0;
    return e->buf + lead;
}

/* asciicast: a shell session as an asciicast v3 file. See asciicast.h. */
#include "capture/asciicast.h"
#include "capture/contents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

/* The length of the UTF-8 character starting at s (n bytes available):
 * > 0 a valid one, 0 incomplete (valid so far), -1 invalid. */
static int utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    int want;
    uint32_t min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        want = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        want = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        want = 4;
        min = 0x10000;
    } else {
        return -1;
    }
    uint32_t cp = c & (0x3f >> (want - 1));
    for (int i = 1; i < want; i++) {
        if ((size_t)i >= n)
            return 0;
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
        /* reject overlongs, surrogates and past U+10FFFF as soon as known */
        if (i == 1 && ((want == 3 && c == 0xe0 && s[1] < 0xa0) || (want == 3 && c == 0xed && s[1] > 0x9f) ||
                       (want == 4 && c == 0xf0 && s[1] < 0x90) || (want == 4 && c == 0xf4 && s[1] > 0x8f)))
            return -1;
    }
    return cp < min ? -1 : want;
}

size_t sg_cast_escape(char *out, const char *buf, size_t len, size_t *tail)
{
    const unsigned char *s = (const unsigned char *)buf;
    size_t o = 0, i = 0;
    if (tail)
        *tail = 0;
    while (i < len) {
        unsigned char c = s[i];
        int l = utf8_len(s + i, len - i);
        if (l == 0 && tail) {
            *tail = len - i;
            break;
        }
        if (l <= 0) {
            memcpy(out + o, "\\ufffd", 6);
            o += 6;
            i++;
            continue;
        }
        if (l > 1) {
            memcpy(out + o, s + i, (size_t)l);
            o += (size_t)l;
        } else if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c == '\n') {
            memcpy(out + o, "\\n", 2);
            o += 2;
        } else if (c == '\r') {
            memcpy(out + o, "\\r", 2);
            o += 2;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)sprintf(out + o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
        i += (size_t)l;
    }
    out[o] = '\0';
    return o;
}

static void put(sg_cast *c, const char *line, size_t n)
{
    if (c->fd < 0 || c->full)
        return;
    if (c->bytes + n + 128 > SG_CAST_MAX) {
        static const char cut[] = "[0.0, \"m\", \"sandglass: the recording reached its size limit here\"]\n";
        c->full = true;
        (void)sg_write_all(c->fd, cut, sizeof cut - 1);
        return;
    }
    if (sg_write_all(c->fd, line, n) < 0) {
        c->full = true; /* a full disk: stop, do not retry each event */
        return;
    }
    c->bytes += n;
    sg_contents_cast_pump(c->stream, false);
}

/* One event line: [interval, "code", "data"]. */
static void event(sg_cast *c, uint64_t now_ns, char code, const char *data, size_t len, int stream)
{
    if (c->fd < 0 || c->full)
        return;
    char *joined = NULL;
    if (stream >= 0 && c->held[stream]) { /* the rest of a character split across reads */
        joined = malloc(c->held[stream] + len);
        if (!joined)
            return;
        memcpy(joined, c->hold[stream], c->held[stream]);
        memcpy(joined + c->held[stream], data, len);
        len += c->held[stream];
        data = joined;
        c->held[stream] = 0;
    }
    /* The text goes after room for the "[interval, "code", " prefix
     * (< 40 bytes), written once we know there is an event at all; then
     * "]\n (or the escape's NUL). */
    char *line = malloc(64 + len * 6 + 4);
    if (!line) {
        free(joined);
        return;
    }
    size_t tail = 0;
    size_t e = sg_cast_escape(line + 64, data, len, stream >= 0 ? &tail : NULL);
    if (tail) {
        memcpy(c->hold[stream], data + len - tail, tail);
        c->held[stream] = tail;
    }
    /* A stream's bytes all held back make no event; its time is not
     * spent either (intervals are since the previous event written). */
    if (e || stream < 0) {
        char pre[64];
        double dt = now_ns > c->last_ns ? (double)(now_ns - c->last_ns) / 1e9 : 0.0;
        c->last_ns = now_ns > c->last_ns ? now_ns : c->last_ns;
        int n = snprintf(pre, sizeof pre, "[%.6f, \"%c\", \"", dt, code);
        memcpy(line + 64 - n, pre, (size_t)n);
        memcpy(line + 64 + e, "\"]\n", 3);
        put(c, line + 64 - n, (size_t)n + e + 3);
    }
    free(line);
    free(joined);
}

int sg_cast_open(sg_cast *c, const char *path, unsigned cols, unsigned rows, const char *term,
                 const char *command, uint64_t now_ns, sg_err *err)
{
    memset(c, 0, sizeof *c);
    c->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (c->fd < 0)
        return sg_err_sys(err, "cannot create %s", path);
    c->last_ns = now_ns;
    size_t tl = term ? strlen(term) : 0, cl = command ? strlen(command) : 0;
    char *t = malloc(tl * 6 + 1), *cmd = malloc(cl * 6 + 1);
    char *hdr = t && cmd ? malloc(tl * 6 + cl * 6 + 256) : NULL;
    if (!hdr) {
        free(t);
        free(cmd);
        close(c->fd);
        c->fd = -1;
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    sg_cast_escape(t, term ? term : "", tl, NULL);
    sg_cast_escape(cmd, command ? command : "", cl, NULL);
    int n = sprintf(hdr, "{\"version\": 3, \"term\": {\"cols\": %u, \"rows\": %u, \"type\": \"%s\"}, "
                    "\"timestamp\": %lld, \"command\": \"%s\"}\n", cols, rows, t, (long long)time(NULL), cmd);
    put(c, hdr, (size_t)n);
    free(hdr);
    free(t);
    free(cmd);
    return 0;
}

void sg_cast_output(sg_cast *c, uint64_t now_ns, const char *buf, size_t len)
{
    event(c, now_ns, 'o', buf, len, 0);
}

void sg_cast_input(sg_cast *c, uint64_t now_ns, const char *buf, size_t len)
{
    event(c, now_ns, 'i', buf, len, 1);
}

void sg_cast_resize(sg_cast *c, uint64_t now_ns, unsigned cols, unsigned rows)
{
    char s[32];
    int n = snprintf(s, sizeof s, "%ux%u", cols, rows);
    event(c, now_ns, 'r', s, (size_t)n, -1);
}

void sg_cast_marker(sg_cast *c, uint64_t now_ns, const char *label, size_t len)
{
    event(c, now_ns, 'm', label, len, -1);
}

void sg_cast_exit(sg_cast *c, uint64_t now_ns, int status)
{
    /* A character still unfinished at the end never will be: its bytes
     * are invalid, shown as U+FFFD like any other, not dropped. */
    static const char codes[2] = {'o', 'i'};
    for (int k = 0; k < 2; k++) {
        char b[sizeof c->hold[k]];
        size_t n = c->held[k];
        memcpy(b, c->hold[k], n);
        c->held[k] = 0;
        if (n)
            event(c, now_ns, codes[k], b, n, -1);
    }
    char s[16];
    int n = snprintf(s, sizeof s, "%d", status);
    event(c, now_ns, 'x', s, (size_t)n, -1);
    sg_cast_close(c);
}

void sg_cast_close(sg_cast *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    sg_contents_cast_end(c->stream);
    c->stream = NULL;
}

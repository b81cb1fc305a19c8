/* sse: Server-Sent Events framing (sse.h). */
#include "wire/sse.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* "name: line\n" for each line of v (n bytes; LF, CRLF or CR end a line). */
static int put_lines(sg_buf *b, const char *name, const char *v, size_t n)
{
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < n && v[j] != '\n' && v[j] != '\r')
            j++;
        if (sg_buf_puts(b, name) < 0 || sg_buf_append(b, v + i, j - i) < 0 || sg_buf_append(b, "\n", 1) < 0)
            return -1;
        if (j >= n)
            return 0;
        i = j + 1 + (v[j] == '\r' && j + 1 < n && v[j + 1] == '\n');
    }
}

int sg_sse_encode(sg_buf *b, const sg_sse_frame *f)
{
    if ((f->id && f->id[strcspn(f->id, "\r\n")]) || (f->event && f->event[strcspn(f->event, "\r\n")])) {
        errno = EINVAL;
        return -1;
    }
    size_t was = b->len;
    int rc = 0;
    if (f->retry >= 0)
        rc = sg_buf_printf(b, "retry: %lld\n", f->retry);
    if (rc == 0 && f->comment)
        rc = put_lines(b, ": ", f->comment, strlen(f->comment));
    if (rc == 0 && f->id)
        rc = put_lines(b, "id: ", f->id, strlen(f->id));
    if (rc == 0 && f->event)
        rc = put_lines(b, "event: ", f->event, strlen(f->event));
    if (rc == 0 && f->data)
        rc = put_lines(b, "data: ", f->data, f->data_len);
    if (rc == 0)
        rc = sg_buf_append(b, "\n", 1);
    if (rc < 0 && b->data) {
        b->len = was;
        b->data[was] = '\0';
    }
    return rc;
}

void sg_sse_decoder_init(sg_sse_decoder *d, size_t line_max, size_t frame_max)
{
    memset(d, 0, sizeof *d);
    d->line_max = line_max;
    d->frame_max = frame_max;
    d->retry = -1;
}

void sg_sse_decoder_free(sg_sse_decoder *d)
{
    sg_buf *bufs[] = {&d->line, &d->id, &d->event, &d->comment, &d->data};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        sg_buf_free(bufs[i]);
}

static void frame_clear(sg_sse_decoder *d)
{
    sg_buf_reset(&d->id);
    sg_buf_reset(&d->event);
    sg_buf_reset(&d->comment);
    sg_buf_reset(&d->data);
    d->has_id = d->has_event = d->has_comment = d->has_data = false;
    d->retry = -1;
    d->frame_bytes = 0;
}

/* Past a bound: what (a line, a frame) names it. */
static int fail(sg_sse_decoder *d, sg_err *err, const char *what, size_t bound)
{
    d->failed = true;
    snprintf(d->why, sizeof d->why, "an SSE %s is over %zu bytes (the bound of one %s)", what, bound, what);
    return sg_err_set(err, EMSGSIZE, "%s", d->why);
}

/* value (n bytes) into dst: appended after a '\n' (join) or in place of it. */
static int set_value(sg_buf *dst, bool *has, bool join, const char *v, size_t n)
{
    if (!join || !*has)
        sg_buf_reset(dst);
    else if (sg_buf_append(dst, "\n", 1) < 0)
        return -1;
    *has = true;
    return sg_buf_append(dst, v, n) < 0 ? -1 : 0;
}

/* "retry" and its value, all digits (else ignored, as the spec says). */
static void set_retry(sg_sse_decoder *d, const char *v, size_t n)
{
    long long ms = 0;
    if (n == 0 || n > 18)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return;
        ms = ms * 10 + (v[i] - '0');
    }
    d->retry = ms;
}

/* The line just read: 1 when it ended a frame that held something, 0 when
 * not, -1 out of memory or past frame_max. */
static int take_line(sg_sse_decoder *d, sg_err *err)
{
    const char *l = d->line.data ? d->line.data : "";
    size_t n = d->line.len;
    if (!d->started) {
        d->started = true;
        if (n >= 3 && memcmp(l, "\xEF\xBB\xBF", 3) == 0)
            l += 3, n -= 3;
    }
    if (n == 0) {
        if (d->has_id || d->has_event || d->has_comment || d->has_data || d->retry >= 0)
            return 1;
        frame_clear(d); /* a blank line ending nothing (or only unknown fields) */
        return 0;
    }
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = (size_t)(l + n - v);
    if (vl > 0 && v[0] == ' ')
        v++, vl--;
    d->frame_bytes += vl + 1;
    if (d->frame_bytes > d->frame_max)
        return fail(d, err, "frame", d->frame_max);
    int rc = 0;
    if (fl == 0)
        rc = set_value(&d->comment, &d->has_comment, true, v, vl);
    else if (fl == 4 && !memcmp(l, "data", 4))
        rc = set_value(&d->data, &d->has_data, true, v, vl);
    else if (fl == 5 && !memcmp(l, "event", 5))
        rc = set_value(&d->event, &d->has_event, false, v, vl);
    else if (fl == 2 && !memcmp(l, "id", 2) && !memchr(v, '\0', vl))
        rc = set_value(&d->id, &d->has_id, false, v, vl);
    else if (fl == 5 && !memcmp(l, "retry", 5))
        set_retry(d, v, vl);
    if (rc < 0)
        return sg_err_set(err, ENOMEM, "out of memory");
    return 0;
}

static void frame_out(sg_sse_decoder *d, sg_sse_frame *out)
{
    *out = (sg_sse_frame){
        .retry = d->retry,
        .comment = d->has_comment ? (d->comment.data ? d->comment.data : "") : NULL,
        .id = d->has_id ? (d->id.data ? d->id.data : "") : NULL,
        .event = d->has_event ? (d->event.data ? d->event.data : "") : NULL,
        .data = d->has_data ? (d->data.data ? d->data.data : "") : NULL,
        .data_len = d->has_data ? d->data.len : 0,
    };
}

int sg_sse_decode(sg_sse_decoder *d, const void *buf, size_t len, size_t *used, sg_sse_frame *out, sg_err *err)
{
    const char *p = buf;
    size_t i = 0;
    *used = 0;
    if (d->failed)
        return sg_err_set(err, EMSGSIZE, "%s", d->why);
    if (d->handed) {
        d->handed = false;
        frame_clear(d);
    }
    while (i < len) {
        if (d->cr) {
            d->cr = false;
            if (p[i] == '\n') {
                i++;
                continue;
            }
        }
        size_t j = i;
        while (j < len && p[j] != '\n' && p[j] != '\r')
            j++;
        if (d->line.len + (j - i) > d->line_max)
            return fail(d, err, "line", d->line_max);
        if (sg_buf_append(&d->line, p + i, j - i) < 0)
            return sg_err_set(err, ENOMEM, "out of memory");
        if (j == len)
            break;
        d->cr = p[j] == '\r';
        i = j + 1;
        int r = take_line(d, err);
        sg_buf_reset(&d->line);
        if (r < 0)
            return r;
        if (r > 0) {
            *used = i;
            d->handed = true;
            frame_out(d, out);
            return 1;
        }
    }
    *used = len;
    return 0;
}

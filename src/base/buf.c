/* buf: growable buffers (see buf.h). */
#include "base/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* The new capacity (in items) for at least need: doubling from start, or
 * need itself when doubling would pass the limit. 0 when need cannot be held
 * at all: no object is larger than PTRDIFF_MAX bytes, and asking the
 * allocator for more is refused here (a sanitizer's allocator would abort). */
static size_t grown(size_t cap, size_t need, size_t start, size_t elem)
{
    const size_t max = (size_t)PTRDIFF_MAX / elem;
    if (need > max)
        return 0;
    size_t c = cap ? cap : start;
    while (c < need)
        c = c > max / 2 ? need : c * 2;
    return c;
}

int sg_buf_reserve(sg_buf *b, size_t more)
{
    if (more > SIZE_MAX - 1 - b->len) {
        errno = ENOMEM;
        return -1;
    }
    size_t need = b->len + more + 1;
    if (need <= b->cap)
        return 0;
    size_t c = grown(b->cap, need, 256, 1);
    char *p = c ? realloc(b->data, c) : NULL;
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    if (!b->data)
        p[0] = '\0';
    b->data = p;
    b->cap = c;
    return 0;
}

int sg_buf_append(sg_buf *b, const void *p, size_t n)
{
    if (sg_buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int sg_buf_puts(sg_buf *b, const char *s)
{
    return sg_buf_append(b, s, strlen(s));
}

int sg_buf_printf(sg_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sg_buf_reserve(b, (size_t)n) < 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void sg_buf_reset(sg_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void sg_buf_consume(sg_buf *b, size_t n)
{
    if (n >= b->len) {
        sg_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *sg_buf_steal(sg_buf *b, size_t *len)
{
    char *p = b->data ? b->data : strdup("");
    if (len)
        *len = b->len;
    *b = (sg_buf){0};
    return p;
}

void sg_buf_free(sg_buf *b)
{
    free(b->data);
    *b = (sg_buf){0};
}

int sg_grow(void *v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = grown(*cap, need, 16, elem);
    void **pv = v;
    void *p = c ? realloc(*pv, c * elem) : NULL;
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    *pv = p;
    *cap = c;
    return 0;
}

void sg_xgrow(void *v, size_t *cap, size_t need, size_t elem)
{
    if (sg_grow(v, cap, need, elem) < 0)
        sg_oom();
}

int sg_strv_push(char ***v, size_t *n, size_t *cap, const char *s)
{
    char *d = strdup(s);
    /* cap counts the strings; the array holds one more, for the NULL */
    size_t room = *cap ? *cap + 1 : 0;
    if (!d || sg_grow(v, &room, *n + 2, sizeof **v) < 0) {
        free(d);
        errno = ENOMEM;
        return -1;
    }
    *cap = room - 1;
    (*v)[(*n)++] = d;
    (*v)[*n] = NULL;
    return 0;
}

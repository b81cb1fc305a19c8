/* buf: the one growable byte buffer and the one way to grow an array.
 *
 * Every buffer that grows as data comes (a checkpoint's tree listing, a
 * COPY batch, a message being assembled) is an sg_buf: data is always
 * NUL-terminated (so text can be used as a C string), len counts the bytes
 * without that NUL, and capacity doubles (from 256) so appends are
 * amortized O(1). Arrays grow with sg_grow.
 *
 * Out of memory (docs/ARCHITECTURE.md, "Out of memory"): these return -1
 * with errno ENOMEM (also when a size would overflow) and leave the buffer
 * as it was; the caller reports it as any other error. */
#ifndef SG_BUF_H
#define SG_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct sg_buf {
    char *data; /* NULL until the first append; NUL-terminated after it */
    size_t len;
    size_t cap;
} sg_buf;

/* Room for more bytes (plus the NUL) past len. */
int sg_buf_reserve(sg_buf *b, size_t more);
int sg_buf_append(sg_buf *b, const void *p, size_t n);
int sg_buf_puts(sg_buf *b, const char *s);
int sg_buf_printf(sg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties it, keeping the memory. */
void sg_buf_reset(sg_buf *b);
/* Drops the first n bytes (all of them when n >= len): what a reader has
 * consumed from the front of a queue, the rest moved down. */
void sg_buf_consume(sg_buf *b, size_t n);
/* The data (never NULL: "" for an empty buffer, or NULL on OOM), owned by
 * the caller; the buffer is left empty. */
char *sg_buf_steal(sg_buf *b, size_t *len);
void sg_buf_free(sg_buf *b);
#define sg_autobuf __attribute__((cleanup(sg_buf_free)))

/* Makes *v (an array of elem-sized items, *cap of them) hold at least need
 * items, doubling from 16. -1 with errno ENOMEM, *v and *cap unchanged. */
int sg_grow(void *v, size_t *cap, size_t need, size_t elem);
/* The same, ending the process on out of memory (sg_oom), for code under
 * that policy (util.h). */
void sg_xgrow(void *v, size_t *cap, size_t need, size_t elem);

/* Appends a copy of s to the NULL-terminated string vector *v of *n
 * strings (room for *cap plus the NULL). -1 with errno ENOMEM, *v unchanged
 * (still NULL-terminated and owned by the caller). */
int sg_strv_push(char ***v, size_t *n, size_t *cap, const char *s);

#endif

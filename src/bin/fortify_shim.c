/* The musl-linked CLI (meson.build) uses Debian's libjansson.a, which was
 * compiled against glibc with _FORTIFY_SOURCE: it calls glibc's checked
 * entry points, which musl does not have. These are those checks: abort
 * when the destination is smaller than the length given, as glibc does,
 * else the plain function. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int __snprintf_chk(char *s, size_t n, int flag, size_t slen, const char *fmt, ...);
int __vsnprintf_chk(char *s, size_t n, int flag, size_t slen, const char *fmt, va_list ap);
char *__strncpy_chk(char *dst, const char *src, size_t n, size_t dstlen);

int __vsnprintf_chk(char *s, size_t n, int flag, size_t slen, const char *fmt, va_list ap)
{
    if (n > slen)
        abort();
    return vsnprintf(s, n, fmt, ap);
}

int __snprintf_chk(char *s, size_t n, int flag, size_t slen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = __vsnprintf_chk(s, n, flag, slen, fmt, ap);
    va_end(ap);
    return r;
}

char *__strncpy_chk(char *dst, const char *src, size_t n, size_t dstlen)
{
    if (n > dstlen)
        abort();
    return strncpy(dst, src, n);
}

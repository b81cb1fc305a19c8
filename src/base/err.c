#include "base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void vset(sg_err *err, int code, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
static void vset(sg_err *err, int code, const char *fmt, va_list ap)
{
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

int sg_err_set(sg_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vset(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

int sg_err_sys(sg_err *err, const char *fmt, ...)
{
    int saved = errno;
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vset(err, saved, fmt, ap);
    va_end(ap);
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, ": %s", strerror(saved));
    errno = saved;
    return -1;
}

void sg_err_prefix(sg_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char ctx[SG_ERR_MSG_MAX];
    char old[SG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation is fine: a long context just shortens the message. */
    size_t n = strnlen(ctx, sizeof ctx - 1);
    memcpy(err->msg, ctx, n);
    if (n + 2 < sizeof err->msg) {
        err->msg[n] = ':';
        err->msg[n + 1] = ' ';
        size_t m = strnlen(old, sizeof err->msg - n - 3);
        memcpy(err->msg + n + 2, old, m);
        n += 2 + m;
    }
    err->msg[n] = '\0';
}

void sg_err_clear(sg_err *err)
{
    if (!err)
        return;
    err->code = 0;
    err->msg[0] = '\0';
}

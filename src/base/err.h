/* err: the error struct every fallible function fills.
 *
 * Convention: a function that can fail returns int < 0 (or NULL) and fills
 * a caller-provided sg_err; callers add context with sg_err_prefix() as the
 * error travels up; only main/daemon code prints it. */
#ifndef SG_ERR_H
#define SG_ERR_H

#include <stddef.h>

#define SG_ERR_MSG_MAX 1024

typedef struct sg_err {
    int code;                  /* errno value, or 0 when not a system error */
    char msg[SG_ERR_MSG_MAX];  /* one line, no trailing newline */
} sg_err;

/* Sets code and message; returns -1 so callers can `return sg_err_set(...)`. */
int sg_err_set(sg_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like sg_err_set with code = errno, appending ": strerror(errno)". */
int sg_err_sys(sg_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "context: " to the message (keeps code). */
void sg_err_prefix(sg_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void sg_err_clear(sg_err *err);

#endif

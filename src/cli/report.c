#include "cli/report.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"

static bool json_errors;
static const char *prog_name = "sandglass";

void sg_cli_set_prog(const char *prog)
{
    prog_name = prog;
}

const char *sg_cli_prog(void)
{
    return prog_name;
}

void sg_cli_json_errors(bool on)
{
    json_errors = on;
}

/* "PROG CMD: " (ours; "PROG: " without a command) ahead of a message
 * escaped by the one printer. */
static void cli_vsay(const char *cmd, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void cli_vsay(const char *cmd, const char *fmt, va_list ap)
{
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%.40s%s%.100s: ", prog_name, *cmd ? " " : "", cmd);
    fflush(stdout); /* what the command printed before stays before */
    sg_vprint_vis(2, prefix, fmt, ap);
}

static void cli_say(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cli_say(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vsay(cmd, fmt, ap);
    va_end(ap);
}

/* The error as one JSON line: JSON_ENSURE_ASCII writes every control byte
 * and non-ASCII character as \uXXXX, so the line is printable ASCII (checked:
 * DEL is not escaped) and goes out whole, in one write. False when it
 * cannot be (a message that is not UTF-8 fails to pack). */
static bool print_json_error(const char *cmd, const char *msg)
{
    sg_autojson json_t *j = json_pack("{s:s, s:s}", "error", msg, "command", cmd);
    sg_autofree char *dump = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    sg_autobuf sg_buf line = {0};
    if (!dump || sg_buf_puts(&line, dump) < 0 || sg_buf_puts(&line, "\n") < 0)
        return false;
    const char *s = line.data;
    size_t n = line.len;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    fflush(stdout);
    ssize_t w = write(2, s, n);
    (void)w;
    return true;
}

static void print_error(const char *cmd, const char *msg)
{
    if (json_errors && print_json_error(cmd, msg))
        return;
    cli_say(cmd, "%s", msg);
}

int sg_cli_fail(const char *cmd, const char *msg)
{
    print_error(cmd, msg);
    return SG_CLI_FAILED;
}

int sg_cli_failf(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sg_cli_fail(cmd, msg);
}

void sg_cli_sayf(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vsay(cmd, fmt, ap);
    va_end(ap);
}

int sg_cli_usage(const char *cmd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, " (see '%s %s --help')", prog_name, cmd);
    print_error(cmd, msg);
    return SG_CLI_USAGE;
}

int sg_cli_bad_option(const char *cmd, const char *bad)
{
    return sg_cli_usage(cmd, "unknown option, or one without its value: '%.100s'", bad);
}

#include "cli/report.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"

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

static void print_error(const char *cmd, const char *msg)
{
    if (json_errors) {
        sg_autojson json_t *j = json_pack("{s:s, s:s}", "error", msg, "command", cmd);
        sg_autofree char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (s) {
            fprintf(stderr, "%s\n", s);
            return;
        }
    }
    fprintf(stderr, "%s %s: %s\n", prog_name, cmd, msg);
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
    fprintf(stderr, "%s %s: ", prog_name, cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
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

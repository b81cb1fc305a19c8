/* log: one line per event on stderr (see log.h). */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/util.h"

#define LINE_MAX_BYTES 4096
#define PREFIX_MAX_BYTES 256

static char log_who[32] = "sandglass";
static sg_log_level log_level = SG_LOG_INFO;
static const char *const level_name[] = {"error", "warn", "info", "debug"};

int sg_log_level_parse(const char *name, sg_log_level *out)
{
    for (int l = SG_LOG_ERROR; name && l <= SG_LOG_DEBUG; l++)
        if (strcasecmp(name, level_name[l]) == 0) {
            *out = (sg_log_level)l;
            return 0;
        }
    return -1;
}

void sg_log_init(const char *who)
{
    snprintf(log_who, sizeof log_who, "%s", who);
    sg_log_level l;
    if (sg_log_level_parse(getenv("SANDGLASS_LOG_LEVEL"), &l) == 0)
        log_level = l;
}

void sg_log_set_level(sg_log_level level)
{
    log_level = level;
}

bool sg_log_enabled(sg_log_level level)
{
    return level <= log_level;
}

void sg_vprint_vis(int fd, const char *prefix, const char *fmt, va_list ap)
{
    char msg[LINE_MAX_BYTES];
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    if (n < 0)
        return;
    size_t len = strnlen(msg, sizeof msg);
    while (len && msg[len - 1] == '\n') /* the caller's own end of line */
        len--;
    /* prefix (ours) + the message escaped (4 bytes a byte at worst) + "\n". */
    char line[PREFIX_MAX_BYTES + 4 * LINE_MAX_BYTES + 8];
    size_t o = strnlen(prefix, PREFIX_MAX_BYTES);
    memcpy(line, prefix, o);
    sg_vis(msg, len, line + o, sizeof line - o - 1);
    o += strlen(line + o);
    line[o++] = '\n';
    ssize_t w = write(fd, line, o); /* one write: lines of two writers never mix */
    (void)w;
}

void sg_print_vis(int fd, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sg_vprint_vis(fd, prefix, fmt, ap);
    va_end(ap);
}

void sg_log(sg_log_level level, const char *fmt, ...)
{
    if (!sg_log_enabled(level))
        return;
    char ts[48], prefix[PREFIX_MAX_BYTES];
    sg_now_iso8601(ts, sizeof ts);
    snprintf(prefix, sizeof prefix, "%s %s %s: ", ts, level_name[level], log_who);
    va_list ap;
    va_start(ap, fmt);
    sg_vprint_vis(2, prefix, fmt, ap);
    va_end(ap);
}

void sg_log_lws(int lws_level, const char *line)
{
    sg_log_level l = lws_level == 1 ? SG_LOG_ERROR : lws_level == 2 ? SG_LOG_WARN
                     : lws_level == 4 ? SG_LOG_INFO : SG_LOG_DEBUG;
    sg_log(l, "lws: %s", line);
}

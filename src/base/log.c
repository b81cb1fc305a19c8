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

static char log_who[32] = "sandglass";
static sg_log_level log_level = SG_LOG_INFO;
static const char *const level_name[] = {"error", "warn", "info", "debug"};

void sg_log_init(const char *who)
{
    snprintf(log_who, sizeof log_who, "%s", who);
    const char *env = getenv("SANDGLASS_LOG_LEVEL");
    for (int l = SG_LOG_ERROR; env && l <= SG_LOG_DEBUG; l++)
        if (strcasecmp(env, level_name[l]) == 0)
            log_level = (sg_log_level)l;
}

bool sg_log_enabled(sg_log_level level)
{
    return level <= log_level;
}

void sg_log(sg_log_level level, const char *fmt, ...)
{
    if (!sg_log_enabled(level))
        return;
    char msg[LINE_MAX_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = strnlen(msg, sizeof msg);
    while (len && msg[len - 1] == '\n')
        msg[--len] = '\0';
    char line[LINE_MAX_BYTES + 128];
    char ts[48];
    sg_now_iso8601(ts, sizeof ts);
    size_t o = (size_t)snprintf(line, sizeof line, "%s %s %s: ", ts, level_name[level], log_who);
    for (size_t i = 0; i < len && o < sizeof line - 3; i++) {
        if (msg[i] == '\n') { /* one event, one line */
            line[o++] = '\\';
            line[o++] = 'n';
        } else {
            line[o++] = msg[i];
        }
    }
    line[o++] = '\n';
    ssize_t w = write(2, line, o);
    (void)w;
}

void sg_log_lws(int lws_level, const char *line)
{
    sg_log_level l = lws_level == 1 ? SG_LOG_ERROR : lws_level == 2 ? SG_LOG_WARN
                     : lws_level == 4 ? SG_LOG_INFO : SG_LOG_DEBUG;
    sg_log(l, "lws: %s", line);
}

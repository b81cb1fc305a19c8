/* log: the one log line of every long-running process (the supervisor and
 * its capture, the checkpoint worker, the uplink daemon, the ingest,
 * `sandglass serve`), on its stderr (a supervisor's is its sandbox's
 * supervisor.log, which init shares):
 *
 *   2026-12-02T06:00:00.123456+00:00 warn supervisor: checkpoint failed: ...
 *
 * One write(2) a line, so the lines of two processes sharing a log file
 * never interleave; a message's own newlines are kept inside the line as
 * "\n" so each line is one event. Levels error, warn, info, debug;
 * $SANDGLASS_LOG_LEVEL names the lowest written (default info). The CLI's
 * messages to its user are not logs: cli/report.h. */
#ifndef SG_LOG_H
#define SG_LOG_H

#include <stdbool.h>

typedef enum sg_log_level {
    SG_LOG_ERROR,
    SG_LOG_WARN,
    SG_LOG_INFO,
    SG_LOG_DEBUG,
} sg_log_level;

/* The process's name in its lines ("supervisor"); reads the level. */
void sg_log_init(const char *who);
bool sg_log_enabled(sg_log_level level);
void sg_log(sg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An emitter for lws_set_log_level: libwebsockets' lines as ours ("lws:
 * ..."), its levels (1 error, 2 warn, 4 notice, more: debug) mapped. */
void sg_log_lws(int lws_level, const char *line);

#endif

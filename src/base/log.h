/* log: the one log line of every long-running process (the supervisor and
 * its capture, the checkpoint worker, the uplink daemon, the ingest,
 * `sandglass serve`), on its stderr (a supervisor's is its sandbox's
 * supervisor.log, which init shares):
 *
 *   2026-12-02T06:00:00.123456+00:00 warn supervisor: checkpoint failed: ...
 *
 * One write(2) a line, so the lines of two processes sharing a log file
 * never interleave. Every line passes through the one escaping printer,
 * sg_print_vis: a message may carry a learner's bytes (a file name in an
 * error), so its control bytes, ESC, newlines, invalid UTF-8 and bidi marks
 * are written escaped (base/util.h: sg_vis) and each line is one event that
 * no name can forge or dress up. Levels error, warn, info, debug;
 * $SANDGLASS_LOG_LEVEL names the lowest written (default info). The CLI's
 * messages to its user are not logs: cli/report.h. */
#ifndef SG_LOG_H
#define SG_LOG_H

#include <stdarg.h>
#include <stdbool.h>

typedef enum sg_log_level {
    SG_LOG_ERROR,
    SG_LOG_WARN,
    SG_LOG_INFO,
    SG_LOG_DEBUG,
} sg_log_level;

/* The process's name in its lines ("supervisor"); reads the level. */
void sg_log_init(const char *who);
/* "error", "warn", "info", "debug" (any case) into *out; -1: not a level. */
int sg_log_level_parse(const char *name, sg_log_level *out);
/* A daemon's --log-level, over $SANDGLASS_LOG_LEVEL. */
void sg_log_set_level(sg_log_level level);
bool sg_log_enabled(sg_log_level level);
void sg_log(sg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The one escaping printer of CLI messages and logs: prefix (ours, written
 * as is; at most 255 bytes), then the formatted message (cut at 4 KiB)
 * through sg_vis, its own trailing newlines dropped, then one newline: one
 * write(2) to fd. Nothing that reaches stderr or a log file bypasses it
 * (scripts/check-raw-print.py keeps it so). */
void sg_print_vis(int fd, const char *prefix, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void sg_vprint_vis(int fd, const char *prefix, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* An emitter for lws_set_log_level: libwebsockets' lines as ours ("lws:
 * ..."), its levels (1 error, 2 warn, 4 notice, more: debug) mapped. The
 * ingest and serve pass lws's lines on only at level debug (or with their
 * SG_*_DEBUG variable): what lws says of a failure, ours says in its own
 * words, so none of lws's lines reaches an operator's terminal unasked. */
void sg_log_lws(int lws_level, const char *line);

#endif

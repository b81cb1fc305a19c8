/* timeline: the timeline for a person that `sandglass events` prints
 * (cli/cmd_events.c), apart so that fuzz/fuzz_timeline.c links it.
 *
 * One line per command with its result, its output below it (escaped, CRs
 * resolved as a terminal shows them, cut at 20 lines / 4 KiB unless
 * full), the rest as sentences. Plumbing (activity, process, stdin, the
 * command event itself, the checkpoint before each exec or prompt) only
 * with all. A command's output and diffs come before its result in the
 * store: they are held from its `command` until its result, so the line
 * with the result comes first.
 *
 * Learner-controlled text (commands, output, file names) is printed with
 * every control character, C1 control, invalid UTF-8 byte and
 * bidirectional override escaped (base/util.h: sg_vis), never raw. */
#ifndef SG_CLI_TIMELINE_H
#define SG_CLI_TIMELINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sg_tl_printer {
    bool utc, full, diff, all, color, show_stream;
    json_t *cmd_ev; /* the command whose result is awaited (held) */
    json_t *held;   /* its output and diffs, until then */
} sg_tl_printer;

/* Prints ev (one stored event) to stdout, or holds it until its command's
 * result. */
void sg_tl_print(sg_tl_printer *o, json_t *ev);
/* Prints the held command with res as its result (NULL: none yet). */
void sg_tl_flush(sg_tl_printer *o, json_t *res);
/* ts (the store's UTC time) as the timeline shows it, into out. */
void sg_tl_time(const sg_tl_printer *o, const char *ts, char *out, size_t n);
/* ts (RFC 3339, UTC, as the ingest stores it) in seconds since the epoch;
 * -1 when unreadable. */
double sg_tl_ts_epoch(const char *ts);
/* Whether a checkpoint's label (n bytes) makes it plumbing (the one
 * before an exec or a shell command: hidden without all, when it has no
 * "error"). Its first bytes are ASCII: a label's text in JSON, escapes
 * and all, answers the same. */
bool sg_tl_plumbing_label(const char *label, size_t n);
/* s made safe for a terminal (sg_vis) into buf. */
const char *sg_tl_vis_str(const char *s, char *buf, size_t n);

#endif

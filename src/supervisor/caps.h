/* caps: a session's caps (seed 000's kill switch): wall time, execs, CPU
 * time and agent tool calls, each 0 for none. A cap reached aborts the
 * session, and that abort stays: resume clears an operator's or a
 * signal's abort, never a cap's.
 *
 * What the kill switch asks, without a sandbox: the supervisor reads the
 * figures (clocks, counters, the cgroup's CPU time) and these say whether
 * a cap is reached and in which words. */
#ifndef SG_CAPS_H
#define SG_CAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state/state.h"

typedef struct sg_caps_usage {
    double wall_s, cpu_s;
    uint64_t execs, calls;
} sg_caps_usage;

/* Before an exec (an agent's tool call when tool): true, with the reason
 * in why (n bytes), when the exec would go past max_execs, or, for a tool
 * call, max_calls. execs and calls count the session's execs so far. */
bool sg_caps_exec_reached(const sg_sandbox_meta *m, uint64_t execs, uint64_t calls, bool tool,
                          char *why, size_t n);

/* On the caps' timer: true, with the reason, when max_wall_s (or
 * max_cpu_s) is set and the session's wall (CPU) time reached it. */
bool sg_caps_wall_reached(const sg_sandbox_meta *m, double wall_s, char *why, size_t n);
bool sg_caps_cpu_reached(const sg_sandbox_meta *m, double cpu_s, char *why, size_t n);

/* Whether the session has a cap the timer must watch (wall or CPU). */
bool sg_caps_timed(const sg_sandbox_meta *m);

/* Whether an abort by `by` ("operator", "signal", "cap") may be resumed. */
bool sg_caps_resumable(const char *by);

/* {"max_wall_s": {"limit", "value"}, ...}: each cap (null when none) and
 * the figure against it, as info and the abort record show them. */
json_t *sg_caps_json(const sg_sandbox_meta *m, const sg_caps_usage *u);

#endif

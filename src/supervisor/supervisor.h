/* supervisor: the host-side process that holds one sandbox for its whole
 * life. One libuv loop serves the control socket (CLI requests), the
 * sandbox init's socket (spawn / exit reports), each exec's output pipes
 * and timers, and — for captured sandboxes — the capture (events, spool,
 * uplink, workspace watcher).
 *
 * It is started by `sandglass create` as `sandglass-supervisor supervisor ID
 * --ready-fd N`: it creates the cgroup, clones the init into new
 * namespaces, and writes "ok\n" (or "error: ...\n") to the ready fd once
 * the sandbox accepts execs. */
#ifndef SG_SUPERVISOR_H
#define SG_SUPERVISOR_H

#include <stdbool.h>

#include "base/err.h"

/* Runs the supervisor of sandbox `id` until it is destroyed. With adopt,
 * takes over a live sandbox whose supervisor died (connects to its init,
 * resumes the capture spool and its seq). Returns the process exit status. */
/* seed_fd (>= 0, a new sandbox's): read before the capture starts and the
 * first checkpoint is taken, while the sandbox itself is set up: "ok\n"
 * once its creator filled the workspace (sandglass fork); anything else,
 * or its end, fails the start. */
int sg_supervisor_run(const char *id, int ready_fd, int seed_fd, bool adopt);

#endif

/* procevents: every program started inside a sandbox, recorded from the
 * host, whatever the shell or the learner says: one `process` event per
 * program (pid and parent in the sandbox's pid namespace, argv, cwd, start
 * and end, exit status, the exec whose process tree it belongs to).
 *
 * Mechanism: the kernel's process events connector (NETLINK_CONNECTOR,
 * CN_IDX_PROC; needs CAP_NET_ADMIN, so a rootless sandbox has none). It is
 * host-wide: a socket filter in the kernel drops all but process forks,
 * execs and exits (threads never reach us), and the rest is matched
 * against the set of the sandbox's processes, which starts with its init
 * and grows by fork (a fork's parent is always known before its child), so
 * a host process costs one hash lookup and no /proc read.
 *
 * argv, cwd, the path given and the namespace pid come from the program's
 * execve itself where the sandbox holds every execve until the supervisor
 * read it (sandbox/execnotify.h: a seccomp user notification; Linux >=
 * 5.5, root sandboxes): sg_procevents_exec_held keeps them for the exec
 * event (`argv_source: "execve"`), so a program that ends at once is
 * recorded whole. Elsewhere they are read from /proc at the exec event
 * (`argv_source: "proc"`).
 *
 * What it can miss (said in docs/ARCHITECTURE.md too):
 *  - with the execve held: what is read is what the caller's memory showed
 *    when we read it; another thread of the caller (or a process of the
 *    same exec and user writing /proc/PID/mem) can change it before the
 *    kernel reads it, so a program can be recorded under an argv it did
 *    not run with. Past SG_PROC_ARGS_MAX arguments or SG_PROC_ARGV_MAX
 *    bytes argv is cut (`argv_truncated`). Execs are not held while the
 *    supervisor is down (init lets them go): a supervisor that adopts the
 *    sandbox records what starts after it, as before. Past
 *    SG_PROC_LIVE_MAX held execs not yet seen to run (failed execs keep
 *    theirs until the process's next exec or exit) the rest fall back to
 *    /proc.
 *  - without it (rootless, Linux < 5.5, SANDGLASS_EXEC_NOTIFY=0): argv,
 *    cwd and the namespace pid are read from /proc when the supervisor
 *    handles the exec event, after the program started: a program that
 *    exits (or execs again) first — a /bin/true in a busy loop on a loaded
 *    host — is recorded with its parent, times and exit status but argv,
 *    cwd and pid null (an exec's own program falls back to the exec's
 *    request); one that rewrote its argv memory in between is recorded as
 *    it made itself look.
 *  - the kernel drops events when our socket's queue overflows (a fork
 *    storm on the host): that is reported as a `limit` event and the set is
 *    rebuilt from /proc (processes started meanwhile are not recorded).
 *  - processes started before the capture started (a supervisor that
 *    adopted a running sandbox) are tracked but not recorded.
 *  - past SG_PROC_EVENTS_MAX programs in one window (an exec, or the time
 *    between two) the rest are counted in one `limit` event, and past
 *    SG_PROC_LIVE_MAX programs alive at once the newer ones are counted
 *    too: a learner can start 10^5 processes, the host keeps bounded state.
 */
#ifndef SG_PROCEVENTS_H
#define SG_PROCEVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "base/err.h"
#include "wire/event.h"

typedef struct sg_procevents sg_procevents;
struct sg_execargs;
/* Receives each event (payload stolen): SG_EV_PROCESS or SG_EV_LIMIT. */
typedef void (*sg_procevents_emit_fn)(void *ud, sg_event_kind kind, json_t *payload);

/* Subscribes and starts tracking the processes of the sandbox whose init
 * is init_pid (a host pid). NULL with err when the connector is not
 * available (no CAP_NET_ADMIN, no kernel support). */
sg_procevents *sg_procevents_new(uv_loop_t *loop, pid_t init_pid, sg_procevents_emit_fn emit,
                                 void *ud, sg_err *err);
/* Reads every event the kernel has queued (each exec's end calls it: the
 * kernel queues a process's exit before its parent can reap it). */
void sg_procevents_drain(sg_procevents *p);
/* An exec starts: init's next child belongs to it; a new window. argv (a
 * JSON array, borrowed) and cwd are the exec's request: they stand in for
 * its program's own when that exits before /proc could be read. */
void sg_procevents_exec_begin(sg_procevents *p, uint32_t exec_id, json_t *argv, const char *cwd);
/* An exec ended: its events are drained, the window closes. */
void sg_procevents_exec_end(sg_procevents *p, uint32_t exec_id);
/* An execve held by the kernel until the host read it
 * (sandbox/execnotify.h): tid is its caller (a host tid), *a what it asked
 * to run (taken on success). Reads the caller's cwd and pids from /proc,
 * then asks still_held(ud) (the notification is still valid, so tid was
 * the held caller during those reads) and keeps it all for the caller's
 * exec event, which then reads nothing. Returns whether it kept it. */
bool sg_procevents_exec_held(sg_procevents *p, pid_t tid, struct sg_execargs *a,
                             bool (*still_held)(void *ud), void *ud);
/* A shell exec's typed command: command_id (its `command` event's seq)
 * runs in the foreground from now; 0: it ended (its programs' events are
 * drained first). A program is the command's when it descends from a
 * process the shell forked while the command ran (a background job's
 * too: bash forks it before its next prompt); its event carries
 * `command_id`, and `background` when it started after its command
 * ended. */
void sg_procevents_command(sg_procevents *p, uint32_t exec_id, int64_t command_id);
/* The exec and command of the last program recorded as a background
 * job's (false: none yet). */
bool sg_procevents_last_background(sg_procevents *p, uint32_t *exec_id, int64_t *command_id);
/* fn(ud) runs before the kernel's queue is read: the supervisor reads the
 * terminals' marks first (a command's mark is written before the forks
 * it makes), so a fork finds its command in the foreground. */
void sg_procevents_set_before_read(sg_procevents *p, void (*fn)(void *ud), void *ud);
/* The sandbox ends: drains, then records what is still alive as running. */
void sg_procevents_finish(sg_procevents *p);
/* Stops the subscription and closes the handle (inside or outside uv_run);
 * free after the loop ran the close. */
void sg_procevents_close(sg_procevents *p);
void sg_procevents_free(sg_procevents *p);

#endif

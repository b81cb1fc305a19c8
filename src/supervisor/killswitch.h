/* killswitch: the kill path that no loop a learner can feed stands in
 * front of (issue 22, "the kill switch never waits").
 *
 * A thread of its own, doing almost nothing. The loop accepts on the
 * control socket as before (one hop: the exec path); a connection the loop
 * leaves waiting 5 ms (it is busy) the thread accepts instead, peeks at its
 * first message, and when that is an `abort` or a `destroy` request kills
 * the sandbox's processes at once (cgroup.kill on every leaf of the
 * sandbox's v2 cgroup: everything but init), before the connection goes on
 * to the loop. An abort it answers itself, from its own record (what the
 * loop last published: the caps, the running execs, whether the session is
 * aborted already) once every leaf is empty, and hands the loop only the
 * abort to record (on_abort: the event, the execs' ends as killed by it),
 * so the answer does not wait for a busy loop either. A destroy goes on to
 * the loop, which tears down and answers (its kill finds the processes
 * gone or dying, proves the cgroup empty, records). It also holds the deadlines — each exec's time limit
 * (its leaf) and the session's --max-wall (every leaf) — and kills when
 * one passes, whatever the loop is doing; the loop's own timers then
 * record why.
 *
 * The loop can be busy for a long turn (a watcher's rescan, a burst of
 * held execve calls, a flood of terminal output): none of that delays a
 * kill any more, only the answer, and a killed learner stops feeding it.
 * Where the v2 cgroup.kill is missing (cgroup v1 only) the thread only
 * accepts and the loop kills, as before.
 *
 * Contract: ks_* are called from the loop's thread only; on_conn is
 * called there too (through a uv_async). */
#ifndef SG_SUPERVISOR_KILLSWITCH_H
#define SG_SUPERVISOR_KILLSWITCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "base/err.h"

typedef struct killswitch killswitch;

#define SG_KS_REASON_MAX 256

/* What the thread answers an abort from: the loop's record, published
 * (ks_publish) when it changes. */
typedef struct ks_state {
    double max_wall_s, max_cpu_s;
    uint64_t max_execs, max_calls, execs, calls; /* the caps and the counts against them */
    uint64_t start_ns;                           /* the session's start (wall) */
    pid_t init_pid;
    bool aborted;
    char by[16], reason[SG_KS_REASON_MAX];
} ks_state;

/* Each accepted connection, handed to the loop (non-blocking, close-on-exec,
 * its first message unread). */
typedef void (*ks_conn_fn)(void *ud, int fd);
/* An operator's abort the thread killed for and answered: the loop records
 * it (by "operator", reason as answered; who: the requester's SO_PEERCRED,
 * NULL when it could not be read; via: its request's "via", "" none).
 * Called on the loop's thread. */
typedef void (*ks_abort_fn)(void *ud, const char *reason, const struct ucred *who, const char *via);

/* Starts the thread on ctl_fd (the loop accepts there too: whoever comes
 * first; the thread only after the loop left a connection 5 ms).
 * cg_dir: the sandbox's cgroup (v2 first, sandbox/cgroup.h's
 * sg_cgroup_path), or NULL without one: then nothing is killed here.
 * quota_path: the sandbox's CPU quota, lifted while an abort kills
 * (sg_cgroup_cpu_quota_path), or NULL. sandbox_id: whose abort record
 * (state/state.h) an abort answered here writes before its answer, or
 * NULL. */
killswitch *ks_start(uv_loop_t *loop, int ctl_fd, const char *cg_dir, const char *quota_path,
                     const char *sandbox_id, ks_conn_fn on_conn, ks_abort_fn on_abort, void *ud, sg_err *err);
/* flag is set to 1 (atomically) by the thread as soon as it takes an
 * abort or a destroy (sv_killswitch_state's stopping). */
void ks_set_stop_flag(killswitch *k, int *flag);
/* The loop's record changed (caps, counts, abort state): the thread answers
 * from this copy. */
void ks_publish(killswitch *k, const ks_state *st);
/* An exec runs in leaf (an abort answered by the thread names it). */
void ks_exec_begin(killswitch *k, const char *leaf, unsigned num);
/* Kills leaf's processes (NULL: every leaf's) once the monotonic clock
 * passes deadline_ns; replaces the deadline that leaf had. */
void ks_arm(killswitch *k, const char *leaf, uint64_t deadline_ns);
/* Forgets leaf's deadline and exec (it ended: the leaf may be reused). */
void ks_disarm(killswitch *k, const char *leaf);
/* When the thread has killed for a request the loop has not read yet:
 * hands the loop its connections now (on_conn), so that the abort or
 * destroy is handled before the deaths it caused (init's reports: an
 * exec killed by an abort ends as killed by it). False: nothing to do. */
bool ks_take_killed(killswitch *k);
/* Whether the thread has killed for a request the loop has not taken yet
 * (an abort it answered, a destroy queued): the loop's long work (the
 * watcher's) gives way to it at once, so the request is handled at the
 * next turn, not after a learner's pile of changes. Any thread; NULL:
 * false. */
bool ks_kill_waiting(const killswitch *k);
/* Returns once an abort the thread is killing for is done (its leaves
 * empty): the loop's record of it then sees what the kill left, so its
 * proof holds and the killed execs' results are read before it. */
void ks_kill_barrier(killswitch *k);
/* Stops and joins the thread, closes what it holds (not ctl_fd). NULL: no-op. */
void ks_stop(killswitch *k);

#endif

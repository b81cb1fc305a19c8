/* ckpt_client: the supervisor's side of its checkpoint worker (wire/ckpt_proto.h).
 *
 * The same operations as checkpoint.h, answered by a sandglass-ckpt process
 * that holds the libgit2 store. Calls are synchronous, as the in-process
 * store's were. The worker is spawned on the first call and whenever it is
 * gone (sg_ckpt_client_stop, or it died: the call is then retried once on a
 * fresh worker; every operation may be repeated safely). The owner stops
 * it after SG_CKPT_CLIENT_IDLE_MS without a call, so an idle sandbox carries no
 * libgit2; the next call pays a spawn (~5 ms here).
 *
 * Reaping: the worker is our child. sg_ckpt_client_reap (from the SIGCHLD
 * handler) collects it without blocking; sg_ckpt_client_free waits for it.
 *
 * Charged to the sandbox, never under the learner's limits: the work is
 * for the sandbox and on files the learner controls, so it runs in the
 * leaf SG_CKPT_CLIENT_LEAF of the sandbox's supervisor's cgroup
 * (<id>:supervisor/ckpt, sandbox/cgroup.h: sg_cgroup_join_fds), bounded by
 * the supervisor's limits: a learner at its memory limit neither starves
 * it nor is OOM-killed for it. The owner's join
 * callback opens the cgroup.procs files; the worker writes "0" into each
 * before it does anything else, and refuses to serve when one fails.
 *
 * Never waited on by a kill: sg_ckpt_client_kill SIGKILLs the worker (abort,
 * destroy). sg_ckpt_client_kill_sandbox_worker does the kill from another
 * process (the CLI's abort and destroy, before they ask the supervisor,
 * which may be inside a long call): it leaves the flag <repo>/sg-killed,
 * then SIGKILLs the worker through its leaf (cgroup.kill written, its
 * death not waited for: the request goes at once); the call in flight then fails
 * at once with ECANCELED instead of being retried on a fresh worker (any
 * other death of the worker, its OOM kill included, gets one retry). */
#ifndef SG_CKPT_CLIENT_H
#define SG_CKPT_CLIENT_H

#include <stdbool.h>
#include <sys/types.h>

#include "base/err.h"
#include "checkpoint/diff.h"
#include "wire/ckpt_proto.h"

#define SG_CKPT_CLIENT_IDLE_MS 10000
#define SG_CKPT_CLIENT_LEAF "ckpt"       /* the worker's cgroup leaf */
#define SG_CKPT_CLIENT_MAX_JOIN 8        /* cgroup.procs fds handed to the worker */

/* Fills fds with cgroup.procs files (O_WRONLY) the worker must join;
 * returns how many (0: none, run as is), or -1 with err (no worker is
 * started then). */
typedef int (*sg_ckpt_client_join_fn)(void *ud, int fds[SG_CKPT_CLIENT_MAX_JOIN], sg_err *err);

typedef struct sg_ckpt_client sg_ckpt_client;

/* worker_exe: the sandglass-ckpt binary. Spawns nothing yet. */
sg_ckpt_client *sg_ckpt_client_new(const char *worker_exe, const char *repo_dir, const char *workspace);
/* Stops the worker and waits for it. */
void sg_ckpt_client_free(sg_ckpt_client *c);

/* Spawns the worker and sends it "open", unless it runs already; does not
 * wait: the first call reads the answer (and reports a store that cannot
 * be opened). */
int sg_ckpt_client_start(sg_ckpt_client *c, sg_err *err);
/* Waits for the answer to a pending "open": -1 with err when the store
 * cannot be opened (the worker is then stopped). */
int sg_ckpt_client_opened(sg_ckpt_client *c, sg_err *err);
/* Closes the worker's socket: it exits. */
void sg_ckpt_client_stop(sg_ckpt_client *c);
/* SIGKILLs the worker and collects it (never waits for a call to end). */
void sg_ckpt_client_kill(sg_ckpt_client *c);
/* The cgroup the worker joins (called at every spawn). */
void sg_ckpt_client_set_join(sg_ckpt_client *c, sg_ckpt_client_join_fn fn, void *ud);
/* From any process of the state directory's owner: SIGKILLs the worker of
 * sandbox id through its cgroup leaf. 0 also when there is none. */
int sg_ckpt_client_kill_sandbox_worker(const char *id, sg_err *err);
/* Collects an exited worker (non-blocking). */
void sg_ckpt_client_reap(sg_ckpt_client *c);
/* The worker's pid, 0 when none is running. */
pid_t sg_ckpt_client_pid(const sg_ckpt_client *c);

int sg_ckpt_client_take(sg_ckpt_client *c, const char *label, bool reuse_unchanged,
                  char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stats,
                  bool *reused, sg_err *err);
/* Records labels[i] (at times[i]) for checkpoint id, the newest
 * (sg_checkpoint_alias for each, in order), without waiting for the
 * answer; the worker is spawned if it is not running. The next call reads
 * the answer, and an error in it is kept for sg_ckpt_client_owed_error. If the
 * worker is stopped or dies before it answers, the result is not known.
 * The answer to an earlier one is read before it is sent: at most one is
 * owed, so the worker never blocks writing answers nobody reads (and we
 * never block sending to a worker that does). */
int sg_ckpt_client_alias_nowait(sg_ckpt_client *c, const char *id, char *const *labels, const int64_t *times,
                          size_t n, sg_err *err);
/* The first error among answers read for requests sent without waiting;
 * false when there was none since the last call. */
bool sg_ckpt_client_owed_error(sg_ckpt_client *c, sg_err *out);
int sg_ckpt_client_list(sg_ckpt_client *c, sg_checkpoint_info **out, size_t *n, sg_err *err);
int sg_ckpt_client_diff(sg_ckpt_client *c, const char *id, sg_checkpoint_change **out, size_t *n,
                  sg_err *err);
int sg_ckpt_client_restore(sg_ckpt_client *c, const char *id, sg_checkpoint_stats *stats, sg_err *err);

/* A unified diff made by the worker: an sg_diff_fn, userdata the client. */
int sg_ckpt_client_unified(void *client, const char *path, const char *old, size_t old_len,
                     const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);

#endif

/* pool: spare sandboxes kept ready, so that `create` only has to claim one.
 *
 * A new sandbox costs a supervisor start, namespaces, a root file system
 * and, above all, moving its init into the v1 cgroups of a split or v1
 * host, which waits for an RCU grace period (10-20 ms here). A spare has
 * paid all of that ahead: it is an ordinary sandbox (learner
 * SG_POOL_LEARNER, its own empty workspace, default limits) whose id is a
 * file in <state>/pool/. Claiming it means unlinking that file (whoever
 * unlinks it wins a race) and sending its supervisor a "claim" request with
 * the creator's record: learner, task, limits, caps, capture.
 *
 * Only a create with its own fresh workspace, the host's system
 * directories and root privileges can take a spare: --workspace, --rootfs
 * and rootless creates always build a new sandbox. The pool is empty unless
 * `sandglass pool N` asks for spares; after each claim, create refills it
 * in the background. */
#ifndef SG_CLI_POOL_H
#define SG_CLI_POOL_H

#include <stdbool.h>

#include "base/err.h"
#include "state/state.h"

/* Claims a spare for want (its id is ignored). Returns 1 and the spare's
 * id in id_out, 0 when no spare could be claimed (none, or each one failed
 * and was destroyed). */
int sg_pool_claim(const sg_sandbox_meta *want, char id_out[32]);

/* Starts a detached `sandglass pool --refill`: up to the pool's size;
 * nothing when the host's daemon runs (`sandglass host` refills it). */
void sg_pool_refill_async(void);
/* <state>/SG_POOL_DAEMON_LOCK: flock'ed by the host's daemon (cmd_host.c)
 * for its life; true while it is. */
#define SG_POOL_DAEMON_LOCK "host/daemon.lock"
bool sg_pool_daemon_running(void);

/* Records a new spare: create --spare calls it once the spare is ready. */
int sg_pool_add(const char *id, sg_err *err);

/* The size asked for (0: no pool) and the number of spares ready. */
unsigned sg_pool_size(void);
unsigned sg_pool_ready(void);

/* Sets the size; then creates spares up to it, or destroys the extra. */
int sg_pool_resize(unsigned size, bool set, sg_err *err);

#endif

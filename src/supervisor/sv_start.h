/* sv_start: the sandbox made (init cloned into new namespaces) or adopted
 * (a running init taken over after a supervisor died), its capture
 * started, the supervisor's lock and cgroup; the claim of a pool's spare. */
#ifndef SG_SV_START_H
#define SG_SV_START_H

#include "supervisor/sv_sup.h"

void sv_start_oom_baseline(sv_sup *s);
int sv_start_init(sv_sup *s, sg_err *err);
int sv_start_adopt(sv_sup *s, sg_err *err);
/* Moves the supervisor into its own cgroup beside the sandbox's (cgroup.h),
 * with its limits (SG_SUPERVISOR_*). Best effort: a warning if it cannot. */
void sv_start_join_own_cgroup(sv_sup *s);
/* Starts the capture of this sandbox (its record: sg_capture). */
int sv_start_capture(sv_sup *s, bool resumed, sg_err *err);
/* Takes the sandbox's supervisor lock (an adopt first waits, bounded, for
 * a dying predecessor to let it go). */
int sv_start_hold_lock(sv_sup *s, const char *id, bool adopt, sg_err *err);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_start_op_claim(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

/* sv_leaves: the exec leaves of the sandbox's cgroup, the ready child's and
 * the spare ones. */
#ifndef SG_SV_LEAVES_H
#define SG_SV_LEAVES_H

#include "supervisor/sv_sup.h"

int leaf_kill(sup *s, const char *leaf, int timeout_ms, sg_err *err);
void leaf_track(sup *s, const char *leaf);
void leaf_untrack(sup *s, const char *leaf);
void leaves_sweep(sup *s);
void open_leaf_close(open_leaf *l);
void ready_next(sup *s);
bool leaf_recycle(sup *s, exec_ctx *ex);
void ready_close_fds(sup *s);
int ready_pidfd_open(int leaf_dirfd);
void ready_lost(sup *s);
void ready_retire(sup *s);

#endif

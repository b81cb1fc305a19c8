/* sv_leaves: the exec leaves of the sandbox's cgroup, the ready child's and
 * the spare ones. */
#ifndef SG_SV_LEAVES_H
#define SG_SV_LEAVES_H

#include "supervisor/sv_sup.h"

void sv_leaves_init(sv_sup *s);
void sv_leaves_fast_set(sv_sup *s);
void sv_leaves_free(sv_sup *s);
int sv_leaves_kill(sv_sup *s, const char *leaf, int timeout_ms, sg_err *err);
void sv_leaves_track(sv_sup *s, const char *leaf);
void sv_leaves_untrack(sv_sup *s, const char *leaf);
void sv_leaves_sweep(sv_sup *s);
void sv_open_leaf_close(sv_open_leaf *l);
void sv_leaves_ready_next(sv_sup *s);
bool sv_leaves_recycle(sv_sup *s, sv_exec *ex);
void sv_leaves_ready_close_fds(sv_sup *s);
int sv_leaves_ready_pidfd_open(int leaf_dirfd);
void sv_leaves_ready_lost(sv_sup *s);
bool sv_leaves_ready_socket(sv_sup *s, uint32_t exec_id, int fd, pid_t pid);
void sv_leaves_ready_take(sv_sup *s, sv_exec *ex);
void sv_leaves_ready_wake(sv_sup *s);
void sv_leaves_ready_retire(sv_sup *s);

#endif

/* privs: turns a root process in the sandbox into the unprivileged sandbox
 * user: supplementary groups cleared, gid/uid set, every capability dropped
 * from all sets including bounding and ambient, no_new_privs set.
 * Async-signal-safe: called in a freshly forked child. */
#ifndef SG_PRIVS_H
#define SG_PRIVS_H

#include <sys/types.h>

/* Returns 0, or -errno of the failing step. */
int sg_privs_drop(uid_t uid, gid_t gid);

#endif

/* privs: turns a root process in the sandbox into the unprivileged sandbox
 * user: supplementary groups cleared, gid/uid set, every capability dropped
 * from all sets including bounding and ambient, no_new_privs set.
 * Async-signal-safe: called in a freshly forked child. */
#ifndef SG_PRIVS_H
#define SG_PRIVS_H

#include <sys/types.h>

/* Returns 0, or -errno of the failing step. The no_new_privs it sets is
 * what lets an exec child then add its part of the seccomp filter without
 * capabilities (init.c). */
int sg_privs_drop(uid_t uid, gid_t gid);

/* Empties the capability bounding set only (needs CAP_SETPCAP). The
 * bounding set limits what execve can grant, not what the caller holds, so
 * the sandbox init may call this once after sg_rootfs_setup and keep its
 * own capabilities; sg_privs_drop in each exec child is then ~40 us
 * cheaper. Returns 0 or -errno. */
int sg_privs_drop_bounding(void);

#endif

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

/* Puts the caller (and everything it will start) in a Landlock domain of
 * its own. Landlock lets a process reach another one's memory, descriptors
 * or environment (ptrace, /proc/PID/mem, /proc/PID/fd, pidfd_getfd) only
 * when the target is in the same domain or one nested under it: each exec
 * of a sandbox runs in its own domain, so the processes an earlier exec
 * left running cannot take the stdout of a later one to forge its output,
 * while `kill` and `ps` across execs keep working (signals and
 * /proc/PID/stat are not scoped). The domain restricts nothing else: it
 * handles only the making of block devices, which the sandbox user cannot
 * do anyway. Needs no_new_privs (sg_privs_drop sets it). Returns 0, or
 * -errno: -ENOSYS or -EOPNOTSUPP where the kernel has no Landlock (the
 * seccomp filter still refuses pidfd_getfd there, but not /proc/PID/fd). */
int sg_privs_own_domain(void);

#endif

/* rootfs: builds the sandbox's file system view inside a new mount
 * namespace and pivots into it. Runs in the sandbox's init (pid 1 of the
 * new pid namespace) before any user code.
 *
 * Result: a read-only root (tmpfs skeleton, or --rootfs DIR) with read-only
 * binds of the host's /usr, /bin, /sbin, /lib*, the parts of /etc programs
 * need (passwd/group are generated: root + the sandbox user), a fresh /proc,
 * a minimal /dev (null zero full random urandom tty, devpts, private shm),
 * a private /tmp, and the workspace read-write at /workspace. */
#ifndef SG_ROOTFS_H
#define SG_ROOTFS_H

#include <stdbool.h>
#include <sys/types.h>

#include "base/err.h"

/* The sandbox user's HOME: a private tmpfs (SG_ROOTFS_HOME_SIZE), not the
 * workspace: neither captured nor checkpointed, gone with the sandbox. */
#define SG_ROOTFS_HOME "/home/sandbox"

typedef struct sg_rootfs_opts {
    const char *workspace;  /* host path, bound rw at /workspace */
    const char *rootfs;     /* NULL: host system dirs; else this dir as / */
    const char *hostname;   /* uts name inside, e.g. "sandglass" */
    uid_t uid;              /* the sandbox user, for /etc/passwd and ownership */
    gid_t gid;
    unsigned long long tmp_size; /* bytes for /tmp (tmpfs size=), 0 = default */
    /* Mount the workspace idmapped: its root-owned files appear as uid/gid
     * inside, and what uid/gid creates is root's on disk; no file of the
     * operator's changes owner. Needs a file system with idmapped mounts
     * (ext4, xfs, btrfs, tmpfs >= 6.3 ...): refused otherwise. */
    bool idmap;
    /* A running LXCFS's mount (sg_rootfs_lxcfs): its proc files, the
     * sandbox's own memory, CPUs, uptime and load as its cgroup makes
     * them, bound read-only over /proc's (SG_ROOTFS_LXCFS_FILES); NULL:
     * none, /proc shows the host's. */
    const char *lxcfs;
} sg_rootfs_opts;

/* The /proc files an LXCFS mount replaces. */
#define SG_ROOTFS_LXCFS_FILES "meminfo", "cpuinfo", "stat", "uptime", "loadavg", "diskstats", "swaps"
/* Where Debian's lxcfs mounts itself. */
#define SG_ROOTFS_LXCFS_DEFAULT "/var/lib/lxcfs"

/* Whether dir is a running LXCFS: a FUSE mount whose proc/meminfo reads.
 * The supervisor asks at each sandbox's start ($SANDGLASS_LXCFS, else
 * SG_ROOTFS_LXCFS_DEFAULT; "off": never). */
bool sg_rootfs_lxcfs(const char *dir);

/* Must be called in a fresh mount+uts namespace, as root in it. Makes every
 * mount private, builds the tree, pivot_roots into it, detaches the old root
 * and chdirs to /workspace. */
int sg_rootfs_setup(const sg_rootfs_opts *o, sg_err *err);

/* Brings `lo` up in the current network namespace (ioctl, no netlink). */
int sg_net_lo_up(sg_err *err);

#endif

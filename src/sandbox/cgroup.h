/* cgroup: one cgroup per sandbox and a leaf per exec, under a `sandglass`
 * subtree, on cgroup v2 hosts, v1 hosts and split hosts (limits on v1
 * controllers; kill, freeze and populated on the v2 mount).
 *
 * Layout, per hierarchy in use:   <mount>/sandglass/<sandbox-id>/<leaf>
 * The sandbox's init lives directly in <sandbox-id>; each exec gets a leaf.
 * On v2 no controller is enabled in <sandbox-id>'s subtree_control, so init
 * may live there while leaves exist (no-internal-process rule).
 *
 * Environment: SANDGLASS_CGROUP_LAYOUT forces a layout for tests and odd
 * hosts: "v1" ignores the cgroup2 mount (a split host behaves as v1-only:
 * freezer-based kill, procs walks), "v2" ignores the v1 mounts, "none"
 * ignores all; unset, "auto" or anything else detects. It is read at every
 * sg_cgroup_create/open/list/layout call; the mount table once (the first
 * call is not thread-safe: make it from one thread). */
#ifndef SG_CGROUP_H
#define SG_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

#define SG_CG_ROOT_NAME "sandglass"
#define SG_CG_MAX_FDS 8 /* cgroup.procs fds one process must join */
#define SG_CG_KILL_DEFAULT_MS 5000 /* sg_cgroup_kill with timeout_ms <= 0 */

typedef enum sg_cg_layout {
    SG_CG_NONE = 0, /* no usable cgroup mount (rootless without delegation) */
    SG_CG_V2,       /* unified only, controllers on v2 */
    SG_CG_V1,       /* legacy controllers only, no v2 mount */
    SG_CG_SPLIT,    /* v1 controllers + a v2 mount without them (this machine) */
} sg_cg_layout;

typedef struct sg_cg_limits {
    uint64_t memory_bytes; /* 0 = no limit */
    uint64_t pids;         /* 0 = no limit */
    double cpus;           /* 0 = no limit; 1.5 = one and a half cores */
} sg_cg_limits;

typedef struct sg_cg_stats {
    uint64_t cpu_ns;        /* cpu time used (user + system) */
    uint64_t memory_peak;   /* bytes; 0 if the host cannot tell */
    uint64_t oom_kills;     /* OOM kills counted so far */
    uint64_t pids_max_hits; /* fork failures due to pids.max so far */
    uint64_t nprocs;        /* processes in it now */
} sg_cg_stats;

typedef struct sg_cgroup sg_cgroup;

/* Reads /proc/self/mountinfo once and reports the layout. */
sg_cg_layout sg_cgroup_layout(void);
const char *sg_cgroup_layout_name(sg_cg_layout l);
/* The layout this sandbox cgroup was created or opened with. */
sg_cg_layout sg_cgroup_get_layout(const sg_cgroup *cg);

/* Creates sandglass/<id> in every hierarchy in use and applies limits.
 * Fails (and removes what it made) if a limit cannot be applied. */
sg_cgroup *sg_cgroup_create(const char *id, const sg_cg_limits *lim, sg_err *err);
/* Applies limits to an existing sandbox cgroup (a pooled sandbox takes
 * its creator's limits when it is claimed). Zero fields are left alone. */
int sg_cgroup_set_limits(sg_cgroup *cg, const sg_cg_limits *lim, sg_err *err);
/* Opens an existing sandbox cgroup (destroy/gc after a crash). NULL+ENOENT if absent. */
sg_cgroup *sg_cgroup_open(const char *id, sg_err *err);
void sg_cgroup_free(sg_cgroup *cg);

/* Creates <id>/<leaf> in every hierarchy. leaf NULL = the sandbox cgroup itself. */
int sg_cgroup_leaf_create(sg_cgroup *cg, const char *leaf, sg_err *err);
/* Opens cgroup.procs of <id>/<leaf> (leaf NULL: <id>) in every hierarchy for
 * writing; a process joins by writing "0" into each (works from inside the
 * sandbox's namespaces: the fds point at the host's cgroupfs). Returns the
 * number of fds (<= SG_CG_MAX_FDS), all O_CLOEXEC. */
int sg_cgroup_procs_fds(sg_cgroup *cg, const char *leaf, int fds[SG_CG_MAX_FDS], sg_err *err);
/* Like sg_cgroup_procs_fds, for a helper process the supervisor runs on
 * the sandbox's behalf (the checkpoint worker): the leaf
 * <id>:supervisor/<leaf>, made on every hierarchy, when the sandbox's
 * supervisor has its cgroup: charged to that sandbox's supervisor account
 * and bounded by its limits, never under the learner's memory limit or
 * CPU quota (a learner at its limit cannot starve it or make it the
 * learner's OOM, and its OOM is never the learner's). Else (rootless
 * without one) <id>/<leaf> where the leaf is, <id> on the others. */
int sg_cgroup_join_fds(sg_cgroup *cg, const char *leaf, int fds[SG_CG_MAX_FDS], sg_err *err);
/* Kills the processes of a helper's leaf wherever sg_cgroup_join_fds
 * put them (and where an earlier version did: <id>/<leaf>); a leaf that
 * is not there is no error. timeout_ms as sg_cgroup_kill's. */
int sg_cgroup_helper_kill(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err);
/* Moves a host pid into <id>/<leaf> in every hierarchy. */
int sg_cgroup_attach(sg_cgroup *cg, const char *leaf, pid_t pid, sg_err *err);

/* Fast leaves: when the sandbox has a v2 hierarchy (v2 or split), exec
 * leaves are made on it alone and processes are started in them with
 * clone3(CLONE_INTO_CGROUP), which needs no migration (a migration waits
 * for an RCU grace period, ~8 ms here); the v1 controllers then apply at
 * the sandbox level, where the limits are. Returns -1 without a v2
 * hierarchy. */
int sg_cgroup_set_fast_leaves(sg_cgroup *cg, bool on);
/* O_DIRECTORY fd of <id>/<leaf> on the v2 hierarchy, for CLONE_INTO_CGROUP. */
int sg_cgroup_leaf_dirfd(sg_cgroup *cg, const char *leaf, sg_err *err);
/* The cpu.stat of a v2 leaf opened ahead (dirfd from sg_cgroup_leaf_dirfd;
 * -1 if it cannot be opened), and its CPU time in ns, read through that fd. */
int sg_cgroup_cpu_stat_open(int dirfd);
int sg_cgroup_cpu_stat_read(int fd, uint64_t *cpu_ns, sg_err *err);
/* The cgroup.events of a v2 leaf opened ahead (-1 if it cannot be), and
 * whether the leaf holds a process, read through that fd: 1 or 0, -1 on
 * error. */
int sg_cgroup_events_open(int dirfd);
int sg_cgroup_events_populated(int fd, sg_err *err);

/* Kills every process in <id>/<leaf> (leaf NULL: whole sandbox, recursive)
 * with SIGKILL, also ones that fork meanwhile (v2: cgroup.kill; v1: freeze,
 * kill, thaw, repeat), and waits until none is left or timeout_ms passes
 * (<= 0: SG_CG_KILL_DEFAULT_MS). Returns 0 only once the cgroup is proven
 * empty (zombies do not count: they hold no resources and are gone from
 * cgroup.procs); ETIMEDOUT names what is left. timeout_ms < 0 with v2's
 * cgroup.kill: the kill is written and not waited for (0: written);
 * without cgroup.kill (v1's freeze, kill, thaw loop), as <= 0. */
int sg_cgroup_kill(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err);
/* 1 populated, 0 empty (recursive), -1 error. */
int sg_cgroup_populated(sg_cgroup *cg, const char *leaf, sg_err *err);
/* Freezes <id>/<leaf> with its subtree, or thaws it and every descendant
 * frozen on its own, and waits until the kernel reports it frozen (thawed);
 * ETIMEDOUT after 5 s. */
int sg_cgroup_freeze(sg_cgroup *cg, const char *leaf, bool frozen, sg_err *err);
/* On v2 a leaf has no controllers enabled: its memory/pids figures read 0;
 * ask for leaf NULL for the sandbox's. On v1 every figure is per leaf. */
int sg_cgroup_stats(sg_cgroup *cg, const char *leaf, sg_cg_stats *out, sg_err *err);
/* Only the sandbox's OOM-kill and pids.max counters: the cheap read an
 * exec takes before and after it runs. */
int sg_cgroup_counters(sg_cgroup *cg, uint64_t *oom_kills, uint64_t *pids_max_hits, sg_err *err);
/* Host pids in <id>/<leaf>, recursive. Caller frees *pids. */
int sg_cgroup_pids(sg_cgroup *cg, const char *leaf, pid_t **pids, size_t *n, sg_err *err);

/* Names of the leaves under <id> (a restarted supervisor adopts them).
 * NULL-terminated; caller frees. */
char **sg_cgroup_leaves(sg_cgroup *cg, sg_err *err);
/* rmdir <id>/<leaf>; EBUSY if populated. */
int sg_cgroup_leaf_remove(sg_cgroup *cg, const char *leaf, sg_err *err);
/* Removes every leaf and the sandbox cgroup in every hierarchy (after kill). */
int sg_cgroup_remove(sg_cgroup *cg, sg_err *err);

/* Sandbox ids that have a cgroup under sandglass/ (for gc). Caller frees
 * the strv (NULL-terminated). */
char **sg_cgroup_list(sg_err *err);

/* Ownership, kept where the kernel keeps the cgroup: an extended attribute
 * (SG_CG_OWNER_XATTR) on the sandbox's cgroup directory in every hierarchy,
 * holding the owner's state directory. Cleanup paths (gc) touch a cgroup
 * only when its mark names their own state directory, so two state
 * directories side by side never destroy each other's sandboxes. */
#define SG_CG_OWNER_XATTR "trusted.sandglass.owner"
#define SG_CG_OWNER_MAX 4096
int sg_cgroup_set_owner(sg_cgroup *cg, const char *owner, sg_err *err);
/* The mark of sandbox id's cgroup into buf: 1 when it has one, 0 when it
 * has none (made before marks, or where trusted xattrs are refused), -1
 * with err when the cgroup cannot be read (err->code ENOENT: it is gone). */
int sg_cgroup_owner(const char *id, char *buf, size_t size, sg_err *err);

/* The supervisor's own cgroup: sandglass/<id>:supervisor (':' is never in
 * a sandbox id), beside its sandbox's, never inside it: a kill, a freeze
 * or the populated proof of the sandbox never reaches the supervisor, and
 * the learner's CPU quota or OOM never throttles or kills it; its own
 * limits bound what it spends on the sandbox's behalf, and its figures
 * (cpu.stat, cpuacct.usage, memory) say what that was.
 * join: makes it (or finds it: a takeover), applies lim, marks its owner
 * like the sandbox's, and moves the calling process into it; opens
 * sandglass/:host, shared by all, for sg_cgroup_supervisor_leave.
 * leave: moves the calling process to sandglass/:host (never back to the
 * cgroups the supervisor came from: not ours to touch); async-signal-safe,
 * for a forked child that serves the host (the uplink daemon).
 * remove: after the supervisor has exited (waits a moment for an exiting
 * one); an absent one is fine. */
#define SG_CG_SUPERVISOR_SUFFIX ":supervisor"
int sg_cgroup_supervisor_join(const char *id, const sg_cg_limits *lim, const char *owner, sg_err *err);
void sg_cgroup_supervisor_leave(void);
/* Moves the calling process into sandglass/:host (made if need be): a
 * process of ours that serves the host and was not started by a
 * supervisor (the disk's reclaimer, disk.h). */
int sg_cgroup_host_join(sg_err *err);
int sg_cgroup_supervisor_remove(const char *id, sg_err *err);
/* leave, then remove: a supervisor that ends with no one to remove it. */
void sg_cgroup_supervisor_release(const char *id);
char *sg_cgroup_supervisor_path(const char *id);
/* The host's part, made at the start of the host daemon (`sandglass
 * host`): sandglass/ on every hierarchy in use, v2 controllers enabled
 * for its children, and sandglass/:host. Nothing outside sandglass/ is
 * made; on v2 the root's subtree_control gains the controllers sandboxes
 * use, as the first create would. */
int sg_cgroup_host_setup(sg_err *err);

/* Path of <id>/<leaf> on the v2 mount if any, else on the first v1 hierarchy
 * (diagnostics and tests). Caller frees. */
char *sg_cgroup_path(sg_cgroup *cg, const char *leaf);
/* The file of the sandbox's CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us),
 * which sg_cgroup_kill lifts while it kills; NULL without a cpu
 * controller. For a kill elsewhere (the kill switch's thread). Caller frees. */
char *sg_cgroup_cpu_quota_path(sg_cgroup *cg);

#endif

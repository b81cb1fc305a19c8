/* cgroup_internal: the cgroup module's private interface, shared by its
 * files and by nothing else (cgroup.h is the public one):
 *   cgroup_layout.c  the mount table, the layout, creating and opening a
 *                    sandbox's cgroups and their limits
 *   cgroup_knob.c    knob files (read, write, keys), names, the recursive
 *                    walk of a subtree (procs, sums, removal)
 *   cgroup_kill.c    freeze, populated, the pids, and kill
 *   cgroup_stats.c   the stats and the counters kept open
 *   cgroup.c         leaves and joining, removal, listing, ownership
 *   cgroup_supervisor.c  the supervisor's own cgroup beside its sandbox's
 * Names shared between these files carry the cg_ prefix. */
#ifndef SG_CGROUP_INTERNAL_H
#define SG_CGROUP_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/bounds.h"
#include "base/err.h"
#include "sandbox/cgroup.h"

/* Controllers we use. cpuacct and freezer exist only on v1 (v2 has them
 * built in: cpu.stat and cgroup.freeze). */
enum { C_MEMORY, C_PIDS, C_CPU, C_CPUACCT, C_FREEZER, C_N };

#define CG_CPU_PERIOD_US 100000
#define CG_CPU_MIN_QUOTA_US 1000 /* the kernel refuses less */
#define CG_CPUS_MAX 4096.0
#define CG_KNOB_MAX 4096         /* the knob files we parse are one page at most */
#define CG_COUNTER_TEXT_MAX 512  /* memory.oom_control, memory.events, pids.events, cpu.stat */
#define CG_FREEZE_TIMEOUT_MS 5000
#define CG_NAP_MAX_US 5000       /* longest sleep between polls of a knob */
#define CG_KILL_NAP_MAX_US 1000  /* ... while waiting for killed tasks: they take ~0.5 ms */
#define CG_KILL_SETTLE_MS 20     /* v1: wait this long for SIGKILLed tasks before another round */

typedef struct cg_mount {
    char path[PATH_MAX];
    char dev[32];     /* major:minor, to skip bind mounts of one hierarchy */
    unsigned ctrls;   /* bit per C_*: bound here (v1) or in cgroup.controllers (v2) */
    bool v2;
    bool cpuset;      /* v1 hierarchy co-mounted with cpuset: children need cpus/mems */
} cg_mount;

/* The hierarchies one sandbox uses; index 0 is the v2 one when there is one. */
typedef struct cg_set {
    sg_cg_layout layout;
    size_t n;
    const cg_mount *h[SG_CG_MAX_FDS];
    int at[C_N]; /* index into h per controller, -1 if unavailable */
    int v2;      /* index of the v2 hierarchy, -1 if none */
} cg_set;

struct sg_cgroup {
    char *id;
    cg_set s;
    bool fast_leaves; /* leaves only on the v2 hierarchy (sg_cgroup_set_fast_leaves) */
    int counter_fd[2]; /* the OOM and pids counters, kept open (sg_cgroup_counters) */
};

/* Whether hierarchy i holds <id>/<leaf>: with fast leaves, a leaf exists
 * only on the v2 hierarchy. */
static inline bool cg_has_leaf(const sg_cgroup *cg, size_t i, const char *leaf)
{
    return !leaf || !cg->fast_leaves || (int)i == cg->s.v2;
}

/* ---- cgroup_layout.c ---- */

/* The hierarchies this process would use now (SANDGLASS_CGROUP_LAYOUT). */
void cg_select_set(cg_set *s);
void cg_freep(sg_cgroup **cg);
/* Bits (1 << C_*) of the controllers named in list, split at any of seps. */
unsigned cg_parse_ctrls(const char *list, const char *seps, bool *cpuset);
/* A handle on sandglass/<name> (not made, not checked: callers check). */
sg_cgroup *cg_new(const char *name, sg_err *err);
/* sandglass/<id>:supervisor made on every hierarchy (roots first), or
 * opened when it exists; no limits, no process moved. */
sg_cgroup *cg_supervisor_make(const char *id, sg_err *err);
/* sandglass/ in every hierarchy, with v2 controllers enabled for its children. */
int cg_make_roots(sg_cgroup *cg, sg_err *err);
int cg_mkdir(const cg_mount *m, const char *parent, const char *dir, bool allow_exist, bool *made,
             sg_err *err);

/* ---- cgroup_knob.c ---- */

int cg_check_name(const char *what, const char *s, sg_err *err);
int cg_check_leaf(const char *leaf, sg_err *err);
char *cg_dir(const sg_cgroup *cg, size_t i, const char *leaf);
size_t cg_primary(const sg_cgroup *cg);
int cg_knob_write(const char *dir, const char *knob, const char *val, sg_err *err);
bool cg_knob_exists(const char *dir, const char *knob);
char *cg_knob_read(const char *dir, const char *knob, bool optional, bool *missing, sg_err *err);
int cg_read_u64(const char *dir, const char *knob, bool optional, uint64_t *out, sg_err *err);
int cg_find_key(const char *s, const char *dir, const char *knob, const char *key, uint64_t *out,
                sg_err *err);
int cg_read_key(const char *dir, const char *knob, const char *key, bool optional, uint64_t *out,
                sg_err *err);
int cg_read_key_kept(sg_cgroup *cg, int slot, const char *dir, const char *knob, const char *key,
                     uint64_t *out, sg_err *err);
void cg_nap(unsigned *us, unsigned max_us);
uint64_t cg_deadline_after(int ms);

/* fn returns < 0 on error, > 0 to stop the walk early (returned as is). */
typedef int (*walk_fn)(const char *dir, void *ud, sg_err *err);

int cg_walk(const char *dir, int depth, bool post, walk_fn fn, void *ud, sg_err *err);

typedef struct pid_list {
    pid_t *v;
    size_t n, cap;
    bool any_only; /* stop at the first pid (populated check) */
} pid_list;

int cg_list_procs(const char *dir, pid_list *l, sg_err *err);
/* v1 counts oom kills and pids.max hits only in the cgroup of the victim or
 * forker, not its ancestors: sum the subtree. */
int cg_read_key_subtree(const char *dir, const char *knob, const char *key, uint64_t *out, sg_err *err);
int cg_rmdir_tree(const char *dir, sg_err *err);

#endif

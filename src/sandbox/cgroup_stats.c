/* cgroup_stats: a cgroup's stats and counters (see cgroup.h;
 * cgroup_internal.h for the files). */
#include "sandbox/cgroup_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"

/* ---------- stats ---------- */

int sg_cgroup_stats(sg_cgroup *cg, const char *leaf, sg_cg_stats *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    int i;
    if (leaf && cg->fast_leaves) {
        /* A v2-only leaf: cpu time from its cpu.stat; memory and pids are
         * the sandbox's (ask with leaf NULL). */
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        uint64_t us = 0;
        if (cg_read_key(dir, "cpu.stat", "usage_usec", true, &us, err) < 0)
            return -1;
        out->cpu_ns = us * 1000;
        return 0;
    }
    if ((i = cg->s.at[C_CPUACCT]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
        if (cg_read_u64(dir, "cpuacct.usage", false, &out->cpu_ns, err) < 0)
            return -1;
    } else if (cg->s.v2 >= 0) {
        /* cpu.stat's usage_usec is there even without the cpu controller */
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        uint64_t us;
        if (cg_read_key(dir, "cpu.stat", "usage_usec", true, &us, err) < 0)
            return -1;
        out->cpu_ns = us * 1000;
    }
    if ((i = cg->s.at[C_MEMORY]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
        if (cg->s.h[i]->v2) {
            if (cg_read_u64(dir, "memory.peak", true, &out->memory_peak, err) < 0 ||
                cg_read_key(dir, "memory.events", "oom_kill", true, &out->oom_kills, err) < 0)
                return -1;
        } else {
            if (cg_read_u64(dir, "memory.max_usage_in_bytes", false, &out->memory_peak, err) < 0 ||
                cg_read_key_subtree(dir, "memory.oom_control", "oom_kill", &out->oom_kills, err) < 0)
                return -1;
        }
    }
    if ((i = cg->s.at[C_PIDS]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
        if (cg->s.h[i]->v2) {
            if (cg_read_key(dir, "pids.events", "max", true, &out->pids_max_hits, err) < 0)
                return -1;
        } else if (cg_read_key_subtree(dir, "pids.events", "max", &out->pids_max_hits, err) < 0) {
            return -1;
        }
    }
    pid_t *pids = NULL;
    size_t n = 0;
    if (sg_cgroup_pids(cg, leaf, &pids, &n, err) < 0)
        return -1;
    free(pids);
    out->nprocs = n;
    return 0;
}

int sg_cgroup_set_fast_leaves(sg_cgroup *cg, bool on)
{
    if (on && cg->s.v2 < 0)
        return -1;
    cg->fast_leaves = on;
    return 0;
}

int sg_cgroup_leaf_dirfd(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    if (cg->s.v2 < 0)
        return sg_err_set(err, ENOTSUP, "no cgroup v2 hierarchy: cannot clone into a cgroup");
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", dir);
    return fd;
}

int sg_cgroup_cpu_stat_open(int dirfd)
{
    return openat(dirfd, "cpu.stat", O_RDONLY | O_CLOEXEC);
}

int sg_cgroup_cpu_stat_read(int fd, uint64_t *cpu_ns, sg_err *err)
{
    char buf[CG_COUNTER_TEXT_MAX];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return sg_err_sys(err, "cannot read a leaf's cpu.stat");
    buf[n] = '\0';
    uint64_t us = 0;
    if (cg_find_key(buf, "leaf", "cpu.stat", "usage_usec", &us, err) < 0)
        return -1;
    *cpu_ns = us * 1000;
    return 0;
}

int sg_cgroup_events_open(int dirfd)
{
    return openat(dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
}

int sg_cgroup_events_populated(int fd, sg_err *err)
{
    char buf[CG_COUNTER_TEXT_MAX];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return sg_err_sys(err, "cannot read a leaf's cgroup.events");
    buf[n] = '\0';
    /* A missing key must not read as "empty": the leaf would be reused. */
    const char *p = strstr(buf, "populated ");
    if (!p || (p != buf && p[-1] != '\n') || (p[10] != '0' && p[10] != '1'))
        return sg_err_set(err, EINVAL, "a leaf's cgroup.events has no populated key");
    return p[10] == '1';
}

int sg_cgroup_counters(sg_cgroup *cg, uint64_t *oom_kills, uint64_t *pids_max_hits, sg_err *err)
{
    *oom_kills = *pids_max_hits = 0;
    int i;
    if ((i = cg->s.at[C_MEMORY]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        /* v1 counts per cgroup: sum the leaves, unless they live on v2 */
        int r = cg->s.h[i]->v2 ? cg_read_key_kept(cg, 0, dir, "memory.events", "oom_kill", oom_kills, err)
                : cg->fast_leaves ? cg_read_key_kept(cg, 0, dir, "memory.oom_control", "oom_kill", oom_kills, err)
                                  : cg_read_key_subtree(dir, "memory.oom_control", "oom_kill", oom_kills, err);
        if (r < 0)
            return -1;
    }
    if ((i = cg->s.at[C_PIDS]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        int r = cg->s.h[i]->v2 ? cg_read_key_kept(cg, 1, dir, "pids.events", "max", pids_max_hits, err)
                : cg->fast_leaves ? cg_read_key_kept(cg, 1, dir, "pids.events", "max", pids_max_hits, err)
                                  : cg_read_key_subtree(dir, "pids.events", "max", pids_max_hits, err);
        if (r < 0)
            return -1;
    }
    return 0;
}


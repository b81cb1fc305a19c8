/* cgroup_kill: freezing, the populated check, the pids, and the kill of a
 * cgroup's processes (see cgroup.h; cgroup_internal.h for the files). */
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

/* ---------- freeze, populated, kill ---------- */

static bool v2_has(const sg_cgroup *cg, const char *leaf, const char *knob)
{
    if (cg->s.v2 < 0)
        return false;
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
    return cg_knob_exists(dir, knob);
}

static int freeze_until(sg_cgroup *cg, const char *leaf, bool frozen, uint64_t deadline, sg_err *err)
{
    unsigned us = 50;
    if (v2_has(cg, leaf, "cgroup.freeze")) {
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        if (cg_knob_write(dir, "cgroup.freeze", frozen ? "1" : "0", err) < 0)
            return -1;
        for (;;) {
            uint64_t v;
            if (cg_read_key(dir, "cgroup.events", "frozen", false, &v, err) < 0)
                return -1;
            if ((v != 0) == frozen)
                return 0;
            if (sg_now_mono_ns() >= deadline)
                return sg_err_set(err, ETIMEDOUT, "%s: still %s", dir, frozen ? "not frozen" : "frozen");
            cg_nap(&us, CG_NAP_MAX_US);
        }
    }
    if (cg->s.at[C_FREEZER] < 0)
        return sg_err_set(err, ENOTSUP, "cannot freeze: no v2 cgroup.freeze and no v1 freezer controller (cgroup layout %s)",
                          sg_cgroup_layout_name(cg->s.layout));
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.at[C_FREEZER], leaf);
    const char *want = frozen ? "FROZEN" : "THAWED";
    if (cg_knob_write(dir, "freezer.state", want, err) < 0)
        return -1;
    for (;;) {
        bool missing;
        sg_autofree char *st = cg_knob_read(dir, "freezer.state", false, &missing, err);
        if (!st)
            return -1;
        if (strncmp(st, want, strlen(want)) == 0)
            return 0;
        if (sg_now_mono_ns() >= deadline)
            return sg_err_set(err, ETIMEDOUT, "%s: freezer.state still %.20s", dir, st);
        cg_nap(&us, CG_NAP_MAX_US);
    }
}

typedef struct thaw_ctx {
    const char *knob, *value;
} thaw_ctx;

static int thaw_one(const char *dir, void *ud, sg_err *err)
{
    thaw_ctx *c = ud;
    sg_err e = {0};
    if (cg_knob_write(dir, c->knob, c->value, &e) < 0 && e.code != ENOENT) {
        *err = e;
        return -1;
    }
    return 0;
}

/* A cgroup frozen on its own stays frozen when its parent thaws (v1
 * self_freezing, v2 cgroup.freeze): thaw every descendant too, or SIGKILLed
 * tasks in it never die. */
static int thaw_tree(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    bool v2 = v2_has(cg, leaf, "cgroup.freeze");
    int i = v2 ? cg->s.v2 : cg->s.at[C_FREEZER];
    if (i < 0)
        return 0;
    sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
    thaw_ctx c = {v2 ? "cgroup.freeze" : "freezer.state", v2 ? "0" : "THAWED"};
    if (cg_walk(dir, 0, false, thaw_one, &c, err) < 0)
        return -1;
    return freeze_until(cg, leaf, false, cg_deadline_after(CG_FREEZE_TIMEOUT_MS), err);
}

int sg_cgroup_freeze(sg_cgroup *cg, const char *leaf, bool frozen, sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    if (!frozen)
        return thaw_tree(cg, leaf, err);
    return freeze_until(cg, leaf, frozen, cg_deadline_after(CG_FREEZE_TIMEOUT_MS), err);
}

int sg_cgroup_populated(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    if (cg->s.v2 >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        uint64_t v;
        if (cg_read_key(dir, "cgroup.events", "populated", false, &v, err) < 0)
            return -1;
        return v != 0;
    }
    sg_autofree char *dir = cg_dir(cg, cg_primary(cg), leaf);
    pid_list l = {.any_only = true};
    if (cg_list_procs(dir, &l, err) < 0)
        return -1;
    return l.n != 0;
}

int sg_cgroup_pids(sg_cgroup *cg, const char *leaf, pid_t **pids, size_t *n, sg_err *err)
{
    *pids = NULL;
    *n = 0;
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    sg_autofree char *dir = cg_dir(cg, cg_primary(cg), leaf);
    pid_list l = {0};
    if (cg_list_procs(dir, &l, err) < 0) {
        free(l.v);
        return -1;
    }
    *pids = l.v;
    *n = l.n;
    return 0;
}

static int timed_out(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err)
{
    pid_t *pids = NULL;
    size_t n = 0;
    sg_err e = {0};
    sg_cgroup_pids(cg, leaf, &pids, &n, &e);
    sg_autofree char *dir = cg_dir(cg, cg_primary(cg), leaf);
    sg_err_set(err, ETIMEDOUT, "%s: %zu process(es) still there %d ms after SIGKILL (first pid %d)", dir, n,
               timeout_ms, n ? (int)pids[0] : 0);
    free(pids);
    return -1;
}

/* v2: the kernel kills the whole subtree, forks in flight included; then
 * wait for cgroup.events to say "populated 0". A short sleep loop, not
 * inotify: closing an inotify fd waits for an RCU grace period (~15 ms
 * here), longer than the tasks take to die (~0.5 ms), and the kernel
 * rate-limits cgroup.events notifications anyway. */
static int kill_v2(sg_cgroup *cg, const char *leaf, int timeout_ms, uint64_t deadline, sg_err *err)
{
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
    if (cg_knob_write(dir, "cgroup.kill", "1", err) < 0)
        return -1;
    unsigned us = 50;
    for (;;) {
        uint64_t pop;
        if (cg_read_key(dir, "cgroup.events", "populated", false, &pop, err) < 0)
            return -1;
        if (!pop)
            return 0;
        if (sg_now_mono_ns() >= deadline)
            return timed_out(cg, leaf, timeout_ms, err);
        cg_nap(&us, CG_KILL_NAP_MAX_US);
    }
}

/* v1 (or v2 without cgroup.kill): freeze so nothing forks, SIGKILL every
 * listed pid, thaw so the signals are delivered, repeat until a frozen
 * listing is empty. A frozen task cannot exit and be reaped by a parent
 * inside, so its pid is not reused under us. */
static int kill_loop(sg_cgroup *cg, const char *leaf, int timeout_ms, uint64_t deadline, sg_err *err)
{
    bool can_freeze = v2_has(cg, leaf, "cgroup.freeze") || cg->s.at[C_FREEZER] >= 0;
    sg_autofree char *dir = cg_dir(cg, cg_primary(cg), leaf);
    for (;;) {
        if (can_freeze) {
            sg_err fe = {0};
            /* a task in uninterruptible sleep can hold FREEZING: kill anyway */
            uint64_t until = cg_deadline_after(100);
            if (freeze_until(cg, leaf, true, until < deadline ? until : deadline, &fe) < 0 && fe.code != ETIMEDOUT) {
                *err = fe;
                return -1;
            }
        }
        pid_list l = {0};
        if (cg_list_procs(dir, &l, err) < 0) {
            free(l.v);
            return -1;
        }
        for (size_t i = 0; i < l.n; i++)
            kill(l.v[i], SIGKILL);
        free(l.v);
        if (can_freeze && thaw_tree(cg, leaf, err) < 0)
            return -1;
        if (l.n == 0)
            return 0;
        /* give the killed tasks a moment to exit before the next round */
        uint64_t settle = cg_deadline_after(CG_KILL_SETTLE_MS);
        unsigned us = 50;
        for (;;) {
            int pop = sg_cgroup_populated(cg, leaf, err);
            if (pop < 0)
                return -1;
            if (pop == 0)
                return 0;
            uint64_t now = sg_now_mono_ns();
            if (now >= deadline)
                return timed_out(cg, leaf, timeout_ms, err);
            if (now >= settle)
                break;
            cg_nap(&us, CG_KILL_NAP_MAX_US);
        }
    }
}

/* A cgroup at its CPU quota is throttled until the next period, and a
 * killed task must run to exit: an abort of 50 busy processes under
 * --cpus 0.1 took 0.8-1.1 s here, 44-72 ms without a limit. So the quota
 * (which sits on the sandbox's cgroup) is lifted for the kill and put back
 * after it: the sandbox's other leaves run unthrottled for those
 * milliseconds. The limit as it was goes into saved ("" when there is
 * none, or nothing could be read); best effort: a kill never fails for it. */
static void cpu_unthrottle(sg_cgroup *cg, char *saved, size_t size)
{
    saved[0] = '\0';
    int i = cg->s.at[C_CPU];
    if (i < 0)
        return;
    bool v2 = cg->s.h[i]->v2;
    const char *knob = v2 ? "cpu.max" : "cpu.cfs_quota_us";
    sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
    sg_autofree char *path = sg_strdup_printf("%s/%s", dir, knob);
    size_t len = 0;
    sg_autofree char *cur = sg_read_file(path, 64, &len, NULL);
    if (!cur)
        return;
    cur[strcspn(cur, "\n")] = '\0';
    if ((v2 && strncmp(cur, "max", 3) == 0) || (!v2 && strcmp(cur, "-1") == 0))
        return; /* no limit */
    if (cg_knob_write(dir, knob, v2 ? "max" : "-1", NULL) == 0)
        snprintf(saved, size, "%s", cur);
}

char *sg_cgroup_cpu_quota_path(sg_cgroup *cg)
{
    int i = cg->s.at[C_CPU];
    if (i < 0)
        return NULL;
    sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
    return sg_strdup_printf("%s/%s", dir, cg->s.h[i]->v2 ? "cpu.max" : "cpu.cfs_quota_us");
}

static void cpu_restore(sg_cgroup *cg, const char *saved)
{
    if (!saved[0])
        return;
    int i = cg->s.at[C_CPU];
    sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
    cg_knob_write(dir, cg->s.h[i]->v2 ? "cpu.max" : "cpu.cfs_quota_us", saved, NULL);
}

int sg_cgroup_kill(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    if (timeout_ms < 0 && v2_has(cg, leaf, "cgroup.kill")) { /* killed, not waited for */
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        return cg_knob_write(dir, "cgroup.kill", "1", err);
    }
    if (timeout_ms <= 0)
        timeout_ms = SG_CG_KILL_DEFAULT_MS;
    uint64_t deadline = cg_deadline_after(timeout_ms);
    char cpu_saved[64];
    cpu_unthrottle(cg, cpu_saved, sizeof cpu_saved);
    int r = v2_has(cg, leaf, "cgroup.kill") ? kill_v2(cg, leaf, timeout_ms, deadline, err)
                                             : kill_loop(cg, leaf, timeout_ms, deadline, err);
    cpu_restore(cg, cpu_saved);
    if (r < 0)
        sg_err_prefix(err, "cannot kill the processes of sandbox %s%s%s", cg->id, leaf ? " exec " : "",
                      leaf ? leaf : "");
    return r;
}


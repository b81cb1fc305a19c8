/* sandglass gc: removes what crashed supervisors left behind: sandboxes
 * whose supervisor is dead (their processes, cgroups and state), and
 * with --orphan-cgroups, cgroups under sandglass/ that no sandbox of this
 * state directory owns. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "sandbox/cgroup.h"
#include "sandbox/disk.h"
#include "state/state.h"

#define GC_RECLAIM_WAIT_MS 30000 /* a reclaimer at work (a large image's discards) */

static void gc_one(const char *id, int *removed, int *failures)
{
    sg_err err = {0};
    if (sg_cli_cleanup_dead(id, true, &err) < 0) {
        sg_cli_sayf("gc", "%s", err.msg);
        (*failures)++;
    } else {
        (*removed)++;
    }
}

/* A sandbox whose supervisor died: a live one (its init runs: the
 * learner's processes and files are there) is taken over by a new
 * supervisor, never destroyed; one whose init died too is removed. */
static void gc_dead(const char *id, int *removed, int *revived, int *failures)
{
    sg_err err = {0};
    int r = sg_revive_takeover(id, "gc", &err);
    if (r >= 0) {
        printf("gc: %s: its supervisor had died and its init lives: %s\n", id,
               r ? "a new supervisor took it over" : "another supervisor serves it now");
        (*revived)++;
    } else if (err.code == ESRCH || err.code == ENOENT) { /* its init is dead, or no record */
        gc_one(id, removed, failures);
    } else {
        sg_cli_sayf("gc", "%s: %s", id, err.msg);
        (*failures)++;
    }
}

/* 1 when the cgroup of sandbox id carries this state directory's owner
 * mark; 0 (and a line saying why it is left alone) when it has none or
 * another one. */
static int gc_owns(const char *id, sg_err *err)
{
    char mark[SG_CG_OWNER_MAX];
    int rc = sg_cgroup_owner(id, mark, sizeof mark, err);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        printf("gc: cgroup sandglass/%s has no owner mark: left alone (remove it by hand if it is yours)\n", id);
        return 0;
    }
    bool same = sg_state_is_ours(mark);
    if (!same)
        printf("gc: cgroup sandglass/%s belongs to the state directory %s: left alone\n", id, mark);
    return same;
}

int sg_cmd_gc(int argc, char **argv)
{
    bool orphans = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: sandglass gc [--orphan-cgroups]\n"
                   "\n"
                   "Removes what crashed supervisors left behind in this state directory:\n"
                   "sandboxes whose supervisor and init are dead (processes, cgroups, state; a\n"
                   "captured one's spool is kept for 'sandglass flush'). A sandbox whose\n"
                   "supervisor died while its init lives is taken over by a new supervisor,\n"
                   "never removed. Disks a destroy's reclaimer left in <state>/reclaim/ are\n"
                   "released.\n"
                   "\n"
                   "  --orphan-cgroups   also cgroups under sandglass/ with no state directory,\n"
                   "                     when their owner mark names this state directory, and\n"
                   "                     the disks (/run/sandglass-disk) of such sandboxes\n");
            return 0;
        }
        if (strcmp(argv[i], "--orphan-cgroups") == 0) {
            orphans = true;
            continue;
        }
        return sg_cli_usage("gc", "unknown option '%s'", argv[i]);
    }
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("gc", err.msg);
    int failures = 0, removed = 0, revived = 0;
    sg_autostrv char **ids = sg_state_list(&err);
    for (char **p = ids; p && *p; p++) {
        sg_sandbox_meta m;
        bool dead = true;
        if (sg_sandbox_meta_load(*p, &m, NULL) == 0) {
            /* The lock, not the pid: a supervisor still exiting is dead. */
            dead = m.supervisor_pid > 0 && sg_state_supervisor_held(*p, NULL) == 0;
            /* A record that never got a supervisor is from a create that died. */
            if (m.supervisor_pid == 0) {
                sg_autofree char *sock = sg_state_sandbox_path(*p, "meta.json");
                struct stat st;
                dead = stat(sock, &st) == 0 && st.st_mtime + 60 < time(NULL);
            }
            sg_sandbox_meta_clear(&m);
        }
        if (dead)
            gc_dead(*p, &removed, &revived, &failures);
    }
    /* Cgroups with no state directory: a sandbox whose state was lost. Only
     * on request, and only those whose owner mark (cgroup.h) names this
     * state directory: another state directory's sandboxes look the same. */
    sg_autostrv char **cgs = orphans ? sg_cgroup_list(&err) : NULL;
    for (char **p = cgs; p && *p; p++) {
        sg_autofree char *dir = sg_state_sandbox_path(*p, NULL);
        struct stat st;
        if (stat(dir, &st) == 0)
            continue;
        int own = gc_owns(*p, &err);
        if (own < 0 && err.code == ENOENT)
            continue; /* destroyed since it was listed */
        if (own < 0) {
            sg_cli_sayf("gc", "%s", err.msg);
            failures++;
        } else if (own) {
            gc_one(*p, &removed, &failures);
        }
    }
    /* Their disks too: the mounts live outside the state directory. */
    int disks = orphans ? sg_disk_sweep() : 0;
    if (disks)
        printf("gc: %d disk(s) of sandboxes without a state directory detached\n", disks);
    /* Disks whose release a reclaimer began (destroy, or the cleanups
     * above) and did not finish: it died (disk.h). One at work is waited
     * for, a while. */
    int reclaimed = sg_disk_reclaim(GC_RECLAIM_WAIT_MS);
    if (reclaimed)
        printf("gc: %d disk(s) of destroyed sandboxes reclaimed\n", reclaimed);
    printf("gc: removed %d, taken over %d, failed %d\n", removed, revived, failures);
    return failures ? 1 : 0;
}

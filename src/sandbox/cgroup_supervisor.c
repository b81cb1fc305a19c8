/* cgroup_supervisor: the supervisor's own cgroup, sandglass/<id>:supervisor,
 * beside its sandbox's (see cgroup.h; cgroup_internal.h for the files). */
#include "sandbox/cgroup_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"

#define SV_REMOVE_WAIT_MS 2000 /* an exiting supervisor leaves its cgroup within this */

/* cgroup.procs of sandglass/:host (a name no sandbox id can take), kept
 * open: where a process of ours that serves the host rather than one
 * sandbox goes when it leaves a supervisor's cgroup (the uplink daemon a
 * supervisor starts; a supervisor that removes its own cgroup as it
 * ends). Never back to the cgroups the supervisor came from: those are
 * not ours to touch. */
#define HOST_NAME ":host"
static struct {
    int fd[SG_CG_MAX_FDS];
    size_t n;
} g_home;

static void home_open(sg_cgroup *host)
{
    for (size_t i = 0; i < g_home.n; i++)
        close(g_home.fd[i]);
    g_home.n = 0;
    for (size_t i = 0; i < host->s.n; i++) {
        sg_autofree char *parent = sg_strdup_printf("%s/" SG_CG_ROOT_NAME, host->s.h[i]->path);
        sg_autofree char *dir = cg_dir(host, i, NULL);
        sg_autofree char *p = sg_strdup_printf("%s/cgroup.procs", dir);
        bool made;
        if (cg_mkdir(host->s.h[i], parent, dir, true, &made, NULL) < 0)
            continue;
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd >= 0)
            g_home.fd[g_home.n++] = fd;
    }
}

static char *sv_name(const char *id, sg_err *err)
{
    if (cg_check_name("id", id, err) < 0)
        return NULL;
    return sg_strdup_printf("%s" SG_CG_SUPERVISOR_SUFFIX, id);
}

/* sandglass/ (v2: its controllers enabled) and sandglass/<name> made on
 * every hierarchy in use; an existing one is fine. */
static sg_cgroup *make_named(const char *name, sg_err *err)
{
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = cg_new(name, err);
    if (!cg || cg_make_roots(cg, err) < 0)
        return NULL;
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *parent = sg_strdup_printf("%s/" SG_CG_ROOT_NAME, cg->s.h[i]->path);
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        bool made;
        /* it exists when a supervisor takes over from a dead one, or its
         * checkpoint worker started first (sg_cgroup_join_fds) */
        if (cg_mkdir(cg->s.h[i], parent, dir, true, &made, err) < 0)
            return NULL;
    }
    return sg_steal_ptr(&cg);
}

sg_cgroup *cg_supervisor_make(const char *id, sg_err *err)
{
    sg_autofree char *name = sv_name(id, err);
    return name ? make_named(name, err) : NULL;
}

int sg_cgroup_host_setup(sg_err *err)
{
    sg_cgroup *cg = make_named(HOST_NAME, err);
    sg_cgroup_free(cg);
    return cg ? 0 : -1;
}

int sg_cgroup_supervisor_join(const char *id, const sg_cg_limits *lim, const char *owner, sg_err *err)
{
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = cg_supervisor_make(id, err);
    if (!cg)
        return -1;
    __attribute__((cleanup(cg_freep))) sg_cgroup *host = cg_new(HOST_NAME, err);
    if (!host)
        return -1;
    home_open(host);
    if (lim && sg_cgroup_set_limits(cg, lim, err) < 0)
        return -1;
    if (owner)
        sg_cgroup_set_owner(cg, owner, NULL); /* as the sandbox's: gc of a leftover */
    return sg_cgroup_attach(cg, NULL, getpid(), err);
}

void sg_cgroup_supervisor_leave(void)
{
    for (size_t i = 0; i < g_home.n; i++)
        if (write(g_home.fd[i], "0", 1) < 0) {
            /* best effort: the child then stays charged to this sandbox */
        }
}

int sg_cgroup_host_join(sg_err *err)
{
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = make_named(HOST_NAME, err);
    return cg ? sg_cgroup_attach(cg, NULL, getpid(), err) : -1;
}

int sg_cgroup_supervisor_remove(const char *id, sg_err *err)
{
    sg_autofree char *name = sv_name(id, err);
    if (!name)
        return -1;
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = cg_new(name, err);
    if (!cg)
        return -1;
    uint64_t deadline = cg_deadline_after(SV_REMOVE_WAIT_MS);
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        unsigned us = 50;
        sg_err e = {0};
        /* EBUSY: its supervisor (or its checkpoint worker, in a leaf
         * below: sg_cgroup_join_fds) is still exiting */
        while (cg_rmdir_tree(dir, &e) < 0) {
            if (e.code != EBUSY || sg_now_mono_ns() >= deadline) {
                if (err)
                    *err = e;
                return -1;
            }
            cg_nap(&us, CG_NAP_MAX_US);
            e = (sg_err){0};
        }
    }
    return 0;
}

void sg_cgroup_supervisor_release(const char *id)
{
    if (g_home.n == 0)
        return; /* never joined, or nowhere to go */
    sg_cgroup_supervisor_leave();
    sg_cgroup_supervisor_remove(id, NULL);
}

char *sg_cgroup_supervisor_path(const char *id)
{
    sg_autofree char *name = sv_name(id, NULL);
    if (!name)
        return NULL;
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = cg_new(name, NULL);
    return cg ? cg_dir(cg, 0, NULL) : NULL;
}

/* cgroup: a sandbox's cgroups: leaves and joining, removal, listing and
 * ownership (see cgroup.h; cgroup_internal.h says which file holds what). */
#include "sandbox/cgroup.h"

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
#include "sandbox/cgroup_internal.h"

/* ---------- leaves, joining ---------- */

int sg_cgroup_leaf_create(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (!leaf)
        return 0;
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    bool made[SG_CG_MAX_FDS] = {0};
    for (size_t i = 0; i < cg->s.n; i++) {
        if (!cg_has_leaf(cg, i, leaf))
            continue;
        sg_autofree char *parent = cg_dir(cg, i, NULL);
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        if (cg_mkdir(cg->s.h[i], parent, dir, true, &made[i], err) < 0) {
            for (size_t j = 0; j <= i; j++) {
                if (!made[j])
                    continue;
                sg_autofree char *d = cg_dir(cg, j, leaf);
                rmdir(d);
            }
            return -1;
        }
    }
    return 0;
}

/* Closes the n fds opened so far (each set to -1): -1, the failure. */
static int close_fds(int *fds, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        close(fds[j]);
        fds[j] = -1;
    }
    return -1;
}

int sg_cgroup_procs_fds(sg_cgroup *cg, const char *leaf, int fds[SG_CG_MAX_FDS], sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < cg->s.n; i++) {
        if (!cg_has_leaf(cg, i, leaf))
            continue;
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        sg_autofree char *p = sg_strdup_printf("%s/cgroup.procs", dir);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            sg_err_sys(err, "cannot open %s", p);
            return close_fds(fds, n);
        }
        fds[n++] = fd;
    }
    return (int)n;
}

/* The directory a helper joins on hierarchy i when its sandbox has no
 * supervisor's cgroup (rootless, or made by an older supervisor): the
 * leaf where it is, <id> where it is not. */
static char *join_dir(sg_cgroup *cg, size_t i, const char *leaf)
{
    return cg_dir(cg, i, cg_has_leaf(cg, i, leaf) ? leaf : NULL);
}

/* The supervisor's cgroup of cg's sandbox, made when it is not there yet
 * (the checkpoint worker starts before the supervisor joins it); NULL
 * where it cannot be made (rootless without delegation there). */
static sg_cgroup *supervisor_cg(sg_cgroup *cg)
{
    return cg_supervisor_make(cg->id, NULL);
}

/* The supervisor's cgroup of cg's sandbox when it exists (on the first
 * hierarchy: it is made on all of them at once). */
static sg_cgroup *supervisor_cg_open(sg_cgroup *cg)
{
    sg_autofree char *name = sg_strdup_printf("%s" SG_CG_SUPERVISOR_SUFFIX, cg->id);
    sg_cgroup *sv = cg_new(name, NULL);
    sg_autofree char *dir = sv ? cg_dir(sv, 0, NULL) : NULL;
    struct stat st;
    if (dir && stat(dir, &st) == 0)
        return sv;
    cg_freep(&sv);
    return NULL;
}

/* Opens cgroup.procs of <name>/<leaf> on every hierarchy into fds, made
 * first (make), or of join_dir. Returns how many, or -1 with every one
 * closed. */
static int procs_fds(sg_cgroup *cg, const char *leaf, bool make, int fds[SG_CG_MAX_FDS], sg_err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < cg->s.n && n < SG_CG_MAX_FDS; i++) {
        sg_autofree char *dir = make ? cg_dir(cg, i, leaf) : join_dir(cg, i, leaf);
        sg_autofree char *parent = make ? cg_dir(cg, i, NULL) : NULL;
        sg_autofree char *p = sg_strdup_printf("%s/cgroup.procs", dir);
        bool made;
        int fd = make && cg_mkdir(cg->s.h[i], parent, dir, true, &made, err) < 0 ? -1 : open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            if (!make || (err && err->msg[0] == '\0'))
                sg_err_sys(err, "cannot open %s", p);
            return close_fds(fds, n);
        }
        fds[n++] = fd;
    }
    return (int)n;
}

int sg_cgroup_join_fds(sg_cgroup *cg, const char *leaf, int fds[SG_CG_MAX_FDS], sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0 || !leaf)
        return leaf ? -1 : sg_err_set(err, EINVAL, "a helper needs a leaf of its own");
    __attribute__((cleanup(cg_freep))) sg_cgroup *sv = supervisor_cg(cg);
    if (sv) /* <id>:supervisor/<leaf>: no controller enabled there, so
             * the supervisor may live beside it, under its limits */
        return procs_fds(sv, leaf, true, fds, err);
    return procs_fds(cg, leaf, false, fds, err);
}

int sg_cgroup_helper_kill(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err)
{
    __attribute__((cleanup(cg_freep))) sg_cgroup *sv = supervisor_cg_open(cg);
    sg_err e = {0};
    int rc = 0;
    if (sv && sg_cgroup_kill(sv, leaf, timeout_ms, &e) < 0 && e.code != ENOENT) {
        *err = e;
        rc = -1;
    }
    /* and where a supervisor of an earlier version put it */
    e = (sg_err){0};
    if (sg_cgroup_kill(cg, leaf, timeout_ms, &e) < 0 && e.code != ENOENT && rc == 0) {
        *err = e;
        rc = -1;
    }
    return rc;
}

int sg_cgroup_attach(sg_cgroup *cg, const char *leaf, pid_t pid, sg_err *err)
{
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    char buf[32];
    snprintf(buf, sizeof buf, "%d", (int)pid);
    for (size_t i = 0; i < cg->s.n; i++) {
        if (!cg_has_leaf(cg, i, leaf))
            continue;
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        if (cg_knob_write(dir, "cgroup.procs", buf, err) < 0) {
            sg_err_prefix(err, "cannot move pid %d into the cgroup", (int)pid);
            return -1;
        }
    }
    return 0;
}

/* ---------- removal, listing ---------- */

char **sg_cgroup_leaves(sg_cgroup *cg, sg_err *err)
{
    sg_autofree char *dir = cg_dir(cg, cg_primary(cg), NULL);
    sg_autoclosedir DIR *d = opendir(dir);
    if (!d) {
        sg_err_sys(err, "cannot open cgroup %s", dir);
        return NULL;
    }
    size_t n = 0, cap = 8;
    char **v = calloc(cap + 1, sizeof *v);
    if (!v) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        if (sg_strv_push(&v, &n, &cap, e->d_name) < 0) {
            sg_strvfreep(&v);
            sg_err_set(err, ENOMEM, "out of memory");
            return NULL;
        }
    }
    return v;
}

int sg_cgroup_leaf_remove(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (!leaf)
        return sg_err_set(err, EINVAL, "no leaf name given (use sg_cgroup_remove for the sandbox cgroup)");
    if (cg_check_leaf(leaf, err) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        /* An empty leaf without sub-cgroups, or none on this hierarchy:
         * one call (this runs after every exec). */
        if (rmdir(dir) == 0 || errno == ENOENT)
            continue;
        sg_err e = {0};
        if (cg_rmdir_tree(dir, &e) < 0 && rc == 0) {
            *err = e;
            rc = -1;
        }
    }
    return rc;
}

int sg_cgroup_remove(sg_cgroup *cg, sg_err *err)
{
    int rc = 0;
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        sg_err e = {0};
        if (cg_rmdir_tree(dir, &e) < 0 && rc == 0) {
            *err = e;
            rc = -1;
        }
    }
    return rc;
}

char **sg_cgroup_list(sg_err *err)
{
    cg_set s;
    cg_select_set(&s);
    size_t n = 0, cap = 16;
    sg_autostrv char **v = calloc(cap + 1, sizeof *v);
    if (!v) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < s.n; i++) {
        sg_autofree char *root = sg_strdup_printf("%s/" SG_CG_ROOT_NAME, s.h[i]->path);
        sg_autoclosedir DIR *d = opendir(root);
        if (!d) {
            if (errno == ENOENT)
                continue;
            sg_err_sys(err, "cannot list %s", root);
            return NULL;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            /* a supervisor's cgroup left alone names its sandbox */
            char name[sizeof e->d_name];
            snprintf(name, sizeof name, "%s", e->d_name);
            size_t len = strlen(name), sl = strlen(SG_CG_SUPERVISOR_SUFFIX);
            if (len > sl && strcmp(name + len - sl, SG_CG_SUPERVISOR_SUFFIX) == 0)
                name[len - sl] = '\0';
            if (e->d_type != DT_DIR || !sg_valid_name(name))
                continue;
            bool dup = false;
            for (size_t k = 0; k < n && !dup; k++)
                dup = strcmp(v[k], name) == 0;
            if (dup)
                continue;
            if (sg_strv_push(&v, &n, &cap, name) < 0) {
                sg_err_set(err, ENOMEM, "out of memory");
                return NULL;
            }
        }
    }
    return sg_steal_ptr(&v);
}

char *sg_cgroup_path(sg_cgroup *cg, const char *leaf)
{
    return cg_dir(cg, 0, leaf); /* the v2 hierarchy is always first */
}

/* ---------- ownership ---------- */

int sg_cgroup_set_owner(sg_cgroup *cg, const char *owner, sg_err *err)
{
    size_t len = strlen(owner);
    if (len >= SG_CG_OWNER_MAX)
        return sg_err_set(err, ENAMETOOLONG, "owner mark too long");
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        if (setxattr(dir, SG_CG_OWNER_XATTR, owner, len, 0) < 0)
            return sg_err_sys(err, "cannot mark the owner of %s", dir);
    }
    return 0;
}

int sg_cgroup_owner(const char *id, char *buf, size_t size, sg_err *err)
{
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = sg_cgroup_open(id, err);
    if (!cg && err && err->code == ENOENT) {
        /* only its supervisor's cgroup is left: it carries the same mark */
        sg_autofree char *sv = sg_cgroup_supervisor_path(id);
        ssize_t n = sv ? getxattr(sv, SG_CG_OWNER_XATTR, buf, size - 1) : -1;
        if (n < 0 && (errno == ENODATA || errno == ENOTSUP))
            return 0;
        if (n < 0) /* gone meanwhile (its sandbox destroyed): ENOENT */
            return sg_err_sys(err, "cannot read the owner of sandglass/%s", id);
        buf[n] = '\0';
        return 1;
    }
    if (!cg)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < cg->s.n && rc == 0; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        ssize_t n = getxattr(dir, SG_CG_OWNER_XATTR, buf, size - 1);
        if (n >= 0) {
            buf[n] = '\0';
            rc = 1;
        } else if (errno != ENODATA && errno != ENOENT && errno != ENOTSUP) {
            return sg_err_sys(err, "cannot read the owner of %s", dir);
        }
    }
    return rc;
}


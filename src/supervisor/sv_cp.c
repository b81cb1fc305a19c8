/* sv_cp: `sandglass cp` on the supervisor's side. See sv_cp.h.
 *
 * Why here and not a tar through an exec: the copy then runs as no
 * learner's exec, so nothing of it enters the learner's timeline as a
 * command, and its changes carry the operator as their cause; the
 * supervisor already has the workspace (host side) and opens every path in
 * it beneath the workspace with no symlink followed; and what it copies is
 * bounded (wscopy.h's SG_CP_*). It runs on the loop: a copy of the bound
 * takes seconds at most, and a kill never waits for the loop (the kill
 * switch's thread). */
#include "supervisor/sv_cp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "sandbox/wscopy.h"
#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"

/* "/workspace" or "/workspace/REL" into buf. */
static const char *ws_path(const char *rel, char *buf, size_t n)
{
    snprintf(buf, n, strcmp(rel, ".") ? "/workspace/%s" : "/workspace", rel);
    return buf;
}

static void cp_fail(sv_client *c, const char *what, const sg_err *err)
{
    char m[sizeof err->msg + 64];
    snprintf(m, sizeof m, "%s: %s", what, err->msg);
    sv_client_error(c, m);
}

/* Whether rel is itself a symlink (an O_DIRECTORY open of it says ENOTDIR). */
static bool ws_is_link(int root, const char *rel)
{
    struct stat st;
    sg_autoclose int fd = sg_open_beneath(root, rel, O_PATH);
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode);
}

/* errno of a failed open of the directory rel beneath the workspace into
 * err: -1. */
static int ws_err(int root, const char *rel, sg_err *err)
{
    char v[256];
    int e = errno;
    sg_vis(rel, strlen(rel), v, sizeof v);
    errno = e == ENOTDIR && ws_is_link(root, rel) ? ELOOP : e;
    if (errno == ELOOP || errno == EXDEV)
        return sg_err_sys(err,
                          "/workspace/%s is a symlink or passes through one: cp follows no symlink in the "
                          "workspace",
                          v);
    return sg_err_sys(err, "/workspace/%s", v);
}

/* A directory of the workspace (rel, "." the workspace) opened beneath it,
 * no symlink followed; err says so for a learner's symlink. */
static int open_ws_dir(int root, const char *rel, sg_err *err)
{
    int fd = sg_open_beneath(root, rel, O_PATH | O_DIRECTORY);
    return fd < 0 ? ws_err(root, rel, err) : fd;
}

/* A path written with a trailing '/' names a directory: a real one (a
 * learner's symlink to one is not followed), as cp(1) would insist. */
static int dir_if_slash(int root, const char *path, const char *rel, sg_err *err)
{
    size_t l = strlen(path);
    if (l == 0 || path[l - 1] != '/' || strcmp(rel, ".") == 0)
        return 0;
    sg_autoclose int fd = sg_open_beneath(root, rel, O_PATH | O_DIRECTORY);
    return fd < 0 ? ws_err(root, rel, err) : 0;
}

/* Into the workspace: into rel when it is a directory (as q->name), else
 * as rel itself; the entries made are the sandbox user's, and the
 * watcher's reports of them name the operator's cp. */
static int cp_in(sv_sup *s, sv_client *c, const sg_ctl_cp_req *q, int root, int local, const char *rel,
                 sg_wscopy_stats *st, char *dest, size_t dn, sg_err *err)
{
    char dir[PATH_MAX], into[PATH_MAX + NAME_MAX + 2];
    const char *dname = q->name;
    sg_autoclose int ddir = sg_open_beneath(root, rel, O_PATH | O_DIRECTORY);
    if (ddir >= 0 && strcmp(rel, ".") == 0) {
        snprintf(into, sizeof into, "%s", q->name);
    } else if (ddir >= 0) {
        snprintf(into, sizeof into, "%s/%s", rel, q->name);
    } else if (errno == ENOENT || errno == ENOTDIR) {
        sg_wscopy_split(rel, dir, sizeof dir, &dname);
        if ((ddir = open_ws_dir(root, dir, err)) < 0)
            return -1;
        snprintf(into, sizeof into, "%s", rel);
    } else {
        return ws_err(root, rel, err);
    }
    ws_path(into, dest, dn);
    /* an idmapped workspace shows root's files as the sandbox user's */
    sg_wscopy_opts o = {.uid = s->meta.idmap_workspace ? 0 : s->meta.uid,
                        .gid = s->meta.idmap_workspace ? 0 : s->meta.gid};
    /* what the learner changed before is reported as theirs first */
    sg_capture_flush_watch(s->cap);
    sg_autojson json_t *op =
        json_pack("{s:s, s:s, s:o}", "action", "cp", "path", dest, "actor", sv_actor(c, NULL, NULL));
    sg_capture_set_operator(s->cap, op);
    int r = sg_wscopy(local, q->name, ddir, dname, &o, st, err);
    sg_capture_set_operator(s->cap, NULL); /* reports the copy's changes, then ends it */
    return r;
}

/* Out of the workspace: rel made in the caller's directory as q->name (or
 * rel's own name), owned by the caller. */
static int cp_out(sv_client *c, const sg_ctl_cp_req *q, int root, int local, const char *rel, sg_wscopy_stats *st,
                  char *src, size_t sn, sg_err *err)
{
    struct ucred cr = {0};
    socklen_t len = sizeof cr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return sg_err_sys(err, "the caller's credentials");
    char dir[PATH_MAX];
    const char *sname = ".";
    sg_autoclose int sdir = -1;
    if (strcmp(rel, ".") == 0) {
        sdir = dup(root);
    } else {
        sg_wscopy_split(rel, dir, sizeof dir, &sname);
        sdir = open_ws_dir(root, dir, err);
    }
    if (sdir < 0)
        return err->msg[0] ? -1 : sg_err_sys(err, "dup");
    ws_path(rel, src, sn);
    const char *dname = q->name ? q->name : strcmp(rel, ".") ? sname : "workspace";
    sg_wscopy_opts o = {.uid = cr.uid, .gid = cr.gid};
    return sg_wscopy(sdir, sname, local, dname, &o, st, err);
}

void sv_cp_op(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sg_autoclose int local = fd_in;
    const sg_ctl_cp_req *q = &req->u.cp;
    sg_err err = {0};
    const char *what = q->out ? "cp out" : "cp in";
    if (s->ks.aborted) {
        char m[600];
        snprintf(m, sizeof m,
                 "%s: the sandbox is aborted (%s): nothing is copied in or out until it is resumed "
                 "(sandglass resume)",
                 what, s->ks.reason);
        sv_client_error(c, m);
        return;
    }
    struct stat st;
    if (local < 0 || fstat(local, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sv_client_error(c, "cp: the request came without the caller's directory");
        return;
    }
    char rel[PATH_MAX], where[PATH_MAX + NAME_MAX + 16];
    sg_autoclose int root = open(s->meta.workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        sg_err_sys(&err, "the workspace %s", s->meta.workspace);
    sg_wscopy_stats n = {0};
    if (root < 0 || sg_wscopy_rel(q->path, rel, sizeof rel, &err) < 0 || dir_if_slash(root, q->path, rel, &err) < 0 ||
        (q->out ? cp_out(c, q, root, local, rel, &n, where, sizeof where, &err)
                : cp_in(s, c, q, root, local, rel, &n, where, sizeof where, &err)) < 0) {
        cp_fail(c, what, &err);
        return;
    }
    sg_ctl_cp_reply r = {.path = where,
                         .files = (long long)n.files,
                         .dirs = (long long)n.dirs,
                         .links = (long long)n.links,
                         .bytes = (long long)n.bytes,
                         .skipped = (long long)n.skipped};
    sv_client_result(c, sg_ctl_encode_cp_reply(&r));
}

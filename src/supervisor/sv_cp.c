/* sv_cp: `sandglass cp` on the supervisor's side. See sv_cp.h.
 *
 * Why here and not a tar through an exec: the copy then runs as no
 * learner's exec, so nothing of it enters the learner's timeline as a
 * command, and its changes carry the operator as their cause; the
 * supervisor already has the workspace (host side) and opens every path in
 * it beneath the workspace with no symlink followed; and what it copies is
 * bounded (wscopy.h's SG_CP_*). It runs on libuv's thread pool, never on
 * the loop: a copy of the bound takes seconds, and an abort or a destroy
 * meanwhile stops it (s->ks.stopping) instead of waiting for it. */
#include "supervisor/sv_cp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* One copy, run on libuv's thread pool: the loop (and with it the kill
 * switch's abort and a destroy) never waits for it; either sets
 * s->ks.stopping, which the copy reads before every entry and every
 * 64 KiB, and the copy ends with ECANCELED. The worker touches only what
 * the job holds (fds, names, its stats and error). */
typedef struct sv_cp_job {
    uv_work_t work;
    sv_sup *s;
    sv_client *c; /* NULL once the caller went (c->weak) */
    bool in;
    int sdir, ddir;
    char *sname, *dname;
    sg_wscopy_opts o;
    sg_wscopy_stats st;
    sg_err err;
    int rc;
    char where[PATH_MAX + NAME_MAX + 16];
} sv_cp_job;

static void job_free(sv_cp_job *j)
{
    if (j->sdir >= 0)
        close(j->sdir);
    if (j->ddir >= 0)
        close(j->ddir);
    free(j->sname);
    free(j->dname);
    free(j);
}

/* Into the workspace: into rel when it is a directory (as q->name), else
 * as rel itself; the entries made are the sandbox user's. */
static int cp_in_prepare(sv_sup *s, const sg_ctl_cp_req *q, int root, const char *rel, sv_cp_job *j, sg_err *err)
{
    char dir[PATH_MAX], into[PATH_MAX + NAME_MAX + 2];
    const char *dname = q->name;
    int ddir = sg_open_beneath(root, rel, O_PATH | O_DIRECTORY);
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
    j->ddir = ddir;
    j->sname = sg_xstrdup(q->name);
    j->dname = sg_xstrdup(dname);
    ws_path(into, j->where, sizeof j->where);
    /* an idmapped workspace shows root's files as the sandbox user's */
    j->o.uid = s->meta.idmap_workspace ? 0 : s->meta.uid;
    j->o.gid = s->meta.idmap_workspace ? 0 : s->meta.gid;
    return 0;
}

/* Out of the workspace: rel made in the caller's directory as q->name (or
 * rel's own name), owned by the caller. */
static int cp_out_prepare(sv_client *c, const sg_ctl_cp_req *q, int root, const char *rel, sv_cp_job *j,
                          sg_err *err)
{
    struct ucred cr = {0};
    socklen_t len = sizeof cr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return sg_err_sys(err, "the caller's credentials");
    char dir[PATH_MAX];
    const char *sname = ".";
    if (strcmp(rel, ".") == 0) {
        j->sdir = dup(root);
    } else {
        sg_wscopy_split(rel, dir, sizeof dir, &sname);
        j->sdir = open_ws_dir(root, dir, err);
    }
    if (j->sdir < 0)
        return err->msg[0] ? -1 : sg_err_sys(err, "dup");
    ws_path(rel, j->where, sizeof j->where);
    j->sname = sg_xstrdup(sname);
    j->dname = sg_xstrdup(q->name ? q->name : strcmp(rel, ".") ? sname : "workspace");
    j->o.uid = cr.uid;
    j->o.gid = cr.gid;
    return 0;
}

static void cp_work(uv_work_t *w)
{
    sv_cp_job *j = w->data;
    j->rc = sg_wscopy(j->sdir, j->sname, j->ddir, j->dname, &j->o, &j->st, &j->err);
}

static void cp_done(uv_work_t *w, int status)
{
    sv_cp_job *j = w->data;
    sv_sup *s = j->s;
    s->cp.job = NULL;
    if (j->in && s->cap)
        sg_capture_set_operator(s->cap, NULL); /* reports the copy's changes, then ends it */
    if (j->c) {
        j->c->weak = NULL;
        if (status < 0 || j->rc < 0) {
            if (status < 0)
                sg_err_set(&j->err, ECANCELED, "cancelled");
            cp_fail(j->c, j->in ? "cp in" : "cp out", &j->err);
        } else {
            sg_ctl_cp_reply r = {.path = j->where,
                                 .files = (long long)j->st.files,
                                 .dirs = (long long)j->st.dirs,
                                 .links = (long long)j->st.links,
                                 .bytes = (long long)j->st.bytes,
                                 .skipped = (long long)j->st.skipped};
            sv_client_result(j->c, sg_ctl_encode_cp_reply(&r));
        }
    }
    job_free(j);
}

/* Refused (with c's answer) while aborted or while another copy runs. */
static bool cp_refused(sv_sup *s, sv_client *c, const char *what)
{
    char m[600];
    if (s->ks.aborted)
        snprintf(m, sizeof m,
                 "%s: the sandbox is aborted (%s): nothing is copied in or out until it is resumed "
                 "(sandglass resume)",
                 what, s->ks.reason);
    else if (s->cp.job || s->destroying)
        snprintf(m, sizeof m, "%s: %s", what,
                 s->destroying ? "the sandbox is going" : "another cp of this sandbox is running: one at a time");
    else
        return false;
    sv_client_error(c, m);
    return true;
}

/* The job's copy started off the loop; a copy in first flushes what the
 * learner changed (reported as theirs) and names the operator as the
 * cause of what follows. */
static int cp_start(sv_sup *s, sv_client *c, sv_cp_job *j, sg_err *err)
{
    j->o.cancel = &s->ks.stopping;
    if (j->in) {
        sg_capture_flush_watch(s->cap);
        sg_autojson json_t *op =
            json_pack("{s:s, s:s, s:o}", "action", "cp", "path", j->where, "actor", sv_actor(c, NULL, NULL));
        sg_capture_set_operator(s->cap, op);
    }
    j->work.data = j;
    int r = uv_queue_work(&s->loop, &j->work, cp_work, cp_done);
    if (r < 0) {
        if (j->in)
            sg_capture_set_operator(s->cap, NULL);
        return sg_err_set(err, -r, "cannot start the copy: %s", uv_strerror(r));
    }
    s->cp.job = j;
    j->c = c;
    c->weak = &j->c;
    return 0;
}

void sv_cp_op(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sg_autoclose int local = fd_in;
    const sg_ctl_cp_req *q = &req->u.cp;
    sg_err err = {0};
    const char *what = q->out ? "cp out" : "cp in";
    if (cp_refused(s, c, what))
        return;
    struct stat st;
    if (local < 0 || fstat(local, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sv_client_error(c, "cp: the request came without the caller's directory");
        return;
    }
    char rel[PATH_MAX];
    sg_autoclose int root = open(s->meta.workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        sg_err_sys(&err, "the workspace %s", s->meta.workspace);
    sv_cp_job *j = sg_xcalloc(1, sizeof *j);
    *j = (sv_cp_job){.s = s, .in = !q->out, .sdir = -1, .ddir = -1};
    if (root < 0 || sg_wscopy_rel(q->path, rel, sizeof rel, &err) < 0 || dir_if_slash(root, q->path, rel, &err) < 0 ||
        (q->out ? cp_out_prepare(c, q, root, rel, j, &err) : cp_in_prepare(s, q, root, rel, j, &err)) < 0) {
        cp_fail(c, what, &err);
        job_free(j);
        return;
    }
    /* the caller's directory: the source of a copy in, the destination out */
    if (q->out)
        j->ddir = sg_steal_fd(&local);
    else
        j->sdir = sg_steal_fd(&local);
    if (cp_start(s, c, j, &err) < 0) {
        cp_fail(c, what, &err);
        job_free(j);
    }
}

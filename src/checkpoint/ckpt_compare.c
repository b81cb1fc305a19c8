/* ckpt_compare: compares the scanned workspace with a stored checkpoint
 * tree, listing the changes (diff, and the count a take reports) and, for a
 * restore, applying them: removing, creating (at a temporary name, then
 * renamed over) and fixing mode and owner, never writing through what is
 * there. */
#include "checkpoint/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/util.h"

#define FLAG_BITS (SG_CKPT_MODE_OMITTED | SG_CKPT_MODE_PARTIAL)
#define STREAM_MIN (1u << 20) /* larger files are streamed, not held in memory */
#define IO_CHUNK (64u * 1024)

/* ---------- a checkpoint's directory, as stored ---------- */

typedef struct tent {
    char *sname;
    char kind; /* 'd' tree, 'f' blob, 'l' symlink blob */
    uint32_t mode, uid, gid; /* directories: filled from their own "." */
    git_oid oid;
} tent;

typedef struct tdir {
    tent *v;
    size_t n;
    uint32_t mode, uid, gid;
} tdir;

static void tdir_free(tdir *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].sname);
    free(t->v);
    t->v = NULL;
    t->n = 0;
}

#define sg_autotdir __attribute__((cleanup(tdir_free)))

static int tent_cmp(const void *a, const void *b)
{
    return strcmp(((const tent *)a)->sname, ((const tent *)b)->sname);
}

static int parse_u32(const char **p, const char *end, int base, char stop, uint32_t *out)
{
    uint64_t v = 0;
    const char *q = *p;
    if (q >= end || *q == stop)
        return -1;
    for (; q < end && *q != stop; q++) {
        int d = *q - '0';
        if (d < 0 || d >= base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
        if (v > UINT32_MAX)
            return -1;
    }
    if (q >= end)
        return -1;
    *out = (uint32_t)v;
    *p = q + 1;
    return 0;
}

static int tdir_load(sg_ckpt_store *st, const git_oid *oid, tdir *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    char hex[GIT_OID_HEXSZ + 1];
    git_oid_tostr(hex, sizeof hex, oid);
    git_tree *tree = NULL;
    if (git_tree_lookup(&tree, st->repo, oid) < 0)
        return sg_ckpt_git_fail(err, "checkpoint tree %s", hex);
    size_t n = git_tree_entrycount(tree);
    out->v = sg_xcalloc(n, sizeof(tent));
    git_oid meta_oid;
    bool have_meta = false;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const git_tree_entry *e = git_tree_entry_byindex(tree, i);
        const char *name = git_tree_entry_name(e);
        git_filemode_t fm = git_tree_entry_filemode_raw(e);
        if (strcmp(name, SG_CKPT_META_NAME) == 0 && fm == GIT_FILEMODE_BLOB) {
            meta_oid = *git_tree_entry_id(e);
            have_meta = true;
            continue;
        }
        char kind = fm == GIT_FILEMODE_TREE ? 'd'
                  : (fm == GIT_FILEMODE_BLOB || fm == GIT_FILEMODE_BLOB_EXECUTABLE) ? 'f'
                  : fm == GIT_FILEMODE_LINK ? 'l' : 0;
        if (!kind || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            rc = sg_err_set(err, EINVAL, "checkpoint tree %s: bad entry '%s'", hex, name);
            break;
        }
        tent *t = &out->v[out->n++];
        t->sname = sg_xstrdup(name);
        t->kind = kind;
        t->oid = *git_tree_entry_id(e);
        t->mode = kind == 'd' ? S_IFDIR : 0;
    }
    git_tree_free(tree);
    if (rc < 0)
        return rc;
    if (!have_meta)
        return sg_err_set(err, EINVAL, "checkpoint tree %s has no metadata record", hex);
    qsort(out->v, out->n, sizeof(tent), tent_cmp);

    git_blob *blob = NULL;
    if (git_blob_lookup(&blob, st->repo, &meta_oid) < 0)
        return sg_ckpt_git_fail(err, "checkpoint metadata of %s", hex);
    const char *p = git_blob_rawcontent(blob), *end = p + git_blob_rawsize(blob);
    bool have_self = false;
    while (p < end && rc == 0) {
        uint32_t mode, uid, gid;
        if (parse_u32(&p, end, 8, ' ', &mode) < 0 || parse_u32(&p, end, 10, ' ', &uid) < 0 ||
            parse_u32(&p, end, 10, ' ', &gid) < 0) {
            rc = sg_err_set(err, EINVAL, "checkpoint tree %s: bad metadata record", hex);
            break;
        }
        const char *name = p;
        const char *nul = memchr(p, '\0', (size_t)(end - p));
        if (!nul) {
            rc = sg_err_set(err, EINVAL, "checkpoint tree %s: truncated metadata", hex);
            break;
        }
        p = nul + 1;
        if (strcmp(name, ".") == 0) {
            if (!S_ISDIR(mode)) {
                rc = sg_err_set(err, EINVAL, "checkpoint tree %s: bad directory mode", hex);
                break;
            }
            out->mode = mode;
            out->uid = uid;
            out->gid = gid;
            have_self = true;
            continue;
        }
        tent key = {.sname = (char *)name};
        tent *t = bsearch(&key, out->v, out->n, sizeof(tent), tent_cmp);
        bool ok = t && ((t->kind == 'f' && (S_ISREG(mode) || S_ISFIFO(mode))) ||
                        (t->kind == 'l' && S_ISLNK(mode)));
        if (!ok) {
            rc = sg_err_set(err, EINVAL, "checkpoint tree %s: metadata for '%s' does not match", hex, name);
            break;
        }
        t->mode = mode;
        t->uid = uid;
        t->gid = gid;
    }
    git_blob_free(blob);
    if (rc == 0 && !have_self)
        rc = sg_err_set(err, EINVAL, "checkpoint tree %s: no directory record", hex);
    for (size_t i = 0; rc == 0 && i < out->n; i++)
        if (out->v[i].mode == 0)
            rc = sg_err_set(err, EINVAL, "checkpoint tree %s: no metadata for '%s'", hex, out->v[i].sname);
    return rc;
}

/* ---------- compare the workspace with a checkpoint (and apply) ---------- */

static bool t_omitted(const tent *t)
{
    return t->kind == 'f' && (t->mode & SG_CKPT_MODE_OMITTED);
}

static void emit(cmpx *c, sg_checkpoint_change_kind kind, const node *now, uint32_t mode_then,
                 uint32_t uid_then, uint32_t gid_then)
{
    c->nchanged++;
    if (!c->collect)
        return;
    sg_xgrow(&c->ch, &c->cap, c->nch + 1, sizeof *c->ch);
    sg_checkpoint_change *x = &c->ch[c->nch++];
    memset(x, 0, sizeof *x);
    x->path = sg_xstrdup(c->path.len ? c->path.data : ".");
    x->kind = kind;
    if (now) {
        x->mode_now = now->mode;
        x->uid_now = now->uid;
        x->gid_now = now->gid;
    }
    x->mode_then = mode_then;
    x->uid_then = uid_then;
    x->gid_then = gid_then;
}

static void emit_cur_tree(cmpx *c, const node *dir)
{
    for (size_t i = 0; i < dir->nkids; i++) {
        const node *k = &dir->kids[i];
        size_t old = sg_ckpt_path_push(&c->path, SG_CKPT_NAME(k));
        emit(c, SG_CKPT_CREATED, k, 0, 0, 0);
        emit_cur_tree(c, k);
        sg_ckpt_path_pop(&c->path, old);
    }
}

static int emit_target_dir(cmpx *c, const tdir *t, int depth)
{
    if (depth > SG_CKPT_MAX_DEPTH)
        return sg_err_set(c->err, ELOOP, "checkpoint nested deeper than %d", SG_CKPT_MAX_DEPTH);
    for (size_t i = 0; i < t->n; i++) {
        const tent *e = &t->v[i];
        if (t_omitted(e)) {
            c->unrestorable++; /* cannot come back: not listed as a change */
            continue;
        }
        size_t old = sg_ckpt_path_push(&c->path, sg_ckpt_unescape(e->sname));
        int rc = 0;
        if (e->kind == 'd') {
            sg_autotdir tdir sub = {0};
            rc = tdir_load(c->st, &e->oid, &sub, c->err);
            if (rc == 0) {
                emit(c, SG_CKPT_DELETED, NULL, sub.mode, sub.uid, sub.gid);
                rc = emit_target_dir(c, &sub, depth + 1);
            }
        } else {
            emit(c, SG_CKPT_DELETED, NULL, e->mode, e->uid, e->gid);
        }
        sg_ckpt_path_pop(&c->path, old);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static bool chown_failure_ok(const sg_ckpt_store *st)
{
    /* Without root we cannot give files away (EINVAL: uid not mapped). */
    return (errno == EPERM || errno == EINVAL) && !st->is_root;
}

static int ap_fd_meta(cmpx *c, int fd, uint32_t mode, uint32_t uid, uint32_t gid)
{
    /* Owner first: chown clears setuid/setgid bits. */
    if (fchown(fd, uid, gid) < 0 && !chown_failure_ok(c->st))
        return sg_err_sys(c->err, "chown %s", c->path.len ? c->path.data : ".");
    if (fchmod(fd, mode & 07777) < 0)
        return sg_err_sys(c->err, "chmod %s", c->path.len ? c->path.data : ".");
    return 0;
}

static int ap_meta_at(cmpx *c, int dfd, const char *name, uint32_t mode, uint32_t uid, uint32_t gid)
{
    if (fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && !chown_failure_ok(c->st))
        return sg_err_sys(c->err, "chown %s", c->path.data);
    if (!S_ISLNK(mode) && fchmodat(dfd, name, mode & 07777, AT_SYMLINK_NOFOLLOW) < 0)
        return sg_err_sys(c->err, "chmod %s", c->path.data);
    return 0;
}

/* Removes whatever is at name (never following a symlink), at any depth. */
static int ap_remove(cmpx *c, int dfd, const char *name, int depth)
{
    (void)depth;
    if (sg_rm_rf_at(dfd, name, c->err) < 0) {
        sg_err_prefix(c->err, "removing %s", c->path.data);
        return -1;
    }
    return 0;
}

static int write_blob(cmpx *c, int fd, const git_oid *oid)
{
    size_t len;
    git_object_t type;
    if (git_odb_read_header(&len, &type, c->st->odb, oid) < 0)
        return sg_ckpt_git_fail(c->err, "reading %s from the checkpoint", c->path.data);
    if (len > STREAM_MIN) {
        git_odb_stream *rs = NULL;
        if (git_odb_open_rstream(&rs, &len, &type, c->st->odb, oid) == 0) {
            sg_autofree char *buf = sg_xrealloc(NULL, IO_CHUNK);
            int rc = 0;
            size_t total = 0;
            for (;;) {
                int got = git_odb_stream_read(rs, buf, IO_CHUNK);
                if (got < 0) {
                    rc = sg_ckpt_git_fail(c->err, "reading %s from the checkpoint", c->path.data);
                    break;
                }
                if (got == 0)
                    break;
                if (sg_write_all(fd, buf, (size_t)got) < 0) {
                    rc = sg_err_sys(c->err, "writing %s", c->path.data);
                    break;
                }
                total += (size_t)got;
            }
            git_odb_stream_free(rs);
            if (rc == 0 && total != len)
                rc = sg_err_set(c->err, EIO, "%s: short object in the checkpoint", c->path.data);
            return rc;
        }
        git_error_clear(); /* no streaming for this backend: read it whole */
    }
    git_odb_object *obj = NULL;
    if (git_odb_read(&obj, c->st->odb, oid) < 0)
        return sg_ckpt_git_fail(c->err, "reading %s from the checkpoint", c->path.data);
    int rc = 0;
    if (sg_write_all(fd, git_odb_object_data(obj), git_odb_object_size(obj)) < 0)
        rc = sg_err_sys(c->err, "writing %s", c->path.data);
    git_odb_object_free(obj);
    return rc;
}

static int ap_create(cmpx *c, int dfd, const char *name, const tent *t, const tdir *known_sub, int depth);

static int ap_create_dir(cmpx *c, int dfd, const char *name, const tent *t, const tdir *known_sub, int depth)
{
    if (depth > SG_CKPT_MAX_DEPTH)
        return sg_err_set(c->err, ELOOP, "%s: nested deeper than %d", c->path.data, SG_CKPT_MAX_DEPTH);
    sg_autotdir tdir own = {0};
    const tdir *sub = known_sub;
    if (!sub) {
        if (tdir_load(c->st, &t->oid, &own, c->err) < 0)
            return -1;
        sub = &own;
    }
    if (mkdirat(dfd, name, 0700) < 0)
        return sg_err_sys(c->err, "mkdir %s", c->path.data);
    if (sub->mode & SG_CKPT_MODE_PARTIAL)
        c->unrestorable++; /* its contents were not recorded */
    sg_autoclose int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(c->err, "opening %s", c->path.data);
    for (size_t i = 0; i < sub->n; i++) {
        const char *kn = sg_ckpt_unescape(sub->v[i].sname);
        size_t old = sg_ckpt_path_push(&c->path, kn);
        int rc = ap_create(c, fd, kn, &sub->v[i], NULL, depth + 1);
        sg_ckpt_path_pop(&c->path, old);
        if (rc < 0)
            return rc;
    }
    return ap_fd_meta(c, fd, sub->mode, sub->uid, sub->gid);
}

/* Creates t at name: a directory with mkdir; anything else at a temporary
 * name, then renamed over name (never written through what is there). */
static int ap_create(cmpx *c, int dfd, const char *name, const tent *t, const tdir *known_sub, int depth)
{
    if (t->kind == 'd')
        return ap_create_dir(c, dfd, name, t, known_sub, depth);
    if (t_omitted(t)) {
        c->unrestorable++; /* only its size is known: left as it is */
        return 0;
    }
    char tmp[64];
    int made = 0; /* 1: created at tmp, -1: failed */
    for (int attempt = 0; attempt < 100 && made == 0; attempt++) {
        snprintf(tmp, sizeof tmp, ".sg-restore.%d.%u", (int)getpid(), ++c->st->tmp_counter);
        int r;
        if (S_ISREG(t->mode)) {
            sg_autoclose int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd < 0 && errno == EEXIST)
                continue;
            if (fd < 0)
                return sg_err_sys(c->err, "creating a file for %s", c->path.data);
            made = 1;
            r = write_blob(c, fd, &t->oid);
            if (r == 0)
                r = ap_fd_meta(c, fd, t->mode, t->uid, t->gid);
        } else if (S_ISLNK(t->mode)) {
            char target[PATH_MAX];
            git_blob *b = NULL;
            if (git_blob_lookup(&b, c->st->repo, &t->oid) < 0)
                return sg_ckpt_git_fail(c->err, "reading %s from the checkpoint", c->path.data);
            size_t len = (size_t)git_blob_rawsize(b);
            bool ok = len > 0 && len < PATH_MAX && !memchr(git_blob_rawcontent(b), '\0', len);
            if (ok) {
                memcpy(target, git_blob_rawcontent(b), len);
                target[len] = '\0';
            }
            git_blob_free(b);
            if (!ok)
                return sg_err_set(c->err, EINVAL, "%s: bad symlink target in the checkpoint", c->path.data);
            if (symlinkat(target, dfd, tmp) < 0) {
                if (errno == EEXIST)
                    continue;
                return sg_err_sys(c->err, "creating symlink %s", c->path.data);
            }
            made = 1;
            r = 0;
            if (fchownat(dfd, tmp, t->uid, t->gid, AT_SYMLINK_NOFOLLOW) < 0 && !chown_failure_ok(c->st))
                r = sg_err_sys(c->err, "chown %s", c->path.data);
        } else if (S_ISFIFO(t->mode)) {
            if (mkfifoat(dfd, tmp, 0600) < 0) {
                if (errno == EEXIST)
                    continue;
                return sg_err_sys(c->err, "creating fifo %s", c->path.data);
            }
            made = 1;
            r = ap_meta_at(c, dfd, tmp, t->mode, t->uid, t->gid);
        } else {
            return sg_err_set(c->err, EINVAL, "%s: unsupported type in the checkpoint", c->path.data);
        }
        if (r < 0) {
            (void)unlinkat(dfd, tmp, 0);
            return -1;
        }
    }
    if (made == 0)
        return sg_err_set(c->err, EEXIST, "%s: no free temporary name", c->path.data);
    if (renameat(dfd, tmp, dfd, name) < 0) {
        int e = errno;
        (void)unlinkat(dfd, tmp, 0);
        errno = e;
        return sg_err_sys(c->err, "renaming into %s", c->path.data);
    }
    return 0;
}

static int cmp_dir(cmpx *c, int dfd, const node *cur, const git_oid *target, int depth);

/* A name only in the checkpoint (t; sub is its directory when it is one):
 * the restore brings it back. */
static int cmp_only_target(cmpx *c, int dfd, const char *name, const tent *t, const tdir *sub, int depth)
{
    int rc = 0;
    if (t->kind == 'd') {
        emit(c, SG_CKPT_DELETED, NULL, sub->mode, sub->uid, sub->gid);
        rc = emit_target_dir(c, sub, depth + 1);
    } else {
        emit(c, SG_CKPT_DELETED, NULL, t->mode, t->uid, t->gid);
    }
    if (rc == 0 && c->apply)
        rc = ap_create(c, dfd, name, t, t->kind == 'd' ? sub : NULL, depth);
    return rc;
}

/* A name on both sides: k now, t in the checkpoint (sub: t's directory,
 * loaded when the types differ). */
static int cmp_both(cmpx *c, int dfd, const char *name, const node *k, const tent *t, const tdir *sub, int depth)
{
    int rc = 0;
    if (!k->recorded || (k->mode & S_IFMT) != (t->mode & S_IFMT)) {
        bool tdir_ = t->kind == 'd';
        emit(c, SG_CKPT_TYPE, k, tdir_ ? sub->mode : t->mode, tdir_ ? sub->uid : t->uid,
             tdir_ ? sub->gid : t->gid);
        emit_cur_tree(c, k);
        if (tdir_)
            rc = emit_target_dir(c, sub, depth + 1);
        if (rc == 0 && c->apply) {
            rc = ap_remove(c, dfd, name, depth);
            if (rc == 0)
                rc = ap_create(c, dfd, name, t, tdir_ ? sub : NULL, depth);
        }
    } else if (t->kind == 'd') {
        if (!git_oid_equal(&k->oid, &t->oid)) {
            sg_autoclose int subfd = -1;
            if (c->apply) {
                subfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (subfd < 0)
                    rc = sg_err_sys(c->err, "opening %s", c->path.data);
            }
            if (rc == 0)
                rc = cmp_dir(c, subfd, k, &t->oid, depth + 1);
        }
    } else if (!git_oid_equal(&k->oid, &t->oid)) {
        emit(c, SG_CKPT_MODIFIED, k, t->mode, t->uid, t->gid);
        if (c->apply)
            rc = ap_create(c, dfd, name, t, NULL, depth);
    } else if (k->mode != t->mode || k->uid != t->uid || k->gid != t->gid) {
        emit(c, SG_CKPT_META, k, t->mode, t->uid, t->gid);
        if (c->apply)
            rc = ap_meta_at(c, dfd, name, t->mode, t->uid, t->gid);
    }
    return rc;
}

/* Compares the scanned directory cur with the checkpoint tree `target`
 * (their oids differ); dfd is cur's directory when applying. */
static int cmp_dir(cmpx *c, int dfd, const node *cur, const git_oid *target, int depth)
{
    if (depth > SG_CKPT_MAX_DEPTH)
        return sg_err_set(c->err, ELOOP, "nested deeper than %d", SG_CKPT_MAX_DEPTH);
    sg_autotdir tdir T = {0};
    if (tdir_load(c->st, target, &T, c->err) < 0)
        return -1;
    size_t i = 0, j = 0;
    int rc = 0;
    if ((T.mode | cur->mode) & SG_CKPT_MODE_PARTIAL) {
        /* Contents not recorded (on either side): left as they are. */
        c->unrestorable++;
        i = cur->nkids;
        j = T.n;
    }
    while (rc == 0 && (i < cur->nkids || j < T.n)) {
        const node *k = i < cur->nkids ? &cur->kids[i] : NULL;
        const tent *t = j < T.n ? &T.v[j] : NULL;
        int r;
        const char *name;
        if (k && (!t || strcmp(k->sname, t->sname) <= 0)) {
            r = t && strcmp(k->sname, t->sname) == 0 ? 0 : -1;
            name = SG_CKPT_NAME(k);
        } else if (t) {
            r = 1;
            name = sg_ckpt_unescape(t->sname);
        } else {
            break;
        }
        if (r >= 0 && t_omitted(t)) {
            /* Recorded by size only: whatever is there now stays. */
            bool same = r == 0 && k->recorded && git_oid_equal(&k->oid, &t->oid);
            if (!same) {
                c->unrestorable++;
                if (!c->apply)
                    c->nchanged++;
            }
            if (r == 0)
                i++;
            j++;
            continue;
        }
        size_t old = sg_ckpt_path_push(&c->path, name);
        sg_autotdir tdir sub = {0};
        if (r > 0 || (r == 0 && (!k->recorded || (k->mode & S_IFMT) != (t->mode & S_IFMT)))) {
            if (t->kind == 'd')
                rc = tdir_load(c->st, &t->oid, &sub, c->err);
        }
        if (rc < 0) {
            sg_ckpt_path_pop(&c->path, old);
            break;
        }
        if (r < 0) {
            /* Only in the workspace: the restore removes it. */
            emit(c, SG_CKPT_CREATED, k, 0, 0, 0);
            emit_cur_tree(c, k);
            if (c->apply)
                rc = ap_remove(c, dfd, name, depth);
            i++;
        } else if (r > 0) {
            rc = cmp_only_target(c, dfd, name, t, &sub, depth);
            j++;
        } else {
            rc = cmp_both(c, dfd, name, k, t, &sub, depth);
            i++;
            j++;
        }
        sg_ckpt_path_pop(&c->path, old);
    }
    if (rc < 0)
        return rc;
    if ((cur->mode & ~FLAG_BITS) != (T.mode & ~FLAG_BITS) || cur->uid != T.uid || cur->gid != T.gid) {
        emit(c, SG_CKPT_META, cur, T.mode, T.uid, T.gid);
        if (c->apply)
            rc = ap_fd_meta(c, dfd, T.mode, T.uid, T.gid);
    }
    return rc;
}

void sg_ckpt_cmpx_free(cmpx *c)
{
    sg_checkpoint_changes_free(c->ch, c->nch);
    c->ch = NULL;
    c->nch = 0;
    sg_buf_free(&c->path);
}

/* Runs the comparison of the scanned root with the checkpoint tree. */
int sg_ckpt_compare(cmpx *c, int root_fd, const node *root, const git_oid *target)
{
    sg_ckpt_sb_add(&c->path, "", 0);
    if (!target) { /* nothing before: everything is new */
        c->nchanged++;
        emit_cur_tree(c, root);
        return 0;
    }
    if (git_oid_equal(&root->oid, target))
        return 0;
    return cmp_dir(c, root_fd, root, target, 0);
}
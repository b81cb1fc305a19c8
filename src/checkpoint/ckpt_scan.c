/* ckpt_scan: taking a checkpoint's tree -- walks the workspace (never
 * following a symlink, within checkpoint.h's limits), reads each changed
 * file by its data extents, and serialises each directory as a git tree
 * plus a metadata blob (mode, owner) under SG_CKPT_META_NAME. */
#include "checkpoint/ckpt_internal.h"

#include <dirent.h>
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

/* ---------- the scanned workspace ---------- */

void sg_ckpt_node_free(node *n)
{
    for (size_t i = 0; i < n->nkids; i++)
        sg_ckpt_node_free(&n->kids[i]);
    free(n->kids);
    free(n->sname);
    n->kids = NULL;
    n->nkids = 0;
    n->sname = NULL;
}

static void node_set_name(node *n, const char *name)
{
    if (sg_ckpt_needs_escape(name)) {
        n->sname = sg_strdup_printf("%s%s", SG_CKPT_ESC, name);
        n->off = SG_CKPT_ESC_LEN;
    } else {
        n->sname = sg_xstrdup(name);
        n->off = 0;
    }
}

static int node_cmp(const void *a, const void *b)
{
    return strcmp(((const node *)a)->sname, ((const node *)b)->sname);
}

size_t sg_ckpt_path_push(sg_buf *p, const char *name)
{
    size_t old = p->len;
    if (p->len)
        sg_ckpt_sb_add(p, "/", 1);
    sg_ckpt_sb_str(p, name);
    return old;
}

void sg_ckpt_path_pop(sg_buf *p, size_t old)
{
    p->len = old;
    if (p->data)
        p->data[old] = '\0';
}

static void cache_note(scan *s, const struct stat *sb, const git_oid *oid, bool stored, bool complete)
{
    cent *c = sg_ckpt_cmap_put(&s->st->cache, s->path.data);
    c->gen = s->st->gen;
    c->valid = complete && sg_ckpt_ts_ns(&sb->st_ctim) < s->racy_after;
    c->size = (uint64_t)sb->st_size;
    c->ino = sb->st_ino;
    c->mtime = sg_ckpt_ts_ns(&sb->st_mtim);
    c->ctime = sg_ckpt_ts_ns(&sb->st_ctim);
    c->mode = sb->st_mode;
    c->stored = stored;
    c->oid = *oid;
}

/* Reads a regular file of `size` bytes into buf (zeroed by the caller)
 * by its data extents: holes are skipped, never read, so the work is the
 * file's data, not its apparent size. *complete is false when the file
 * shrank while being read. */
static int read_extents(int fd, char *buf, size_t size, bool sparse, bool *complete)
{
    off_t off = 0, end = (off_t)size;
    while (off < end) {
        /* A file with as many blocks as bytes has no hole: one read. */
        off_t d = sparse ? lseek(fd, off, SEEK_DATA) : -1;
        if (!sparse)
            errno = EINVAL;
        if (d < 0 && errno == ENXIO)
            break; /* a hole to the end */
        off_t h = -1;
        if (d < 0) {
            d = off; /* no SEEK_DATA here: read it all */
            h = end;
        } else {
            h = lseek(fd, d, SEEK_HOLE);
            if (h < 0)
                h = end;
        }
        if (d >= end)
            break;
        if (h > end)
            h = end;
        while (d < h) {
            ssize_t r = pread(fd, buf + d, (size_t)(h - d), d);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return -1;
            if (r == 0) {
                *complete = false;
                return 0;
            }
            d += r;
        }
        off = h;
    }
    return 0;
}

/* Records k by size and a marker instead of its content. */
static int omit_file(scan *s, const struct stat *sb, node *k, const char *why)
{
    char marker[256];
    int n = snprintf(marker, sizeof marker, "sandglass: content not stored (%s) size=%llu mtime=%lld ino=%llu\n",
                     why, (unsigned long long)sb->st_size, (long long)sg_ckpt_ts_ns(&sb->st_mtim),
                     (unsigned long long)sb->st_ino);
    k->mode = sb->st_mode | SG_CKPT_MODE_OMITTED;
    k->uid = sb->st_uid;
    k->gid = sb->st_gid;
    s->stats.omitted++;
    if (strstr(why, "store full"))
        s->stats.store_full = 1;
    return sg_ckpt_put_obj(s->st, s->write, &k->oid, marker, (size_t)n, GIT_OBJECT_BLOB, s->err);
}

static int scan_file(scan *s, int dfd, const char *name, const struct stat *sb, node *k)
{
    sg_ckpt_store *st = s->st;
    cent *c = sg_ckpt_cmap_get(&st->cache, s->path.data);
    if (c && c->valid && c->size == (uint64_t)sb->st_size && c->ino == sb->st_ino && c->mode == sb->st_mode &&
        c->mtime == sg_ckpt_ts_ns(&sb->st_mtim) && c->ctime == sg_ckpt_ts_ns(&sb->st_ctim)) {
        bool stored = c->stored || sg_ckpt_oidset_has(&st->known, &c->oid);
        if (!stored && s->write && git_odb_exists(st->odb, &c->oid)) {
            sg_ckpt_oidset_add(&st->known, &c->oid);
            stored = true;
        }
        if (stored || !s->write) {
            k->oid = c->oid;
            c->stored = stored;
            c->gen = st->gen;
            return 0;
        }
    }

    /* Over a limit: recorded by size and a marker, never read
     * (checkpoint.h: limits). */
    uint64_t size0 = (uint64_t)sb->st_size;
    const char *why = size0 > SG_CKPT_FILE_MAX ? "larger than SG_CKPT_FILE_MAX"
                    : s->read_bytes + size0 > SG_CKPT_TAKE_MAX ? "over this checkpoint's SG_CKPT_TAKE_MAX"
                    : s->write && st->stored_bytes + size0 > st->store_max ? "store full (SG_CKPT_STORE_MAX)"
                    : NULL;
    if (why)
        return omit_file(s, sb, k, why);

    s->stats.hashed++;
    sg_autoclose int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 && errno == ENOENT) {
        k->recorded = false; /* removed while we walk: not part of the snapshot */
        return 0;
    }
    if (fd < 0 && errno == ELOOP)
        return sg_err_set(s->err, EAGAIN, "%s was replaced by a symlink while being read", s->path.data);
    if (fd < 0)
        return sg_err_sys(s->err, "opening %s", s->path.data);
    struct stat fst;
    if (fstat(fd, &fst) < 0)
        return sg_err_sys(s->err, "stat %s", s->path.data);
    if (!S_ISREG(fst.st_mode))
        return sg_err_set(s->err, EAGAIN, "%s was replaced while being read", s->path.data);
    /* Replaced by another regular file since the lstat: record what we read. */
    k->mode = fst.st_mode;
    k->uid = fst.st_uid;
    k->gid = fst.st_gid;
    if ((uint64_t)fst.st_size > SG_CKPT_FILE_MAX || s->read_bytes + (uint64_t)fst.st_size > SG_CKPT_TAKE_MAX)
        return omit_file(s, &fst, k, "grew while being read");
    size_t size = (size_t)fst.st_size;
    s->read_bytes += size;
    bool complete = true;
    sg_autofree char *buf = sg_xcalloc(size ? size : 1, 1);
    bool sparse = (uint64_t)fst.st_blocks * 512 < (uint64_t)fst.st_size;
    if (read_extents(fd, buf, size, sparse, &complete) < 0)
        return sg_err_sys(s->err, "reading %s", s->path.data);
    /* A file written while we read is captured as read; not cached. */
    if (sg_ckpt_put_obj(st, s->write, &k->oid, buf, size, GIT_OBJECT_BLOB, s->err) < 0)
        return -1;
    cache_note(s, &fst, &k->oid, s->write, complete);
    return 0;
}

static int scan_link(scan *s, int dfd, const char *name, node *k)
{
    char buf[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, buf, sizeof buf);
    if (n < 0 && errno == ENOENT) {
        k->recorded = false; /* removed while we walk: not part of the snapshot */
        return 0;
    }
    if (n < 0 && errno == EINVAL) /* no longer a symlink: the walk is taken again */
        return sg_err_set(s->err, EAGAIN, "%s was replaced while being read", s->path.data);
    if (n < 0)
        return sg_err_sys(s->err, "readlink %s", s->path.data);
    if ((size_t)n >= sizeof buf)
        return sg_err_set(s->err, ENAMETOOLONG, "symlink %s: target too long", s->path.data);
    return sg_ckpt_put_obj(s->st, s->write, &k->oid, buf, (size_t)n, GIT_OBJECT_BLOB, s->err);
}

/* Git orders tree entries by name, a directory as if it ended in '/'. */
typedef struct tref {
    const char *name;
    size_t len;
    bool dir;
    const char *mode;
    const git_oid *oid;
} tref;

static int tref_cmp(const void *pa, const void *pb)
{
    const tref *a = pa, *b = pb;
    size_t m = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, m);
    if (c)
        return c;
    unsigned ca = a->len > m ? (unsigned char)a->name[m] : (a->dir ? '/' : 0);
    unsigned cb = b->len > m ? (unsigned char)b->name[m] : (b->dir ? '/' : 0);
    return (int)ca - (int)cb;
}

/* Writes v in base backwards, ending at end; returns the first char. */
static char *fmt_u32(char *end, uint32_t v, uint32_t base)
{
    do {
        *--end = (char)('0' + v % base);
        v /= base;
    } while (v);
    return end;
}

/* "<octal mode> <uid> <gid> <name>\0" (snprintf is slow for 10k lines). */
static void meta_line(sg_buf *b, uint32_t mode, uint32_t uid, uint32_t gid, const char *sname)
{
    char num[48];
    char *end = num + sizeof num;
    *--end = ' ';
    end = fmt_u32(end, gid, 10);
    *--end = ' ';
    end = fmt_u32(end, uid, 10);
    *--end = ' ';
    end = fmt_u32(end, mode, 8);
    sg_ckpt_sb_add(b, end, (size_t)(num + sizeof num - end));
    sg_ckpt_sb_add(b, sname, strlen(sname) + 1);
}

/* Serialises one directory (its kids already have oids): meta blob + tree. */
static int build_tree(sg_ckpt_store *st, bool write, node *dir, sg_err *err)
{
    sg_autobuf sg_buf meta = {0};
    meta_line(&meta, dir->mode, dir->uid, dir->gid, ".");
    for (size_t i = 0; i < dir->nkids; i++) {
        const node *k = &dir->kids[i];
        if (k->recorded && !S_ISDIR(k->mode))
            meta_line(&meta, k->mode, k->uid, k->gid, k->sname);
    }
    git_oid meta_oid;
    if (sg_ckpt_put_obj(st, write, &meta_oid, meta.data, meta.len, GIT_OBJECT_BLOB, err) < 0)
        return -1;

    sg_autofree tref *refs = sg_xcalloc(dir->nkids + 1, sizeof(tref));
    size_t n = 0;
    for (size_t i = 0; i < dir->nkids; i++) {
        const node *k = &dir->kids[i];
        if (!k->recorded)
            continue;
        tref *r = &refs[n++];
        r->name = k->sname;
        r->len = strlen(k->sname);
        r->dir = S_ISDIR(k->mode);
        r->oid = &k->oid;
        r->mode = r->dir ? "40000" : S_ISLNK(k->mode) ? "120000"
                : (S_ISREG(k->mode) && (k->mode & S_IXUSR)) ? "100755" : "100644";
    }
    refs[n++] = (tref){SG_CKPT_META_NAME, SG_CKPT_ESC_LEN, false, "100644", &meta_oid};
    qsort(refs, n, sizeof(tref), tref_cmp);
    sg_autobuf sg_buf tree = {0};
    for (size_t i = 0; i < n; i++) {
        sg_ckpt_sb_str(&tree, refs[i].mode);
        sg_ckpt_sb_add(&tree, " ", 1);
        sg_ckpt_sb_add(&tree, refs[i].name, refs[i].len + 1);
        sg_ckpt_sb_add(&tree, refs[i].oid->id, GIT_OID_RAWSZ);
    }
    return sg_ckpt_put_obj(st, write, &dir->oid, tree.data, tree.len, GIT_OBJECT_TREE, err);
}

static void strv_free_n(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Names in a directory (without . and ..). */
static int read_names(int dfd, char ***out, size_t *nout, sg_err *err, const char *what)
{
    int fd2 = dup(dfd);
    if (fd2 < 0)
        return sg_err_sys(err, "dup");
    DIR *d = fdopendir(fd2);
    if (!d) {
        close(fd2);
        return sg_err_sys(err, "opendir %s", what);
    }
    rewinddir(d);
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        sg_xgrow(&v, &cap, n + 1, sizeof *v);
        v[n++] = sg_xstrdup(de->d_name);
        errno = 0;
    }
    int e = errno;
    closedir(d);
    if (e) {
        strv_free_n(v, n);
        errno = e;
        return sg_err_sys(err, "readdir %s", what);
    }
    *out = v;
    *nout = n;
    return 0;
}

static int scan_dir(scan *s, int dfd, node *dir, int depth)
{
    if (depth >= SG_CKPT_MAX_DEPTH) {
        /* Recorded, its contents not walked (checkpoint.h: limits). */
        dir->mode |= SG_CKPT_MODE_PARTIAL;
        s->stats.partial++;
        return build_tree(s->st, s->write, dir, s->err);
    }
    char **names = NULL;
    size_t nn = 0;
    if (read_names(dfd, &names, &nn, s->err, s->path.len ? s->path.data : ".") < 0)
        return -1;
    dir->kids = sg_xcalloc(nn, sizeof(node));
    int rc = 0;
    for (size_t i = 0; i < nn && rc == 0; i++) {
        if (++s->entries > SG_CKPT_MAX_ENTRIES) {
            rc = sg_err_set(s->err, EFBIG, "workspace has more than %u entries", SG_CKPT_MAX_ENTRIES);
            break;
        }
        const char *name = names[i];
        struct stat sb;
        if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue; /* removed while we walk */
            rc = sg_err_sys(s->err, "stat %s/%s", s->path.data, names[i]);
            break;
        }
        node *k = &dir->kids[dir->nkids++];
        if (sg_ckpt_needs_escape(name)) {
            node_set_name(k, name);
            name = SG_CKPT_NAME(k);
        } else {
            k->sname = sg_steal_ptr(&names[i]); /* name stays valid: k owns it */
        }
        k->mode = sb.st_mode;
        k->uid = sb.st_uid;
        k->gid = sb.st_gid;
        k->recorded = true;
        size_t old = sg_ckpt_path_push(&s->path, name);
        if (S_ISDIR(sb.st_mode)) {
            sg_autoclose int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0 && errno == ENOENT)
                k->recorded = false; /* removed while we walk */
            else if (sub < 0 && (errno == ENOTDIR || errno == ELOOP))
                rc = sg_err_set(s->err, EAGAIN, "%s was replaced while being read", s->path.data);
            else if (sub < 0)
                rc = sg_err_sys(s->err, "opening %s", s->path.data);
            else {
                s->stats.dirs++;
                rc = scan_dir(s, sub, k, depth + 1);
            }
        } else if (S_ISREG(sb.st_mode)) {
            s->stats.files++;
            s->stats.bytes += (uint64_t)sb.st_size;
            rc = scan_file(s, dfd, name, &sb, k);
        } else if (S_ISLNK(sb.st_mode)) {
            s->stats.files++;
            rc = scan_link(s, dfd, name, k);
        } else if (S_ISFIFO(sb.st_mode)) {
            s->stats.files++;
            rc = sg_ckpt_put_obj(s->st, s->write, &k->oid, "", 0, GIT_OBJECT_BLOB, s->err);
        } else {
            k->recorded = false;
            s->stats.skipped++;
        }
        sg_ckpt_path_pop(&s->path, old);
    }
    strv_free_n(names, nn);
    if (rc < 0)
        return rc;
    qsort(dir->kids, dir->nkids, sizeof(node), node_cmp);
    return build_tree(s->st, s->write, dir, s->err);
}

void sg_ckpt_scan_free(scan *s)
{
    sg_buf_free(&s->path);
}

/* Walks the workspace into root; returns the workspace fd in *root_fd. */
int sg_ckpt_scan_workspace(sg_ckpt_store *st, scan *s, bool write, node *root, int *root_fd, sg_err *err)
{
    memset(s, 0, sizeof *s);
    memset(root, 0, sizeof *root);
    s->st = st;
    s->write = write;
    s->err = err;
    s->racy_after = sg_ckpt_now_real_ns() - SG_CKPT_RACY_NS;
    st->gen++;
    sg_ckpt_sb_add(&s->path, "", 0);
    sg_autoclose int fd = open(st->ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "opening workspace %s", st->ws);
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return sg_err_sys(err, "stat workspace %s", st->ws);
    root->sname = sg_xstrdup("");
    root->mode = sb.st_mode;
    root->uid = sb.st_uid;
    root->gid = sb.st_gid;
    root->recorded = true;
    s->stats.dirs = 1;
    if (scan_dir(s, fd, root, 0) < 0)
        return -1;
    if (root_fd)
        *root_fd = sg_steal_fd(&fd);
    return 0;
}
/* seed: a workspace filled from a tarball (libarchive's secure
 * extraction) or from another sandbox's checkpoint. See seed.h. */
#include "checkpoint/seed.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "checkpoint/checkpoint.h"

#define VIS_MAX 200 /* an entry's name in a message, escaped */

typedef struct tar_ctx {
    struct archive *in, *out;
    sg_wscopy_stats *st;
    const char *name; /* the entry's name, escaped */
    sg_err *err;
} tar_ctx;

static void archive_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}

static void disk_freep(struct archive **a)
{
    if (*a)
        archive_write_free(*a);
}

/* Levels of an entry's path ("a/b/c" is 3; empty and "." components do
 * not count). */
static unsigned path_depth(const char *p)
{
    unsigned n = 0;
    while (*p) {
        while (*p == '/')
            p++;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l > 0 && !(l == 1 && p[0] == '.'))
            n++;
        p += l;
    }
    return n;
}

/* The bounds and the type of the entry e, checked before anything of it
 * is written: 1 to make it, 0 to skip it (a FIFO, device or socket). */
static int tar_admit(tar_ctx *x, struct archive_entry *e)
{
    sg_wscopy_stats *st = x->st;
    mode_t type = archive_entry_filetype(e);
    if (!archive_entry_hardlink(e) && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
        st->skipped++;
        return 0;
    }
    if (st->files + st->dirs + st->links >= SG_CP_MAX_ENTRIES)
        return sg_err_set(x->err, EFBIG, "more than %d entries: create --from seeds at most that many",
                          SG_CP_MAX_ENTRIES);
    if (path_depth(archive_entry_pathname(e)) > SG_CP_MAX_DEPTH)
        return sg_err_set(x->err, ELOOP, "entry '%s' is nested too deep: create --from makes at most %d levels",
                          x->name, SG_CP_MAX_DEPTH);
    la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (size < 0 || (uint64_t)size > SG_CP_MAX_BYTES - st->bytes)
        return sg_err_set(x->err, EFBIG, "entry '%s' is %lld bytes: create --from seeds at most %llu bytes in all",
                          x->name, (long long)size, (unsigned long long)SG_CP_MAX_BYTES);
    /* permission bits only: no set-uid, set-gid or sticky bit, no owner */
    archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
    return 1;
}

/* The entry's data, counted against the byte bound as it is written. */
static int tar_data(tar_ctx *x)
{
    for (;;) {
        const void *buf;
        size_t n;
        la_int64_t off;
        int r = archive_read_data_block(x->in, &buf, &n, &off);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r < ARCHIVE_WARN)
            return sg_err_set(x->err, EIO, "entry '%s': %s", x->name, archive_error_string(x->in));
        if (n > SG_CP_MAX_BYTES - x->st->bytes)
            return sg_err_set(x->err, EFBIG, "entry '%s' grew past what create --from seeds (%llu bytes in all)",
                              x->name, (unsigned long long)SG_CP_MAX_BYTES);
        x->st->bytes += n;
        if (archive_write_data_block(x->out, buf, n, off) < ARCHIVE_WARN)
            return sg_err_set(x->err, EIO, "entry '%s': %s", x->name, archive_error_string(x->out));
    }
}

static int tar_entry(tar_ctx *x, struct archive_entry *e)
{
    int ok = tar_admit(x, e);
    if (ok < 0)
        return -1;
    if (ok == 0 && archive_read_data_skip(x->in) < ARCHIVE_WARN)
        return sg_err_set(x->err, EIO, "entry '%s': %s", x->name, archive_error_string(x->in));
    if (ok == 0)
        return 0;
    mode_t type = archive_entry_filetype(e);
    /* refused here: `..`, an absolute path, a path through a symlink */
    if (archive_write_header(x->out, e) < ARCHIVE_WARN)
        return sg_err_set(x->err, EPERM, "entry '%s' refused: %s", x->name, archive_error_string(x->out));
    if (type == AE_IFREG && tar_data(x) < 0)
        return -1;
    if (archive_write_finish_entry(x->out) < ARCHIVE_WARN)
        return sg_err_set(x->err, EIO, "entry '%s': %s", x->name, archive_error_string(x->out));
    if (type == AE_IFDIR)
        x->st->dirs++;
    else if (type == AE_IFLNK)
        x->st->links++;
    else
        x->st->files++;
    return 0;
}

int sg_seed_tar(int tarfd, int wsfd, sg_wscopy_stats *st, sg_err *err)
{
    memset(st, 0, sizeof *st);
    struct stat sb;
    if (fstat(tarfd, &sb) < 0 || !S_ISREG(sb.st_mode))
        return sg_err_set(err, EINVAL, "not a regular file: a tarball is one");
    /* libarchive's disk writer works relative to the current directory */
    if (fchdir(wsfd) < 0)
        return sg_err_sys(err, "the workspace");
    __attribute__((cleanup(archive_freep))) struct archive *in = archive_read_new();
    __attribute__((cleanup(disk_freep))) struct archive *out = archive_write_disk_new();
    if (!in || !out)
        return sg_err_set(err, ENOMEM, "out of memory");
    archive_read_support_filter_all(in);
    archive_read_support_format_tar(in);
    archive_write_disk_set_options(out,
                                   ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                       ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_PERM |
                                       ARCHIVE_EXTRACT_TIME);
    if (archive_read_open_fd(in, tarfd, 65536) != ARCHIVE_OK)
        return sg_err_set(err, EINVAL, "not a tarball: %s", archive_error_string(in));
    tar_ctx x = {.in = in, .out = out, .st = st, .err = err};
    for (uint64_t n = 0;; n++) {
        struct archive_entry *e;
        int r = archive_read_next_header(in, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return sg_err_set(err, EINVAL, n == 0 ? "not a tarball: %s" : "a damaged tarball: %s",
                              archive_error_string(in));
        const char *p = archive_entry_pathname(e);
        char v[VIS_MAX];
        x.name = p ? sg_vis(p, strlen(p), v, sizeof v) : "?";
        if (!p)
            return sg_err_set(err, EINVAL, "an entry has no name this system can make");
        if (tar_entry(&x, e) < 0)
            return -1;
    }
    if (archive_write_close(out) < ARCHIVE_WARN)
        return sg_err_set(err, EIO, "%s", archive_error_string(out));
    return 0;
}

/* Every entry under dfd given to uid/gid, permission bits only (the
 * restore gave them the source sandbox's owners and modes); counted. */
static int own_tree(int dfd, uid_t uid, gid_t gid, unsigned depth, sg_wscopy_stats *st, sg_err *err)
{
    if (depth > SG_CP_MAX_DEPTH)
        return sg_err_set(err, ELOOP, "the checkpoint is nested deeper than %d levels", SG_CP_MAX_DEPTH);
    int fd = dup(dfd);
    sg_autoclosedir DIR *dp = fd < 0 ? NULL : fdopendir(fd);
    if (!dp) {
        if (fd >= 0)
            close(fd);
        return sg_err_sys(err, "cannot list a directory of the seed");
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        struct stat sb;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
            fchownat(dfd, e->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return sg_err_sys(err, "cannot give the seed its owner");
        if (S_ISLNK(sb.st_mode)) {
            st->links++;
            continue;
        }
        if (fchmodat(dfd, e->d_name, sb.st_mode & 0777, 0) < 0)
            return sg_err_sys(err, "cannot give the seed its modes");
        if (!S_ISDIR(sb.st_mode)) {
            st->files++;
            st->bytes += (uint64_t)sb.st_size;
            continue;
        }
        st->dirs++;
        sg_autoclose int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            return sg_err_sys(err, "cannot open a directory of the seed");
        if (own_tree(sub, uid, gid, depth + 1, st, err) < 0)
            return -1;
    }
    return 0;
}

/* A scratch store at tmp_dir whose objects are store_dir's (alternates):
 * a restore through it writes nothing into the other sandbox's store. */
static sg_ckpt_store *scratch_store(const char *store_dir, const char *ws, const char *tmp_dir, sg_err *err)
{
    sg_autofree char *real = realpath(store_dir, NULL);
    struct stat sb;
    sg_autofree char *objects = real ? sg_strdup_printf("%s/objects", real) : NULL;
    if (!objects || stat(objects, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        sg_err_set(err, ENOENT, "that sandbox has no checkpoint store");
        return NULL;
    }
    sg_ckpt_store *st = sg_checkpoint_open(tmp_dir, ws, err);
    if (!st)
        return NULL;
    sg_checkpoint_close(st);
    sg_autofree char *info = sg_strdup_printf("%s/objects/info", tmp_dir);
    sg_autofree char *alt = sg_strdup_printf("%s/alternates", info);
    sg_autofree char *line = sg_strdup_printf("%s\n", objects);
    if (sg_mkdir_p(info, 0700, err) < 0 || sg_write_file_atomic(alt, line, strlen(line), 0600, err) < 0)
        return NULL;
    return sg_checkpoint_open(tmp_dir, ws, err);
}

int sg_seed_checkpoint(const char *store_dir, const char *id, const char *ws, const char *tmp_dir, uid_t uid, gid_t gid,
                       sg_wscopy_stats *st, sg_err *err)
{
    memset(st, 0, sizeof *st);
    sg_ckpt_store *store = scratch_store(store_dir, ws, tmp_dir, err);
    int rc = store ? sg_checkpoint_restore(store, id, NULL, err) : -1;
    if (store)
        sg_checkpoint_close(store);
    sg_err e2 = {0};
    sg_rm_rf(tmp_dir, &e2);
    if (rc < 0)
        return -1;
    sg_autoclose int wsfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wsfd < 0 || fchown(wsfd, uid, gid) < 0 || fchmod(wsfd, 0755) < 0)
        return sg_err_sys(err, "the workspace %s", ws);
    return own_tree(wsfd, uid, gid, 0, st, err);
}

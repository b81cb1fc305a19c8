/* wscopy: a file or a tree copied between a workspace and the operator's
 * file system, every name opened from its directory's fd, never through a
 * symlink. See wscopy.h. */
#include "sandbox/wscopy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"

#define VIS_MAX 200 /* a name in a message, escaped */
_Static_assert(SG_CP_MAX_DEPTH == 256, "copy_dir's message names the depth");

typedef struct cp_ctx {
    const sg_wscopy_opts *o;
    sg_wscopy_stats *st;
    uint64_t max_bytes, max_entries;
    sg_err *err;
} cp_ctx;

static int fail_sys(cp_ctx *x, const char *what, const char *name)
{
    char v[VIS_MAX];
    return sg_err_sys(x->err, "%s '%s'", what, sg_vis(name, strlen(name), v, sizeof v));
}

static int fail(cp_ctx *x, int code, const char *name, const char *why)
{
    char v[VIS_MAX];
    return sg_err_set(x->err, code, "'%s' %s", sg_vis(name, strlen(name), v, sizeof v), why);
}

/* One component p (l bytes) of a workspace path added to out (o used). */
static int rel_push(char *out, size_t n, size_t *o, const char *p, size_t l, sg_err *err)
{
    if (l > NAME_MAX)
        return sg_err_set(err, ENAMETOOLONG, "a name in the workspace path is longer than %d bytes", NAME_MAX);
    if (*o + 1 + l + 1 > n)
        return sg_err_set(err, ENAMETOOLONG, "the workspace path is too long");
    if (*o)
        out[(*o)++] = '/';
    memcpy(out + *o, p, l);
    *o += l;
    out[*o] = '\0';
    return 0;
}

int sg_wscopy_rel(const char *arg, char *out, size_t n, sg_err *err)
{
    static const char ws[] = "/workspace";
    const size_t wl = sizeof ws - 1;
    char v[VIS_MAX];
    const char *p = arg;
    if (strlen(arg) >= PATH_MAX)
        return sg_err_set(err, ENAMETOOLONG, "the workspace path is longer than %d bytes", PATH_MAX - 1);
    if (arg[0] == '/') {
        if (strncmp(arg, ws, wl) != 0 || (arg[wl] != '\0' && arg[wl] != '/'))
            return sg_err_set(err, EXDEV,
                              "'%s' is outside the workspace: give a path under /workspace, or one "
                              "relative to it",
                              sg_vis(arg, strlen(arg), v, sizeof v));
        p = arg + wl;
    }
    if (n < 2)
        return sg_err_set(err, ENAMETOOLONG, "no room for the workspace path");
    size_t o = 0;
    out[0] = '\0';
    while (*p) {
        while (*p == '/')
            p++;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 2 && p[0] == '.' && p[1] == '.') {
            if (o == 0)
                return sg_err_set(err, EXDEV, "'%s' climbs out of the workspace ('..')",
                                  sg_vis(arg, strlen(arg), v, sizeof v));
            char *s = memrchr(out, '/', o);
            o = s ? (size_t)(s - out) : 0;
            out[o] = '\0';
        } else if (l > 0 && !(l == 1 && p[0] == '.') && rel_push(out, n, &o, p, l, err) < 0) {
            return -1;
        }
        p += l;
    }
    if (o == 0)
        strcpy(out, ".");
    return 0;
}

void sg_wscopy_split(const char *rel, char *dir, size_t n, const char **base)
{
    const char *s = strrchr(rel, '/');
    if (!s) {
        snprintf(dir, n, ".");
        *base = rel;
        return;
    }
    snprintf(dir, n, "%.*s", (int)(s - rel), rel);
    *base = s + 1;
}

static int copy_entry(cp_ctx *x, int sdir, const char *sname, int ddir, const char *dname, unsigned depth,
                      bool in_tree);

static int copy_link(cp_ctx *x, int sdir, const char *sname, int ddir, const char *dname)
{
    char target[PATH_MAX];
    ssize_t n = readlinkat(sdir, sname, target, sizeof target);
    if (n < 0)
        return fail_sys(x, "cannot read the symlink", sname);
    if ((size_t)n >= sizeof target)
        return fail(x, ENAMETOOLONG, sname, "is a symlink whose target is too long");
    target[n] = '\0';
    if (symlinkat(target, ddir, dname) < 0)
        return errno == EEXIST ? fail(x, EEXIST, dname, "exists: cp does not replace it with a symlink")
                               : fail_sys(x, "cannot make the symlink", dname);
    if (fchownat(ddir, dname, x->o->uid, x->o->gid, AT_SYMLINK_NOFOLLOW) < 0)
        return fail_sys(x, "cannot give the symlink its owner", dname);
    x->st->links++;
    return 0;
}

static bool cancelled(cp_ctx *x)
{
    if (!x->o->cancel || !__atomic_load_n(x->o->cancel, __ATOMIC_ACQUIRE))
        return false;
    sg_err_set(x->err, ECANCELED, "cancelled (the sandbox was aborted or is going) after %llu files, %llu bytes: "
               "what was copied stays",
               (unsigned long long)x->st->files, (unsigned long long)x->st->bytes);
    return true;
}

/* in's bytes to out, counted against the copy's byte budget. */
static int pump(cp_ctx *x, int in, int out, const char *name)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fail_sys(x, "cannot read", name);
        if (n == 0)
            return 0;
        if (cancelled(x))
            return -1;
        if ((uint64_t)n > x->max_bytes - x->st->bytes)
            return fail(x, EFBIG, name, "grew past what one cp copies");
        x->st->bytes += (uint64_t)n;
        if (sg_write_all(out, buf, (size_t)n) < 0)
            return fail_sys(x, "cannot write", name);
    }
}

static int copy_file(cp_ctx *x, int sdir, const char *sname, const struct stat *st, int ddir, const char *dname)
{
    char msg[128];
    if ((uint64_t)st->st_size > x->max_bytes - x->st->bytes) {
        snprintf(msg, sizeof msg, "is %lld bytes: one cp copies at most %llu bytes in all", (long long)st->st_size,
                 (unsigned long long)x->max_bytes);
        return fail(x, EFBIG, sname, msg);
    }
    /* O_NONBLOCK: whatever is swapped in between the stat and the open,
     * the open never waits (a FIFO); it must then be the file stat'ed. */
    sg_autoclose int in = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat s2, d;
    if (in < 0 || fstat(in, &s2) < 0)
        return fail_sys(x, "cannot open", sname);
    if (!S_ISREG(s2.st_mode) || s2.st_ino != st->st_ino || s2.st_dev != st->st_dev)
        return fail(x, EAGAIN, sname, "changed while it was copied");
    sg_autoclose int out =
        openat(ddir, dname, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    if (out < 0 && errno == ELOOP)
        return fail(x, EEXIST, dname, "exists and is a symlink: cp does not write through it");
    if (out < 0 || fstat(out, &d) < 0)
        return fail_sys(x, "cannot create", dname);
    if (!S_ISREG(d.st_mode))
        return fail(x, EEXIST, dname, "exists and is not a regular file");
    /* a hard link of the same file elsewhere would be written too */
    if (d.st_nlink > 1)
        return fail(x, EMLINK, dname, "exists with other hard links: cp does not write to it");
    if (ftruncate(out, 0) < 0)
        return fail_sys(x, "cannot truncate", dname);
    if (pump(x, in, out, sname) < 0)
        return -1;
    if (fchown(out, x->o->uid, x->o->gid) < 0 || fchmod(out, st->st_mode & 0777) < 0)
        return fail_sys(x, "cannot give its owner and mode to", dname);
    x->st->files++;
    return 0;
}

/* The entries of the directory s copied into d. */
static int copy_kids(cp_ctx *x, int s, int d, unsigned depth)
{
    int fd = dup(s);
    sg_autoclosedir DIR *dp = fd < 0 ? NULL : fdopendir(fd);
    if (!dp) {
        if (fd >= 0)
            close(fd);
        return sg_err_sys(x->err, "cannot list a directory");
    }
    struct dirent *e;
    errno = 0;
    while ((e = readdir(dp))) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            copy_entry(x, s, e->d_name, d, e->d_name, depth + 1, true) < 0)
            return -1;
        errno = 0;
    }
    return errno ? sg_err_sys(x->err, "cannot list a directory") : 0;
}

static int copy_dir(cp_ctx *x, int sdir, const char *sname, const struct stat *st, int ddir, const char *dname,
                    unsigned depth)
{
    if (depth >= SG_CP_MAX_DEPTH)
        return fail(x, ELOOP, sname, "is nested too deep: cp walks at most 256 directories down");
    sg_autoclose int s = openat(sdir, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat s2;
    if (s < 0 || fstat(s, &s2) < 0)
        return fail_sys(x, "cannot open the directory", sname);
    if (s2.st_ino != st->st_ino || s2.st_dev != st->st_dev)
        return fail(x, EAGAIN, sname, "changed while it was copied");
    /* made 0700 and root's until it is full: nobody else enters it meanwhile */
    bool made = mkdirat(ddir, dname, 0700) == 0;
    if (!made && errno != EEXIST)
        return fail_sys(x, "cannot make the directory", dname);
    sg_autoclose int d = openat(ddir, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0 && (errno == ENOTDIR || errno == ELOOP))
        return fail(x, EEXIST, dname, "exists and is not a directory");
    if (d < 0)
        return fail_sys(x, "cannot open the directory", dname);
    x->st->dirs++;
    if (copy_kids(x, s, d, depth) < 0)
        return -1;
    if (made && (fchown(d, x->o->uid, x->o->gid) < 0 || fchmod(d, st->st_mode & 0777) < 0))
        return fail_sys(x, "cannot give its owner and mode to", dname);
    return 0;
}

static int copy_entry(cp_ctx *x, int sdir, const char *sname, int ddir, const char *dname, unsigned depth, bool in_tree)
{
    struct stat st;
    if (cancelled(x))
        return -1;
    if (fstatat(sdir, sname, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail_sys(x, "cannot stat", sname);
    bool special = !S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode);
    if (special && in_tree) {
        x->st->skipped++;
        return 0;
    }
    if (special)
        return fail(x, EINVAL, sname,
                    "is not a regular file, a directory or a symlink (a FIFO, a socket or a "
                    "device): cp copies none");
    if (x->st->files + x->st->dirs + x->st->links >= x->max_entries)
        return sg_err_set(x->err, EFBIG, "more than %llu entries: one cp copies at most that many",
                          (unsigned long long)x->max_entries);
    if (S_ISLNK(st.st_mode))
        return copy_link(x, sdir, sname, ddir, dname);
    if (S_ISDIR(st.st_mode))
        return copy_dir(x, sdir, sname, &st, ddir, dname, depth);
    return copy_file(x, sdir, sname, &st, ddir, dname);
}

int sg_wscopy(int sdir, const char *sname, int ddir, const char *dname, const sg_wscopy_opts *opts, sg_wscopy_stats *st,
              sg_err *err)
{
    memset(st, 0, sizeof *st);
    cp_ctx x = {
        .o = opts,
        .st = st,
        .err = err,
        .max_bytes = opts->max_bytes ? opts->max_bytes : SG_CP_MAX_BYTES,
        .max_entries = opts->max_entries ? opts->max_entries : SG_CP_MAX_ENTRIES,
    };
    return copy_entry(&x, sdir, sname, ddir, dname, 0, false);
}

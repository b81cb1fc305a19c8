#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"

int sg_parse_size(const char *s, uint64_t *out, sg_err *err)
{
    if (!s || !*s)
        return sg_err_set(err, EINVAL, "empty size");
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return sg_err_set(err, EINVAL, "invalid size '%s': expected a number with an optional K, M, G or T suffix", s);
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno == ERANGE)
        return sg_err_set(err, ERANGE, "invalid size '%s': too large", s);
    uint64_t mul = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1ull << 10; break;
        case 'M': mul = 1ull << 20; break;
        case 'G': mul = 1ull << 30; break;
        case 'T': mul = 1ull << 40; break;
        default:
            return sg_err_set(err, EINVAL, "invalid size '%s': unknown suffix '%s' (use K, M, G or T)", s, end);
        }
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
        if (*end)
            return sg_err_set(err, EINVAL, "invalid size '%s': trailing characters '%s'", s, end);
    }
    if (v == 0)
        return sg_err_set(err, EINVAL, "invalid size '%s': must be greater than zero", s);
    if (v > UINT64_MAX / mul)
        return sg_err_set(err, ERANGE, "invalid size '%s': too large", s);
    *out = v * mul;
    return 0;
}

int sg_parse_seconds(const char *s, double max, double *out, sg_err *err)
{
    if (!s || !*s)
        return sg_err_set(err, EINVAL, "empty number of seconds");
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return sg_err_set(err, EINVAL, "invalid number of seconds '%s'", s);
    if (v <= 0)
        return sg_err_set(err, EINVAL, "invalid number of seconds '%s': must be greater than zero", s);
    if (v > max)
        return sg_err_set(err, ERANGE, "invalid number of seconds '%s': at most %g", s, max);
    *out = v;
    return 0;
}

int sg_parse_duration(const char *s, double max, double *out, sg_err *err)
{
    if (!s || !*s)
        return sg_err_set(err, EINVAL, "empty duration");
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v) || !isdigit((unsigned char)*s))
        return sg_err_set(err, EINVAL, "invalid duration '%s': expected seconds or a number with s, m, h or d", s);
    static const struct { char unit; double mul; } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
    if (*end) {
        size_t i = 0;
        while (i < sizeof units / sizeof *units && units[i].unit != *end)
            i++;
        if (i == sizeof units / sizeof *units || end[1])
            return sg_err_set(err, EINVAL, "invalid duration '%s': unknown unit '%s' (use s, m, h or d)", s, end);
        v *= units[i].mul;
    }
    if (v <= 0)
        return sg_err_set(err, EINVAL, "invalid duration '%s': must be greater than zero", s);
    if (v > max)
        return sg_err_set(err, ERANGE, "invalid duration '%s': at most %g s", s, max);
    *out = v;
    return 0;
}

int sg_parse_uint(const char *s, uint64_t max, uint64_t *out, sg_err *err)
{
    if (!s || !isdigit((unsigned char)*s))
        return sg_err_set(err, EINVAL, "invalid number '%s': expected a positive integer", s ? s : "");
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE)
        return sg_err_set(err, EINVAL, "invalid number '%s': expected a positive integer", s);
    if (v == 0 || v > max)
        return sg_err_set(err, ERANGE, "invalid number '%s': must be between 1 and %llu", s, (unsigned long long)max);
    *out = v;
    return 0;
}

bool sg_valid_name(const char *s)
{
    if (!s)
        return false;
    size_t n = strlen(s);
    if (n == 0 || n > SG_NAME_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '.' || c == '_' || c == '-' || c == '@'))
            return false;
    }
    return true;
}

int sg_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

ssize_t sg_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t have = 0;
    while (have < len) {
        ssize_t r = read(fd, p + have, len - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        have += (size_t)r;
    }
    return (ssize_t)have;
}

char *sg_read_fd(int fd, size_t max, size_t *len, sg_err *err)
{
    sg_autobuf sg_buf b = {0};
    for (;;) {
        /* one byte past max tells what is too large */
        size_t chunk = b.len < 4096 ? 4096 : b.len;
        size_t left = max - b.len; /* b.len <= max here */
        if (left < SIZE_MAX)
            left++;
        if (chunk > left)
            chunk = left;
        if (sg_buf_reserve(&b, chunk) < 0) {
            sg_err_set(err, ENOMEM, "out of memory");
            return NULL;
        }
        ssize_t n = sg_read_all(fd, b.data + b.len, chunk);
        if (n < 0) {
            sg_err_sys(err, "read");
            return NULL;
        }
        b.len += (size_t)n;
        b.data[b.len] = '\0';
        if (b.len > max) {
            sg_err_set(err, EFBIG, "more than %zu bytes", max);
            return NULL;
        }
        if ((size_t)n < chunk)
            break;
    }
    return sg_buf_steal(&b, len);
}

char *sg_read_file_at(int dirfd, const char *path, size_t max, size_t *len, sg_err *err)
{
    sg_autoclose int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sg_err_sys(err, "cannot open %s", path);
        return NULL;
    }
    sg_err e = {0};
    char *s = sg_read_fd(fd, max, len, &e);
    if (!s && e.code == EFBIG)
        sg_err_set(err, EFBIG, "%s is larger than %zu bytes", path, max);
    else if (!s && e.code == ENOMEM)
        sg_err_set(err, ENOMEM, "out of memory");
    else if (!s)
        sg_err_set(err, e.code, "cannot read %s: %s", path, strerror(e.code));
    return s;
}

char *sg_read_file(const char *path, size_t max, size_t *len, sg_err *err)
{
    return sg_read_file_at(AT_FDCWD, path, max, len, err);
}

int sg_write_knob_at(int dirfd, const char *path, const char *value, sg_err *err)
{
    sg_autoclose int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", path);
    if (sg_write_all(fd, value, strlen(value)) < 0)
        return sg_err_sys(err, "cannot write '%s' to %s", value, path);
    return 0;
}

int sg_write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode, sg_err *err)
{
    sg_autofree char *tmp = sg_strdup_printf("%s.tmp.%d", path, (int)getpid());
    sg_autoclose int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return sg_err_sys(err, "cannot create %s", tmp);
    if (sg_write_all(fd, buf, len) < 0) {
        sg_err_sys(err, "cannot write %s", tmp);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) < 0) {
        sg_err_sys(err, "cannot rename %s to %s", tmp, path);
        unlink(tmp);
        return -1;
    }
    return 0;
}

int sg_mkdir_p(const char *path, mode_t mode, sg_err *err)
{
    /* Usually the whole path exists (the state directory on every CLI
     * call): one syscall instead of one per component. */
    if (mkdir(path, mode) == 0 || errno == EEXIST)
        return 0;
    sg_autofree char *copy = strdup(path);
    if (!copy)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(copy, mode) < 0 && errno != EEXIST)
            return sg_err_sys(err, "cannot create directory %s", copy);
        *p = '/';
    }
    if (mkdir(copy, mode) < 0 && errno != EEXIST)
        return sg_err_sys(err, "cannot create directory %s", copy);
    return 0;
}

/* One directory being emptied by sg_rm_rf_at: its identity (to check the
 * way back up through ".."), its name in its parent, and the
 * subdirectories still to empty. */
typedef struct rm_level {
    dev_t dev;
    ino_t ino;
    char *name;
    char **sub;
    size_t nsub, isub;
    unsigned passes;
} rm_level;

static void rm_level_clear(rm_level *l)
{
    for (size_t i = l->isub; i < l->nsub; i++)
        free(l->sub[i]);
    free(l->sub);
    free(l->name);
    memset(l, 0, sizeof *l);
}

/* Unlinks every non-directory in fd and lists its subdirectories. */
static int rm_list(int fd, rm_level *l, sg_err *err)
{
    int fd2 = dup(fd);
    if (fd2 < 0)
        return sg_err_sys(err, "dup");
    DIR *d = fdopendir(fd2);
    if (!d) {
        close(fd2);
        return sg_err_sys(err, "cannot read directory %s", l->name);
    }
    rewinddir(d);
    size_t cap = 0;
    struct dirent *de;
    int rc = 0;
    errno = 0;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        if (de->d_type != DT_DIR) {
            if (unlinkat(fd, n, 0) == 0 || errno == ENOENT) {
                errno = 0;
                continue;
            }
            if (errno != EISDIR) {
                rc = sg_err_sys(err, "cannot remove %s/%s", l->name, n);
                break;
            }
        }
        char *dup_ = strdup(n);
        if (!dup_ || sg_grow(&l->sub, &cap, l->nsub + 1, sizeof *l->sub) < 0) {
            free(dup_);
            rc = sg_err_set(err, ENOMEM, "out of memory");
            break;
        }
        l->sub[l->nsub++] = dup_;
        errno = 0;
    }
    if (rc == 0 && errno)
        rc = sg_err_sys(err, "cannot read directory %s", l->name);
    closedir(d);
    return rc;
}

/* Opens the directory name in dfd for emptying (never through a symlink),
 * making it readable and writable for us when it is not. */
static int rm_open(int dfd, const char *name, struct stat *st)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == EACCES && fchmodat(dfd, name, 0700, 0) == 0)
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if ((st->st_mode & 0700) != 0700)
        (void)fchmod(fd, 0700); /* emptied next: its bits no longer matter */
    return fd;
}

/* The state of one sg_rm_rf_at walk: the stack of directories being
 * emptied and the fd of the top one (cur). */
typedef struct rm_walk {
    int dfd;   /* the caller's directory, holding the root of the walk */
    int cur;   /* fd of stk[n - 1], or -1 */
    dev_t dev; /* the root's device: nothing below it on another is removed */
    rm_level *stk;
    size_t n, cap;
    struct stat st;
} rm_walk;

static void rm_push(rm_walk *w, char *name)
{
    sg_xgrow(&w->stk, &w->cap, w->n + 1, sizeof *w->stk);
    memset(&w->stk[w->n], 0, sizeof w->stk[w->n]);
    w->stk[w->n].dev = w->st.st_dev;
    w->stk[w->n].ino = w->st.st_ino;
    w->stk[w->n].name = name;
    w->n++;
}

/* Takes the next subdirectory of the top level: removes it when it is not
 * a directory (any more), else opens it and pushes it, listed. */
static int rm_descend(rm_walk *w, sg_err *err)
{
    rm_level *top = &w->stk[w->n - 1];
    char *child = top->sub[top->isub++];
    if (unlinkat(w->cur, child, 0) == 0 || errno == ENOENT) { /* not a directory (any more) */
        free(child);
        return 0;
    }
    int fd = rm_open(w->cur, child, &w->st);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
        free(child);
        return 0;
    }
    if (fd < 0) {
        int rc = sg_err_sys(err, "cannot open %s/%s", top->name, child);
        free(child);
        return rc;
    }
    if (w->st.st_dev != w->dev) {
        close(fd);
        int rc = sg_err_set(err, EBUSY, "%s/%s is a mount point: not removed", top->name, child);
        free(child);
        return rc;
    }
    close(w->cur);
    w->cur = fd;
    rm_push(w, child);
    return rm_list(w->cur, &w->stk[w->n - 1], err);
}

/* The top level is emptied: goes up to its parent (checked against the
 * identity recorded on the way down) and removes it. When something was
 * made in it meanwhile, reads it again instead (three times at most). */
static int rm_ascend(rm_walk *w, sg_err *err)
{
    rm_level *top = &w->stk[w->n - 1];
    int up;
    if (w->n == 1) {
        up = w->dfd;
    } else {
        const rm_level *parent = &w->stk[w->n - 2];
        up = openat(w->cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (up < 0 || fstat(up, &w->st) < 0 || w->st.st_dev != parent->dev || w->st.st_ino != parent->ino) {
            if (up >= 0)
                close(up);
            return sg_err_set(err, EAGAIN, "%s was moved while being removed", top->name);
        }
    }
    close(w->cur);
    w->cur = -1;
    if (unlinkat(up, top->name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
        rm_level_clear(top);
        w->n--;
        if (w->n > 0)
            w->cur = up;
        return 0;
    }
    if (errno != ENOTEMPTY || top->passes >= 3) {
        int rc = sg_err_sys(err, "cannot remove %s", top->name);
        if (up != w->dfd)
            close(up);
        return rc;
    }
    /* Something was made in it meanwhile: read it again. */
    top->passes++;
    w->cur = rm_open(up, top->name, &w->st);
    int e = errno;
    if (up != w->dfd)
        close(up);
    if (w->cur < 0 || w->st.st_ino != top->ino) {
        errno = w->cur < 0 ? e : EAGAIN;
        return sg_err_sys(err, "cannot open %s", top->name);
    }
    for (size_t i = top->isub; i < top->nsub; i++)
        free(top->sub[i]);
    top->nsub = top->isub = 0;
    return rm_list(w->cur, top, err);
}

int sg_rm_rf_at(int dfd, const char *name, sg_err *err)
{
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR)
        return sg_err_sys(err, "cannot remove %s", name);
    /* Iterative, one directory fd at a time (plus its parent's for a
     * moment): no recursion, no path longer than one name, so any tree a
     * learner can build goes, however deep. Up is "..", checked against
     * the device and inode recorded on the way down. */
    rm_walk w = {.dfd = dfd, .cur = -1};
    w.cur = rm_open(dfd, name, &w.st);
    if (w.cur < 0)
        return errno == ENOENT ? 0 : sg_err_sys(err, "cannot open %s", name);
    w.dev = w.st.st_dev;
    rm_push(&w, sg_xstrdup(name));
    int rc = rm_list(w.cur, &w.stk[0], err);
    while (rc == 0 && w.n > 0) {
        rm_level *top = &w.stk[w.n - 1];
        rc = top->isub < top->nsub ? rm_descend(&w, err) : rm_ascend(&w, err);
    }
    if (w.cur >= 0 && w.cur != dfd)
        close(w.cur);
    for (size_t i = 0; i < w.n; i++)
        rm_level_clear(&w.stk[i]);
    free(w.stk);
    return rc;
}

int sg_rm_rf(const char *path, sg_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : sg_err_sys(err, "cannot stat %s", path);
    sg_autofree char *copy = sg_xstrdup(path);
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/')
        copy[--len] = '\0';
    char *slash = strrchr(copy, '/');
    const char *base = copy;
    sg_autoclose int dfd = -1;
    if (!slash) {
        dfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else {
        *slash = '\0';
        base = slash + 1;
        dfd = open(slash == copy ? "/" : copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (dfd < 0)
        return sg_err_sys(err, "cannot open the directory of %s", path);
    if (!*base)
        return sg_err_set(err, EINVAL, "cannot remove %s", path);
    if (sg_rm_rf_at(dfd, base, err) < 0) {
        sg_err_prefix(err, "cannot remove %s", path);
        return -1;
    }
    return 0;
}

int sg_rand_hex(char *buf, size_t n, sg_err *err)
{
    unsigned char raw[64];
    if (n > 2 * sizeof raw)
        return sg_err_set(err, EINVAL, "random id too long");
    size_t need = (n + 1) / 2;
    if (getrandom(raw, need, 0) != (ssize_t)need)
        return sg_err_sys(err, "getrandom");
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++)
        buf[i] = hex[(raw[i / 2] >> ((i & 1) ? 0 : 4)) & 0xF];
    buf[n] = '\0';
    return 0;
}

uint64_t sg_now_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sg_now_iso8601(char *buf, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%06ld+00:00", base, ts.tv_nsec / 1000);
}

double sg_now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sg_fmt_duration(double sec, char *buf, size_t len)
{
    if (sec < 120)
        snprintf(buf, len, "%llds", sec > 0 ? (long long)sec + ((double)(long long)sec < sec) : 0LL);
    else if (sec < 2 * 3600)
        snprintf(buf, len, "%.0fm", sec / 60);
    else if (sec < 2 * 86400)
        snprintf(buf, len, "%.0fh", sec / 3600);
    else
        snprintf(buf, len, "%.0fd", sec / 86400);
}

char *sg_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        sg_oom();
    return s;
}

void sg_oom(void)
{
    static const char msg[] = "out of memory\n";
    ssize_t r = write(2, msg, sizeof msg - 1); /* no stdio: it may allocate */
    (void)r;
    abort();
}

void *sg_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        sg_oom();
    return q;
}

void *sg_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        sg_oom();
    return p;
}

char *sg_xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        sg_oom();
    return d;
}

/* dir + rel into buf when it fits and is executable. */
static int exe_candidate(char *buf, size_t len, const char *dir, const char *rel)
{
    if ((size_t)snprintf(buf, len, "%s%s", dir, rel) >= len)
        return -1;
    return access(buf, X_OK);
}

int sg_sibling_exe(const char *envname, const char *name, char *buf, size_t len)
{
    const char *env = getenv(envname);
    if (env && *env)
        return exe_candidate(buf, len, env, "");
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "/%s", name);
    if (exe_candidate(buf, len, self, rel) == 0)
        return 0;
    snprintf(rel, sizeof rel, "/../libexec/%s", name);
    return exe_candidate(buf, len, self, rel);
}

/* Length of the well-formed UTF-8 sequence at p (p[0] >= 0x80, len bytes
 * left) and its code point, or 0. */
static size_t utf8_seq(const unsigned char *p, size_t len, uint32_t *cp)
{
    size_t n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
    if (n == 0 || n > len || p[0] > 0xf4)
        return 0;
    uint32_t c = p[0] & (0xff >> (n + 1));
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3f);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

/* Code points a terminal acts on or that reorder text: C1 controls, line and
 * paragraph separators, bidirectional embeddings, overrides and isolates. */
static bool cp_unsafe(uint32_t c)
{
    return (c >= 0x80 && c <= 0x9f) || c == 0x2028 || c == 0x2029 || (c >= 0x202a && c <= 0x202e) ||
           (c >= 0x2066 && c <= 0x2069) || c == 0x200e || c == 0x200f || c == 0x061c;
}

const char *sg_vis(const char *s, size_t len, char *buf, size_t n)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t o = 0, i = 0;
    if (!s)
        len = 0;
    while (i < len) {
        char tmp[16];
        size_t tl = 0, step = 1;
        uint32_t cp = 0;
        if (p[i] == '\t' || p[i] == '\r' || p[i] == '\n') {
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\%c",
                                  p[i] == '\t' ? 't' : p[i] == '\r' ? 'r' : 'n');
        } else if (p[i] < 0x20 || p[i] == 0x7f) {
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", p[i]);
        } else if (p[i] < 0x80) {
            tmp[0] = (char)p[i];
            tl = 1;
        } else if ((step = utf8_seq(p + i, len - i, &cp)) == 0) {
            step = 1;
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", p[i]);
        } else if (cp_unsafe(cp)) {
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
        } else {
            memcpy(tmp, p + i, step);
            tl = step;
        }
        if (o + tl + sizeof "…" > n) {
            memcpy(buf + o, "…", sizeof "…");
            return buf;
        }
        memcpy(buf + o, tmp, tl);
        o += tl;
        i += step;
    }
    buf[o] = '\0';
    return buf;
}

/* The same walk without openat2 (kernels before 5.6, valgrind): component
 * by component, never following a symlink. */
static int open_beneath_walk(int dirfd, const char *rel, int flags)
{
    if (!strcmp(rel, "."))
        return openat(dirfd, ".", flags | O_CLOEXEC | O_NOFOLLOW);
    sg_autoclose int cur = -1;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (!slash)
            break;
        size_t l = (size_t)(slash - p);
        char comp[NAME_MAX + 1];
        if (l == 0 || l > NAME_MAX || (l == 2 && !memcmp(p, "..", 2))) {
            errno = EXDEV;
            return -1;
        }
        memcpy(comp, p, l);
        comp[l] = '\0';
        int next = openat(cur >= 0 ? cur : dirfd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            return -1;
        if (cur >= 0)
            close(cur);
        cur = next;
        p = slash + 1;
    }
    if (!strcmp(p, "..")) {
        errno = EXDEV;
        return -1;
    }
    return openat(cur >= 0 ? cur : dirfd, p, flags | O_CLOEXEC | O_NOFOLLOW);
}

/* openat2 confined under dirfd with no symlink anywhere in the path: a
 * learner's symlink must never make the host-side watcher read a host file. */
int sg_open_beneath(int dirfd, const char *rel, int flags)
{
    static bool no_openat2;
    if (no_openat2)
        return open_beneath_walk(dirfd, rel, flags);
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    int fd;
    do
        fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
    while (fd < 0 && errno == EINTR);
    if (fd < 0 && errno == ENOSYS) {
        no_openat2 = true;
        return open_beneath_walk(dirfd, rel, flags);
    }
    /* A path longer than PATH_MAX (a deep tree): one component at a time,
     * with the same rules, so its changes are still seen. */
    if (fd < 0 && errno == ENAMETOOLONG)
        return open_beneath_walk(dirfd, rel, flags);
    return fd;
}

size_t sg_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) /* s[n], the first byte left out, continues one */
        n--;
    return n;
}

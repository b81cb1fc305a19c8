#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "limits.h"

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

char *sg_read_file_at(int dirfd, const char *path, size_t max, size_t *len, sg_err *err)
{
    sg_autoclose int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sg_err_sys(err, "cannot open %s", path);
        return NULL;
    }
    size_t cap = 4096, have = 0;
    sg_autofree char *buf = malloc(cap + 1);
    if (!buf) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    for (;;) {
        if (have == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                sg_err_set(err, ENOMEM, "out of memory");
                return NULL;
            }
            buf = nb;
        }
        ssize_t n = read(fd, buf + have, cap - have);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            sg_err_sys(err, "cannot read %s", path);
            return NULL;
        }
        if (n == 0)
            break;
        have += (size_t)n;
        if (have > max) {
            sg_err_set(err, EFBIG, "%s is larger than %zu bytes", path, max);
            return NULL;
        }
    }
    buf[have] = '\0';
    if (len)
        *len = have;
    return sg_steal_ptr(&buf);
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

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int r = (flag == FTW_DP) ? rmdir(p) : unlink(p);
    return (r < 0 && errno != ENOENT) ? -1 : 0;
}

int sg_rm_rf(const char *path, sg_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : sg_err_sys(err, "cannot stat %s", path);
    if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0)
        return sg_err_sys(err, "cannot remove %s", path);
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

char *sg_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        abort();
    return s;
}

void *sg_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

void *sg_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        abort();
    return p;
}

char *sg_xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort();
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

void sg_log_line(const char *who, const char *fmt, ...)
{
    char ts[48];
    sg_now_iso8601(ts, sizeof ts);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", ts, who);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* fingerprint: workspace metadata fingerprints (see checkpoint/fingerprint.h). */
#include "checkpoint/fingerprint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "checkpoint/checkpoint.h"

typedef struct walk {
    uint64_t h[2];
    uint64_t key[2];
    size_t entries;
    int64_t racy_after;   /* ns since the epoch */
    bool racy, too_big;
    char path[4096];
} walk;

/* 64-bit mixing (the finalizer of splitmix64). */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static void fold(walk *w, uint64_t v)
{
    w->h[0] = mix(w->h[0] ^ v ^ w->key[0]) + 0x9e3779b97f4a7c15ull;
    w->h[1] = mix((w->h[1] + v) ^ w->key[1]) * 0xff51afd7ed558ccdull;
}

static void fold_bytes(walk *w, const char *s, size_t n)
{
    uint64_t v = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        v = v << 8 | (unsigned char)s[i];
        if (++k == 8) {
            fold(w, v);
            v = 0;
            k = 0;
        }
    }
    fold(w, v ^ (uint64_t)n << 56);
}

static int64_t ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int walk_dir(walk *w, int dfd, size_t len, sg_err *err);

static void fold_stat(walk *w, const struct stat *st)
{
    fold(w, st->st_mode);
    fold(w, (uint64_t)st->st_uid << 32 | st->st_gid);
    fold(w, (uint64_t)st->st_size);
    fold(w, st->st_ino);
    fold(w, (uint64_t)ns(&st->st_mtim));
    fold(w, (uint64_t)ns(&st->st_ctim));
    if (ns(&st->st_mtim) >= w->racy_after || ns(&st->st_ctim) >= w->racy_after)
        w->racy = true;
}

/* getdents64's buffer for one directory: many entries a call. */
#define WSPRINT_DENTS_BUF 16384

struct fingerprint_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int walk_entry(walk *w, int dfd, size_t len, const char *name, sg_err *err)
{
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return 0;
    if (++w->entries > SG_FINGERPRINT_MAX_ENTRIES) {
        w->too_big = true;
        return 0;
    }
    size_t nl = strlen(name);
    if (len + 1 + nl + 1 > sizeof w->path) {
        w->too_big = true; /* a path we cannot hold: do not trust the walk */
        return 0;
    }
    w->path[len] = '/';
    memcpy(w->path + len + 1, name, nl + 1);
    fold_bytes(w, w->path, len + 1 + nl);
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT) { /* removed under us: changed */
            w->racy = true;
            return 0;
        }
        return sg_err_sys(err, "workspace fingerprint: %s", w->path);
    }
    fold_stat(w, &st);
    if (S_ISDIR(st.st_mode)) {
        sg_autoclose int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            w->racy = true; /* replaced or unreadable: never trust it */
            return 0;
        }
        if (walk_dir(w, sub, len + 1 + nl, err) < 0)
            return -1;
    }
    w->path[len] = '\0';
    return 0;
}

/* Entries of the directory dfd (path w->path, of length len; dfd freshly
 * opened), in the kernel's order: the order only has to be the same on both
 * walks of an unchanged directory, which getdents gives. getdents64 on the
 * fd itself: no DIR, so no dup, fstat or fcntl per directory. */
static int walk_dir(walk *w, int dfd, size_t len, sg_err *err)
{
    sg_autofree char *buf = malloc(WSPRINT_DENTS_BUF);
    if (!buf)
        return sg_err_set(err, ENOMEM, "workspace fingerprint: out of memory");
    for (;;) {
        ssize_t n = getdents64(dfd, buf, WSPRINT_DENTS_BUF);
        if (n < 0) {
            w->path[len] = '\0';
            return sg_err_sys(err, "workspace fingerprint: %s", len ? w->path : ".");
        }
        if (n == 0)
            return 0;
        for (ssize_t off = 0; off < n;) {
            const struct fingerprint_dirent64 *e = (const void *)(buf + off);
            off += e->d_reclen;
            if (walk_entry(w, dfd, len, e->d_name, err) < 0)
                return -1;
            if (w->too_big)
                return 0;
        }
    }
}

static void random_key(uint64_t key[2])
{
    static uint64_t k[2];
    static bool have;
    if (!have) {
        if (getrandom(k, sizeof k, 0) != (ssize_t)sizeof k) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            k[0] = mix((uint64_t)ns(&t) ^ (uint64_t)getpid());
            k[1] = mix(k[0] + 1);
        }
        have = true;
    }
    key[0] = k[0];
    key[1] = k[1];
}

int sg_fingerprint_take(const char *root, sg_fingerprint *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    walk w = {0};
    random_key(w.key);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    w.racy_after = ns(&now) - SG_CKPT_RACY_NS;
    sg_autoclose int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sg_err_sys(err, "workspace fingerprint: %s", root);
    fold_stat(&w, &st);
    if (walk_dir(&w, fd, 0, err) < 0)
        return -1;
    out->h[0] = w.h[0];
    out->h[1] = w.h[1];
    out->entries = w.entries;
    out->racy = w.racy;
    out->too_big = w.too_big;
    return 0;
}

bool sg_fingerprint_usable(const sg_fingerprint *p)
{
    return !p->racy && !p->too_big;
}

bool sg_fingerprint_equal(const sg_fingerprint *a, const sg_fingerprint *b)
{
    return a->h[0] == b->h[0] && a->h[1] == b->h[1] && a->entries == b->entries;
}

/* checkpoint: content-addressed workspace snapshots in a bare libgit2
 * repository, and exact restore. The layout and rules are in checkpoint.h. */
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"

#define ESC "%sg%"
#define ESC_LEN 4
#define META_NAME ESC /* the escape of the empty name: never a workspace name */
#define CKPT_REF "refs/heads/checkpoints"
#define BASE_REF "refs/sg/base" /* what the workspace was last made equal to */
#define TRAILER "sandglass-checkpoint:"
#define STREAM_MIN (1u << 20) /* larger files are streamed, not held in memory */
#define IO_CHUNK (64u * 1024)
#define CACHE_FILE "sg-statcache"
#define USAGE_FILE "sg-usage" /* bytes stored, counted (SG_CKPT_STORE_MAX) */
#define FLAG_BITS (SG_CKPT_MODE_OMITTED | SG_CKPT_MODE_PARTIAL)
#define CACHE_MAGIC "SGCKSC01"
#define LOCK_FILE "sg.lock"
#define SIG "sandglass <sandglass@localhost>"

/* libgit2's global init (git_libgit2_init) also prepares its network
 * transports, which a local checkpoint store never uses: Debian's libgit2
 * starts libssh2 (OpenSSL) and parses the CA bundle for mbedTLS. That is
 * paid once per checkpoint worker start (the worker is spawned on demand
 * and exits after 10 s idle), never by a supervisor; docs/ARCHITECTURE.md
 * gives the figure. We define none of libgit2's symbols. */

/* ---------- small helpers ---------- */

/* The worker's policy on running out of memory (docs/ARCHITECTURE.md): the
 * process ends; its supervisor reports the checkpoint as failed and starts
 * another worker. Every size here is bounded by the checkpoint's caps. */
static void sb_add(sg_buf *b, const void *d, size_t n)
{
    if (sg_buf_append(b, d, n) < 0)
        sg_oom();
}

static void sb_str(sg_buf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static int git_fail(sg_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int git_fail(sg_err *err, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const git_error *e = git_error_last();
    return sg_err_set(err, EIO, "%s: %s", what, e && e->message ? e->message : "libgit2 error");
}

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec;
}

static int64_t now_real_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return ts_ns(&t);
}

static bool needs_escape(const char *n)
{
    if (strncmp(n, ESC, ESC_LEN) == 0)
        return true;
    if (strncasecmp(n, ".git", 4) == 0) {
        const char *p = n + 4;
        while (*p == '.' || *p == ' ')
            p++;
        return *p == '\0';
    }
    if (strncasecmp(n, "git~", 4) == 0 && n[4]) {
        const char *p = n + 4;
        while (*p >= '0' && *p <= '9')
            p++;
        return *p == '\0';
    }
    return false;
}

static const char *unescape(const char *sname)
{
    return strncmp(sname, ESC, ESC_LEN) == 0 ? sname + ESC_LEN : sname;
}

/* ---------- stat cache: path -> stat -> blob oid ---------- */

typedef struct cent {
    char *path; /* NULL: empty slot */
    uint64_t size, ino;
    int64_t mtime, ctime;
    uint32_t mode;
    uint8_t stored; /* the blob is in the object store (not only hashed) */
    uint8_t valid;  /* false: racy or incomplete, never trusted */
    uint32_t gen;   /* scan that last saw the path */
    git_oid oid;
} cent;

typedef struct cmap {
    cent *v;
    size_t cap, n;
} cmap;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static cent *cmap_get(const cmap *m, const char *path)
{
    if (!m->cap)
        return NULL;
    for (size_t i = hash_str(path) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->v[i].path)
            return NULL;
        if (strcmp(m->v[i].path, path) == 0)
            return &m->v[i];
    }
}

static cent *cmap_put(cmap *m, const char *path);

static void cmap_grow(cmap *m)
{
    cmap nm = {.cap = m->cap ? m->cap * 2 : 1024};
    nm.v = sg_xcalloc(nm.cap, sizeof(cent));
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->v[i].path)
            continue;
        size_t j = hash_str(m->v[i].path) & (nm.cap - 1);
        while (nm.v[j].path)
            j = (j + 1) & (nm.cap - 1);
        nm.v[j] = m->v[i];
        nm.n++;
    }
    free(m->v);
    *m = nm;
}

static cent *cmap_put(cmap *m, const char *path)
{
    if ((m->n + 1) * 2 > m->cap)
        cmap_grow(m);
    size_t i = hash_str(path) & (m->cap - 1);
    for (; m->v[i].path; i = (i + 1) & (m->cap - 1))
        if (strcmp(m->v[i].path, path) == 0)
            return &m->v[i];
    m->v[i].path = sg_xstrdup(path);
    m->n++;
    return &m->v[i];
}

static void cmap_free(cmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->v[i].path);
    free(m->v);
    m->v = NULL;
    m->cap = m->n = 0;
}

/* Oids known to be in the object store (written or checked this session). */
typedef struct oidset {
    git_oid *v;
    size_t cap, n;
} oidset;

static uint64_t oid_hash(const git_oid *o)
{
    uint64_t h;
    memcpy(&h, o->id, sizeof h);
    return h;
}

static bool oid_zero(const git_oid *o)
{
    static const git_oid z;
    return memcmp(o->id, z.id, GIT_OID_RAWSZ) == 0;
}

static bool oidset_has(const oidset *s, const git_oid *o)
{
    if (!s->cap)
        return false;
    for (size_t i = oid_hash(o) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (oid_zero(&s->v[i]))
            return false;
        if (git_oid_equal(&s->v[i], o))
            return true;
    }
}

static void oidset_add(oidset *s, const git_oid *o)
{
    if (oidset_has(s, o))
        return;
    if ((s->n + 1) * 2 > s->cap) {
        oidset ns = {.cap = s->cap ? s->cap * 2 : 1024};
        ns.v = sg_xcalloc(ns.cap, sizeof(git_oid));
        for (size_t i = 0; i < s->cap; i++) {
            if (oid_zero(&s->v[i]))
                continue;
            size_t j = oid_hash(&s->v[i]) & (ns.cap - 1);
            while (!oid_zero(&ns.v[j]))
                j = (j + 1) & (ns.cap - 1);
            ns.v[j] = s->v[i];
            ns.n++;
        }
        free(s->v);
        *s = ns;
    }
    size_t i = oid_hash(o) & (s->cap - 1);
    while (!oid_zero(&s->v[i]))
        i = (i + 1) & (s->cap - 1);
    s->v[i] = *o;
    s->n++;
}

/* ---------- the store ---------- */

struct sg_ckpt_store {
    git_repository *repo;
    git_odb *odb;
    char *repo_dir, *ws, *cache_path;
    int lock_fd;
    cmap cache;
    oidset known;
    uint32_t gen; /* scan counter for the stat cache */
    unsigned tmp_counter;
    bool is_root;
    uint64_t stored_bytes; /* content stored so far (USAGE_FILE) */
    uint64_t store_max;    /* SG_CKPT_STORE_MAX, or lower (SANDGLASS_CKPT_STORE_MAX) */
    bool usage_dirty;
};

static void unlockp(int **fd)
{
    if (*fd)
        flock(**fd, LOCK_UN);
}

static int *lock_store(sg_ckpt_store *st)
{
    while (flock(st->lock_fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    return &st->lock_fd;
}

#define STORE_LOCKED(st) __attribute__((cleanup(unlockp))) int *lock_guard_ = lock_store(st); (void)lock_guard_

/* Cache file: magic, u64 count, then per entry u32 path length, path,
 * size, ino, mtime, ctime (8 bytes each), u32 mode, u8 stored, 20-byte oid. */
static void cache_load(sg_ckpt_store *st)
{
    sg_err e = {0};
    size_t len = 0;
    sg_autofree char *buf = sg_read_file(st->cache_path, SG_CKPT_CACHE_MAX, &len, &e);
    if (!buf || len < 16 || memcmp(buf, CACHE_MAGIC, 8) != 0)
        return;
    uint64_t count;
    memcpy(&count, buf + 8, 8);
    if (count > SG_CKPT_MAX_ENTRIES)
        return;
    size_t off = 16;
    cmap m = {0};
    for (uint64_t i = 0; i < count; i++) {
        uint32_t pl;
        if (len - off < 4)
            goto bad;
        memcpy(&pl, buf + off, 4);
        off += 4;
        if (pl == 0 || pl > len - off || len - off - pl < 4 * 8 + 4 + 1 + GIT_OID_RAWSZ)
            goto bad;
        if (memchr(buf + off, '\0', pl))
            goto bad;
        char saved = buf[off + pl];
        buf[off + pl] = '\0';
        cent *c = cmap_put(&m, buf + off);
        buf[off + pl] = saved;
        off += pl;
        memcpy(&c->size, buf + off, 8);
        memcpy(&c->ino, buf + off + 8, 8);
        memcpy(&c->mtime, buf + off + 16, 8);
        memcpy(&c->ctime, buf + off + 24, 8);
        memcpy(&c->mode, buf + off + 32, 4);
        c->stored = (uint8_t)buf[off + 36];
        c->valid = 1;
        memcpy(c->oid.id, buf + off + 37, GIT_OID_RAWSZ);
        off += 37 + GIT_OID_RAWSZ;
    }
    cmap_free(&st->cache);
    st->cache = m;
    return;
bad:
    cmap_free(&m); /* only a cache: start cold */
}

static bool cent_live(const sg_ckpt_store *st, const cent *c)
{
    return c->path && c->valid && c->gen == st->gen;
}

/* Keeps the entries the last scan saw and trusts, and writes them out. */
static int cache_save(sg_ckpt_store *st, sg_err *err)
{
    uint64_t count = 0;
    for (size_t i = 0; i < st->cache.cap; i++)
        count += cent_live(st, &st->cache.v[i]);
    if (st->cache.n > 2 * count + 1024) { /* many dead entries: compact */
        cmap m = {0};
        for (size_t i = 0; i < st->cache.cap; i++) {
            cent *c = &st->cache.v[i];
            if (!cent_live(st, c))
                continue;
            cent *d = cmap_put(&m, c->path);
            char *keep = d->path;
            *d = *c;
            d->path = keep;
        }
        cmap_free(&st->cache);
        st->cache = m;
    }
    sg_autobuf sg_buf b = {0};
    sb_add(&b, CACHE_MAGIC, 8);
    sb_add(&b, &count, 8);
    for (size_t i = 0; i < st->cache.cap; i++) {
        const cent *c = &st->cache.v[i];
        if (!cent_live(st, c))
            continue;
        uint32_t pl = (uint32_t)strlen(c->path);
        sb_add(&b, &pl, 4);
        sb_add(&b, c->path, pl);
        sb_add(&b, &c->size, 8);
        sb_add(&b, &c->ino, 8);
        sb_add(&b, &c->mtime, 8);
        sb_add(&b, &c->ctime, 8);
        sb_add(&b, &c->mode, 4);
        sb_add(&b, &c->stored, 1);
        sb_add(&b, c->oid.id, GIT_OID_RAWSZ);
    }
    /* No fsync: a torn cache file fails its checks and is dropped. */
    sg_autofree char *tmp = sg_strdup_printf("%s.tmp", st->cache_path);
    sg_autoclose int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return sg_err_sys(err, "creating %s", tmp);
    if (sg_write_all(fd, b.data, b.len) < 0)
        return sg_err_sys(err, "writing %s", tmp);
    if (rename(tmp, st->cache_path) < 0)
        return sg_err_sys(err, "renaming %s", tmp);
    return 0;
}

/* Bytes under objects/ when the usage file is missing (a store made
 * before it existed): counted once. */
static uint64_t usage_walk(const char *repo_dir)
{
    sg_autofree char *od = sg_strdup_printf("%s/objects", repo_dir);
    sg_autoclosedir DIR *d = opendir(od);
    if (!d)
        return 0;
    uint64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        sg_autoclose int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
            continue;
        DIR *sd = fdopendir(sfd);
        if (!sd)
            continue;
        sfd = -1;
        struct dirent *e;
        while ((e = readdir(sd))) {
            struct stat sb;
            if (e->d_name[0] != '.' && fstatat(dirfd(sd), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(sb.st_mode))
                total += (uint64_t)sb.st_size;
        }
        closedir(sd);
    }
    return total;
}

static void usage_load(sg_ckpt_store *st)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", st->repo_dir, USAGE_FILE);
    sg_err e = {0};
    size_t len = 0;
    sg_autofree char *buf = sg_read_file(p, 64, &len, &e);
    unsigned long long v = 0;
    if (buf && sscanf(buf, "%llu", &v) == 1) {
        st->stored_bytes = v;
        return;
    }
    st->stored_bytes = usage_walk(st->repo_dir);
    st->usage_dirty = true;
}

static void usage_save(sg_ckpt_store *st)
{
    if (!st->usage_dirty)
        return;
    sg_autofree char *p = sg_strdup_printf("%s/%s", st->repo_dir, USAGE_FILE);
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)st->stored_bytes);
    sg_err e = {0};
    if (sg_write_file_atomic(p, buf, (size_t)n, 0600, &e) == 0)
        st->usage_dirty = false;
}

static void set_search_paths(void)
{
    static const int levels[] = {GIT_CONFIG_LEVEL_SYSTEM, GIT_CONFIG_LEVEL_XDG,
                                 GIT_CONFIG_LEVEL_GLOBAL, GIT_CONFIG_LEVEL_PROGRAMDATA};
    for (size_t i = 0; i < SG_ARRAY_LEN(levels); i++)
        git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], "");
}

/* True when `inner` is `outer` or below it (both real paths). */
static bool path_within(const char *inner, const char *outer)
{
    size_t n = strlen(outer);
    if (n == 1 && outer[0] == '/')
        return true;
    return strncmp(inner, outer, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

void sg_checkpoint_close(sg_ckpt_store *st)
{
    if (!st)
        return;
    git_odb_free(st->odb);
    git_repository_free(st->repo);
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    cmap_free(&st->cache);
    free(st->known.v);
    free(st->repo_dir);
    free(st->ws);
    free(st->cache_path);
    free(st);
    git_libgit2_shutdown();
}

sg_ckpt_store *sg_checkpoint_open(const char *repo_dir, const char *workspace, sg_err *err)
{
    sg_autofree char *ws = realpath(workspace, NULL);
    if (!ws) {
        sg_err_sys(err, "workspace %s", workspace);
        return NULL;
    }
    struct stat sb;
    if (stat(ws, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        sg_err_set(err, ENOTDIR, "workspace %s is not a directory", workspace);
        return NULL;
    }
    if (sg_mkdir_p(repo_dir, 0700, err) < 0) {
        sg_err_prefix(err, "checkpoint store");
        return NULL;
    }
    sg_autofree char *rd = realpath(repo_dir, NULL);
    if (!rd) {
        sg_err_sys(err, "checkpoint store %s", repo_dir);
        return NULL;
    }
    if (path_within(rd, ws) || path_within(ws, rd)) {
        sg_err_set(err, EINVAL, "checkpoint store %s must not be inside the workspace %s (nor contain it)", rd, ws);
        return NULL;
    }

    if (git_libgit2_init() < 0) {
        git_fail(err, "libgit2 init");
        return NULL;
    }
    set_search_paths();
    sg_ckpt_store *st = sg_xcalloc(1, sizeof *st);
    st->lock_fd = -1;
    st->is_root = geteuid() == 0;
    st->ws = sg_steal_ptr(&ws);
    st->repo_dir = sg_steal_ptr(&rd);
    st->cache_path = sg_strdup_printf("%s/%s", st->repo_dir, CACHE_FILE);

    if (git_repository_open_bare(&st->repo, st->repo_dir) < 0) {
        git_repository_init_options o;
        git_repository_init_options_init(&o, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
        o.flags = GIT_REPOSITORY_INIT_BARE | GIT_REPOSITORY_INIT_MKPATH;
        o.initial_head = "checkpoints";
        if (git_repository_init_ext(&st->repo, st->repo_dir, &o) < 0) {
            git_fail(err, "creating checkpoint store %s", st->repo_dir);
            sg_checkpoint_close(st);
            return NULL;
        }
    }
    if (git_repository_odb(&st->odb, st->repo) < 0) {
        git_fail(err, "checkpoint store %s", st->repo_dir);
        sg_checkpoint_close(st);
        return NULL;
    }
    sg_autofree char *lp = sg_strdup_printf("%s/%s", st->repo_dir, LOCK_FILE);
    st->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (st->lock_fd < 0) {
        sg_err_sys(err, "opening %s", lp);
        sg_checkpoint_close(st);
        return NULL;
    }
    cache_load(st);
    usage_load(st);
    /* Tests lower the store's cap to reach it with a few files. */
    st->store_max = SG_CKPT_STORE_MAX;
    const char *env = getenv("SANDGLASS_CKPT_STORE_MAX");
    uint64_t v = 0;
    sg_err e = {0};
    if (env && sg_parse_uint(env, SG_CKPT_STORE_MAX, &v, &e) == 0)
        st->store_max = v;
    return st;
}

/* ---------- objects ---------- */

static int put_obj(sg_ckpt_store *st, bool write, git_oid *oid, const void *buf, size_t len,
                   git_object_t type, sg_err *err)
{
    if (git_odb_hash(oid, buf, len, type) < 0)
        return git_fail(err, "hashing an object");
    if (!write || oidset_has(&st->known, oid))
        return 0;
    git_oid w;
    if (git_odb_write(&w, st->odb, buf, len, type) < 0)
        return git_fail(err, "writing an object");
    oidset_add(&st->known, oid);
    st->stored_bytes += len;
    st->usage_dirty = true;
    return 0;
}

/* ---------- the scanned workspace ---------- */

typedef struct node {
    char *sname;      /* stored (escaped) name; the real name is sname + off */
    uint8_t off;
    bool recorded;    /* false: socket or device, not in the tree */
    uint32_t mode, uid, gid;
    git_oid oid;      /* blob, or tree for a directory */
    struct node *kids; /* directories: sorted by strcmp(sname) */
    size_t nkids;
} node;

#define NAME(n) ((n)->sname + (n)->off)

static void node_free(node *n)
{
    for (size_t i = 0; i < n->nkids; i++)
        node_free(&n->kids[i]);
    free(n->kids);
    free(n->sname);
    n->kids = NULL;
    n->nkids = 0;
    n->sname = NULL;
}

static void node_set_name(node *n, const char *name)
{
    if (needs_escape(name)) {
        n->sname = sg_strdup_printf("%s%s", ESC, name);
        n->off = ESC_LEN;
    } else {
        n->sname = sg_xstrdup(name);
        n->off = 0;
    }
}

static int node_cmp(const void *a, const void *b)
{
    return strcmp(((const node *)a)->sname, ((const node *)b)->sname);
}

typedef struct scan {
    sg_ckpt_store *st;
    bool write;
    int64_t racy_after; /* ctimes at or after this are not trusted later */
    sg_checkpoint_stats stats;
    uint64_t entries;
    uint64_t read_bytes; /* file content read by this scan (SG_CKPT_TAKE_MAX) */
    sg_buf path;
    sg_err *err;
} scan;

static size_t path_push(sg_buf *p, const char *name)
{
    size_t old = p->len;
    if (p->len)
        sb_add(p, "/", 1);
    sb_str(p, name);
    return old;
}

static void path_pop(sg_buf *p, size_t old)
{
    p->len = old;
    if (p->data)
        p->data[old] = '\0';
}

static void cache_note(scan *s, const struct stat *sb, const git_oid *oid, bool stored, bool complete)
{
    cent *c = cmap_put(&s->st->cache, s->path.data);
    c->gen = s->st->gen;
    c->valid = complete && ts_ns(&sb->st_ctim) < s->racy_after;
    c->size = (uint64_t)sb->st_size;
    c->ino = sb->st_ino;
    c->mtime = ts_ns(&sb->st_mtim);
    c->ctime = ts_ns(&sb->st_ctim);
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
                     why, (unsigned long long)sb->st_size, (long long)ts_ns(&sb->st_mtim),
                     (unsigned long long)sb->st_ino);
    k->mode = sb->st_mode | SG_CKPT_MODE_OMITTED;
    k->uid = sb->st_uid;
    k->gid = sb->st_gid;
    s->stats.omitted++;
    if (strstr(why, "store full"))
        s->stats.store_full = 1;
    return put_obj(s->st, s->write, &k->oid, marker, (size_t)n, GIT_OBJECT_BLOB, s->err);
}

static int scan_file(scan *s, int dfd, const char *name, const struct stat *sb, node *k)
{
    sg_ckpt_store *st = s->st;
    cent *c = cmap_get(&st->cache, s->path.data);
    if (c && c->valid && c->size == (uint64_t)sb->st_size && c->ino == sb->st_ino && c->mode == sb->st_mode &&
        c->mtime == ts_ns(&sb->st_mtim) && c->ctime == ts_ns(&sb->st_ctim)) {
        bool stored = c->stored || oidset_has(&st->known, &c->oid);
        if (!stored && s->write && git_odb_exists(st->odb, &c->oid)) {
            oidset_add(&st->known, &c->oid);
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
    if (put_obj(st, s->write, &k->oid, buf, size, GIT_OBJECT_BLOB, s->err) < 0)
        return -1;
    cache_note(s, &fst, &k->oid, s->write, complete);
    return 0;
}

static int scan_link(scan *s, int dfd, const char *name, node *k)
{
    char buf[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, buf, sizeof buf);
    if (n < 0)
        return sg_err_sys(s->err, "readlink %s", s->path.data);
    if ((size_t)n >= sizeof buf)
        return sg_err_set(s->err, ENAMETOOLONG, "symlink %s: target too long", s->path.data);
    return put_obj(s->st, s->write, &k->oid, buf, (size_t)n, GIT_OBJECT_BLOB, s->err);
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
    sb_add(b, end, (size_t)(num + sizeof num - end));
    sb_add(b, sname, strlen(sname) + 1);
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
    if (put_obj(st, write, &meta_oid, meta.data, meta.len, GIT_OBJECT_BLOB, err) < 0)
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
    refs[n++] = (tref){META_NAME, ESC_LEN, false, "100644", &meta_oid};
    qsort(refs, n, sizeof(tref), tref_cmp);
    sg_autobuf sg_buf tree = {0};
    for (size_t i = 0; i < n; i++) {
        sb_str(&tree, refs[i].mode);
        sb_add(&tree, " ", 1);
        sb_add(&tree, refs[i].name, refs[i].len + 1);
        sb_add(&tree, refs[i].oid->id, GIT_OID_RAWSZ);
    }
    return put_obj(st, write, &dir->oid, tree.data, tree.len, GIT_OBJECT_TREE, err);
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
        if (needs_escape(name)) {
            node_set_name(k, name);
            name = NAME(k);
        } else {
            k->sname = sg_steal_ptr(&names[i]); /* name stays valid: k owns it */
        }
        k->mode = sb.st_mode;
        k->uid = sb.st_uid;
        k->gid = sb.st_gid;
        k->recorded = true;
        size_t old = path_push(&s->path, name);
        if (S_ISDIR(sb.st_mode)) {
            sg_autoclose int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0)
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
            rc = put_obj(s->st, s->write, &k->oid, "", 0, GIT_OBJECT_BLOB, s->err);
        } else {
            k->recorded = false;
            s->stats.skipped++;
        }
        path_pop(&s->path, old);
    }
    strv_free_n(names, nn);
    if (rc < 0)
        return rc;
    qsort(dir->kids, dir->nkids, sizeof(node), node_cmp);
    return build_tree(s->st, s->write, dir, s->err);
}

static void scan_free(scan *s)
{
    sg_buf_free(&s->path);
}

/* Walks the workspace into root; returns the workspace fd in *root_fd. */
static int scan_workspace(sg_ckpt_store *st, scan *s, bool write, node *root, int *root_fd, sg_err *err)
{
    memset(s, 0, sizeof *s);
    memset(root, 0, sizeof *root);
    s->st = st;
    s->write = write;
    s->err = err;
    s->racy_after = now_real_ns() - SG_CKPT_RACY_NS;
    st->gen++;
    sb_add(&s->path, "", 0);
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
        return git_fail(err, "checkpoint tree %s", hex);
    size_t n = git_tree_entrycount(tree);
    out->v = sg_xcalloc(n, sizeof(tent));
    git_oid meta_oid;
    bool have_meta = false;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const git_tree_entry *e = git_tree_entry_byindex(tree, i);
        const char *name = git_tree_entry_name(e);
        git_filemode_t fm = git_tree_entry_filemode_raw(e);
        if (strcmp(name, META_NAME) == 0 && fm == GIT_FILEMODE_BLOB) {
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
        return git_fail(err, "checkpoint metadata of %s", hex);
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

typedef struct cmpx {
    sg_ckpt_store *st;
    bool apply, collect;
    sg_checkpoint_change *ch;
    size_t nch, cap;
    uint64_t nchanged;
    uint64_t unrestorable; /* markers and partial directories left as they are */
    sg_buf path;
    sg_err *err;
} cmpx;

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
        size_t old = path_push(&c->path, NAME(k));
        emit(c, SG_CKPT_CREATED, k, 0, 0, 0);
        emit_cur_tree(c, k);
        path_pop(&c->path, old);
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
        size_t old = path_push(&c->path, unescape(e->sname));
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
        path_pop(&c->path, old);
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
        return git_fail(c->err, "reading %s from the checkpoint", c->path.data);
    if (len > STREAM_MIN) {
        git_odb_stream *rs = NULL;
        if (git_odb_open_rstream(&rs, &len, &type, c->st->odb, oid) == 0) {
            sg_autofree char *buf = sg_xrealloc(NULL, IO_CHUNK);
            int rc = 0;
            size_t total = 0;
            for (;;) {
                int got = git_odb_stream_read(rs, buf, IO_CHUNK);
                if (got < 0) {
                    rc = git_fail(c->err, "reading %s from the checkpoint", c->path.data);
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
        return git_fail(c->err, "reading %s from the checkpoint", c->path.data);
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
        const char *kn = unescape(sub->v[i].sname);
        size_t old = path_push(&c->path, kn);
        int rc = ap_create(c, fd, kn, &sub->v[i], NULL, depth + 1);
        path_pop(&c->path, old);
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
                return git_fail(c->err, "reading %s from the checkpoint", c->path.data);
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
            name = NAME(k);
        } else if (t) {
            r = 1;
            name = unescape(t->sname);
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
        size_t old = path_push(&c->path, name);
        sg_autotdir tdir sub = {0};
        if (r > 0 || (r == 0 && (!k->recorded || (k->mode & S_IFMT) != (t->mode & S_IFMT)))) {
            if (t->kind == 'd')
                rc = tdir_load(c->st, &t->oid, &sub, c->err);
        }
        if (rc < 0) {
            path_pop(&c->path, old);
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
            /* Only in the checkpoint: the restore brings it back. */
            if (t->kind == 'd') {
                emit(c, SG_CKPT_DELETED, NULL, sub.mode, sub.uid, sub.gid);
                rc = emit_target_dir(c, &sub, depth + 1);
            } else {
                emit(c, SG_CKPT_DELETED, NULL, t->mode, t->uid, t->gid);
            }
            if (rc == 0 && c->apply)
                rc = ap_create(c, dfd, name, t, t->kind == 'd' ? &sub : NULL, depth);
            j++;
        } else {
            if (!k->recorded || (k->mode & S_IFMT) != (t->mode & S_IFMT)) {
                bool tdir_ = t->kind == 'd';
                emit(c, SG_CKPT_TYPE, k, tdir_ ? sub.mode : t->mode, tdir_ ? sub.uid : t->uid,
                     tdir_ ? sub.gid : t->gid);
                emit_cur_tree(c, k);
                if (tdir_)
                    rc = emit_target_dir(c, &sub, depth + 1);
                if (rc == 0 && c->apply) {
                    rc = ap_remove(c, dfd, name, depth);
                    if (rc == 0)
                        rc = ap_create(c, dfd, name, t, tdir_ ? &sub : NULL, depth);
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
            i++;
            j++;
        }
        path_pop(&c->path, old);
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

static void cmpx_free(cmpx *c)
{
    sg_checkpoint_changes_free(c->ch, c->nch);
    c->ch = NULL;
    c->nch = 0;
    sg_buf_free(&c->path);
}

/* Runs the comparison of the scanned root with the checkpoint tree. */
static int compare(cmpx *c, int root_fd, const node *root, const git_oid *target)
{
    sb_add(&c->path, "", 0);
    if (!target) { /* nothing before: everything is new */
        c->nchanged++;
        emit_cur_tree(c, root);
        return 0;
    }
    if (git_oid_equal(&root->oid, target))
        return 0;
    return cmp_dir(c, root_fd, root, target, 0);
}

/* ---------- commits ---------- */

static int latest(sg_ckpt_store *st, git_oid *out, sg_err *err)
{
    int r = git_reference_name_to_id(out, st->repo, CKPT_REF);
    if (r == GIT_ENOTFOUND)
        return sg_err_set(err, ENOENT, "no checkpoint yet");
    if (r < 0)
        return git_fail(err, "reading %s", CKPT_REF);
    return 0;
}

static bool parse_trailer(const char *msg, uint64_t *files, uint64_t *dirs, uint64_t *bytes, size_t *label_len)
{
    const char *t = NULL;
    for (const char *p = msg; (p = strstr(p, "\n\n" TRAILER)); p++)
        t = p;
    if (!t)
        return false;
    unsigned long long f, d, b;
    if (sscanf(t + 2, TRAILER " files=%llu dirs=%llu bytes=%llu", &f, &d, &b) != 3)
        return false;
    *files = f;
    *dirs = d;
    *bytes = b;
    *label_len = (size_t)(t - msg);
    return true;
}

/* A full id or a unique prefix (>= 4 hex chars) of one of our commits. */
static int resolve(sg_ckpt_store *st, const char *id, git_commit **out, sg_err *err)
{
    size_t len = id ? strlen(id) : 0;
    if (len < 4 || len > GIT_OID_HEXSZ || strspn(id, "0123456789abcdefABCDEF") != len)
        return sg_err_set(err, EINVAL, "invalid checkpoint id '%s'", id ? id : "");
    git_oid oid;
    if (git_oid_fromstrn(&oid, id, len) < 0)
        return sg_err_set(err, EINVAL, "invalid checkpoint id '%s'", id);
    int r = git_commit_lookup_prefix(out, st->repo, &oid, len);
    if (r == GIT_EAMBIGUOUS)
        return sg_err_set(err, EINVAL, "checkpoint id '%s' is ambiguous", id);
    if (r < 0)
        return sg_err_set(err, ENOENT, "no checkpoint '%s'", id);
    uint64_t f, d, b;
    size_t ll;
    if (!parse_trailer(git_commit_message_raw(*out), &f, &d, &b, &ll)) {
        git_commit_free(*out);
        *out = NULL;
        return sg_err_set(err, EINVAL, "'%s' is not a checkpoint", id);
    }
    return 0;
}

static char *clean_label(const char *label)
{
    if (!label || !*label)
        label = "checkpoint";
    size_t n = strnlen(label, SG_CKPT_LABEL_MAX);
    if (n == SG_CKPT_LABEL_MAX) /* do not cut a UTF-8 sequence in half */
        while (n > 0 && ((unsigned char)label[n] & 0xc0) == 0x80)
            n--;
    char *s = sg_xrealloc(NULL, n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)label[i];
        s[i] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
    }
    s[n] = '\0';
    return s;
}

int sg_checkpoint_latest(sg_ckpt_store *st, char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    git_oid oid;
    if (latest(st, &oid, err) < 0)
        return -1;
    git_oid_tostr(id_out, SG_CHECKPOINT_ID_LEN + 1, &oid);
    return 0;
}

int sg_checkpoint_take(sg_ckpt_store *st, const char *label, char id_out[SG_CHECKPOINT_ID_LEN + 1],
                       sg_checkpoint_stats *stats, sg_err *err)
{
    return sg_checkpoint_take_ex(st, label, false, id_out, stats, NULL, err);
}

/* Labels of checkpoints that reused the newest one (an unchanged
 * workspace): "<id> <label>" lines, appended; listed after their commit. */
#define ALIASES_FILE "sg-aliases"

/* All the lines in one write: a batch of labels (the supervisor sends up
 * to 256 at once) costs one open and one append, not one each. */
static int alias_append(sg_ckpt_store *st, const char *id, char *const *labels, const int64_t *times,
                        size_t n, sg_err *err)
{
    sg_autofree char *path = sg_strdup_printf("%s/" ALIASES_FILE, st->repo_dir);
    sg_autofree char *buf = NULL;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        sg_autofree char *lab = clean_label(labels[i]);
        sg_autofree char *line = sg_strdup_printf("%s %lld %s\n", id, (long long)times[i], lab);
        size_t l = strlen(line);
        buf = sg_xrealloc(buf, len + l + 1);
        memcpy(buf + len, line, l + 1);
        len += l;
    }
    if (!len)
        return 0;
    sg_autoclose int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || sg_write_all(fd, buf, len) < 0)
        return sg_err_sys(err, "cannot record checkpoint label in %s", path);
    return 0;
}

int sg_checkpoint_alias(sg_ckpt_store *st, const char *id, char *const *labels, const int64_t *times,
                        size_t n, sg_err *err)
{
    STORE_LOCKED(st);
    git_oid head;
    char hex[SG_CHECKPOINT_ID_LEN + 1];
    if (latest(st, &head, err) < 0)
        return -1;
    git_oid_tostr(hex, sizeof hex, &head);
    if (strcmp(hex, id) != 0)
        return sg_err_set(err, EINVAL, "checkpoint %s is not the newest (%s): no label for it", id, hex);
    /* After a restore the workspace is another checkpoint's state. */
    git_oid base;
    if (git_reference_name_to_id(&base, st->repo, BASE_REF) == 0 && !git_oid_equal(&base, &head))
        return sg_err_set(err, EINVAL, "the workspace was restored since checkpoint %s: no label for it", id);
    git_error_clear();
    return alias_append(st, id, labels, times, n, err);
}

int sg_checkpoint_take_ex(sg_ckpt_store *st, const char *label, bool reuse_unchanged,
                          char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stats,
                          bool *reused, sg_err *err)
{
    STORE_LOCKED(st);
    if (reused)
        *reused = false;
    scan s;
    node root;
    int rc = scan_workspace(st, &s, true, &root, NULL, err);
    git_oid parent, parent_tree;
    bool have_parent = false;
    if (rc == 0) {
        sg_err e2 = {0};
        if (latest(st, &parent, &e2) == 0) {
            git_commit *pc = NULL;
            if (git_commit_lookup(&pc, st->repo, &parent) < 0)
                rc = git_fail(err, "previous checkpoint");
            else {
                parent_tree = *git_commit_tree_id(pc);
                have_parent = true;
                git_commit_free(pc);
            }
        } else if (e2.code != ENOENT) {
            *err = e2;
            rc = -1;
        }
    }
    /* "changed" counts against the state the workspace was last known to
     * be in: the last checkpoint, or the one last restored. */
    git_oid base, base_tree;
    bool have_base = false;
    if (rc == 0 && git_reference_name_to_id(&base, st->repo, BASE_REF) == 0) {
        git_commit *bc = NULL;
        if (git_commit_lookup(&bc, st->repo, &base) == 0) {
            base_tree = *git_commit_tree_id(bc);
            have_base = true;
            git_commit_free(bc);
        }
    }
    git_error_clear();
    cmpx c = {.st = st, .err = err};
    if (rc == 0)
        rc = compare(&c, -1, &root, have_base ? &base_tree : have_parent ? &parent_tree : NULL);
    git_oid commit;
    if (rc == 0 && reuse_unchanged && have_base && have_parent && git_oid_equal(&base, &parent) &&
        git_oid_equal(&root.oid, &base_tree) && c.nchanged == 0) {
        /* Nothing changed since the newest checkpoint: this is it again.
         * Only its label is recorded (an O_APPEND line, no object, no ref). */
        git_oid_tostr(id_out, SG_CHECKPOINT_ID_LEN + 1, &base);
        char *one[1] = {(char *)label};
        int64_t now = (int64_t)time(NULL);
        rc = alias_append(st, id_out, one, &now, 1, err);
        if (rc == 0 && stats) {
            *stats = s.stats;
            stats->changed = 0;
        }
        if (rc == 0 && reused)
            *reused = true;
        cmpx_free(&c);
        node_free(&root);
        scan_free(&s);
        if (rc < 0)
            sg_err_prefix(err, "checkpoint");
        return rc;
    }
    if (rc == 0) {
        sg_autofree char *lab = clean_label(label);
        char tree_hex[GIT_OID_HEXSZ + 1], parent_hex[GIT_OID_HEXSZ + 1];
        git_oid_tostr(tree_hex, sizeof tree_hex, &root.oid);
        long long now = (long long)time(NULL);
        sg_autobuf sg_buf b = {0};
        sg_autofree char *head = sg_strdup_printf("tree %s\n", tree_hex);
        sb_str(&b, head);
        if (have_parent) {
            git_oid_tostr(parent_hex, sizeof parent_hex, &parent);
            sg_autofree char *pl = sg_strdup_printf("parent %s\n", parent_hex);
            sb_str(&b, pl);
        }
        sg_autofree char *rest = sg_strdup_printf(
            "author " SIG " %lld +0000\ncommitter " SIG " %lld +0000\n\n%s\n\n" TRAILER
            " files=%llu dirs=%llu bytes=%llu\n",
            now, now, lab, (unsigned long long)s.stats.files, (unsigned long long)s.stats.dirs,
            (unsigned long long)s.stats.bytes);
        sb_str(&b, rest);
        rc = put_obj(st, true, &commit, b.data, b.len, GIT_OBJECT_COMMIT, err);
    }
    if (rc == 0) {
        git_reference *ref = NULL;
        if (git_reference_create(&ref, st->repo, CKPT_REF, &commit, 1, "checkpoint") < 0)
            rc = git_fail(err, "updating %s", CKPT_REF);
        git_reference_free(ref);
        ref = NULL;
        /* An unchanged workspace keeps its base (same tree) and its stat
         * cache: one object and one ref is all the exec path pays then. */
        bool unchanged = have_base && git_oid_equal(&root.oid, &base_tree) && c.nchanged == 0;
        if (rc == 0 && !unchanged &&
            git_reference_create(&ref, st->repo, BASE_REF, &commit, 1, "checkpoint") < 0)
            rc = git_fail(err, "updating %s", BASE_REF);
        git_reference_free(ref);
        if (rc == 0 && !unchanged) {
            sg_err e3 = {0};
            (void)cache_save(st, &e3); /* a lost cache only costs time */
        }
    }
    usage_save(st); /* what was written counts, even for a failed take */
    if (rc == 0) {
        git_oid_tostr(id_out, SG_CHECKPOINT_ID_LEN + 1, &commit);
        if (stats) {
            *stats = s.stats;
            stats->changed = c.nchanged;
        }
    }
    cmpx_free(&c);
    node_free(&root);
    scan_free(&s);
    if (rc < 0)
        sg_err_prefix(err, "checkpoint");
    return rc;
}


int sg_checkpoint_list(sg_ckpt_store *st, sg_checkpoint_info **out, size_t *nout, sg_err *err)
{
    *out = NULL;
    *nout = 0;
    git_oid head;
    sg_err e = {0};
    if (latest(st, &head, &e) < 0) {
        if (e.code == ENOENT)
            return 0;
        *err = e;
        return -1;
    }
    git_revwalk *w = NULL;
    if (git_revwalk_new(&w, st->repo) < 0)
        return git_fail(err, "listing checkpoints");
    git_revwalk_sorting(w, GIT_SORT_TOPOLOGICAL | GIT_SORT_REVERSE);
    git_revwalk_simplify_first_parent(w);
    if (git_revwalk_push(w, &head) < 0) {
        git_revwalk_free(w);
        return git_fail(err, "listing checkpoints");
    }
    sg_checkpoint_info *v = NULL;
    size_t n = 0, cap = 0;
    git_oid oid;
    int rc = 0, r;
    while ((r = git_revwalk_next(&oid, w)) == 0) {
        git_commit *cm = NULL;
        if (git_commit_lookup(&cm, st->repo, &oid) < 0) {
            rc = git_fail(err, "listing checkpoints");
            break;
        }
        const char *msg = git_commit_message_raw(cm);
        uint64_t f = 0, d = 0, b = 0;
        size_t ll = 0;
        if (!parse_trailer(msg, &f, &d, &b, &ll)) {
            git_commit_free(cm);
            continue;
        }
        sg_xgrow(&v, &cap, n + 1, sizeof *v);
        sg_checkpoint_info *x = &v[n++];
        memset(x, 0, sizeof *x);
        git_oid_tostr(x->id, sizeof x->id, &oid);
        x->label = strndup(msg, ll);
        if (!x->label)
            abort();
        x->time = (int64_t)git_commit_time(cm);
        x->files = f;
        x->dirs = d;
        x->bytes = b;
        git_commit_free(cm);
    }
    if (rc == 0 && r != GIT_ITEROVER)
        rc = git_fail(err, "listing checkpoints");
    git_revwalk_free(w);
    if (rc < 0) {
        sg_checkpoint_infos_free(v, n);
        return rc;
    }
    /* Reused checkpoints: each label goes right after its commit (an alias
     * always names the newest commit when it was written). */
    sg_autofree char *apath = sg_strdup_printf("%s/" ALIASES_FILE, st->repo_dir);
    sg_autofclose FILE *af = fopen(apath, "re");
    char line[SG_CKPT_LABEL_MAX + 128];
    while (af && fgets(line, sizeof line, af)) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *sp1 = strchr(line, ' ');
        char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2 || sp1 - line != SG_CHECKPOINT_ID_LEN)
            continue;
        *sp1 = '\0';
        size_t at = n;
        for (size_t i = n; i-- > 0;)
            if (strcmp(v[i].id, line) == 0) {
                at = i + 1;
                while (at < n && strcmp(v[at].id, line) == 0)
                    at++; /* after earlier aliases of the same commit */
                break;
            }
        if (at == n && (n == 0 || strcmp(v[n - 1].id, line) != 0))
            continue; /* names no listed commit */
        sg_xgrow(&v, &cap, n + 1, sizeof *v);
        memmove(&v[at + 1], &v[at], (n - at) * sizeof *v);
        n++;
        sg_checkpoint_info *x = &v[at];
        *x = v[at - 1];
        x->label = strdup(sp2 + 1);
        if (!x->label)
            abort();
        x->time = strtoll(sp1 + 1, NULL, 10);
    }
    *out = v;
    *nout = n;
    return 0;
}


static int change_cmp(const void *a, const void *b)
{
    return strcmp(((const sg_checkpoint_change *)a)->path, ((const sg_checkpoint_change *)b)->path);
}

int sg_checkpoint_diff(sg_ckpt_store *st, const char *id, sg_checkpoint_change **out, size_t *nout,
                       sg_err *err)
{
    *out = NULL;
    *nout = 0;
    STORE_LOCKED(st);
    git_commit *cm = NULL;
    if (resolve(st, id, &cm, err) < 0)
        return -1;
    git_oid target = *git_commit_tree_id(cm);
    git_commit_free(cm);
    scan s;
    node root;
    int rc = scan_workspace(st, &s, false, &root, NULL, err);
    cmpx c = {.st = st, .err = err, .collect = true};
    if (rc == 0)
        rc = compare(&c, -1, &root, &target);
    if (rc == 0) {
        if (c.nch)
            qsort(c.ch, c.nch, sizeof(*c.ch), change_cmp);
        *out = c.ch;
        *nout = c.nch;
        c.ch = NULL;
        c.nch = 0;
    }
    cmpx_free(&c);
    node_free(&root);
    scan_free(&s);
    if (rc < 0)
        sg_err_prefix(err, "checkpoint diff");
    return rc;
}

int sg_checkpoint_restore(sg_ckpt_store *st, const char *id, sg_checkpoint_stats *stats, sg_err *err)
{
    STORE_LOCKED(st);
    git_commit *cm = NULL;
    if (resolve(st, id, &cm, err) < 0)
        return -1;
    git_oid target = *git_commit_tree_id(cm);
    git_oid target_commit = *git_commit_id(cm);
    uint64_t f = 0, d = 0, b = 0;
    size_t ll;
    parse_trailer(git_commit_message_raw(cm), &f, &d, &b, &ll);
    git_commit_free(cm);

    scan s;
    node root;
    sg_autoclose int root_fd = -1;
    int rc = scan_workspace(st, &s, false, &root, &root_fd, err);
    cmpx c = {.st = st, .err = err, .apply = true};
    if (rc == 0)
        rc = compare(&c, root_fd, &root, &target);
    /* Entries of files left alone stay valid; replaced files have new
     * inodes and ctimes, so stale entries can never match them. */
    sg_err e3 = {0};
    if (rc == 0)
        (void)cache_save(st, &e3);
    if (rc == 0) {
        git_reference *ref = NULL;
        if (git_reference_create(&ref, st->repo, BASE_REF, &target_commit, 1, "restore") < 0)
            rc = git_fail(err, "updating %s", BASE_REF);
        git_reference_free(ref);
    }
    if (rc == 0 && stats) {
        memset(stats, 0, sizeof *stats);
        stats->files = f;
        stats->dirs = d;
        stats->bytes = b;
        stats->changed = c.nchanged;
        stats->hashed = s.stats.hashed;
        stats->unrestorable = c.unrestorable;
    }
    cmpx_free(&c);
    node_free(&root);
    scan_free(&s);
    if (rc < 0)
        sg_err_prefix(err, "rollback to %s", id);
    return rc;
}


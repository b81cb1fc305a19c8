/* ckpt_store: the checkpoint store itself -- opening it (a bare libgit2
 * repository beside the workspace, never inside it), its lock, the stat
 * cache that lets an unchanged file skip being read, the count of bytes
 * stored (SG_CKPT_STORE_MAX), and writing objects. checkpoint.h gives the
 * layout and rules; ckpt_internal.h the parts. */
#include "checkpoint/ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/util.h"

#define CACHE_FILE "sg-statcache"
#define USAGE_FILE "sg-usage" /* bytes stored, counted (SG_CKPT_STORE_MAX) */
#define CACHE_MAGIC "SGCKSC01"
#define LOCK_FILE "sg.lock"

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
void sg_ckpt_sb_add(sg_buf *b, const void *d, size_t n)
{
    if (sg_buf_append(b, d, n) < 0)
        sg_oom();
}

void sg_ckpt_sb_str(sg_buf *b, const char *s)
{
    sg_ckpt_sb_add(b, s, strlen(s));
}

int sg_ckpt_git_fail(sg_err *err, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const git_error *e = git_error_last();
    return sg_err_set(err, EIO, "%s: %s", what, e && e->message ? e->message : "libgit2 error");
}

int64_t sg_ckpt_ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec;
}

int64_t sg_ckpt_now_real_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return sg_ckpt_ts_ns(&t);
}

bool sg_ckpt_needs_escape(const char *n)
{
    if (strncmp(n, SG_CKPT_ESC, SG_CKPT_ESC_LEN) == 0)
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

const char *sg_ckpt_unescape(const char *sname)
{
    return strncmp(sname, SG_CKPT_ESC, SG_CKPT_ESC_LEN) == 0 ? sname + SG_CKPT_ESC_LEN : sname;
}

/* ---------- stat cache: path -> stat -> blob oid ---------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

cent *sg_ckpt_cmap_get(const cmap *m, const char *path)
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

cent *sg_ckpt_cmap_put(cmap *m, const char *path)
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

bool sg_ckpt_oidset_has(const oidset *s, const git_oid *o)
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

void sg_ckpt_oidset_add(oidset *s, const git_oid *o)
{
    if (sg_ckpt_oidset_has(s, o))
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

void sg_ckpt_unlockp(int **fd)
{
    if (*fd)
        flock(**fd, LOCK_UN);
}

int *sg_ckpt_lock_store(sg_ckpt_store *st)
{
    while (flock(st->lock_fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    return &st->lock_fd;
}

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
        cent *c = sg_ckpt_cmap_put(&m, buf + off);
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
int sg_ckpt_cache_save(sg_ckpt_store *st, sg_err *err)
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
            cent *d = sg_ckpt_cmap_put(&m, c->path);
            char *keep = d->path;
            *d = *c;
            d->path = keep;
        }
        cmap_free(&st->cache);
        st->cache = m;
    }
    sg_autobuf sg_buf b = {0};
    sg_ckpt_sb_add(&b, CACHE_MAGIC, 8);
    sg_ckpt_sb_add(&b, &count, 8);
    for (size_t i = 0; i < st->cache.cap; i++) {
        const cent *c = &st->cache.v[i];
        if (!cent_live(st, c))
            continue;
        uint32_t pl = (uint32_t)strlen(c->path);
        sg_ckpt_sb_add(&b, &pl, 4);
        sg_ckpt_sb_add(&b, c->path, pl);
        sg_ckpt_sb_add(&b, &c->size, 8);
        sg_ckpt_sb_add(&b, &c->ino, 8);
        sg_ckpt_sb_add(&b, &c->mtime, 8);
        sg_ckpt_sb_add(&b, &c->ctime, 8);
        sg_ckpt_sb_add(&b, &c->mode, 4);
        sg_ckpt_sb_add(&b, &c->stored, 1);
        sg_ckpt_sb_add(&b, c->oid.id, GIT_OID_RAWSZ);
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

void sg_ckpt_usage_save(sg_ckpt_store *st)
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
        sg_ckpt_git_fail(err, "libgit2 init");
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
            sg_ckpt_git_fail(err, "creating checkpoint store %s", st->repo_dir);
            sg_checkpoint_close(st);
            return NULL;
        }
    }
    if (git_repository_odb(&st->odb, st->repo) < 0) {
        sg_ckpt_git_fail(err, "checkpoint store %s", st->repo_dir);
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

int sg_ckpt_put_obj(sg_ckpt_store *st, bool write, git_oid *oid, const void *buf, size_t len,
                   git_object_t type, sg_err *err)
{
    if (git_odb_hash(oid, buf, len, type) < 0)
        return sg_ckpt_git_fail(err, "hashing an object");
    if (!write || sg_ckpt_oidset_has(&st->known, oid))
        return 0;
    git_oid w;
    if (git_odb_write(&w, st->odb, buf, len, type) < 0)
        return sg_ckpt_git_fail(err, "writing an object");
    sg_ckpt_oidset_add(&st->known, oid);
    st->stored_bytes += len;
    st->usage_dirty = true;
    return 0;
}
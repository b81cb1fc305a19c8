/* watch: recursive inotify watcher of a workspace, coalescing raw events
 * into one file_diff payload per real change. See watch.h for the rules. */
#include "capture/watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/digest.h"
#include "base/json.h"
#include "base/util.h"
#include "checkpoint/diff.h"

#define DIR_MASK                                                                      \
    (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY | \
     IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
#define READS_PER_CALLBACK 64      /* bounded work per loop turn */
#define RACY_NS (50ull * 1000000)  /* mtime this close to the read: re-read on rescan */

/* The state of a file as last seen (or as read now). */
typedef struct fstate {
    int64_t size;
    int64_t mtime_ns, ctime_ns;
    ino_t ino;
    mode_t mode;
    int64_t read_rt_ns;  /* realtime of the read, for the racy check */
    bool has_sha, large, binary, dropped; /* dropped: text not kept (budget) */
    uint8_t sha[SG_DIFF_SHA256_LEN];
    char *text;          /* text content when kept */
    size_t text_len;
} fstate;

typedef struct node node;
struct node {
    node *parent;
    node *hnext;        /* chain in parent's kid table */
    char *name;
    uint32_t hash;
    uint32_t gen;       /* rescan mark */
    bool is_dir, dirty, writing, rep;
    bool unwatched;     /* directory past the watch budget: found by rescans */
    uint32_t depth;     /* directory: the root is 0 */
    node *dprev, *dnext; /* dirty list */
    uint64_t dirty_ns;
    /* directory */
    int wd;
    node *wnext;        /* wd table chain */
    node **kids;
    uint32_t nkids, kcap;
    ino_t dino;
    /* file */
    fstate st;          /* last content seen (valid when rep) */
    char *orig_path;    /* where st was seen, if moved since */
    uint64_t move_seq;
};

typedef struct pending_move {
    uint32_t cookie;
    int wd;
    char *name;
    bool isdir;
} pending_move;

typedef struct scan_item {
    node *parent;
    char *name;
} scan_item;

enum scan_mode { SCAN_BASELINE, SCAN_NEW };

struct sg_watch {
    uv_loop_t *loop;
    uv_poll_t poll;
    uv_poll_t tpoll;    /* the settle timerfd */
    int tfd;
    uint64_t armed;
    int open_handles;
    int ifd, rootfd;
    sg_watch_cb cb;
    void *ud;
    sg_diff_fn differ;
    void *differ_ud;
    node *root;
    node **wdtab;
    size_t wdcap, nwd;
    node *dhead, *dtail;
    node **graves;
    size_t ngraves, gcap;
    pending_move *moves;
    size_t nmoves, mcap;
    scan_item *scanq;
    size_t nscan, scap;
    enum scan_mode mode;
    uint64_t seq;
    uint32_t gen;
    bool need_rescan;
    size_t nfiles, ndirs, bytes_cached;
    uint64_t events, overflows, dropped;
    char *scratch;      /* SG_DIFF_MAX_BYTES + 1 */
    size_t max_watches;  /* this watcher's share of the host's inotify watches */
    uint64_t host_watches; /* /proc/sys/fs/inotify/max_user_watches */
    size_t unwatched;    /* directories tracked without a watch */
    bool degraded;       /* some are: every flush rescans */
    uint64_t rep_overflows, rep_dropped; /* already reported in limit events */
    bool rep_unwatched;
    sg_watch_cb limit_cb;
    void *limit_ud;
    sg_watch_gate_fn gate;
    void *gate_ud;
};

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t now_rt_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return ts_ns(&t);
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
        int next = openat(cur >= 0 ? cur : dirfd, comp,
                          O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
static int open_beneath(int dirfd, const char *rel, int flags)
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

/* ---- tree ---------------------------------------------------------------- */

static node *kid_find(const node *dir, const char *name)
{
    if (!dir->kcap)
        return NULL;
    uint32_t h = hash_name(name);
    for (node *n = dir->kids[h & (dir->kcap - 1)]; n; n = n->hnext)
        if (n->hash == h && !strcmp(n->name, name))
            return n;
    return NULL;
}

static void kid_add(node *dir, node *n)
{
    if (dir->nkids + 1 > dir->kcap) {
        uint32_t ncap = dir->kcap ? dir->kcap * 2 : 8;
        node **nk = sg_xrealloc(NULL, ncap * sizeof(*nk));
        memset(nk, 0, ncap * sizeof(*nk));
        for (uint32_t i = 0; i < dir->kcap; i++) {
            node *c = dir->kids[i];
            while (c) {
                node *next = c->hnext;
                c->hnext = nk[c->hash & (ncap - 1)];
                nk[c->hash & (ncap - 1)] = c;
                c = next;
            }
        }
        free(dir->kids);
        dir->kids = nk;
        dir->kcap = ncap;
    }
    n->hash = hash_name(n->name);
    n->hnext = dir->kids[n->hash & (dir->kcap - 1)];
    dir->kids[n->hash & (dir->kcap - 1)] = n;
    n->parent = dir;
    dir->nkids++;
}

static void kid_remove(node *n)
{
    node *dir = n->parent;
    if (!dir)
        return;
    node **pp = &dir->kids[n->hash & (dir->kcap - 1)];
    while (*pp && *pp != n)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = n->hnext;
        dir->nkids--;
    }
    n->parent = NULL;
    n->hnext = NULL;
}

static node *wd_find(const sg_watch *w, int wd)
{
    if (!w->wdcap)
        return NULL;
    for (node *n = w->wdtab[(unsigned)wd & (w->wdcap - 1)]; n; n = n->wnext)
        if (n->wd == wd)
            return n;
    return NULL;
}

static void wd_add(sg_watch *w, node *n)
{
    if (w->nwd + 1 > w->wdcap) {
        size_t ncap = w->wdcap ? w->wdcap * 2 : 64;
        node **nt = sg_xrealloc(NULL, ncap * sizeof(*nt));
        memset(nt, 0, ncap * sizeof(*nt));
        for (size_t i = 0; i < w->wdcap; i++) {
            node *c = w->wdtab[i];
            while (c) {
                node *next = c->wnext;
                c->wnext = nt[(unsigned)c->wd & (ncap - 1)];
                nt[(unsigned)c->wd & (ncap - 1)] = c;
                c = next;
            }
        }
        free(w->wdtab);
        w->wdtab = nt;
        w->wdcap = ncap;
    }
    size_t b = (unsigned)n->wd & (w->wdcap - 1);
    n->wnext = w->wdtab[b];
    w->wdtab[b] = n;
    w->nwd++;
}

static void wd_remove(sg_watch *w, node *n)
{
    if (n->wd < 0 || !w->wdcap)
        return;
    node **pp = &w->wdtab[(unsigned)n->wd & (w->wdcap - 1)];
    while (*pp && *pp != n)
        pp = &(*pp)->wnext;
    if (*pp) {
        *pp = n->wnext;
        w->nwd--;
    }
    n->wnext = NULL;
    n->wd = -1;
}

/* Relative path of a node ("" for the root). */
static char *node_path(const node *n)
{
    size_t len = 0;
    for (const node *p = n; p->parent; p = p->parent)
        len += strlen(p->name) + (p->parent->parent ? 1 : 0);
    char *s = sg_xrealloc(NULL, len + 1);
    s[len] = '\0';
    size_t pos = len;
    for (const node *p = n; p->parent; p = p->parent) {
        size_t l = strlen(p->name);
        pos -= l;
        memcpy(s + pos, p->name, l);
        if (p->parent->parent)
            s[--pos] = '/';
    }
    return s;
}

static char *child_path(const node *dir, const char *name)
{
    sg_autofree char *dp = node_path(dir);
    return *dp ? sg_strdup_printf("%s/%s", dp, name) : sg_xstrdup(name);
}

static void fstate_clear(sg_watch *w, fstate *s, bool cached)
{
    if (s->text && cached)
        w->bytes_cached -= s->text_len;
    free(s->text);
    memset(s, 0, sizeof(*s));
}

static void dirty_unlink(sg_watch *w, node *n)
{
    if (!n->dirty)
        return;
    if (n->dprev)
        n->dprev->dnext = n->dnext;
    else
        w->dhead = n->dnext;
    if (n->dnext)
        n->dnext->dprev = n->dprev;
    else
        w->dtail = n->dprev;
    n->dprev = n->dnext = NULL;
    n->dirty = false;
}

static void dirty_mark(sg_watch *w, node *n, int writing /* -1: keep */)
{
    if (!n->dirty) {
        n->dirty = true;
        n->dirty_ns = sg_now_mono_ns();
        n->dprev = w->dtail;
        n->dnext = NULL;
        if (w->dtail)
            w->dtail->dnext = n;
        else
            w->dhead = n;
        w->dtail = n;
    }
    if (writing >= 0)
        n->writing = writing;
}

static void node_free(sg_watch *w, node *n)
{
    fstate_clear(w, &n->st, true);
    free(n->orig_path);
    free(n->kids);
    free(n->name);
    free(n);
}

/* Takes a node out of the tree. A file whose content was reported goes to
 * the graveyard (reported as deleted unless something replaces it in the
 * same resolution); anything else is freed. emit=false frees everything. */
static void node_detach(sg_watch *w, node *n, bool emit)
{
    if (n->is_dir) {
        while (n->nkids) {
            for (uint32_t i = 0; i < n->kcap; i++)
                while (n->kids[i])
                    node_detach(w, n->kids[i], emit);
        }
        if (n->wd >= 0) {
            inotify_rm_watch(w->ifd, n->wd);
            wd_remove(w, n);
        }
        kid_remove(n);
        w->ndirs--;
        node_free(w, n);
        return;
    }
    dirty_unlink(w, n);
    if (emit && n->rep) {
        if (!n->orig_path)
            n->orig_path = node_path(n);
        kid_remove(n);
        w->nfiles--;
        if (w->ngraves == w->gcap) {
            w->gcap = w->gcap ? w->gcap * 2 : 16;
            w->graves = sg_xrealloc(w->graves, w->gcap * sizeof(*w->graves));
        }
        w->graves[w->ngraves++] = n;
        return;
    }
    kid_remove(n);
    w->nfiles--;
    node_free(w, n);
}

static node *file_node_new(sg_watch *w, node *dir, const char *name)
{
    if (w->nfiles >= SG_WATCH_MAX_FILES) {
        w->dropped++;
        return NULL;
    }
    node *n = sg_xrealloc(NULL, sizeof(*n));
    memset(n, 0, sizeof(*n));
    n->name = sg_xstrdup(name);
    n->wd = -1;
    kid_add(dir, n);
    w->nfiles++;
    return n;
}

/* The file node for dir/name, made if missing (a directory node in the way
 * is replaced: the name is a file now). */
static node *file_node_get(sg_watch *w, node *dir, const char *name)
{
    node *n = kid_find(dir, name);
    if (n && n->is_dir) {
        node_detach(w, n, true);
        n = NULL;
    }
    return n ? n : file_node_new(w, dir, name);
}

/* ---- reading a file ---------------------------------------------------- */

static void fill_stat(fstate *s, const struct stat *st)
{
    s->size = st->st_size;
    s->mtime_ns = ts_ns(&st->st_mtim);
    s->ctime_ns = ts_ns(&st->st_ctim);
    s->ino = st->st_ino;
    s->mode = st->st_mode;
}

static void set_text(fstate *s, const char *buf, size_t len)
{
    sg_diff_sha256(buf, len, s->sha);
    s->has_sha = true;
    s->binary = sg_diff_is_binary(buf, len);
    if (!s->binary) {
        s->text = sg_xrealloc(NULL, len + 1);
        memcpy(s->text, buf, len);
        s->text[len] = '\0';
        s->text_len = len;
    }
}

/* Reads the current state of a file under the root. 1: it exists (a regular
 * file or a symlink), 0: it does not (or is something else), -1: error. */
static int read_state(sg_watch *w, const char *rel, fstate *out)
{
    memset(out, 0, sizeof(*out));
    out->read_rt_ns = now_rt_ns();
    sg_autoclose int fd = open_beneath(w->rootfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ELOOP) {
        /* The last component may be a symlink: its content is its target. */
        sg_autoclose int pfd = open_beneath(w->rootfd, rel, O_PATH);
        if (pfd < 0)
            return errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EXDEV
                       ? 0 : -1;
        struct stat st;
        if (fstat(pfd, &st) < 0 || !S_ISLNK(st.st_mode))
            return 0;
        char target[PATH_MAX];
        ssize_t n = readlinkat(pfd, "", target, sizeof(target));
        if (n < 0)
            return 0;
        fill_stat(out, &st);
        out->size = n;
        set_text(out, target, (size_t)n);
        return 1;
    }
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == EXDEV || errno == ENXIO ? 0 : -1;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    if (!S_ISREG(st.st_mode))
        return 0;
    fill_stat(out, &st);
    /* Read up to one byte past the diff limit: the file may have grown. */
    ssize_t got = sg_read_all(fd, w->scratch, SG_DIFF_MAX_BYTES + 1);
    if (got < 0)
        return -1;
    size_t have = (size_t)got;
    if (have <= SG_DIFF_MAX_BYTES) {
        out->size = (int64_t)have;
        set_text(out, w->scratch, have);
        return 1;
    }
    /* Large: no diff; sniff for NUL, hash by streaming. */
    out->large = true;
    size_t sniff = have < SG_DIFF_BINARY_SNIFF ? have : SG_DIFF_BINARY_SNIFF;
    out->binary = memchr(w->scratch, 0, sniff) != NULL;
    if ((uint64_t)st.st_size > SG_WATCH_HASH_MAX)
        return 1;
    sg_sha256 ctx;
    sg_sha256_init(&ctx);
    sg_sha256_update(&ctx, w->scratch, have);
    uint64_t total = have;
    for (;;) {
        ssize_t r = read(fd, w->scratch, SG_DIFF_MAX_BYTES);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        total += (uint64_t)r;
        if (total > SG_WATCH_HASH_MAX)
            break;
        sg_sha256_update(&ctx, w->scratch, (size_t)r);
    }
    sg_sha256_final(&ctx, out->sha);
    if (total <= SG_WATCH_HASH_MAX) {
        out->has_sha = true;
        out->size = (int64_t)total;
    }
    return 1;
}

static bool same_content(const fstate *a, const fstate *b)
{
    if (a->has_sha && b->has_sha)
        return !memcmp(a->sha, b->sha, SG_DIFF_SHA256_LEN) &&
               S_ISLNK(a->mode) == S_ISLNK(b->mode);
    if (a->has_sha != b->has_sha)
        return false;
    return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ino == b->ino;
}

/* Stores a freshly read state as the last content seen, within the text
 * budget. Takes cur's text. */
static void adopt_state(sg_watch *w, node *n, fstate *cur)
{
    fstate_clear(w, &n->st, true);
    n->st = *cur;
    memset(cur, 0, sizeof(*cur));
    if (n->st.text) {
        if (w->bytes_cached + n->st.text_len > SG_WATCH_CACHE_MAX) {
            free(n->st.text);
            n->st.text = NULL;
            n->st.dropped = true;
        } else {
            w->bytes_cached += n->st.text_len;
        }
    }
    n->rep = true;
    free(n->orig_path);
    n->orig_path = NULL;
}

/* ---- directories and scans ---------------------------------------------- */

static void scan_push(sg_watch *w, node *parent, const char *name)
{
    if (w->nscan == w->scap) {
        w->scap = w->scap ? w->scap * 2 : 64;
        w->scanq = sg_xrealloc(w->scanq, w->scap * sizeof(*w->scanq));
    }
    w->scanq[w->nscan++] = (scan_item){parent, sg_xstrdup(name)};
}

static bool skip_dir_name(const char *name)
{
    return !strcmp(name, ".git");
}

/* Watches dir fd (opened safely) and returns its wd. */
static int add_watch_fd(sg_watch *w, int fd)
{
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    return inotify_add_watch(w->ifd, proc, DIR_MASK);
}

/* Adds the directory parent/name: watch first, then read its entries, so a
 * file made before the watch existed is found by the read and one made after
 * by an event. Files become nodes (baseline: with their content; new: dirty,
 * to be reported as created); subdirectories are queued. */
static void add_dir(sg_watch *w, node *parent, const char *name)
{
    sg_autofree char *rel = child_path(parent, name);
    sg_autoclose int fd = open_beneath(w->rootfd, rel, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return; /* gone already (or replaced by a symlink): nothing to watch */
    struct stat st;
    if (fstat(fd, &st) < 0)
        return;
    node *old = kid_find(parent, name);
    if (old && old->is_dir && old->dino == st.st_ino && (old->wd >= 0 || old->unwatched))
        return; /* already known */
    if (old)
        node_detach(w, old, true);
    /* Deeper than SG_WATCH_MAX_DEPTH: not tracked (a "watch_untracked"
     * limit event); the walks over the tree recurse, and stay bounded. */
    if (w->ndirs >= SG_WATCH_MAX_DIRS || parent->depth >= SG_WATCH_MAX_DEPTH) {
        w->dropped++;
        return;
    }
    /* Past this sandbox's share of the host's watches (or with the host
     * out of them): tracked without a watch, found by the rescan every
     * flush makes from then on (degraded), and said in a limit event. */
    int wd = -1;
    if (w->nwd < w->max_watches) {
        wd = add_watch_fd(w, fd);
        if (wd < 0 && errno != ENOSPC) {
            w->dropped++;
            return;
        }
    }
    node *stale = wd >= 0 ? wd_find(w, wd) : NULL;
    if (stale) {
        /* Same inode as a directory we know elsewhere (a move we missed in
         * an overflow): that node is stale, the watch is now this one's. */
        wd_remove(w, stale);
        node_detach(w, stale, true);
    }
    node *d = sg_xrealloc(NULL, sizeof(*d));
    memset(d, 0, sizeof(*d));
    d->name = sg_xstrdup(name);
    d->is_dir = true;
    d->wd = wd;
    d->dino = st.st_ino;
    d->gen = w->gen;
    d->depth = parent->depth + 1;
    kid_add(parent, d);
    if (wd >= 0) {
        wd_add(w, d);
    } else {
        d->unwatched = true;
        w->unwatched++;
        w->degraded = true;
    }
    w->ndirs++;

    DIR *dp = fdopendir(sg_steal_fd(&fd));
    if (!dp)
        return;
    sg_autoclosedir DIR *dir = dp;
    struct dirent *de;
    while ((de = readdir(dir))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        unsigned char type = de->d_type;
        if (type == DT_UNKNOWN) {
            struct stat cst;
            if (fstatat(dirfd(dir), nm, &cst, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            type = S_ISDIR(cst.st_mode) ? DT_DIR : S_ISREG(cst.st_mode) ? DT_REG
                   : S_ISLNK(cst.st_mode) ? DT_LNK : DT_UNKNOWN;
        }
        if (type == DT_DIR) {
            if (!skip_dir_name(nm))
                scan_push(w, d, nm);
            continue;
        }
        if (type != DT_REG && type != DT_LNK)
            continue;
        node *f = file_node_get(w, d, nm);
        if (!f)
            continue;
        f->gen = w->gen;
        if (w->mode == SCAN_BASELINE) {
            sg_autofree char *frel = child_path(d, nm);
            fstate cur;
            if (read_state(w, frel, &cur) == 1)
                adopt_state(w, f, &cur);
            else
                node_detach(w, f, false);
        } else {
            /* Made before the watch existed: its writer may still have it
             * open, and its IN_CLOSE_WRITE (if it comes) is our only sign of
             * the end; without one it resolves at the cap. */
            dirty_mark(w, f, 1);
        }
    }
}

static void run_scans(sg_watch *w)
{
    /* LIFO: depth first, one directory fd open at a time. */
    while (w->nscan) {
        scan_item it = w->scanq[--w->nscan];
        add_dir(w, it.parent, it.name);
        free(it.name);
    }
}

static void add_dir_tree(sg_watch *w, node *parent, const char *name, enum scan_mode mode)
{
    enum scan_mode saved = w->mode;
    w->mode = mode;
    scan_push(w, parent, name);
    run_scans(w);
    w->mode = saved;
}

/* Marks every file under a directory dirty (after a rename of the directory,
 * they are all renamed). */
static void mark_subtree_moved(sg_watch *w, node *d)
{
    for (uint32_t i = 0; i < d->kcap; i++) {
        for (node *c = d->kids[i]; c; c = c->hnext) {
            if (c->is_dir) {
                mark_subtree_moved(w, c);
            } else {
                if (c->rep && !c->orig_path)
                    c->orig_path = node_path(c);
                c->move_seq = ++w->seq;
                dirty_mark(w, c, -1);
            }
        }
    }
}

/* After an overflow: compare the whole tree with the disk. A file whose stat
 * changed (or whose last read was racy) is dirty, a file that is gone is
 * dirty, new files and directories are added as new. */
static void rescan_dir(sg_watch *w, node *d)
{
    sg_autofree char *rel = node_path(d);
    sg_autoclose int fd = open_beneath(w->rootfd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || (d->parent && st.st_ino != d->dino)) {
        if (d->parent) {
            node *parent = d->parent;
            sg_autofree char *name = sg_xstrdup(d->name);
            node_detach(w, d, true);
            if (fd >= 0)
                add_dir_tree(w, parent, name, SCAN_NEW);
        }
        return;
    }
    uint32_t gen = ++w->gen;
    DIR *dp = fdopendir(sg_steal_fd(&fd));
    if (!dp)
        return;
    sg_autoclosedir DIR *dir = dp;
    struct dirent *de;
    char **subdirs = NULL; /* names: a pointer could go stale meanwhile */
    size_t nsub = 0;
    while ((de = readdir(dir))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        struct stat cst;
        if (fstatat(dirfd(dir), nm, &cst, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        node *k = kid_find(d, nm);
        if (S_ISDIR(cst.st_mode)) {
            if (skip_dir_name(nm))
                continue;
            if (k && k->is_dir && k->dino == cst.st_ino) {
                k->gen = gen;
                subdirs = sg_xrealloc(subdirs, (nsub + 1) * sizeof(*subdirs));
                subdirs[nsub++] = sg_xstrdup(nm);
            } else {
                add_dir_tree(w, d, nm, SCAN_NEW);
                node *nk = kid_find(d, nm);
                if (nk)
                    nk->gen = gen;
            }
            continue;
        }
        if (!S_ISREG(cst.st_mode) && !S_ISLNK(cst.st_mode))
            continue;
        if (k && k->is_dir)
            node_detach(w, k, true);
        k = file_node_get(w, d, nm);
        if (!k)
            continue;
        k->gen = gen;
        const fstate *s = &k->st;
        if (!k->rep || s->size != cst.st_size || s->mtime_ns != ts_ns(&cst.st_mtim) ||
            s->ctime_ns != ts_ns(&cst.st_ctim) || s->ino != cst.st_ino ||
            s->mode != cst.st_mode || s->mtime_ns + (int64_t)RACY_NS >= s->read_rt_ns)
            dirty_mark(w, k, 0);
    }
    /* Whatever was not seen is gone. */
    for (uint32_t i = 0; i < d->kcap; i++) {
        node *c = d->kids[i];
        while (c) {
            node *next = c->hnext;
            if (c->gen != gen) {
                if (c->is_dir)
                    node_detach(w, c, true);
                else
                    dirty_mark(w, c, 0);
            }
            c = next;
        }
    }
    /* One directory open at a time, however deep the tree. */
    closedir(dir);
    dir = NULL;
    for (size_t i = 0; i < nsub; i++) {
        node *k = kid_find(d, subdirs[i]);
        if (k && k->is_dir)
            rescan_dir(w, k);
        free(subdirs[i]);
    }
    free(subdirs);
}

/* ---- raw events --------------------------------------------------------- */

/* A directory moved to another depth: its subtree's depths, without
 * recursion; what lands deeper than SG_WATCH_MAX_DEPTH stops being tracked
 * (its files reported as deleted), so the tree's recursive walks stay
 * bounded whatever moves a learner makes. */
static void fix_depths(sg_watch *w, node *top)
{
    node **stack = NULL, **over = NULL;
    size_t n = 0, cap = 0, nover = 0, ocap = 0;
    stack = sg_xrealloc(NULL, (cap = 16) * sizeof *stack);
    stack[n++] = top;
    while (n) {
        node *d = stack[--n];
        d->depth = d->parent->depth + 1;
        if (d->depth > SG_WATCH_MAX_DEPTH) {
            if (nover == ocap)
                over = sg_xrealloc(over, (ocap = ocap ? ocap * 2 : 8) * sizeof *over);
            over[nover++] = d;
            continue;
        }
        for (uint32_t i = 0; i < d->kcap; i++)
            for (node *c = d->kids[i]; c; c = c->hnext)
                if (c->is_dir) {
                    if (n == cap)
                        stack = sg_xrealloc(stack, (cap *= 2) * sizeof *stack);
                    stack[n++] = c;
                }
    }
    for (size_t i = 0; i < nover; i++) {
        node_detach(w, over[i], true);
        w->dropped++;
    }
    free(stack);
    free(over);
}

static void move_node(sg_watch *w, node *n, node *to_dir, const char *to_name)
{
    node *existing = kid_find(to_dir, to_name);
    if (existing == n)
        return;
    if (existing)
        node_detach(w, existing, true);
    if (n->is_dir) {
        mark_subtree_moved(w, n);
    } else {
        if (n->rep && !n->orig_path)
            n->orig_path = node_path(n);
        n->move_seq = ++w->seq;
        dirty_mark(w, n, -1);
    }
    kid_remove(n);
    free(n->name);
    n->name = sg_xstrdup(to_name);
    kid_add(to_dir, n);
    if (n->is_dir && n->depth != to_dir->depth + 1)
        fix_depths(w, n);
}

static void moved_in(sg_watch *w, node *dir, const char *name, bool isdir)
{
    if (isdir) {
        if (!skip_dir_name(name))
            add_dir_tree(w, dir, name, SCAN_NEW);
        return;
    }
    node *n = file_node_get(w, dir, name);
    if (n)
        dirty_mark(w, n, 0);
}

static void moved_out(sg_watch *w, const pending_move *m)
{
    node *dir = wd_find(w, m->wd);
    node *n = dir ? kid_find(dir, m->name) : NULL;
    if (n)
        node_detach(w, n, true);
}

static void finish_moves(sg_watch *w)
{
    for (size_t i = 0; i < w->nmoves; i++) {
        moved_out(w, &w->moves[i]);
        free(w->moves[i].name);
    }
    w->nmoves = 0;
}

static void handle_event(sg_watch *w, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        w->need_rescan = true;
        return;
    }
    node *dir = wd_find(w, ev->wd);
    if (!dir)
        return;
    if (ev->mask & IN_IGNORED) {
        wd_remove(w, dir);
        return;
    }
    if (ev->mask & IN_DELETE_SELF) {
        if (dir == w->root) {
            while (dir->nkids)
                for (uint32_t i = 0; i < dir->kcap; i++)
                    while (dir->kids[i])
                        node_detach(w, dir->kids[i], true);
        }
        return; /* a subdirectory: handled by its parent's IN_DELETE */
    }
    if (ev->mask & IN_MOVE_SELF || !ev->len)
        return; /* handled by the parent's IN_MOVED_* */
    const char *name = ev->name;
    bool isdir = ev->mask & IN_ISDIR;
    if (isdir && skip_dir_name(name) && !(ev->mask & (IN_MOVED_FROM | IN_MOVED_TO)))
        return;

    if (ev->mask & IN_MOVED_FROM) {
        if (w->nmoves == w->mcap) {
            w->mcap = w->mcap ? w->mcap * 2 : 8;
            w->moves = sg_xrealloc(w->moves, w->mcap * sizeof(*w->moves));
        }
        w->moves[w->nmoves++] = (pending_move){ev->cookie, ev->wd, sg_xstrdup(name), isdir};
        return;
    }
    if (ev->mask & IN_MOVED_TO) {
        for (size_t i = 0; i < w->nmoves; i++) {
            pending_move m = w->moves[i];
            if (m.cookie != ev->cookie)
                continue;
            memmove(&w->moves[i], &w->moves[i + 1], (w->nmoves - i - 1) * sizeof(*w->moves));
            w->nmoves--;
            node *from_dir = wd_find(w, m.wd);
            node *n = from_dir ? kid_find(from_dir, m.name) : NULL;
            if (n && isdir && skip_dir_name(name)) {
                node_detach(w, n, true); /* moved into a .git: gone from view */
            } else if (n) {
                move_node(w, n, dir, name);
            } else {
                moved_in(w, dir, name, isdir);
            }
            free(m.name);
            return;
        }
        moved_in(w, dir, name, isdir);
        return;
    }
    if (isdir) {
        if (ev->mask & IN_CREATE) {
            add_dir_tree(w, dir, name, SCAN_NEW);
        } else if (ev->mask & IN_DELETE) {
            node *n = kid_find(dir, name);
            if (n)
                node_detach(w, n, true);
        }
        return;
    }
    node *n;
    if (ev->mask & IN_DELETE) {
        n = kid_find(dir, name);
        if (n && !n->is_dir)
            dirty_mark(w, n, 0);
        return;
    }
    n = file_node_get(w, dir, name);
    if (!n)
        return;
    if (ev->mask & IN_CLOSE_WRITE)
        dirty_mark(w, n, 0);
    else if (ev->mask & (IN_CREATE | IN_MODIFY))
        dirty_mark(w, n, 1);
    else
        dirty_mark(w, n, -1);
}

/* Reads inotify until it is empty (or the per-turn bound). 1 if drained. */
static int read_events(sg_watch *w, bool unbounded, sg_err *err)
{
    char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
    int max = unbounded ? 16 * READS_PER_CALLBACK : READS_PER_CALLBACK;
    for (int i = 0; i < max; i++) {
        ssize_t n = read(w->ifd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* Drained: an unpaired IN_MOVED_FROM left the workspace. */
            finish_moves(w);
            if (w->need_rescan) {
                w->need_rescan = false;
                w->overflows++;
                rescan_dir(w, w->root);
            }
            return 1;
        }
        if (n <= 0)
            return sg_err_sys(err, "read inotify");
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            handle_event(w, ev);
            p += sizeof(*ev) + ev->len;
        }
    }
    return 0;
}

/* ---- resolution ----------------------------------------------------------- */

enum act_kind { ACT_DEL, ACT_REN, ACT_MOD, ACT_CRE };

typedef struct action {
    enum act_kind kind;
    node *n;            /* tree node (NULL for a deletion) */
    node *old;          /* whose st is the old content: n, a grave, or NULL */
    char *path;         /* current path (deleted: the old path) */
    fstate cur;
    node *replaced;     /* renamed over an existing file: that file (a grave) */
} action;

static int grave_cmp(const void *a, const void *b)
{
    return strcmp((*(node *const *)a)->orig_path, (*(node *const *)b)->orig_path);
}

static node *grave_find(sg_watch *w, const char *path)
{
    size_t lo = 0, hi = w->ngraves;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(w->graves[mid]->orig_path, path);
        if (!c)
            return w->graves[mid]->dirty ? NULL : w->graves[mid]; /* dirty: consumed */
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int act_cmp(const void *a, const void *b)
{
    const action *x = a, *y = b;
    if (x->kind != y->kind)
        return (int)x->kind - (int)y->kind;
    if (x->kind == ACT_REN)
        return x->n->move_seq < y->n->move_seq ? -1 : x->n->move_seq > y->n->move_seq;
    return strcmp(x->path, y->path);
}

static json_t *jstr_path(const char *p)
{
    sg_autofree char *s = sg_utf8_sanitize(p, strlen(p), NULL);
    return s ? json_string(s) : NULL;
}

#define SG_WATCH_PATH_HEX_MAX 4096 /* bytes of a path given in path_hex, at most */

/* A path that is not valid UTF-8 shows with U+FFFD in "path" (JSON can
 * carry nothing else), so two such files could share it: its bytes go
 * beside it, in hex, so every path in the events is told apart and can be
 * given back exactly. NULL for a valid path. */
static json_t *jhex_path_if_invalid(const char *p)
{
    size_t n = strlen(p), clean_len = 0;
    /* Bounded: a learner nests paths far past PATH_MAX, and a file_diff
     * frame must stay under the ingest's frame limit (path, old_path and
     * their U+FFFD forms are already in it). Past the bound: no hex. */
    if (n > SG_WATCH_PATH_HEX_MAX)
        return NULL;
    sg_autofree char *s = sg_utf8_sanitize(p, n, &clean_len);
    if (s && clean_len == n && memcmp(s, p, n) == 0)
        return NULL;
    sg_autofree char *hex = malloc(2 * n + 1);
    if (!hex)
        return NULL;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[(unsigned char)p[i] >> 4];
        hex[2 * i + 1] = digits[(unsigned char)p[i] & 15];
    }
    hex[2 * n] = '\0';
    return json_string(hex);
}

static json_t *build_payload(sg_watch *w, const action *a)
{
    static const char *names[] = {"deleted", "renamed", "modified", "created"};
    json_t *p = json_object();
    if (!p)
        return NULL;
    json_object_set_new(p, "path", jstr_path(a->path));
    json_t *raw = jhex_path_if_invalid(a->path);
    if (raw)
        json_object_set_new(p, "path_hex", raw);
    json_object_set_new(p, "change", json_string(names[a->kind]));
    const fstate *old = a->replaced ? &a->replaced->st : a->old ? &a->old->st : NULL;
    if (a->kind == ACT_REN) {
        json_object_set_new(p, "old_path", jstr_path(a->old->orig_path));
        json_t *oraw = jhex_path_if_invalid(a->old->orig_path);
        if (oraw)
            json_object_set_new(p, "old_path_hex", oraw);
    }
    if (a->replaced)
        json_object_set_new(p, "replaced", json_true());
    const fstate *nw = a->kind == ACT_DEL ? NULL : &a->cur;
    const fstate *flags = nw ? nw : old;
    if (nw) {
        json_object_set_new(p, "size", json_integer(nw->size));
        if (nw->has_sha) {
            char hex[SG_DIFF_SHA256_HEX];
            sg_diff_hex(nw->sha, hex);
            json_object_set_new(p, "sha256", json_string(hex));
        }
    }
    if (flags->large) {
        json_object_set_new(p, "truncated", json_true());
        if (flags->binary)
            json_object_set_new(p, "binary", json_true());
        return p;
    }
    if (flags->binary) {
        json_object_set_new(p, "binary", json_true());
        return p;
    }
    const char *otext = NULL, *ntext = NULL;
    size_t olen = 0, nlen = 0;
    if (nw) {
        ntext = nw->text ? nw->text : "";
        nlen = nw->text_len;
    }
    if (old) {
        if (old->dropped) {
            json_object_set_new(p, "diff_unavailable", json_true());
            return p;
        }
        if (old->large || old->binary) {
            json_object_set_new(p, "diff_base", json_string("empty"));
            otext = "";
        } else {
            otext = old->text ? old->text : "";
            olen = old->text_len;
        }
    }
    sg_diff_result r;
    sg_err err = {0};
    /* The diff names the current path on both sides (the rename is in
     * old_path). */
    if (w->differ(w->differ_ud, a->path, otext, olen, ntext, nlen, &r, &err) < 0) {
        json_object_set_new(p, "diff_unavailable", json_true());
        return p;
    }
    json_t *d = json_stringn(r.text, r.len);
    if (d) {
        json_object_set_new(p, "diff", d);
        json_object_set_new(p, "added", json_integer((json_int_t)r.added));
        json_object_set_new(p, "removed", json_integer((json_int_t)r.removed));
    } else {
        json_object_set_new(p, "diff_unavailable", json_true());
    }
    sg_diff_result_clear(&r);
    return p;
}

static void add_action(action **acts, size_t *n, size_t *cap, action a)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *acts = sg_xrealloc(*acts, *cap * sizeof(**acts));
    }
    (*acts)[(*n)++] = a;
}

/* Compares every ready dirty path with the last content seen and emits one
 * payload per real change. force: do not wait for open writers. */
/* Limit events (sg_watch_set_limit_cb): the first directory past the
 * watch budget, each overflow rescan, each growth of the untracked count. */
static void report_limits(sg_watch *w)
{
    if (!w->limit_cb)
        return;
    if (w->unwatched && !w->rep_unwatched) {
        w->rep_unwatched = true;
        w->limit_cb(w->limit_ud, json_pack("{s:s, s:I, s:I, s:I, s:s}", "what", "watches",
            "limit", (json_int_t)w->max_watches, "host_max_user_watches", (json_int_t)w->host_watches,
            "unwatched_dirs", (json_int_t)w->unwatched,
            "degraded", "directories past the limit are rescanned at each flush (every exec's end)"));
    }
    if (w->overflows > w->rep_overflows) {
        w->rep_overflows = w->overflows;
        w->limit_cb(w->limit_ud, json_pack("{s:s, s:I, s:s}", "what", "watch_overflow",
            "overflows", (json_int_t)w->overflows,
            "degraded", "the kernel's event queue overflowed: changes found by a full rescan"));
    }
    if (w->dropped > w->rep_dropped) {
        w->rep_dropped = w->dropped;
        w->limit_cb(w->limit_ud, json_pack("{s:s, s:I, s:I, s:I}", "what", "watch_untracked",
            "untracked", (json_int_t)w->dropped, "max_files", (json_int_t)SG_WATCH_MAX_FILES,
            "max_dirs", (json_int_t)SG_WATCH_MAX_DIRS));
    }
}

void sg_watch_set_gate(sg_watch *w, sg_watch_gate_fn gate, void *userdata)
{
    w->gate = gate;
    w->gate_ud = userdata;
}

void sg_watch_set_limit_cb(sg_watch *w, sg_watch_cb cb, void *userdata)
{
    w->limit_cb = cb;
    w->limit_ud = userdata;
}

static int resolve_(sg_watch *w, bool force);
static int resolve(sg_watch *w, bool force)
{
    int n = resolve_(w, force);
    report_limits(w);
    return n;
}

static int resolve_(sg_watch *w, bool force)
{
    uint64_t now = sg_now_mono_ns();
    node **work = NULL;
    size_t nwork = 0, wcap = 0;
    for (node *n = w->dhead, *next; n; n = next) {
        next = n->dnext;
        if (!force && n->writing && now - n->dirty_ns < SG_WATCH_CAP_MS * 1000000ull)
            continue;
        dirty_unlink(w, n);
        if (nwork == wcap) {
            wcap = wcap ? wcap * 2 : 64;
            work = sg_xrealloc(work, wcap * sizeof(*work));
        }
        work[nwork++] = n;
    }
    action *acts = NULL;
    size_t nact = 0, cap = 0;
    /* Read current states; the gone ones leave the tree first so that the
     * graveyard is complete before anything is matched against it. */
    for (size_t i = 0; i < nwork; i++) {
        node *n = work[i];
        char *path = node_path(n);
        fstate cur;
        int r = read_state(w, path, &cur);
        if (r == 0) {
            free(path);
            node_detach(w, n, true);
            continue;
        }
        if (r < 0) {
            free(path);
            continue;
        }
        add_action(&acts, &nact, &cap, (action){ACT_MOD, n, NULL, path, cur, NULL});
    }
    free(work);
    if (w->ngraves)
        qsort(w->graves, w->ngraves, sizeof(*w->graves), grave_cmp);
    /* A grave is "consumed" (dirty flag reused: graves are never on the
     * dirty list) when a file at its path replaces it. */
    size_t keep = 0;
    for (size_t i = 0; i < nact; i++) {
        action *a = &acts[i];
        node *n = a->n;
        node *g = grave_find(w, a->path);
        if (n->rep) {
            const char *opath = n->orig_path ? n->orig_path : a->path;
            if (strcmp(opath, a->path)) {
                a->kind = ACT_REN;
                a->old = n;
                if (g) {
                    /* `mv tmp target`: the diff is against what target held */
                    g->dirty = true;
                    a->replaced = g;
                }
            } else if (!same_content(&n->st, &a->cur)) {
                a->kind = ACT_MOD;
                a->old = n;
            } else {
                adopt_state(w, n, &a->cur); /* same content; refresh stat */
                free(a->path);
                continue;
            }
        } else if (g) {
            g->dirty = true;
            if (same_content(&g->st, &a->cur)) {
                adopt_state(w, n, &a->cur); /* replaced by the same bytes */
                free(a->path);
                continue;
            }
            a->kind = ACT_MOD;
            a->old = g;
        } else {
            a->kind = ACT_CRE;
        }
        acts[keep++] = *a;
    }
    nact = keep;
    for (size_t i = 0; i < w->ngraves; i++) {
        node *g = w->graves[i];
        if (!g->dirty)
            add_action(&acts, &nact, &cap,
                       (action){ACT_DEL, NULL, g, sg_xstrdup(g->orig_path), {0}, NULL});
    }
    if (nact > 1)
        qsort(acts, nact, sizeof(*acts), act_cmp);
    int emitted = 0;
    for (size_t i = 0; i < nact; i++) {
        action *a = &acts[i];
        /* Past the owner's budget no payload is made: no diff, no JSON
         * (the state is still adopted, so the next change is right). */
        json_t *p = !w->gate || w->gate(w->gate_ud) ? build_payload(w, a) : NULL;
        if (a->n)
            adopt_state(w, a->n, &a->cur);
        free(a->path);
        if (p) {
            w->events++;
            emitted++;
            w->cb(w->ud, p);
        }
    }
    free(acts);
    for (size_t i = 0; i < w->ngraves; i++)
        node_free(w, w->graves[i]);
    w->ngraves = 0;
    return emitted;
}

/* ---- loop glue ------------------------------------------------------------ */

/* libuv timers have millisecond granularity (a 1 ms timer fires 1-3 ms
 * later); the settle time is sub-millisecond, so it is a timerfd. */
static void arm(sg_watch *w, uint64_t ns)
{
    struct itimerspec its = {0};
    if (ns == 0 && w->armed == 0)
        return;
    if (ns) {
        its.it_value.tv_sec = (time_t)(ns / 1000000000);
        its.it_value.tv_nsec = (long)(ns % 1000000000);
    }
    timerfd_settime(w->tfd, 0, &its, NULL);
    w->armed = ns;
}

/* After new events: resolve when the burst settles, or now if the oldest
 * dirty path has waited the cap. No dirty paths: no timer. */
static void schedule(sg_watch *w)
{
    uint64_t now = sg_now_mono_ns();
    uint64_t cap_ns = SG_WATCH_CAP_MS * 1000000ull;
    if (w->dhead && now - w->dhead->dirty_ns >= cap_ns)
        resolve(w, false);
    if (!w->dhead && !w->ngraves) {
        arm(w, 0);
        return;
    }
    arm(w, SG_WATCH_SETTLE_US * 1000ull);
}

static void on_timer(uv_poll_t *h, int status, int events)
{
    sg_watch *w = h->data;
    uint64_t expirations;
    if (read(w->tfd, &expirations, sizeof(expirations)) < 0 && errno == EAGAIN)
        return; /* re-armed meanwhile */
    w->armed = 0;
    resolve(w, false);
    if (!w->dhead)
        return;
    /* Only open writers are left: wake at the first one's cap. */
    uint64_t now = sg_now_mono_ns(), cap_ns = SG_WATCH_CAP_MS * 1000000ull, soonest = cap_ns;
    for (node *n = w->dhead; n; n = n->dnext) {
        uint64_t age = now - n->dirty_ns;
        uint64_t left = age >= cap_ns ? 0 : cap_ns - age;
        if (left < soonest)
            soonest = left;
    }
    arm(w, soonest ? soonest : 1);
}

static void on_inotify(uv_poll_t *h, int status, int events)
{
    sg_watch *w = h->data;
    sg_err err = {0};
    if (status < 0)
        return;
    read_events(w, false, &err);
    schedule(w);
}

int sg_watch_flush(sg_watch *w, sg_err *err)
{
    if (read_events(w, true, err) < 0)
        return -1;
    if (w->degraded)
        rescan_dir(w, w->root); /* the directories without a watch */
    int n = resolve(w, true);
    arm(w, 0);
    return n;
}

void sg_watch_get_stats(const sg_watch *w, sg_watch_stats *out)
{
    out->watches = w->nwd;
    out->files = w->nfiles;
    out->bytes_cached = w->bytes_cached;
    out->events = w->events;
    out->overflows = w->overflows;
    out->dropped = w->dropped;
}

static void free_all(sg_watch *w)
{
    if (w->root)
        node_detach(w, w->root, false);
    w->root = NULL;
    for (size_t i = 0; i < w->ngraves; i++)
        node_free(w, w->graves[i]);
    for (size_t i = 0; i < w->nmoves; i++)
        free(w->moves[i].name);
    for (size_t i = 0; i < w->nscan; i++)
        free(w->scanq[i].name);
    free(w->graves);
    free(w->moves);
    free(w->scanq);
    free(w->wdtab);
    free(w->scratch);
    if (w->ifd >= 0)
        close(w->ifd);
    if (w->rootfd >= 0)
        close(w->rootfd);
    if (w->tfd >= 0)
        close(w->tfd);
    free(w);
}

static void on_close(uv_handle_t *h)
{
    sg_watch *w = h->data;
    if (--w->open_handles == 0)
        free_all(w);
}

void sg_watch_free(sg_watch *w)
{
    if (!w)
        return;
    if (!w->open_handles) {
        free_all(w);
        return;
    }
    uv_close((uv_handle_t *)&w->poll, on_close);
    uv_close((uv_handle_t *)&w->tpoll, on_close);
}

/* This watcher's share of the host's inotify watches (one limit per uid,
 * shared by every sandbox and every other inotify user of root):
 * 1/SG_WATCH_HOST_SHARE of max_user_watches, at most SG_WATCH_MAX_DIRS.
 * SANDGLASS_WATCH_MAX_DIRS lowers it (tests). */
static size_t watch_budget(uint64_t *host)
{
    uint64_t v = 0;
    sg_err e = {0};
    size_t len = 0;
    sg_autofree char *txt = sg_read_file("/proc/sys/fs/inotify/max_user_watches", 64, &len, &e);
    if (txt)
        txt[strcspn(txt, "\n")] = '\0';
    *host = txt && sg_parse_uint(txt, UINT32_MAX, &v, &e) == 0 ? v : 8192;
    uint64_t b = *host / SG_WATCH_HOST_SHARE;
    if (b > SG_WATCH_MAX_DIRS)
        b = SG_WATCH_MAX_DIRS;
    const char *env = getenv("SANDGLASS_WATCH_MAX_DIRS");
    if (env && sg_parse_uint(env, SG_WATCH_MAX_DIRS, &v, &e) == 0 && v < b)
        b = v;
    return b ? (size_t)b : 1;
}

sg_watch *sg_watch_new(uv_loop_t *loop, const char *root, sg_watch_cb cb, void *userdata,
                       sg_diff_fn differ, void *differ_ud, sg_err *err)
{
    sg_watch *w = calloc(1, sizeof(*w));
    if (!w) {
        sg_err_set(err, ENOMEM, "watch: out of memory");
        return NULL;
    }
    w->loop = loop;
    w->cb = cb;
    w->ud = userdata;
    w->differ = differ;
    w->differ_ud = differ_ud;
    w->ifd = w->rootfd = w->tfd = -1;
    w->scratch = sg_xrealloc(NULL, SG_DIFF_MAX_BYTES + 1);
    w->max_watches = watch_budget(&w->host_watches);
    w->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->rootfd < 0) {
        sg_err_sys(err, "watch %s", root);
        free_all(w);
        return NULL;
    }
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->ifd < 0) {
        sg_err_sys(err, "inotify_init1");
        free_all(w);
        return NULL;
    }
    w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (w->tfd < 0) {
        sg_err_sys(err, "timerfd_create");
        free_all(w);
        return NULL;
    }
    node *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    r->name = sg_xstrdup("");
    r->is_dir = true;
    r->wd = add_watch_fd(w, w->rootfd);
    if (r->wd < 0) {
        sg_err_sys(err, "inotify_add_watch %s", root);
        free(r->name);
        free(r);
        free_all(w);
        return NULL;
    }
    struct stat st;
    if (fstat(w->rootfd, &st) == 0)
        r->dino = st.st_ino;
    w->root = r;
    w->ndirs = 1;
    wd_add(w, r);
    /* Baseline: read the root's entries the way add_dir does. */
    w->mode = SCAN_BASELINE;
    {
        int dfd = openat(w->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dp = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!dp) {
            if (dfd >= 0)
                close(dfd);
            sg_err_sys(err, "read %s", root);
            free_all(w);
            return NULL;
        }
        struct dirent *de;
        while ((de = readdir(dp))) {
            const char *nm = de->d_name;
            if (!strcmp(nm, ".") || !strcmp(nm, ".."))
                continue;
            struct stat cst;
            if (fstatat(dirfd(dp), nm, &cst, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            if (S_ISDIR(cst.st_mode)) {
                if (!skip_dir_name(nm))
                    scan_push(w, r, nm);
            } else if (S_ISREG(cst.st_mode) || S_ISLNK(cst.st_mode)) {
                node *f = file_node_get(w, r, nm);
                fstate cur;
                if (f && read_state(w, nm, &cur) == 1)
                    adopt_state(w, f, &cur);
                else if (f)
                    node_detach(w, f, false);
            }
        }
        closedir(dp);
    }
    run_scans(w);
    /* Anything that changed during the baseline was marked by an event and
     * is resolved (and reported) on the loop as usual. */
    uv_poll_init(loop, &w->poll, w->ifd);
    uv_poll_init(loop, &w->tpoll, w->tfd);
    w->poll.data = w->tpoll.data = w;
    w->open_handles = 2;
    if (uv_poll_start(&w->poll, UV_READABLE, on_inotify) < 0 ||
        uv_poll_start(&w->tpoll, UV_READABLE, on_timer) < 0) {
        sg_err_set(err, EIO, "watch: uv_poll_start failed");
        sg_watch_free(w);
        return NULL;
    }
    return w;
}

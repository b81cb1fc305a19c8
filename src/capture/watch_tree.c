/* watch_tree: the workspace watcher's tree of nodes (kid and wd hash
 * tables, the dirty list, the graveyard of reported files) and the reading
 * of a file's state under the root. See watch.h for the rules. */
#include "capture/watch_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/digest.h"
#include "base/util.h"

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int64_t watch_ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t now_rt_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return watch_ts_ns(&t);
}

/* ---- tree ---------------------------------------------------------------- */

node *watch_kid_find(const node *dir, const char *name)
{
    if (!dir->kcap)
        return NULL;
    uint32_t h = hash_name(name);
    for (node *n = dir->kids[h & (dir->kcap - 1)]; n; n = n->hnext)
        if (n->hash == h && !strcmp(n->name, name))
            return n;
    return NULL;
}

void watch_kid_add(node *dir, node *n)
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

void watch_kid_remove(node *n)
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

node *watch_wd_find(const sg_watch *w, int wd)
{
    if (!w->wdcap)
        return NULL;
    for (node *n = w->wdtab[(unsigned)wd & (w->wdcap - 1)]; n; n = n->wnext)
        if (n->wd == wd)
            return n;
    return NULL;
}

void watch_wd_add(sg_watch *w, node *n)
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

void watch_wd_remove(sg_watch *w, node *n)
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
char *watch_node_path(const node *n)
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

char *watch_child_path(const node *dir, const char *name)
{
    sg_autofree char *dp = watch_node_path(dir);
    return *dp ? sg_strdup_printf("%s/%s", dp, name) : sg_xstrdup(name);
}

static void fstate_clear(sg_watch *w, fstate *s, bool cached)
{
    if (s->text && cached)
        w->bytes_cached -= s->text_len;
    free(s->text);
    memset(s, 0, sizeof(*s));
}

void watch_dirty_unlink(sg_watch *w, node *n)
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

void watch_dirty_mark(sg_watch *w, node *n, int writing /* -1: keep */)
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

void watch_node_free(sg_watch *w, node *n)
{
    fstate_clear(w, &n->st, true);
    free(n->orig_path);
    free(n->kids);
    free(n->name);
    free(n);
}

void watch_dir_queue(sg_watch *w, const node *d, bool gone)
{
    if (!d || !d->is_dir || !d->parent)
        return;
    sg_xgrow(&w->dirq, &w->dqcap, w->ndirq + 1, sizeof *w->dirq);
    w->dirq[w->ndirq++] = (dir_item){watch_node_path(d), gone, sg_now_mono_ns()};
}

void watch_dir_queue_tree(sg_watch *w, const node *d)
{
    if (!d->nkids) {
        watch_dir_queue(w, d, false);
        return;
    }
    for (uint32_t i = 0; i < d->kcap; i++)
        for (const node *c = d->kids[i]; c; c = c->hnext)
            if (c->is_dir)
                watch_dir_queue_tree(w, c);
}

bool watch_busy(const sg_watch *w)
{
    return w->dhead || w->ngraves || w->need_rescan || w->rs_active || w->ndirq;
}

/* Takes a node out of the tree. A file whose content was reported goes to
 * the graveyard (reported as deleted unless something replaces it in the
 * same resolution); anything else is freed. emit=false frees everything. */
void watch_node_detach(sg_watch *w, node *n, bool emit)
{
    node *parent = n->parent;
    if (emit && parent && parent->nkids == 1)
        watch_dir_queue(w, parent, false); /* it may be left empty */
    if (n->is_dir) {
        if (emit && n->rep)
            watch_dir_queue(w, n, true);
        while (n->nkids) {
            for (uint32_t i = 0; i < n->kcap; i++)
                while (n->kids[i])
                    watch_node_detach(w, n->kids[i], emit);
        }
        if (n->wd >= 0) {
            inotify_rm_watch(w->ifd, n->wd);
            watch_wd_remove(w, n);
        }
        watch_kid_remove(n);
        w->ndirs--;
        watch_node_free(w, n);
        return;
    }
    watch_dirty_unlink(w, n);
    if (emit && n->rep) {
        if (!n->orig_path)
            n->orig_path = watch_node_path(n);
        watch_kid_remove(n);
        w->nfiles--;
        n->dirty_ns = sg_now_mono_ns(); /* a grave's time: its hold counts from it */
        n->held = false;
        sg_xgrow(&w->graves, &w->gcap, w->ngraves + 1, sizeof *w->graves);
        w->graves[w->ngraves++] = n;
        return;
    }
    watch_kid_remove(n);
    w->nfiles--;
    watch_node_free(w, n);
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
    n->born_ns = sg_now_mono_ns();
    watch_kid_add(dir, n);
    w->nfiles++;
    return n;
}

/* The file node for dir/name, made if missing (a directory node in the way
 * is replaced: the name is a file now). */
node *watch_file_node_get(sg_watch *w, node *dir, const char *name)
{
    node *n = watch_kid_find(dir, name);
    if (n && n->is_dir) {
        watch_node_detach(w, n, true);
        n = NULL;
    }
    if (n)
        return n;
    /* an ignored name is never tracked (not counted against the limit) */
    return watch_ignored(w, dir, name, false) ? NULL : file_node_new(w, dir, name);
}

/* ---- reading a file ---------------------------------------------------- */

static void fill_stat(fstate *s, const struct stat *st)
{
    s->size = st->st_size;
    s->mtime_ns = watch_ts_ns(&st->st_mtim);
    s->ctime_ns = watch_ts_ns(&st->st_ctim);
    s->ino = st->st_ino;
    s->mode = st->st_mode;
    s->rdev = st->st_rdev;
}

static void set_text(fstate *s, const char *buf, size_t len, bool sha_known)
{
    if (!sha_known)
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
 * file, a symlink, or a FIFO, socket or device, whose state is its type
 * alone), 0: it does not (or is a directory), -1: error. The entry is
 * looked at through O_PATH first and opened for reading only when it is a
 * regular file: opening a learner's FIFO would release a writer blocked on
 * it (whose next write then meets no reader), and a device's open may act. */
int watch_read_state(sg_watch *w, const char *rel, fstate *out)
{
    memset(out, 0, sizeof(*out));
    out->read_rt_ns = now_rt_ns();
    sg_autoclose int pfd = sg_open_beneath(w->rootfd, rel, O_PATH);
    if (pfd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EXDEV ? 0 : -1;
    struct stat st;
    if (fstat(pfd, &st) < 0)
        return -1;
    if (S_ISDIR(st.st_mode))
        return 0;
    if (S_ISLNK(st.st_mode)) {
        /* The last component is a symlink: its content is its target. */
        char target[PATH_MAX];
        ssize_t n = readlinkat(pfd, "", target, sizeof(target));
        if (n < 0)
            return 0;
        fill_stat(out, &st);
        out->size = n;
        set_text(out, target, (size_t)n, false);
        return 1;
    }
    if (!S_ISREG(st.st_mode)) {
        fill_stat(out, &st);
        out->size = 0;
        return 1;
    }
    sg_autoclose int fd = sg_open_beneath(w->rootfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EXDEV || errno == ENXIO ? 0 : -1;
    if (fstat(fd, &st) < 0)
        return -1;
    if (!S_ISREG(st.st_mode)) { /* replaced since the look: the next event reads it again */
        fill_stat(out, &st);
        out->size = 0;
        return S_ISDIR(st.st_mode) ? 0 : 1;
    }
    fill_stat(out, &st);
    /* Read up to one byte past the diff limit: the file may have grown. */
    ssize_t got = sg_read_all(fd, w->scratch, SG_DIFF_MAX_BYTES + 1);
    if (got < 0)
        return -1;
    size_t have = (size_t)got;
    w->read_bytes += have;
    if (have <= SG_DIFF_MAX_BYTES) {
        out->size = (int64_t)have;
        /* the baseline of a fork's workspace: the hash its CLI wrote the
         * file from (checked against this fstat by the callback) */
        bool known = w->known && (uint64_t)st.st_size == have && w->known(w->known_ud, rel, &st, out->sha);
        set_text(out, w->scratch, have, known);
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
        w->read_bytes += (uint64_t)r;
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

const char *sg_watch_type_name(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISLNK(m) ? "link" : S_ISDIR(m) ? "dir" : S_ISFIFO(m) ? "fifo" : S_ISSOCK(m) ? "socket"
         : S_ISCHR(m) ? "chardev" : S_ISBLK(m) ? "blockdev" : "other";
}

bool watch_same_content(const fstate *a, const fstate *b)
{
    if (a->mode && b->mode && (a->mode & S_IFMT) != (b->mode & S_IFMT))
        return false;
    if (watch_is_special(a) || watch_is_special(b)) /* a FIFO written through is the same FIFO */
        return a->ino == b->ino && (!(S_ISCHR(a->mode) || S_ISBLK(a->mode)) || a->rdev == b->rdev);
    if (a->has_sha && b->has_sha)
        return !memcmp(a->sha, b->sha, SG_DIFF_SHA256_LEN);
    if (a->has_sha != b->has_sha)
        return false;
    return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ino == b->ino;
}

/* Stores a freshly read state as the last content seen, within the text
 * budget. Takes cur's text. */
void watch_adopt_state(sg_watch *w, node *n, fstate *cur)
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


node *watch_path_find(sg_watch *w, const char *path)
{
    node *d = w->root;
    sg_autofree char *buf = sg_xstrdup(path);
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c && d; c = strtok_r(NULL, "/", &save))
        d = d->is_dir ? watch_kid_find(d, c) : NULL;
    return d;
}

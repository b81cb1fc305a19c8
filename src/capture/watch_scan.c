/* watch_scan: the workspace watcher's directories (watch first, then read),
 * its rescans, and the raw inotify events that mark paths dirty. See
 * watch.h for the rules. */
#include "capture/watch_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"

/* ---- directories and scans ---------------------------------------------- */

void watch_scan_push(sg_watch *w, node *parent, const char *name)
{
    sg_xgrow(&w->scanq, &w->scap, w->nscan + 1, sizeof *w->scanq);
    w->scanq[w->nscan++] = (scan_item){parent, sg_xstrdup(name)};
}

bool watch_ignored(sg_watch *w, const node *parent, const char *name, bool is_dir)
{
    if (!sg_ignore_count(w->ignore))
        return false;
    if (!sg_ignore_needs_path(w->ignore))
        return sg_ignore_match(w->ignore, name, is_dir);
    sg_autofree char *rel = watch_child_path(parent, name);
    return sg_ignore_match(w->ignore, rel, is_dir);
}

bool watch_skip_dir(sg_watch *w, const node *parent, const char *name)
{
    return !strcmp(name, ".git") || watch_ignored(w, parent, name, true);
}

/* Watches dir fd (opened safely) and returns its wd. */
int watch_add_watch_fd(sg_watch *w, int fd)
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
    sg_autofree char *rel = watch_child_path(parent, name);
    sg_autoclose int fd = sg_open_beneath(w->rootfd, rel, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return; /* gone already (or replaced by a symlink): nothing to watch */
    struct stat st;
    if (fstat(fd, &st) < 0)
        return;
    node *old = watch_kid_find(parent, name);
    if (old && old->is_dir && old->dino == st.st_ino && (old->wd >= 0 || old->unwatched))
        return; /* already known */
    if (old)
        watch_node_detach(w, old, true);
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
        wd = watch_add_watch_fd(w, fd);
        if (wd < 0 && errno != ENOSPC) {
            w->dropped++;
            return;
        }
    }
    node *stale = wd >= 0 ? watch_wd_find(w, wd) : NULL;
    if (stale) {
        /* Same inode as a directory we know elsewhere (a move we missed in
         * an overflow): that node is stale, the watch is now this one's. */
        watch_wd_remove(w, stale);
        watch_node_detach(w, stale, true);
    }
    node *d = sg_xrealloc(NULL, sizeof(*d));
    memset(d, 0, sizeof(*d));
    d->name = sg_xstrdup(name);
    d->is_dir = true;
    d->wd = wd;
    d->dino = st.st_ino;
    d->gen = w->gen;
    d->depth = parent->depth + 1;
    watch_kid_add(parent, d);
    if (wd >= 0) {
        watch_wd_add(w, d);
    } else {
        d->unwatched = true;
        w->unwatched++;
        w->degraded = true;
    }
    w->ndirs++;
    if (w->mode == SCAN_NEW)
        watch_dir_queue(w, d, false); /* reported if it is still empty then */

    DIR *dp = fdopendir(sg_steal_fd(&fd));
    if (!dp)
        return;
    sg_autoclosedir DIR *dir = dp;
    struct dirent *de;
    /* An empty directory of the baseline is one the record holds (the
     * session's seed, contents.h): its removal is reported. */
    d->rep = w->mode == SCAN_BASELINE;
    while ((de = readdir(dir))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        d->rep = false;
        unsigned char type = de->d_type;
        if (type == DT_UNKNOWN) {
            struct stat cst;
            if (fstatat(dirfd(dir), nm, &cst, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            type = S_ISDIR(cst.st_mode) ? DT_DIR : DT_REG; /* every other type is a file node */
        }
        if (type == DT_DIR) {
            if (!watch_skip_dir(w, d, nm))
                watch_scan_push(w, d, nm);
            continue;
        }
        node *f = watch_file_node_get(w, d, nm);
        if (!f)
            continue;
        f->gen = w->gen;
        if (w->mode == SCAN_BASELINE) {
            sg_autofree char *frel = watch_child_path(d, nm);
            fstate cur;
            if (watch_read_state(w, frel, &cur) == 1)
                watch_adopt_state(w, f, &cur);
            else
                watch_node_detach(w, f, false);
        } else {
            /* Made before the watch existed: its writer may still have it
             * open, and its IN_CLOSE_WRITE (if it comes) is our only sign of
             * the end; without one it resolves at the cap. */
            watch_dirty_mark(w, f, 1);
        }
    }
}

void watch_run_scans(sg_watch *w)
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
    watch_scan_push(w, parent, name);
    watch_run_scans(w);
    w->mode = saved;
}

/* Marks every file under a directory dirty (after a rename of the directory,
 * they are all renamed). */
static void mark_subtree_moved(sg_watch *w, node *d)
{
    if (d->rep) { /* the record's directory is gone from here */
        watch_dir_queue(w, d, true);
        d->rep = false;
    }
    for (uint32_t i = 0; i < d->kcap; i++) {
        for (node *c = d->kids[i]; c; c = c->hnext) {
            if (c->is_dir) {
                mark_subtree_moved(w, c);
            } else {
                if (c->rep && !c->orig_path)
                    c->orig_path = watch_node_path(c);
                c->move_seq = ++w->seq;
                watch_dirty_mark(w, c, -1);
            }
        }
    }
}

/* The directory d opened for a rescan, or NULL: nothing to read (d was
 * replaced on disk: its node goes, and what is there now is added as new). */
static DIR *rescan_open(sg_watch *w, node *d)
{
    sg_autofree char *rel = watch_node_path(d);
    sg_autoclose int fd = sg_open_beneath(w->rootfd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || (d->parent && st.st_ino != d->dino)) {
        if (d->parent) {
            node *parent = d->parent;
            sg_autofree char *name = sg_xstrdup(d->name);
            watch_node_detach(w, d, true);
            if (fd >= 0)
                add_dir_tree(w, parent, name, SCAN_NEW);
        }
        return NULL;
    }
    return fdopendir(sg_steal_fd(&fd));
}

/* One entry nm of directory d (open as dfd) against the tree: a file whose
 * stat changed (or whose last read was racy) is dirty, new files and
 * directories are added as new; true: nm is a known subdirectory to
 * rescan in turn. */
static bool rescan_entry(sg_watch *w, node *d, int dfd, const char *nm, uint32_t gen)
{
    if (!strcmp(nm, ".") || !strcmp(nm, ".."))
        return false;
    struct stat cst;
    if (fstatat(dfd, nm, &cst, AT_SYMLINK_NOFOLLOW) < 0)
        return false;
    node *k = watch_kid_find(d, nm);
    if (S_ISDIR(cst.st_mode)) {
        if (watch_skip_dir(w, d, nm))
            return false;
        if (k && k->is_dir && k->dino == cst.st_ino) {
            k->gen = gen;
            return true;
        }
        add_dir_tree(w, d, nm, SCAN_NEW);
        node *nk = watch_kid_find(d, nm);
        if (nk)
            nk->gen = gen;
        return false;
    }
    if (k && k->is_dir)
        watch_node_detach(w, k, true);
    k = watch_file_node_get(w, d, nm);
    if (!k)
        return false;
    k->gen = gen;
    const fstate *s = &k->st;
    if (!k->rep || s->size != cst.st_size || s->mtime_ns != watch_ts_ns(&cst.st_mtim) ||
        s->ctime_ns != watch_ts_ns(&cst.st_ctim) || s->ino != cst.st_ino || s->mode != cst.st_mode ||
        s->mtime_ns + (int64_t)RACY_NS >= s->read_rt_ns)
        watch_dirty_mark(w, k, 0);
    return false;
}

/* After d's entries were all read: whatever was not seen is gone. A kid
 * stamped after the read began (gen above it: made or moved in by an event
 * while a rescan in pieces waited) is there. */
static void rescan_sweep(sg_watch *w, node *d, uint32_t gen)
{
    for (uint32_t i = 0; i < d->kcap; i++) {
        node *c = d->kids[i];
        while (c) {
            node *next = c->hnext;
            if (c->gen < gen) {
                if (c->is_dir)
                    watch_node_detach(w, c, true);
                else
                    watch_dirty_mark(w, c, 0);
            }
            c = next;
        }
    }
}

/* After an overflow (a degraded flush): compare the whole tree under d
 * with the disk, in one piece. */
void watch_rescan_dir(sg_watch *w, node *d)
{
    DIR *dp = rescan_open(w, d);
    if (!dp)
        return;
    uint32_t gen = ++w->gen;
    sg_autoclosedir DIR *dir = dp;
    struct dirent *de;
    char **subdirs = NULL; /* names: a pointer could go stale meanwhile */
    size_t nsub = 0, subcap = 0;
    while ((de = readdir(dir))) {
        if (rescan_entry(w, d, dirfd(dir), de->d_name, gen)) {
            sg_xgrow(&subdirs, &subcap, nsub + 1, sizeof *subdirs);
            subdirs[nsub++] = sg_xstrdup(de->d_name);
        }
    }
    rescan_sweep(w, d, gen);
    /* One directory open at a time, however deep the tree. */
    closedir(dir);
    dir = NULL;
    for (size_t i = 0; i < nsub; i++) {
        node *k = watch_kid_find(d, subdirs[i]);
        if (k && k->is_dir)
            watch_rescan_dir(w, k);
        free(subdirs[i]);
    }
    free(subdirs);
}

/* ---- the overflow rescan, in pieces ------------------------------------- */

/* A rescan of the whole tree that a learner can make as long as it likes
 * (130,000 files: 0.1-0.2 s) goes a slice at a time (SG_WATCH_TURN_US),
 * one turn of the loop each: a cursor (the directory being read, kept
 * open, and the directories still to read, by path) is taken up again at
 * the next turn. Between slices events are read and resolved as ever: a
 * node they free or move is found again by path (or not: its events said
 * what happened to it), and a node they make is stamped with the current
 * gen, so that the sweep of a directory never takes it for gone. */

static void rescan_todo_push(sg_watch *w, char *rel)
{
    sg_xgrow(&w->rs_todo, &w->rs_todocap, w->rs_ntodo + 1, sizeof *w->rs_todo);
    w->rs_todo[w->rs_ntodo++] = rel;
}

static void rescan_close_dir(sg_watch *w)
{
    if (w->rs_dir)
        closedir(w->rs_dir);
    w->rs_dir = NULL;
    free(w->rs_rel);
    w->rs_rel = NULL;
}

void watch_rescan_clear(sg_watch *w)
{
    rescan_close_dir(w);
    for (size_t i = 0; i < w->rs_ntodo; i++)
        free(w->rs_todo[i]);
    free(w->rs_todo);
    w->rs_todo = NULL;
    w->rs_ntodo = w->rs_todocap = 0;
    w->rs_active = false;
}

/* The directory node at rel, or NULL. */
static node *dir_at(sg_watch *w, const char *rel)
{
    node *d = watch_path_find(w, rel);
    return d && d->is_dir ? d : NULL;
}

/* Opens the next directory of the cursor; false when none is left. */
static bool rescan_next_dir(sg_watch *w)
{
    while (w->rs_ntodo) {
        char *rel = w->rs_todo[--w->rs_ntodo];
        node *d = dir_at(w, rel);
        DIR *dp = d ? rescan_open(w, d) : NULL;
        if (!dp) { /* gone meanwhile, or replaced (rescan_open added the new one) */
            free(rel);
            continue;
        }
        w->rs_dir = dp;
        w->rs_rel = rel;
        w->rs_dino = d->dino;
        w->rs_gen = ++w->gen;
        return true;
    }
    return false;
}

/* Reads on from the cursor until budget_ns passed (checked every few
 * entries; 0: no bound); true when the rescan is done. */
static bool rescan_step(sg_watch *w, uint64_t budget_ns)
{
    uint64_t t0 = sg_now_mono_ns();
    unsigned n = 0;
    bool done = false;
    for (;;) {
        if (!w->rs_dir && !rescan_next_dir(w)) {
            done = true;
            break;
        }
        node *d = dir_at(w, w->rs_rel);
        if (!d || (d != w->root && d->dino != w->rs_dino)) {
            rescan_close_dir(w); /* moved or gone meanwhile: its events said so */
            continue;
        }
        struct dirent *de;
        bool cut = false;
        while ((de = readdir(w->rs_dir))) {
            if (rescan_entry(w, d, dirfd(w->rs_dir), de->d_name, w->rs_gen))
                rescan_todo_push(w, watch_child_path(d, de->d_name));
            if (budget_ns && ++n % w->rs_check == 0 &&
                (sg_now_mono_ns() - t0 >= budget_ns || watch_yield(w))) {
                cut = true;
                break;
            }
        }
        if (cut)
            break;
        rescan_sweep(w, d, w->rs_gen);
        rescan_close_dir(w);
        if (budget_ns && sg_now_mono_ns() - t0 >= budget_ns)
            break;
    }
    w->rs_ns += sg_now_mono_ns() - t0;
    w->rs_slices++;
    return done;
}

/* Starts the overflow's rescan when one is asked for and due, and goes on
 * with the one under way: a slice (or, unbounded, to the end). When it
 * ends, the next waits at least 4x its duration (SG_WATCH_RESCAN_MIN_MS). */
void watch_rescan_turn(sg_watch *w, bool unbounded)
{
    uint64_t wait;
    if (!w->rs_active && w->need_rescan && watch_rescan_due(w, &wait)) {
        w->need_rescan = false;
        w->overflows++;
        w->rs_active = true;
        w->rs_ns = 0;
        rescan_todo_push(w, sg_xstrdup(""));
    }
    if (!w->rs_active || !rescan_step(w, unbounded ? 0 : w->rs_slice_ns))
        return;
    watch_rescan_clear(w);
    uint64_t now = sg_now_mono_ns(), gap = SG_WATCH_RESCAN_MIN_MS * 1000000ull;
    w->rescan_next_ns = now + (4 * w->rs_ns > gap ? 4 * w->rs_ns : gap);
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
    sg_xgrow(&stack, &cap, 1, sizeof *stack);
    stack[n++] = top;
    while (n) {
        node *d = stack[--n];
        d->depth = d->parent->depth + 1;
        if (d->depth > SG_WATCH_MAX_DEPTH) {
            sg_xgrow(&over, &ocap, nover + 1, sizeof *over);
            over[nover++] = d;
            continue;
        }
        for (uint32_t i = 0; i < d->kcap; i++)
            for (node *c = d->kids[i]; c; c = c->hnext)
                if (c->is_dir) {
                    sg_xgrow(&stack, &cap, n + 1, sizeof *stack);
                    stack[n++] = c;
                }
    }
    for (size_t i = 0; i < nover; i++) {
        watch_node_detach(w, over[i], true);
        w->dropped++;
    }
    free(stack);
    free(over);
}

static void move_node(sg_watch *w, node *n, node *to_dir, const char *to_name)
{
    node *existing = watch_kid_find(to_dir, to_name);
    if (existing == n)
        return;
    if (existing)
        watch_node_detach(w, existing, true);
    node *from = n->parent;
    if (from && from->nkids == 1)
        watch_dir_queue(w, from, false); /* it may be left empty */
    if (n->is_dir) {
        mark_subtree_moved(w, n);
    } else {
        if (n->rep && !n->orig_path)
            n->orig_path = watch_node_path(n);
        n->move_seq = ++w->seq;
        n->born_ns = 0; /* a temporary file renamed into place: no hold */
        watch_dirty_mark(w, n, -1);
    }
    watch_kid_remove(n);
    free(n->name);
    n->name = sg_xstrdup(to_name);
    watch_kid_add(to_dir, n);
    n->gen = w->gen; /* there, for a rescan under way (rescan_sweep) */
    if (n->is_dir && n->depth != to_dir->depth + 1)
        fix_depths(w, n);
    if (n->is_dir && n->parent)
        watch_dir_queue_tree(w, n); /* its empty directories, at their new paths */
}

static void moved_in(sg_watch *w, node *dir, const char *name, bool isdir)
{
    if (isdir) {
        if (!watch_skip_dir(w, dir, name))
            add_dir_tree(w, dir, name, SCAN_NEW);
        return;
    }
    node *n = watch_file_node_get(w, dir, name);
    if (n)
        watch_dirty_mark(w, n, 0);
}

static void moved_out(sg_watch *w, const pending_move *m)
{
    node *dir = watch_wd_find(w, m->wd);
    node *n = dir ? watch_kid_find(dir, m->name) : NULL;
    if (n)
        watch_node_detach(w, n, true);
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
    node *dir = watch_wd_find(w, ev->wd);
    if (!dir)
        return;
    if (ev->mask & IN_IGNORED) {
        watch_wd_remove(w, dir);
        return;
    }
    if (ev->mask & IN_DELETE_SELF) {
        if (dir == w->root) {
            while (dir->nkids)
                for (uint32_t i = 0; i < dir->kcap; i++)
                    while (dir->kids[i])
                        watch_node_detach(w, dir->kids[i], true);
        }
        return; /* a subdirectory: handled by its parent's IN_DELETE */
    }
    if (ev->mask & IN_MOVE_SELF || !ev->len)
        return; /* handled by the parent's IN_MOVED_* */
    const char *name = ev->name;
    bool isdir = ev->mask & IN_ISDIR;
    if (isdir && watch_skip_dir(w, dir, name) && !(ev->mask & (IN_MOVED_FROM | IN_MOVED_TO)))
        return;

    if (ev->mask & IN_MOVED_FROM) {
        sg_xgrow(&w->moves, &w->mcap, w->nmoves + 1, sizeof *w->moves);
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
            node *from_dir = watch_wd_find(w, m.wd);
            node *n = from_dir ? watch_kid_find(from_dir, m.name) : NULL;
            if (n && (isdir ? watch_skip_dir(w, dir, name) : watch_ignored(w, dir, name, false))) {
                /* moved into a .git or to an ignored name (an editor's
                 * backup by rename): gone from view */
                watch_node_detach(w, n, true);
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
            node *n = watch_kid_find(dir, name);
            if (n)
                watch_node_detach(w, n, true);
        }
        return;
    }
    node *n;
    if (ev->mask & IN_DELETE) {
        n = watch_kid_find(dir, name);
        if (n && !n->is_dir)
            watch_dirty_mark(w, n, 0);
        return;
    }
    n = watch_file_node_get(w, dir, name);
    if (!n)
        return;
    if (ev->mask & IN_CLOSE_WRITE)
        watch_dirty_mark(w, n, 0);
    else if (ev->mask & (IN_CREATE | IN_MODIFY))
        watch_dirty_mark(w, n, 1);
    else
        watch_dirty_mark(w, n, -1);
}

/* Reads inotify until it is empty (or the per-turn bound). 1 if drained. */
int watch_read_events(sg_watch *w, bool unbounded, sg_err *err)
{
    char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
    int max = unbounded ? 16 * READS_PER_CALLBACK : READS_PER_CALLBACK;
    for (int i = 0; i < max; i++) {
        if (i > 0 && watch_yield(w))
            return 0; /* the rest at the next turn */
        ssize_t n = read(w->ifd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* Drained: an unpaired IN_MOVED_FROM left the workspace. */
            finish_moves(w);
            /* a flush too waits its turn: the rescan's changes come later */
            watch_rescan_turn(w, unbounded);
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


/* watch: recursive inotify watcher of a workspace, coalescing raw events
 * into one file_diff payload per real change. See watch.h for the rules;
 * watch_internal.h says which file holds what. This one: the loop glue,
 * the watcher's making and freeing. */
#include "capture/watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "capture/watch_internal.h"

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

uint64_t watch_budget_wait(sg_watch *w)
{
    uint64_t now = sg_now_mono_ns();
    uint64_t dt = now - w->read_fill_ns;
    w->read_fill_ns = now;
    /* dt * rate / 1e9 without overflow: dt is capped at the bucket's fill time */
    uint64_t full_ns = SG_WATCH_READ_BURST * 1000000000ull / SG_WATCH_READ_RATE;
    if (dt > full_ns)
        dt = full_ns;
    int64_t add = (int64_t)((double)dt * (double)SG_WATCH_READ_RATE / 1e9);
    w->read_tokens += add;
    if (w->read_tokens > (int64_t)SG_WATCH_READ_BURST)
        w->read_tokens = (int64_t)SG_WATCH_READ_BURST;
    if (w->read_tokens > 0)
        return 0;
    return (uint64_t)((double)(1 - w->read_tokens) * 1e9 / (double)SG_WATCH_READ_RATE) + 1;
}

bool watch_rescan_due(sg_watch *w, uint64_t *wait_ns)
{
    uint64_t now = sg_now_mono_ns();
    *wait_ns = now >= w->rescan_next_ns ? 0 : w->rescan_next_ns - now;
    return *wait_ns == 0;
}

/* The settled changes become payloads; the owner first reads what it has
 * pending from before them (sg_watch_set_before_settle). */
static void resolve_settled(sg_watch *w)
{
    if (w->before_settle)
        w->before_settle(w->before_settle_ud);
    watch_resolve(w, false);
}

/* After new events: resolve when the burst settles, or now if the oldest
 * dirty path has waited the cap. No dirty paths: no timer. */
static void schedule(sg_watch *w)
{
    uint64_t now = sg_now_mono_ns();
    uint64_t cap_ns = SG_WATCH_CAP_MS * 1000000ull;
    if (w->dhead && now - w->dhead->dirty_ns >= cap_ns)
        resolve_settled(w);
    if (!watch_busy(w)) {
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
    uint64_t rescan_wait = 0;
    if (w->rs_active) {
        watch_rescan_turn(w, false); /* the next slice of the one under way */
    } else if (w->need_rescan && watch_rescan_due(w, &rescan_wait)) {
        sg_err err = {0};
        watch_read_events(w, false, &err); /* the rescan starts once drained */
    }
    resolve_settled(w);
    if (!watch_busy(w))
        return;
    /* Open writers, files put off for the read budget, a rescan put off:
     * wake at the first one's time. */
    uint64_t soonest = watch_next_due(w, sg_now_mono_ns());
    uint64_t budget = w->dhead ? watch_budget_wait(w) : 0;
    if (budget > soonest)
        soonest = budget;
    if (w->need_rescan || w->rs_active) {
        uint64_t r = rescan_wait && !w->rs_active ? rescan_wait : SG_WATCH_SETTLE_US * 1000ull;
        if (r < soonest || !w->dhead)
            soonest = r;
    }
    arm(w, soonest ? soonest : 1);
}

static void on_inotify(uv_poll_t *h, int status, int events)
{
    sg_watch *w = h->data;
    sg_err err = {0};
    if (status < 0)
        return;
    watch_read_events(w, false, &err);
    schedule(w);
}

void sg_watch_set_before_settle(sg_watch *w, void (*fn)(void *userdata), void *userdata)
{
    w->before_settle = fn;
    w->before_settle_ud = userdata;
}

void sg_watch_hurry(sg_watch *w, bool on)
{
    if (w)
        w->hurry = on;
}

void sg_watch_set_yield(sg_watch *w, sg_watch_yield_fn fn, void *ud)
{
    if (w) {
        w->yield = fn;
        w->yield_ud = ud;
    }
}

bool watch_yield(sg_watch *w)
{
    return w->yield && w->yield(w->yield_ud);
}

int sg_watch_flush(sg_watch *w, sg_err *err)
{
    if (watch_read_events(w, !w->hurry, err) < 0)
        return -1;
    if (w->degraded && !w->hurry)
        watch_rescan_dir(w, w->root); /* the directories without a watch */
    /* Hurried: nothing is resolved here (a diff may have to start a new
     * checkpoint worker, the one the kill took): the loop does it next. */
    int n = w->hurry ? 0 : watch_resolve(w, true);
    /* what the read budget put off comes at the timer */
    arm(w, watch_busy(w) ? SG_WATCH_SETTLE_US * 1000ull : 0);
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
    out->rescan_slices = w->rs_slices;
    out->rescanning = w->rs_active;
}

const char *sg_watch_test_rescan_at(const sg_watch *w)
{
    return w->rs_dir ? w->rs_rel : NULL;
}

void sg_watch_test_rescan_slice(sg_watch *w, unsigned entries)
{
    w->rs_check = entries ? entries : SG_WATCH_RESCAN_CHECK;
    w->rs_slice_ns = entries ? 1 : SG_WATCH_TURN_US * 1000ull;
}

static void free_all(sg_watch *w)
{
    watch_rescan_clear(w);
    if (w->root)
        watch_node_detach(w, w->root, false);
    w->root = NULL;
    for (size_t i = 0; i < w->ngraves; i++)
        watch_node_free(w, w->graves[i]);
    for (size_t i = 0; i < w->nmoves; i++)
        free(w->moves[i].name);
    for (size_t i = 0; i < w->ndirq; i++)
        free(w->dirq[i].path);
    free(w->dirq);
    for (size_t i = 0; i < w->nscan; i++)
        free(w->scanq[i].name);
    free(w->graves);
    sg_ignore_free(w->ignore);
    json_decref(w->bulk);
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

/* The baseline of the root's own entries, read the way add_dir reads a
 * directory's (subdirectories queued for watch_run_scans). */
static int baseline_root(sg_watch *w, node *r, const char *root, sg_err *err)
{
    int dfd = openat(w->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dp = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dp) {
        if (dfd >= 0)
            close(dfd);
        return sg_err_sys(err, "read %s", root);
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
            if (!watch_skip_dir(w, r, nm))
                watch_scan_push(w, r, nm);
        } else { /* a file, a link, or a FIFO, socket or device (by its type) */
            node *f = watch_file_node_get(w, r, nm);
            fstate cur;
            if (f && watch_read_state(w, nm, &cur) == 1)
                watch_adopt_state(w, f, &cur);
            else if (f)
                watch_node_detach(w, f, false);
        }
    }
    closedir(dp);
    return 0;
}

sg_watch *sg_watch_new(uv_loop_t *loop, const char *root, sg_watch_cb cb, void *userdata,
                       sg_diff_fn differ, void *differ_ud, sg_err *err)
{
    return sg_watch_new_ext(loop, root, cb, userdata, differ, differ_ud, NULL, false, NULL, NULL, err);
}

sg_watch *sg_watch_new_ext(uv_loop_t *loop, const char *root, sg_watch_cb cb, void *userdata,
                           sg_diff_fn differ, void *differ_ud, sg_ignore *ignore, bool hold,
                           sg_watch_known_fn known, void *known_ud, sg_err *err)
{
    sg_watch *w = calloc(1, sizeof(*w));
    if (!w) {
        sg_ignore_free(ignore);
        sg_err_set(err, ENOMEM, "watch: out of memory");
        return NULL;
    }
    w->ignore = ignore; /* before the baseline: an ignored file is never tracked */
    w->hold_ns = hold ? SG_WATCH_HOLD_MS * 1000000ull : 0;
    sg_watch_test_rescan_slice(w, 0);
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
    r->wd = watch_add_watch_fd(w, w->rootfd);
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
    watch_wd_add(w, r);
    /* Baseline: read the root's entries the way add_dir does. */
    w->mode = SCAN_BASELINE;
    w->known = known;
    w->known_ud = known_ud;
    if (baseline_root(w, r, root, err) < 0) {
        free_all(w);
        return NULL;
    }
    watch_run_scans(w);
    w->known = NULL; /* the baseline's only: a learner may forge an mtime */
    /* the baseline is the start's, not the budget's */
    w->read_tokens = (int64_t)SG_WATCH_READ_BURST;
    w->read_fill_ns = sg_now_mono_ns();
    w->file_cost_ns = 100000; /* a first guess: 100 files a turn */
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


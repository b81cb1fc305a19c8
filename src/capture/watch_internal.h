/* watch_internal: the workspace watcher's private interface, shared by
 * the files of the watcher and by nothing else (watch.h is the public one):
 *   watch_tree.c     the tree of nodes, its hash tables, the dirty list, and
 *                    reading a file's state (safe opens, hashes, text kept)
 *   watch_scan.c     directories and scans (watches, baseline, rescans after
 *                    an overflow or past the watch budget) and raw inotify
 *                    events (moves paired by cookie)
 *   watch_resolve.c  a settled burst resolved into file_diff payloads, and
 *                    the limit events
 *   watch.c          the loop glue (settle timer), sg_watch_new/flush/free
 * Names shared between these files carry the watch_ prefix. */
#ifndef SG_WATCH_INTERNAL_H
#define SG_WATCH_INTERNAL_H

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/err.h"
#include "capture/ignore.h"
#include "capture/watch.h"
#include "checkpoint/diff.h"


#define DIR_MASK                                                                      \
    (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY | \
     IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
#define READS_PER_CALLBACK 16      /* inotify reads (64 KiB each) per loop turn */
#define RACY_NS (50ull * 1000000)  /* mtime this close to the read: re-read on rescan */

/* The state of a file as last seen (or as read now). */
typedef struct fstate {
    int64_t size;
    int64_t mtime_ns, ctime_ns;
    ino_t ino;
    mode_t mode;
    dev_t rdev;          /* a device's number */
    int64_t read_rt_ns;  /* realtime of the read, for the racy check */
    bool has_sha, large, binary, dropped; /* dropped: text not kept (budget) */
    uint8_t sha[SG_DIFF_SHA256_LEN];
    char *text;          /* text content when kept */
    size_t text_len;
} fstate;

/* A FIFO, socket or device: recorded by its type, never opened or read. */
static inline bool watch_is_special(const fstate *s)
{
    return s->mode && !S_ISREG(s->mode) && !S_ISLNK(s->mode) && !S_ISDIR(s->mode);
}

typedef struct node node;
struct node {
    node *parent;
    node *hnext;        /* chain in parent's kid table */
    char *name;
    uint32_t hash;
    uint32_t gen;       /* rescan mark */
    bool is_dir, dirty, writing, rep;
    bool held;          /* a grave kept for a while: something may take its place */
    bool unwatched;     /* directory past the watch budget: found by rescans */
    uint32_t depth;     /* directory: the root is 0 */
    node *dprev, *dnext; /* dirty list */
    uint64_t dirty_ns;  /* a grave: when it left the tree */
    uint64_t born_ns;   /* a file node made after the baseline; 0: moved since */
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

/* A directory to report (watch.h: empty directories): one that may have
 * become an empty directory the record does not hold yet, checked when
 * the burst resolves, or one the record holds that is gone. By path: its
 * node may be freed meanwhile. */
typedef struct dir_item {
    char *path;
    bool gone;
    uint64_t at_ns; /* when it was queued: a new directory waits SG_WATCH_HOLD_MS for its files */
} dir_item;

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
    dir_item *dirq;     /* directories to report at the next resolution */
    size_t ndirq, dqcap;
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
    sg_watch_known_fn known; /* during the baseline alone (sg_watch_new_ext) */
    void *known_ud;
    sg_watch_gate_fn gate;
    void *gate_ud;
    void (*before_settle)(void *); /* sg_watch_set_before_settle */
    void *before_settle_ud;
    /* the read budget (SG_WATCH_READ_*) */
    uint64_t read_bytes;   /* bytes read from files, ever */
    int64_t read_tokens;   /* the bucket: bytes that may be read now */
    uint64_t read_fill_ns; /* when it was last filled */
    uint64_t read_deferred; /* dirty files put off for the budget, ever */
    uint64_t file_cost_ns; /* what resolving one file cost lately (moving average) */
    bool hurry;            /* sg_watch_hurry: a flush leaves the changes to the loop */
    sg_watch_yield_fn yield; /* sg_watch_set_yield: the turn gives way */
    void *yield_ud;
    /* overflow rescans, rate-limited (SG_WATCH_RESCAN_MIN_MS) */
    uint64_t rescan_next_ns;
    /* the overflow rescan under way, in pieces (watch_rescan_turn) */
    bool rs_active;
    DIR *rs_dir;           /* the directory being read (kept open between turns), or NULL */
    char *rs_rel;          /* its path ("": the root) */
    ino_t rs_dino;         /* its inode: a directory put in its place is not it */
    uint32_t rs_gen;       /* its gen: its kids seen are stamped with it */
    char **rs_todo;        /* directories still to read, by path (LIFO: depth first) */
    size_t rs_ntodo, rs_todocap;
    uint64_t rs_ns;        /* time spent on it so far, for the next one's wait */
    uint64_t rs_slices;    /* slices taken, all rescans (stats) */
    uint64_t rs_slice_ns;  /* a slice's time (SG_WATCH_TURN_US; a test's 1 ns) */
    unsigned rs_check;     /* entries between two looks at the clock (SG_WATCH_RESCAN_CHECK) */
    /* editor saves and ignored paths (sg_watch_new_ext) */
    sg_ignore *ignore;     /* NULL: nothing ignored */
    uint64_t hold_ns;      /* 0: no hold */
    /* past the gate: the changes listed in bulk payloads (sg_watch_set_bulk_cb) */
    sg_watch_cb bulk_cb;
    void *bulk_ud;
    json_t *bulk;          /* the files of the payload being filled */
    void (*drained)(void *); /* sg_watch_set_drained_cb */
    void *drained_ud;
    size_t bulk_bytes;     /* its size, estimated from above */
};

/* ---- watch_tree.c ---- */

int64_t watch_ts_ns(const struct timespec *t);
node *watch_kid_find(const node *dir, const char *name);
/* The node at a relative path ("": the root), or NULL. */
node *watch_path_find(sg_watch *w, const char *path);
void watch_kid_add(node *dir, node *n);
void watch_kid_remove(node *n);
node *watch_wd_find(const sg_watch *w, int wd);
void watch_wd_add(sg_watch *w, node *n);
void watch_wd_remove(sg_watch *w, node *n);
/* Relative path of a node ("" for the root); the caller frees it. */
char *watch_node_path(const node *n);
char *watch_child_path(const node *dir, const char *name);
void watch_dirty_unlink(sg_watch *w, node *n);
void watch_dirty_mark(sg_watch *w, node *n, int writing /* -1: keep */);
void watch_node_free(sg_watch *w, node *n);
/* Queues directory d to be reported (dir_item): gone, or checked for
 * being empty and not yet reported. The root never is. */
void watch_dir_queue(sg_watch *w, const node *d, bool gone);
/* Queues every directory of the subtree at d to be checked (after d was
 * moved in, or moved). */
void watch_dir_queue_tree(sg_watch *w, const node *d);
/* Whether the watcher has work for the timer: dirty paths, graves,
 * directories to report, a rescan. */
bool watch_busy(const sg_watch *w);
/* Takes a node out of the tree (a reported file to the graveyard). */
void watch_node_detach(sg_watch *w, node *n, bool emit);
/* The file node for dir/name, made if missing (NULL past the limit). */
node *watch_file_node_get(sg_watch *w, node *dir, const char *name);
/* 1: exists (regular file or symlink), 0: does not, -1: error. */
int watch_read_state(sg_watch *w, const char *rel, fstate *out);
bool watch_same_content(const fstate *a, const fstate *b);
/* Stores cur as the last content seen, within the text budget. */
void watch_adopt_state(sg_watch *w, node *n, fstate *cur);

/* ---- watch_scan.c ---- */

void watch_scan_push(sg_watch *w, node *parent, const char *name);
/* A directory not walked: a `.git`, or one the ignore list names. */
bool watch_skip_dir(sg_watch *w, const node *parent, const char *name);
/* Whether parent/name is on the ignore list (ignore.h). */
bool watch_ignored(sg_watch *w, const node *parent, const char *name, bool is_dir);
/* Watches dir fd (opened safely) and returns its wd. */
int watch_add_watch_fd(sg_watch *w, int fd);
void watch_run_scans(sg_watch *w);
/* Compares the tree under d with the disk, in one piece (degraded flush). */
void watch_rescan_dir(sg_watch *w, node *d);
/* The overflow's rescan: started when asked for and due, then a slice of
 * it per call (unbounded: to the end). */
void watch_rescan_turn(sg_watch *w, bool unbounded);
/* Whether the turn gives way now (sg_watch_set_yield). */
bool watch_yield(sg_watch *w);
/* Drops a rescan under way (the watcher is freed). */
void watch_rescan_clear(sg_watch *w);
/* Reads inotify until it is empty (or the per-turn bound). 1 if drained. */
int watch_read_events(sg_watch *w, bool unbounded, sg_err *err);

/* Refills the read bucket; the ns until it holds a byte again (0: now). */
uint64_t watch_budget_wait(sg_watch *w);
/* Whether an overflow rescan may run now (else when, in *wait_ns). */
bool watch_rescan_due(sg_watch *w, uint64_t *wait_ns);

/* ---- watch_resolve.c ---- */

/* Compares every ready dirty path with the last content seen and emits one
 * payload per real change, then the limit events. force: do not wait for
 * open writers. Returns the number of payloads emitted. */
int watch_resolve(sg_watch *w, bool force);
/* The ns until the first dirty path or held grave is due, at most
 * SG_WATCH_CAP_MS (the timer's next wake). */
uint64_t watch_next_due(sg_watch *w, uint64_t now);

#endif

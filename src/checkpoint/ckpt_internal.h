/* ckpt_internal: the checkpoint store's private interface, shared by the
 * files of src/checkpoint/ that implement checkpoint.h and by nothing else
 * (checkpoint.h is the public one). The parts:
 *   ckpt_store.c    the store: open/close, lock, the stat cache, the usage
 *                   count, writing objects
 *   ckpt_scan.c     walking the workspace into trees (taking a checkpoint)
 *   ckpt_compare.c  comparing the workspace with a stored tree, and
 *                   applying it (diff and rollback)
 *   checkpoint.c    commits: take, label, list, diff, restore
 * The types keep the short names they had in the one checkpoint.c (they are
 * no symbols); the functions shared between the files are sg_ckpt_. */
#ifndef SG_CKPT_INTERNAL_H
#define SG_CKPT_INTERNAL_H

#include <git2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "base/buf.h"
#include "checkpoint/checkpoint.h"

#define SG_CKPT_ESC "%sg%"
#define SG_CKPT_ESC_LEN 4
#define SG_CKPT_META_NAME SG_CKPT_ESC /* the escape of the empty name: never a workspace name */

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

/* Oids known to be in the object store (written or checked this session). */
typedef struct oidset {
    git_oid *v;
    size_t cap, n;
} oidset;

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
    uint64_t stored_bytes; /* content stored so far (its usage file) */
    uint64_t store_max;    /* SG_CKPT_STORE_MAX, or lower (SANDGLASS_CKPT_STORE_MAX) */
    bool usage_dirty;
};

/* Holds the store's flock until the end of the enclosing block. */
#define SG_CKPT_STORE_LOCKED(st) __attribute__((cleanup(sg_ckpt_unlockp))) int *lock_guard_ = sg_ckpt_lock_store(st); (void)lock_guard_

void sg_ckpt_unlockp(int **fd);
int *sg_ckpt_lock_store(sg_ckpt_store *st);

/* Out of memory ends the process (sg_oom; ckpt_store.c says why). */
void sg_ckpt_sb_add(sg_buf *b, const void *d, size_t n);
void sg_ckpt_sb_str(sg_buf *b, const char *s);
/* Sets err to "<what>: <libgit2's last error>"; returns -1. */
int sg_ckpt_git_fail(sg_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t sg_ckpt_ts_ns(const struct timespec *t);
int64_t sg_ckpt_now_real_ns(void);
/* Workspace names git would refuse or treat specially are stored with
 * SG_CKPT_ESC in front; unescape gives the real name back. */
bool sg_ckpt_needs_escape(const char *n);
const char *sg_ckpt_unescape(const char *sname);

cent *sg_ckpt_cmap_get(const cmap *m, const char *path);
cent *sg_ckpt_cmap_put(cmap *m, const char *path);
bool sg_ckpt_oidset_has(const oidset *s, const git_oid *o);
void sg_ckpt_oidset_add(oidset *s, const git_oid *o);
int sg_ckpt_cache_save(sg_ckpt_store *st, sg_err *err);
void sg_ckpt_usage_save(sg_ckpt_store *st);
/* Hashes an object into *oid and, when write, stores it (once). */
int sg_ckpt_put_obj(sg_ckpt_store *st, bool write, git_oid *oid, const void *buf, size_t len,
                    git_object_t type, sg_err *err);

/* ---------- the scanned workspace (ckpt_scan.c) ---------- */

typedef struct node {
    char *sname;      /* stored (escaped) name; the real name is sname + off */
    uint8_t off;
    bool recorded;    /* false: socket or device, not in the tree */
    uint32_t mode, uid, gid;
    git_oid oid;      /* blob, or tree for a directory */
    struct node *kids; /* directories: sorted by strcmp(sname) */
    size_t nkids;
} node;

#define SG_CKPT_NAME(n) ((n)->sname + (n)->off)

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

void sg_ckpt_node_free(node *n);
size_t sg_ckpt_path_push(sg_buf *p, const char *name);
void sg_ckpt_path_pop(sg_buf *p, size_t old);
void sg_ckpt_scan_free(scan *s);
/* Walks the workspace into root; returns the workspace fd in *root_fd. */
int sg_ckpt_scan_workspace(sg_ckpt_store *st, scan *s, bool write, node *root, int *root_fd, sg_err *err);

/* ---------- compare the workspace with a checkpoint (ckpt_compare.c) ---------- */

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

void sg_ckpt_cmpx_free(cmpx *c);
/* Runs the comparison of the scanned root with the checkpoint tree
 * (NULL: none before, everything is new); applies it when c->apply. */
int sg_ckpt_compare(cmpx *c, int root_fd, const node *root, const git_oid *target);

#endif

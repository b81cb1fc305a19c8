/* wscopy: `sandglass cp`'s copy of a file or a tree between a sandbox's
 * workspace and the operator's file system, done host-side by the
 * supervisor. The workspace side is the learner's and hostile: every path
 * in it is opened beneath the workspace with no symlink followed
 * (sg_open_beneath), every entry below by name from its directory's fd with
 * O_NOFOLLOW, so a learner's symlink (or one swapped in during the copy)
 * never leads the copy out of it, in either direction. Symlinks are copied
 * as links; a FIFO, socket or device is never opened (skipped inside a
 * tree, refused when named); a regular file is opened O_NONBLOCK and
 * checked to be the entry stat'ed. What one copy reads, the entries it
 * makes and the depth it walks are bounded (SG_CP_*). Modes are copied
 * without set-id bits; everything made is owned by opts->uid/gid. */
#ifndef SG_SANDBOX_WSCOPY_H
#define SG_SANDBOX_WSCOPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

#define SG_CP_MAX_BYTES (1024ull * 1024 * 1024) /* file bytes one cp copies */
#define SG_CP_MAX_ENTRIES 100000                /* entries one cp makes */
#define SG_CP_MAX_DEPTH 256                     /* directory nesting one cp walks */

typedef struct sg_wscopy_opts {
    uid_t uid; /* the owner of every entry made */
    gid_t gid;
    uint64_t max_bytes;   /* 0: SG_CP_MAX_BYTES */
    uint64_t max_entries; /* 0: SG_CP_MAX_ENTRIES */
    /* when not NULL and 1 (read atomically, before every entry and every
     * 64 KiB), the copy stops: ECANCELED, what was copied stays */
    const int *cancel;
} sg_wscopy_opts;

typedef struct sg_wscopy_stats {
    uint64_t files, dirs, links, bytes;
    uint64_t skipped; /* FIFOs, sockets, devices inside a tree: not copied */
} sg_wscopy_stats;

/* A workspace path as a user gives it ("/workspace/a/b", "a/b", "./a",
 * "", "/workspace") as a path relative to the workspace, "." for the
 * workspace itself, into out (n bytes): empty and "." components dropped,
 * ".." taken lexically (no symlink is followed anyway). Refused: an
 * absolute path outside /workspace, a ".." that climbs above it, a
 * component longer than NAME_MAX, a path longer than PATH_MAX. */
int sg_wscopy_rel(const char *arg, char *out, size_t n, sg_err *err);

/* The directory part of rel (sg_wscopy_rel's) into dir ("." when none)
 * and its last component into *base (pointing into rel; "." for "."). */
void sg_wscopy_split(const char *rel, char *dir, size_t n, const char **base);

/* Copies the entry sname of the directory sdir (a file, a symlink or a
 * tree) to the entry dname of ddir. An existing directory at dname takes
 * the tree's entries (merged); an existing regular file is overwritten by
 * a file; anything else there (a symlink above all) is refused. Counts
 * into *st (zeroed first). On failure what was copied stays. */
int sg_wscopy(int sdir, const char *sname, int ddir, const char *dname, const sg_wscopy_opts *opts, sg_wscopy_stats *st,
              sg_err *err);

#endif

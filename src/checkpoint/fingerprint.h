/* fingerprint: a fingerprint of a workspace's metadata, taken by the
 * supervisor itself, so that the checkpoint before an exec needs no trip
 * to the checkpoint worker when nothing changed since the last one.
 *
 * It walks the tree (openat, fstatat, never following a symlink) and folds
 * every entry's relative path, type and mode, owner, size, inode, mtime and
 * ctime into 128 bits with a per-process random key. A change to any file
 * sets its ctime (only the kernel can, to its clock), so equal
 * fingerprints mean an unchanged tree, unless a change fell within the
 * timestamp granularity: an entry whose mtime or ctime is less than
 * SG_CKPT_RACY_NS before the walk marks the fingerprint racy, and a racy
 * one is never trusted (the checkpoint's own stat cache has the same rule). */
#ifndef SG_FINGERPRINT_H
#define SG_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Trees with more entries are not fingerprinted: the walk would cost as
 * much as the worker's own scan. */
#define SG_FINGERPRINT_MAX_ENTRIES 4096

typedef struct sg_fingerprint {
    uint64_t h[2];
    size_t entries;
    bool racy;       /* an entry changed too recently to trust */
    bool too_big;    /* more than SG_FINGERPRINT_MAX_ENTRIES entries */
} sg_fingerprint;

/* Fingerprints the tree under root. -1 with err when it cannot be read. */
int sg_fingerprint_take(const char *root, sg_fingerprint *out, sg_err *err);
/* Whether a fingerprint may stand for its tree (not racy, not too big). */
bool sg_fingerprint_usable(const sg_fingerprint *p);
bool sg_fingerprint_equal(const sg_fingerprint *a, const sg_fingerprint *b);

#endif

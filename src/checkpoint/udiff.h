/* udiff: unified diffs of two in-memory buffers, made by libgit2.
 * Only the checkpoint worker (and tests) link it: see wire/ckpt_proto.h for why
 * the supervisor does not. */
#ifndef SG_UDIFF_H
#define SG_UDIFF_H

#include "checkpoint/diff.h"

/* git_libgit2_init once per process and clear the global, XDG and system
 * config search paths so no user or system git config leaks in.
 * Idempotent; not thread-safe on first call (call it from one thread). */
int sg_udiff_global_init(sg_err *err);
/* Undoes sg_udiff_global_init (for leak checkers at exit). */
void sg_udiff_global_shutdown(void);

/* Unified diff (3 lines of context) from old to new. path is the file's
 * name relative to the workspace, used bare for both sides, so headers read
 * "a/<path>" and "b/<path>" as git's do. old == NULL means the file did not
 * exist (a "/dev/null" side); likewise new == NULL. Both sides should be
 * text (see sg_diff_is_binary). */
int sg_udiff_unified(const char *path, const char *old, size_t old_len,
                     const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);

/* sg_udiff_unified as an sg_diff_fn (userdata unused). */
int sg_udiff_fn(void *userdata, const char *path, const char *old, size_t old_len,
                const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);

#endif

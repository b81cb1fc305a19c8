/* diff: unified diffs of two in-memory buffers (libgit2), the binary rule,
 * content hashes (SHA-256, OpenSSL libcrypto) and line counts.
 *
 * Binary rule (sg_diff_is_binary): a buffer is binary when it holds a NUL
 * byte anywhere (git looks at the first 8 KiB; we look at all of it because
 * the ingest refuses \u0000 in JSON) or when it is not valid UTF-8 (an
 * event's diff must be a JSON string, and replacing bytes would make the diff
 * lie about the file). Text therefore always gives a diff that is valid
 * UTF-8 with no NUL. Files too large to diff are only sniffed: a NUL in their
 * first SG_DIFF_BINARY_SNIFF bytes marks them binary. */
#ifndef SG_DIFF_H
#define SG_DIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SG_DIFF_BINARY_SNIFF 8192   /* bytes searched for a NUL */
#define SG_DIFF_SHA256_LEN 32
#define SG_DIFF_SHA256_HEX 65       /* 64 hex chars + NUL */

/* git_libgit2_init once per process and clear the global, XDG and system
 * config search paths so no user or system git config leaks in.
 * Idempotent; not thread-safe on first call (call it from one thread). */
int sg_diff_global_init(sg_err *err);
/* Undoes sg_diff_global_init (for leak checkers at exit). */
void sg_diff_global_shutdown(void);

bool sg_diff_is_binary(const void *buf, size_t len);
/* Valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). */
bool sg_diff_valid_utf8(const void *buf, size_t len);

void sg_diff_sha256(const void *buf, size_t len, uint8_t out[SG_DIFF_SHA256_LEN]);
void sg_diff_hex(const uint8_t sha[SG_DIFF_SHA256_LEN], char out[SG_DIFF_SHA256_HEX]);

typedef struct sg_diff_result {
    char *text;      /* unified diff, NUL-terminated; "" when equal */
    size_t len;
    size_t added;    /* '+' lines */
    size_t removed;  /* '-' lines */
} sg_diff_result;

void sg_diff_result_clear(sg_diff_result *r);

/* Unified diff (3 lines of context) from old to new. path is the file's
 * name relative to the workspace, used bare for both sides, so headers read
 * "a/<path>" and "b/<path>" as git's do. old == NULL means the file did not
 * exist (a "/dev/null" side); likewise new == NULL. Both sides should be
 * text (see sg_diff_is_binary). */
int sg_diff_unified(const char *path, const char *old, size_t old_len,
                    const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);

/* Counts '+' and '-' lines of a unified diff text (excluding the ---/+++
 * headers). */
void sg_diff_count_lines(const char *diff, size_t len, size_t *added, size_t *removed);

#endif

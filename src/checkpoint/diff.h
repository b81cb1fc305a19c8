/* diff: the binary rule, content hashes (SHA-256, OpenSSL libcrypto) and line counts.
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
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define SG_DIFF_BINARY_SNIFF 8192   /* bytes searched for a NUL */
#define SG_DIFF_SHA256_LEN 32
#define SG_DIFF_SHA256_HEX 65       /* 64 hex chars + NUL */

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

/* Inline: the supervisor clears results it gets from the checkpoint
 * worker without linking this module's libcrypto. */
static inline void sg_diff_result_clear(sg_diff_result *r)
{
    free(r->text);
    memset(r, 0, sizeof(*r));
}

/* Makes a unified diff (the watcher gets one of these: udiff.h's in
 * process, or checkpoint/ckpt_client.h's through the checkpoint worker). */
typedef int (*sg_diff_fn)(void *userdata, const char *path, const char *old, size_t old_len,
                          const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);

/* Counts '+' and '-' lines of a unified diff text (excluding the ---/+++
 * headers). */
void sg_diff_count_lines(const char *diff, size_t len, size_t *added, size_t *removed);

#endif

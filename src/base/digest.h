/* digest: SHA-256 (FIPS 180-4), our own implementation.
 *
 * Why our own: the supervisor hashes file contents (watch.c, diff.c) and
 * must not load libcrypto, which costs ~1.5 MiB RSS per supervisor just to
 * map and relocate. SHA-256 is small and fully specified; tests/unit/
 * test_digest.c checks it against the FIPS vectors and OpenSSL's EVP digest
 * on random inputs and split points. HMAC (tokens) stays with OpenSSL in
 * token.c: it runs only in processes that load libcrypto anyway. */
#ifndef SG_DIGEST_H
#define SG_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define SG_SHA256_LEN 32
#define SG_SHA256_BLOCK 64

typedef struct sg_sha256 {
    uint32_t h[8];                      /* chaining state */
    uint8_t buf[SG_SHA256_BLOCK];       /* a partial block */
    size_t buf_len;                     /* bytes in buf, < SG_SHA256_BLOCK */
    uint64_t bits;                      /* message length so far, in bits */
} sg_sha256;

void sg_sha256_init(sg_sha256 *h);
void sg_sha256_update(sg_sha256 *h, const void *data, size_t len);
/* Writes the digest; h must be initialised again before reuse. */
void sg_sha256_final(sg_sha256 *h, uint8_t out[SG_SHA256_LEN]);
/* One buffer's digest. */
void sg_sha256_buf(const void *data, size_t len, uint8_t out[SG_SHA256_LEN]);

#endif

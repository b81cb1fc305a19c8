/* digest: SHA-256 and HMAC-SHA256 through OpenSSL's low-level SHA-256.
 *
 * Why not EVP: OpenSSL 3 sets up its provider machinery on the first EVP
 * digest, which maps in ~2.3 MB of libcrypto per process (measured: RSS
 * 2.8 -> 5.1 MB for one EVP_Digest); every captured sandbox's supervisor
 * hashes files and signs a token, and would carry that. The low-level
 * functions (deprecated in 3.0, still shipped) compute the same digest for
 * ~0.25 MB. HMAC is the RFC 2104 construction over them. */
#ifndef SG_DIGEST_H
#define SG_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/sha.h>

#define SG_SHA256_LEN 32
#define SG_SHA256_BLOCK 64

typedef struct sg_sha256 {
    SHA256_CTX c;
} sg_sha256;

void sg_sha256_init(sg_sha256 *h);
void sg_sha256_update(sg_sha256 *h, const void *data, size_t len);
void sg_sha256_final(sg_sha256 *h, uint8_t out[SG_SHA256_LEN]);
/* One buffer's digest. */
void sg_sha256_buf(const void *data, size_t len, uint8_t out[SG_SHA256_LEN]);
/* HMAC-SHA256 (RFC 2104) of data under key (any length). */
void sg_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t out[SG_SHA256_LEN]);

#endif

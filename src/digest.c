/* digest: SHA-256 and HMAC-SHA256 (see digest.h for why not EVP). */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "digest.h"

#include <string.h>

#include <openssl/crypto.h>

void sg_sha256_init(sg_sha256 *h)
{
    SHA256_Init(&h->c);
}

void sg_sha256_update(sg_sha256 *h, const void *data, size_t len)
{
    SHA256_Update(&h->c, data, len);
}

void sg_sha256_final(sg_sha256 *h, uint8_t out[SG_SHA256_LEN])
{
    SHA256_Final(out, &h->c);
    OPENSSL_cleanse(&h->c, sizeof h->c);
}

void sg_sha256_buf(const void *data, size_t len, uint8_t out[SG_SHA256_LEN])
{
    sg_sha256 h;
    sg_sha256_init(&h);
    sg_sha256_update(&h, data, len);
    sg_sha256_final(&h, out);
}

void sg_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t out[SG_SHA256_LEN])
{
    uint8_t k[SG_SHA256_BLOCK] = {0}, pad[SG_SHA256_BLOCK], inner[SG_SHA256_LEN];
    if (key_len > SG_SHA256_BLOCK)
        sg_sha256_buf(key, key_len, k); /* a long key is hashed first */
    else if (key_len)
        memcpy(k, key, key_len);
    sg_sha256 h;
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = k[i] ^ 0x36;
    sg_sha256_init(&h);
    sg_sha256_update(&h, pad, sizeof pad);
    sg_sha256_update(&h, data, len);
    sg_sha256_final(&h, inner);
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = k[i] ^ 0x5c;
    sg_sha256_init(&h);
    sg_sha256_update(&h, pad, sizeof pad);
    sg_sha256_update(&h, inner, sizeof inner);
    sg_sha256_final(&h, out);
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(pad, sizeof pad);
    OPENSSL_cleanse(inner, sizeof inner);
}

/* digest: FIPS 180-4 and RFC 4231 vectors, and agreement with OpenSSL's
 * EVP digest and HMAC on random inputs of many lengths and key lengths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "digest.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void test_sha256_vectors(void **state)
{
    uint8_t d[SG_SHA256_LEN];
    char h[2 * SG_SHA256_LEN + 1];
    sg_sha256_buf("abc", 3, d);
    hex(d, sizeof d, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sg_sha256_buf("", 0, d);
    hex(d, sizeof d, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* a million 'a', fed in uneven pieces */
    sg_sha256 s;
    sg_sha256_init(&s);
    static char a[1000];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    for (size_t piece = 1; left; piece = piece % 997 + 3) {
        size_t n = piece < left ? piece : left;
        sg_sha256_update(&s, a, n);
        left -= n;
    }
    sg_sha256_final(&s, d);
    hex(d, sizeof d, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_hmac_vectors(void **state)
{
    uint8_t d[SG_SHA256_LEN];
    char h[2 * SG_SHA256_LEN + 1];
    /* RFC 4231 case 1: a 20-byte key of 0x0b */
    uint8_t k1[20];
    memset(k1, 0x0b, sizeof k1);
    sg_hmac_sha256(k1, sizeof k1, "Hi There", 8, d);
    hex(d, sizeof d, h);
    assert_string_equal(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* case 2: a key shorter than the block */
    sg_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
    hex(d, sizeof d, h);
    assert_string_equal(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* case 6: a 131-byte key, longer than the block, is hashed first */
    uint8_t k6[131];
    memset(k6, 0xaa, sizeof k6);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    sg_hmac_sha256(k6, sizeof k6, m6, strlen(m6), d);
    hex(d, sizeof d, h);
    assert_string_equal(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_agrees_with_evp(void **state)
{
    srand(7);
    uint8_t buf[4100], key[200];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)rand();
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (uint8_t)rand();
    for (size_t len = 0; len < sizeof buf; len += len < 130 ? 1 : 97) {
        uint8_t ours[SG_SHA256_LEN], theirs[SG_SHA256_LEN];
        unsigned int olen = 0;
        sg_sha256_buf(buf, len, ours);
        assert_int_equal(EVP_Digest(buf, len, theirs, &olen, EVP_sha256(), NULL), 1);
        assert_memory_equal(ours, theirs, SG_SHA256_LEN);
        size_t klen = len % sizeof key;
        sg_hmac_sha256(key, klen, buf, len, ours);
        assert_non_null(HMAC(EVP_sha256(), key, (int)klen, buf, len, theirs, &olen));
        assert_memory_equal(ours, theirs, SG_SHA256_LEN);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_hmac_vectors),
        cmocka_unit_test(test_agrees_with_evp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

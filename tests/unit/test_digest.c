/* digest: our SHA-256 against the FIPS 180-4 / NIST example vectors and
 * against OpenSSL's EVP SHA-256 on random inputs of many lengths, fed in one
 * piece and in random pieces (splits around the 55/56/63/64/65-byte padding
 * and block edges included). Set SG_DIGEST_LONG=1 to also hash NIST's 1 GiB
 * message (a bit length above 2^32; seconds, not run by default). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>

#include "base/cleanup.h"
#include "base/digest.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void assert_digest(const uint8_t d[SG_SHA256_LEN], const char *want)
{
    char h[2 * SG_SHA256_LEN + 1];
    hex(d, SG_SHA256_LEN, h);
    assert_string_equal(h, want);
}

/* Deterministic, so a failure reproduces. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void fill_random(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(rng() >> 24);
}

static void evp_sha256(const void *data, size_t len, uint8_t out[SG_SHA256_LEN])
{
    unsigned int olen = 0;
    assert_int_equal(EVP_Digest(data, len, out, &olen, EVP_sha256(), NULL), 1);
    assert_int_equal(olen, SG_SHA256_LEN);
}

/* Our digest of buf fed as pieces ending at the given cut points (sorted,
 * each <= len), then the rest. */
static void ours_split(const uint8_t *buf, size_t len, const size_t *cuts, size_t ncuts,
                       uint8_t out[SG_SHA256_LEN])
{
    sg_sha256 s;
    sg_sha256_init(&s);
    size_t at = 0;
    for (size_t i = 0; i < ncuts; i++) {
        sg_sha256_update(&s, buf + at, cuts[i] - at);
        at = cuts[i];
    }
    sg_sha256_update(&s, buf + at, len - at);
    sg_sha256_final(&s, out);
}

static void test_fips_vectors(void **state)
{
    uint8_t d[SG_SHA256_LEN];
    sg_sha256_buf("", 0, d);
    assert_digest(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sg_sha256_buf(NULL, 0, d); /* no data at all is the empty message */
    assert_digest(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sg_sha256_buf("abc", 3, d);
    assert_digest(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* 448 bits: the padding needs a second block */
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_int_equal(strlen(m448), 56);
    sg_sha256_buf(m448, 56, d);
    assert_digest(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                       "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    assert_int_equal(strlen(m896), 112);
    sg_sha256_buf(m896, 112, d);
    assert_digest(d, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_million_a(void **state)
{
    static const char want[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    uint8_t d[SG_SHA256_LEN];
    char *a = malloc(1000000);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    sg_sha256_buf(a, 1000000, d);
    assert_digest(d, want);
    /* in uneven pieces, so most updates start and end mid-block */
    sg_sha256 s;
    sg_sha256_init(&s);
    size_t left = 1000000;
    for (size_t piece = 1; left; piece = piece % 997 + 3) {
        size_t n = piece < left ? piece : left;
        sg_sha256_update(&s, a, n);
        left -= n;
    }
    sg_sha256_final(&s, d);
    assert_digest(d, want);
    free(a);
}

/* Every length 0..300, in one piece, byte by byte, and in random pieces. */
static void test_random_vs_evp(void **state)
{
    uint8_t buf[301] = {0}, ours[SG_SHA256_LEN], theirs[SG_SHA256_LEN];
    for (size_t len = 0; len <= 300; len++) {
        fill_random(buf, len);
        evp_sha256(buf, len, theirs);
        sg_sha256_buf(buf, len, ours);
        assert_memory_equal(ours, theirs, SG_SHA256_LEN);

        sg_sha256 s;
        sg_sha256_init(&s);
        for (size_t i = 0; i < len; i++)
            sg_sha256_update(&s, buf + i, 1);
        sg_sha256_final(&s, ours);
        assert_memory_equal(ours, theirs, SG_SHA256_LEN);

        for (int round = 0; round < 8; round++) {
            size_t cuts[6], n = 0;
            for (size_t k = 0; k < 6; k++) {
                size_t c = len ? (size_t)(rng() % (len + 1)) : 0;
                /* insertion sort: cuts must ascend */
                size_t j = n++;
                while (j > 0 && cuts[j - 1] > c) {
                    cuts[j] = cuts[j - 1];
                    j--;
                }
                cuts[j] = c;
            }
            ours_split(buf, len, cuts, n, ours);
            assert_memory_equal(ours, theirs, SG_SHA256_LEN);
        }
    }
}

/* A first piece of 55/56 bytes leaves room or no room for the length field;
 * 63/64/65 straddle a block; likewise one block later. */
static void test_padding_splits(void **state)
{
    static const size_t at[] = {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129};
    uint8_t buf[300], ours[SG_SHA256_LEN], theirs[SG_SHA256_LEN];
    fill_random(buf, sizeof buf);
    for (size_t len = 0; len <= sizeof buf; len++) {
        evp_sha256(buf, len, theirs);
        for (size_t i = 0; i < SG_ARRAY_LEN(at); i++) {
            if (at[i] > len)
                continue;
            ours_split(buf, len, &at[i], 1, ours);
            assert_memory_equal(ours, theirs, SG_SHA256_LEN);
            for (size_t j = i; j < SG_ARRAY_LEN(at); j++) {
                if (at[i] + at[j] > len)
                    continue;
                size_t two[2] = {at[i], at[i] + at[j]};
                ours_split(buf, len, two, 2, ours);
                assert_memory_equal(ours, theirs, SG_SHA256_LEN);
            }
        }
    }
}

static void test_large_vs_evp(void **state)
{
    static const size_t lens[] = {4096, 65536 + 7, 1000003, (1u << 22) + 61};
    size_t max = lens[SG_ARRAY_LEN(lens) - 1];
    uint8_t *buf = malloc(max), ours[SG_SHA256_LEN], theirs[SG_SHA256_LEN];
    assert_non_null(buf);
    fill_random(buf, max);
    for (size_t i = 0; i < SG_ARRAY_LEN(lens); i++) {
        size_t len = lens[i];
        evp_sha256(buf, len, theirs);
        sg_sha256_buf(buf, len, ours);
        assert_memory_equal(ours, theirs, SG_SHA256_LEN);
        size_t cuts[4] = {(size_t)(rng() % 64), 0, 0, 0};
        cuts[1] = cuts[0] + 1 + (size_t)(rng() % (len / 2 - 64));
        cuts[2] = cuts[1] + (size_t)(rng() % 200);
        cuts[3] = len - (size_t)(rng() % 65);
        ours_split(buf, len, cuts, 4, ours);
        assert_memory_equal(ours, theirs, SG_SHA256_LEN);
    }
    free(buf);
}

/* A context can be initialised again after final and gives the same result. */
static void test_reuse(void **state)
{
    uint8_t d1[SG_SHA256_LEN], d2[SG_SHA256_LEN];
    sg_sha256 s;
    sg_sha256_init(&s);
    sg_sha256_update(&s, "something else first", 20);
    sg_sha256_final(&s, d1);
    sg_sha256_init(&s);
    sg_sha256_update(&s, "ab", 2);
    sg_sha256_update(&s, NULL, 0);
    sg_sha256_update(&s, "c", 1);
    sg_sha256_final(&s, d2);
    assert_digest(d2, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sg_sha256_buf("something else first", 20, d2);
    assert_memory_equal(d1, d2, SG_SHA256_LEN);
}

/* NIST's long message: "abcdefghbcdefghi..." (64 bytes) 16,777,216 times,
 * 2^33 bits: the length field's high word is used. */
static void test_long_message(void **state)
{
    const char *unit = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno";
    uint8_t *chunk = malloc(1 << 20), d[SG_SHA256_LEN];
    assert_non_null(chunk);
    for (size_t i = 0; i < (1 << 20); i += 64)
        memcpy(chunk + i, unit, 64);
    sg_sha256 s;
    sg_sha256_init(&s);
    for (int i = 0; i < 1024; i++)
        sg_sha256_update(&s, chunk, 1 << 20);
    sg_sha256_final(&s, d);
    assert_digest(d, "50e72a0e26442fe2552dc3938ac58658228c0cbfb1d2ca872ae435266fcd055e");
    free(chunk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_vectors),
        cmocka_unit_test(test_million_a),
        cmocka_unit_test(test_random_vs_evp),
        cmocka_unit_test(test_padding_splits),
        cmocka_unit_test(test_large_vs_evp),
        cmocka_unit_test(test_reuse),
    };
    /* Only on request: a skipped test counts as failed in meson's TAP. */
    const struct CMUnitTest long_tests[] = {
        cmocka_unit_test(test_long_message),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (getenv("SG_DIGEST_LONG"))
        failed += cmocka_run_group_tests(long_tests, NULL, NULL);
    return failed;
}

/* digest: SHA-256 per FIPS 180-4 (see digest.h for why it is our own). */
#include "base/digest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

/* n is a constant in 1..31 at every use: neither shift is by 0 or 32. */
#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define BSIG0(x) (ROR(x, 2) ^ ROR(x, 13) ^ ROR(x, 22))
#define BSIG1(x) (ROR(x, 6) ^ ROR(x, 11) ^ ROR(x, 25))
#define SSIG0(x) (ROR(x, 7) ^ ROR(x, 18) ^ ((x) >> 3))
#define SSIG1(x) (ROR(x, 17) ^ ROR(x, 19) ^ ((x) >> 10))
#define CH(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define MAJ(x, y, z) (((x) & (y)) | ((z) & ((x) | (y))))

/* Byte by byte: input has no alignment, and the result must not depend on
 * the host's byte order. */
static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* One round with schedule word wk and constant kr; the caller rotates the
 * roles of a..h instead of moving values. */
#define ROUND(a, b, c, d, e, f, g, h, kr, wk)                      \
    do {                                                           \
        uint32_t t1_ = (h) + BSIG1(e) + CH(e, f, g) + (kr) + (wk); \
        (d) += t1_;                                                \
        (h) = t1_ + BSIG0(a) + MAJ(a, b, c);                       \
    } while (0)

/* The schedule lives in a 16-word ring: w[t] replaces w[t - 16]. With rounds
 * taken 16 at a time every ring index is a constant, so w stays in
 * registers or at fixed offsets. */
#define SCHED(j)                                                                  \
    (w[j] += SSIG1(w[((j) + 14) & 15]) + w[((j) + 9) & 15] + SSIG0(w[((j) + 1) & 15]))

#define ROUNDS16(W)                                          \
    do {                                                     \
        ROUND(a, b, c, d, e, f, g, h, k[0], W(0));           \
        ROUND(h, a, b, c, d, e, f, g, k[1], W(1));           \
        ROUND(g, h, a, b, c, d, e, f, k[2], W(2));           \
        ROUND(f, g, h, a, b, c, d, e, k[3], W(3));           \
        ROUND(e, f, g, h, a, b, c, d, k[4], W(4));           \
        ROUND(d, e, f, g, h, a, b, c, k[5], W(5));           \
        ROUND(c, d, e, f, g, h, a, b, k[6], W(6));           \
        ROUND(b, c, d, e, f, g, h, a, k[7], W(7));           \
        ROUND(a, b, c, d, e, f, g, h, k[8], W(8));           \
        ROUND(h, a, b, c, d, e, f, g, k[9], W(9));           \
        ROUND(g, h, a, b, c, d, e, f, k[10], W(10));         \
        ROUND(f, g, h, a, b, c, d, e, k[11], W(11));         \
        ROUND(e, f, g, h, a, b, c, d, k[12], W(12));         \
        ROUND(d, e, f, g, h, a, b, c, k[13], W(13));         \
        ROUND(c, d, e, f, g, h, a, b, k[14], W(14));         \
        ROUND(b, c, d, e, f, g, h, a, k[15], W(15));         \
    } while (0)

#define WLOAD(j) w[j]

/* Compresses n whole blocks at p into st. */
static void compress(uint32_t st[8], const uint8_t *p, size_t n)
{
    for (; n; n--, p += SG_SHA256_BLOCK) {
        uint32_t w[16];
        for (int i = 0; i < 16; i++)
            w[i] = load_be32(p + 4 * i);
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
        uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
        const uint32_t *k = K;
        ROUNDS16(WLOAD);
        for (k = K + 16; k < K + 64; k += 16)
            ROUNDS16(SCHED);
        st[0] += a;
        st[1] += b;
        st[2] += c;
        st[3] += d;
        st[4] += e;
        st[5] += f;
        st[6] += g;
        st[7] += h;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

/* The SHA extensions (x86 SHA-NI), ~5x the portable code: the watcher
 * hashes files up to SG_WATCH_HASH_MAX on the supervisor's loop, and the
 * time one file takes is time the kill path may wait. Four rounds per
 * group; the schedule in a ring of four registers (group g replaces g-4). */
__attribute__((target("sha,sse4.1,ssse3")))
static void compress_shani(uint32_t st[8], const uint8_t *p, size_t n)
{
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[0]), 0xB1); /* CDAB */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[4]), 0x1B);  /* EFGH */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);                                      /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);                                           /* CDGH */
    for (; n; n--, p += SG_SHA256_BLOCK) {
        __m128i abef = s0, cdgh = s1, w[4];
        for (int g = 0; g < 16; g++) {
            if (g < 4) {
                w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), mask);
            } else {
                __m128i x = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
                w[g & 3] = _mm_sha256msg2_epu32(x, w[(g + 3) & 3]);
            }
            __m128i m = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)&K[4 * g]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);  /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);   /* DCHG */
    _mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(tmp, s1, 0xF0)); /* DCBA */
    _mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(s1, tmp, 8));    /* HGFE */
}

/* CPUID: SHA (leaf 7 EBX bit 29), SSE4.1 and SSSE3 (leaf 1 ECX bits 19, 9).
 * SANDGLASS_NO_SHANI set: the portable code (tests compare both). */
static bool have_shani(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        unsigned a, b, c, d;
        h = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29)) &&
            __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 19)) && (c & (1u << 9)) &&
            !getenv("SANDGLASS_NO_SHANI");
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}
#else
static bool have_shani(void)
{
    return false;
}
#define compress_shani compress
#endif

static void compress_any(uint32_t st[8], const uint8_t *p, size_t n)
{
    if (have_shani())
        compress_shani(st, p, n);
    else
        compress(st, p, n);
}

void sg_sha256_init(sg_sha256 *h)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(h->h, iv, sizeof iv);
    h->buf_len = 0;
    h->bits = 0;
}

void sg_sha256_update(sg_sha256 *h, const void *data, size_t len)
{
    if (!len)
        return; /* data may be NULL then, and memcpy(NULL) is UB */
    const uint8_t *p = data;
    /* Wraps past 2^64 bits as FIPS 180-4's length field does (mod 2^64). */
    h->bits += (uint64_t)len << 3;
    if (h->buf_len) {
        size_t take = SG_SHA256_BLOCK - h->buf_len;
        if (take > len)
            take = len;
        memcpy(h->buf + h->buf_len, p, take);
        h->buf_len += take;
        p += take;
        len -= take;
        if (h->buf_len < SG_SHA256_BLOCK)
            return;
        compress_any(h->h, h->buf, 1);
        h->buf_len = 0;
    }
    /* Whole blocks straight from the caller's buffer: no copy. */
    size_t whole = len / SG_SHA256_BLOCK;
    if (whole) {
        compress_any(h->h, p, whole);
        p += whole * SG_SHA256_BLOCK;
        len -= whole * SG_SHA256_BLOCK;
    }
    if (len) {
        memcpy(h->buf, p, len);
        h->buf_len = len;
    }
}

void sg_sha256_final(sg_sha256 *h, uint8_t out[SG_SHA256_LEN])
{
    /* Padding: 0x80, zeros to 56 mod 64, then the bit length big-endian. */
    size_t n = h->buf_len;
    h->buf[n++] = 0x80;
    if (n > SG_SHA256_BLOCK - 8) {
        memset(h->buf + n, 0, SG_SHA256_BLOCK - n);
        compress_any(h->h, h->buf, 1);
        n = 0;
    }
    memset(h->buf + n, 0, SG_SHA256_BLOCK - 8 - n);
    store_be32(h->buf + 56, (uint32_t)(h->bits >> 32));
    store_be32(h->buf + 60, (uint32_t)h->bits);
    compress_any(h->h, h->buf, 1);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, h->h[i]);
}

void sg_sha256_buf(const void *data, size_t len, uint8_t out[SG_SHA256_LEN])
{
    sg_sha256 h;
    sg_sha256_init(&h);
    sg_sha256_update(&h, data, len);
    sg_sha256_final(&h, out);
}

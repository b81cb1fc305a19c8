/* diff: binary rule, SHA-256, line counts (unified diffs are udiff.c). */
#include "checkpoint/diff.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"

_Static_assert(SG_DIFF_SHA256_LEN == SG_SHA256_LEN, "one SHA-256 length");

bool sg_diff_valid_utf8(const void *buf, size_t len)
{
    const unsigned char *s = buf;
    size_t i = 0;
    while (i < len) {
        /* ASCII, 8 bytes at a time (most text): a byte at a time was as
         * slow as hashing the same bytes */
        uint64_t w;
        while (len - i >= sizeof w) {
            memcpy(&w, s + i, sizeof w);
            if (w & 0x8080808080808080ull)
                break;
            i += sizeof w;
        }
        if (i == len)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (len - i <= n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

bool sg_diff_is_binary(const void *buf, size_t len)
{
    if (memchr(buf, 0, len))
        return true;
    return !sg_diff_valid_utf8(buf, len);
}

void sg_diff_sha256(const void *buf, size_t len, uint8_t out[SG_DIFF_SHA256_LEN])
{
    sg_sha256_buf(buf, len, out);
}

void sg_diff_hex(const uint8_t sha[SG_DIFF_SHA256_LEN], char out[SG_DIFF_SHA256_HEX])
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < SG_DIFF_SHA256_LEN; i++) {
        out[2 * i] = hx[sha[i] >> 4];
        out[2 * i + 1] = hx[sha[i] & 15];
    }
    out[2 * SG_DIFF_SHA256_LEN] = '\0';
}

void sg_diff_count_lines(const char *diff, size_t len, size_t *added, size_t *removed)
{
    size_t a = 0, r = 0;
    bool in_hunk = false;
    const char *p = diff, *end = diff + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (ll >= 2 && p[0] == '@' && p[1] == '@')
            in_hunk = true;
        else if (ll >= 4 && !memcmp(p, "diff", 4))
            in_hunk = false;
        else if (in_hunk && ll >= 1 && p[0] == '+')
            a++;
        else if (in_hunk && ll >= 1 && p[0] == '-')
            r++;
        p = nl ? nl + 1 : end;
    }
    *added = a;
    *removed = r;
}

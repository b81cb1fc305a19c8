#include "base/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *sg_json_parse(const char *buf, size_t len, sg_err *err)
{
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        sg_err_set(err, 0, "invalid JSON at byte %d: %s", je.position, je.text);
    return j;
}

char *sg_json_dump(const json_t *j)
{
    /* 10 significant digits: measured times without binary noise
     * (0.010831474, not 0.010831474000000001); no figure of ours needs more. */
    return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(SG_JSON_REAL_DIGITS));
}

double sg_json_real_canonical(double v)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.*g", SG_JSON_REAL_DIGITS, v);
    return strtod(buf, NULL);
}

/* Length of a valid UTF-8 sequence starting at p (1..4), or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *p, size_t left)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return c == 0 ? 0 : 1; /* NUL is not allowed in our JSON strings */
    size_t n;
    unsigned int cp;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

char *sg_utf8_sanitize(const char *buf, size_t len, size_t *out_len)
{
    /* Worst case every byte becomes 3 bytes of U+FFFD. */
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(len * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)buf;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq_len(p + i, len - i);
        if (n == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += 1;
        } else {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        }
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}

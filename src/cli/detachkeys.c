/* detachkeys: the detach key sequence. See detachkeys.h. */
#include "cli/detachkeys.h"

#include <errno.h>
#include <string.h>

/* One key of a spec: "ctrl-X" or a single printable character. */
static int parse_key(const char *s, size_t len, unsigned char *out)
{
    if (len == 1 && s[0] > ' ' && s[0] < 0x7f && s[0] != ',') {
        *out = (unsigned char)s[0];
        return 0;
    }
    if (len == 6 && strncmp(s, "ctrl-", 5) == 0) {
        char c = s[5];
        if (c >= 'a' && c <= 'z') {
            *out = (unsigned char)(c - 'a' + 1);
            return 0;
        }
        const char *sym = strchr("@[\\]^_", c);
        if (c && sym) {
            *out = (unsigned char)(c == '@' ? 0 : c - '@');
            return 0;
        }
    }
    return -1;
}

int sg_detach_keys_parse(const char *spec, sg_detach_keys *k, sg_err *err)
{
    memset(k, 0, sizeof *k);
    if (!*spec)
        return 0;
    const char *s = spec;
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (k->n == SG_DETACH_KEYS_MAX)
            return sg_err_set(err, EINVAL, "--detach-keys: at most %d keys", SG_DETACH_KEYS_MAX);
        if (parse_key(s, len, &k->key[k->n]) < 0)
            return sg_err_set(err, EINVAL, "--detach-keys: '%.*s' is not a key (give e.g. ctrl-p,ctrl-q: "
                              "ctrl-a..z, ctrl-@ [ \\ ] ^ _ or one character; '' turns detaching off)",
                              (int)(len > 32 ? 32 : len), s);
        k->n++;
        if (!comma)
            return 0;
        s = comma + 1;
    }
}

bool sg_detach_filter(sg_detach_keys *k, const char *in, size_t n, char *out, size_t *out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (k->n && c == k->key[k->matched]) {
            if (++k->matched == k->n) {
                k->matched = 0;
                *out_len = o;
                return true;
            }
            continue;
        }
        /* Not the sequence after all: what was held goes first, and this
         * key may start it anew. */
        memcpy(out + o, k->key, k->matched);
        o += k->matched;
        k->matched = 0;
        if (k->n && c == k->key[0])
            k->matched = 1;
        else
            out[o++] = (char)c;
    }
    *out_len = o;
    return false;
}

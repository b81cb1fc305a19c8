/* diff: unified diffs (libgit2), binary rule, SHA-256, line counts. */
#include "diff.h"

#include <errno.h>
#include <git2.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

static bool g_inited;

int sg_diff_global_init(sg_err *err)
{
    if (g_inited)
        return 0;
    if (git_libgit2_init() < 0)
        return sg_err_set(err, 0, "libgit2 init failed");
    /* Only in-memory buffers are diffed, but a diff config lookup must never
     * see the operator's ~/.gitconfig or /etc/gitconfig. */
    static const int levels[] = {GIT_CONFIG_LEVEL_GLOBAL, GIT_CONFIG_LEVEL_XDG,
                                 GIT_CONFIG_LEVEL_SYSTEM};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        if (git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], "") < 0) {
            const git_error *e = git_error_last();
            return sg_err_set(err, 0, "libgit2 search path: %s", e ? e->message : "?");
        }
    }
    g_inited = true;
    return 0;
}

void sg_diff_global_shutdown(void)
{
    if (g_inited)
        git_libgit2_shutdown();
    g_inited = false;
}

bool sg_diff_valid_utf8(const void *buf, size_t len)
{
    const unsigned char *s = buf;
    size_t i = 0;
    while (i < len) {
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
    unsigned int olen = 0;
    EVP_Digest(buf, len, out, &olen, EVP_sha256(), NULL);
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

void sg_diff_result_clear(sg_diff_result *r)
{
    free(r->text);
    memset(r, 0, sizeof(*r));
}

static void patch_freep(git_patch **p)
{
    if (*p)
        git_patch_free(*p);
}

int sg_diff_unified(const char *path, const char *old, size_t old_len,
                    const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    memset(out, 0, sizeof(*out));
    if (sg_diff_global_init(err) < 0)
        return -1;
    git_diff_options opts;
    git_diff_options_init(&opts, GIT_DIFF_OPTIONS_VERSION);
    opts.context_lines = 3;
    /* Text-ness is decided by our rule, not libgit2's heuristics. */
    opts.flags |= GIT_DIFF_FORCE_TEXT;
    __attribute__((cleanup(patch_freep))) git_patch *patch = NULL;
    /* Bare names: libgit2 adds the a/ and b/ prefixes itself. */
    if (git_patch_from_buffers(&patch, old, old_len, old ? path : NULL, new_, new_len,
                               new_ ? path : NULL, &opts) < 0) {
        const git_error *e = git_error_last();
        return sg_err_set(err, ENOMEM, "diff %s: %s", path, e ? e->message : "?");
    }
    git_buf buf = GIT_BUF_INIT;
    if (git_patch_to_buf(&buf, patch) < 0) {
        const git_error *e = git_error_last();
        return sg_err_set(err, ENOMEM, "diff %s: %s", path, e ? e->message : "?");
    }
    out->text = malloc(buf.size + 1);
    if (!out->text) {
        git_buf_dispose(&buf);
        return sg_err_set(err, ENOMEM, "diff %s: out of memory", path);
    }
    if (buf.size)
        memcpy(out->text, buf.ptr, buf.size);
    out->text[buf.size] = '\0';
    out->len = buf.size;
    git_buf_dispose(&buf);
    size_t ctx = 0, add = 0, del = 0;
    if (git_patch_line_stats(&ctx, &add, &del, patch) == 0) {
        out->added = add;
        out->removed = del;
    }
    return 0;
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

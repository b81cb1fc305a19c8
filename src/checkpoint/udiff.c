/* udiff: unified diffs of two buffers with libgit2 (see udiff.h). */
#include "checkpoint/udiff.h"

#include <errno.h>
#include <git2.h>
#include <stdlib.h>
#include <string.h>

static bool g_inited;

int sg_udiff_global_init(sg_err *err)
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

void sg_udiff_global_shutdown(void)
{
    if (g_inited)
        git_libgit2_shutdown();
    g_inited = false;
}

static void patch_freep(git_patch **p)
{
    if (*p)
        git_patch_free(*p);
}

int sg_udiff_unified(const char *path, const char *old, size_t old_len,
                    const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    memset(out, 0, sizeof(*out));
    if (sg_udiff_global_init(err) < 0)
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

int sg_udiff_fn(void *userdata, const char *path, const char *old, size_t old_len,
               const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    (void)userdata;
    return sg_udiff_unified(path, old, old_len, new_, new_len, out, err);
}

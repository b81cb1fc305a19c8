/* ignore: the operator's ignore list. See ignore.h. */
#include "capture/ignore.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"

typedef struct pattern {
    char *glob;       /* without the leading and trailing '/' */
    bool dir_only;    /* a trailing '/' */
    bool anchored;    /* a leading '/' */
    unsigned parts;   /* components ('/' inside + 1) */
} pattern;

struct sg_ignore {
    pattern *v;
    size_t n, cap;
    bool needs_path;
};

void sg_ignore_free(sg_ignore *ig)
{
    if (!ig)
        return;
    for (size_t i = 0; i < ig->n; i++)
        free(ig->v[i].glob);
    free(ig->v);
    free(ig);
}

const char *sg_ignore_effective(const char *operator_list)
{
    /* issue 26: a configuration file's default comes here, before the
     * built-in one; the operator's own list always wins. */
    return operator_list ? operator_list : SG_IGNORE_DEFAULT;
}

/* A component "." or ".." (or an empty one, "a//b") in a glob: never
 * a path the watcher makes, so surely a mistake. */
static bool bad_components(const char *g)
{
    for (const char *c = g;;) {
        size_t l = strcspn(c, "/");
        if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
            return true;
        if (!c[l])
            return false;
        c += l + 1;
    }
}

/* One pattern of raw bytes [s, s+len) (its `\,` still escaped). */
static int add_pattern(sg_ignore *ig, const char *s, size_t len, sg_err *err)
{
    if (ig->n >= SG_IGNORE_MAX_PATTERNS)
        return sg_err_set(err, EINVAL, "more than %d patterns", SG_IGNORE_MAX_PATTERNS);
    if (len == 0)
        return sg_err_set(err, EINVAL, "pattern %zu is empty", ig->n + 1);
    pattern p = {0};
    char *g = sg_xrealloc(NULL, len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\' && i + 1 < len && s[i + 1] == ',')
            i++; /* `\,`: a comma */
        g[o++] = s[i];
    }
    g[o] = '\0';
    char *start = g;
    if (*start == '/') {
        p.anchored = true;
        start++;
    }
    size_t gl = strlen(start);
    if (gl && start[gl - 1] == '/' && !(gl >= 2 && start[gl - 2] == '\\')) {
        p.dir_only = true;
        start[--gl] = '\0';
    }
    if (!gl || bad_components(start)) {
        free(g);
        return sg_err_set(err, EINVAL, "pattern %zu has an empty, '.' or '..' component", ig->n + 1);
    }
    p.glob = sg_xstrdup(start);
    free(g);
    p.parts = 1;
    for (const char *c = p.glob; *c; c++)
        p.parts += *c == '/';
    if (p.parts > 1 || p.anchored)
        ig->needs_path = true;
    sg_xgrow(&ig->v, &ig->cap, ig->n + 1, sizeof *ig->v);
    ig->v[ig->n++] = p;
    return 0;
}

sg_ignore *sg_ignore_parse(const char *list, sg_err *err)
{
    size_t len = strlen(list);
    if (len > SG_IGNORE_MAX_LEN) {
        sg_err_set(err, EINVAL, "the ignore list is over %d bytes", SG_IGNORE_MAX_LEN);
        return NULL;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)list[i] < 0x20 || list[i] == 0x7f) {
            sg_err_set(err, EINVAL, "the ignore list holds a control character (byte %zu)", i + 1);
            return NULL;
        }
    sg_ignore *ig = calloc(1, sizeof *ig);
    if (!ig) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    if (!len)
        return ig; /* ignores nothing */
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && list[i] == '\\' && i + 1 < len) {
            i++; /* an escape: the next byte is the pattern's */
            continue;
        }
        if (i < len && list[i] != ',')
            continue;
        if (add_pattern(ig, list + start, i - start, err) < 0) {
            sg_ignore_free(ig);
            return NULL;
        }
        start = i + 1;
    }
    return ig;
}

/* Where the last `parts` components of path start; NULL if it has fewer. */
static const char *last_parts(const char *path, size_t len, unsigned parts)
{
    size_t i = len;
    while (i > 0) {
        if (path[i - 1] == '/' && --parts == 0)
            return path + i;
        i--;
    }
    return parts == 1 ? path : NULL;
}

static bool pattern_match(const pattern *p, const char *path, size_t len)
{
    if (p->anchored)
        return fnmatch(p->glob, path, FNM_PATHNAME) == 0;
    const char *tail = last_parts(path, len, p->parts);
    return tail && fnmatch(p->glob, tail, FNM_PATHNAME) == 0;
}

bool sg_ignore_match(const sg_ignore *ig, const char *path, bool is_dir)
{
    if (!ig)
        return false;
    size_t len = strlen(path);
    for (size_t i = 0; i < ig->n; i++)
        if ((is_dir || !ig->v[i].dir_only) && pattern_match(&ig->v[i], path, len))
            return true;
    return false;
}

bool sg_ignore_match_tree(const sg_ignore *ig, const char *path, bool is_dir)
{
    if (!ig || !ig->n)
        return false;
    sg_autofree char *buf = sg_xstrdup(path);
    for (char *c = buf; (c = strchr(c, '/')); c++) {
        *c = '\0';
        bool hit = sg_ignore_match(ig, buf, true);
        *c = '/';
        if (hit)
            return true;
    }
    return sg_ignore_match(ig, path, is_dir);
}

bool sg_ignore_needs_path(const sg_ignore *ig)
{
    return ig && ig->needs_path;
}

size_t sg_ignore_count(const sg_ignore *ig)
{
    return ig ? ig->n : 0;
}

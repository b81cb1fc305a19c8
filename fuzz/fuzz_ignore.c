/* libFuzzer target: the capture's ignore list (ignore.c): the operator's
 * patterns, and learner paths matched against them.
 *
 * Input: the list, then a NUL, then paths separated by newlines (a path
 * the watcher makes: relative, '/'-separated, no empty component).
 *
 * Invariants:
 *  - a list is accepted (at most SG_IGNORE_MAX_PATTERNS patterns) or
 *    refused with a message, the same way twice;
 *  - matching is deterministic, and a path matched by its last component
 *    is matched by the whole-tree match too;
 *  - a path's last component, taken literally as a one-pattern list (when
 *    it has no glob or list syntax), is accepted and matches the path, as
 *    a file and as a directory; with a trailing '/' only as a directory;
 *  - bounded: nothing read or written past a buffer (ASan), whatever the
 *    lengths. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/ignore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool literal_name(const char *c)
{
    if (!*c || !strcmp(c, ".") || !strcmp(c, ".."))
        return false;
    for (; *c; c++)
        if (strchr("*?[]\\,/", *c) || (unsigned char)*c < 0x20 || *c == 0x7f)
            return false;
    return true;
}

static void check_literal(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *last = slash ? slash + 1 : path;
    if (!literal_name(last))
        return;
    sg_err err = {0};
    sg_ignore *ig = sg_ignore_parse(last, &err);
    if (!ig || sg_ignore_count(ig) != 1 || !sg_ignore_match(ig, path, false) || !sg_ignore_match(ig, path, true))
        abort();
    sg_ignore_free(ig);
    size_t n = strlen(last);
    char *dir = malloc(n + 2);
    memcpy(dir, last, n);
    memcpy(dir + n, "/", 2);
    ig = sg_ignore_parse(dir, &err);
    if (!ig || sg_ignore_match(ig, path, false) || !sg_ignore_match(ig, path, true))
        abort();
    sg_ignore_free(ig);
    free(dir);
}

static bool valid_path(const char *p)
{
    if (!*p || *p == '/')
        return false;
    size_t n = strlen(p);
    return p[n - 1] != '/' && !strstr(p, "//");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t llen = strlen(buf);
    sg_err e1 = {0}, e2 = {0};
    sg_ignore *ig = sg_ignore_parse(buf, &e1);
    sg_ignore *again = sg_ignore_parse(buf, &e2);
    if (!ig != !again || (!ig && (!e1.msg[0] || strcmp(e1.msg, e2.msg))))
        abort();
    if (ig && (sg_ignore_count(ig) > SG_IGNORE_MAX_PATTERNS || sg_ignore_count(ig) != sg_ignore_count(again)))
        abort();
    char *paths = llen < size ? buf + llen + 1 : buf + size;
    for (char *save = NULL, *p = strtok_r(paths, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
        if (!valid_path(p))
            continue;
        for (int d = 0; d < 2 && ig; d++) {
            bool m = sg_ignore_match(ig, p, d);
            if (m != sg_ignore_match(again, p, d) || (m && !sg_ignore_match_tree(ig, p, d)))
                abort();
        }
        check_literal(p);
    }
    sg_ignore_free(ig);
    sg_ignore_free(again);
    free(buf);
    return 0;
}

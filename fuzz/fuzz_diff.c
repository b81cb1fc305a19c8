/* libFuzzer target: the diff of a learner's file (udiff.c, libgit2) and
 * the byte rules around it (diff.c, json.c's sanitizer). The learner
 * writes both the file's contents and its path.
 *
 * Input: byte 0 flags (1: no old side, 2: no new side, 4: new = old),
 * byte 1 path length (mod 64), bytes 2-3 where the rest is cut into old
 * and new (little-endian, at most the rest's size), then the path, then
 * old and new. fuzz/gen_diff_corpus.py writes the seeds.
 *
 * Invariants:
 *  - sg_diff_valid_utf8 agrees with jansson's UTF-8 check (json_stringn)
 *    on every input, and sg_diff_is_binary = a NUL or not valid UTF-8;
 *  - sg_utf8_sanitize gives valid UTF-8 without NUL, at most 3 bytes per
 *    input byte, and the input itself when that is valid without NUL;
 *  - the diff of a file with itself is empty (text "", 0 added, 0 removed);
 *  - the diff is faithful: applied to old (a small patch applier here) it
 *    gives new exactly, and its added/removed counts are its '+' and '-'
 *    lines as sg_diff_count_lines (the capture's count) counts them;
 *  - when old, new and the path are text (diff.h's rule) and the path has
 *    no newline, the diff is valid UTF-8 without NUL (diff.h: "Text
 *    therefore always gives a diff that is valid UTF-8 with no NUL");
 *  - its size is bounded by a linear function of the inputs. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "checkpoint/diff.h"
#include "checkpoint/udiff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_utf8_rules(const char *b, size_t n)
{
    json_t *s = json_stringn(b, n);
    bool ok = sg_diff_valid_utf8(b, n);
    if (ok != (s != NULL))
        abort();
    json_decref(s);
    if (sg_diff_is_binary(b, n) != (!ok || memchr(b, 0, n) != NULL))
        abort();
    size_t on = 0;
    char *clean = sg_utf8_sanitize(b, n, &on);
    if (!clean || on > 3 * n || clean[on] != '\0' || memchr(clean, 0, on) ||
        !sg_diff_valid_utf8(clean, on))
        abort();
    if (ok && !memchr(b, 0, n) && (on != n || memcmp(clean, b, n) != 0))
        abort();
    free(clean);
}

/* One line of a buffer: [p, p + len), the '\n' included when there is one. */
typedef struct line {
    const char *p;
    size_t len;
} line;

static size_t split_lines(const char *b, size_t n, line *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(b + i, '\n', n - i);
        size_t l = nl ? (size_t)(nl - (b + i)) + 1 : n - i;
        out[k++] = (line){b + i, l};
        i += l;
    }
    return k;
}

/* "@@ -a[,b] +c[,d] @@" */
static bool hunk_header(const char *p, size_t len, unsigned long *os, unsigned long *ol,
                        unsigned long *ns, unsigned long *nl)
{
    char buf[128];
    if (len >= sizeof buf)
        return false;
    memcpy(buf, p, len);
    buf[len] = '\0';
    char *e;
    if (strncmp(buf, "@@ -", 4) != 0)
        return false;
    *os = strtoul(buf + 4, &e, 10);
    *ol = 1;
    if (*e == ',')
        *ol = strtoul(e + 1, &e, 10);
    if (strncmp(e, " +", 2) != 0)
        return false;
    *ns = strtoul(e + 2, &e, 10);
    *nl = 1;
    if (*e == ',')
        *nl = strtoul(e + 1, &e, 10);
    return strncmp(e, " @@", 3) == 0;
}

/* Applies the unified diff d to old: returns the result (caller frees), or
 * aborts where the diff does not fit old. */
static char *apply(const char *old, size_t old_len, const char *d, size_t dlen, size_t *out_len,
                   size_t *plus, size_t *minus)
{
    line *ol = calloc(old_len + 1, sizeof *ol), *dl = calloc(dlen + 1, sizeof *dl);
    size_t nold = split_lines(old, old_len, ol), nd = split_lines(d, dlen, dl);
    char *out = malloc(old_len + dlen + 1);
    size_t o = 0, cur = 0, i = 0;
    *plus = *minus = 0;
    while (i < nd && !(dl[i].len >= 3 && memcmp(dl[i].p, "@@ ", 3) == 0))
        i++; /* headers */
    while (i < nd) {
        unsigned long os, oc, ns, nc;
        if (!hunk_header(dl[i].p, dl[i].len - (dl[i].p[dl[i].len - 1] == '\n'), &os, &oc, &ns, &nc))
            abort();
        i++;
        size_t start = oc ? os - 1 : os; /* -a,0 inserts after line a */
        if (start < cur || start > nold)
            abort();
        for (; cur < start; cur++) {
            memcpy(out + o, ol[cur].p, ol[cur].len);
            o += ol[cur].len;
        }
        unsigned long seen_old = 0, seen_new = 0;
        while (i < nd && seen_old + seen_new < oc + nc) {
            line l = dl[i++];
            if (l.len < 1)
                abort();
            char t = l.p[0];
            const char *body = l.p + 1;
            size_t blen = l.len - 1;
            if (i < nd && dl[i].len >= 2 && memcmp(dl[i].p, "\\ ", 2) == 0) {
                /* "\ No newline at end of file": this line has none */
                if (!blen || body[blen - 1] != '\n')
                    abort();
                blen--;
                i++;
            }
            if (t == ' ' || t == '-') {
                if (cur >= nold || ol[cur].len != blen || memcmp(ol[cur].p, body, blen) != 0)
                    abort(); /* the diff's old side is not the old file */
                cur++;
                seen_old++;
            }
            if (t == ' ' || t == '+') {
                memcpy(out + o, body, blen);
                o += blen;
                seen_new++;
            }
            if (t == '+')
                (*plus)++;
            else if (t == '-')
                (*minus)++;
            else if (t != ' ')
                abort();
        }
        if (seen_old != oc || seen_new != nc)
            abort();
    }
    for (; cur < nold; cur++) {
        memcpy(out + o, ol[cur].p, ol[cur].len);
        o += ol[cur].len;
    }
    free(ol);
    free(dl);
    *out_len = o;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_utf8_rules((const char *)data, size);
    if (size < 4)
        return 0;
    uint8_t flags = data[0];
    size_t plen = data[1] % 64, cut = data[2] | (size_t)data[3] << 8;
    data += 4;
    size -= 4;
    if (plen > size)
        plen = size;
    char path[64];
    memcpy(path, data, plen);
    path[plen] = '\0';
    data += plen;
    size -= plen;
    if (!plen || memchr(path, 0, plen))
        snprintf(path, sizeof path, "src/a.txt"); /* a C string, as the watcher's */
    plen = strlen(path);
    if (cut > size)
        cut = size;
    const char *old = (const char *)data, *new_ = (const char *)data + cut;
    size_t old_len = cut, new_len = size - cut;
    if (flags & 4) {
        new_ = old;
        new_len = old_len;
    }
    if (flags & 1)
        old = NULL, old_len = 0;
    if (flags & 2)
        new_ = NULL, new_len = 0;
    if (!old && !new_)
        return 0;

    sg_err err;
    sg_diff_result r;
    if (sg_udiff_unified(path, old, old_len, new_, new_len, &r, &err) < 0)
        abort(); /* in-memory buffers: only an allocation can fail */
    if (!r.text || r.text[r.len] != '\0')
        abort();
    if (old && new_ && old_len == new_len && memcmp(old, new_, old_len) == 0 &&
        (r.len || r.added || r.removed))
        abort(); /* a file diffed with itself */
    if (r.len > 8 * (old_len + new_len) + 4 * plen + 1024)
        abort();
    size_t added, removed;
    sg_diff_count_lines(r.text, r.len, &added, &removed);
    if (added != r.added || removed != r.removed)
        abort();
    size_t got_len, plus, minus;
    char *got = apply(old ? old : "", old_len, r.text, r.len, &got_len, &plus, &minus);
    if (got_len != new_len || (new_len && memcmp(got, new_, new_len) != 0) || plus != r.added ||
        minus != r.removed)
        abort();
    free(got);
    bool text = (!old || !sg_diff_is_binary(old, old_len)) &&
                (!new_ || !sg_diff_is_binary(new_, new_len)) && sg_diff_valid_utf8(path, plen) &&
                !strchr(path, '\n');
    if (text && (memchr(r.text, 0, r.len) || !sg_diff_valid_utf8(r.text, r.len)))
        abort();
    sg_diff_result_clear(&r);
    return 0;
}

/* export_csv: `sandglass export --format csv`: one row per event, the
 * row's own fields, then the payload's documented fields (docs/EVENTS.md)
 * one column each, in a fixed order, so the header is known before the
 * first row and the memory stays constant; a field not in the list goes
 * into payload_other as a JSON object (nothing is dropped). A string is
 * written as itself, a number or boolean as its JSON text, null as an
 * empty field, an array or object as its compact JSON. RFC 4180 quoting. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "cli/export.h"

static const char *const row_cols[] = {"learner", "task", "sandbox", "seq", "kind", "ts", "received"};

/* The payload fields with a column of their own. */
static const char *const payload_cols[] = {
    "exec_id", "command_id", "cmd", "cwd", "line", "stream", "data", "exit_code", "signal", "duration_s",
    "timed_out", "cpu_s", "memory_peak", "oom_killed", "pids_limit_hit", "output_limit_hit", "output_bytes",
    "killed_by", "aborted", "note", "path", "old_path", "change", "size", "sha256", "added", "removed",
    "binary", "truncated", "diff", "path_hex", "old_path_hex", "runner", "parsed", "outcome", "run",
    "passed", "failed", "errors", "skipped", "failing_tests", "failing_tests_truncated", "partial", "source",
    "report", "pid", "ppid", "argv", "start_ts", "end_ts", "background", "state", "what", "reason",
    "checkpoint", "to", "operator",
};

/* Whether s holds a byte that makes its field quoted: , " CR or LF (one
 * pass: most fields are short, and four memchr calls cost more). */
static bool csv_needs_quotes(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ',' && (c == ',' || c == '"' || c == '\n' || c == '\r'))
            return true;
    }
    return false;
}

int sg_export_csv_field(FILE *f, const char *s, size_t len)
{
    if (!csv_needs_quotes(s, len))
        return fwrite_unlocked(s, 1, len, f) == len ? 0 : -1;
    if (fputc_unlocked('"', f) == EOF)
        return -1;
    for (const char *p = s, *end = s + len; p < end;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        size_t n = q ? (size_t)(q - p) + 1 : (size_t)(end - p);
        if (fwrite_unlocked(p, 1, n, f) != n || (q && fputc_unlocked('"', f) == EOF))
            return -1;
        p += n;
    }
    return fputc_unlocked('"', f) == EOF ? -1 : 0;
}

int sg_export_csv_value(FILE *f, json_t *v)
{
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v))
        return sg_export_csv_field(f, json_string_value(v), json_string_length(v));
    sg_autofree char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return t ? sg_export_csv_field(f, t, strlen(t)) : -1;
}

#define NPAYLOAD (sizeof payload_cols / sizeof payload_cols[0])
#define COL_SLOTS 256 /* the text path's table of payload_cols (open addressing), > 2 * NPAYLOAD */

/* payload_cols[i] + 1 at the slot of its name's hash (0: empty), made once. */
static unsigned char col_slot[COL_SLOTS];

static unsigned col_hash(const char *k, size_t n)
{
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}

/* The payload column named by key's text (n bytes), or -1. */
static int col_find(const char *k, size_t n)
{
    for (unsigned h = col_hash(k, n);; h++) {
        unsigned char c = col_slot[h % COL_SLOTS];
        if (!c)
            return -1;
        const char *name = payload_cols[c - 1];
        if (strncmp(name, k, n) == 0 && name[n] == '\0')
            return c - 1;
    }
}

static void col_table(void)
{
    memset(col_slot, 0, sizeof col_slot);
    for (size_t i = 0; i < NPAYLOAD; i++) {
        unsigned h = col_hash(payload_cols[i], strlen(payload_cols[i]));
        while (col_slot[h % COL_SLOTS])
            h++;
        col_slot[h % COL_SLOTS] = (unsigned char)(i + 1);
    }
}

/* payload_cols' indexes sorted by name, for bsearch (made once). */
static size_t col_order[NPAYLOAD];

static int col_cmp(const void *key, const void *elem)
{
    return strcmp(key, payload_cols[*(const size_t *)elem]);
}

static int col_sort_cmp(const void *a, const void *b)
{
    return strcmp(payload_cols[*(const size_t *)a], payload_cols[*(const size_t *)b]);
}

static int csv_begin(sg_export *x, sg_err *err)
{
    FILE *f = x->out;
    for (size_t i = 0; i < NPAYLOAD; i++)
        col_order[i] = i;
    qsort(col_order, NPAYLOAD, sizeof col_order[0], col_sort_cmp);
    col_table();
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        fprintf(f, "%s%s", i ? "," : "", row_cols[i]);
    for (size_t i = 0; i < sizeof payload_cols / sizeof payload_cols[0]; i++)
        fprintf(f, ",%s", payload_cols[i]);
    if (fputs_unlocked(",payload_other\r\n", f) == EOF)
        return sg_err_sys(err, "write");
    return 0;
}

static int csv_row(sg_export *x, json_t *ev, sg_err *err)
{
    FILE *f = x->out;
    int bad = 0;
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        bad |= (i && fputc_unlocked(',', f) == EOF) | sg_export_csv_value(f, json_object_get(ev, row_cols[i]));
    /* one pass over the payload: each field to its column, or to other */
    json_t *col[NPAYLOAD] = {0};
    sg_autojson json_t *other = NULL;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(ev, "payload"), k, v) {
        const size_t *at = bsearch(k, col_order, NPAYLOAD, sizeof col_order[0], col_cmp);
        if (at)
            col[*at] = v;
        else if ((other || (other = json_object())) && json_object_set(other, k, v) < 0)
            return sg_err_set(err, ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < NPAYLOAD; i++)
        bad |= (fputc_unlocked(',', f) == EOF) | sg_export_csv_value(f, col[i]);
    bad |= fputc_unlocked(',', f) == EOF;
    if (other)
        bad |= sg_export_csv_value(f, other);
    bad |= fputs_unlocked("\r\n", f) == EOF;
    return bad ? sg_err_sys(err, "write") : 0;
}

/* ---- the text path: a row's compact text (cli/evrows.h: the bytes
 * jansson's compact dump of the row gives) written without a tree. Each
 * field comes out as csv_row writes it from the tree: a string unescaped,
 * null empty, anything else its compact text (a nested value's span is its
 * own compact dump), payload_other the other fields' "key":value spans. */

typedef struct span {
    const char *p;
    size_t n;
} span;

/* The end of the value at p (compact JSON, checked by the scan already),
 * or NULL past end. */
static const char *value_end(const char *p, const char *end)
{
    int depth = 0;
    do {
        if (p >= end)
            return NULL;
        if (*p == '"') { /* to the quote no odd run of backslashes escapes */
            const char *open = p++;
            bool closed = false;
            for (const char *q; !closed && p < end && (q = memchr(p, '"', (size_t)(end - p)));) {
                size_t bs = 0;
                while (q - bs - 1 > open && q[-(ptrdiff_t)bs - 1] == '\\')
                    bs++;
                p = q + 1;
                closed = bs % 2 == 0;
            }
            if (!closed)
                return NULL;
        } else if (*p == '{' || *p == '[') {
            depth++, p++;
        } else if (*p == '}' || *p == ']') {
            depth--, p++;
        } else {
            while (p < end && *p != ',' && *p != '}' && *p != ']')
                p++;
        }
        while (depth > 0 && p < end && (*p == ',' || *p == ':'))
            p++;
    } while (depth > 0);
    return p <= end ? p : NULL;
}

/* The members of the object at o: fn(ud, key (its text, quotes off), value). */
static int members(span o, int (*fn)(void *ud, span key, span val), void *ud)
{
    const char *p = o.p + 1, *end = o.p + o.n - 1;
    while (p < end && *p == '"') {
        const char *k = p;
        p = value_end(p, end);
        if (!p || p >= end || *p != ':')
            return -1;
        span key = {k + 1, (size_t)(p - k) - 2};
        const char *v = ++p;
        if (!(p = value_end(p, end)) || fn(ud, key, (span){v, (size_t)(p - v)}) < 0)
            return -1;
        if (p < end && *p == ',')
            p++;
    }
    return p == end ? 0 : -1;
}

static void put_utf8(sg_buf *b, unsigned long c)
{
    char u[4];
    size_t n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (n == 1)
        u[0] = (char)c;
    else {
        for (size_t i = n - 1; i > 0; i--, c >>= 6)
            u[i] = (char)(0x80 | (c & 0x3f));
        u[0] = (char)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | c);
    }
    sg_buf_append(b, u, n);
}

/* A JSON string's text (quotes off) unescaped into b. */
static void unescape(sg_buf *b, span s)
{
    sg_buf_reset(b);
    for (const char *p = s.p, *end = s.p + s.n; p < end;) {
        const char *q = memchr(p, '\\', (size_t)(end - p));
        sg_buf_append(b, p, q ? (size_t)(q - p) : (size_t)(end - p));
        if (!q || q + 1 >= end)
            break;
        char e = q[1];
        p = q + 2;
        if (e != 'u') {
            char c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
            sg_buf_append(b, &c, 1);
            continue;
        }
        unsigned long c = p + 4 <= end ? strtoul((char[5]){p[0], p[1], p[2], p[3], 0}, NULL, 16) : 0xfffd;
        p += 4;
        if (c >= 0xd800 && c < 0xdc00 && p + 6 <= end && p[0] == '\\' && p[1] == 'u') {
            unsigned long lo = strtoul((char[5]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
            c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
            p += 6;
        }
        put_utf8(b, c);
    }
}

typedef struct text_row {
    FILE *f;
    sg_buf *tmp, *other;
    span row[sizeof row_cols / sizeof row_cols[0]];
    span pay[NPAYLOAD];
    span payload;
} text_row;

/* One value as a CSV field (as sg_export_csv_value writes its tree). */
static int text_value(text_row *t, span v)
{
    if (!v.p || (v.n == 4 && !memcmp(v.p, "null", 4)))
        return 0;
    if (*v.p != '"')
        return sg_export_csv_field(t->f, v.p, v.n);
    if (!memchr(v.p + 1, '\\', v.n - 2)) /* no escape: the text is the string */
        return sg_export_csv_field(t->f, v.p + 1, v.n - 2);
    unescape(t->tmp, (span){v.p + 1, v.n - 2});
    return sg_export_csv_field(t->f, t->tmp->data ? t->tmp->data : "", t->tmp->len);
}

static int key_is(span k, const char *name)
{
    return strncmp(name, k.p, k.n) == 0 && name[k.n] == '\0';
}

static int row_member(void *ud, span key, span val)
{
    text_row *t = ud;
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        if (row_cols[i][0] == *key.p && key_is(key, row_cols[i]))
            return t->row[i] = val, 0;
    if (key_is(key, "payload"))
        t->payload = val;
    return 0;
}

static int payload_member(void *ud, span key, span val)
{
    text_row *t = ud;
    if (key.n < 64 && !memchr(key.p, '\\', key.n)) {
        int at = col_find(key.p, key.n);
        if (at >= 0)
            return t->pay[at] = val, 0;
    }
    return sg_buf_append(t->other, t->other->len ? "," : "{", 1) < 0 || sg_buf_append(t->other, key.p - 1, key.n + 2) < 0 ||
                   sg_buf_append(t->other, ":", 1) < 0 || sg_buf_append(t->other, val.p, val.n) < 0
               ? -1
               : 0;
}

static sg_buf tmp, other; /* csv_row_text's, kept from row to row */

static int csv_row_text(sg_export *x, const char *text, size_t len, sg_err *err)
{
    text_row t = {.f = x->out, .tmp = &tmp, .other = &other};
    sg_buf_reset(&other);
    if (len < 2 || *text != '{' || members((span){text, len}, row_member, &t) < 0 || !t.payload.p ||
        *t.payload.p != '{' || members(t.payload, payload_member, &t) < 0)
        return sg_err_set(err, EPROTO, "a row of the ingest's answer is not an object of the row's fields");
    int bad = 0;
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        bad |= (i && fputc_unlocked(',', t.f) == EOF) | text_value(&t, t.row[i]);
    for (size_t i = 0; i < NPAYLOAD; i++)
        bad |= (fputc_unlocked(',', t.f) == EOF) | text_value(&t, t.pay[i]);
    bad |= fputc_unlocked(',', t.f) == EOF;
    if (other.len)
        bad |= sg_buf_append(&other, "}", 1) | sg_export_csv_field(t.f, other.data, other.len);
    bad |= fputs_unlocked("\r\n", t.f) == EOF;
    return bad ? sg_err_sys(err, "write") : 0;
}

static int csv_end(sg_export *x, sg_err *err)
{
    (void)x, (void)err;
    sg_buf_free(&tmp);
    sg_buf_free(&other);
    return 0;
}

const sg_export_fmt sg_export_csv = {.name = "csv", .begin = csv_begin, .row = csv_row, .row_text = csv_row_text,
                                     .end = csv_end};

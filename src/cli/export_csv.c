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
#include <stdint.h>
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

/* payload_cols[i] + 1 at the slot of its name's hash (0: empty), and the
 * names' lengths (row_cols' too), made once. */
static unsigned char col_slot[COL_SLOTS], col_len[NPAYLOAD], row_len[sizeof row_cols / sizeof row_cols[0]];

/* From the length and three bytes (a key is looked up per payload field
 * of every row: a hash of all its bytes cost more than the probes). */
static unsigned col_hash(const char *k, size_t n)
{
    if (n == 0)
        return 0;
    const unsigned char *u = (const unsigned char *)k;
    return (unsigned)n * 0x9E3779B1u ^ u[0] * 0x85EBCA6Bu ^ u[n - 1] * 0xC2B2AE35u ^ u[n / 2] * 0x27D4EB2Fu;
}

/* The payload column named by key's text (n bytes), or -1. */
static int col_find(const char *k, size_t n)
{
    for (unsigned h = col_hash(k, n);; h++) {
        unsigned char c = col_slot[h % COL_SLOTS];
        if (!c)
            return -1;
        if (col_len[c - 1] == n && memcmp(payload_cols[c - 1], k, n) == 0)
            return c - 1;
    }
}

static void col_table(void)
{
    memset(col_slot, 0, sizeof col_slot);
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        row_len[i] = (unsigned char)strlen(row_cols[i]);
    for (size_t i = 0; i < NPAYLOAD; i++) {
        col_len[i] = (unsigned char)strlen(payload_cols[i]);
        unsigned h = col_hash(payload_cols[i], col_len[i]);
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

/* ---- the text path: a scanned row (cli/evrows.h: its compact text, the
 * bytes jansson's compact dump of the row gives, with its members and its
 * payload's found by the scan) written without a tree and without a
 * second parse. Each field comes out as csv_row writes it from the tree: a
 * string unescaped, null empty, anything else its compact text (a nested
 * value's text is its own compact dump), payload_other the other fields'
 * "key":value texts. The row is made in a buffer and written at once. */

#define NROW (sizeof row_cols / sizeof row_cols[0])
#define ROW_SEPS (NROW + NPAYLOAD + 2) /* a row's commas and its CRLF */

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

/* A JSON string's text (quotes off, n bytes) unescaped into b. */
static void unescape(sg_buf *b, const char *s, size_t n)
{
    sg_buf_reset(b);
    for (const char *p = s, *end = s + n; p < end;) {
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

static sg_buf line, tmp, other; /* csv_row_text's, kept from row to row */

/* s (n bytes) as a CSV field at line's end, quoted when quote (as
 * sg_export_csv_field writes it), with room left for the row's
 * separators: 0, or -1 out of memory. */
static int put_field(const char *s, size_t n, bool quote)
{
    if (sg_buf_reserve(&line, 2 * n + 2 + ROW_SEPS) < 0)
        return -1;
    char *o = line.data + line.len;
    if (!quote) {
        memcpy(o, s, n);
        line.len += n;
        return 0;
    }
    *o++ = '"';
    for (const char *p = s, *end = s + n; p < end;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        size_t k = q ? (size_t)(q - p) + 1 : (size_t)(end - p);
        memcpy(o, p, k);
        o += k;
        if (q)
            *o++ = '"';
        p += k;
    }
    *o++ = '"';
    line.len = (size_t)(o - line.data);
    return 0;
}

/* A member's value as a CSV field (as sg_export_csv_value writes its tree). */
static int put_value(const char *d, const sg_evmember *m)
{
    const char *v = d + m->val_off;
    size_t n = m->val_len;
    if (!m->str) /* a number, true or false is never quoted; an array or object may be */
        return n == 4 && !memcmp(v, "null", 4) ? 0 : put_field(v, n, (*v == '{' || *v == '[') && csv_needs_quotes(v, n));
    if (!m->vesc) /* the text is the string: no '"', CR or LF in it unescaped */
        return put_field(v + 1, n - 2, memchr(v + 1, ',', n - 2) != NULL);
    unescape(&tmp, v + 1, n - 2);
    const char *u = tmp.data ? tmp.data : "";
    return put_field(u, tmp.len, csv_needs_quotes(u, tmp.len));
}

static int csv_row_text(sg_export *x, const sg_evpage *pg, const sg_evrow *r, sg_err *err)
{
    const char *d = pg->out.data;
    const sg_evmember *row[NROW] = {0}, *pay[NPAYLOAD] = {0};
    uint64_t set = 0; /* the payload columns present */
    _Static_assert(NPAYLOAD <= 64, "one bit a payload column");
    if (!r->payload_obj)
        return sg_err_set(err, EPROTO, "a row of the ingest's answer is not an object of the row's fields");
    for (size_t i = 0; i < r->nmem; i++) {
        const sg_evmember *m = &pg->mem[r->mem + i];
        const char *k = d + m->key_off;
        for (size_t c = 0; c < NROW; c++)
            if (row_len[c] == m->key_len && memcmp(row_cols[c], k, m->key_len) == 0) {
                row[c] = m;
                break;
            }
    }
    sg_buf_reset(&other);
    for (size_t i = 0; i < r->npmem; i++) { /* each field to its column, or to other */
        const sg_evmember *m = &pg->mem[r->pmem + i];
        int at = !m->kesc && m->key_len < 64 ? col_find(d + m->key_off, m->key_len) : -1;
        if (at >= 0)
            pay[at] = m, set |= 1ULL << at;
        else if (sg_buf_append(&other, other.len ? "," : "{", 1) < 0 ||
                 sg_buf_append(&other, d + m->key_off - 1, m->key_len + 2) < 0 || sg_buf_append(&other, ":", 1) < 0 ||
                 sg_buf_append(&other, d + m->val_off, m->val_len) < 0)
            return sg_err_set(err, ENOMEM, "out of memory");
    }
    sg_buf_reset(&line);
    int bad = sg_buf_reserve(&line, ROW_SEPS);
    for (size_t c = 0; c < NROW && !bad; c++) {
        if (c)
            line.data[line.len++] = ',';
        bad = row[c] ? put_value(d, row[c]) : 0;
    }
    size_t next = 0; /* the payload column whose comma comes next */
    for (uint64_t m = set; m && !bad; m &= m - 1) { /* the empty columns between as a run of commas */
        size_t c = (size_t)__builtin_ctzll(m);
        memset(line.data + line.len, ',', c + 1 - next);
        line.len += c + 1 - next;
        next = c + 1;
        bad = put_value(d, pay[c]);
    }
    if (!bad) {
        memset(line.data + line.len, ',', NPAYLOAD + 1 - next); /* and payload_other's */
        line.len += NPAYLOAD + 1 - next;
        if (other.len)
            bad = sg_buf_append(&other, "}", 1) < 0 || put_field(other.data, other.len, csv_needs_quotes(other.data, other.len)) < 0;
    }
    if (bad)
        return sg_err_set(err, ENOMEM, "out of memory");
    line.data[line.len++] = '\r';
    line.data[line.len++] = '\n';
    return fwrite_unlocked(line.data, 1, line.len, x->out) == line.len ? 0 : sg_err_sys(err, "write");
}

static int csv_end(sg_export *x, sg_err *err)
{
    (void)x, (void)err;
    sg_buf_free(&line);
    sg_buf_free(&tmp);
    sg_buf_free(&other);
    return 0;
}

const sg_export_fmt sg_export_csv = {.name = "csv", .begin = csv_begin, .row = csv_row, .row_text = csv_row_text,
                                     .members = true,
                                     .end = csv_end};

/* export_csv: `sandglass export --format csv`: one row per event, the
 * row's own fields, then the payload's documented fields (docs/EVENTS.md)
 * one column each, in a fixed order, so the header is known before the
 * first row and the memory stays constant; a field not in the list goes
 * into payload_other as a JSON object (nothing is dropped). A string is
 * written as itself, a number or boolean as its JSON text, null as an
 * empty field, an array or object as its compact JSON. RFC 4180 quoting. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "cli/export.h"

static const char *const row_cols[] = {"learner", "task", "sandbox", "seq", "kind", "ts", "received"};

/* The payload fields with a column of their own. */
static const char *const payload_cols[] = {
    "exec_id", "command_id", "cmd", "cwd", "line", "stream", "data", "exit_code", "signal", "duration_s",
    "timed_out", "note", "path", "old_path", "change", "size", "sha256", "added", "removed", "binary",
    "truncated", "diff", "path_hex", "old_path_hex", "runner", "parsed", "outcome", "run", "passed",
    "failed", "errors", "skipped", "failing_tests", "pid", "ppid", "argv", "start_ts", "end_ts",
    "background", "state", "what", "reason", "checkpoint", "to", "operator",
};

int sg_export_csv_field(FILE *f, const char *s, size_t len)
{
    if (!memchr(s, ',', len) && !memchr(s, '"', len) && !memchr(s, '\n', len) && !memchr(s, '\r', len))
        return fwrite(s, 1, len, f) == len ? 0 : -1;
    if (fputc('"', f) == EOF)
        return -1;
    for (const char *p = s, *end = s + len; p < end;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        size_t n = q ? (size_t)(q - p) + 1 : (size_t)(end - p);
        if (fwrite(p, 1, n, f) != n || (q && fputc('"', f) == EOF))
            return -1;
        p += n;
    }
    return fputc('"', f) == EOF ? -1 : 0;
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
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        fprintf(f, "%s%s", i ? "," : "", row_cols[i]);
    for (size_t i = 0; i < sizeof payload_cols / sizeof payload_cols[0]; i++)
        fprintf(f, ",%s", payload_cols[i]);
    if (fputs(",payload_other\r\n", f) == EOF)
        return sg_err_sys(err, "write");
    return 0;
}

static int csv_row(sg_export *x, json_t *ev, sg_err *err)
{
    FILE *f = x->out;
    int bad = 0;
    for (size_t i = 0; i < sizeof row_cols / sizeof row_cols[0]; i++)
        bad |= (i && fputc(',', f) == EOF) | sg_export_csv_value(f, json_object_get(ev, row_cols[i]));
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
        bad |= (fputc(',', f) == EOF) | sg_export_csv_value(f, col[i]);
    bad |= fputc(',', f) == EOF;
    if (other)
        bad |= sg_export_csv_value(f, other);
    bad |= fputs("\r\n", f) == EOF;
    return bad ? sg_err_sys(err, "write") : 0;
}

const sg_export_fmt sg_export_csv = {.name = "csv", .begin = csv_begin, .row = csv_row};

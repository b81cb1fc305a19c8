/* store_import: a JSONL export into a store, one transaction
 * (store_import.h). */
#include "ingest/store_import.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "wire/event.h"

typedef struct import_rows {
    sg_store_row *rows;
    size_t n, cap;
    char **owned; /* each row's strings, one allocation */
    size_t bytes; /* the batch's payload bytes */
    sg_store *store;
    sg_store_import_result *res;
} import_rows;

/* The batch's rows freed (after they went to the store). */
static void import_rows_clear(import_rows *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->owned[i]);
    r->n = 0;
    r->bytes = 0;
}

static void import_rows_free(import_rows *r)
{
    import_rows_clear(r);
    free(r->owned);
    free(r->rows);
}

/* The batch into the load's transaction. 0, or -1 with err. */
static int import_flush(import_rows *r, sg_err *err)
{
    size_t added = 0;
    if (sg_store_load_put(r->store, r->rows, r->n, &added, err) < 0)
        return -1;
    r->res->total += r->n;
    r->res->inserted += added;
    import_rows_clear(r);
    return 0;
}

/* The payload's text as the line holds it (the bytes the store had), when
 * the line ends with it ("payload":{...}} as export writes it) and it is
 * the value parsed; else NULL (then its compact dump is stored). */
static const char *import_payload_text(const char *line, size_t len, json_t *payload, size_t *plen)
{
    const char *p = strstr(line, ",\"payload\":");
    if (!p || len < 2 || line[len - 1] != '}')
        return NULL;
    p += 11;
    *plen = (size_t)(line + len - 1 - p);
    json_error_t je;
    sg_autojson json_t *again = json_loadb(p, *plen, JSON_REJECT_DUPLICATES, &je);
    return again && json_equal(again, payload) ? p : NULL;
}

/* One line checked and copied into r: NULL, or what is wrong with it. */
static const char *import_line(import_rows *r, const char *line, size_t len, char *why, size_t wn)
{
    json_error_t je;
    sg_autojson json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o))
        return o ? "not a JSON object" : (snprintf(why, wn, "not JSON: %s", je.text), why);
    static const char *const names[] = {"learner", "task", "sandbox", "kind", "ts", "received"};
    const char *s[6];
    for (int i = 0; i < 6; i++)
        if (!(s[i] = json_string_value(json_object_get(o, names[i]))))
            return snprintf(why, wn, "no string \"%s\"", names[i]), why;
    for (int i = 0; i < 3; i++)
        if (!sg_valid_name(s[i]))
            return snprintf(why, wn, "\"%s\" is not a valid name", names[i]), why;
    if (sg_event_kind_from_name(s[3]) < 0)
        return "\"kind\" is not a known event kind";
    json_t *seq = json_object_get(o, "seq"), *payload = json_object_get(o, "payload");
    if (!json_is_integer(seq) || json_integer_value(seq) < 0)
        return "\"seq\" is not an integer >= 0";
    if (!json_is_object(payload))
        return "\"payload\" is not an object";
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (strcmp(key, "seq") && strcmp(key, "payload") && strcmp(key, "id") && strcmp(key, "learner") &&
            strcmp(key, "task") && strcmp(key, "sandbox") && strcmp(key, "kind") && strcmp(key, "ts") &&
            strcmp(key, "received"))
            return "a field that is not a row's (learner, task, sandbox, seq, kind, ts, received, payload)";
    }
    size_t plen = 0;
    sg_autofree char *dumped = NULL;
    const char *ptext = import_payload_text(line, len, payload, &plen);
    if (!ptext) {
        if (!(dumped = json_dumps(payload, JSON_COMPACT)))
            return "out of memory";
        ptext = dumped, plen = strlen(dumped);
    }
    size_t need = plen + 1;
    for (int i = 0; i < 6; i++)
        need += strlen(s[i]) + 1;
    char *mem = sg_xcalloc(1, need), *w = mem;
    const char *cp[6];
    for (int i = 0; i < 6; i++) {
        cp[i] = w;
        w = stpcpy(w, s[i]) + 1;
    }
    memcpy(w, ptext, plen);
    sg_xgrow(&r->rows, &r->cap, r->n + 1, sizeof *r->rows);
    r->owned = sg_xrealloc(r->owned, r->cap * sizeof *r->owned);
    r->owned[r->n] = mem;
    r->rows[r->n++] = (sg_store_row){.learner = cp[0], .task = cp[1], .sandbox = cp[2], .kind = cp[3], .ts = cp[4],
                                     .received = cp[5], .seq = json_integer_value(seq), .payload = w,
                                     .payload_len = plen};
    r->bytes += need;
    return NULL;
}

/* The next line of f into *line (its newline dropped), never holding more
 * than SG_IMPORT_LINE_MAX + 1 bytes of it: its length; -1 at the end (or
 * a read error: ferror), -2 too long (the rest of it skipped), -3 out of
 * memory. */
static ssize_t read_line(FILE *f, sg_buf *line)
{
    line->len = 0;
    bool any = false, big = false;
    for (int c; (c = getc_unlocked(f)) != EOF;) {
        any = true;
        if (c == '\n')
            break;
        if (big)
            continue;
        if (line->len >= SG_IMPORT_LINE_MAX) {
            big = true;
            continue;
        }
        if (line->len + 1 >= line->cap && sg_buf_reserve(line, line->len < 4096 ? 4096 : line->len) < 0)
            return -3;
        line->data[line->len++] = (char)c;
    }
    if (!any)
        return -1;
    if (big)
        return -2;
    if (sg_buf_reserve(line, 1) < 0)
        return -3;
    line->data[line->len] = '\0';
    return (ssize_t)line->len;
}

/* Every line of f into the load (begun): 0, or -1 with err. */
static int import_read(FILE *f, import_rows *r, sg_err *err)
{
    sg_buf b = {0};
    ssize_t len;
    int rc = 0;
    unsigned long no = 1;
    for (; rc == 0 && (len = read_line(f, &b)) != -1; no++) {
        char *line = b.data;
        while (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (len == 0)
            continue;
        char why[256];
        if (len == -3) {
            rc = sg_err_set(err, ENOMEM, "line %lu: out of memory", no);
            break;
        }
        const char *bad = len < 0 ? "longer than 64 MiB" : import_line(r, line, (size_t)len, why, sizeof why);
        if (bad) {
            r->res->bad_line = no;
            rc = sg_err_set(err, EINVAL, "line %lu: %s", no, bad);
        } else if (r->n >= SG_IMPORT_BATCH_ROWS || r->bytes >= SG_IMPORT_BATCH_BYTES) {
            rc = import_flush(r, err);
        }
    }
    sg_buf_free(&b);
    if (rc < 0)
        return -1;
    if (ferror(f))
        return sg_err_sys(err, "read");
    return import_flush(r, err);
}

int sg_store_import(sg_store *s, FILE *f, sg_store_import_result *res, sg_err *err)
{
    *res = (sg_store_import_result){0};
    import_rows r = {.store = s, .res = res};
    if (sg_store_load_begin(s, err) < 0)
        return -1;
    int rc = import_read(f, &r, err);
    import_rows_free(&r);
    sg_err end_err;
    if (sg_store_load_end(s, rc == 0, rc == 0 ? err : &end_err) < 0)
        rc = -1;
    if (rc < 0)
        res->total = res->inserted = 0;
    return rc;
}

/* sandglass import FILE [--store URL]
 * Loads a JSONL export (sandglass export --format jsonl) into a store, as
 * the rows it was exported from: the same learner, task, sandbox, seq,
 * kind, ts, received and payload bytes. An operator's action on the store
 * itself (its URL, default the local ingest's <state>/ingest/events.db;
 * the store's own access, the file's 0600 or the database's credentials,
 * is the authority, as for the ingest), never through a read token.
 *
 * All rows go in one transaction, all or nothing, streamed into it in
 * batches (sg_store_load_*: at most IMPORT_BATCH_ROWS rows or about
 * IMPORT_BATCH_BYTES of payload held at once, whatever the file's size); a
 * bad line is named (its number and what is wrong), the transaction rolled
 * back, and nothing is imported. A row already in the store (its learner,
 * task, sandbox and seq) is left as it is, and counted. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/report.h"
#include "ingest/store.h"
#include "state/state.h"
#include "wire/event.h"

#define IMPORT_LINE_MAX (64 * 1024 * 1024)
#define IMPORT_BATCH_ROWS 1000
#define IMPORT_BATCH_BYTES (4 * 1024 * 1024)

static const char usage[] = "usage: sandglass import FILE [--store URL]\n"
                            "  FILE     a jsonl export (sandglass export --format jsonl); - for stdin\n"
                            "  --store  the store to load (default sqlite:<state>/ingest/events.db;\n"
                            "           postgresql://... for PostgreSQL)\n";

typedef struct import_rows {
    sg_store_row *rows;
    size_t n, cap;
    char **owned; /* each row's strings, one allocation */
    size_t bytes; /* the batch's payload bytes */
    sg_store *store;
    size_t total, inserted;
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
    r->total += r->n;
    r->inserted += added;
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

static int import_read(FILE *f, const char *name, import_rows *r)
{
    sg_autofree char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (unsigned long no = 1; (len = getline(&line, &cap, f)) >= 0; no++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        char why[256];
        const char *bad = len > IMPORT_LINE_MAX ? "longer than 64 MiB" : import_line(r, line, (size_t)len, why, sizeof why);
        if (bad)
            return sg_cli_failf("import", "%s line %lu: %s (nothing imported)", name, no, bad);
        sg_err err;
        if ((r->n >= IMPORT_BATCH_ROWS || r->bytes >= IMPORT_BATCH_BYTES) && import_flush(r, &err) < 0)
            return sg_cli_failf("import", "%s (nothing imported)", err.msg);
    }
    if (ferror(f))
        return sg_cli_failf("import", "read %s: %s (nothing imported)", name, strerror(errno));
    sg_err err;
    if (import_flush(r, &err) < 0)
        return sg_cli_failf("import", "%s (nothing imported)", err.msg);
    return 0;
}

int sg_cmd_import(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"store", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *store = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("import", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return sg_cli_usage("import", "one FILE to import (a jsonl export)");
    const char *path = argv[optind];
    sg_err err;
    sg_autofree char *store_default = NULL;
    if (!store) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("import", "state directory: %s", err.msg);
        sg_autofree char *db = sg_state_path("ingest/events.db");
        store = store_default = sg_strdup_printf("sqlite:%s", db);
    }
    FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
    if (!f)
        return sg_cli_failf("import", "open %s: %s", path, strerror(errno));
    import_rows r = {0};
    int rc;
    if (!(r.store = sg_store_open(store, &err)) || sg_store_load_begin(r.store, &err) < 0) {
        rc = sg_cli_failf("import", "%s (nothing imported)", err.msg);
    } else {
        rc = import_read(f, path, &r);
        if (sg_store_load_end(r.store, rc == 0, &err) < 0)
            rc = sg_cli_failf("import", "%s (nothing imported)", err.msg);
        else if (rc == 0)
            printf("imported %zu events (%zu already in the store)\n", r.inserted, r.total - r.inserted);
    }
    if (f != stdin)
        fclose(f);
    if (r.store)
        sg_store_close(r.store);
    import_rows_free(&r);
    return rc;
}

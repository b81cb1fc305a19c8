/* store_sqlite: the embedded SQLite backend of store.h.
 *
 * WAL + synchronous=FULL: a commit is on disk when sg_store_put returns, so
 * an ack sent after it is never lost to a crash. One transaction per batch,
 * prepared statements kept for the hot paths. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "ingest/store.h"
#include "ingest/store_backend.h"

typedef struct sqlite_store {
    sg_store base;
    sqlite3 *db;
    sqlite3_stmt *insert;
    sqlite3_stmt *after;     /* seqs of a stream above a value, ascending */
    sqlite3_stmt *insert_new; /* append: a row judged new (no OR IGNORE) */
    sqlite3_stmt *maxseq;    /* a stream's highest seq */
    sqlite3_stmt *getrow;    /* a stored row's kind and payload */
    char *path;
} sqlite_store;

/* The schema, as steps: step k takes a store from version k to k + 1 (a
 * new store runs them all, so the steps an old store migrates by are the
 * ones every new store is made by). Version 1 (no sg_schema table): the
 * release before one vocabulary, its table named "events". Each runs in
 * the opening transaction; sg_schema is rewritten after the last. */
static const char *const schema_steps[SG_STORE_SCHEMA_VERSION] = {
    /* 0 -> 1 */
    "CREATE TABLE events ("
    " id INTEGER PRIMARY KEY,"
    " learner TEXT NOT NULL, task TEXT NOT NULL, sandbox TEXT NOT NULL,"
    " seq INTEGER NOT NULL, kind TEXT NOT NULL,"
    " ts TEXT NOT NULL, received TEXT NOT NULL, payload TEXT NOT NULL,"
    " UNIQUE (learner, task, sandbox, seq));",
    /* 1 -> 2: PostgreSQL's names (sg_), and the version recorded */
    "ALTER TABLE events RENAME TO sg_events;"
    "CREATE TABLE sg_schema (version INTEGER NOT NULL);",
    /* 2 -> 3: file contents and terminal recordings (store_contents.h) */
    "CREATE TABLE sg_contents (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE sg_content_parts (sha256 TEXT NOT NULL, off INTEGER NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (sha256, off)) WITHOUT ROWID;"
    "CREATE TABLE sg_casts (learner TEXT NOT NULL, task TEXT NOT NULL, sandbox TEXT NOT NULL,"
    " session TEXT NOT NULL, off INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (learner, task, sandbox, session, off)) WITHOUT ROWID;",
    /* 3 -> 4: revoked tokens, by id (store.h) */
    "CREATE TABLE IF NOT EXISTS sg_revoked_tokens (id TEXT PRIMARY KEY, revoked TEXT NOT NULL);",
    /* 4 -> 5: the purges' count (store.h: sg_store_purges) */
    "CREATE TABLE sg_purges (n INTEGER NOT NULL); INSERT INTO sg_purges VALUES (0);",
    /* 5 -> 6: the sandbox hosts (store.h: sg_store_hosts) */
    "CREATE TABLE sg_hosts (name TEXT PRIMARY KEY, info TEXT NOT NULL, last_seen INTEGER NOT NULL) WITHOUT ROWID;",
    /* 6 -> 7: the parts of contents and recordings in rowid tables, their
     * keys in an index of their own. WITHOUT ROWID put each part's bytes
     * in the key's b-tree, and SQLite compares a key whose cell overflows
     * its page by reading the whole cell: every step of every search
     * (each read and each insert) read whole parts, ~11 times the bytes
     * asked for (a 20 KiB content: 225 KiB read) */
    "CREATE TABLE sg_content_parts_7 (sha256 TEXT NOT NULL, off INTEGER NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (sha256, off));"
    "INSERT INTO sg_content_parts_7 SELECT sha256, off, data FROM sg_content_parts;"
    "DROP TABLE sg_content_parts;"
    "ALTER TABLE sg_content_parts_7 RENAME TO sg_content_parts;"
    "CREATE TABLE sg_casts_7 (learner TEXT NOT NULL, task TEXT NOT NULL, sandbox TEXT NOT NULL,"
    " session TEXT NOT NULL, off INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (learner, task, sandbox, session, off));"
    "INSERT INTO sg_casts_7 SELECT learner, task, sandbox, session, off, data FROM sg_casts;"
    "DROP TABLE sg_casts;"
    "ALTER TABLE sg_casts_7 RENAME TO sg_casts;",
};

static int db_fail(sqlite_store *s, sg_err *err, const char *what)
{
    return sg_err_set(err, EIO, "sqlite %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static int exec_sql(sqlite_store *s, const char *sql, sg_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        sg_err_set(err, EIO, "sqlite %s: %s: %s", s->path, sql, msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* Ends the transaction: COMMIT when ok (0), else (or when the commit
 * fails) ROLLBACK; 0 or -1. */
static int end_tx(sqlite_store *s, int ok, sg_err *err)
{
    if (ok == 0 && exec_sql(s, "COMMIT", err) == 0)
        return 0;
    sg_err dummy;
    exec_sql(s, "ROLLBACK", &dummy);
    return -1;
}

/* One integer a query answers: *out, or -1 for none (no row, or NULL). */
static int query_int(sqlite_store *s, const char *sql, int64_t *out, sg_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "schema version");
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(s, err, "schema version");
}

/* The store's schema version: sg_schema's; 1 for a store of the release
 * before it (its table "events" only); 0 for a new, empty one. */
static int sqlite_version(sqlite_store *s, int *v, sg_err *err)
{
    int64_t has_schema, has_v1, x;
    if (query_int(s, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sg_schema'", &has_schema,
                  err) < 0 ||
        query_int(s, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'", &has_v1, err) < 0)
        return -1;
    if (has_schema < 0) {
        *v = has_v1 > 0 ? 1 : 0;
        return 0;
    }
    if (query_int(s, "SELECT max(version) FROM sg_schema", &x, err) < 0)
        return -1;
    if (x < 1 || x > INT_MAX)
        return sg_err_set(err, EIO, "sqlite %s: sg_schema holds no valid version", s->path);
    *v = (int)x;
    return 0;
}

/* Brings the store to SG_STORE_SCHEMA_VERSION in one transaction (a new
 * store too); a store newer than that is refused, untouched. */
static int sqlite_migrate(sqlite_store *s, sg_err *err)
{
    if (exec_sql(s, "BEGIN IMMEDIATE", err) < 0)
        return -1;
    int v = 0;
    int r = sqlite_version(s, &v, err) < 0 || sg_store_schema_check(v, s->path, err) < 0 ? -1 : 0;
    for (int k = v; r == 0 && k < SG_STORE_SCHEMA_VERSION; k++)
        r = exec_sql(s, schema_steps[k], err);
    char set[96];
    snprintf(set, sizeof set, "DELETE FROM sg_schema; INSERT INTO sg_schema (version) VALUES (%d);",
             SG_STORE_SCHEMA_VERSION);
    if (r == 0 && v < SG_STORE_SCHEMA_VERSION)
        r = exec_sql(s, set, err);
    return end_tx(s, r, err);
}

static void bind_key(sqlite3_stmt *st, const sg_store_row *r)
{
    sqlite3_bind_text(st, 1, r->learner, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->task, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->sandbox, -1, SQLITE_STATIC);
}

/* One row through an insert statement (insert or insert_new). */
static int insert_row(sqlite_store *s, sqlite3_stmt *st, const sg_store_row *r, sg_err *err)
{
    bind_key(st, r);
    sqlite3_bind_int64(st, 4, r->seq);
    sqlite3_bind_text(st, 5, r->kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, r->ts, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, r->received, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, r->payload, (int)r->payload_len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : db_fail(s, err, "insert");
}

/* The rows through the insert statement, in the open transaction. */
static int insert_rows(sqlite_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err)
{
    size_t added = 0;
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        r = insert_row(s, s->insert, &rows[i], err);
        added += (size_t)sqlite3_changes(s->db);
    }
    *inserted = added;
    return r;
}

static int sqlite_put(sg_store *base, const sg_store_row *rows, size_t n, size_t *inserted,
                      sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    if (exec_sql(s, "BEGIN IMMEDIATE", err) < 0)
        return -1;
    size_t added = 0;
    if (end_tx(s, insert_rows(s, rows, n, &added, err), err) < 0)
        return -1;
    *inserted = added;
    return 0;
}

static int sqlite_load_begin(sg_store *base, sg_err *err)
{
    return exec_sql((sqlite_store *)base, "BEGIN IMMEDIATE", err);
}

static int sqlite_load_put(sg_store *base, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err)
{
    return insert_rows((sqlite_store *)base, rows, n, inserted, err);
}

static int sqlite_load_end(sg_store *base, bool commit, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    if (commit)
        return end_tx(s, 0, err);
    sg_err dummy;
    exec_sql(s, "ROLLBACK", &dummy);
    return 0;
}

static int judge_max_seq(void *ctx, const sg_store_row *rows, size_t i, int64_t *max,
                         sg_err *err)
{
    sqlite_store *s = ctx;
    sqlite3_stmt *st = s->maxseq;
    bind_key(st, &rows[i]);
    int rc = sqlite3_step(st);
    *max = rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
               ? sqlite3_column_int64(st, 0)
               : -1;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(s, err, "highest seq");
}

static int judge_stored(void *ctx, const sg_store_row *rows, size_t i, int *same, sg_err *err)
{
    sqlite_store *s = ctx;
    sqlite3_stmt *st = s->getrow;
    bind_key(st, &rows[i]);
    sqlite3_bind_int64(st, 4, rows[i].seq);
    int rc = sqlite3_step(st);
    *same = -1;
    if (rc == SQLITE_ROW)
        *same = sg_store_row_same(&rows[i], (const char *)sqlite3_column_text(st, 0),
                                  (const char *)sqlite3_column_text(st, 1),
                                  (size_t)sqlite3_column_bytes(st, 1));
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(s, err, "stored row");
}

static const sg_store_judge_ops sqlite_judge = {judge_max_seq, judge_stored};

static int sqlite_append(sg_store *base, const sg_store_row *rows, size_t n, uint8_t *verdicts,
                         size_t *inserted, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    /* IMMEDIATE: the write lock before the reads the verdicts rest on. */
    if (exec_sql(s, "BEGIN IMMEDIATE", err) < 0)
        return -1;
    size_t added = 0;
    int r = base->in_tx ? base->in_tx(base, base->in_tx_ud, err) : 0;
    if (r == 0)
        r = sg_store_judge(rows, n, verdicts, &sqlite_judge, s, err);
    for (size_t i = 0; i < n && r == 0; i++) {
        if (verdicts[i] != SG_STORE_NEW)
            continue;
        r = insert_row(s, s->insert_new, &rows[i], err);
        added++;
    }
    if (end_tx(s, r, err) < 0)
        return -1;
    *inserted = added;
    return 0;
}

static int sqlite_contiguous(sg_store *base, const char *learner, const char *task,
                             const char *sandbox, int64_t *seq, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->after;
    int64_t cur = *seq < -1 ? -1 : *seq;
    sqlite3_bind_text(st, 1, learner, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, task, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, sandbox, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, cur);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t v = sqlite3_column_int64(st, 0);
        if (v != cur + 1)
            break; /* a gap: the stream is contiguous only up to cur */
        cur = v;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return db_fail(s, err, "contiguous seq");
    *seq = cur;
    return 0;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? t : "";
}

/* The row of st (the query's columns) to fn. */
static int scan_row(sqlite3_stmt *st, sg_store_event_fn fn, void *ud)
{
    const char *payload = (const char *)sqlite3_column_text(st, 8);
    sg_store_event e = {
        .id = sqlite3_column_int64(st, 0), .learner = col_text(st, 1), .task = col_text(st, 2),
        .sandbox = col_text(st, 3), .seq = sqlite3_column_int64(st, 4), .kind = col_text(st, 5),
        .ts = col_text(st, 6), .received = col_text(st, 7), .payload = payload,
        .payload_len = payload ? (size_t)sqlite3_column_bytes(st, 8) : 0,
    };
    return fn(ud, &e);
}

static int sqlite_scan(sg_store *base, const sg_store_query *q, sg_store_event_fn fn, void *ud, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    char sql[640] = "SELECT id, learner, task, sandbox, seq, kind, ts, received, payload "
                    "FROM sg_events WHERE 1";
    if (q->learner)
        strcat(sql, " AND learner = ?1");
    if (q->task)
        strcat(sql, " AND task = ?2");
    if (q->sandbox)
        strcat(sql, " AND sandbox = ?3");
    if (q->after_seq >= 0)
        strcat(sql, " AND seq > ?4");
    if (q->after_id >= 0)
        strcat(sql, " AND id > ?5");
    if (q->kinds)
        strcat(sql, " AND instr(',' || ?7 || ',', ',' || kind || ',') > 0");
    if (q->except_kinds)
        strcat(sql, " AND instr(',' || ?8 || ',', ',' || kind || ',') = 0");
    strcat(sql, q->after_id >= 0 ? " ORDER BY id" : " ORDER BY learner, task, sandbox, seq");
    strcat(sql, " LIMIT ?6");
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "query");
    size_t limit = q->limit == 0 ? SG_STORE_QUERY_MAX : q->limit > SG_STORE_QUERY_MAX + 1 ? SG_STORE_QUERY_MAX + 1 : q->limit;
    if (q->learner)
        sqlite3_bind_text(st, 1, q->learner, -1, SQLITE_STATIC);
    if (q->task)
        sqlite3_bind_text(st, 2, q->task, -1, SQLITE_STATIC);
    if (q->sandbox)
        sqlite3_bind_text(st, 3, q->sandbox, -1, SQLITE_STATIC);
    if (q->after_seq >= 0)
        sqlite3_bind_int64(st, 4, q->after_seq);
    if (q->after_id >= 0)
        sqlite3_bind_int64(st, 5, q->after_id);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)limit);
    if (q->kinds)
        sqlite3_bind_text(st, 7, q->kinds, -1, SQLITE_STATIC);
    if (q->except_kinds)
        sqlite3_bind_text(st, 8, q->except_kinds, -1, SQLITE_STATIC);
    size_t budget = q->max_bytes ? q->max_bytes : SG_STORE_PAGE_BYTES, bytes = 0;
    if (q->cut)
        *q->cut = false;
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (bytes >= budget) {
            if (q->cut)
                *q->cut = true;
            rc = SQLITE_DONE;
            break;
        }
        bytes += (size_t)sqlite3_column_bytes(st, 8);
        if (scan_row(st, fn, ud) < 0) {
            sqlite3_finalize(st);
            return sg_err_set(err, ENOMEM, "sqlite %s: query: out of memory", s->path);
        }
        n++;
    }
    if (rc != SQLITE_DONE)
        n = db_fail(s, err, "query");
    sqlite3_finalize(st);
    return n;
}

/* Per stream: its counts, and its last test_result's exit code and last
 * `sandbox` state by the (learner, task, sandbox, seq) key from its end. */
#define SESSION_LAST(what, kind)                                                               \
    "(SELECT json_extract(t.payload, '$." what "') FROM sg_events t WHERE t.learner = e.learner"   \
    " AND t.task = e.task AND t.sandbox = e.sandbox AND t.kind = '" kind "'"                    \
    " ORDER BY t.seq DESC LIMIT 1)"

static json_t *sqlite_sessions(sg_store *base, const sg_store_query *q, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    const char *sql =
        "SELECT learner, task, sandbox, min(id), count(*), min(ts), max(ts),"
        " sum(kind IN ('run_result', 'test_result')), sum(kind = 'session_abort'),"
        " " SESSION_LAST("exit_code", "test_result") ", " SESSION_LAST("state", "sandbox") " FROM sg_events e"
        " WHERE (?1 IS NULL OR learner = ?1) AND (?2 IS NULL OR task = ?2) AND (?3 IS NULL OR sandbox = ?3)"
        " GROUP BY learner, task, sandbox HAVING min(id) > ?4 ORDER BY min(id) LIMIT ?5";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        db_fail(s, err, "list sessions");
        return NULL;
    }
    const char *f[] = {q->learner, q->task, q->sandbox};
    for (int i = 0; i < 3; i++)
        if (f[i])
            sqlite3_bind_text(st, i + 1, f[i], -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, q->after_id);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)(q->limit ? q->limit : SG_STORE_QUERY_MAX));
    json_t *arr = json_array();
    int rc;
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id[3];
        for (int i = 0; i < 3; i++)
            id[i] = (const char *)sqlite3_column_text(st, i);
        json_array_append_new(
            arr, sg_store_session_row(id, sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
                                      (const char *)sqlite3_column_text(st, 5),
                                      (const char *)sqlite3_column_text(st, 6), sqlite3_column_int64(st, 7),
                                      sqlite3_column_int64(st, 8), (const char *)sqlite3_column_text(st, 9),
                                      (const char *)sqlite3_column_text(st, 10)));
    }
    if (arr && rc != SQLITE_DONE) {
        db_fail(s, err, "list sessions");
        json_decref(arr);
        arr = NULL;
    }
    sqlite3_finalize(st);
    return arr;
}

static json_t *sqlite_sandboxes(sg_store *base, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    /* The groups from the unique index alone, then two lookups a stream:
     * min/max(received) read every row (90 ms of CPU for 200,000 events,
     * as long as the export that asked for the list took to dump them). */
    const char *sql = "SELECT g.learner, g.task, g.sandbox, g.n, g.lo, g.hi,"
                      " (SELECT received FROM sg_events WHERE learner = g.learner AND task = g.task"
                      "  AND sandbox = g.sandbox AND seq = g.lo),"
                      " (SELECT received FROM sg_events WHERE learner = g.learner AND task = g.task"
                      "  AND sandbox = g.sandbox AND seq = g.hi)"
                      " FROM (SELECT learner, task, sandbox, count(*) AS n, min(seq) AS lo, max(seq) AS hi,"
                      "  min(id) AS first FROM sg_events GROUP BY learner, task, sandbox) AS g ORDER BY g.first";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        db_fail(s, err, "list sandboxes");
        return NULL;
    }
    json_t *arr = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *l = (const char *)sqlite3_column_text(st, 0);
        const char *t = (const char *)sqlite3_column_text(st, 1);
        const char *sb = (const char *)sqlite3_column_text(st, 2);
        int64_t count = sqlite3_column_int64(st, 3), lo = sqlite3_column_int64(st, 4),
                hi = sqlite3_column_int64(st, 5);
        int64_t acked = -1;
        if (lo == 0 && count == hi + 1)
            acked = hi; /* no gap: skip the scan */
        else if (lo == 0 && sqlite_contiguous(base, l, t, sb, &acked, err) < 0)
            break;
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s}", "learner", l,
                           "task", t, "sandbox", sb, "events", (json_int_t)count, "first_seq",
                           (json_int_t)lo, "last_seq", (json_int_t)hi, "acked_seq",
                           (json_int_t)acked, "first_received",
                           (const char *)sqlite3_column_text(st, 6), "last_received",
                           (const char *)sqlite3_column_text(st, 7)));
    }
    if (rc != SQLITE_DONE) {
        if (rc != SQLITE_ROW)
            db_fail(s, err, "list sandboxes");
        json_decref(arr);
        arr = NULL;
    }
    sqlite3_finalize(st);
    return arr;
}

/* A query's one integer (what: for messages). */
static int sqlite_scalar(sg_store *base, const char *sql, const char *what, int64_t *v, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_fail(s, err, what);
    }
    *v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int sqlite_last_id(sg_store *base, int64_t *id, sg_err *err)
{
    return sqlite_scalar(base, "SELECT coalesce(max(id), 0) FROM sg_events", "last id", id, err);
}

static int sqlite_purges(sg_store *base, int64_t *n, sg_err *err)
{
    return sqlite_scalar(base, "SELECT n FROM sg_purges", "purges", n, err);
}

/* One statement on one token id: a row (*yes) or none. */
static int revoked_stmt(sqlite_store *s, const char *sql, const char *token_id, bool *yes, sg_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "revoked tokens");
    sqlite3_bind_text(st, 1, token_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    *yes = rc == SQLITE_ROW;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(s, err, "revoked tokens");
}

static int sqlite_revoke(sg_store *base, const char *token_id, sg_err *err)
{
    bool dummy;
    return revoked_stmt((sqlite_store *)base,
                        "INSERT OR IGNORE INTO sg_revoked_tokens (id, revoked)"
                        " VALUES (?1, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                        token_id, &dummy, err);
}

static int sqlite_revoked(sg_store *base, const char *token_id, bool *yes, sg_err *err)
{
    return revoked_stmt((sqlite_store *)base, "SELECT 1 FROM sg_revoked_tokens WHERE id = ?1", token_id, yes,
                        err);
}

static json_t *sqlite_revoked_ids(sg_store *base, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM sg_revoked_tokens ORDER BY id", -1, &st, NULL) != SQLITE_OK) {
        db_fail(s, err, "revoked tokens");
        return NULL;
    }
    json_t *ids = json_array();
    int rc;
    while (ids && (rc = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(ids, json_string((const char *)sqlite3_column_text(st, 0)));
    sqlite3_finalize(st);
    if (ids && rc != SQLITE_DONE) {
        json_decref(ids);
        ids = NULL;
        db_fail(s, err, "revoked tokens");
    } else if (!ids) {
        sg_err_set(err, ENOMEM, "out of memory");
    }
    return ids;
}

static int sqlite_host_put(sg_store *base, const char *name, const char *info, int64_t last_seen, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO sg_hosts (name, info, last_seen) VALUES (?1, ?2, ?3)"
                           " ON CONFLICT (name) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "register a host");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, info, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, last_seen);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_fail(s, err, "register a host");
}

static json_t *sqlite_hosts(sg_store *base, const sg_store_hosts_query *q, sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT name, info, last_seen FROM sg_hosts WHERE (?1 IS NULL OR name = ?1)"
                           " AND (?2 IS NULL OR name > ?2)"
                           " AND (?3 IS NULL OR EXISTS (SELECT 1 FROM json_each(info, '$.sandboxes') AS sb"
                           "  WHERE substr(json_extract(sb.value, '$.id'), 1, length(?3)) = ?3))"
                           " ORDER BY name LIMIT 256", /* SG_STORE_HOSTS_MAX */
                           -1, &st, NULL) != SQLITE_OK) {
        db_fail(s, err, "list hosts");
        return NULL;
    }
    const char *binds[] = {q->name, q->after, q->sandbox};
    for (int i = 0; i < 3; i++)
        if (binds[i])
            sqlite3_bind_text(st, i + 1, binds[i], -1, SQLITE_STATIC);
    json_t *arr = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = sg_store_host_row((const char *)sqlite3_column_text(st, 0),
                                        (const char *)sqlite3_column_text(st, 1), sqlite3_column_int64(st, 2));
        if (row)
            json_array_append_new(arr, row);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        db_fail(s, err, "list hosts");
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static int sqlite_hosts_count(sg_store *base, int64_t now, int stale_beats, int64_t *known, int64_t *stale,
                              sg_err *err)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT count(*), coalesce(sum(?1 - last_seen > ?2 * coalesce(json_extract(info,"
                           " '$.heartbeat_s'), 1)), 0) FROM sg_hosts",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "count hosts");
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int64(st, 2, stale_beats);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *known = sqlite3_column_int64(st, 0);
        *stale = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : db_fail(s, err, "count hosts");
}

static void sqlite_close(sg_store *base)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_finalize(s->insert);
    sqlite3_finalize(s->after);
    sqlite3_finalize(s->insert_new);
    sqlite3_finalize(s->maxseq);
    sqlite3_finalize(s->getrow);
    sqlite3_close(s->db);
    free(s->path);
    free(s);
}

static const sg_store_ops sqlite_ops = {
    .put = sqlite_put,
    .load_begin = sqlite_load_begin,
    .load_put = sqlite_load_put,
    .load_end = sqlite_load_end,
    .append = sqlite_append,
    .contiguous = sqlite_contiguous,
    .scan = sqlite_scan,
    .sandboxes = sqlite_sandboxes,
    .sessions = sqlite_sessions,
    .last_id = sqlite_last_id,
    .revoke = sqlite_revoke,
    .revoked = sqlite_revoked,
    .revoked_ids = sqlite_revoked_ids,
    .purges = sqlite_purges,
    .host_put = sqlite_host_put,
    .hosts = sqlite_hosts,
    .hosts_count = sqlite_hosts_count,
    .close = sqlite_close,
};

/* Learner data: a new store's file is created 0600 here (SQLite would use
 * 0644 less the umask); SQLite gives its -wal and -shm files the database
 * file's mode. An existing file keeps its mode and is not opened here:
 * closing any fd of a file drops every POSIX lock the process holds on it
 * (fcntl(2)), so a second store of a file this process already has open
 * (the ingest opens a reader and a writer) would silently lose the first
 * one's SQLite locks; another process's connection, closing, then finds
 * itself the last one and checkpoints and deletes the WAL under the
 * running ingest, whose later commits no reader sees. A symlink is refused
 * (as O_NOFOLLOW did). */
static int create_0600(const char *path, sg_err *err)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return sg_err_set(err, ELOOP, "sqlite %s: create: a symbolic link", path);
        return 0;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) /* EEXIST: made meanwhile; nothing to do */
        return sg_err_sys(err, "sqlite %s: create", path);
    if (fd >= 0)
        close(fd); /* a new file: no lock of ours on it yet */
    return 0;
}

sg_store *sg_store_sqlite_open(const char *path, sg_err *err)
{
    /* The store's directory must exist: a typo in --store must not make
     * a new tree somewhere (the default's directory is made by the ingest
     * command). */
    sg_autofree char *dircopy = strdup(path);
    if (!dircopy) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    struct stat dst;
    const char *dir = dirname(dircopy);
    if (stat(dir, &dst) < 0 || !S_ISDIR(dst.st_mode)) {
        sg_err_set(err, ENOENT, "the store's directory %s does not exist", dir);
        return NULL;
    }
    sqlite_store *s = calloc(1, sizeof *s);
    if (!s) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    s->base.ops = &sqlite_ops;
    s->path = strdup(path);
    if (create_0600(path, err) < 0) {
        sqlite_close(&s->base);
        return NULL;
    }
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    if (rc != SQLITE_OK || !s->path) {
        sg_err_set(err, EIO, "sqlite %s: open: %s", path,
                   s->db ? sqlite3_errmsg(s->db) : "out of memory");
        sqlite_close(&s->base);
        return NULL;
    }
    sqlite3_busy_timeout(s->db, 10000);
    if (exec_sql(s, "PRAGMA journal_mode=WAL", err) < 0 ||
        exec_sql(s, "PRAGMA synchronous=FULL", err) < 0 || sqlite_migrate(s, err) < 0) {
        sqlite_close(&s->base);
        return NULL;
    }
    if (sqlite3_prepare_v3(s->db,
                           "INSERT OR IGNORE INTO sg_events (learner, task, sandbox, seq, kind,"
                           " ts, received, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->insert, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(s->db,
                           "SELECT seq FROM sg_events WHERE learner = ?1 AND task = ?2"
                           " AND sandbox = ?3 AND seq > ?4 ORDER BY seq",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->after, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(s->db,
                           "INSERT INTO sg_events (learner, task, sandbox, seq, kind,"
                           " ts, received, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->insert_new, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(s->db,
                           "SELECT max(seq) FROM sg_events WHERE learner = ?1 AND task = ?2"
                           " AND sandbox = ?3",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->maxseq, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(s->db,
                           "SELECT kind, payload FROM sg_events WHERE learner = ?1"
                           " AND task = ?2 AND sandbox = ?3 AND seq = ?4",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->getrow, NULL) != SQLITE_OK) {
        db_fail(s, err, "prepare");
        sqlite_close(&s->base);
        return NULL;
    }
    return &s->base;
}

sqlite3 *sg_store_sqlite_db(sg_store *base, const char **path)
{
    if (!base || base->ops != &sqlite_ops)
        return NULL;
    sqlite_store *s = (sqlite_store *)base;
    if (path)
        *path = s->path;
    return s->db;
}

/* store_contents: the contents and recordings tables of both backends
 * (store_contents.h). The parts are plain rows; every put is INSERT ... OR
 * IGNORE / ON CONFLICT DO NOTHING, so a replayed part costs nothing. */
#include "ingest/store_contents.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "ingest/store_backend.h"

bool sg_store_sha256_valid(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    for (size_t i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* ------------------------------------------------------------------ SQLite */

static void finalizep(sqlite3_stmt **st)
{
    sqlite3_finalize(*st);
}
#define sq_auto __attribute__((cleanup(finalizep)))

static int sq_fail(sqlite3 *db, const char *path, sg_err *err, const char *what)
{
    return sg_err_set(err, EIO, "sqlite %s: %s: %s", path, what, sqlite3_errmsg(db));
}

static int sq_prepare(sqlite3 *db, const char *path, const char *sql, sqlite3_stmt **st,
                      sg_err *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return sq_fail(db, path, err, "prepare");
    return 0;
}

/* Binds text params 1..nt, then an int64 and a blob after them. */
static int sq_step_put(sqlite3_stmt *st, const char *const *texts, int nt, int64_t off,
                       const void *data, size_t len)
{
    sqlite3_reset(st);
    for (int i = 0; i < nt; i++)
        sqlite3_bind_text(st, i + 1, texts[i], -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, nt + 1, off);
    if (data)
        sqlite3_bind_blob64(st, nt + 2, len ? data : "", len, SQLITE_STATIC);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
}

/* Commit durability of the next transaction (SQLite's synchronous). */
static void sq_sync_mode(sqlite3 *db, bool durable)
{
    sqlite3_exec(db, durable ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
}

static int sq_put_contents(sqlite3 *db, const char *path, const sg_content_part *p, size_t n,
                           bool own_tx, sg_err *err)
{
    sq_auto sqlite3_stmt *head = NULL;
    sq_auto sqlite3_stmt *part = NULL;
    if (sq_prepare(db, path, "INSERT OR IGNORE INTO sg_contents (sha256, size) VALUES (?1, ?2)",
                   &head, err) < 0 ||
        sq_prepare(db, path, "INSERT OR IGNORE INTO sg_content_parts (sha256, off, data)"
                   " VALUES (?1, ?2, ?3)", &part, err) < 0)
        return -1;
    if (own_tx && sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return sq_fail(db, path, err, "begin");
    for (size_t i = 0; i < n; i++) {
        const char *k[1] = {p[i].sha256};
        if (sq_step_put(head, k, 1, p[i].size, NULL, 0) < 0 ||
            sq_step_put(part, k, 1, p[i].off, p[i].data, p[i].len) < 0) {
            sq_fail(db, path, err, "put contents");
            if (own_tx)
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    if (!own_tx)
        return 0;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        sq_fail(db, path, err, "commit contents");
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return 0;
}

static int sq_put_casts(sqlite3 *db, const char *path, const sg_cast_part *p, size_t n,
                        bool own_tx, sg_err *err)
{
    sq_auto sqlite3_stmt *st = NULL;
    if (sq_prepare(db, path, "INSERT OR IGNORE INTO sg_casts (learner, task, sandbox, session,"
                   " off, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)", &st, err) < 0)
        return -1;
    if (own_tx && sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return sq_fail(db, path, err, "begin");
    for (size_t i = 0; i < n; i++) {
        const char *k[4] = {p[i].learner, p[i].task, p[i].sandbox, p[i].session};
        if (sq_step_put(st, k, 4, p[i].off, p[i].data, p[i].len) < 0) {
            sq_fail(db, path, err, "put recordings");
            if (own_tx)
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    if (!own_tx)
        return 0;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        sq_fail(db, path, err, "commit recordings");
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return 0;
}

static int sq_stat(sqlite3 *db, const char *path, const char *sha, int64_t *size, sg_err *err)
{
    sq_auto sqlite3_stmt *st = NULL;
    if (sq_prepare(db, path, "SELECT size, (SELECT coalesce(sum(length(data)), 0)"
                   " FROM sg_content_parts WHERE sha256 = ?1) FROM sg_contents WHERE sha256 = ?1",
                   &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, sha, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return 0;
    if (rc != SQLITE_ROW)
        return sq_fail(db, path, err, "content");
    *size = sqlite3_column_int64(st, 0);
    return sqlite3_column_int64(st, 1) == *size ? 1 : 0;
}

/* Hands out the blob column 0 of each row, checking that column 1 (the
 * offset) follows on. */
static int sq_read_parts(sqlite3 *db, const char *path, sqlite3_stmt *st, sg_store_bytes_fn fn,
                         void *ud, int64_t *total, sg_err *err)
{
    int rc;
    *total = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *d = sqlite3_column_blob(st, 0);
        int64_t len = sqlite3_column_bytes(st, 0);
        if (sqlite3_column_int64(st, 1) != *total)
            return sg_err_set(err, EIO, "sqlite %s: parts do not follow on at %" PRId64, path, *total);
        if (fn(ud, d, (size_t)len) < 0)
            return sg_err_set(err, ECANCELED, "stopped by the reader");
        *total += len;
    }
    return rc == SQLITE_DONE ? 0 : sq_fail(db, path, err, "read parts");
}

/* ---------------------------------------------------------------- PostgreSQL */

static int pq_fail(const char *where, PGresult *r, sg_err *err, const char *what)
{
    int rc = sg_err_set(err, EIO, "%s: %s: %s", where, what,
                        r ? PQresultErrorMessage(r) : "no result");
    PQclear(r);
    return rc;
}

/* One statement with text params and a final binary one (data, when len
 * given); command or tuples OK. Returns the result (caller clears) or NULL. */
static PGresult *pq_exec(PGconn *c, const char *where, const char *sql, int n,
                         const char *const *vals, const int *lens, const int *fmts, int result_fmt,
                         sg_err *err)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, lens, fmts, result_fmt);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        pq_fail(where, r, err, sql);
        return NULL;
    }
    return r;
}

static int pq_simple(PGconn *c, const char *where, const char *sql, sg_err *err)
{
    PGresult *r = pq_exec(c, where, sql, 0, NULL, NULL, NULL, 0, err);
    PQclear(r);
    return r ? 0 : -1;
}

static int pq_put_contents(PGconn *c, const char *where, const sg_content_part *p, size_t n,
                           bool durable, sg_err *err)
{
    if (pq_simple(c, where, "BEGIN", err) < 0 ||
        (!durable && pq_simple(c, where, "SET LOCAL synchronous_commit = off", err) < 0))
        return -1;
    for (size_t i = 0; i < n; i++) {
        char size[24], off[24];
        snprintf(size, sizeof size, "%" PRId64, p[i].size);
        snprintf(off, sizeof off, "%" PRId64, p[i].off);
        const char *v[3] = {p[i].sha256, size, NULL};
        PGresult *r = pq_exec(c, where, "INSERT INTO sg_contents (sha256, size) VALUES ($1, $2)"
                              " ON CONFLICT DO NOTHING", 2, v, NULL, NULL, 0, err);
        PQclear(r);
        const char *w[3] = {p[i].sha256, off, p[i].len ? p[i].data : ""};
        int lens[3] = {0, 0, (int)p[i].len}, fmts[3] = {0, 0, 1};
        PGresult *r2 = r ? pq_exec(c, where, "INSERT INTO sg_content_parts (sha256, off, data)"
                                   " VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", 3, w, lens, fmts,
                                   0, err) : NULL;
        PQclear(r2);
        if (!r2) {
            PQclear(PQexec(c, "ROLLBACK"));
            return -1;
        }
    }
    return pq_simple(c, where, "COMMIT", err);
}

static int pq_put_casts(PGconn *c, const char *where, const sg_cast_part *p, size_t n, bool durable,
                        sg_err *err)
{
    if (pq_simple(c, where, "BEGIN", err) < 0 ||
        (!durable && pq_simple(c, where, "SET LOCAL synchronous_commit = off", err) < 0))
        return -1;
    for (size_t i = 0; i < n; i++) {
        char off[24];
        snprintf(off, sizeof off, "%" PRId64, p[i].off);
        const char *v[6] = {p[i].learner, p[i].task, p[i].sandbox, p[i].session, off,
                            p[i].len ? p[i].data : ""};
        int lens[6] = {0, 0, 0, 0, 0, (int)p[i].len}, fmts[6] = {0, 0, 0, 0, 0, 1};
        PGresult *r = pq_exec(c, where, "INSERT INTO sg_casts (learner, task, sandbox, session,"
                              " off, data) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                              6, v, lens, fmts, 0, err);
        PQclear(r);
        if (!r) {
            PQclear(PQexec(c, "ROLLBACK"));
            return -1;
        }
    }
    return pq_simple(c, where, "COMMIT", err);
}

static int pq_stat(PGconn *c, const char *where, const char *sha, int64_t *size, sg_err *err)
{
    const char *v[1] = {sha};
    PGresult *r = pq_exec(c, where, "SELECT size, (SELECT coalesce(sum(length(data)), 0)"
                          " FROM sg_content_parts WHERE sha256 = $1) FROM sg_contents"
                          " WHERE sha256 = $1", 1, v, NULL, NULL, 0, err);
    if (!r)
        return -1;
    int found = PQntuples(r) == 1;
    if (found)
        *size = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    int whole = found && strtoll(PQgetvalue(r, 0, 1), NULL, 10) == *size;
    PQclear(r);
    return whole;
}

/* Parts one query at a time (data in binary; the offset as text), so the
 * reader's memory is one part, not the content. */
static int pq_read_parts(PGconn *c, const char *where, const char *sql, int n,
                         const char *const *keys, sg_store_bytes_fn fn, void *ud, int64_t *total,
                         sg_err *err)
{
    *total = 0;
    for (;;) {
        char after[24];
        snprintf(after, sizeof after, "%" PRId64, *total);
        const char *v[8];
        for (int i = 0; i < n; i++)
            v[i] = keys[i];
        v[n] = after;
        int fmts[8] = {0};
        PGresult *r = PQexecParams(c, sql, n + 1, NULL, v, NULL, fmts, 1);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            return pq_fail(where, r, err, "read parts");
        if (PQntuples(r) == 0) {
            PQclear(r);
            return 0;
        }
        int len = PQgetlength(r, 0, 0);
        int rc = len == 0 ? 0 : fn(ud, PQgetvalue(r, 0, 0), (size_t)len);
        PQclear(r);
        if (rc < 0)
            return sg_err_set(err, ECANCELED, "stopped by the reader");
        if (len == 0)
            return 0;
        *total += len;
    }
}

/* sg_store_contents_each on SQLite: one read transaction, its two
 * statements prepared once (three statements prepared a content, each its
 * own transaction, were most of a batch's time). */
static int sq_contents_each(sqlite3 *db, const char *path, const char *const *sha, size_t n,
                            sg_store_content_fn head, sg_store_bytes_fn fn, void *ud, sg_err *err)
{
    sq_auto sqlite3_stmt *stat = NULL;
    sq_auto sqlite3_stmt *parts = NULL;
    if (sq_prepare(db, path, "SELECT size, (SELECT coalesce(sum(length(data)), 0)"
                   " FROM sg_content_parts WHERE sha256 = ?1) FROM sg_contents WHERE sha256 = ?1",
                   &stat, err) < 0 ||
        sq_prepare(db, path, "SELECT data, off FROM sg_content_parts WHERE sha256 = ?1 ORDER BY off",
                   &parts, err) < 0)
        return -1;
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return sq_fail(db, path, err, "begin");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        sqlite3_reset(stat);
        sqlite3_bind_text(stat, 1, sha[i], -1, SQLITE_STATIC);
        int r = sqlite3_step(stat);
        int64_t size = r == SQLITE_ROW ? sqlite3_column_int64(stat, 0) : -1, total = 0;
        bool whole = r == SQLITE_ROW && sqlite3_column_int64(stat, 1) == size;
        if (r != SQLITE_ROW && r != SQLITE_DONE) {
            rc = sq_fail(db, path, err, "content");
        } else if (head(ud, sha[i], whole ? size : -1) < 0) {
            rc = sg_err_set(err, ECANCELED, "stopped by the reader");
        } else if (whole) {
            sqlite3_reset(parts);
            sqlite3_bind_text(parts, 1, sha[i], -1, SQLITE_STATIC);
            rc = sq_read_parts(db, path, parts, fn, ud, &total, err);
            if (rc == 0 && total != size)
                rc = sg_err_set(err, EIO, "content %.64s: %" PRId64 " of %" PRId64 " bytes", sha[i], total, size);
        }
    }
    sqlite3_reset(stat);
    sqlite3_reset(parts);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL); /* a read: nothing to keep or lose */
    return rc;
}

/* ------------------------------------------------------------------ public */

static int put_contents(sg_store *s, const sg_content_part *parts, size_t n, bool durable, sg_err *err)
{
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    if (db) {
        sq_sync_mode(db, durable);
        int r = sq_put_contents(db, path, parts, n, true, err);
        sq_sync_mode(db, true);
        return r;
    }
    err->code = 0;
    PGconn *c = sg_store_pg_conn(s, &path, err);
    return c ? pq_put_contents(c, path, parts, n, durable, err) : err->code ? -1 :
           sg_err_set(err, ENOTSUP, "contents: unknown store backend");
}

static int put_casts(sg_store *s, const sg_cast_part *parts, size_t n, bool durable, sg_err *err)
{
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    if (db) {
        sq_sync_mode(db, durable);
        int r = sq_put_casts(db, path, parts, n, true, err);
        sq_sync_mode(db, true);
        return r;
    }
    err->code = 0;
    PGconn *c = sg_store_pg_conn(s, &path, err);
    return c ? pq_put_casts(c, path, parts, n, durable, err) : err->code ? -1 :
           sg_err_set(err, ENOTSUP, "recordings: unknown store backend");
}

int sg_store_put_contents(sg_store *s, const sg_content_part *parts, size_t n, sg_err *err)
{
    return put_contents(s, parts, n, true, err);
}

int sg_store_put_casts(sg_store *s, const sg_cast_part *parts, size_t n, sg_err *err)
{
    return put_casts(s, parts, n, true, err);
}

int sg_store_put_blobs_in_tx(sg_store *s, const sg_content_part *cp, size_t nc,
                             const sg_cast_part *kp, size_t nk, sg_err *err)
{
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    if (!db)
        return sg_err_set(err, ENOTSUP, "blobs in a transaction: SQLite only");
    return (nc && sq_put_contents(db, path, cp, nc, false, err) < 0) ||
           (nk && sq_put_casts(db, path, kp, nk, false, err) < 0) ? -1 : 0;
}

int sg_store_put_contents_lazy(sg_store *s, const sg_content_part *parts, size_t n, sg_err *err)
{
    return put_contents(s, parts, n, false, err);
}

int sg_store_put_casts_lazy(sg_store *s, const sg_cast_part *parts, size_t n, sg_err *err)
{
    return put_casts(s, parts, n, false, err);
}

int sg_store_content_stat(sg_store *s, const char *sha256, int64_t *size, sg_err *err)
{
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    if (db)
        return sq_stat(db, path, sha256, size, err);
    err->code = 0;
    PGconn *c = sg_store_pg_conn(s, &path, err);
    return c ? pq_stat(c, path, sha256, size, err) : err->code ? -1 :
           sg_err_set(err, ENOTSUP, "contents: unknown store backend");
}

int sg_store_content_read(sg_store *s, const char *sha256, sg_store_bytes_fn fn, void *ud,
                          sg_err *err)
{
    int64_t size = 0, total = 0;
    int w = sg_store_content_stat(s, sha256, &size, err);
    if (w <= 0)
        return w < 0 ? -1 : sg_err_set(err, ENOENT, "content %.64s is not in the store", sha256);
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    int r;
    if (db) {
        sq_auto sqlite3_stmt *st = NULL;
        if (sq_prepare(db, path, "SELECT data, off FROM sg_content_parts WHERE sha256 = ?1"
                       " ORDER BY off", &st, err) < 0)
            return -1;
        sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
        r = sq_read_parts(db, path, st, fn, ud, &total, err);
    } else {
        PGconn *c = sg_store_pg_conn(s, &path, err);
        if (!c)
            return -1;
        const char *k[1] = {sha256};
        r = pq_read_parts(c, path, "SELECT data FROM sg_content_parts WHERE sha256 = $1"
                          " AND off = $2", 1, k, fn, ud, &total, err);
    }
    if (r == 0 && total != size)
        return sg_err_set(err, EIO, "content %.64s: %" PRId64 " of %" PRId64 " bytes", sha256,
                          total, size);
    return r;
}

int sg_store_contents_each(sg_store *s, const char *const *sha256, size_t n, sg_store_content_fn head,
                           sg_store_bytes_fn fn, void *ud, sg_err *err)
{
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    if (db)
        return sq_contents_each(db, path, sha256, n, head, fn, ud, err);
    for (size_t i = 0; i < n; i++) {
        int64_t size = 0;
        int w = sg_store_content_stat(s, sha256[i], &size, err);
        if (w < 0)
            return -1;
        if (head(ud, sha256[i], w ? size : -1) < 0)
            return sg_err_set(err, ECANCELED, "stopped by the reader");
        if (w && sg_store_content_read(s, sha256[i], fn, ud, err) < 0)
            return -1;
    }
    return 0;
}

int sg_store_cast_read(sg_store *s, const char *learner, const char *task, const char *sandbox,
                       const char *session, sg_store_bytes_fn fn, void *ud, sg_err *err)
{
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    int64_t total = 0;
    int r;
    if (db) {
        sq_auto sqlite3_stmt *st = NULL;
        if (sq_prepare(db, path, "SELECT data, off FROM sg_casts WHERE learner = ?1 AND task = ?2"
                       " AND sandbox = ?3 AND session = ?4 ORDER BY off", &st, err) < 0)
            return -1;
        const char *k[4] = {learner, task, sandbox, session};
        for (int i = 0; i < 4; i++)
            sqlite3_bind_text(st, i + 1, k[i], -1, SQLITE_STATIC);
        r = sq_read_parts(db, path, st, fn, ud, &total, err);
    } else {
        PGconn *c = sg_store_pg_conn(s, &path, err);
        if (!c)
            return -1;
        const char *k[4] = {learner, task, sandbox, session};
        r = pq_read_parts(c, path, "SELECT data FROM sg_casts WHERE learner = $1 AND task = $2"
                          " AND sandbox = $3 AND session = $4 AND off = $5", 4, k, fn, ud, &total,
                          err);
    }
    if (r == 0 && total == 0)
        return sg_err_set(err, ENOENT, "no recording %s of sandbox %s in the store", session, sandbox);
    return r;
}

static const char casts_sql_sq[] =
    "SELECT learner, task, sandbox, session, sum(length(data)) FROM sg_casts"
    " WHERE sandbox = ?1 AND (?2 IS NULL OR learner = ?2) AND (?3 IS NULL OR task = ?3)"
    " GROUP BY learner, task, sandbox, session ORDER BY session";
static const char casts_sql_pq[] =
    "SELECT learner, task, sandbox, session, sum(length(data)) FROM sg_casts"
    " WHERE sandbox = $1 AND ($2::text IS NULL OR learner = $2) AND ($3::text IS NULL OR task = $3)"
    " GROUP BY learner, task, sandbox, session ORDER BY session";

static json_t *cast_row(const char *const v[4], int64_t bytes)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:I}", "learner", v[0], "task", v[1], "sandbox", v[2],
                     "session", v[3], "bytes", (json_int_t)bytes);
}

json_t *sg_store_casts(sg_store *s, const char *learner, const char *task, const char *sandbox,
                       sg_err *err)
{
    json_t *out = json_array();
    const char *path;
    sqlite3 *db = sg_store_sqlite_db(s, &path);
    if (db) {
        sq_auto sqlite3_stmt *st = NULL;
        if (sq_prepare(db, path, casts_sql_sq, &st, err) < 0)
            return json_decref(out), NULL;
        sqlite3_bind_text(st, 1, sandbox, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, learner, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, task, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *v[4];
            for (int i = 0; i < 4; i++)
                v[i] = (const char *)sqlite3_column_text(st, i);
            json_array_append_new(out, cast_row(v, sqlite3_column_int64(st, 4)));
        }
        return out;
    }
    PGconn *c = sg_store_pg_conn(s, &path, err);
    const char *k[3] = {sandbox, learner, task};
    PGresult *r = c ? pq_exec(c, path, casts_sql_pq, 3, k, NULL, NULL, 0, err) : NULL;
    if (!r)
        return json_decref(out), NULL;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *v[4] = {PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                            PQgetvalue(r, i, 3)};
        json_array_append_new(out, cast_row(v, strtoll(PQgetvalue(r, i, 4), NULL, 10)));
    }
    PQclear(r);
    return out;
}

/* store_export: purge and retention on both backends (store_export.h). */
#include "ingest/store_export.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ingest/store.h"

/* One WHERE for both backends: $1..$4 are learner, task, sandbox and the
 * cutoff, each NULL for "any". SQLite reads $N as ?N. */
#define PURGE_WHERE                                                                                      \
    " WHERE ($1::text IS NULL OR learner = $1) AND ($2::text IS NULL OR task = $2)"                      \
    " AND ($3::text IS NULL OR sandbox = $3) AND ($4::text IS NULL OR (learner, task, sandbox) IN"        \
    " (SELECT learner, task, sandbox FROM sg_events GROUP BY learner, task, sandbox"                     \
    " HAVING max(received) < $4))"

void sg_store_cutoff(double days, char *buf, size_t len)
{
    time_t t = time(NULL) - (time_t)(days * 86400.0);
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.000000+00:00", base);
}

/* The contents a file_diff names (its content's hash, or the file's) and
 * the recordings (blobs' tables, schema 3): where the store has them,
 * the purged streams' recordings go, and each content the purged events
 * named that no other event names. Only those named: a content that
 * arrived ahead of its event is never taken for an orphan. {C} and {S}
 * are each backend's JSON lookups of the two hashes. */
#define NAMED(where) "SELECT {C} AS s FROM sg_events" where " AND kind = 'file_diff'" \
                     " UNION SELECT {S} FROM sg_events" where " AND kind = 'file_diff'"
#define ORPHANS " WHERE sha256 IN (SELECT s FROM sg_purge_sha) AND sha256 NOT IN" \
                " (SELECT s FROM (" NAMED(" WHERE true") ") r WHERE s IS NOT NULL)"

typedef struct purge_step {
    const char *sql;
    bool contents; /* only where the store has the contents' tables */
    bool counts;   /* its row count is the events removed */
} purge_step;

static const purge_step purge_steps[] = {
    {"DELETE FROM sg_casts" PURGE_WHERE, true, false},
    {"CREATE TEMP TABLE sg_purge_sha AS SELECT DISTINCT s FROM (" NAMED(PURGE_WHERE) ") c WHERE s IS NOT NULL",
     true, false},
    {"DELETE FROM sg_events" PURGE_WHERE, false, true},
    {"DELETE FROM sg_content_parts" ORPHANS, true, false},
    {"DELETE FROM sg_contents" ORPHANS, true, false},
    {"DROP TABLE sg_purge_sha", true, false},
    {"UPDATE sg_purges SET n = n + 1", false, false}, /* store.h: sg_store_purges */
};

/* A step's SQL for one backend: SQLite reads $N as ?N and has no casts. */
static void step_sql(const char *in, bool sqlite, char *out, size_t n)
{
    const char *c = sqlite ? "json_extract(payload, '$.content.sha256')" : "(payload::json->'content'->>'sha256')";
    const char *h = sqlite ? "json_extract(payload, '$.sha256')" : "(payload::json->>'sha256')";
    size_t o = 0;
    for (const char *p = in; *p && o + 64 < n; p++) {
        if (sqlite && !strncmp(p, "::text", 6)) {
            p += 5;
        } else if (*p == '{' && (p[1] == 'C' || p[1] == 'S') && p[2] == '}') {
            o += (size_t)snprintf(out + o, n - o, "%s", p[1] == 'C' ? c : h);
            p += 2;
        } else {
            out[o++] = sqlite && *p == '$' ? '?' : *p;
        }
    }
    out[o] = '\0';
}

static int sqlite_step(sqlite3 *db, const char *sql, const char *const v[4], int64_t *rows)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    int np = st ? sqlite3_bind_parameter_count(st) : 0;
    for (int i = 0; rc == SQLITE_OK && i < np && i < 4; i++)
        rc = v[i] ? sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_STATIC) : sqlite3_bind_null(st, i + 1);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    if (rc == SQLITE_OK && rows)
        *rows = sqlite3_changes64(db);
    sqlite3_finalize(st);
    return rc;
}

static int purge_sqlite(const char *path, const sg_store_purge_q *q, int64_t *removed, sg_err *err)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 10000);
        rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    }
    const char *v[4] = {q->learner, q->task, q->sandbox, q->older_than};
    bool contents = rc == SQLITE_OK &&
                    sqlite3_table_column_metadata(db, NULL, "sg_contents", "sha256", NULL, NULL, NULL, NULL,
                                                  NULL) == SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK && i < sizeof purge_steps / sizeof purge_steps[0]; i++) {
        char sql[2048];
        if (purge_steps[i].contents && !contents)
            continue;
        step_sql(purge_steps[i].sql, true, sql, sizeof sql);
        rc = sqlite_step(db, sql, v, purge_steps[i].counts ? removed : NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        sg_err_set(err, EIO, "sqlite %s: purge: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close_v2(db); /* an open transaction rolls back */
    return rc == SQLITE_OK ? 0 : -1;
}

/* One statement with the four values when it uses them ($1). */
static int pg_step(PGconn *c, const char *sql, const char *const *v, int64_t *rows, sg_err *err)
{
    PGresult *r = PQexecParams(c, sql, strstr(sql, "$1") ? 4 : 0, NULL, v, NULL, NULL, 0);
    ExecStatusType s = PQresultStatus(r);
    int rc = 0;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        rc = sg_err_set(err, EIO, "postgresql: purge: %s", PQresultErrorMessage(r));
    else if (rows)
        *rows = strtoll(PQcmdTuples(r), NULL, 10);
    if (rc == 0 && rows && s == PGRES_TUPLES_OK) /* a query's answer: its first value */
        *rows = PQntuples(r) > 0 && !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return rc;
}

static int purge_pg(const char *url, const sg_store_purge_q *q, int64_t *removed, sg_err *err)
{
    const char *const keys[] = {"connect_timeout", "client_encoding", "application_name", "dbname", NULL};
    const char *const vals[] = {"10", "UTF8", "sandglass-purge", url, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        sg_err_set(err, EIO, "postgresql: connect: %s", c ? PQerrorMessage(c) : "out of memory");
        PQfinish(c);
        return -1;
    }
    const char *v[4] = {q->learner, q->task, q->sandbox, q->older_than};
    int64_t contents = 0;
    int rc = pg_step(c, "BEGIN", NULL, NULL, err);
    if (rc == 0)
        rc = pg_step(c, "SELECT to_regclass('sg_contents') IS NOT NULL", NULL, &contents, err);
    for (size_t i = 0; rc == 0 && i < sizeof purge_steps / sizeof purge_steps[0]; i++) {
        char sql[2048];
        if (purge_steps[i].contents && !contents)
            continue;
        step_sql(purge_steps[i].sql, false, sql, sizeof sql);
        rc = pg_step(c, sql, v, purge_steps[i].counts ? removed : NULL, err);
    }
    if (rc == 0) /* the watermarks of the streams left empty */
        rc = pg_step(c, "DELETE FROM sg_streams st WHERE NOT EXISTS (SELECT 1 FROM sg_events e WHERE"
                        " e.learner = st.learner AND e.task = st.task AND e.sandbox = st.sandbox)",
                     NULL, NULL, err);
    if (rc == 0)
        rc = pg_step(c, "COMMIT", NULL, NULL, err);
    PQfinish(c); /* an open transaction rolls back */
    return rc;
}

int sg_store_purge(const char *url, const sg_store_purge_q *q, int64_t *removed, sg_err *err)
{
    *removed = 0;
    if (!q->learner && !q->task && !q->sandbox && !q->older_than)
        return sg_err_set(err, EINVAL, "purge: nothing selected (a learner, task, sandbox or age)");
    sg_store *s = sg_store_open(url, err); /* the schema checked, migrated */
    if (!s)
        return -1;
    sg_store_close(s);
    if (!strncmp(url, "sqlite:", 7))
        return purge_sqlite(url + 7, q, removed, err);
    return purge_pg(url, q, removed, err);
}

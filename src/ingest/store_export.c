/* store_export: purge and retention on both backends (store_export.h). */
#include "ingest/store_export.h"

#include <errno.h>
#include <libpq-fe.h>
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

/* PURGE_WHERE for SQLite: no casts, ?N. */
static void sqlite_where(char *out, size_t n)
{
    char *o = out;
    for (const char *p = "DELETE FROM sg_events" PURGE_WHERE; *p && (size_t)(o - out) < n - 1; p++) {
        if (!strncmp(p, "::text", 6)) {
            p += 5;
            continue;
        }
        *o++ = *p == '$' ? '?' : *p;
    }
    *o = '\0';
}

static int purge_sqlite(const char *path, const sg_store_purge_q *q, int64_t *removed, sg_err *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char sql[1024];
    sqlite_where(sql, sizeof sql);
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 10000);
        rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    const char *v[4] = {q->learner, q->task, q->sandbox, q->older_than};
    for (int i = 0; rc == SQLITE_OK && i < 4; i++)
        rc = v[i] ? sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_STATIC) : sqlite3_bind_null(st, i + 1);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    if (rc == SQLITE_OK)
        *removed = sqlite3_changes64(db);
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        sg_err_set(err, EIO, "sqlite %s: purge: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close_v2(db); /* an open transaction rolls back */
    return rc == SQLITE_OK ? 0 : -1;
}

static int pg_step(PGconn *c, const char *sql, const char *const *v, int nv, int64_t *rows, sg_err *err)
{
    PGresult *r = PQexecParams(c, sql, nv, NULL, v, NULL, NULL, 0);
    ExecStatusType s = PQresultStatus(r);
    int rc = 0;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        rc = sg_err_set(err, EIO, "postgresql: purge: %s", PQresultErrorMessage(r));
    else if (rows)
        *rows = strtoll(PQcmdTuples(r), NULL, 10);
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
    int rc = pg_step(c, "BEGIN", NULL, 0, NULL, err);
    if (rc == 0)
        rc = pg_step(c, "DELETE FROM sg_events" PURGE_WHERE, v, 4, removed, err);
    if (rc == 0) /* the watermarks of the streams left empty */
        rc = pg_step(c, "DELETE FROM sg_streams st WHERE NOT EXISTS (SELECT 1 FROM sg_events e WHERE"
                        " e.learner = st.learner AND e.task = st.task AND e.sandbox = st.sandbox)",
                     NULL, 0, NULL, err);
    if (rc == 0)
        rc = pg_step(c, "COMMIT", NULL, 0, NULL, err);
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

/* store_pg: the PostgreSQL backend of store.h, for several ingest nodes
 * sharing one database.
 *
 * Tables sg_events (the same table as the SQLite store's, payload kept as
 * text, byte-exact), sg_schema (its version, store.h) and sg_streams (one
 * row per stream: the highest contiguous committed seq). A batch is one
 * transaction:
 *
 *   BEGIN; COPY rows into a per-connection temp table (ON COMMIT DELETE ROWS);
 *   pg_advisory_xact_lock(PUT) -- ids commit in id order, see below;
 *   sg_store_append only: read each batch stream's highest seq, and the
 *   stored content of the seqs at or below it (resends); judge the order
 *   rule (store.h) on those facts; delete what is not new from the batch;
 *   INSERT INTO sg_events SELECT ... ORDER BY key ON CONFLICT DO NOTHING;
 *   upsert the batch's streams, lock them FOR UPDATE in key order;
 *   advance each stream's watermark over the contiguous run of seqs above it
 *   (gaps and islands on the table, not on per-process memory); COMMIT.
 *
 * Each batch NOTIFYs sg_events at its commit: every node's stream
 * (GET /v1/stream) hears the others' commits (sg_store_listen).
 *
 * The row lock makes the watermark right when several nodes write the same
 * stream: whoever holds it next reads, in a fresh READ COMMITTED snapshot,
 * every row committed before it. The advisory lock serialises the inserts
 * of all nodes so that ids become visible in id order: a follower paging
 * with after_id (sandglass events --follow) never skips a row committed
 * late with a lower id. Rows are inserted in key order, so two writers of
 * the same keys cannot deadlock even without it.
 *
 * A lost connection is reopened on the next call; a call whose connection
 * turns out dead is tried once more on a fresh one (a batch is idempotent:
 * ON CONFLICT DO NOTHING, watermark recomputed). */
#include <errno.h>
#include <limits.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "ingest/store.h"
#include "ingest/store_backend.h"

#define PG_CONNECT_TIMEOUT "5"       /* seconds; the URL's own value wins */
#define PG_COPY_CHUNK (256 * 1024)   /* bytes per PQputCopyData */
/* Advisory lock keys ("SGsch", "SGput"), as SQL literals. */
#define PG_LOCK_SCHEMA "358049567592"
#define PG_LOCK_PUT "358049591668"
#define PG_CHANNEL "sg_events" /* commit notices (LISTEN/NOTIFY) */

typedef struct pg_store {
    sg_store base;
    PGconn *conn;
    char *url;
    char where[256];   /* "postgresql HOST:PORT/DB" for messages, no password */
    unsigned timeout_ms; /* statement_timeout of each connection; 0: the server's */
} pg_store;

static void autoclear(PGresult **r)
{
    if (*r)
        PQclear(*r);
}
#define pg_autoclear __attribute__((cleanup(autoclear)))

/* The schema, as steps (as store_sqlite.c's): step k takes a store from
 * version k to k + 1; a new store runs them all. Version 1 had no
 * sg_schema; its tables already had this vocabulary's names. */
static const char *const schema_steps[SG_STORE_SCHEMA_VERSION] = {
    /* 0 -> 1 */
    "CREATE TABLE sg_events ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " learner text NOT NULL, task text NOT NULL, sandbox text NOT NULL,"
    " seq bigint NOT NULL, kind text NOT NULL,"
    " ts text NOT NULL, received text NOT NULL, payload text NOT NULL,"
    " UNIQUE (learner, task, sandbox, seq));"
    "CREATE TABLE sg_streams ("
    " learner text NOT NULL, task text NOT NULL, sandbox text NOT NULL,"
    " contiguous bigint NOT NULL DEFAULT -1,"
    " PRIMARY KEY (learner, task, sandbox));",
    /* 1 -> 2: the version recorded */
    "CREATE TABLE sg_schema (version integer NOT NULL);",
    /* 2 -> 3: file contents and terminal recordings (store_contents.h) */
    "CREATE TABLE sg_contents (sha256 text PRIMARY KEY, size bigint NOT NULL);"
    "CREATE TABLE sg_content_parts (sha256 text NOT NULL, off bigint NOT NULL,"
    " data bytea NOT NULL, PRIMARY KEY (sha256, off));"
    "CREATE TABLE sg_casts (learner text NOT NULL, task text NOT NULL, sandbox text NOT NULL,"
    " session text NOT NULL, off bigint NOT NULL, data bytea NOT NULL,"
    " PRIMARY KEY (learner, task, sandbox, session, off));",
    /* 3 -> 4: revoked tokens, by id (store.h) */
    "CREATE TABLE IF NOT EXISTS sg_revoked_tokens (id text PRIMARY KEY, revoked timestamptz NOT NULL DEFAULT now());",
    /* 4 -> 5: the purges' count (store.h: sg_store_purges) */
    "CREATE TABLE sg_purges (n bigint NOT NULL); INSERT INTO sg_purges VALUES (0);",
    /* 5 -> 6: the sandbox hosts (store.h: sg_store_hosts) */
    "CREATE TABLE sg_hosts (name text PRIMARY KEY, info text NOT NULL, last_seen bigint NOT NULL);",
    /* 6 -> 7: nothing here (SQLite's parts leave WITHOUT ROWID; PostgreSQL
     * keeps a part's bytes out of its index already: TOAST, a heap) */
    "SELECT 1;",
};

/* Per connection: the batch lands here first (COPY), then moves to
 * sg_events with one set-based statement. */
static const char session_sql[] =
    "CREATE TEMP TABLE IF NOT EXISTS sg_batch ("
    " n bigint, learner text, task text, sandbox text, seq bigint, kind text,"
    " ts text, received text, payload text) ON COMMIT DELETE ROWS;";

/* A batch moved from sg_batch into sg_events, its streams' contiguity
 * advanced; put_sql commits it, load_sql leaves the transaction open for
 * the next batch (sg_store_load_put), sg_batch truncated (a DELETE leaves
 * its dead rows for every later batch to scan: 4x slower over 200 of them). */
#define PUT_BATCH_SQL \
    "SELECT pg_advisory_xact_lock(" PG_LOCK_PUT ");" \
    /* Key order (then batch order: the first of two duplicates wins). */ \
    "INSERT INTO sg_events (learner, task, sandbox, seq, kind, ts, received, payload)" \
    " SELECT learner, task, sandbox, seq, kind, ts, received, payload FROM sg_batch" \
    " ORDER BY learner, task, sandbox, seq, n ON CONFLICT DO NOTHING;" \
    "INSERT INTO sg_streams (learner, task, sandbox)" \
    " SELECT DISTINCT learner, task, sandbox FROM sg_batch ORDER BY 1, 2, 3" \
    " ON CONFLICT DO NOTHING;" \
    "SELECT 1 FROM sg_streams WHERE (learner, task, sandbox) IN" \
    " (SELECT learner, task, sandbox FROM sg_batch)" \
    " ORDER BY learner, task, sandbox FOR UPDATE;" \
    /* The island of seqs starting at contiguous + 1 is where
     * seq - row_number() stays equal to contiguous. */ \
    "UPDATE sg_streams st SET contiguous = w.hi FROM (" \
    " SELECT s.learner, s.task, s.sandbox, (" \
    "  SELECT max(x.seq) FROM (" \
    "   SELECT e.seq, e.seq - row_number() OVER (ORDER BY e.seq) AS g FROM sg_events e" \
    "   WHERE e.learner = s.learner AND e.task = s.task AND e.sandbox = s.sandbox" \
    "   AND e.seq > s.contiguous) x WHERE x.g = s.contiguous) AS hi" \
    " FROM sg_streams s WHERE (s.learner, s.task, s.sandbox) IN" \
    "  (SELECT learner, task, sandbox FROM sg_batch)) w" \
    " WHERE st.learner = w.learner AND st.task = w.task AND st.sandbox = w.sandbox" \
    " AND w.hi IS NOT NULL;" \
    /* Delivered at the commit to every node's stream (sg_store_listen). */ \
    "NOTIFY " PG_CHANNEL ";"

static const char put_sql[] = PUT_BATCH_SQL "COMMIT;";
static const char load_sql[] = PUT_BATCH_SQL "TRUNCATE sg_batch;";

/* libpq's message on one line: its newlines and tabs become single spaces. */
static void pg_msg(const char *m, char *out, size_t len)
{
    if (!m || !*m)
        m = "unknown error";
    size_t n = 0;
    for (; *m && n + 1 < len; m++) {
        char c = (*m == '\n' || *m == '\r' || *m == '\t') ? ' ' : *m;
        if (c == ' ' && (n == 0 || out[n - 1] == ' '))
            continue;
        out[n++] = c;
    }
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
}

static int pg_fail(pg_store *s, sg_err *err, const char *what, const char *msg)
{
    char m[SG_ERR_MSG_MAX];
    pg_msg(msg ? msg : s->conn ? PQerrorMessage(s->conn) : "out of memory", m, sizeof m);
    int code = s->conn && PQstatus(s->conn) == CONNECTION_OK ? EIO : ECONNREFUSED;
    return sg_err_set(err, code, "%s: %s: %s", s->where, what, m);
}

static bool conn_lost(pg_store *s)
{
    return !s->conn || PQstatus(s->conn) != CONNECTION_OK;
}

/* Runs sql (no parameters; several statements allowed), draining every
 * result; fails on the first error. *tuples (optional) gets the row count
 * of result number `count_idx` (0-based). */
static int exec_all(pg_store *s, const char *sql, const char *what, int count_idx,
                    size_t *tuples, sg_err *err)
{
    if (!PQsendQuery(s->conn, sql))
        return pg_fail(s, err, what, NULL);
    int r = 0, i = 0;
    PGresult *res;
    while ((res = PQgetResult(s->conn))) {
        ExecStatusType st = PQresultStatus(res);
        if (r == 0 && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
            r = pg_fail(s, err, what, PQresultErrorMessage(res));
        else if (r == 0 && i == count_idx && tuples)
            *tuples = (size_t)strtoull(PQcmdTuples(res), NULL, 10);
        PQclear(res);
        i++;
    }
    if (r == 0 && conn_lost(s))
        r = pg_fail(s, err, what, NULL);
    return r;
}

static void quiet_notice(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

/* A fresh connection with its session state (temp table). */
static int pg_connect(pg_store *s, sg_err *err)
{
    if (s->conn)
        PQfinish(s->conn);
    /* The URL comes last: its own settings win over these defaults. */
    const char *const keys[] = {"connect_timeout", "client_encoding", "application_name",
                                "dbname", NULL};
    const char *const vals[] = {PG_CONNECT_TIMEOUT, "UTF8", "sandglass-ingest", s->url, NULL};
    s->conn = PQconnectdbParams(keys, vals, 1);
    if (!s->conn)
        return sg_err_set(err, ENOMEM, "%s: connect: out of memory", s->where);
    if (PQstatus(s->conn) != CONNECTION_OK)
        return pg_fail(s, err, "connect", NULL);
    PQsetNoticeProcessor(s->conn, quiet_notice, NULL); /* a store never prints */
    char set[96] = "SET client_min_messages = warning";
    if (s->timeout_ms) /* a reader's (sg_store_pg_statement_timeout), kept across a reconnect */
        snprintf(set + strlen(set), sizeof set - strlen(set), "; SET statement_timeout = %u", s->timeout_ms);
    if (exec_all(s, set, "connect", -1, NULL, err) < 0)
        return -1;
    return exec_all(s, session_sql, "create the batch table", -1, NULL, err);
}

static int ensure_conn(pg_store *s, sg_err *err)
{
    return conn_lost(s) ? pg_connect(s, err) : 0;
}

/* Appends src (len bytes) to b, escaped for COPY text format unless raw.
 * -1: out of memory; -2: a NUL byte (text cannot hold it). */
static int copy_add(sg_buf *b, const char *src, size_t len, bool raw)
{
    if (len > SIZE_MAX / 2 || sg_buf_reserve(b, 2 * len) < 0)
        return -1;
    char *o = b->data + b->len;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '\0') {
            b->data[b->len] = '\0'; /* nothing of this field is kept */
            return -2;
        }
        if (raw) {
            *o++ = c;
            continue;
        }
        switch (c) {
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default: *o++ = c;
        }
    }
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return 0;
}

static int copy_row(sg_buf *b, size_t n, const sg_store_row *w)
{
    char num[64];
    int nl = snprintf(num, sizeof num, "%zu", n);
    int r = copy_add(b, num, (size_t)nl, true);
    const char *fields[] = {w->learner, w->task, w->sandbox, NULL, w->kind, w->ts, w->received};
    for (size_t k = 0; k < SG_ARRAY_LEN(fields) && r == 0; k++) {
        r = copy_add(b, "\t", 1, true);
        if (r == 0 && k == 3) {
            nl = snprintf(num, sizeof num, "%lld", (long long)w->seq);
            r = copy_add(b, num, (size_t)nl, true);
        } else if (r == 0) {
            const char *f = fields[k] ? fields[k] : "";
            r = copy_add(b, f, strlen(f), false);
        }
    }
    if (r == 0)
        r = copy_add(b, "\t", 1, true);
    if (r == 0 && w->payload)
        r = copy_add(b, w->payload, w->payload_len, false);
    if (r == 0)
        r = copy_add(b, "\n", 1, true);
    return r;
}

static int copy_rows(pg_store *s, const sg_store_row *rows, size_t n, sg_err *err)
{
    pg_autoclear PGresult *r = PQexec(s->conn, "COPY sg_batch FROM STDIN");
    if (PQresultStatus(r) != PGRES_COPY_IN)
        return pg_fail(s, err, "copy", PQresultErrorMessage(r));
    sg_autobuf sg_buf b = {0};
    int bad = 0;
    for (size_t i = 0; i < n && bad == 0; i++) {
        bad = copy_row(&b, i, &rows[i]);
        if (bad == 0 && (b.len >= PG_COPY_CHUNK || i + 1 == n)) {
            if (PQputCopyData(s->conn, b.data, (int)b.len) != 1)
                bad = -3;
            sg_buf_reset(&b);
        }
    }
    if (bad != 0) {
        const char *why = bad == -1   ? "out of memory"
                          : bad == -2 ? "a field holds a NUL byte"
                                      : NULL;
        PQputCopyEnd(s->conn, why ? why : "send failed");
        PGresult *x;
        while ((x = PQgetResult(s->conn)))
            PQclear(x);
        if (why)
            return sg_err_set(err, bad == -1 ? ENOMEM : EINVAL, "%s: copy: %s", s->where, why);
        return pg_fail(s, err, "copy", NULL);
    }
    if (PQputCopyEnd(s->conn, NULL) != 1)
        return pg_fail(s, err, "copy", NULL);
    int rc = 0;
    PGresult *x;
    while ((x = PQgetResult(s->conn))) {
        if (rc == 0 && PQresultStatus(x) != PGRES_COMMAND_OK)
            rc = pg_fail(s, err, "copy", PQresultErrorMessage(x));
        PQclear(x);
    }
    return rc;
}

static int put_once(pg_store *s, const sg_store_row *rows, size_t n, size_t *inserted,
                    sg_err *err)
{
    if (ensure_conn(s, err) < 0)
        return -1;
    if (exec_all(s, "BEGIN", "begin", -1, NULL, err) < 0)
        return -1;
    size_t added = 0;
    if (copy_rows(s, rows, n, err) < 0 ||
        exec_all(s, put_sql, "insert", 1, &added, err) < 0) {
        if (!conn_lost(s)) {
            sg_err dummy;
            exec_all(s, "ROLLBACK", "rollback", -1, NULL, &dummy);
        }
        return -1;
    }
    *inserted = added;
    return 0;
}

static int pg_put(sg_store *base, const sg_store_row *rows, size_t n, size_t *inserted,
                  sg_err *err)
{
    pg_store *s = (pg_store *)base;
    bool was_up = !conn_lost(s);
    int r = put_once(s, rows, n, inserted, err);
    if (r < 0 && was_up && conn_lost(s)) /* the server went away since our last call */
        r = put_once(s, rows, n, inserted, err);
    return r;
}

static int pg_load_begin(sg_store *base, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    if (ensure_conn(s, err) < 0)
        return -1;
    return exec_all(s, "BEGIN", "begin", -1, NULL, err);
}

/* One batch in the load's transaction (a lost connection fails the load:
 * its transaction is gone with it). */
static int pg_load_put(sg_store *base, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    if (conn_lost(s))
        return pg_fail(s, err, "load", "the connection was lost");
    if (copy_rows(s, rows, n, err) < 0)
        return -1;
    return exec_all(s, load_sql, "insert", 1, inserted, err);
}

static int pg_load_end(sg_store *base, bool commit, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    if (conn_lost(s))
        return commit ? pg_fail(s, err, "commit", "the connection was lost") : 0;
    if (commit)
        return exec_all(s, "COMMIT", "commit", -1, NULL, err);
    sg_err dummy;
    exec_all(s, "ROLLBACK", "rollback", -1, NULL, &dummy);
    return 0;
}

/* The order rule's facts, read after the PUT lock so that every row
 * another node committed is seen. First each stream's highest seq (one
 * index probe per stream); then, only for rows at or below it (resends),
 * whether the stored row has the same content. */
static const char maxes_sql[] =
    "SELECT pg_advisory_xact_lock(" PG_LOCK_PUT ");"
    "SELECT d.learner, d.task, d.sandbox, (SELECT max(e.seq) FROM sg_events e"
    " WHERE e.learner = d.learner AND e.task = d.task AND e.sandbox = d.sandbox)"
    " FROM (SELECT DISTINCT learner, task, sandbox FROM sg_batch) d";
static const char same_sql[] =
    "SELECT b.n, e.kind = b.kind AND e.payload = b.payload FROM sg_batch b JOIN sg_events e"
    " ON e.learner = b.learner AND e.task = b.task AND e.sandbox = b.sandbox AND e.seq = b.seq"
    " WHERE b.n = ANY ($1::bigint[])";

typedef struct pg_facts {
    PGresult *maxes;   /* learner, task, sandbox, max (NULL: none) */
    int last;          /* the maxes row found last (rows come in runs) */
    int8_t *same;      /* per row: -1 not stored, 0 differs, 1 same */
} pg_facts;

/* The highest stored seq of rows[i]'s stream. */
static int64_t facts_max(pg_facts *f, const sg_store_row *r)
{
    int n = PQntuples(f->maxes);
    for (int k = 0; k < n; k++) {
        int j = (f->last + k) % n;
        if (strcmp(PQgetvalue(f->maxes, j, 0), r->learner) == 0 &&
            strcmp(PQgetvalue(f->maxes, j, 1), r->task) == 0 &&
            strcmp(PQgetvalue(f->maxes, j, 2), r->sandbox) == 0) {
            f->last = j;
            return PQgetisnull(f->maxes, j, 3) ? -1 : strtoll(PQgetvalue(f->maxes, j, 3), NULL, 10);
        }
    }
    return -1;
}

static int fact_max(void *ctx, const sg_store_row *rows, size_t i, int64_t *max, sg_err *err)
{
    (void)err;
    *max = facts_max(ctx, &rows[i]);
    return 0;
}

static int fact_stored(void *ctx, const sg_store_row *rows, size_t i, int *same, sg_err *err)
{
    (void)rows;
    (void)err;
    *same = ((pg_facts *)ctx)->same[i];
    return 0;
}

static const sg_store_judge_ops pg_judge = {fact_max, fact_stored};

/* Runs sql (several statements); the last statement's rows, or NULL. */
static PGresult *exec_last_rows(pg_store *s, const char *sql, const char *what, sg_err *err)
{
    if (!PQsendQuery(s->conn, sql)) {
        pg_fail(s, err, what, NULL);
        return NULL;
    }
    PGresult *res, *last = NULL;
    bool bad = false;
    while ((res = PQgetResult(s->conn))) {
        ExecStatusType st = PQresultStatus(res);
        if (!bad && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            pg_fail(s, err, what, PQresultErrorMessage(res));
            bad = true;
        }
        if (last)
            PQclear(last);
        last = res;
    }
    if (!bad && (!last || PQresultStatus(last) != PGRES_TUPLES_OK)) {
        pg_fail(s, err, what, NULL);
        bad = true;
    }
    if (bad) {
        PQclear(last);
        return NULL;
    }
    return last;
}

/* Row number i as the k-th element of a bigint[] literal in b; list_end
 * closes it ("{}" when empty). */
static int list_add(sg_buf *b, size_t k, size_t i)
{
    return sg_buf_printf(b, "%c%zu", k ? ',' : '{', i);
}

static int list_end(sg_buf *b)
{
    return sg_buf_puts(b, b->len ? "}" : "{}");
}

static int append_once(pg_store *s, const sg_store_row *rows, size_t n, uint8_t *verdicts,
                       size_t *inserted, sg_err *err)
{
    if (ensure_conn(s, err) < 0)
        return -1;
    if (exec_all(s, "BEGIN", "begin", -1, NULL, err) < 0)
        return -1;
    pg_facts f = {0};
    sg_autofree int8_t *same = malloc(n);
    sg_autobuf sg_buf list = {0}; /* row numbers, a bigint[] literal */
    size_t added = 0;
    if (!same)
        goto oom;
    memset(same, -1, n);
    f.same = same;
    if (copy_rows(s, rows, n, err) < 0 ||
        !(f.maxes = exec_last_rows(s, maxes_sql, "highest seqs", err)))
        goto fail;
    /* Resends: rows at or below their stream's highest seq. */
    size_t nres = 0;
    for (size_t i = 0; i < n; i++)
        if (rows[i].seq <= facts_max(&f, &rows[i]) && list_add(&list, nres++, i) < 0)
            goto oom;
    if (list_end(&list) < 0)
        goto oom;
    if (nres > 0) {
        const char *params[] = {list.data};
        pg_autoclear PGresult *r =
            PQexecParams(s->conn, same_sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            pg_fail(s, err, "stored rows", PQresultErrorMessage(r));
            goto fail;
        }
        for (int k = 0; k < PQntuples(r); k++) {
            unsigned long long i = strtoull(PQgetvalue(r, k, 0), NULL, 10);
            if (i < n)
                same[i] = PQgetvalue(r, k, 1)[0] == 't';
        }
    }
    if (sg_store_judge(rows, n, verdicts, &pg_judge, &f, err) < 0)
        goto fail;
    /* What is not new leaves the batch before the insert. */
    sg_buf_reset(&list);
    size_t ndrop = 0;
    for (size_t i = 0; i < n; i++)
        if (verdicts[i] != SG_STORE_NEW && list_add(&list, ndrop++, i) < 0)
            goto oom;
    if (list_end(&list) < 0)
        goto oom;
    if (ndrop > 0) {
        const char *params[] = {list.data};
        pg_autoclear PGresult *r = PQexecParams(
            s->conn, "DELETE FROM sg_batch WHERE n = ANY ($1::bigint[])", 1, NULL, params, NULL,
            NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            pg_fail(s, err, "drop refused rows", PQresultErrorMessage(r));
            goto fail;
        }
    }
    if (exec_all(s, put_sql, "insert", 1, &added, err) < 0)
        goto fail;
    PQclear(f.maxes);
    *inserted = added;
    return 0;
oom:
    sg_err_set(err, ENOMEM, "out of memory");
fail:
    PQclear(f.maxes);
    if (!conn_lost(s)) {
        sg_err dummy;
        exec_all(s, "ROLLBACK", "rollback", -1, NULL, &dummy);
    }
    return -1;
}

static int pg_append(sg_store *base, const sg_store_row *rows, size_t n, uint8_t *verdicts,
                     size_t *inserted, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    bool was_up = !conn_lost(s);
    int r = append_once(s, rows, n, verdicts, inserted, err);
    if (r < 0 && was_up && conn_lost(s))
        r = append_once(s, rows, n, verdicts, inserted, err);
    return r;
}

/* Runs a one-statement query with text parameters, retrying once on a
 * fresh connection if the old one turns out dead. */
static PGresult *query(pg_store *s, const char *sql, int nparams, const char *const *params,
                       const char *what, sg_err *err)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        bool was_up = !conn_lost(s);
        if (ensure_conn(s, err) < 0)
            return NULL;
        PGresult *r = PQexecParams(s->conn, sql, nparams, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK)
            return r;
        pg_fail(s, err, what, r ? PQresultErrorMessage(r) : NULL);
        PQclear(r);
        if (!(was_up && conn_lost(s)))
            break;
    }
    return NULL;
}

static int pg_contiguous(sg_store *base, const char *learner, const char *task,
                         const char *sandbox, int64_t *seq, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    const char *const p[] = {learner, task, sandbox};
    pg_autoclear PGresult *r =
        query(s, "SELECT contiguous FROM sg_streams WHERE learner = $1 AND task = $2"
                 " AND sandbox = $3", 3, p, "contiguous seq", err);
    if (!r)
        return -1;
    int64_t v = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    if (*seq < v)
        *seq = v;
    if (*seq < -1)
        *seq = -1;
    return 0;
}

/* pg_scan's statement for q (its parameters into p, bufs): the rows in the
 * index's order, so they stream from it unsorted. The number of
 * parameters. */
static int scan_sql(const sg_store_query *q, char *sql, size_t size, const char *p[8], char bufs[3][32])
{
    const char *order = q->after_id >= 0 ? "id" : "learner, task, sandbox, seq";
    int np = 0, n = snprintf(sql, size,
                             "SELECT id, learner, task, sandbox, seq, kind, ts, received, payload FROM sg_events"
                             " WHERE true");
    if (q->learner)
        p[np++] = q->learner, n += snprintf(sql + n, size - (size_t)n, " AND learner = $%d", np);
    if (q->task)
        p[np++] = q->task, n += snprintf(sql + n, size - (size_t)n, " AND task = $%d", np);
    if (q->sandbox)
        p[np++] = q->sandbox, n += snprintf(sql + n, size - (size_t)n, " AND sandbox = $%d", np);
    if (q->after_seq >= 0) {
        snprintf(bufs[0], sizeof bufs[0], "%lld", (long long)q->after_seq);
        p[np++] = bufs[0], n += snprintf(sql + n, size - (size_t)n, " AND seq > $%d", np);
    }
    if (q->after_id >= 0) {
        snprintf(bufs[1], sizeof bufs[1], "%lld", (long long)q->after_id);
        p[np++] = bufs[1], n += snprintf(sql + n, size - (size_t)n, " AND id > $%d", np);
    }
    if (q->kinds)
        p[np++] = q->kinds, n += snprintf(sql + n, size - (size_t)n, " AND kind = ANY(string_to_array($%d, ','))", np);
    if (q->except_kinds)
        p[np++] = q->except_kinds,
        n += snprintf(sql + n, size - (size_t)n, " AND kind <> ALL(string_to_array($%d, ','))", np);
    size_t limit = q->limit == 0 ? SG_STORE_QUERY_MAX : q->limit > SG_STORE_QUERY_MAX + 1 ? SG_STORE_QUERY_MAX + 1 : q->limit;
    snprintf(bufs[2], sizeof bufs[2], "%zu", limit);
    p[np++] = bufs[2];
    snprintf(sql + n, size - (size_t)n, " ORDER BY %s LIMIT $%d", order, np);
    return np;
}

/* One scan on the live connection: 0 and *rows, or -1 with err (*rows
 * then says whether fn saw any). */
static int scan_once(pg_store *s, const sg_store_query *q, sg_store_event_fn fn, void *ud, int *rows, sg_err *err)
{
    char sql[1024], bufs[3][32];
    const char *p[8];
    int np = scan_sql(q, sql, sizeof sql, p, bufs);
    if (!PQsendQueryParams(s->conn, sql, np, NULL, p, NULL, NULL, 0) || !PQsetSingleRowMode(s->conn))
        return pg_fail(s, err, "query events", NULL);
    size_t budget = q->max_bytes ? q->max_bytes : SG_STORE_PAGE_BYTES, bytes = 0;
    int r = 0;
    bool cut = false;
    PGresult *res;
    while ((res = PQgetResult(s->conn))) {
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_SINGLE_TUPLE && r == 0 && !cut && bytes >= budget) {
            cut = true; /* the page is full: the rest is not this call's */
            PQclear(res);
            break;
        }
        if (st == PGRES_SINGLE_TUPLE && r == 0) {
            sg_store_event e = {
                .id = strtoll(PQgetvalue(res, 0, 0), NULL, 10), .learner = PQgetvalue(res, 0, 1),
                .task = PQgetvalue(res, 0, 2), .sandbox = PQgetvalue(res, 0, 3),
                .seq = strtoll(PQgetvalue(res, 0, 4), NULL, 10), .kind = PQgetvalue(res, 0, 5),
                .ts = PQgetvalue(res, 0, 6), .received = PQgetvalue(res, 0, 7),
                .payload = PQgetvalue(res, 0, 8), .payload_len = (size_t)PQgetlength(res, 0, 8),
            };
            bytes += e.payload_len;
            if (fn(ud, &e) < 0)
                r = sg_err_set(err, ENOMEM, "%s: query events: out of memory", s->where);
            else
                (*rows)++;
        } else if (st != PGRES_SINGLE_TUPLE && st != PGRES_TUPLES_OK && r == 0)
            r = pg_fail(s, err, "query events", PQresultErrorMessage(res));
        PQclear(res);
    }
    if (cut) {
        /* The rows left would all be read and dropped, up to the LIMIT of
         * payloads of up to a frame each: the connection is closed instead,
         * and the next call opens another (rare: a page this full of bytes). */
        PQfinish(s->conn);
        s->conn = NULL;
    }
    if (q->cut)
        *q->cut = cut;
    return r;
}

/* The rows come one at a time (libpq's single-row mode) and the scan stops
 * at the row after which the payloads' bytes reach the page's budget: this
 * process never holds more than a page, whatever the rows' sizes, and the
 * database has no running sum to compute (a window over the rows cost it
 * as much as the page's query itself). */
static int pg_scan(sg_store *base, const sg_store_query *q, sg_store_event_fn fn, void *ud, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    for (int attempt = 0;; attempt++) {
        bool was_up = !conn_lost(s);
        if (ensure_conn(s, err) < 0)
            return -1;
        int rows = 0;
        if (scan_once(s, q, fn, ud, &rows, err) == 0)
            return rows;
        if (rows > 0 || attempt > 0 || !was_up || !conn_lost(s))
            return -1; /* a dead connection is tried once more, before any row */
    }
}

/* As sqlite_sessions (store_sqlite.c). */
#define PG_SESSION_LAST(what, kind)                                                            \
    "(SELECT t.payload::json->>'" what "' FROM sg_events t WHERE t.learner = e.learner"        \
    " AND t.task = e.task AND t.sandbox = e.sandbox AND t.kind = '" kind "'"                    \
    " ORDER BY t.seq DESC LIMIT 1)"

static json_t *pg_sessions(sg_store *base, const sg_store_query *q, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    char after[32], limit[32];
    snprintf(after, sizeof after, "%lld", (long long)q->after_id);
    snprintf(limit, sizeof limit, "%zu", q->limit ? q->limit : (size_t)SG_STORE_QUERY_MAX);
    const char *const p[] = {q->learner, q->task, q->sandbox, after, limit};
    pg_autoclear PGresult *r = query(
        s,
        "SELECT learner, task, sandbox, min(id), count(*), min(ts), max(ts),"
        " count(*) FILTER (WHERE kind IN ('run_result', 'test_result')),"
        " count(*) FILTER (WHERE kind = 'session_abort'),"
        " " PG_SESSION_LAST("exit_code", "test_result") ", " PG_SESSION_LAST("state", "sandbox")
        " FROM sg_events e WHERE ($1::text IS NULL OR learner = $1) AND ($2::text IS NULL OR task = $2)"
        " AND ($3::text IS NULL OR sandbox = $3) GROUP BY learner, task, sandbox"
        " HAVING min(id) > $4::bigint ORDER BY min(id) LIMIT $5::bigint",
        5, p, "list sessions", err);
    if (!r)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; arr && i < PQntuples(r); i++) {
        const char *id[3] = {PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2)};
        json_array_append_new(
            arr, sg_store_session_row(id, strtoll(PQgetvalue(r, i, 3), NULL, 10),
                                      strtoll(PQgetvalue(r, i, 4), NULL, 10), PQgetvalue(r, i, 5),
                                      PQgetvalue(r, i, 6), strtoll(PQgetvalue(r, i, 7), NULL, 10),
                                      strtoll(PQgetvalue(r, i, 8), NULL, 10),
                                      PQgetisnull(r, i, 9) ? NULL : PQgetvalue(r, i, 9),
                                      PQgetisnull(r, i, 10) ? NULL : PQgetvalue(r, i, 10)));
    }
    if (!arr)
        sg_err_set(err, ENOMEM, "%s: list sessions: out of memory", s->where);
    return arr;
}

/* The row's stream is that of t (a relation of the query). */
#define PG_STREAM_IS(t) "learner = " t ".learner AND task = " t ".task AND sandbox = " t ".sandbox"

static json_t *pg_sandboxes(sg_store *base, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    pg_autoclear PGresult *r = query(
        s,
        /* The streams walked on the unique index, one descent each (a
         * recursive loose scan), each one's count, first and last seq from
         * its own range of the index, then its first and last events looked
         * up (the first one's id orders them) by subqueries, which the
         * planner cannot turn into a join of every row (as it did with stale
         * statistics). A GROUP BY over the table was planned as a hash
         * aggregate of every row in each of three parallel workers, or
         * compiled by JIT: 350 ms of the database's CPU for 200,000 events
         * against 50 ms, the largest part of an export's. */
        "WITH RECURSIVE k AS ((SELECT learner, task, sandbox FROM sg_events"
        "  ORDER BY learner, task, sandbox LIMIT 1)"
        " UNION ALL SELECT n.learner, n.task, n.sandbox FROM k CROSS JOIN LATERAL"
        "  (SELECT learner, task, sandbox FROM sg_events e"
        "   WHERE (e.learner, e.task, e.sandbox) > (k.learner, k.task, k.sandbox)"
        "   ORDER BY learner, task, sandbox LIMIT 1) n)"
        " SELECT g.learner, g.task, g.sandbox, g.n, g.lo, g.hi,"
        " (SELECT received FROM sg_events WHERE " PG_STREAM_IS("g") " AND seq = g.lo),"
        " (SELECT received FROM sg_events WHERE " PG_STREAM_IS("g") " AND seq = g.hi),"
        " coalesce((SELECT contiguous FROM sg_streams WHERE " PG_STREAM_IS("g") "), -1)"
        " FROM (SELECT k.learner, k.task, k.sandbox, c.n, c.lo, c.hi FROM k CROSS JOIN LATERAL"
        "  (SELECT count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM sg_events"
        "   WHERE " PG_STREAM_IS("k") ") c) g"
        " ORDER BY (SELECT id FROM sg_events WHERE " PG_STREAM_IS("g") " AND seq = g.lo)",
        0, NULL, "list sandboxes", err);
    if (!r)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; arr && i < PQntuples(r); i++) {
        json_t *row = json_pack(
            "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s}", "learner", PQgetvalue(r, i, 0),
            "task", PQgetvalue(r, i, 1), "sandbox", PQgetvalue(r, i, 2),
            "events", (json_int_t)strtoll(PQgetvalue(r, i, 3), NULL, 10),
            "first_seq", (json_int_t)strtoll(PQgetvalue(r, i, 4), NULL, 10),
            "last_seq", (json_int_t)strtoll(PQgetvalue(r, i, 5), NULL, 10),
            "acked_seq", (json_int_t)strtoll(PQgetvalue(r, i, 8), NULL, 10),
            "first_received", PQgetvalue(r, i, 6), "last_received", PQgetvalue(r, i, 7));
        if (!row || json_array_append_new(arr, row) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (!arr)
        sg_err_set(err, ENOMEM, "%s: list sandboxes: out of memory", s->where);
    return arr;
}

/* A query's one integer (what: for messages). */
static int pg_scalar(sg_store *base, const char *sql, const char *what, int64_t *v, sg_err *err)
{
    pg_autoclear PGresult *r = query((pg_store *)base, sql, 0, NULL, what, err);
    if (!r)
        return -1;
    *v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    return 0;
}

static int pg_last_id(sg_store *base, int64_t *id, sg_err *err)
{
    return pg_scalar(base, "SELECT coalesce(max(id), 0) FROM sg_events", "last id", id, err);
}

static int pg_purges(sg_store *base, int64_t *n, sg_err *err)
{
    return pg_scalar(base, "SELECT n FROM sg_purges", "purges", n, err);
}

static int pg_revoke(sg_store *base, const char *token_id, sg_err *err)
{
    const char *const p[] = {token_id};
    pg_autoclear PGresult *r = query((pg_store *)base,
                                     "INSERT INTO sg_revoked_tokens (id) VALUES ($1)"
                                     " ON CONFLICT DO NOTHING RETURNING id",
                                     1, p, "revoke a token", err);
    return r ? 0 : -1;
}

static int pg_revoked(sg_store *base, const char *token_id, bool *yes, sg_err *err)
{
    const char *const p[] = {token_id};
    pg_autoclear PGresult *r =
        query((pg_store *)base, "SELECT 1 FROM sg_revoked_tokens WHERE id = $1", 1, p, "revoked tokens", err);
    if (!r)
        return -1;
    *yes = PQntuples(r) > 0;
    return 0;
}

static json_t *pg_revoked_ids(sg_store *base, sg_err *err)
{
    pg_autoclear PGresult *r = query((pg_store *)base, "SELECT id FROM sg_revoked_tokens ORDER BY id", 0, NULL, "revoked tokens", err);
    if (!r)
        return NULL;
    json_t *ids = json_array();
    for (int i = 0; ids && i < PQntuples(r); i++)
        json_array_append_new(ids, json_string(PQgetvalue(r, i, 0)));
    if (!ids)
        sg_err_set(err, ENOMEM, "out of memory");
    return ids;
}

static int pg_host_put(sg_store *base, const char *name, const char *info, int64_t last_seen, sg_err *err)
{
    char seen[24];
    snprintf(seen, sizeof seen, "%lld", (long long)last_seen);
    const char *const p[] = {name, info, seen};
    pg_autoclear PGresult *r = query((pg_store *)base,
                                     "INSERT INTO sg_hosts (name, info, last_seen) VALUES ($1, $2, $3)"
                                     " ON CONFLICT (name) DO UPDATE SET info = excluded.info,"
                                     " last_seen = excluded.last_seen RETURNING name",
                                     3, p, "register a host", err);
    return r ? 0 : -1;
}

static json_t *pg_hosts(sg_store *base, const sg_store_hosts_query *q, sg_err *err)
{
    const char *const p[] = {q->name, q->after, q->sandbox};
    /* COLLATE "C": the order of bytes, as SQLite's (a cursor read by one
     * node pages on another the same way, whatever the database's locale) */
    pg_autoclear PGresult *r = query((pg_store *)base,
                                     "SELECT name, info, last_seen FROM sg_hosts"
                                     " WHERE ($1::text IS NULL OR name = $1)"
                                     " AND ($2::text IS NULL OR name COLLATE \"C\" > $2)"
                                     " AND ($3::text IS NULL OR EXISTS (SELECT 1 FROM"
                                     "  jsonb_array_elements(info::jsonb -> 'sandboxes') AS sb"
                                     "  WHERE left(sb ->> 'id', length($3)) = $3))"
                                     " ORDER BY name COLLATE \"C\" LIMIT 256", /* SG_STORE_HOSTS_MAX */
                                     3, p, "list hosts", err);
    if (!r)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(r); i++) {
        json_t *row = sg_store_host_row(PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                                        strtoll(PQgetvalue(r, i, 2), NULL, 10));
        if (row)
            json_array_append_new(arr, row);
    }
    return arr;
}

static int pg_hosts_count(sg_store *base, int64_t now, int stale_beats, int64_t *known, int64_t *stale, sg_err *err)
{
    char n[24], b[16];
    snprintf(n, sizeof n, "%lld", (long long)now);
    snprintf(b, sizeof b, "%d", stale_beats);
    const char *const p[] = {n, b};
    pg_autoclear PGresult *r = query((pg_store *)base,
                                     "SELECT count(*), count(*) FILTER (WHERE $1::bigint - last_seen > $2::bigint *"
                                     " coalesce((info::jsonb ->> 'heartbeat_s')::bigint, 1)) FROM sg_hosts",
                                     2, p, "count hosts", err);
    if (!r)
        return -1;
    *known = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    *stale = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    return 0;
}

static int pg_listen(sg_store *base, sg_err *err)
{
    pg_store *s = (pg_store *)base;
    if (ensure_conn(s, err) < 0 || exec_all(s, "LISTEN " PG_CHANNEL, "listen", -1, NULL, err) < 0)
        return -1;
    if (PQsetnonblocking(s->conn, 1) != 0)
        return pg_fail(s, err, "listen", NULL);
    return PQsocket(s->conn);
}

static int pg_notified(sg_store *base)
{
    pg_store *s = (pg_store *)base;
    if (conn_lost(s) || !PQconsumeInput(s->conn) || conn_lost(s))
        return -1;
    int n = 0;
    PGnotify *note;
    while ((note = PQnotifies(s->conn))) {
        PQfreemem(note);
        n++;
    }
    return n;
}

static void pg_close(sg_store *base)
{
    pg_store *s = (pg_store *)base;
    if (s->conn)
        PQfinish(s->conn);
    free(s->url);
    free(s);
}

static const sg_store_ops pg_ops = {
    .put = pg_put,
    .load_begin = pg_load_begin,
    .load_put = pg_load_put,
    .load_end = pg_load_end,
    .append = pg_append,
    .contiguous = pg_contiguous,
    .scan = pg_scan,
    .sandboxes = pg_sandboxes,
    .sessions = pg_sessions,
    .last_id = pg_last_id,
    .revoke = pg_revoke,
    .revoked = pg_revoked,
    .revoked_ids = pg_revoked_ids,
    .purges = pg_purges,
    .host_put = pg_host_put,
    .hosts = pg_hosts,
    .hosts_count = pg_hosts_count,
    .listen = pg_listen,
    .notified = pg_notified,
    .close = pg_close,
};

/* The store's schema version (inside the schema lock): sg_schema's; 1 for
 * a store of the release before it (sg_events without sg_schema); 0 for a
 * new one. */
static int pg_version(pg_store *s, int *v, sg_err *err)
{
    pg_autoclear PGresult *r = PQexec(s->conn, "SELECT to_regclass('sg_schema') IS NOT NULL,"
                                               " to_regclass('sg_events') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return pg_fail(s, err, "schema version", PQresultErrorMessage(r));
    if (PQgetvalue(r, 0, 0)[0] != 't') {
        *v = PQgetvalue(r, 0, 1)[0] == 't' ? 1 : 0;
        return 0;
    }
    pg_autoclear PGresult *x = PQexec(s->conn, "SELECT max(version) FROM sg_schema");
    if (PQresultStatus(x) != PGRES_TUPLES_OK)
        return pg_fail(s, err, "schema version", PQresultErrorMessage(x));
    long long n = PQgetisnull(x, 0, 0) ? 0 : strtoll(PQgetvalue(x, 0, 0), NULL, 10);
    if (n < 1 || n > INT_MAX)
        return sg_err_set(err, EIO, "%s: sg_schema holds no valid version", s->where);
    *v = (int)n;
    return 0;
}

/* Brings the store to SG_STORE_SCHEMA_VERSION in one transaction, under
 * the schema lock (nodes starting at once migrate once); a newer store is
 * refused, untouched. */
static int pg_migrate(pg_store *s, sg_err *err)
{
    int v = 0;
    if (exec_all(s, "BEGIN; SELECT pg_advisory_xact_lock(" PG_LOCK_SCHEMA ")", "lock the schema", -1, NULL,
                 err) < 0 ||
        pg_version(s, &v, err) < 0 || sg_store_schema_check(v, s->where, err) < 0)
        return -1;
    for (int k = v; k < SG_STORE_SCHEMA_VERSION; k++)
        if (exec_all(s, schema_steps[k], "migrate the schema", -1, NULL, err) < 0)
            return -1;
    char set[96];
    snprintf(set, sizeof set, "DELETE FROM sg_schema; INSERT INTO sg_schema (version) VALUES (%d)",
             SG_STORE_SCHEMA_VERSION);
    if (v < SG_STORE_SCHEMA_VERSION && exec_all(s, set, "record the schema version", -1, NULL, err) < 0)
        return -1;
    return exec_all(s, "COMMIT", "commit the schema", -1, NULL, err);
}

/* "postgresql HOST:PORT/DB" from the URL, for messages (never the password). */
static int describe(const char *url, char *out, size_t len, sg_err *err)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &perr);
    if (!opts) {
        char m[512];
        pg_msg(perr ? perr : "out of memory", m, sizeof m);
        PQfreemem(perr);
        /* The URL may hold a password: do not echo it. */
        return sg_err_set(err, EINVAL, "postgresql store: bad URL: %s", m);
    }
    const char *host = NULL, *hostaddr = NULL, *port = NULL, *db = NULL, *user = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !*o->val)
            continue;
        if (strcmp(o->keyword, "host") == 0)
            host = o->val;
        else if (strcmp(o->keyword, "hostaddr") == 0)
            hostaddr = o->val;
        else if (strcmp(o->keyword, "port") == 0)
            port = o->val;
        else if (strcmp(o->keyword, "dbname") == 0)
            db = o->val;
        else if (strcmp(o->keyword, "user") == 0)
            user = o->val;
    }
    snprintf(out, len, "postgresql %s%s%s:%s/%s", user ? user : "", user ? "@" : "",
             host ? host : hostaddr ? hostaddr : "(local socket)", port ? port : "5432",
             db ? db : user ? user : "(default)");
    PQconninfoFree(opts);
    return 0;
}

sg_store *sg_store_pg_open(const char *url, sg_err *err)
{
    pg_store *s = calloc(1, sizeof *s);
    if (!s || !(s->url = strdup(url))) {
        free(s);
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    s->base.ops = &pg_ops;
    if (describe(url, s->where, sizeof s->where, err) < 0 || pg_connect(s, err) < 0 || pg_migrate(s, err) < 0) {
        if (s->conn && PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
            sg_err dummy;
            exec_all(s, "ROLLBACK", "rollback", -1, NULL, &dummy);
        }
        pg_close(&s->base);
        return NULL;
    }
    return &s->base;
}

int sg_store_pg_statement_timeout(sg_store *base, unsigned ms, sg_err *err)
{
    if (!base || base->ops != &pg_ops)
        return sg_err_set(err, EINVAL, "a statement timeout is PostgreSQL's");
    pg_store *s = (pg_store *)base;
    s->timeout_ms = ms;
    char set[64];
    snprintf(set, sizeof set, "SET statement_timeout = %u", ms);
    return ensure_conn(s, err) < 0 ? -1 : exec_all(s, set, "set the statement timeout", -1, NULL, err);
}

PGconn *sg_store_pg_conn(sg_store *base, const char **where, sg_err *err)
{
    if (!base || base->ops != &pg_ops)
        return NULL;
    pg_store *s = (pg_store *)base;
    if (where)
        *where = s->where;
    if (ensure_conn(s, err) < 0)
        return NULL;
    return s->conn;
}

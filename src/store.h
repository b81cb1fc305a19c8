/* store: where the ingest keeps events. One small interface, several
 * backends: "sqlite:/path/events.db" (store_sqlite.c) and
 * "postgresql://..." (store_pg.c, libpq; several ingest nodes may share one
 * database), behind sg_store_ops.
 *
 * Rows are unique on (learner, task, sandbox, seq): putting a row again is a
 * no-op (at-least-once on the wire, exactly once in the store). */
#ifndef SG_STORE_H
#define SG_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SG_STORE_QUERY_MAX 1000          /* rows one query returns at most */

typedef struct sg_store_row {
    const char *learner, *task, *sandbox;
    int64_t seq;
    const char *kind;
    const char *ts;          /* the client's timestamp */
    const char *received;    /* the server's receive time (RFC 3339) */
    const char *payload;     /* JSON text of the payload object */
    size_t payload_len;
} sg_store_row;

typedef struct sg_store_query {
    const char *learner, *task, *sandbox;  /* NULL: any */
    int64_t after_seq;                     /* seq > after_seq; -1: all */
    int64_t after_id;                      /* row id > after_id (follow cursor); -1: all */
    size_t limit;                          /* 0 or > SG_STORE_QUERY_MAX: SG_STORE_QUERY_MAX */
} sg_store_query;

typedef struct sg_store sg_store;

/* Backend interface. */
typedef struct sg_store_ops {
    int (*put)(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err);
    int (*contiguous)(sg_store *s, const char *learner, const char *task, const char *sandbox,
                      int64_t *seq, sg_err *err);
    json_t *(*events)(sg_store *s, const sg_store_query *q, sg_err *err);
    json_t *(*sandboxes)(sg_store *s, sg_err *err);
    void (*close)(sg_store *s);
} sg_store_ops;

struct sg_store {
    const sg_store_ops *ops;
};

/* Opens (creating if needed) the store named by url. */
sg_store *sg_store_open(const char *url, sg_err *err);
void sg_store_close(sg_store *s);

/* Stores rows in one transaction, committed durably before it returns.
 * Duplicates are ignored; *inserted (optional) counts the new rows. */
int sg_store_put(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err);

/* Highest contiguous committed seq of a stream, counting from 0: *seq holds
 * a known-contiguous value on entry (-1 if none) and the advanced one on
 * return (-1: seq 0 not stored yet). */
int sg_store_contiguous(sg_store *s, const char *learner, const char *task,
                        const char *sandbox, int64_t *seq, sg_err *err);

/* Events in seq order per stream (ordered by id when after_id >= 0), as a
 * JSON array of {"id","learner","task","sandbox","seq","kind","ts",
 * "received","payload"}. */
json_t *sg_store_events(sg_store *s, const sg_store_query *q, sg_err *err);

/* [{"learner","task","sandbox","events","first_seq","last_seq","acked_seq",
 *   "first_received","last_received"}] */
json_t *sg_store_sandboxes(sg_store *s, sg_err *err);

/* Backends. */
sg_store *sg_store_sqlite_open(const char *path, sg_err *err);
/* url: "postgresql://[user[:pw]@]host[:port]/db[?param=...]" (libpq's URL form). */
sg_store *sg_store_pg_open(const char *url, sg_err *err);

#endif

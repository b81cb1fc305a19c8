/* store: where the ingest keeps events. One small interface, several
 * backends: "sqlite:/path/events.db" (store_sqlite.c) and
 * "postgresql://..." (store_pg.c, libpq; several ingest nodes may share one
 * database), behind sg_store_ops.
 *
 * Rows are unique on (learner, task, sandbox, seq): putting a row again is a
 * no-op (at-least-once on the wire, exactly once in the store).
 *
 * The ingest stores with sg_store_append, which holds each stream to its
 * order: a row is stored only if its seq is the stream's next one (the
 * highest stored seq + 1, 0 for a new stream), decided inside the
 * transaction from the database (several nodes may share it). A row whose
 * seq is already stored is a resend: accepted (and not stored again) only
 * if identical in content - the same kind and the same payload bytes. ts
 * does not count (a client that rebuilds a frame to resend it stamps it
 * anew; the first ts stored stays), nor does the frame's layout around
 * them (key order, whitespace, sandbox_id).
 * Anything else - a seq ahead of the next (a gap, e.g. 2^63-1), or a
 * resend with other content - is refused and not stored: nobody holding a
 * stream's token can take over seqs the real client has not sent yet, or
 * rewrite ones it has. (A missing seq below the highest can exist only in a
 * store written before this rule; it is accepted, filling the hole.) */
#ifndef SG_STORE_H
#define SG_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* The schema's version, recorded in the store (table sg_schema). Both
 * backends use one vocabulary: sg_events (the rows), sg_schema (the
 * version), and in PostgreSQL sg_streams (each stream's watermark). Version
 * 1 is the release before: SQLite's table was "events" and neither had
 * sg_schema. Version 3 adds the contents and recordings (store_contents.h),
 * version 4 the revoked tokens, version 5 the purges' count, version 6 the
 * sandbox hosts (sg_hosts), version 7 SQLite's content and recording parts
 * in rowid tables (store_sqlite.c: a part's bytes out of its key's
 * b-tree). Opening a store migrates an older one at once, in one
 * transaction; a newer one is refused with the versions named. */
#define SG_STORE_SCHEMA_VERSION 7

#define SG_STORE_QUERY_MAX 1000          /* rows one query returns at most */
#define SG_STORE_HOSTS_MAX 256           /* hosts sg_store_hosts returns at most (the backends' LIMIT) */

typedef struct sg_store_row {
    const char *learner, *task, *sandbox;
    int64_t seq;
    const char *kind;
    const char *ts;          /* the client's timestamp */
    const char *received;    /* the server's receive time (RFC 3339) */
    const char *payload;     /* JSON text of the payload object */
    size_t payload_len;
} sg_store_row;

/* sg_store_append's verdict on each row. */
typedef enum sg_store_verdict {
    SG_STORE_NEW = 0,    /* the stream's next seq: stored */
    SG_STORE_SAME,       /* an identical resend of a stored row: not stored again */
    SG_STORE_GAP,        /* ahead of the stream's next seq: refused */
    SG_STORE_CONFLICT,   /* a stored seq with other content: refused */
} sg_store_verdict;

#define SG_STORE_PAGE_BYTES (4 * 1024 * 1024) /* payload bytes one query returns, about */

typedef struct sg_store_query {
    const char *learner, *task, *sandbox;  /* NULL: any */
    const char *kinds;                     /* "command,test_result": only these; NULL: any */
    const char *except_kinds;              /* "activity,process": not these; NULL: none left out */
    int64_t after_seq;                     /* seq > after_seq; -1: all */
    int64_t after_id;                      /* row id > after_id (follow cursor); -1: all */
    /* 0: SG_STORE_QUERY_MAX; at most SG_STORE_QUERY_MAX + 1 (a page of
     * /v1/events asks for one row past its end: whether more follow) */
    size_t limit;
    /* Stop after the row that brings the payloads' bytes to this (0:
     * SG_STORE_PAGE_BYTES): a page is bounded by bytes, not only rows. At
     * least one row is returned; the page may pass it by one row. */
    size_t max_bytes;
    bool *cut;                             /* optional out: stopped by max_bytes */
} sg_store_query;

typedef struct sg_store sg_store;

/* One stored event as a backend hands it out (sg_store_scan): borrowed,
 * valid during the callback only. */
typedef struct sg_store_event {
    int64_t id, seq;
    const char *learner, *task, *sandbox, *kind, *ts, *received;
    const char *payload;     /* the payload object's JSON text as stored */
    size_t payload_len;
} sg_store_event;

/* Called for each row in order; < 0 stops the scan (it then fails). */
typedef int (*sg_store_event_fn)(void *ud, const sg_store_event *e);

/* Backend interface. */
struct sg_store_hosts_query;

typedef struct sg_store_ops {
    int (*put)(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err);
    int (*load_begin)(sg_store *s, sg_err *err);
    int (*load_put)(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err);
    int (*load_end)(sg_store *s, bool commit, sg_err *err);
    int (*append)(sg_store *s, const sg_store_row *rows, size_t n, uint8_t *verdicts,
                  size_t *inserted, sg_err *err);
    int (*contiguous)(sg_store *s, const char *learner, const char *task, const char *sandbox,
                      int64_t *seq, sg_err *err);
    int (*scan)(sg_store *s, const sg_store_query *q, sg_store_event_fn fn, void *ud, sg_err *err);
    json_t *(*sandboxes)(sg_store *s, sg_err *err);
    json_t *(*sessions)(sg_store *s, const sg_store_query *q, sg_err *err);
    int (*last_id)(sg_store *s, int64_t *id, sg_err *err);
    int (*revoke)(sg_store *s, const char *token_id, sg_err *err);
    int (*revoked)(sg_store *s, const char *token_id, bool *yes, sg_err *err);
    json_t *(*revoked_ids)(sg_store *s, sg_err *err);
    int (*purges)(sg_store *s, int64_t *n, sg_err *err);
    int (*host_put)(sg_store *s, const char *name, const char *info, int64_t last_seen, sg_err *err);
    json_t *(*hosts)(sg_store *s, const struct sg_store_hosts_query *q, sg_err *err);
    int (*hosts_count)(sg_store *s, int64_t now, int stale_beats, int64_t *known, int64_t *stale, sg_err *err);
    int (*listen)(sg_store *s, sg_err *err);  /* NULL: no commit notices (one node) */
    int (*notified)(sg_store *s);
    void (*close)(sg_store *s);
} sg_store_ops;

/* Run by the SQLite backend's append inside its transaction, before the
 * rows (NULL: nothing): the ingest's blobs commit with their batch's
 * events, in one transaction and one fsync (store_contents.h). */
typedef int (*sg_store_in_tx_fn)(sg_store *s, void *ud, sg_err *err);

struct sg_store {
    const sg_store_ops *ops;
    sg_store_in_tx_fn in_tx;
    void *in_tx_ud;
};

/* Opens (creating if needed) the store named by url. */
sg_store *sg_store_open(const char *url, sg_err *err);
void sg_store_close(sg_store *s);

/* Stores rows in one transaction, committed durably before it returns.
 * Duplicates are ignored; *inserted (optional) counts the new rows. */
int sg_store_put(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err);

/* A load too large to hold at once (sandglass import), in one transaction
 * fed in batches: sg_store_load_begin, then sg_store_load_put for each
 * batch (rows as sg_store_put takes them; the caller may free a batch once
 * the call returns), then sg_store_load_end: commit (durably) or roll back
 * everything (also after a failed put). Nothing is visible before the
 * commit. The store's writers wait meanwhile (SQLite's write lock, the
 * PostgreSQL put lock). */
int sg_store_load_begin(sg_store *s, sg_err *err);
int sg_store_load_put(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err);
int sg_store_load_end(sg_store *s, bool commit, sg_err *err);

/* Stores rows in one transaction under the order rule above; verdicts[i]
 * (sg_store_verdict) says what became of rows[i]. Refused rows do not fail
 * the call; the others are committed durably before it returns. */
int sg_store_append(sg_store *s, const sg_store_row *rows, size_t n, uint8_t *verdicts,
                    size_t *inserted, sg_err *err);

/* The order rule, for the backends: judges rows in batch order. The
 * backend answers, inside its transaction, max_seq (the highest stored seq
 * of rows[i]'s stream, -1 if none) and stored (*same = -1: seq not stored,
 * 0: stored with other content, 1: identical). */
typedef struct sg_store_judge_ops {
    int (*max_seq)(void *ctx, const sg_store_row *rows, size_t i, int64_t *max, sg_err *err);
    int (*stored)(void *ctx, const sg_store_row *rows, size_t i, int *same, sg_err *err);
} sg_store_judge_ops;
int sg_store_judge(const sg_store_row *rows, size_t n, uint8_t *verdicts,
                   const sg_store_judge_ops *ops, void *ctx, sg_err *err);
/* Same kind and payload bytes (the content; ts is not compared). */
bool sg_store_row_same(const sg_store_row *a, const char *kind, const char *payload,
                       size_t payload_len);

/* Highest contiguous committed seq of a stream, counting from 0: *seq holds
 * a known-contiguous value on entry (-1 if none) and the advanced one on
 * return (-1: seq 0 not stored yet). */
int sg_store_contiguous(sg_store *s, const char *learner, const char *task,
                        const char *sandbox, int64_t *seq, sg_err *err);

/* The events q selects, in seq order per stream (in id order when
 * after_id >= 0), one call of fn each, their payloads as stored: no JSON
 * tree is built. The number of rows, or -1 with err (also when fn stops). */
int sg_store_scan(sg_store *s, const sg_store_query *q, sg_store_event_fn fn, void *ud, sg_err *err);

/* Appends e to b as the JSON object {"id","learner","task","sandbox","seq",
 * "kind","ts","received","payload"}: the strings escaped as jansson's
 * compact dump escapes them, the payload written as stored (it was
 * validated at ingest; a raw CR or LF in it, whitespace in valid JSON,
 * becomes a space, so the object is one line), so the bytes equal
 * json_dumps(JSON_COMPACT) of the parsed row whenever the stored payload is
 * compact, as the capture writes it. -1 on out of memory. */
int sg_store_event_json(sg_buf *b, const sg_store_event *e);

/* sg_store_scan's rows as a JSON array of the objects above (each payload
 * parsed; one that does not parse becomes {}): for callers that want a
 * tree. The read endpoints and the stream use sg_store_event_json. */
json_t *sg_store_events(sg_store *s, const sg_store_query *q, sg_err *err);

/* [{"learner","task","sandbox","events","first_seq","last_seq","acked_seq",
 *   "first_received","last_received"}], in the order of each stream's
 * first event; first/last_received: when the ingest received the events
 * first_seq and last_seq. */
json_t *sg_store_sandboxes(sg_store *s, sg_err *err);

/* The sessions (streams) under q's learner, task and sandbox (NULL: any),
 * in the order they began, after the one whose "cursor" is q->after_id, at
 * most q->limit: [{"learner","task","sandbox","cursor","events","started",
 * "last_activity","commands","aborted","state","last_test_exit"}] with
 * started and last_activity the first and last event's ts, commands the
 * run and test results, state the last `sandbox` event's state (or
 * "aborted" after a session_abort, "active" else), last_test_exit the
 * last test_result's exit_code (null: no test yet or no status). */
json_t *sg_store_sessions(sg_store *s, const sg_store_query *q, sg_err *err);
/* One row of it, for the backends (test_exit, state: NULL when none). */
json_t *sg_store_session_row(const char *const id[3], int64_t cursor, int64_t events, const char *started,
                             const char *last, int64_t commands, int64_t aborts, const char *test_exit,
                             const char *state);

/* The stream's cursor (GET /v1/stream) is the row id. Ids are given out
 * and made visible in commit order: SQLite under its write lock (BEGIN
 * IMMEDIATE), PostgreSQL under a transaction-level advisory lock held from
 * the insert to the commit (store_pg.c), so a reader that sees id N sees
 * every row below N that will ever exist: a row never commits late with a
 * lower id, whichever node wrote it. (An id may be missing for good: a
 * rolled-back batch's.) */

/* The highest row id committed (0: none). */
int sg_store_last_id(sg_store *s, int64_t *id, sg_err *err);
/* Token revocation (version 3, table sg_revoked_tokens: id, revoked):
 * token ids (wire/token.h: sg_token_id) withdrawn for good, shared by every
 * node on the store. sg_store_revoke records one (again: a no-op) and
 * commits; sg_store_revoked answers whether one is recorded. */
int sg_store_revoke(sg_store *s, const char *token_id, sg_err *err);
int sg_store_revoked(sg_store *s, const char *token_id, bool *yes, sg_err *err);
/* Every revoked token id, in order, as a JSON array of strings (few: an operator's
 * withdrawals), for a node to check its open streams at once. */
json_t *sg_store_revoked_ids(sg_store *s, sg_err *err);
/* How many purges the store has seen (version 5, table sg_purges; each
 * purge, store_export.h, adds one in its transaction): a reader that keeps
 * what it read (the ingest's session summaries) reads it again when it
 * changes, so nothing purged stays readable. */
int sg_store_purges(sg_store *s, int64_t *n, sg_err *err);
/* The sandbox hosts (version 6, table sg_hosts: name, info, last_seen):
 * each host's last registration (wire/hostreg.h: info is its canonical
 * JSON text) and when the ingest took it (unix seconds, the ingest's
 * clock). sg_store_host_put replaces a host's row, or adds it, and
 * commits; sg_store_hosts lists them in the order of their names,
 * SG_STORE_HOSTS_MAX at most a call (a page: the next starts after its
 * last name): [{"name", "last_seen", "info": {...}}].
 *
 * A session's host: a registration lists the host's sandboxes by id
 * (info.sandboxes[].id), the same id as the session's stream (learner,
 * task, sandbox) in sg_events; q->sandbox finds the hosts that list it. */
typedef struct sg_store_hosts_query {
    const char *name;    /* only this host; NULL: any */
    const char *after;   /* only names after this one (the page's cursor); NULL: from the first */
    const char *sandbox; /* only hosts listing a sandbox whose id begins with this; NULL: any */
} sg_store_hosts_query;
int sg_store_host_put(sg_store *s, const char *name, const char *info, int64_t last_seen, sg_err *err);
json_t *sg_store_hosts(sg_store *s, const sg_store_hosts_query *q, sg_err *err);
/* How many hosts are registered, and how many of them are stale at now:
 * not seen for more than stale_beats of their own heartbeats. */
int sg_store_hosts_count(sg_store *s, int64_t now, int stale_beats, int64_t *known, int64_t *stale, sg_err *err);
/* One row of it, for the backends: NULL when info is not JSON. */
json_t *sg_store_host_row(const char *name, const char *info, int64_t last_seen);
/* Commit notices from every node writing the store (PostgreSQL: LISTEN;
 * each commit NOTIFYs): the fd to poll for reading, or -1 with err;
 * ENOTSUP when the backend has no other writer to hear (SQLite). Use a
 * store opened for this only. */
int sg_store_listen(sg_store *s, sg_err *err);
/* After the fd polled readable: > 0 notices came, 0 none, -1 the
 * connection is lost (open a new store and listen again). */
int sg_store_notified(sg_store *s);

/* 0 if a store of schema version `version` can be opened (migrated) by
 * this build; else -1 with err naming both versions (where: the store). */
int sg_store_schema_check(int version, const char *where, sg_err *err);

/* Backends. */
sg_store *sg_store_sqlite_open(const char *path, sg_err *err);
/* url: "postgresql://[user[:pw]@]host[:port]/db[?param=...]" (libpq's URL form). */
sg_store *sg_store_pg_open(const char *url, sg_err *err);

#endif

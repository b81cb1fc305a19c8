/* store_contents: the exact code states and the terminal recordings in the
 * store, beside the events (store.h). Schema version 3 adds two tables to
 * both backends (SQLite and PostgreSQL):
 *
 *   sg_contents (sha256 text PRIMARY KEY, size bigint)
 *       one row per distinct file content, whoever made it (deduplicated
 *       across events, sessions and learners); sha256 is the lowercase hex
 *       file_diff's payload carries
 *   sg_content_parts (sha256 text, off bigint, data blob/bytea,
 *                     PRIMARY KEY (sha256, off))
 *       the bytes, in parts of at most SG_CONTENT_PART bytes; a content is
 *       whole when its parts' lengths add up to its size
 *   sg_casts (learner, task, sandbox, session text, off bigint, data,
 *             PRIMARY KEY (learner, task, sandbox, session, off))
 *       each terminal session's asciicast bytes, in the order written
 *
 * Every put is idempotent (a part already stored is ignored): the spool
 * replays what the ingest has not acked, and contents and recording parts
 * take no seq of the event stream (wire/event.h: blob frames), so a resend
 * is simply stored again as nothing. */
#ifndef SG_STORE_CONTENTS_H
#define SG_STORE_CONTENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "ingest/store.h"

#define SG_CONTENT_PART (384 * 1024) /* raw bytes of one part (base64 in a frame: 512 KiB) */

typedef struct sg_content_part {
    const char *sha256;   /* 64 lowercase hex digits */
    int64_t size;         /* the whole content's size */
    int64_t off;          /* this part's offset in it */
    const void *data;
    size_t len;
} sg_content_part;

typedef struct sg_cast_part {
    const char *learner, *task, *sandbox;
    const char *session;  /* the terminal session's name (its cast file's) */
    int64_t off;
    const void *data;
    size_t len;
} sg_cast_part;

/* Called with consecutive bytes of a content or a recording; < 0 stops. */
typedef int (*sg_store_bytes_fn)(void *ud, const void *data, size_t len);

/* Stores parts in one transaction (a part already stored is skipped). */
int sg_store_put_contents(sg_store *s, const sg_content_part *parts, size_t n, sg_err *err);
int sg_store_put_casts(sg_store *s, const sg_cast_part *parts, size_t n, sg_err *err);

/* The same, committed without waiting for the disk (SQLite: synchronous
 * NORMAL in WAL mode; PostgreSQL: synchronous_commit off for the
 * transaction): durable with the next durable commit on the same store,
 * whose log flush covers it. The ingest's writer commits a batch's blobs
 * so, then its events durably, before any ack: one fsync, not two. */
int sg_store_put_contents_lazy(sg_store *s, const sg_content_part *parts, size_t n, sg_err *err);
int sg_store_put_casts_lazy(sg_store *s, const sg_cast_part *parts, size_t n, sg_err *err);

/* SQLite: the parts inside the transaction open on s (from its in_tx
 * hook, store.h), so they commit with that transaction. */
int sg_store_put_blobs_in_tx(sg_store *s, const sg_content_part *cp, size_t nc,
                             const sg_cast_part *kp, size_t nk, sg_err *err);

/* 1 and *size when the content is stored whole, 0 when it is not (unknown,
 * or parts missing), -1 on error. */
int sg_store_content_stat(sg_store *s, const char *sha256, int64_t *size, sg_err *err);
/* The content's bytes in order, by parts (fn once per part). 0 when it is
 * whole and read, -1 with err (ENOENT: not stored whole). */
int sg_store_content_read(sg_store *s, const char *sha256, sg_store_bytes_fn fn, void *ud,
                          sg_err *err);

/* Called before each content's bytes in sg_store_contents_each: its size,
 * or -1 when it is not stored whole (no bytes follow); < 0 stops. */
typedef int (*sg_store_content_fn)(void *ud, const char *sha256, int64_t size);

/* The n contents in turn: head, then (when whole) the bytes by fn. On
 * SQLite in one read transaction. 0, or -1 with err. */
int sg_store_contents_each(sg_store *s, const char *const *sha256, size_t n, sg_store_content_fn head,
                           sg_store_bytes_fn fn, void *ud, sg_err *err);

/* The recordings of a sandbox: [{"learner","task","sandbox","session","bytes"}]
 * (learner, task: NULL any). */
json_t *sg_store_casts(sg_store *s, const char *learner, const char *task, const char *sandbox,
                       sg_err *err);
/* One recording's bytes in order. 0, or -1 with err (ENOENT: none). */
int sg_store_cast_read(sg_store *s, const char *learner, const char *task, const char *sandbox,
                       const char *session, sg_store_bytes_fn fn, void *ud, sg_err *err);

/* Whether s is 64 lowercase hex digits. */
bool sg_store_sha256_valid(const char *s);

#endif

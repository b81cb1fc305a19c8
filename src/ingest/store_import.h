/* store_import: a JSONL export (sandglass export --format jsonl) loaded
 * into a store as the rows it was exported from (the same learner, task,
 * sandbox, seq, kind, ts, received and payload bytes), for `sandglass
 * import --store` and the ingest's POST /v1/import alike.
 *
 * All rows go in one transaction, all or nothing, streamed into it in
 * batches (sg_store_load_*: at most SG_IMPORT_BATCH_ROWS rows or about
 * SG_IMPORT_BATCH_BYTES held at once, whatever the input's size); a line
 * longer than SG_IMPORT_LINE_MAX or not a row is named (its number and
 * what is wrong), the transaction rolled back, and nothing is imported. A
 * row already in the store (its learner, task, sandbox and seq) is left as
 * it is, and counted. */
#ifndef SG_STORE_IMPORT_H
#define SG_STORE_IMPORT_H

#include <stddef.h>
#include <stdio.h>

#include "base/err.h"
#include "ingest/store.h"

#define SG_IMPORT_LINE_MAX (64 * 1024 * 1024)
#define SG_IMPORT_BATCH_ROWS 1000
#define SG_IMPORT_BATCH_BYTES (4 * 1024 * 1024)

typedef struct sg_store_import_result {
    size_t total;           /* rows read */
    size_t inserted;        /* of them new to the store */
    unsigned long bad_line; /* the line refused (1-based), 0: none */
} sg_store_import_result;

/* The JSONL read from f loaded into s in one transaction: 0, or -1 with
 * err ("line N: what is wrong", res->bad_line N; or the store's or the
 * read's error) and nothing imported. */
int sg_store_import(sg_store *s, FILE *f, sg_store_import_result *res, sg_err *err);

#endif

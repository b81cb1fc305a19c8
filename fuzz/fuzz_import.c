/* libFuzzer target: a JSONL export loaded into a store (src/ingest/
 * store_import.c: `sandglass import --store` and the ingest's POST
 * /v1/import), bytes from whoever made the file. The store is SQLite in
 * memory, opened once; each input is one import.
 *
 * Invariants: the import succeeds or fails whole — a failure (a bad line,
 * whose number it names) adds no row to the store; a success adds a row
 * exactly when it counts one inserted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ingest/store.h"
#include "ingest/store_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sg_store *store;

static int64_t last_id(void)
{
    sg_err err;
    int64_t id = 0;
    if (sg_store_last_id(store, &id, &err) < 0)
        abort();
    return id;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_err err;
    if (!store && !(store = sg_store_open("sqlite::memory:", &err)))
        abort();
    if (size == 0)
        return 0; /* fmemopen wants a buffer */
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f)
        abort();
    int64_t before = last_id();
    sg_store_import_result res;
    int rc = sg_store_import(store, f, &res, &err);
    fclose(f);
    int64_t after = last_id();
    if (rc != 0 && rc != -1)
        abort();
    if (rc < 0 && (after != before || res.inserted != 0))
        abort(); /* half imported */
    if (res.bad_line && rc == 0)
        abort();
    if (rc == 0 && (res.inserted > 0) != (after > before))
        abort();
    return 0;
}

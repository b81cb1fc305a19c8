/* store_export: the operators' actions on a store beside the ingest's
 * (sandglass purge, the ingest's --retain-days): each opens its own
 * connection to the store named by its URL, after sg_store_open has
 * checked (and migrated) the schema, so the backends' files stay as they
 * are. Both backends, one transaction each. */
#ifndef SG_STORE_EXPORT_H
#define SG_STORE_EXPORT_H

#include <stdint.h>

#include "base/err.h"

typedef struct sg_store_purge_q {
    const char *learner, *task, *sandbox; /* NULL: any (one at least, or older_than) */
    /* Whole sessions (streams) whose last event was received before this
     * time (RFC 3339 as the ingest writes it: 2026-12-03T13:05:00.000000+00:00). */
    const char *older_than;
} sg_store_purge_q;

/* Removes the events q selects (and PostgreSQL's stream watermarks of the
 * streams left empty) in one transaction: *removed counts the events. */
int sg_store_purge(const char *url, const sg_store_purge_q *q, int64_t *removed, sg_err *err);

/* The cutoff for "older than days": now - days, in the ingest's form. */
void sg_store_cutoff(double days, char *buf, size_t len);

#endif

/* labels: the names of a sandbox's checkpoints, on the supervisor's side.
 *
 * The queue: an exec that finds the workspace unchanged (its fingerprint,
 * checkpoint/fingerprint.h) reuses the newest checkpoint and only records
 * its label. Labels wait here and go to the store in one batch — before
 * the worker's next request, when it goes idle, or when SG_LABELS_MAX are
 * waiting — which the worker appends in one write under one lock (one
 * lock, ref lookup and append per label made a ~4 ms burst of worker CPU
 * every 256 execs, which slowed the exec it met).
 *
 * The lookups: which checkpoint a rollback goes to, by label or by (a
 * prefix of) its id, from the store's list. */
#ifndef SG_LABELS_H
#define SG_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/ckpt_proto.h"

#define SG_LABELS_MAX 256 /* labels queued before they go to the store */

typedef struct sg_labels {
    char **v;        /* SG_LABELS_MAX entries once the first is queued */
    int64_t *times;  /* when each was queued, seconds since the epoch */
    size_t n;
} sg_labels;

/* Whether the queue must go to the store before another label comes. */
bool sg_labels_full(const sg_labels *q);

/* Queues a copy of label, made at time t. Returns -1 (nothing queued)
 * when the queue is full. Aborts when out of memory, as sg_xstrdup. */
int sg_labels_push(sg_labels *q, const char *label, int64_t t);

/* Empties the queue (once the labels went to the store). */
void sg_labels_clear(sg_labels *q);
void sg_labels_free(sg_labels *q);

/* The newest checkpoint in v (oldest first, as the store lists them) whose
 * label is `label` (same) or is not (!same; when every one is, the newest
 * of all). Returns 1 with its id in out, 0 when there is none. */
int sg_labels_newest(const sg_checkpoint_info *v, size_t n, const char *label, bool same,
                     char out[SG_CHECKPOINT_ID_LEN + 1]);

/* Whether a rollback's --to names a checkpoint by (a prefix of) its id:
 * 4 to SG_CHECKPOINT_ID_LEN lowercase hex digits; else it is a label. */
bool sg_labels_is_id_prefix(const char *to);

#endif

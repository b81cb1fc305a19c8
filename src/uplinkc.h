/* uplinkc: the supervisor's side of the per-host uplink daemon (uplinkd.h).
 *
 * The capture owns the spool; this client tells the daemon what is synced
 * and turns the daemon's acks into sg_spool_ack (persisted, trimmed). It
 * connects to <state>/uplink.sock, starting sandglass-uplink (next to the
 * supervisor; $SANDGLASS_UPLINK overrides) when no daemon answers, and
 * connects again whenever the daemon goes away: 50 ms after a loss, then
 * doubling to 2 s while it fails. The daemon's uplink events come through
 * the same callback type as an in-process uplink's (uplink.h).
 *
 * Everything runs on the loop's thread. */
#ifndef SG_UPLINKC_H
#define SG_UPLINKC_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "err.h"
#include "spool.h"
#include "uplink.h"

#define SG_UPLINKC_RETRY_MIN_MS 50
#define SG_UPLINKC_RETRY_MAX_MS 2000

typedef struct sg_uplinkc sg_uplinkc;

typedef struct sg_uplinkc_config {
    const char *sandbox, *url, *learner, *task;
    const char *spool_dir;     /* the spool's directory, absolute */
    const char *secret_file;   /* the token's secret (the daemon signs) */
    bool secret_create;        /* the default secret: made if missing */
} sg_uplinkc_config;

/* Connects (or starts the daemon and connects soon after). The spool
 * must outlive the client. */
sg_uplinkc *sg_uplinkc_new(uv_loop_t *loop, const sg_uplinkc_config *cfg, sg_spool *spool,
                           sg_err *err);
void sg_uplinkc_set_event_cb(sg_uplinkc *u, sg_uplink_event_fn fn, void *ud);
/* New synced records are in the spool. */
void sg_uplinkc_notify(sg_uplinkc *u);
/* Outside uv_run only: runs the loop until every synced record is acked
 * (0) or timeout_ms passes (-1, ETIMEDOUT). */
int sg_uplinkc_drain(sg_uplinkc *u, uint64_t timeout_ms, sg_err *err);
/* Stops (inside or outside the loop); the loop then closes its handles. */
void sg_uplinkc_close(sg_uplinkc *u);
/* Outside uv_run only. Closes if needed and frees. NULL is fine. */
void sg_uplinkc_free(sg_uplinkc *u);

#endif

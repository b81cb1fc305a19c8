/* uplink_client: the supervisor's side of the per-host uplink daemon (delivery/uplink_daemon.h).
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
#ifndef SG_UPLINK_CLIENT_H
#define SG_UPLINK_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/err.h"
#include "delivery/spool.h"
#include "delivery/uplink.h"

#define SG_UPLINK_CLIENT_RETRY_MIN_MS 50
#define SG_UPLINK_CLIENT_RETRY_MAX_MS 2000
/* A drain's bound when the ingest was never reached (see sg_uplink_client_drain). */
#define SG_UPLINK_CLIENT_UNREACHED_DRAIN_MS 1000

typedef struct sg_uplink_client sg_uplink_client;

typedef struct sg_uplink_client_config {
    const char *sandbox, *url, *learner, *task;
    const char *spool_dir;     /* the spool's directory, absolute */
    const char *secret_file;   /* the token's secret (the daemon signs) */
    const char *ca_file;       /* wss: the CAs to verify the ingest by (absolute;
                                  NULL: the system's), sent in the hello */
    bool secret_create;        /* the default secret: made if missing */
} sg_uplink_client_config;

/* Connects (or starts the daemon and connects soon after). The spool
 * must outlive the client. */
sg_uplink_client *sg_uplink_client_new(uv_loop_t *loop, const sg_uplink_client_config *cfg, sg_spool *spool,
                           sg_err *err);
void sg_uplink_client_set_event_cb(sg_uplink_client *u, sg_uplink_event_fn fn, void *ud);
/* New synced records are in the spool. */
void sg_uplink_client_notify(sg_uplink_client *u); /* NULL: nothing */
/* Outside uv_run only: runs the loop until every synced record is acked
 * (0) or timeout_ms passes (-1, ETIMEDOUT); at most
 * SG_UPLINK_CLIENT_UNREACHED_DRAIN_MS when the ingest was never reached
 * (every attempt so far failed). */
int sg_uplink_client_drain(sg_uplink_client *u, uint64_t timeout_ms, sg_err *err);
/* Stops (inside or outside the loop); the loop then closes its handles. */
void sg_uplink_client_close(sg_uplink_client *u);
/* Outside uv_run only. Closes if needed and frees. NULL is fine. */
void sg_uplink_client_free(sg_uplink_client *u);

#endif

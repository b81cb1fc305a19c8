/* revoked_poll: `sandglass serve --ingest URL` keeping its list of revoked
 * tokens (serve/terminal.h: sg_serve_set_revoked) from the ingest's store.
 * serve has no store of its own; the ids a `sandglass token revoke` put in
 * the store's sg_revoked_tokens come from GET /v1/revoked every interval,
 * asked with an operator read token serve makes from its secret for the
 * one request (it reads nothing else). The request runs on libuv's thread
 * pool, never on serve's loop. An ingest that cannot be reached keeps the
 * last list in force (logged when that changes): a learner's terminal
 * does not go down with the ingest, and what was revoked stays refused. */
#ifndef SG_CLI_REVOKED_POLL_H
#define SG_CLI_REVOKED_POLL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <uv.h>

#include "base/err.h"
#include "cli/ingest_http.h"
#include "serve/terminal.h"

#define SG_REVOKED_POLL_DEFAULT_S 15 /* as an ingest node's check of its open streams */
#define SG_REVOKED_POLL_MAX_S 3600
#define SG_REVOKED_TOKEN_TTL_S 60    /* the read token of one request */

typedef struct sg_revoked_poll {
    uv_loop_t *loop;
    sg_serve *srv;
    sg_cli_target target;
    char url[512];              /* for the log */
    char secret_path[PATH_MAX]; /* serve's --secret */
    unsigned interval_s;
    uv_timer_t timer;
    uv_work_t work;
    bool on, busy, again;       /* a request asked while one ran goes next */
    bool tried, ok;             /* the last result, for logging its changes */
    size_t count;               /* ids in force */
    json_t *got;                /* the worker's result, or NULL with err */
    sg_err err;
} sg_revoked_poll;

/* Asks at once and then every interval_s seconds. */
void sg_revoked_poll_start(sg_revoked_poll *p, uv_loop_t *loop, sg_serve *srv, const sg_cli_target *target,
                           const char *url, const char *secret_path, unsigned interval_s);
/* Asks now (SIGHUP), unless a request is running (then once more after it). */
void sg_revoked_poll_now(sg_revoked_poll *p);
/* No more requests; one running ends on its own and changes nothing. */
void sg_revoked_poll_stop(sg_revoked_poll *p);

#endif

/* hostreg: what `sandglass host` tells its store about itself, and
 * `sandglass ls --all-hosts`'s reading of it (docs/man/sandglass-host.md,
 * "Registration"; the message: wire/hostreg.h). */
#ifndef SG_CLI_HOSTREG_H
#define SG_CLI_HOSTREG_H

#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "base/err.h"
#include "cli/ingest_http.h"
#include "wire/token.h"

#define SG_HOST_HEARTBEAT_DEFAULT_S 30 /* sandglass host --heartbeat */
#define SG_HOST_TOKEN_TTL_S 300        /* a registration's host token */

/* token's copy, or without it an operator read token valid ttl_s seconds
 * made from secret (NULL: the config's, else <state>/ingest/secret).
 * Caller frees; NULL with err. */
char *sg_cli_read_token(const char *token, const char *secret, int64_t ttl_s, sg_err *err);

/* Every host registered in t's store, page after page of GET /v1/hosts
 * (sandbox: only those listing a sandbox whose id begins with it, NULL:
 * all), in the order of their names: an array (caller decrefs), or NULL
 * with err. At most SG_CLI_HOSTS_PAGES pages. */
#define SG_CLI_HOSTS_PAGES 256
json_t *sg_cli_hosts_all(const sg_cli_target *t, const char *token, const char *sandbox, sg_err *err);

/* This host's registration (wire/hostreg.h) from the state directory:
 * name, serve_url (NULL: none), heartbeat_s, capacity, version and at most
 * SG_HOSTREG_SANDBOXES_MAX sandboxes (the pool's spares left out);
 * *unready: the sandboxes left out for a record not (yet) whole, such as
 * one being made. */
json_t *sg_cli_host_registration(const char *name, const char *serve_url, int heartbeat_s, size_t *unready,
                                 sg_err *err);

/* POSTs reg to t's /v1/hosts with a fresh host token for its name: 0, or
 * -1 with err (the ingest's refusal named). */
int sg_cli_host_register(const sg_cli_target *t, const uint8_t secret[SG_TOKEN_SECRET_LEN], json_t *reg,
                         sg_err *err);

#endif

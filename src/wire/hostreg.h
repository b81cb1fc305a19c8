/* hostreg: a sandbox host's registration (POST /v1/hosts on an ingest,
 * with a host token: wire/token.h), the one message a host daemon sends
 * its store (docs/man/sandglass-host.md, "Registration").
 *
 *   {"v": 1, "name": N, "serve_url": URL|null, "version": V, "heartbeat_s": S,
 *    "capacity": {"cpus": C, "memory_bytes": M, "max_sandboxes": X, "pool_size": P},
 *    "sandboxes_total": T,
 *    "sandboxes": [{"id", "learner", "task"|null, "state", "created", "last_active"|null}, ...]}
 *
 * Strict: every key known and of its type, no other key; names as
 * sg_valid_name; text fields printable ASCII and bounded; at most
 * SG_HOSTREG_SANDBOXES_MAX sandboxes listed (T counts them all, so a cut
 * list says so); the whole at most SG_HOSTREG_BODY_MAX bytes. A refusal
 * names the field ("sandboxes[3].state: ..."). */
#ifndef SG_WIRE_HOSTREG_H
#define SG_WIRE_HOSTREG_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

#define SG_HOSTREG_VERSION 1
#define SG_HOSTREG_BODY_MAX (1024 * 1024)    /* bytes of one registration */
#define SG_HOSTREG_SANDBOXES_MAX 1024        /* sandboxes one lists (SG_MAX_SANDBOXES) */
#define SG_HOSTREG_URL_MAX 512               /* serve_url */
#define SG_HOSTREG_TEXT_MAX 64               /* version, created, last_active */
#define SG_HOSTREG_HEARTBEAT_MAX 3600        /* heartbeat_s: 1..this */

/* The registration in buf (len bytes) checked: its canonical form (only
 * the known keys, caller decrefs), or NULL with err naming the field. */
json_t *sg_hostreg_parse(const char *buf, size_t len, sg_err *err);

/* A state a registration may give a sandbox. */
int sg_hostreg_state_known(const char *s);

#endif

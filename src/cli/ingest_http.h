/* ingest_http: the HTTP/1.1 client of sandglassd's commands that ask an
 * ingest something (events, token --check): one GET with Connection:
 * close, a JSON answer. Plain HTTP only (http:// or ws:// addresses). */
#ifndef SG_CLI_INGEST_HTTP_H
#define SG_CLI_INGEST_HTTP_H

#include <jansson.h>

#include "base/err.h"

#define SG_CLI_HTTP_ANSWER_MAX (16 * 1024 * 1024) /* one /v1/events page */
#define SG_CLI_HTTP_TIMEOUT_S 10 /* one connect, send or read */

#define SG_CLI_TARGET_NODES 8 /* as SG_UPLINK_URLS_MAX */

typedef struct sg_cli_node {
    char host[256];
    char port[8];
} sg_cli_node;

typedef struct sg_cli_target {
    char host[256];           /* the first node's (what messages name) */
    char port[8];
    unsigned n;               /* nodes of one store, n >= 1 */
    sg_cli_node node[SG_CLI_TARGET_NODES];
} sg_cli_target;

/* http://HOST[:PORT][/...] or ws://..., or several comma-separated (ingest
 * nodes of one store, none empty, at most SG_CLI_TARGET_NODES): the hosts
 * and ports to connect to. */
int sg_cli_target_parse(const char *url, sg_cli_target *t, sg_err *err);

/* A TCP connection to the ingest, each connect, send and read bounded by
 * timeout_s: the fd, or -1 with err. With several nodes, the first that
 * takes the connection (a node that is down is skipped). */
int sg_cli_http_connect(const sg_cli_target *t, int timeout_s, sg_err *err);

/* GET path with "Authorization: Bearer token": the answer's body parsed
 * as JSON, or NULL with err. Without status_out only a 200 answer is
 * returned (another is an error naming the answer's message); with it,
 * any answer is, and *status_out is its HTTP status, or 0 when none came
 * (the ingest could not be reached, or answered no HTTP). */
/* GET path: the whole answer (owned by the caller; NULL with err when no
 * whole HTTP answer came), its status in *status (0: none), its body at
 * *body (body_len bytes, within the answer). */
char *sg_cli_http_get(const sg_cli_target *t, const char *path, const char *token, int *status, const char **body,
                      size_t *body_len, sg_err *err);

/* An answer's body as sg_cli_http_get_json returns it. */
json_t *sg_cli_http_answer_json(const char *body, size_t body_len, int status, int *status_out, sg_err *err);

json_t *sg_cli_http_get_json(const sg_cli_target *t, const char *path, const char *token, int *status_out,
                             sg_err *err);

/* The sandbox arg names in the ingest's store, by the one prefix rule
 * (base/idprefix.h; /v1/sandboxes?prefix= within the token's scope): its
 * id into out (outlen bytes) and its streams' rows ({learner, task,
 * sandbox, last_seq...}, caller decrefs), or NULL with err ("no sandbox
 * 'x' in the ingest's store", too short, ambiguous). */
json_t *sg_cli_store_sandbox(const sg_cli_target *t, const char *token, const char *arg, char *out, size_t outlen,
                             sg_err *err);

#endif

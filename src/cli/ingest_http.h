/* ingest_http: the HTTP/1.1 client of sandglassd's commands that ask an
 * ingest something (events, token --check): one GET with Connection:
 * close, a JSON answer. http:// or ws:// addresses are plain; https:// and
 * wss:// speak TLS (OpenSSL), the ingest's certificate verified, its name
 * or IP address against the URL's host, by the CAs of --ingest-ca FILE
 * (or the config's [ingest] ca, SANDGLASS_INGEST_CA), else the system's
 * trust store. Verification cannot be turned off. */
#ifndef SG_CLI_INGEST_HTTP_H
#define SG_CLI_INGEST_HTTP_H

#include <jansson.h>
#include <limits.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <sys/types.h>

#include "base/err.h"

#define SG_CLI_HTTP_ANSWER_MAX (16 * 1024 * 1024) /* one /v1/events page */
#define SG_CLI_HTTP_TIMEOUT_S 10 /* one connect, send or read */

#define SG_CLI_TARGET_NODES 8 /* as SG_UPLINK_URLS_MAX */

typedef struct sg_cli_node {
    char host[256];
    char port[8];
    bool tls;                 /* https:// or wss:// */
} sg_cli_node;

typedef struct sg_cli_target {
    char host[256];           /* the first node's (what messages name) */
    char port[8];
    unsigned n;               /* nodes of one store, n >= 1 */
    sg_cli_node node[SG_CLI_TARGET_NODES];
    char ca[PATH_MAX];        /* TLS: the CA file; "": the system's trust store */
    const char *peer;         /* what messages call it: NULL "the ingest" (another host's "serve") */
} sg_cli_target;

/* http://HOST[:PORT][/...], ws://..., https://... or wss://... (port 80 or
 * 443 by default), or several comma-separated (ingest nodes of one store,
 * none empty, at most SG_CLI_TARGET_NODES): the hosts and ports to connect
 * to. ca: --ingest-ca's value, or NULL for the config's (SANDGLASS_INGEST_CA,
 * [ingest] ca), else none; a CA file that holds no certificate is refused
 * here. */
int sg_cli_target_parse(const char *url, const char *ca, sg_cli_target *t, sg_err *err);

/* A connection to the ingest: TCP, with TLS for an https/wss node. */
typedef struct sg_cli_conn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
} sg_cli_conn;

/* Opens c to the ingest, each connect, handshake, send and read bounded
 * by timeout_s: 0, or -1 with err (a TLS failure has the code EKEYREJECTED
 * and names it: "certificate verify failed: ..."). With several nodes, the first that takes the
 * connection (a node that is down is skipped). */
int sg_cli_conn_open(const sg_cli_target *t, int timeout_s, sg_cli_conn *c, sg_err *err);
/* read(2) and a whole write over c; -1 with errno on failure. */
ssize_t sg_cli_conn_read(sg_cli_conn *c, void *buf, size_t n);
int sg_cli_conn_write_all(sg_cli_conn *c, const void *buf, size_t n);
/* Closes c (a fd of -1 is fine: nothing open). */
void sg_cli_conn_close(sg_cli_conn *c);

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

/* The same for POST path with post_len bytes of JSON at post (NULL: GET). */
char *sg_cli_http_request(const sg_cli_target *t, const char *path, const char *token, const char *post,
                          size_t post_len, int *status, const char **body, size_t *body_len, sg_err *err);

/* POST path with len bytes of mime read from fd (streamed: a large body is
 * never held), each send and read bounded by timeout_s (an answer that
 * takes the ingest a while: an import): as sg_cli_http_request. An answer
 * the ingest gave before taking the whole body is returned. */
char *sg_cli_http_post_fd(const sg_cli_target *t, const char *path, const char *token, const char *mime, int fd,
                          size_t len, int timeout_s, int *status, const char **body, size_t *body_len, sg_err *err);

/* sg_cli_http_get in two steps, so that a caller works while the ingest
 * answers: _send opens c and sends the request (0, or -1 with err and c
 * closed), _recv reads the answer on c and closes it (as
 * sg_cli_http_get's). */
int sg_cli_http_get_send(const sg_cli_target *t, const char *path, const char *token, sg_cli_conn *c, sg_err *err);
char *sg_cli_http_get_recv(const sg_cli_target *t, sg_cli_conn *c, int *status, const char **body, size_t *body_len,
                           sg_err *err);

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

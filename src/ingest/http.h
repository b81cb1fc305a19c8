/* http: the JSON answers of the HTTP servers built on libwebsockets (the
 * ingest's read endpoints, `sandglass serve`'s few): one per request, its
 * body kept in the request's per-session memory until lws says the
 * connection is writable. Errors are JSON too ({"error": ...}). */
#ifndef SG_INGEST_HTTP_H
#define SG_INGEST_HTTP_H

#include <jansson.h>
#include <libwebsockets.h>
#include <stddef.h>

#define SG_HTTP_BODY_MAX (8 * 1024 * 1024) /* bound of one answer (1000 events) */
#define SG_HTTP_SERV_BUF (256 * 1024)      /* lws's per-thread I/O buffer: see sg_http_server_info */

typedef struct sg_http_req {
    unsigned char *body; /* LWS_PRE bytes of headroom, then the body */
    size_t len;
    void *stream; /* the ingest's GET /v1/stream subscriber (ingest_sse.c) */
    void *page;   /* the ingest's GET /v1/events page being read off the loop (ingest_pages.c) */
    void *op;     /* the ingest's POST /v1/import or /v1/purge (ingest_ops.c) */
    /* A POST's body as it comes (the ingest's POST /v1/hosts), bounded by
     * its Content-Length; post_to: what the request's token let in (the
     * host it may register), NULL when refused (post_why says why). */
    unsigned char *post;
    size_t post_len, post_max;
    char *post_to;
    const char *post_why;
    unsigned post_status;
} sg_http_req;

/* Sends the headers of status with body_json (taken, even on failure) and
 * asks for a writable callback for the body. A 401 carries
 * WWW-Authenticate: Bearer. Every answer says Cache-Control: no-store
 * (learners' data stays out of caches) and X-Content-Type-Options:
 * nosniff. Returns what the lws callback returns. */
int sg_http_answer(struct lws *wsi, sg_http_req *req, unsigned int status, json_t *body_json);
/* The same with the body's JSON text already made (len bytes, one line). */
int sg_http_answer_text(struct lws *wsi, sg_http_req *req, unsigned int status, const char *text, size_t len);

/* A header of sg_http_answer_body: name with its colon ("x-frame-options:"). */
typedef struct sg_http_header {
    const char *name, *value;
} sg_http_header;

/* As sg_http_answer, for a body of any type: buf (taken, even on failure)
 * holds LWS_PRE bytes of headroom, then len bytes; hdrs are added to the
 * usual ones (their own Cache-Control replaces no-store). */
int sg_http_answer_body(struct lws *wsi, sg_http_req *req, unsigned int status, const char *mime, unsigned char *buf,
                        size_t len, const sg_http_header *hdrs, size_t nhdrs);
/* The settings both servers share, into a zeroed info: a libuv foreign
 * loop (foreign_loops[0] = loop, owned by the caller), the address bound
 * exactly (with IPv6 on, lws 4.1 binds an IPv4 iface as AF_INET6 "::",
 * the address landing in sin6_flowinfo, i.e. every interface; an IPv6
 * address binds v6-only), no uid/gid change, handshakes and idle
 * connections timed out after timeout_s, the vhost "default". */
void sg_http_server_info(struct lws_context_creation_info *info, void **foreign_loops,
                         const char *host, int port, const struct lws_protocols *protocols,
                         void *user, unsigned timeout_s);
/* LWS_CALLBACK_HTTP_WRITEABLE: the body, then the transaction's end. */
int sg_http_writeable(struct lws *wsi, sg_http_req *req);
/* LWS_CALLBACK_CLOSED_HTTP: frees what an unsent answer held (req may be
 * NULL: lws has none for a connection closed before its request). */
void sg_http_req_release(sg_http_req *req);

/* The Authorization header into token ("Bearer T": the token at token +
 * 7): NULL, or what is wrong with it (missing: the message given). */
const char *sg_http_bearer(struct lws *wsi, char *token, size_t size, const char *missing);

#endif

/* http: JSON answers over libwebsockets (see http.h). */
#include "ingest/http.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"

int sg_http_answer(struct lws *wsi, sg_http_req *req, unsigned int status, json_t *body_json)
{
    sg_autofree char *text = body_json ? json_dumps(body_json, JSON_COMPACT) : NULL;
    json_decref(body_json);
    if (!text)
        return -1;
    return sg_http_answer_text(wsi, req, status, text, strlen(text));
}

int sg_http_answer_text(struct lws *wsi, sg_http_req *req, unsigned int status, const char *text, size_t len)
{
    if (len + 1 > SG_HTTP_BODY_MAX)
        return lws_return_http_status(wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "answer too big"),
               -1;
    unsigned char *buf = malloc(LWS_PRE + len + 1);
    if (!buf)
        return -1;
    memcpy(buf + LWS_PRE, text, len);
    buf[LWS_PRE + len] = '\n';
    return sg_http_answer_body(wsi, req, status, "application/json", buf, len + 1, NULL, 0);
}

static int add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p, unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name, (const unsigned char *)value,
                                       (int)strlen(value), p, end);
}

int sg_http_answer_body(struct lws *wsi, sg_http_req *req, unsigned int status, const char *mime, unsigned char *buf,
                        size_t len, const sg_http_header *hdrs, size_t nhdrs)
{
    req->body = buf;
    req->len = len;
    unsigned char hbuf[LWS_PRE + 2048], *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf - 1;
    bool own_cache = false;
    for (size_t i = 0; i < nhdrs; i++)
        own_cache |= strcmp(hdrs[i].name, "cache-control:") == 0;
    if (lws_add_http_common_headers(wsi, status, mime, len, &p, end) ||
        (status == HTTP_STATUS_UNAUTHORIZED && /* RFC 6750 */
         add_header(wsi, "www-authenticate:", "Bearer realm=\"sandglass\"", &p, end)) ||
        (!own_cache && add_header(wsi, "cache-control:", "no-store", &p, end)) ||
        add_header(wsi, "x-content-type-options:", "nosniff", &p, end))
        return -1;
    for (size_t i = 0; i < nhdrs; i++)
        if (add_header(wsi, hdrs[i].name, hdrs[i].value, &p, end))
            return -1;
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    lws_callback_on_writable(wsi);
    return 0;
}

int sg_http_writeable(struct lws *wsi, sg_http_req *req)
{
    if (!req->body)
        return -1;
    int n = lws_write(wsi, req->body + LWS_PRE, req->len, LWS_WRITE_HTTP_FINAL);
    free(req->body);
    req->body = NULL;
    if (n < (int)req->len)
        return -1;
    if (lws_http_transaction_completed(wsi))
        return -1;
    return 0;
}

void sg_http_req_release(sg_http_req *req)
{
    if (!req) /* a connection closed before its request was read has none */
        return;
    free(req->body);
    req->body = NULL;
    free(req->post);
    free(req->post_to);
    req->post = NULL;
    req->post_to = NULL;
}

void sg_http_server_info(struct lws_context_creation_info *info, void **foreign_loops,
                         const char *host, int port, const struct lws_protocols *protocols,
                         void *user, unsigned timeout_s)
{
    memset(info, 0, sizeof *info);
    info->port = port;
    info->iface = host;
    info->protocols = protocols;
    info->options = LWS_SERVER_OPTION_LIBUV |
                    (strchr(host, ':') ? LWS_SERVER_OPTION_IPV6_V6ONLY_MODIFY | LWS_SERVER_OPTION_IPV6_V6ONLY_VALUE
                                       : LWS_SERVER_OPTION_DISABLE_IPV6);
    info->foreign_loops = foreign_loops;
    info->user = user;
    info->gid = (gid_t)-1;
    info->uid = (uid_t)-1;
    info->timeout_secs = timeout_s;
    info->timeout_secs_ah_idle = timeout_s;
    info->keepalive_timeout = (int)timeout_s;
    info->vhost_name = "default";
    /* lws drains a body the socket did not take at once in pieces of this
     * size, one loop turn (and three epoll_ctl) each: at its 4 KiB default
     * a 1 MB page of /v1/events cost ~250 turns. */
    info->pt_serv_buf_size = SG_HTTP_SERV_BUF;
}

const char *sg_http_bearer(struct lws *wsi, char *token, size_t size, const char *missing)
{
    int alen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (alen <= 0)
        return missing;
    if ((size_t)alen >= size || lws_hdr_copy(wsi, token, (int)size, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
        return "malformed token: too long";
    if (strncasecmp(token, "Bearer ", 7) != 0)
        return "Authorization must be 'Bearer <token>'";
    return NULL;
}

#include "cli/ingest_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/config.h"
#include "delivery/uplink.h"

static int node_parse(const char *url, sg_cli_node *t, sg_err *err)
{
    static const struct {
        const char *prefix;
        bool tls;
    } schemes[] = {{"http://", false}, {"ws://", false}, {"https://", true}, {"wss://", true}};
    const char *p = url;
    size_t i;
    for (i = 0; i < SG_ARRAY_LEN(schemes); i++)
        if (strncmp(p, schemes[i].prefix, strlen(schemes[i].prefix)) == 0)
            break;
    if (i < SG_ARRAY_LEN(schemes)) {
        p += strlen(schemes[i].prefix);
        t->tls = schemes[i].tls;
    } else if (strstr(p, "://")) {
        return sg_err_set(err, EINVAL, "--ingest %s: expected http://, ws://, https:// or wss://", url);
    } else {
        t->tls = false;
    }
    const char *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    char hostport[300];
    if (hl == 0 || hl >= sizeof hostport)
        return sg_err_set(err, EINVAL, "--ingest %s: bad address", url);
    memcpy(hostport, p, hl);
    hostport[hl] = '\0';
    char *colon = strrchr(hostport, ':');
    if (colon && !strchr(colon, ']')) {
        *colon = '\0';
        snprintf(t->port, sizeof t->port, "%.7s", colon + 1);
    } else {
        snprintf(t->port, sizeof t->port, t->tls ? "443" : "80");
    }
    char *h = hostport;
    if (h[0] == '[') {
        h++;
        h[strcspn(h, "]")] = '\0';
    }
    snprintf(t->host, sizeof t->host, "%.255s", h);
    return 0;
}

int sg_cli_target_parse(const char *url, const char *ca, sg_cli_target *t, sg_err *err)
{
    sg_autofree char *copy = strdup(url);
    if (!copy)
        return sg_err_set(err, ENOMEM, "out of memory");
    t->n = 0;
    t->peer = NULL;
    for (char *p = copy;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p)
            return sg_err_set(err, EINVAL, "--ingest %s: an empty element in the list", url);
        if (t->n == SG_CLI_TARGET_NODES)
            return sg_err_set(err, EINVAL, "--ingest %s: more than %d ingest nodes", url, SG_CLI_TARGET_NODES);
        if (node_parse(p, &t->node[t->n++], err) < 0)
            return -1;
        if (!comma)
            break;
        p = comma + 1;
    }
    memcpy(t->host, t->node[0].host, sizeof t->host);
    memcpy(t->port, t->node[0].port, sizeof t->port);
    const char *origin = "--ingest-ca";
    if (!ca)
        ca = sg_config_get(SG_CONF_INGEST_CA, &origin);
    t->ca[0] = '\0';
    if (ca && *ca) {
        if (sg_uplink_ca_check(ca, err) < 0) {
            sg_err_prefix(err, "%s", origin);
            return -1;
        }
        if (strlen(ca) >= sizeof t->ca)
            return sg_err_set(err, ENAMETOOLONG, "%s: the path is too long", origin);
        snprintf(t->ca, sizeof t->ca, "%s", ca);
    }
    return 0;
}

static const char *peer_of(const sg_cli_target *t)
{
    return t->peer ? t->peer : "the ingest";
}

static int node_connect(const sg_cli_node *t, const char *peer, int timeout_s, sg_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gr = getaddrinfo(t->host, t->port, &hints, &ai);
    if (gr != 0)
        return sg_err_set(err, EINVAL, "resolve %s: %s", t->host, gai_strerror(gr));
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        /* An ingest that takes the connection and never answers must not
         * hold us for good: each connect, send and read waits this long. */
        struct timeval tv = {.tv_sec = timeout_s};
        if (fd >= 0) {
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        }
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return sg_err_sys(err, "connect to %s at %s:%s", peer, t->host, t->port);
    return fd;
}

/* OpenSSL's first queued error as text ("" when none), the queue cleared. */
static const char *ssl_error_text(char *buf, size_t size)
{
    unsigned long e = ERR_get_error();
    buf[0] = '\0';
    if (e)
        ERR_error_string_n(e, buf, size);
    ERR_clear_error();
    return buf;
}

/* The TLS client context: verification on, TLS 1.2 at least, the CAs of
 * ca (or the system's), ALPN http/1.1. NULL with err. */
static SSL_CTX *tls_ctx(const char *ca, sg_err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    char e[256];
    if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        (ca[0] ? SSL_CTX_load_verify_locations(ctx, ca, NULL) : SSL_CTX_set_default_verify_paths(ctx)) != 1 ||
        SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x08http/1.1", 9) != 0) {
        sg_err_set(err, EIO, "TLS: cannot set up the client (%s)%s%s", ssl_error_text(e, sizeof e),
                   ca[0] ? ": CA file " : "", ca);
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return ctx;
}

/* The TLS handshake on c->fd with node n, its certificate checked for n's
 * host (a DNS name, or an IP address against the certificate's IP
 * addresses). -1 with err saying what failed and what to do. */
static int tls_handshake(sg_cli_conn *c, const sg_cli_node *n, const char *peer, const char *ca, sg_err *err)
{
    c->ssl = SSL_new(c->ctx);
    if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1)
        return sg_err_set(err, ENOMEM, "TLS: out of memory");
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, n->host, ip) == 1 || inet_pton(AF_INET6, n->host, ip) == 1;
    X509_VERIFY_PARAM *param = SSL_get0_param(c->ssl);
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, n->host) != 1
              : (SSL_set_tlsext_host_name(c->ssl, n->host) != 1 || SSL_set1_host(c->ssl, n->host) != 1))
        return sg_err_set(err, EINVAL, "TLS: cannot check the host %s", n->host);
    if (SSL_connect(c->ssl) == 1)
        return 0;
    char e[256];
    long v = SSL_get_verify_result(c->ssl);
    ssl_error_text(e, sizeof e);
    if (v != X509_V_OK)
        return sg_err_set(err, EKEYREJECTED, "TLS with %s at %s:%s: certificate verify failed: %s (%s)", peer, n->host,
                          n->port, X509_verify_cert_error_string(v),
                          v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH
                              ? "the certificate is for another host"
                          : ca[0] ? "not signed by the CAs of --ingest-ca"
                                  : "give the CA that signed it with --ingest-ca FILE");
    return sg_err_set(err, EKEYREJECTED, "TLS handshake with %s at %s:%s failed%s%s (is it a plain ws:// "
                      "ingest? then use http:// or ws://)", peer, n->host, n->port, e[0] ? ": " : "", e);
}

int sg_cli_conn_open(const sg_cli_target *t, int timeout_s, sg_cli_conn *c, sg_err *err)
{
    *c = (sg_cli_conn){.fd = -1};
    for (unsigned i = 0; i < t->n; i++) { /* err: the last node's */
        c->fd = node_connect(&t->node[i], peer_of(t), timeout_s, err);
        if (c->fd < 0 || !t->node[i].tls)
            continue;
        if (!c->ctx && !(c->ctx = tls_ctx(t->ca, err))) {
            sg_cli_conn_close(c);
            return -1;
        }
        if (tls_handshake(c, &t->node[i], peer_of(t), t->ca, err) == 0)
            return 0;
        SSL_free(c->ssl);
        c->ssl = NULL;
        close(c->fd);
        c->fd = -1;
    }
    if (c->fd >= 0)
        return 0;
    sg_cli_conn_close(c);
    return -1;
}

ssize_t sg_cli_conn_read(sg_cli_conn *c, void *buf, size_t n)
{
    if (!c->ssl)
        return read(c->fd, buf, n);
    int r = SSL_read(c->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
    if (r > 0)
        return r;
    int e = SSL_get_error(c->ssl, r);
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    /* A peer that closes without close_notify (lws at the answer's end):
     * the end, as for a plain socket; a timeout stays an error. */
    if (e == SSL_ERROR_SYSCALL && errno == 0)
        return 0;
    if (e != SSL_ERROR_SYSCALL)
        errno = EPROTO;
    return -1;
}

int sg_cli_conn_write_all(sg_cli_conn *c, const void *buf, size_t n)
{
    if (!c->ssl)
        return sg_write_all(c->fd, buf, n);
    size_t done = 0;
    while (done < n) {
        size_t w = 0;
        if (SSL_write_ex(c->ssl, (const char *)buf + done, n - done, &w) != 1) {
            ERR_clear_error();
            if (errno == 0)
                errno = EPIPE;
            return -1;
        }
        done += w;
    }
    return 0;
}

void sg_cli_conn_close(sg_cli_conn *c)
{
    if (c->ssl) {
        SSL_shutdown(c->ssl); /* our close_notify; its answer is not waited for */
        SSL_free(c->ssl);
    }
    SSL_CTX_free(c->ctx);
    ERR_clear_error();
    if (c->fd >= 0)
        close(c->fd);
    *c = (sg_cli_conn){.fd = -1};
}

/* Opens c (each send and read bounded by timeout_s) and sends the head of
 * GET path, or of a POST of post_len bytes of mime when mime is given (the
 * body is the caller's to send). */
static int http_send_head(const sg_cli_target *t, const char *path, const char *token, const char *mime,
                          size_t post_len, int timeout_s, sg_cli_conn *c, sg_err *err)
{
    if (sg_cli_conn_open(t, timeout_s, c, err) < 0)
        return -1;
    char clen[128] = "";
    if (mime)
        snprintf(clen, sizeof clen, "Content-Type: %s\r\nContent-Length: %zu\r\n", mime, post_len);
    sg_autofree char *req = sg_strdup_printf(
        "%s %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: application/json\r\n"
        "Authorization: Bearer %s\r\n%sConnection: close\r\n\r\n",
        mime ? "POST" : "GET", path, t->host, t->port, token, clen);
    if (!req || sg_cli_conn_write_all(c, req, strlen(req)) < 0) {
        sg_err_sys(err, "send to %s", peer_of(t));
        sg_cli_conn_close(c);
        return -1;
    }
    return 0;
}

/* Opens c and sends the request: GET path, or POST with body (post,
 * post_len bytes of JSON). The answer is read by http_recv. */
static int http_send(const sg_cli_target *t, const char *path, const char *token, const char *post, size_t post_len,
                     sg_cli_conn *c, sg_err *err)
{
    if (http_send_head(t, path, token, post ? "application/json" : NULL, post_len, SG_CLI_HTTP_TIMEOUT_S, c,
                       err) < 0)
        return -1;
    if (post && sg_cli_conn_write_all(c, post, post_len) < 0) {
        sg_err_sys(err, "send to %s", peer_of(t));
        sg_cli_conn_close(c);
        return -1;
    }
    return 0;
}

/* The whole answer on c (sent by http_send), then c closed. */
static int http_recv(const sg_cli_target *t, sg_cli_conn *c, char **out, size_t *len, sg_err *err)
{
    sg_buf b = {0};
    int rc = 0;
    while (rc == 0) {
        /* read into the answer's own buffer: a page is megabytes */
        if (sg_buf_reserve(&b, 65536) < 0) {
            rc = sg_err_set(err, ENOMEM, "out of memory");
            break;
        }
        ssize_t n = sg_cli_conn_read(c, b.data + b.len, 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && b.len == 0) /* a TLS port resets a plain request */
            rc = sg_err_sys(err, "%s at %s:%s closed the connection without an answer (a TLS port? then "
                            "use https:// or wss://)", peer_of(t), t->host, t->port);
        else if (n < 0)
            rc = sg_err_sys(err, "read from %s", peer_of(t));
        else if (n == 0)
            break;
        else if (b.len + (size_t)n > SG_CLI_HTTP_ANSWER_MAX)
            rc = sg_err_set(err, EFBIG, "answer from %s exceeds %d bytes", peer_of(t), SG_CLI_HTTP_ANSWER_MAX);
        else
            b.data[b.len += (size_t)n] = '\0';
    }
    sg_cli_conn_close(c);
    if (rc < 0) {
        sg_buf_free(&b);
        return -1;
    }
    *out = sg_buf_steal(&b, len); /* NUL-terminated */
    return *out ? 0 : sg_err_set(err, ENOMEM, "out of memory");
}

/* The answer's head read: its status and body within buf (taken), or
 * NULL with err. */
static char *http_answer(const sg_cli_target *t, char *buf, size_t have, int *status, const char **body,
                         size_t *body_len, sg_err *err)
{
    sg_autofree char *own = buf;
    char *hend = strstr(buf, "\r\n\r\n");
    if (!hend || sscanf(buf, "HTTP/1.%*[01] %d", status) != 1) {
        *status = 0;
        /* A TLS port drops a plain request without a word. */
        sg_err_set(err, EPROTO, have ? "malformed HTTP answer from %s"
                                     : "%s at %s:%s closed the connection without an answer (a TLS port? "
                                       "then use https:// or wss://)", peer_of(t), t->host, t->port);
        return NULL;
    }
    *hend = '\0';
    *body = hend + 4;
    *body_len = have - (size_t)(*body - buf);
    /* Honour Content-Length when present (the ingest always sends it). */
    for (char *line = strstr(buf, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "content-length:", 15) == 0) {
            unsigned long long cl = strtoull(line + 17, NULL, 10);
            if (cl > *body_len) {
                sg_err_set(err, EPROTO, "truncated answer from %s", peer_of(t));
                return NULL;
            }
            *body_len = (size_t)cl;
        } else if (strncasecmp(line + 2, "transfer-encoding:", 18) == 0) {
            sg_err_set(err, EPROTO, "chunked answers are not supported");
            return NULL;
        }
    }
    own = NULL;
    return buf;
}

char *sg_cli_http_get(const sg_cli_target *t, const char *path, const char *token, int *status, const char **body,
                       size_t *body_len, sg_err *err)
{
    return sg_cli_http_request(t, path, token, NULL, 0, status, body, body_len, err);
}

char *sg_cli_http_request(const sg_cli_target *t, const char *path, const char *token, const char *post,
                          size_t post_len, int *status, const char **body, size_t *body_len, sg_err *err)
{
    *status = 0;
    sg_cli_conn c;
    char *buf = NULL;
    size_t have = 0;
    if (http_send(t, path, token, post, post_len, &c, err) < 0 || http_recv(t, &c, &buf, &have, err) < 0)
        return NULL;
    return http_answer(t, buf, have, status, body, body_len, err);
}

char *sg_cli_http_post_fd(const sg_cli_target *t, const char *path, const char *token, const char *mime, int fd,
                          size_t len, int timeout_s, int *status, const char **body, size_t *body_len, sg_err *err)
{
    *status = 0;
    sg_cli_conn c;
    if (http_send_head(t, path, token, mime, len, timeout_s, &c, err) < 0)
        return NULL;
    sg_autofree char *chunk = sg_xcalloc(1, 65536);
    int rc = 0;
    for (size_t sent = 0; rc == 0 && sent < len;) {
        ssize_t n = read(fd, chunk, len - sent < 65536 ? len - sent : 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = n < 0 ? sg_err_sys(err, "read the body") : sg_err_set(err, EIO, "the body ended early");
        else if (sg_cli_conn_write_all(&c, chunk, (size_t)n) < 0)
            rc = sg_err_sys(err, "send to %s", peer_of(t));
        else
            sent += (size_t)n;
    }
    if (rc < 0 && errno != EPIPE && errno != ECONNRESET) {
        sg_cli_conn_close(&c);
        return NULL;
    }
    /* a peer that answered before the whole body (413, 401) said why: read it */
    sg_err rerr;
    char *buf = NULL;
    size_t have = 0;
    if (http_recv(t, &c, &buf, &have, rc < 0 ? &rerr : err) < 0)
        return NULL;
    return http_answer(t, buf, have, status, body, body_len, rc < 0 ? &rerr : err);
}

int sg_cli_http_get_send(const sg_cli_target *t, const char *path, const char *token, sg_cli_conn *c, sg_err *err)
{
    return http_send(t, path, token, NULL, 0, c, err);
}

char *sg_cli_http_get_recv(const sg_cli_target *t, sg_cli_conn *c, int *status, const char **body, size_t *body_len,
                           sg_err *err)
{
    *status = 0;
    char *buf = NULL;
    size_t have = 0;
    if (http_recv(t, c, &buf, &have, err) < 0)
        return NULL;
    return http_answer(t, buf, have, status, body, body_len, err);
}

json_t *sg_cli_http_answer_json(const char *body, size_t body_len, int status, int *status_out, sg_err *err)
{
    json_t *j = sg_json_parse(body, body_len, err);
    if (!j) {
        sg_err_prefix(err, "answer from the ingest (HTTP %d)", status);
        return NULL;
    }
    if (status != 200 && !status_out) {
        const char *msg = json_string_value(json_object_get(j, "error"));
        char vbuf[256]; /* the answer's text reaches the terminal too */
        sg_err_set(err, EPROTO, "ingest answered HTTP %d: %s", status,
                   sg_vis(msg ? msg : "?", strlen(msg ? msg : "?"), vbuf, sizeof vbuf));
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *sg_cli_http_get_json(const sg_cli_target *t, const char *path, const char *token, int *status_out,
                             sg_err *err)
{
    int status = 0;
    const char *body = NULL;
    size_t body_len = 0;
    sg_autofree char *buf = sg_cli_http_get(t, path, token, &status, &body, &body_len, err);
    if (status_out)
        *status_out = status;
    if (!buf)
        return NULL;
    return sg_cli_http_answer_json(body, body_len, status, status_out, err);
}

json_t *sg_cli_store_sandbox(const sg_cli_target *t, const char *token, const char *arg, char *out, size_t outlen,
                             sg_err *err)
{
    char where[300];
    snprintf(where, sizeof where, " in the ingest's store (at %s:%s)", t->host, t->port);
    if (!sg_valid_name(arg)) /* no stream has that name: nothing to ask */
        return sg_id_resolve(arg, NULL, 0, where, out, outlen, err), NULL;
    sg_autofree char *path = sg_strdup_printf("/v1/sandboxes?prefix=%s", arg);
    sg_autojson json_t *ans = sg_cli_http_get_json(t, path, token, NULL, err);
    if (!ans)
        return NULL;
    json_t *rows = json_object_get(ans, "sandboxes"), *row;
    size_t n = json_array_size(rows), i;
    sg_autofree const char **ids = calloc(n + 1, sizeof *ids);
    if (!ids)
        return sg_err_set(err, ENOMEM, "out of memory"), NULL;
    json_array_foreach(rows, i, row)
        ids[i] = json_string_value(json_object_get(row, "sandbox"));
    if (sg_id_resolve(arg, ids, n, where, out, outlen, err) < 0)
        return NULL;
    json_t *mine = json_array();
    json_array_foreach(rows, i, row)
        if (mine && ids[i] && strcmp(ids[i], out) == 0)
            json_array_append(mine, row);
    if (!mine)
        sg_err_set(err, ENOMEM, "out of memory");
    return mine;
}

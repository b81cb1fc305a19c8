/* prom: the text format and access rule of /metrics (prom.h). */
#include "ingest/prom.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/ingest_internal.h"

int sg_prom_head(sg_buf *b, const char *name, const char *type, const char *help)
{
    return sg_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int sg_prom_counter(sg_buf *b, const char *name, const char *help, uint64_t v)
{
    return sg_prom_head(b, name, "counter", help) < 0 ? -1 : sg_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

int sg_prom_gauge(sg_buf *b, const char *name, const char *help, double v)
{
    return sg_prom_head(b, name, "gauge", help) < 0 ? -1 : sg_buf_printf(b, "%s %.17g\n", name, v);
}

int sg_prom_labeled(sg_buf *b, const char *name, const char *type, const char *help, const char *label,
                    const char *const *names, const uint64_t *vals, size_t n)
{
    if (sg_prom_head(b, name, type, help) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (sg_buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, names[i], (unsigned long long)vals[i]) < 0)
            return -1;
    return 0;
}

int sg_prom_histogram(sg_buf *b, const char *name, const char *help, const double *bounds, size_t n,
                      const uint64_t *le, uint64_t count, double sum)
{
    if (sg_prom_head(b, name, "histogram", help) < 0)
        return -1;
    uint64_t cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += le[i];
        if (sg_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum) < 0)
            return -1;
    }
    return sg_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name,
                         (unsigned long long)count, name, sum, name, (unsigned long long)count);
}

bool sg_prom_peer_loopback(struct lws *wsi)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = (int)lws_get_socket_fd(wsi);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return false;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* The scrape's token against a's: NULL, or why not. */
static const char *token_check(const sg_prom_access *a, struct lws *wsi)
{
    char token[SG_PROM_TOKEN_MAX + 64];
    const char *why = sg_http_bearer(wsi, token, sizeof token,
                                    "missing metrics token (Authorization: Bearer <token>; see --metrics-token)");
    if (why)
        return why;
    uint8_t got[SG_SHA256_LEN];
    sg_sha256 h;
    sg_sha256_init(&h);
    sg_sha256_update(&h, token + 7, strlen(token + 7));
    sg_sha256_final(&h, got);
    OPENSSL_cleanse(token, sizeof token);
    if (CRYPTO_memcmp(got, a->token_sha, sizeof got) != 0)
        return "wrong metrics token";
    return NULL;
}

const char *sg_prom_refusal(const sg_prom_access *a, struct lws *wsi, unsigned *status)
{
    *status = HTTP_STATUS_UNAUTHORIZED;
    if (a->token_set)
        return token_check(a, wsi);
    if (!a->own && !sg_prom_peer_loopback(wsi)) {
        *status = HTTP_STATUS_FORBIDDEN;
        return "/metrics answers loopback peers only (see --metrics-listen, --metrics-token)";
    }
    return NULL;
}

int sg_prom_answer(struct lws *wsi, sg_http_req *req, sg_buf *b)
{
    size_t len = b->len - LWS_PRE;
    unsigned char *body = (unsigned char *)sg_buf_steal(b, NULL);
    return sg_http_answer_body(wsi, req, HTTP_STATUS_OK, SG_PROM_MIME, body, len, NULL, 0);
}

/* The token's bytes (len, trailing newline cut) checked and hashed into a. */
static int token_take(sg_prom_access *a, const char *path, char *tok, size_t len, sg_err *err)
{
    if (len > 0 && tok[len - 1] == '\n')
        len--;
    if (len > 0 && tok[len - 1] == '\r')
        len--;
    if (len == 0 || len > SG_PROM_TOKEN_MAX)
        return sg_err_set(err, EINVAL, "--metrics-token %s: the token must be 1 to %d bytes on one line", path,
                          SG_PROM_TOKEN_MAX);
    for (size_t i = 0; i < len; i++)
        if (tok[i] <= ' ' || tok[i] > '~')
            return sg_err_set(err, EINVAL,
                              "--metrics-token %s: the token must be printable ASCII without spaces "
                              "(byte %zu is not)", path, i + 1);
    sg_sha256 h;
    sg_sha256_init(&h);
    sg_sha256_update(&h, tok, len);
    sg_sha256_final(&h, a->token_sha);
    a->token_set = true;
    return 0;
}

int sg_prom_token_load(sg_prom_access *a, const char *path, sg_err *err)
{
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sg_err_sys(err, "--metrics-token %s", path);
    if (!S_ISREG(st.st_mode))
        return sg_err_set(err, EINVAL, "--metrics-token %s: not a regular file", path);
    if (st.st_mode & S_IROTH)
        return sg_err_set(err, EPERM, "--metrics-token %s: every user may read it (chmod o-r, e.g. 0600 or 0640)",
                          path);
    size_t len = 0;
    sg_autofree char *tok = sg_read_fd(fd, SG_PROM_TOKEN_MAX + 2, &len, err);
    if (!tok) {
        sg_err_prefix(err, "--metrics-token %s", path);
        return -1;
    }
    int r = token_take(a, path, tok, len, err);
    OPENSSL_cleanse(tok, len);
    return r;
}

/* ---------------------------------------------------------------- a server of its own */

#define PROM_PATH "/metrics"
#define PROM_TIMEOUT_S 10 /* a scraper's request, or an idle connection */

struct sg_prom_server {
    struct lws_context *ctx;
    sg_prom_access access;
    sg_prom_render_fn render;
    void *ud;
    int port;
    uint64_t refused;
};

static int prom_error(struct lws *wsi, sg_http_req *req, unsigned status, const char *why)
{
    return sg_http_answer(wsi, req, status, json_pack("{s:s}", "error", why));
}

/* One request: GET /metrics, under the access rule. */
static int prom_request(sg_prom_server *ps, struct lws *wsi, sg_http_req *req, const char *path)
{
    if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
        return prom_error(wsi, req, HTTP_STATUS_METHOD_NOT_ALLOWED, "only GET is supported");
    if (strcmp(path, PROM_PATH) != 0)
        return prom_error(wsi, req, HTTP_STATUS_NOT_FOUND, "not found (only " PROM_PATH " here)");
    unsigned status;
    const char *why = sg_prom_refusal(&ps->access, wsi, &status);
    if (why) {
        ps->refused++;
        return prom_error(wsi, req, status, why);
    }
    static const char headroom[LWS_PRE];
    sg_autobuf sg_buf b = {0};
    if (sg_buf_reserve(&b, LWS_PRE + 16384) < 0 || sg_buf_append(&b, headroom, LWS_PRE) < 0 ||
        ps->render(ps->ud, &b) < 0)
        return prom_error(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, "the metrics could not be gathered");
    return sg_prom_answer(wsi, req, &b);
}

static int prom_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    sg_http_req *req = user;
    if (reason == LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION)
        return 1; /* no WebSocket here */
    if (reason == LWS_CALLBACK_HTTP) {
        memset(req, 0, sizeof *req);
        return prom_request(lws_context_user(lws_get_context(wsi)), wsi, req, in);
    }
    if (reason == LWS_CALLBACK_HTTP_WRITEABLE)
        return sg_http_writeable(wsi, req);
    if (reason == LWS_CALLBACK_CLOSED_HTTP) {
        sg_http_req_release(req);
        return 0;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols prom_protocols[] = {
    {"http", prom_cb, sizeof(sg_http_req), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

sg_prom_server *sg_prom_server_start(uv_loop_t *loop, const char *host, int port, const sg_prom_access *a,
                                     sg_prom_render_fn render, void *ud, sg_err *err)
{
    /* An address in use is found with a plain bind first: lws 4.1 fails a
     * vhost on a foreign loop badly (as the ingest's ports). */
    if (port > 0 && sg_ingest_bind_probe(host, port, err) < 0)
        return NULL;
    sg_prom_server *ps = sg_xcalloc(1, sizeof *ps);
    ps->access = *a;
    ps->render = render;
    ps->ud = ud;
    lws_set_log_level(getenv("SG_PROM_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE : LLL_ERR, sg_log_lws);
    struct lws_context_creation_info info;
    void *foreign_loops[1] = {loop};
    sg_http_server_info(&info, foreign_loops, host, port, prom_protocols, ps, PROM_TIMEOUT_S);
    ps->ctx = lws_create_context(&info);
    ps->port = ps->ctx ? lws_get_vhost_listen_port(lws_get_vhost_by_name(ps->ctx, "default")) : -1;
    if (ps->port <= 0) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d (address in use or not local?)", host, port);
        if (ps->ctx) {
            lws_context_destroy(ps->ctx);
            uv_run(loop, UV_RUN_DEFAULT);
        }
        sg_prom_server_free(ps);
        return NULL;
    }
    return ps;
}

int sg_prom_server_port(const sg_prom_server *ps)
{
    return ps->port;
}

void sg_prom_server_set_access(sg_prom_server *ps, const sg_prom_access *a)
{
    ps->access = *a;
}

uint64_t sg_prom_server_refusals(const sg_prom_server *ps)
{
    return ps->refused;
}

void sg_prom_server_stop(sg_prom_server *ps)
{
    if (ps && ps->ctx)
        lws_context_destroy(ps->ctx);
}

void sg_prom_server_free(sg_prom_server *ps)
{
    if (!ps)
        return;
    if (ps->ctx)
        lws_context_destroy(ps->ctx); /* the second call, after the loop drained */
    free(ps);
}

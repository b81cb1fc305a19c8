/* ingest: WebSocket + HTTP server storing event streams (see ingest.h;
 * ingest_internal.h says which file holds what). This one: start, stop,
 * free, and the listen address. */
#include "ingest/ingest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/http.h"
#include "ingest/ingest_internal.h"
#include "ingest/store.h"
#include "ingest/tls.h"
#include "wire/token.h"

static const struct lws_protocols protocols[] = {
    {"http", ingest_cb_http, sizeof(sg_http_req), 0, 0, NULL, 0},
    {PROTO_NAME, ingest_cb_stream, sizeof(conn), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* An upgrade without Sec-WebSocket-Protocol would otherwise bind to
 * protocols[0] and skip the token check (DEPENDENCY-NOTES). */
static const struct lws_protocol_vhost_options pvo_default = {NULL, NULL, "default", "1"};
static const struct lws_protocol_vhost_options pvo = {NULL, &pvo_default, PROTO_NAME, ""};

/* ---------------------------------------------------------------- lifecycle */

int sg_ingest_parse_listen(const char *s, char *host, size_t host_len, int *port, sg_err *err)
{
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s)
        return sg_err_set(err, EINVAL, "listen address '%s': expected HOST:PORT", s ? s : "");
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= host_len)
        return sg_err_set(err, EINVAL, "listen address '%s': bad host", s);
    /* A numeric address only: lws reads anything else as an interface
     * name, and a name can stand for more than one address. */
    char hcopy[INET6_ADDRSTRLEN + 1];
    unsigned char abuf[sizeof(struct in6_addr)];
    bool bracketed = h != s;
    if (hl >= sizeof hcopy)
        return sg_err_set(err, EINVAL, "listen address '%s': not a numeric IP address", s);
    memcpy(hcopy, h, hl);
    hcopy[hl] = '\0';
    bool v4 = inet_pton(AF_INET, hcopy, abuf) == 1, v6 = inet_pton(AF_INET6, hcopy, abuf) == 1;
    if ((!v4 && !v6) || (v6 && !bracketed) || (v4 && bracketed))
        return sg_err_set(err, EINVAL,
                          "listen address '%s': expected an IPv4 address or [IPv6] address", s);
    char *endp = NULL;
    errno = 0;
    long p = strtol(colon + 1, &endp, 10);
    if (errno || !colon[1] || *endp || p < 0 || p > 65535)
        return sg_err_set(err, EINVAL, "listen address '%s': bad port", s);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

int sg_ingest_bind_probe(const char *host, int port, sg_err *err)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof *v6;
    } else {
        return sg_err_set(err, EINVAL, "--listen %s: not an IPv4 or IPv6 address", host);
    }
    sg_autoclose int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        return sg_err_sys(err, "socket");
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
        if (errno == EADDRINUSE)
            return sg_err_set(err, EADDRINUSE, "%s%s%s:%d is in use (another ingest, or another program, "
                              "listens there)", ss.ss_family == AF_INET6 ? "[" : "", host,
                              ss.ss_family == AF_INET6 ? "]" : "", port);
        return sg_err_sys(err, "cannot listen on %s:%d", host, port);
    }
    return 0;
}

/* Connection limits (ingest.h): lws's own table is sized past ours, so
 * that it keeps accepting (and we keep refusing) when ours is full. */
static int conn_limits(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err)
{
    struct rlimit rl;
    unsigned fds = SG_INGEST_CONNS_MAX + SG_INGEST_CONNS_RESERVE + SG_INGEST_FDS_SPARE;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < fds && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max < fds ? rl.rlim_max : fds;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur < fds)
            fds = (unsigned)rl.rlim_cur;
    }
    if (fds < SG_INGEST_CONNS_RESERVE + SG_INGEST_FDS_SPARE + 16)
        return sg_err_set(err, EMFILE, "too few file descriptors (RLIMIT_NOFILE %u)", fds);
    unsigned cap = fds - SG_INGEST_CONNS_RESERVE - SG_INGEST_FDS_SPARE;
    ing->max_conns = opts->max_conns ? opts->max_conns : SG_INGEST_CONNS_MAX;
    if (ing->max_conns > cap)
        ing->max_conns = cap;
    ing->max_per_addr = opts->max_conns_per_addr ? opts->max_conns_per_addr
                                                 : SG_INGEST_CONNS_PER_ADDR;
    ing->stream_rate = opts->stream_rate ? opts->stream_rate : SG_INGEST_STREAM_RATE;
    return 0;
}

/* The writer thread and the loop's handles that feed it and reap it. */
static int start_writer(sg_ingest *ing, uv_loop_t *loop, sg_err *err)
{
    pthread_mutex_init(&ing->mu, NULL);
    pthread_cond_init(&ing->cv, NULL);
    ing->mu_init = true;
    uv_async_init(loop, &ing->done_async, ingest_on_done_async);
    ing->done_async.data = ing;
    ing->async_init = true;
    int pr = pthread_create(&ing->writer, NULL, ingest_writer_main, ing);
    if (pr != 0) {
        errno = pr;
        return sg_err_sys(err, "start the writer thread");
    }
    ing->writer_started = true;
    uv_timer_init(loop, &ing->retry);
    ing->retry.data = ing;
    ing->retry_init = true;
    uv_timer_init(loop, &ing->hold);
    ing->hold.data = ing;
    ing->hold_init = true;
    uv_check_init(loop, &ing->check);
    ing->check.data = ing;
    ing->check_init = true;
    uv_check_start(&ing->check, ingest_on_check);
    return 0;
}

sg_ingest *sg_ingest_start(uv_loop_t *loop, const sg_ingest_opts *opts, sg_err *err)
{
    sg_ingest *ing = calloc(1, sizeof *ing);
    if (!ing) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    ing->loop = loop;
    ing->secret_path = sg_xstrdup(opts->secret_path);
    ing->metrics_token_path = opts->metrics_token_path ? sg_xstrdup(opts->metrics_token_path) : NULL;
    /* Before the store and the secret are made: a start that fails on its
     * certificate leaves nothing behind. */
    if (opts->tls_cert && sg_tls_server_check(opts->tls_cert, opts->tls_key, err) < 0)
        goto fail;
    if (sg_token_secret_ensure(opts->secret_path, ing->secret, err) < 0)
        goto fail;
    ing->store = sg_store_open(opts->store_url, err);
    if (!ing->store)
        goto fail;
    ing->wstore = sg_store_open(opts->store_url, err);
    if (!ing->wstore)
        goto fail;
    ing->protocols = protocols;
    ingest_console_find(ing);
    if (ingest_watch_init(ing, opts, err) < 0 || ingest_metrics_init(ing, opts, err) < 0)
        goto fail;

    /* lws's own lines at level debug only (base/log.h: sg_log_lws). */
    bool lws_lines = getenv("SG_INGEST_DEBUG") || sg_log_enabled(SG_LOG_DEBUG);
    lws_set_log_level(lws_lines ? LLL_ERR | LLL_WARN | LLL_NOTICE : 0, sg_log_lws);
    struct lws_context_creation_info info;
    void *foreign_loops[1] = {loop};
    sg_http_server_info(&info, foreign_loops, opts->host, opts->port, protocols, ing,
                        SG_INGEST_HANDSHAKE_TIMEOUT_S);
    sg_tls_server_info(&info, opts->tls_cert, opts->tls_key);
    info.pvo = &pvo;
    info.max_http_header_data = HTTP_HEADER_DATA;
    if (conn_limits(ing, opts, err) < 0)
        goto fail;
    info.fd_limit_per_thread = ing->max_conns + SG_INGEST_CONNS_RESERVE + SG_INGEST_FDS_SPARE;
    /* An address in use is found here, with a plain bind: lws 4.1 fails
     * its vhost on a foreign loop and then crashes in its teardown. */
    if (opts->port > 0 && sg_ingest_bind_probe(opts->host, opts->port, err) < 0)
        goto fail;
    ing->ctx = lws_create_context(&info);
    if (!ing->ctx) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d (address in use or not local?)",
                   opts->host, opts->port);
        goto fail;
    }
    ing->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(ing->ctx, "default"));
    if (ing->port <= 0) {
        sg_err_set(err, EADDRINUSE, "cannot listen on %s:%d", opts->host, opts->port);
        goto fail;
    }
    if (ingest_metrics_listen(ing, opts, err) < 0)
        goto fail;
    if (start_writer(ing, loop, err) < 0 || ingest_sse_init(ing, opts->store_url, err) < 0 ||
        ingest_pages_init(ing, opts->store_url, err) < 0 ||
        ingest_ops_init(ing, opts->store_url, err) < 0 || ingest_retain_start(ing, opts, err) < 0)
        goto fail;
    ingest_hosts_start(ing);
    /* A PostgreSQL URL may carry a password: only its kind is logged. */
    sg_log(SG_LOG_INFO, "started (sandglass " SG_VERSION "): listening on %s:%d, store %s, secret %s", opts->host,
           ing->port, strncmp(opts->store_url, "sqlite:", 7) == 0 ? opts->store_url : "postgresql",
           opts->secret_path);
    return ing;
fail:
    if (ing->ctx) {
        /* The shutdown's order (DEPENDENCY-NOTES): a context destroyed
         * once outside a running loop keeps its handles and its memory.
         * The loop is the caller's fresh one: nothing else runs on it. */
        sg_err ignored;
        sg_ingest_stop(ing, &ignored);
        uv_run(loop, UV_RUN_DEFAULT);
        sg_ingest_free(ing);
        uv_run(loop, UV_RUN_DEFAULT);
        return NULL;
    }
    sg_ingest_free(ing);
    return NULL;
}

int sg_ingest_port(const sg_ingest *ing)
{
    return ing->port;
}

int sg_ingest_stop(sg_ingest *ing, sg_err *err)
{
    if (ing->stopping)
        return 0;
    ing->stopping = true;
    int r = ingest_drain_and_stop_writer(ing, err);
    if (ing->check_init) {
        uv_check_stop(&ing->check);
        uv_close((uv_handle_t *)&ing->check, NULL);
        ing->check_init = false;
    }
    if (ing->async_init) {
        uv_close((uv_handle_t *)&ing->done_async, NULL);
        ing->async_init = false;
    }
    if (ing->retry_init) {
        uv_timer_stop(&ing->retry);
        uv_close((uv_handle_t *)&ing->retry, NULL);
        ing->retry_init = false;
    }
    if (ing->hold_init) {
        uv_timer_stop(&ing->hold);
        uv_close((uv_handle_t *)&ing->hold, NULL);
        ing->hold_init = false;
    }
    ingest_sse_stop(ing);
    ingest_pages_stop(ing);
    ingest_rate_stop(ing);
    ingest_retain_stop(ing);
    ingest_ops_stop(ing);
    ingest_hosts_stop(ing);
    /* Inside the loop: lws closes its handles; the loop then drains. */
    if (ing->ctx)
        lws_context_destroy(ing->ctx);
    return r;
}

void sg_ingest_free(sg_ingest *ing)
{
    if (!ing)
        return;
    if (ing->ctx)
        lws_context_destroy(ing->ctx); /* second call after the loop drained */
    sg_err err;
    ingest_drain_and_stop_writer(ing, &err);
    ingest_rows_release(ing->batch, ing->nbatch);
    free(ing->batch);
    free(ing->spare);
    if (ing->mu_init) {
        pthread_mutex_destroy(&ing->mu);
        pthread_cond_destroy(&ing->cv);
    }
    sg_store_close(ing->store);
    sg_store_close(ing->wstore);
    ingest_limits_free(ing);
    ingest_sse_free(ing);
    ingest_pages_free(ing);
    ingest_sessions_free(ing);
    ingest_retain_free(ing);
    ingest_ops_free(ing);
    OPENSSL_cleanse(ing->secret, sizeof ing->secret);
    free(ing->secret_path);
    free(ing->metrics_token_path);
    free(ing);
}


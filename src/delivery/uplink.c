/* uplink: spool -> ingest over WebSocket (see uplink.h). */
#include "delivery/uplink.h"

#include <errno.h>
#include <inttypes.h>
#include <libwebsockets.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "delivery/uplink_internal.h"
#include "wire/ack.h"
#include "wire/event.h"

#define LOCAL_PROTO "sg-uplink"
#define INGEST_PROTO "sg-ingest"

static void emit(sg_uplink *u, sg_uplink_event_type type, int code, const char *reason,
                 uint32_t retry_ms)
{
    if (!u->ev_fn)
        return;
    sg_uplink_event ev = {type, code, reason ? reason : "", retry_ms};
    u->ev_fn(u->ev_ud, &ev);
}

/* xorshift64*: jitter only, no need for more. */
static uint32_t rnd(sg_uplink *u)
{
    u->rng ^= u->rng >> 12;
    u->rng ^= u->rng << 25;
    u->rng ^= u->rng >> 27;
    return (uint32_t)((u->rng * 0x2545F4914F6CDD1DULL) >> 32);
}

static void connect_now(sg_uplink *u);

static void on_retry(uv_timer_t *t)
{
    sg_uplink *u = t->data;
    if (u->st == ST_WAITING)
        connect_now(u);
}

/* Full jitter: a uniform delay in [0, min(max, base * 2^attempt)]. */
static uint32_t schedule_retry(sg_uplink *u)
{
    unsigned e = u->attempt < 5 ? u->attempt : 5;
    uint32_t cap = (uint32_t)SG_UPLINK_BACKOFF_MIN_MS << e;
    if (cap > SG_UPLINK_BACKOFF_MAX_MS)
        cap = SG_UPLINK_BACKOFF_MAX_MS;
    u->attempt++;
    uint32_t delay = rnd(u) % (cap + 1);
    u->st = ST_WAITING;
    uv_timer_start(&u->retry, on_retry, delay, 0);
    return delay;
}

static bool is_refusal(int code)
{
    return code != 0 && code != LWS_CLOSE_STATUS_NORMAL && code != LWS_CLOSE_STATUS_GOINGAWAY &&
           code != LWS_CLOSE_STATUS_NO_STATUS && code != LWS_CLOSE_STATUS_ABNORMAL_CLOSE;
}

/* The seq a 1008 close names ("seq N ..."), or -1. */
static int64_t refused_seq_of(int code, const char *reason)
{
    long long n;
    if (code != SG_CLOSE_POLICY || sscanf(reason, "seq %lld ", &n) != 1 || n < 0)
        return -1;
    return (int64_t)n;
}

/* A frame refused by its seq: counted; past the bound the uplink stops
 * instead of sending the same frame again forever. True when it stopped. */
static bool seq_refused(sg_uplink *u)
{
    int64_t seq = refused_seq_of(u->close_code, u->close_reason);
    if (seq < 0) {
        u->refused_times = 0;
        return false;
    }
    u->refused_times = seq == u->refused_seq ? u->refused_times + 1 : 1;
    u->refused_seq = seq;
    if (u->refused_times < SG_UPLINK_SEQ_REFUSALS_MAX)
        return false;
    u->st = ST_STOPPED;
    u->stats.stuck_seq = seq;
    snprintf(u->stuck, sizeof u->stuck,
             "gave up: the ingest refused seq %" PRId64 " %u times (%s); it and every later event stay in "
             "the spool",
             seq, u->refused_times, u->close_reason);
    emit(u, SG_UPLINK_REFUSED, u->close_code, u->stuck, 0);
    return true;
}

/* After a failure or a loss: the next node at once, or, when every node
 * failed in a row, the next node after the backoff. The delay. */
static uint32_t next_node(sg_uplink *u)
{
    u->fails++;
    if (u->n_eps > 1) {
        u->ep = (u->ep + 1) % u->n_eps;
        u->stats.node = u->ep;
        u->stats.failovers++;
    }
    if (u->fails % u->n_eps == 0)
        return schedule_retry(u);
    u->st = ST_WAITING;
    uv_timer_start(&u->retry, on_retry, 0, 0); /* not inside lws's callback */
    return 0;
}

/* "node I of N (HOST:PORT): " before a reason, when there are several. */
static void node_prefix(const sg_uplink *u, unsigned i, char *buf, size_t size)
{
    buf[0] = '\0';
    if (u->n_eps > 1)
        snprintf(buf, size, "node %u of %u (%s:%d): ", i + 1, u->n_eps, u->eps[i].host, u->eps[i].port);
}

/* The current connection is gone (closed, failed or refused). */
static void on_lost(sg_uplink *u, int http_status, const char *why)
{
    if (u->st != ST_CONNECTING && u->st != ST_OPEN)
        return;
    u->wsi = NULL;
    u->ready = false;
    u->stats.connected = false;
    if (http_status < 400 && is_refusal(u->close_code) && seq_refused(u)) {
        u->stats.refusals++;
        return; /* stopped: no retry */
    }
    u->stats.reconnects++;
    char node[320], msg[600];
    node_prefix(u, u->ep, node, sizeof node);
    uint32_t delay = next_node(u);
    if (http_status >= 400) {
        u->stats.refusals++;
        snprintf(msg, sizeof msg, "%singest refused the handshake with HTTP %d%s%s", node, http_status,
                 why ? ": " : "", why ? why : "");
        emit(u, SG_UPLINK_REFUSED, http_status, msg, delay);
    } else if (is_refusal(u->close_code)) {
        u->stats.refusals++;
        snprintf(msg, sizeof msg, "%s%s", node, u->close_reason);
        emit(u, SG_UPLINK_REFUSED, u->close_code, msg, delay);
    } else {
        snprintf(msg, sizeof msg, "%s%s", node, u->close_reason[0] ? u->close_reason : why);
        emit(u, SG_UPLINK_DISCONNECTED, u->close_code, msg, delay);
    }
}

static void connect_now(sg_uplink *u)
{
    uv_timer_stop(&u->retry);
    u->gen++;
    if (u->gen == 0)
        u->gen = 1;
    u->close_code = 0;
    u->close_reason[0] = '\0';
    u->rx_len = 0;
    u->rx_overflow = false;
    u->ready = false;
    u->st = ST_CONNECTING;

    const sg_uplink_ep *ep = &u->eps[u->ep];
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = u->ctx;
    ci.address = ep->host;
    ci.port = ep->port;
    ci.path = ep->path;
    ci.host = ep->host;
    ci.origin = ep->host;
    ci.protocol = INGEST_PROTO;
    ci.local_protocol_name = LOCAL_PROTO;
    /* Verification on, the host name checked: no flag that relaxes it. */
    ci.ssl_connection = ep->tls ? LCCSCF_USE_SSL : 0;
    ci.alpn = "http/1.1";
    /* tells this attempt's callbacks from stale ones; no pwsi: lws would
     * NULL it when an old wsi dies, under a newer connection */
    ci.userdata = (void *)u->gen;
    if (!lws_client_connect_via_info(&ci))
        on_lost(u, 0, "cannot start the connection"); /* no-op if a callback did it */
}

static void on_watchdog(uv_timer_t *t)
{
    sg_uplink *u = t->data;
    if (u->st != ST_OPEN || !u->wsi || u->killing || u->stats.sent_seq <= u->stats.acked_seq)
        return;
    if (sg_now_mono_ns() - u->last_progress_ns < (uint64_t)u->ack_timeout_ms * 1000000)
        return;
    u->killing = true;
    snprintf(u->close_reason, sizeof u->close_reason, "no ack for %u ms with frames in flight",
             u->ack_timeout_ms);
    /* A graceful close would wait for the dead peer's close ack: shut the
     * socket down so lws sees the hangup at once (works while choked, when
     * no WRITEABLE callback would come). */
    lws_sockfd_type fd = lws_get_socket_fd(u->wsi);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    lws_set_timeout(u->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
}

static void want_write(sg_uplink *u)
{
    if (u->st == ST_OPEN && u->ready && u->wsi)
        lws_callback_on_writable(u->wsi);
}

/* The first ack of a connection says where the ingest's copy of the stream
 * is; it trims nothing past the spool's own ack (what was acked to frames
 * sent on our connections): what lies between may be another token
 * holder's frames, stored while we were away. Every frame after the spool's
 * ack is resent; the ingest takes an identical one and refuses (1008) one
 * whose seq holds other content, so a forgery surfaces as a refusal instead
 * of our event being trimmed unsent. */
static void handle_connect_ack(sg_uplink *u, int64_t ack)
{
    int64_t spool_ack = sg_spool_acked_seq(u->spool);
    int64_t from = ack < spool_ack ? ack : spool_ack;
    if (ack < spool_ack) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "ingest acks seq %" PRId64 " below the spool's ack %" PRId64
                 " (ingest store lost?): seqs in between are gone from the spool",
                 ack, spool_ack);
        emit(u, SG_UPLINK_ERROR, 0, msg, 0);
    }
    u->ready = true;
    u->fails = 0; /* a healthy connection: the next loss tries the next node at once */
    u->acked_at_connect = from;
    u->stats.connected = true;
    u->stats.acked_seq = from;
    u->stats.sent_seq = from;
    u->stats.resent_at_connect += (uint64_t)(ack > from ? ack - from : 0);
    sg_spool_cursor_seek(u->cur, from);
    if (from >= sg_spool_synced_seq(u->spool))
        u->attempt = 0; /* nothing to replay: healthy */
}

static void handle_ack(sg_uplink *u, int64_t ack)
{
    sg_err err;
    u->last_progress_ns = sg_now_mono_ns();
    if (!u->ready) {
        handle_connect_ack(u, ack);
        want_write(u);
        return;
    }
    /* An ack covers only frames sent on this connection (the ingest acks
     * no more than a connection's own committed frames; this is the
     * client's half of that rule). */
    if (ack > u->stats.sent_seq)
        ack = u->stats.sent_seq;
    if (ack <= u->stats.acked_seq) {
        want_write(u);
        return;
    }
    if (u->refused_seq >= 0 && ack >= u->refused_seq) {
        u->refused_seq = -1; /* our frame at that seq is stored after all */
        u->refused_times = 0;
    }
    if (sg_spool_ack(u->spool, ack, &err) < 0)
        emit(u, SG_UPLINK_ERROR, err.code, err.msg, 0);
    u->stats.acked_seq = ack;
    if (ack > u->acked_at_connect)
        u->attempt = 0; /* the ingest makes progress with our frames */
    want_write(u);
}

void sg_uplink_handle_message(sg_uplink *u)
{
    sg_err err = {0};
    sg_ack a;
    if (sg_ack_decode(u->rx, u->rx_len, &a, &err) < 0 && err.code == EPROTO) {
        /* A newer ingest: none of its acks can be read, so the spool is
         * never trimmed; stop (as for a refused seq) and say what to do. */
        u->st = ST_STOPPED;
        u->ready = false;
        snprintf(u->stuck, sizeof u->stuck, "gave up: %.280s", err.msg);
        emit(u, SG_UPLINK_REFUSED, 0, u->stuck, 0);
        return;
    }
    /* Bounded so that ack + SG_UPLINK_WINDOW (write_records) cannot overflow. */
    if (err.msg[0] || a.ack > INT64_MAX - SG_UPLINK_WINDOW) {
        emit(u, SG_UPLINK_ERROR, 0, err.msg[0] ? err.msg : "the ingest's ack is out of range", 0);
        return;
    }
    handle_ack(u, a.ack);
}

static int write_records(sg_uplink *u, struct lws *wsi)
{
    int64_t max = sg_spool_synced_seq(u->spool);
    if (max > u->stats.acked_seq + SG_UPLINK_WINDOW)
        max = u->stats.acked_seq + SG_UPLINK_WINDOW; /* the next ack reopens it */
    while (!lws_send_pipe_choked(wsi)) {
        char *data;
        size_t len;
        int64_t seq;
        sg_err err;
        int rc = sg_spool_cursor_next(u->cur, max, &data, &len, &seq, &err);
        if (rc == 0)
            return 0;
        if (rc < 0) {
            emit(u, SG_UPLINK_ERROR, err.code, err.msg, 0);
            return -1;
        }
        /* the cursor leaves LWS_PRE bytes of headroom before data */
        if (lws_write(wsi, (unsigned char *)data, len, LWS_WRITE_TEXT) < (int)len)
            return -1;
        u->stats.sent++;
        if (!sg_spool_cursor_was_blob(u->cur)) /* a blob goes before its event's seq */
            u->stats.sent_seq = seq;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* Why a wss:// connection failed in its TLS, in words an operator can act
 * on (lws 4.1 says "connect SSL err 1: error:00000001:lib(0)::reason(1)"):
 * true with why filled when the certificate did not verify, or the peer
 * spoke no TLS. */
static bool tls_failure(const sg_uplink *u, struct lws *wsi, char *why, size_t size)
{
    if (!u->eps[u->ep].tls)
        return false;
    SSL *ssl = lws_get_ssl(wsi);
    long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    ERR_clear_error();
    if (v != X509_V_OK) {
        snprintf(why, size, "TLS: certificate verify failed: %s (%s)", X509_verify_cert_error_string(v),
                 v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH
                     ? "the certificate is for another host"
                 : u->ca_file ? "not signed by the CAs of the CA file"
                              : "give the CA that signed it with --ingest-ca FILE");
        return true;
    }
    if (ssl && !SSL_is_init_finished(ssl)) {
        snprintf(why, size, "TLS handshake failed (is it a plain ws:// ingest? then use ws://)");
        return true;
    }
    return false;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    sg_uplink *u = ctx ? lws_context_user(ctx) : NULL;
    if (!u || (uintptr_t)user != u->gen || u->st == ST_CLOSING)
        return reason == LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER ? -1 : 0;

    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        unsigned char **p = in, *end = *p + len;
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
                                         (unsigned char *)u->auth, (int)strlen(u->auth), p, end))
            return -1;
        return 0;
    }
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        int status = (int)lws_http_client_http_response(wsi);
        char why[300];
        on_lost(u, status, tls_failure(u, wsi, why, sizeof why) ? why : in ? (const char *)in : "connection failed");
        return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        u->st = ST_OPEN;
        u->wsi = wsi;
        u->killing = false;
        u->last_progress_ns = sg_now_mono_ns();
        u->stats.connects++;
        {
            char msg[320];
            const sg_uplink_ep *ep = &u->eps[u->ep];
            snprintf(msg, sizeof msg, "connected to node %u of %u (%s:%d)", u->ep + 1, u->n_eps, ep->host,
                     ep->port);
            emit(u, SG_UPLINK_CONNECTED, 0, msg, 0);
        }
        return 0;

    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (lws_frame_is_binary(wsi) || u->rx_overflow || u->rx_len + len > sizeof u->rx) {
            u->rx_overflow = true;
        } else {
            memcpy(u->rx + u->rx_len, in, len);
            u->rx_len += len;
        }
        if (lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0) {
            if (u->rx_overflow)
                emit(u, SG_UPLINK_ERROR, 0, "oversized or binary message from the ingest", 0);
            else
                sg_uplink_handle_message(u);
            u->rx_len = 0;
            u->rx_overflow = false;
            if (u->st == ST_STOPPED) {
                u->wsi = NULL; /* closed by the -1 below */
                u->stats.connected = false;
                return -1;
            }
        }
        return 0;

    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (!u->ready)
            return 0;
        return write_records(u, wsi);

    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) {
            const unsigned char *b = in;
            u->close_code = (b[0] << 8) | b[1];
            size_t rl = len - 2 < sizeof u->close_reason - 1 ? len - 2 : sizeof u->close_reason - 1;
            memcpy(u->close_reason, b + 2, rl);
            u->close_reason[rl] = '\0';
            u->stats.last_close_code = u->close_code;
        }
        return 0; /* echo the close */

    case LWS_CALLBACK_CLIENT_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
        /* closed before the handshake's answer: a TLS port drops a plain
         * request without a word */
        on_lost(u, 0, u->st == ST_CONNECTING && !u->eps[u->ep].tls
                          ? "connection closed before the WebSocket handshake (a TLS port? then use wss://)"
                          : "connection closed");
        return 0;

    default:
        return 0;
    }
}

static const struct lws_protocols protocols[] = {
    {LOCAL_PROTO, callback, 0, SG_UPLINK_RX_MAX, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static int parse_url(sg_uplink_ep *e, const char *url, sg_err *err)
{
    sg_autofree char *copy = strdup(url);
    if (!copy)
        return sg_err_set(err, ENOMEM, "out of memory");
    const char *prot, *ads, *path;
    int port;
    if (lws_parse_uri(copy, &prot, &ads, &port, &path) || !*ads)
        return sg_err_set(err, EINVAL, "ingest URL '%s': expected ws://HOST:PORT", url);
    if (strcmp(prot, "ws") == 0) {
        e->tls = false;
    } else if (strcmp(prot, "wss") == 0) {
        e->tls = true;
    } else {
        return sg_err_set(err, EINVAL, "ingest URL '%s': scheme must be ws or wss", url);
    }
    if (port <= 0 || port > 65535)
        return sg_err_set(err, EINVAL, "ingest URL '%s': bad port", url);
    e->port = port;
    e->host = strdup(ads);
    while (*path == '/') /* lws_parse_uri gives "/" for no path, else no leading '/' */
        path++;
    e->path = *path ? sg_strdup_printf("/%s", path) : strdup("/v1/ingest");
    if (!e->host || !e->path)
        return sg_err_set(err, ENOMEM, "out of memory");
    return 0;
}

/* "URL,URL,...": every node parsed up front. */
static int parse_urls(sg_uplink *u, const char *list, sg_err *err)
{
    sg_autofree char *copy = strdup(list);
    if (!copy)
        return sg_err_set(err, ENOMEM, "out of memory");
    char *p = copy;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p)
            return sg_err_set(err, EINVAL, "ingest URL list '%s': an empty element", list);
        if (u->n_eps == SG_UPLINK_URLS_MAX)
            return sg_err_set(err, EINVAL, "ingest URL list '%s': more than %d nodes", list, SG_UPLINK_URLS_MAX);
        if (parse_url(&u->eps[u->n_eps++], p, err) < 0)
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static void free_eps(sg_uplink *u)
{
    for (unsigned i = 0; i < u->n_eps; i++) {
        free(u->eps[i].host);
        free(u->eps[i].path);
    }
}

static void on_timer_closed(uv_handle_t *h)
{
    sg_uplink *u = h->data;
    u->open_handles--;
}

/* A TLS client context that verifies the peer by the CAs of ca (NULL: the
 * system's), TLS 1.2 at least, ALPN http/1.1. NULL with err. */
static SSL_CTX *client_ssl_ctx(const char *ca, sg_err *err)
{
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c || SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1 ||
        (ca ? SSL_CTX_load_verify_locations(c, ca, NULL) : SSL_CTX_set_default_verify_paths(c)) != 1) {
        SSL_CTX_free(c);
        ERR_clear_error();
        sg_err_set(err, EIO, "uplink: cannot set up TLS%s%s", ca ? " with the CA file " : "", ca ? ca : "");
        return NULL;
    }
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    return c;
}

int sg_uplink_ca_check(const char *path, sg_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return sg_err_sys(err, "CA file %s: cannot read", path);
    fclose(f);
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    int ok = c && SSL_CTX_load_verify_locations(c, path, NULL) == 1;
    SSL_CTX_free(c);
    ERR_clear_error();
    if (!ok)
        return sg_err_set(err, EINVAL, "CA file %s: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
                          path);
    return 0;
}

sg_uplink *sg_uplink_new(uv_loop_t *loop, const char *url, const char *token, sg_spool *spool,
                         const char *ca_file, sg_err *err)
{
    if (!token || !*token || strlen(token) > SG_UPLINK_TOKEN_MAX) {
        sg_err_set(err, EINVAL, "uplink: missing or oversized token");
        return NULL;
    }
    sg_uplink *u = calloc(1, sizeof *u);
    if (!u) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    u->loop = loop;
    u->spool = spool;
    u->stats.acked_seq = -1;
    u->stats.sent_seq = -1;
    u->stats.stuck_seq = -1;
    u->refused_seq = -1;
    u->ack_timeout_ms = SG_UPLINK_ACK_TIMEOUT_MS;
    u->rng = sg_now_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)u;
    if (!u->rng)
        u->rng = 1;
    if (parse_urls(u, url, err) < 0)
        goto fail;
    u->stats.nodes = u->n_eps;
    bool tls = false;
    for (unsigned i = 0; i < u->n_eps; i++)
        tls = tls || u->eps[i].tls;
    /* Checked here: a CA file lws cannot load fails its vhost on our
     * foreign loop, and lws 4.1 crashes in that teardown. */
    if (tls && ca_file && sg_uplink_ca_check(ca_file, err) < 0)
        goto fail;
    u->ca_file = tls && ca_file ? strdup(ca_file) : NULL;
    u->auth = sg_strdup_printf("Bearer %s", token);
    u->cur = sg_spool_cursor_new(spool, sg_spool_acked_seq(spool), LWS_PRE, err);
    if (!u->cur)
        goto fail;

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    void *foreign_loops[1] = {loop};
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.options = LWS_SERVER_OPTION_LIBUV | (tls ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0);
    /* The client's TLS context is ours, not lws's: lws 4.1 finds the
     * refcount of its own by an ex_data index that every TLS context's
     * global init makes anew, so with two uplinks alive the first's
     * SSL_CTX was never freed (LeakSanitizer, an uplink daemon with two
     * wss:// streams). Verification on; the CAs of the CA file alone (as
     * curl's --cacert and cli/ingest_http.c), else the system's. lws
     * checks the host (name or IP address) on each connection. */
    if (tls && !(u->ssl_ctx = client_ssl_ctx(u->ca_file, err)))
        goto fail;
    info.provided_client_ssl_ctx = u->ssl_ctx;
    info.foreign_loops = foreign_loops;
    info.user = u;
    info.gid = (gid_t)-1;
    info.uid = (uid_t)-1;
    u->ctx = lws_create_context(&info);
    if (!u->ctx) {
        sg_err_set(err, EIO, "uplink: cannot create the WebSocket context (is "
                             "libwebsockets-evlib-uv installed?)");
        goto fail;
    }
    uv_timer_init(loop, &u->retry);
    uv_timer_init(loop, &u->drain_timer);
    uv_timer_init(loop, &u->watchdog);
    u->retry.data = u->drain_timer.data = u->watchdog.data = u;
    u->open_handles = 3;
    uv_timer_start(&u->watchdog, on_watchdog, 250, 250);
    uv_unref((uv_handle_t *)&u->watchdog); /* never keeps the loop alive alone */
    connect_now(u);
    return u;
fail:
    /* nothing registered on the loop yet: a plain free is enough */
    sg_spool_cursor_free(u->cur);
    SSL_CTX_free(u->ssl_ctx);
    free_eps(u);
    free(u->auth);
    free(u->ca_file);
    free(u);
    return NULL;
}

void sg_uplink_set_event_cb(sg_uplink *u, sg_uplink_event_fn fn, void *ud)
{
    u->ev_fn = fn;
    u->ev_ud = ud;
}

void sg_uplink_set_ack_timeout(sg_uplink *u, uint32_t ms)
{
    u->ack_timeout_ms = ms ? ms : 1;
}

void sg_uplink_notify(sg_uplink *u)
{
    want_write(u);
}

void sg_uplink_get_stats(const sg_uplink *u, sg_uplink_stats *out)
{
    *out = u->stats;
}

static void on_drain_timeout(uv_timer_t *t)
{
    sg_uplink *u = t->data;
    u->drain_timed_out = true;
}

static bool drained(const sg_uplink *u)
{
    return sg_spool_acked_seq(u->spool) >= sg_spool_synced_seq(u->spool);
}

int sg_uplink_drain(sg_uplink *u, uint64_t timeout_ms, sg_err *err)
{
    if (drained(u))
        return 0;
    if (u->st == ST_CLOSING)
        return sg_err_set(err, ESHUTDOWN, "uplink is closed");
    if (u->st == ST_STOPPED)
        return sg_err_set(err, EPROTO, "uplink: %s", u->stuck);
    if (u->st == ST_WAITING)
        connect_now(u); /* cut the backoff short */
    want_write(u);
    u->draining = true;
    u->drain_timed_out = false;
    uv_timer_start(&u->drain_timer, on_drain_timeout, timeout_ms, 0);
    while (!drained(u) && !u->drain_timed_out && u->st != ST_STOPPED)
        uv_run(u->loop, UV_RUN_ONCE);
    uv_timer_stop(&u->drain_timer);
    u->draining = false;
    if (drained(u))
        return 0;
    if (u->st == ST_STOPPED)
        return sg_err_set(err, EPROTO, "uplink: %s", u->stuck);
    return sg_err_set(err, ETIMEDOUT,
                      "uplink: %" PRIu64 " events not acknowledged by the ingest after %" PRIu64
                      " ms",
                      sg_spool_pending(u->spool), timeout_ms);
}

void sg_uplink_drain_stop(sg_uplink *u)
{
    if (u && u->draining)
        u->drain_timed_out = true;
}

void sg_uplink_close(sg_uplink *u)
{
    if (!u || u->st == ST_CLOSING)
        return;
    u->st = ST_CLOSING;
    u->ready = false;
    u->stats.connected = false;
    uv_timer_stop(&u->retry);
    uv_timer_stop(&u->drain_timer);
    uv_close((uv_handle_t *)&u->retry, on_timer_closed);
    uv_close((uv_handle_t *)&u->drain_timer, on_timer_closed);
    uv_timer_stop(&u->watchdog);
    uv_close((uv_handle_t *)&u->watchdog, on_timer_closed);
    /* First destroy: lws closes its connections and loop handles; the
     * loop drains them; the second call (sg_uplink_free) frees. */
    lws_context_destroy(u->ctx);
}

void sg_uplink_free(sg_uplink *u)
{
    if (!u)
        return;
    sg_uplink_close(u);
    /* Let lws's handles and our timers close (bounded: uv_run returns when
     * nothing is pending, and NOWAIT never blocks). */
    for (int i = 0; i < 1000 && u->open_handles > 0; i++)
        uv_run(u->loop, UV_RUN_NOWAIT);
    uv_run(u->loop, UV_RUN_NOWAIT);
    lws_context_destroy(u->ctx);
    SSL_CTX_free(u->ssl_ctx); /* after lws: its connections used it */
    sg_spool_cursor_free(u->cur);
    free_eps(u);
    free(u->auth);
    free(u->ca_file);
    free(u);
}

/* ingest_stream: the WebSocket side of the ingest (handshake, frames, the
 * seq rule, acks). See ingest.h, and ingest_internal.h for the files. */
#include "ingest/ingest_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/query.h"
#include "wire/ack.h"
#include "wire/event.h"

/* ---------------------------------------------------------------- WebSocket */

/* The peer's address for a log line ("?" when lws cannot say). */
static const char *peer_of(struct lws *wsi, char addr[64])
{
    if (!wsi || !lws_get_peer_simple(wsi, addr, 64))
        snprintf(addr, 64, "?");
    return addr;
}

const char *ingest_peer_of(struct lws *wsi, char addr[64])
{
    return peer_of(wsi, addr);
}

void ingest_log_refused(struct lws *wsi, const char *what, unsigned status, const char *why)
{
    char addr[64];
    sg_log(SG_LOG_INFO, "refused %s from %s (%u): %s", what, peer_of(wsi, addr), status, why);
}

/* A stream closed: one line, as a refusal's. */
static void log_closed(struct lws *wsi, int code, const char *why)
{
    char addr[64];
    sg_log(SG_LOG_INFO, "closed a stream from %s (%d): %s", peer_of(wsi, addr), code, why);
}

int ingest_refuse_handshake(struct lws *wsi, unsigned int status, const char *reason)
{
    ingest_log_refused(wsi, "a WebSocket", status, reason);
    lws_return_http_status(wsi, status, reason);
    return -1;
}

/* One fragment of the request's query, for query.c (query.h). */
int ingest_lws_frag(void *ud, int i, char *buf, size_t size)
{
    struct lws *wsi = ud;
    int fl = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
    if (fl <= 0)
        return -1;
    if ((size_t)fl >= size || lws_hdr_copy_fragment(wsi, buf, (int)size, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
        return -2;
    return fl;
}

const char *ingest_query_names(struct lws *wsi, const char *const *known, size_t nknown, const char *takes, char *msg,
                               size_t n)
{
    char frag[SG_QUERY_FRAG_MAX + 1];
    for (int i = 0;; i++) {
        int fl = ingest_lws_frag(wsi, i, frag, sizeof frag);
        if (fl == -1)
            return NULL;
        if (fl < 0 || i >= SG_QUERY_FRAGS_MAX)
            return "query too long";
        size_t nl = strcspn(frag, "=");
        bool ok = false;
        for (size_t k = 0; k < nknown && !ok; k++)
            ok = strlen(known[k]) == nl && strncmp(frag, known[k], nl) == 0;
        if (!ok) {
            char vis[80];
            snprintf(msg, n, "unknown query parameter '%s' (%s)", sg_vis(frag, nl, vis, sizeof vis), takes);
            return msg;
        }
    }
}

/* A query argument's value: 1 present, 0 absent, -1 too long or given
 * twice. (lws_get_urlarg_by_name reports an argument longer than its
 * buffer as absent: a filter dropped, not refused.) */
int ingest_urlarg(struct lws *wsi, const char *name_eq, char *buf, int len)
{
    return sg_query_arg(ingest_lws_frag, wsi, name_eq, buf, (size_t)len);
}

/* A stream's token refused: counted (a 401; a store that could not say
 * is not the token's fault), then the answer. */
static int refuse_token(sg_ingest *ing, struct lws *wsi, unsigned int status, const char *why)
{
    if (status == HTTP_STATUS_UNAUTHORIZED)
        ing->metrics.refusals[INGEST_REFUSED_TOKEN]++;
    return ingest_refuse_handshake(wsi, status, why);
}

static int check_handshake(sg_ingest *ing, struct lws *wsi, conn *c)
{
    char uri[256];
    int ulen = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    if (ulen <= 0 || ulen >= (int)sizeof uri ||
        lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 ||
        strcmp(uri, INGEST_PATH) != 0)
        return ingest_refuse_handshake(wsi, HTTP_STATUS_NOT_FOUND, "unknown path (use " INGEST_PATH ")");

    char token[SG_TOKEN_MAX + 64];
    token[0] = '\0';
    int alen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (alen > 0) {
        if (alen >= (int)sizeof token ||
            lws_hdr_copy(wsi, token, sizeof token, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
            return refuse_token(ing, wsi, HTTP_STATUS_UNAUTHORIZED, "malformed token: too long");
        if (strncasecmp(token, "Bearer ", 7) != 0)
            return refuse_token(ing, wsi, HTTP_STATUS_UNAUTHORIZED,
                                "Authorization must be 'Bearer <token>'");
        memmove(token, token + 7, strlen(token + 7) + 1);
    } else {
        int r = ingest_urlarg(wsi, "token=", token, sizeof token);
        if (r < 0)
            return refuse_token(ing, wsi, HTTP_STATUS_UNAUTHORIZED,
                                "malformed token: too long or given twice");
        if (r == 0)
            return refuse_token(ing, wsi, HTTP_STATUS_UNAUTHORIZED,
                                "missing token (Authorization: Bearer or ?token=)");
    }
    sg_token_claims cl;
    sg_err err;
    if (sg_token_verify(ing->secret, token, (int64_t)time(NULL), &cl, &err) < 0)
        return refuse_token(ing, wsi, HTTP_STATUS_UNAUTHORIZED, err.msg);
    unsigned status;
    const char *why;
    if (ingest_token_revoked(ing, &cl, &status, &why))
        return refuse_token(ing, wsi, status, why);

    /* The original agent's URL names the identity: it must be the token's. */
    static const char *const names[] = {"learner_id=", "task_id=", "sandbox_id="};
    const char *want[] = {cl.learner, cl.task, cl.sandbox};
    for (size_t i = 0; i < SG_ARRAY_LEN(names); i++) {
        char v[SG_NAME_MAX + 8];
        int r = ingest_urlarg(wsi, names[i], v, sizeof v);
        if (r < 0 || (r > 0 && strcmp(v, want[i]) != 0)) {
            char msg[96];
            snprintf(msg, sizeof msg, "query %.*s does not match the token",
                     (int)strlen(names[i]) - 1, names[i]);
            return refuse_token(ing, wsi, HTTP_STATUS_UNAUTHORIZED, msg);
        }
    }

    ident *id = calloc(1, sizeof *id);
    if (!id)
        return ingest_refuse_handshake(wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "out of memory");
    id->refs = 1;
    memcpy(id->learner, cl.learner, sizeof id->learner);
    memcpy(id->task, cl.task, sizeof id->task);
    memcpy(id->sandbox, cl.sandbox, sizeof id->sandbox);
    memset(c, 0, sizeof *c);
    c->id = id;
    memcpy(c->token_id, cl.id, sizeof c->token_id);
    c->acked = -1;
    c->recv_high = c->job_high = c->own_high = -1;
    return 0;
}

static int close_with(struct lws *wsi, int code, const char *reason)
{
    /* A close reason fits in a 125-byte control frame. */
    size_t n = strnlen(reason, 123);
    log_closed(wsi, code, reason);
    lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)reason, n);
    return -1;
}

/* A blob frame: no seq, stored by what it is (wire/event.h). */
static int on_blob(sg_ingest *ing, conn *c, const char *buf, size_t len)
{
    sg_blob b;
    sg_err err = {0};
    int r = sg_blob_parse(buf, len, &b, &err);
    if (r < 0) {
        ing->stats.refused++;
        ing->metrics.refusals[INGEST_REFUSED_FRAME]++;
        return close_with(c->wsi, -r, err.msg);
    }
    if (c->id->refused) {
        sg_blob_clear(&b);
        return 0;
    }
    if (ingest_batch_add_blob(ing, c, &b, len) < 0)
        return close_with(c->wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
    ing->stats.blobs++;
    return 0;
}

static int on_frame(sg_ingest *ing, conn *c, const char *buf, size_t len)
{
    sg_frame_view v;
    sg_err err;
    if (sg_blob_is(buf, len))
        return on_blob(ing, c, buf, len);
    int r = sg_frame_scan(buf, len, c->id->sandbox, &v, &err);
    if (r < 0) {
        if (r != -SG_FRAMESCAN_CLOSE_INTERNAL) {
            ing->stats.refused++;
            ing->metrics.refusals[INGEST_REFUSED_FRAME]++;
        }
        return close_with(c->wsi, -r, err.msg);
    }
    /* The ts the clients write (event.h); then the order rule's cheap half:
     * a seq ahead of this connection's next is a gap, refused at once. The
     * rest (resends, other connections of the stream, other nodes) is the
     * writer's, against the store (sg_store_append). */
    if (!sg_event_ts_valid(v.ts, v.ts_len)) {
        sg_frame_view_clear(&v);
        ing->stats.refused++;
        ing->metrics.refusals[INGEST_REFUSED_FRAME]++;
        return close_with(c->wsi, SG_CLOSE_BAD_DATA, "ts is not an RFC 3339 date-time");
    }
    if (v.seq > c->next_seq) {
        /* Other connections (or nodes) may have stored the stream further
         * since this one began: ask the store once before calling it a gap. */
        int64_t contig = c->acked;
        sg_err qerr;
        if (sg_store_contiguous(ing->store, c->id->learner, c->id->task, c->id->sandbox, &contig,
                                &qerr) == 0 &&
            contig + 1 > c->next_seq)
            c->next_seq = contig + 1;
    }
    if (v.seq > c->next_seq) {
        char msg[124];
        snprintf(msg, sizeof msg, "seq %lld skips ahead: the stream's next seq is %lld",
                 (long long)v.seq, (long long)c->next_seq);
        sg_frame_view_clear(&v);
        ing->stats.seq_refused++;
        ing->stats.refused++;
        ing->metrics.refusals[INGEST_REFUSED_ORDER]++;
        sg_log(SG_LOG_ERROR, "refused a frame of %s/%s/%s: %s", c->id->learner,
                 c->id->task, c->id->sandbox, msg);
        return close_with(c->wsi, SG_CLOSE_POLICY, msg);
    }
    if (v.seq == c->next_seq)
        c->next_seq++;
    if (c->id->refused) { /* closing: nothing more of this stream is stored */
        sg_frame_view_clear(&v);
        return 0;
    }
    r = ingest_batch_add(ing, c, &v, len);
    sg_frame_view_clear(&v);
    if (r < 0)
        return close_with(c->wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
    ingest_rate_take(ing, c);
    return 0;
}

static int on_receive(sg_ingest *ing, conn *c, const char *in, size_t len)
{
    if (c->gone[0]) /* nothing more from a token the secret no longer signs, or revoked */
        return close_with(c->wsi, SG_CLOSE_POLICY, c->gone);
    if (lws_frame_is_binary(c->wsi)) {
        ing->stats.refused++;
        ing->metrics.refusals[INGEST_REFUSED_FRAME]++;
        return close_with(c->wsi, SG_CLOSE_UNSUPPORTED, "binary messages are not accepted");
    }
    size_t remaining = lws_remaining_packet_payload(c->wsi);
    bool final = lws_is_final_fragment(c->wsi) && remaining == 0;
    /* lws 4.1 has no message size limit: enforce ours before buffering. */
    if (c->msg.len + len + remaining > SG_FRAME_MAX) {
        ing->stats.refused++;
        ing->metrics.refusals[INGEST_REFUSED_FRAME]++;
        return close_with(c->wsi, SG_CLOSE_TOO_BIG, "frame exceeds the size limit");
    }
    if (c->msg.len == 0 && final) /* the common case: a whole message at once */
        return on_frame(ing, c, in, len);
    /* room for the whole message at once (within SG_FRAME_MAX, above) */
    if (sg_buf_reserve(&c->msg, len + remaining) < 0 || sg_buf_append(&c->msg, in, len) < 0)
        return close_with(c->wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
    if (!final)
        return 0;
    int r = on_frame(ing, c, c->msg.data, c->msg.len);
    sg_buf_reset(&c->msg);
    return r;
}

static void conn_link(sg_ingest *ing, conn *c)
{
    c->prev = NULL;
    c->next = ing->conns;
    if (ing->conns)
        ing->conns->prev = c;
    ing->conns = c;
}

static void conn_unlink(sg_ingest *ing, conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (ing->conns == c)
        ing->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

void ingest_streams_gone(sg_ingest *ing, const char *id, const char *why)
{
    for (conn *c = ing->conns; c; c = c->next)
        if (!c->gone[0] && (!id || strcmp(c->token_id, id) == 0)) {
            snprintf(c->gone, sizeof c->gone, "%s", why);
            c->kill = true; /* closed from its WRITEABLE callback */
            lws_callback_on_writable(c->wsi);
        }
}

void ingest_streams_check_revoked(sg_ingest *ing)
{
    if (!ing->conns)
        return;
    sg_err err;
    sg_autojson json_t *ids = sg_store_revoked_ids(ing->store, &err);
    if (!ids) { /* the next ping asks again; a new handshake is checked anyway */
        sg_log(SG_LOG_WARN, "the open streams' tokens not checked for revocations: %s", err.msg);
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
        const char *id = json_string_value(v);
        if (!id)
            continue;
        char why[64];
        snprintf(why, sizeof why, "token revoked (id %.16s)", id);
        ingest_streams_gone(ing, id, why);
    }
}

/* ing->now = sg_now_iso8601(), with the date and time of day formatted
 * once a second: gmtime and strftime per message were a tenth of the
 * loop's instructions. */
static void stamp_now(sg_ingest *ing)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ing->now_prefix == 0 || ts.tv_sec != ing->now_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        ing->now_prefix = strftime(ing->now, sizeof ing->now - 14, "%Y-%m-%dT%H:%M:%S", &tm);
        ing->now_sec = ts.tv_sec;
    }
    char *p = ing->now + ing->now_prefix;
    long us = ts.tv_nsec / 1000;
    *p++ = '.';
    for (int d = 5; d >= 0; d--, us /= 10)
        p[d] = (char)('0' + us % 10);
    memcpy(p + 6, "+00:00", 7);
}

int ingest_cb_stream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
    sg_ingest *ing = lws_context_user(lws_get_context(wsi));
    conn *c = user;

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        if (ing->stopping)
            return ingest_refuse_handshake(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "shutting down");
        if (ingest_limits_is_reserve(ing, wsi))
            return ingest_refuse_handshake(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "too many connections");
        return check_handshake(ing, wsi, c);

    case LWS_CALLBACK_ESTABLISHED: {
        c->wsi = wsi;
        conn_link(ing, c);
        /* Tell a reconnecting client where the server is. */
        sg_err err;
        if (sg_store_contiguous(ing->store, c->id->learner, c->id->task, c->id->sandbox,
                                &c->acked, &err) < 0)
            return close_with(wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "store unavailable");
        c->id->contig = c->id->beyond = c->acked;
        c->next_seq = c->acked + 1;
        ingest_rate_start(ing, c);
        c->ack_pending = true;
        lws_callback_on_writable(wsi);
        return 0;
    }

    case LWS_CALLBACK_RECEIVE:
        stamp_now(ing);
        return on_receive(ing, c, in, len);

    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (c->kill) {
            /* Outside RECEIVE, lws closes without sending the reason set
             * by lws_close_reason: send the close frame ourselves. */
            const char *why = c->gone[0] ? c->gone : c->id->reason;
            unsigned char cb[LWS_PRE + 2 + 124];
            size_t rl = strnlen(why, 123);
            cb[LWS_PRE] = (unsigned char)(SG_CLOSE_POLICY >> 8);
            cb[LWS_PRE + 1] = (unsigned char)(SG_CLOSE_POLICY & 0xff);
            memcpy(cb + LWS_PRE + 2, why, rl);
            if (c->killed)
                return 0;
            log_closed(wsi, SG_CLOSE_POLICY, why);
            c->killed = true;
            if (c->gone[0]) {
                ing->metrics.refusals[INGEST_REFUSED_TOKEN]++;
            } else {
                ing->stats.refused++;
                ing->metrics.refusals[INGEST_REFUSED_ORDER]++;
            }
            /* 4: lws's internal LWS_WRITE_CLOSE (lws-write.h reserves it). */
            if (lws_write(wsi, cb + LWS_PRE, rl + 2, (enum lws_write_protocol)4) < 0)
                return -1;
            /* The peer answers the close and lws ends the connection; if it
             * does not, this does. */
            lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, SG_INGEST_HANDSHAKE_TIMEOUT_S);
            return 0;
        }
        if (!c->ack_pending)
            return 0;
        unsigned char buf[LWS_PRE + SG_ACK_MSG_MAX];
        int64_t ack = c->greeted && c->own_high < c->acked ? c->own_high : c->acked;
        int n = sg_ack_encode(&(sg_ack){.ack = ack, .v = SG_ACK_VERSION}, (char *)buf + LWS_PRE, SG_ACK_MSG_MAX);
        if (n < 0 || lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_TEXT) < n)
            return -1;
        c->ack_pending = false;
        c->greeted = true;
        return 0;
    }

    case LWS_CALLBACK_CLOSED:
        conn_unlink(ing, c);
        sg_buf_free(&c->msg);
        ingest_ident_unref(c->id);
        c->id = NULL;
        return 0;

    default:
        return 0;
    }
}


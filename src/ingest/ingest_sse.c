/* ingest_sse: GET /v1/stream, the pushed event stream (Server-Sent
 * Events; see ingest.h for the protocol, docs/ARCHITECTURE.md for why SSE).
 *
 * The cursor is the store's row id, given out in commit order (store.h).
 * One hub per ingest keeps `tail`, the highest id it has fanned out. After
 * each commit of this node's writer (ingest_sse_on_commit), and after each
 * commit notice from the store (PostgreSQL: every node's commits, LISTEN),
 * it reads the rows above tail once, builds each event's SSE text once,
 * and queues it (shared, counted) to every live subscriber it matches.
 *
 * A new subscriber starts behind: it reads its own filtered pages from its
 * cursor (on its WRITEABLE, when its queue is empty) until a page comes
 * back short. Everything at or below tail was visible when tail was read,
 * so a short page means the subscriber has every matching row up to now;
 * it is then live, and the fan-out gives it only ids above its cursor: no
 * gap, no duplicate. Everything runs on the loop thread.
 *
 * Queues are bounded (SG_INGEST_STREAM_QUEUE events / _BYTES): past them
 * the queue is dropped, an "overflow" event names the last id written,
 * and the connection closes (at once if even that cannot be written
 * within SSE_CLOSE_GRACE_S).
 *
 * The fan-out reads a page only when every live subscriber's queue has
 * room for it (under half full): the writer commits thousands of rows at
 * once, and a page read faster than the sockets take it would overflow a
 * reader that keeps up. A subscriber that held the fan-out back and has
 * not drained to a quarter within SSE_STALL_MS is the slow one: it
 * overflows (closed, as above), and the fan-out goes on; so a slow reader
 * holds the others back SSE_STALL_MS at most, and one that keeps up is
 * not closed for the writer's bursts. Held SSE_HOLD_MAX_MS in a row,
 * whoever holds it (slow readers whose stalls are staggered), every queue
 * still over half full overflows. The ingest's own work (frames,
 * commits, acks) is never held: only what is read for the subscribers. */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "ingest/query.h"
#include "wire/sse.h"

#define SSE_TAIL_ROWS 1000        /* rows per fan-out read */
#define SSE_TAIL_PAGES 4          /* reads per turn; more go after lws's turn */
#define SSE_CATCHUP_ROWS 500      /* a subscriber's own page */
#define SSE_CATCHUP_BYTES (2 * 1024 * 1024)
#define SSE_WRITE_BYTES (64 * 1024) /* events coalesced into one write */
#define SSE_PING_MS 15000         /* a comment, for proxies and dead peers */
#define SSE_RELISTEN_MS 1000      /* the commit-notice connection, after a loss */
#define SSE_CLOSE_GRACE_S 60     /* for the overflow notice to be read */
#define SSE_RETRY_MS 1000         /* the client's reconnect delay (SSE "retry:") */
#define SSE_STALL_MS 1000         /* a subscriber holding the fan-out back longer overflows */
#define SSE_HOLD_MAX_MS 3000      /* the fan-out held longer in a row: every full queue overflows */
/* A fan-out page's payload bytes, at most (and its one row past them):
 * with its SSE_TAIL_ROWS events it fits a queue under half full. */
#define SSE_TAIL_BYTES (SG_INGEST_STREAM_QUEUE_BYTES / 4)

/* One SSE message, shared by the queues it is in. */
typedef struct sse_msg {
    int refs;
    int64_t id;              /* the event's row id; 0: a notice */
    int64_t seq;             /* the event's seq in its stream */
    const char *key[3];      /* learner, task, sandbox (into text's allocation) */
    size_t len;
    char text[];             /* the message, then the keys */
} sse_msg;

typedef struct sse_sub {
    struct sse_sub *prev, *next;
    struct lws *wsi;
    sg_http_req *req;
    char filt[3][SG_NAME_MAX + 1]; /* "": any */
    int64_t after_seq;        /* only seqs above it (-1: all) */
    char tok[SG_TOKEN_ID_LEN + 1]; /* its token's id (checked again at each ping, and at a revoke) */
    unsigned char addr[16];
    int64_t cursor;   /* every matching row up to here is queued or written */
    int64_t sent;     /* the last event id handed to lws */
    bool live;        /* caught up: fed by the fan-out */
    uint64_t full_since; /* loop time it held the fan-out back since (sub_full), until it drained
                          * to a quarter (sub_low); 0: not */
    bool closing;     /* write what is queued (the overflow notice), then close */
    sse_msg **q;      /* ring */
    size_t qhead, qn, qbytes;
} sse_sub;

typedef struct sse_hub {
    sg_ingest *ing;
    sse_sub *subs;
    size_t nsubs;
    int64_t tail;
    bool tail_valid;
    char *url;               /* the store, for the commit-notice connection */
    sg_store *lstore;
    uv_poll_t poll;
    uv_timer_t ping, more, relisten, stall;
    bool poll_on, handles;
    bool held; /* the fan-out waits for a queue to drain (sub_full) */
    uint64_t held_since; /* loop time it has waited since, without a page read (0: not held) */
    uint64_t stall_ms;   /* SSE_STALL_MS, or the test's (env_ms) */
} sse_hub;

static void msg_unref(sse_msg *m)
{
    if (m && --m->refs == 0)
        free(m);
}

/* A message of f's frame (wire/sse.h) for the event of id and keys (NULL:
 * a notice, for every subscriber). */
static sse_msg *msg_new(int64_t id, const char *const key[3], const sg_sse_frame *f)
{
    sg_autobuf sg_buf text = {0};
    if (sg_sse_encode(&text, f) < 0)
        return NULL;
    size_t kl[3] = {0};
    for (int k = 0; k < 3 && key; k++)
        kl[k] = strlen(key[k]) + 1;
    sse_msg *m = malloc(sizeof *m + text.len + 1 + kl[0] + kl[1] + kl[2]);
    if (!m)
        return NULL;
    memcpy(m->text, text.data, text.len + 1);
    m->refs = 1;
    m->id = id;
    m->seq = -1;
    m->len = text.len;
    char *o = m->text + text.len + 1;
    for (int k = 0; k < 3; k++) {
        m->key[k] = key ? o : "";
        if (key)
            memcpy(o, key[k], kl[k]);
        o += kl[k];
    }
    return m;
}

/* A notice: an event named event whose data is text, or a comment when
 * event is NULL. */
static sse_msg *msg_notice(const char *event, const char *text)
{
    sg_sse_frame f = {.retry = -1, .event = event};
    if (event) {
        f.data = text;
        f.data_len = strlen(text);
    } else {
        f.comment = text;
    }
    return msg_new(0, NULL, &f);
}

/* "id: N\ndata: {row}\n\n": the row as /v1/events writes it, on one line
 * (sg_store_event_json), so one data line. */
static sse_msg *msg_of_event(const sg_store_event *e)
{
    sg_autobuf sg_buf row = {0};
    if (sg_store_event_json(&row, e) < 0)
        return NULL;
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)e->id);
    const char *key[3] = {e->learner, e->task, e->sandbox};
    sse_msg *m = msg_new(e->id, key, &(sg_sse_frame){.retry = -1, .id = id, .data = row.data, .data_len = row.len});
    if (m)
        m->seq = e->seq;
    return m;
}

static bool sub_matches(const sse_sub *s, const sse_msg *m)
{
    for (int k = 0; k < 3; k++)
        if (s->filt[k][0] && strcmp(s->filt[k], m->key[k]) != 0)
            return false;
    return m->seq > s->after_seq;
}

static void queue_drop(sse_sub *s)
{
    for (; s->qn > 0; s->qn--) {
        msg_unref(s->q[s->qhead]);
        s->qhead = (s->qhead + 1) % SG_INGEST_STREAM_QUEUE;
    }
    s->qbytes = 0;
}

static void queue_push(sse_sub *s, sse_msg *m)
{
    m->refs++;
    s->q[(s->qhead + s->qn++) % SG_INGEST_STREAM_QUEUE] = m;
    s->qbytes += m->len;
}

/* Drops s's queue and ends it with m (a notice), then closes. */
static void sub_end(sse_sub *s, sse_msg *m)
{
    queue_drop(s);
    s->closing = true;
    if (m)
        queue_push(s, m);
    msg_unref(m);
    lws_set_timeout(s->wsi, PENDING_TIMEOUT_USER_OK, SSE_CLOSE_GRACE_S);
    lws_callback_on_writable(s->wsi);
}

/* The queue is full: drop it, and say where to resume (the last id
 * written) before closing. */
static void sub_overflow(sse_hub *h, sse_sub *s)
{
    h->ing->stats.stream_overflows++;
    char data[200];
    snprintf(data, sizeof data,
             "{\"after\":%lld,\"reason\":\"this client reads too slowly: reconnect with "
             "Last-Event-ID or after=%lld\"}",
             (long long)s->sent, (long long)s->sent);
    sub_end(s, msg_notice("overflow", data));
}

/* Queues m to s, or overflows s. */
static void sub_offer(sse_hub *h, sse_sub *s, sse_msg *m)
{
    if (s->closing)
        return;
    if (s->qn + 1 >= SG_INGEST_STREAM_QUEUE ||
        (s->qn > 0 && s->qbytes + m->len > SG_INGEST_STREAM_QUEUE_BYTES)) {
        sub_overflow(h, s);
        return;
    }
    queue_push(s, m);
    if (s->qn == 1)
        lws_callback_on_writable(s->wsi);
}

/* ---------------------------------------------------------------- fan-out */

static void on_more(uv_timer_t *t);
static void on_stall(uv_timer_t *t);

/* One row above tail to every live subscriber it matches. */
static int fan_out_row(void *ud, const sg_store_event *e)
{
    sse_hub *h = ud;
    sse_msg *m = msg_of_event(e);
    if (!m)
        return 0; /* as before: a row that cannot be built is passed over */
    for (sse_sub *s = h->subs; s; s = s->next) {
        if (!s->live || m->id <= s->cursor)
            continue;
        s->cursor = m->id;
        if (sub_matches(s, m))
            sub_offer(h, s, m);
    }
    h->tail = m->id;
    msg_unref(m);
    return 0;
}

/* Whether s's queue is too full for another fan-out page. */
static bool sub_full(const sse_sub *s)
{
    return s->live && !s->closing &&
           (s->qn >= SG_INGEST_STREAM_QUEUE / 2 || s->qbytes >= SG_INGEST_STREAM_QUEUE_BYTES / 2);
}

/* Whether s's queue has drained to a quarter (its stall clock stops). */
static bool sub_low(const sse_sub *s)
{
    return s->qn < SG_INGEST_STREAM_QUEUE / 4 && s->qbytes < SG_INGEST_STREAM_QUEUE_BYTES / 4;
}

/* Whether a live subscriber's queue holds the fan-out back (each one's
 * stall clock started; on_stall checks them while one does). */
static bool hub_held(sse_hub *h)
{
    uint64_t now = uv_now(h->ing->loop) + 1; /* never 0 */
    bool held = false;
    for (sse_sub *s = h->subs; s; s = s->next) {
        if (!sub_full(s))
            continue;
        if (!s->full_since)
            s->full_since = now;
        held = true;
    }
    h->held = held;
    if (!held)
        h->held_since = 0;
    else if (!h->held_since)
        h->held_since = now;
    if (held && !uv_is_active((uv_handle_t *)&h->stall))
        uv_timer_start(&h->stall, on_stall, h->stall_ms, 0);
    else if (!held)
        uv_timer_stop(&h->stall);
    return held;
}

/* The rows committed above tail, to every live subscriber they match. */
static void hub_fetch(sse_hub *h)
{
    if (h->nsubs == 0 || !h->tail_valid || !h->handles)
        return;
    for (int page = 0; page < SSE_TAIL_PAGES; page++) {
        if (hub_held(h))
            return; /* on: when the queue drains (ingest_sse_writeable), or the stall's overflow */
        bool cut = false;
        sg_store_query q = {.after_seq = -1, .after_id = h->tail, .limit = SSE_TAIL_ROWS,
                            .max_bytes = SSE_TAIL_BYTES, .cut = &cut};
        sg_err err;
        int n = sg_store_scan(h->ing->store, &q, fan_out_row, h, &err);
        if (n < 0) {
            sg_log(SG_LOG_ERROR, "stream: read the new events: %s (retrying)", err.msg);
            uv_timer_start(&h->more, on_more, SSE_RELISTEN_MS, 0);
            return;
        }
        if ((size_t)n < SSE_TAIL_ROWS && !cut)
            return;
    }
    uv_timer_start(&h->more, on_more, 0, 0); /* the rest after lws's turn */
}

static void on_more(uv_timer_t *t)
{
    hub_fetch(t->data);
}

/* While the fan-out is held back: a subscriber that held it and has not
 * drained to a quarter for SSE_STALL_MS overflows, and after
 * SSE_HOLD_MAX_MS held in a row every one still too full does; the
 * fan-out goes on (held again, this checks again SSE_STALL_MS later). */
static void on_stall(uv_timer_t *t)
{
    sse_hub *h = t->data;
    uint64_t now = uv_now(h->ing->loop) + 1;
    bool too_long = h->held_since && now - h->held_since >= h->stall_ms * (SSE_HOLD_MAX_MS / SSE_STALL_MS);
    for (sse_sub *s = h->subs; s; s = s->next)
        if (s->live && !s->closing && s->full_since &&
            ((now - s->full_since >= h->stall_ms && !sub_low(s)) || (too_long && sub_full(s))))
            sub_overflow(h, s);
    hub_fetch(h);
}

void ingest_sse_on_commit(sg_ingest *ing)
{
    if (ing->sse)
        hub_fetch(ing->sse);
}

/* ---------------------------------------------------------------- commit notices */

static void hub_listen(sse_hub *h);

static void on_relisten(uv_timer_t *t)
{
    hub_listen(t->data);
}

static void listen_lost(sse_hub *h)
{
    if (h->poll_on) {
        uv_poll_stop(&h->poll);
        uv_close((uv_handle_t *)&h->poll, NULL);
        h->poll_on = false;
    }
    sg_store_close(h->lstore);
    h->lstore = NULL;
    if (h->handles)
        uv_timer_start(&h->relisten, on_relisten, SSE_RELISTEN_MS, 0);
}

static void on_notice(uv_poll_t *p, int status, int events)
{
    (void)events;
    sse_hub *h = p->data;
    int n = status < 0 ? -1 : sg_store_notified(h->lstore);
    if (n < 0) {
        sg_log(SG_LOG_ERROR, "stream: the store's commit notices are lost (listening again)");
        listen_lost(h);
    }
    if (n != 0)
        hub_fetch(h); /* also after a loss: what it may have missed */
}

/* Hears every node's commits: PostgreSQL only (a SQLite store has one). */
static void hub_listen(sse_hub *h)
{
    if (h->lstore || !h->url || strncmp(h->url, "postgres", 8) != 0 || !h->handles)
        return;
    sg_err err;
    h->lstore = sg_store_open(h->url, &err);
    int fd = h->lstore ? sg_store_listen(h->lstore, &err) : -1;
    if (fd < 0 || uv_poll_init(h->ing->loop, &h->poll, fd) < 0) {
        sg_log(SG_LOG_ERROR, "stream: listen for other nodes' commits: %s (retrying)",
               fd < 0 ? err.msg : "uv_poll_init");
        listen_lost(h);
        return;
    }
    h->poll.data = h;
    h->poll_on = true;
    uv_poll_start(&h->poll, UV_READABLE, on_notice);
    hub_fetch(h);
}

/* Ends s with the `revoked` notice, why its reason. */
static void sub_revoked(sse_sub *s, const char *why)
{
    char data[SG_ERR_MSG_MAX + 128]; /* why: an sg_err's message and a little */
    snprintf(data, sizeof data, "{\"reason\":\"%s\"}", why);
    sub_end(s, msg_notice("revoked", data));
}

/* Every open stream of the token id (the revoke this node took) ends now;
 * other nodes' streams end at their ping. */
void ingest_sse_revoked(sg_ingest *ing, const char *id, const char *why)
{
    sse_hub *h = ing->sse;
    for (sse_sub *s = h ? h->subs : NULL; s; s = s->next)
        if (!s->closing && (!id || strcmp(s->tok, id) == 0))
            sub_revoked(s, why);
}

static void on_ping(uv_timer_t *t)
{
    sse_hub *h = t->data;
    ingest_streams_check_revoked(h->ing); /* another node's revokes: the /v1/ingest streams too */
    for (sse_sub *s = h->subs; s; s = s->next) {
        sg_token_claims cl = {0};
        unsigned status;
        const char *why;
        memcpy(cl.id, s->tok, sizeof cl.id);
        if (!s->closing && ingest_token_revoked(h->ing, &cl, &status, &why) && status == HTTP_STATUS_UNAUTHORIZED)
            sub_revoked(s, why);
        if (s->qn > 0 || s->closing)
            continue;
        sse_msg *m = msg_notice(NULL, "ping");
        if (m)
            sub_offer(h, s, m);
        msg_unref(m);
    }
}

/* Test hooks: SANDGLASS_STREAM_PING_MS overrides the ping's 15 s, so a
 * test sees a ping's revocation check without waiting 15 s (or keeps it
 * out of the way of the revoke's own); SANDGLASS_STREAM_STALL_MS the
 * stall's 1 s (SSE_HOLD_MAX_MS grows with it, 3 stalls), so a test of
 * readers that keep up does not depend on their being scheduled within
 * a second. */
static uint64_t env_ms(const char *name, uint64_t def)
{
    uint64_t v = 0;
    sg_err e = {0};
    const char *env = getenv(name);
    return env && sg_parse_uint(env, 24ull * 3600 * 1000, &v, &e) == 0 && v > 0 ? v : def;
}

/* ---------------------------------------------------------------- subscribers */

static int peer_addr(struct lws *wsi, unsigned char addr[16])
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(addr, 0, 16);
    if (getpeername(lws_get_socket_fd(wsi), (struct sockaddr *)&ss, &sl) < 0)
        return -1;
    if (ss.ss_family == AF_INET) {
        addr[10] = addr[11] = 0xff;
        memcpy(addr + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    }
    return 0;
}

/* 0, or the status for a subscriber past a cap (with why). */
static unsigned sub_cap(sse_hub *h, const unsigned char addr[16], const char **why)
{
    if (h->nsubs >= SG_INGEST_STREAMS_MAX) {
        h->ing->metrics.refusals[INGEST_REFUSED_SUBSCRIBERS]++;
        *why = "too many stream subscribers on this ingest";
        return HTTP_STATUS_SERVICE_UNAVAILABLE;
    }
    unsigned same = 0;
    for (sse_sub *s = h->subs; s; s = s->next)
        same += memcmp(s->addr, addr, 16) == 0;
    if (same >= SG_INGEST_STREAMS_PER_ADDR) {
        h->ing->metrics.refusals[INGEST_REFUSED_SUBSCRIBERS]++;
        *why = "too many stream subscribers from this address";
        return 429;
    }
    return 0;
}

static void sub_free(sse_hub *h, sse_sub *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        h->subs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->nsubs--;
    h->ing->stats.subscribers = h->nsubs;
    if (h->nsubs == 0)
        h->tail_valid = false; /* no fan-out while nobody listens */
    else if (h->held && h->handles)
        uv_timer_start(&h->more, on_more, 0, 0); /* it may have been the one holding the fan-out */
    if (s->req)
        s->req->stream = NULL;
    queue_drop(s);
    free(s->q);
    free(s);
}

void ingest_sse_closed(sg_ingest *ing, sg_http_req *req)
{
    if (ing->sse && req && req->stream)
        sub_free(ing->sse, req->stream);
}

void ingest_sse_gone(sg_ingest *ing, struct lws *wsi)
{
    sse_hub *h = ing->sse;
    for (sse_sub *s = h ? h->subs : NULL; s; s = s->next)
        if (s->wsi == wsi) {
            sub_free(h, s);
            return;
        }
}

static int catch_up_row(void *ud, const sg_store_event *e)
{
    sse_sub *s = ud;
    sse_msg *m = msg_of_event(e);
    if (!m)
        return -1;
    queue_push(s, m);
    s->cursor = m->id;
    msg_unref(m);
    return 0;
}

/* One catch-up page from the subscriber's cursor; a short one makes it
 * live. -1: the store failed (the connection closes; the client resumes). */
static int sub_catch_up(sse_hub *h, sse_sub *s)
{
    bool cut = false;
    sg_store_query q = {.learner = s->filt[0][0] ? s->filt[0] : NULL,
                        .task = s->filt[1][0] ? s->filt[1] : NULL,
                        .sandbox = s->filt[2][0] ? s->filt[2] : NULL,
                        .after_seq = s->after_seq, .after_id = s->cursor, .limit = SSE_CATCHUP_ROWS,
                        .max_bytes = SSE_CATCHUP_BYTES, .cut = &cut};
    sg_err err;
    int n = sg_store_scan(h->ing->store, &q, catch_up_row, s, &err);
    if (n < 0) {
        sg_log(SG_LOG_ERROR, "stream: catch up: %s", err.msg);
        return -1;
    }
    if ((size_t)n < SSE_CATCHUP_ROWS && !cut) {
        s->live = true;
        if (s->cursor < h->tail)
            s->cursor = h->tail; /* nothing of its own up to tail: read above */
        char data[64];
        snprintf(data, sizeof data, "{\"after\":%lld}", (long long)s->cursor);
        sse_msg *m = msg_notice("live", data);
        if (m)
            queue_push(s, m);
        msg_unref(m);
    }
    return 0;
}

/* Queued messages into one buffer (at least one, up to SSE_WRITE_BYTES). */
static unsigned char *sub_take(sse_sub *s, size_t *len)
{
    size_t n = 0, total = 0;
    while (n < s->qn) {
        size_t l = s->q[(s->qhead + n) % SG_INGEST_STREAM_QUEUE]->len;
        if (n > 0 && total + l > SSE_WRITE_BYTES)
            break;
        total += l;
        n++;
    }
    unsigned char *buf = malloc(LWS_PRE + total + 1);
    if (!buf)
        return NULL;
    size_t o = LWS_PRE;
    for (; n > 0; n--) {
        sse_msg *m = s->q[s->qhead];
        memcpy(buf + o, m->text, m->len);
        o += m->len;
        if (m->id > 0)
            s->sent = m->id;
        s->qbytes -= m->len;
        s->qhead = (s->qhead + 1) % SG_INGEST_STREAM_QUEUE;
        s->qn--;
        msg_unref(m);
    }
    *len = total;
    return buf;
}

int ingest_sse_writeable(sg_ingest *ing, struct lws *wsi, sg_http_req *req)
{
    sse_hub *h = ing->sse;
    sse_sub *s = req->stream;
    if (s->qn == 0 && s->closing)
        return -1; /* the overflow notice is out */
    if (s->qn == 0 && !s->live && sub_catch_up(h, s) < 0)
        return -1;
    if (s->qn == 0)
        return 0;
    size_t len = 0;
    sg_autofree unsigned char *buf = sub_take(s, &len);
    if (!buf || lws_write(wsi, buf + LWS_PRE, len, LWS_WRITE_HTTP) < (int)len)
        return -1;
    if (s->full_since && sub_low(s))
        s->full_since = 0;
    if (h->held && !sub_full(s))
        uv_timer_start(&h->more, on_more, 0, 0); /* the fan-out may go on (hub_held checks them all) */
    if (s->qn > 0 || !s->live || s->closing)
        lws_callback_on_writable(wsi);
    return 0;
}

/* ---------------------------------------------------------------- the request */

/* A query of only the names /v1/stream takes: NULL, or why not (into msg). */
static const char *check_names(struct lws *wsi, char *msg, size_t n)
{
    static const char *const known[] = {"learner", "task", "sandbox", "after", "after_seq", "token"};
    return ingest_query_names(wsi, known, SG_ARRAY_LEN(known), "GET /v1/stream takes learner, task, sandbox, after, "
                              "after_seq", msg, n);
}

/* Where the subscriber starts: Last-Event-ID (a client resuming), else
 * after=, else the current tail (only what comes next). NULL or why not. */
static const char *start_cursor(sse_hub *h, struct lws *wsi, int64_t *cursor)
{
    char v[32];
    int ll = lws_hdr_custom_length(wsi, "last-event-id:", 14);
    if (ll > 0) {
        if (ll >= (int)sizeof v || lws_hdr_custom_copy(wsi, v, sizeof v, "last-event-id:", 14) < 0 ||
            !v[0] || strspn(v, "0123456789") != strlen(v) || strlen(v) > 18)
            return "bad Last-Event-ID (an event id: a decimal integer >= 0)";
        *cursor = strtoll(v, NULL, 10);
        return NULL;
    }
    *cursor = h->tail;
    if (sg_query_i64(ingest_lws_frag, wsi, "after=", 0, cursor) < 0)
        return "bad value for after (an event id: a decimal integer >= 0)";
    return NULL;
}

/* The filters under the token's scope into s->filt: 0, 1 answered. */
static int sub_filters(struct lws *wsi, sg_http_req *req, const sg_token_claims *cl, sse_sub *s)
{
    static const char *const names[] = {"learner=", "task=", "sandbox="};
    const char *claims[] = {cl->learner, cl->task, cl->sandbox};
    for (int k = 0; k < 3; k++) {
        char v[SG_NAME_MAX + 8];
        const char *out = NULL;
        int r = ingest_urlarg(wsi, names[k], v, sizeof v);
        if (r < 0 || (r > 0 && !v[0])) {
            char msg[96];
            snprintf(msg, sizeof msg, "%.*s: empty, too long or given twice",
                     (int)strlen(names[k]) - 1, names[k]);
            sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(msg));
            return 1;
        }
        if (!ingest_scope_filter(wsi, req, names[k], claims[k], v, r, &out))
            return 1;
        snprintf(s->filt[k], sizeof s->filt[k], "%s", out ? out : "");
    }
    return 0;
}

/* The 200's headers: an endless body (closed by either side). */
static int sub_headers(struct lws *wsi, sse_sub *s)
{
    unsigned char hbuf[LWS_PRE + 512], *start = hbuf + LWS_PRE, *p = start,
                                       *end = hbuf + sizeof hbuf - 1;
    static const char nocache[] = "no-cache", nobuf[] = "no";
    if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "text/event-stream",
                                    LWS_ILLEGAL_HTTP_CONTENT_LEN, &p, end) ||
        lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:",
                                    (const unsigned char *)nocache, (int)sizeof nocache - 1, &p, end) ||
        /* nginx: pass each event on at once */
        lws_add_http_header_by_name(wsi, (const unsigned char *)"x-accel-buffering:",
                                    (const unsigned char *)nobuf, (int)sizeof nobuf - 1, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0); /* lws_http_mark_sse, less its h2 part */
    char note[64];
    snprintf(note, sizeof note, "sandglass stream after %lld", (long long)s->cursor);
    sse_msg *m = msg_new(0, NULL, &(sg_sse_frame){.retry = SSE_RETRY_MS, .comment = note});
    if (!m)
        return -1;
    queue_push(s, m);
    msg_unref(m);
    lws_callback_on_writable(wsi);
    return 0;
}

int ingest_sse_open(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    sse_hub *h = ing->sse;
    char msg[200];
    const char *why = check_names(wsi, msg, sizeof msg);
    if (why)
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json(why));
    sg_err err;
    if (!h->tail_valid) {
        if (sg_store_last_id(ing->store, &h->tail, &err) < 0)
            return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR,
                                  ingest_error_json(err.msg));
        h->tail_valid = true;
    }
    sse_sub *s = calloc(1, sizeof *s);
    if (!s || !(s->q = calloc(SG_INGEST_STREAM_QUEUE, sizeof *s->q))) {
        free(s);
        return -1;
    }
    int r = 0;
    unsigned status = 0;
    if (sub_filters(wsi, req, cl, s))
        goto done;
    why = start_cursor(h, wsi, &s->cursor);
    s->after_seq = -1;
    if (!why && sg_query_i64(ingest_lws_frag, wsi, "after_seq=", -1, &s->after_seq) < 0)
        why = "bad value for after_seq (a seq: a decimal integer >= -1)";
    if (!why && peer_addr(wsi, s->addr) == 0)
        status = sub_cap(h, s->addr, &why);
    if (why) {
        ingest_log_refused(wsi, "a /v1/stream subscriber", status ? status : HTTP_STATUS_BAD_REQUEST, why);
        r = sg_http_answer(wsi, req, status ? status : HTTP_STATUS_BAD_REQUEST, ingest_error_json(why));
        goto done;
    }
    s->wsi = wsi;
    s->req = req;
    s->sent = s->cursor;
    memcpy(s->tok, cl->id, sizeof s->tok);
    if ((s->next = h->subs))
        s->next->prev = s;
    h->subs = s;
    h->nsubs++;
    ing->stats.subscribers = h->nsubs;
    req->stream = s;
    hub_listen(h);
    return sub_headers(wsi, s);
done:
    free(s->q);
    free(s);
    return r;
}

/* ---------------------------------------------------------------- lifecycle */

int ingest_sse_init(sg_ingest *ing, const char *store_url, sg_err *err)
{
    sse_hub *h = calloc(1, sizeof *h);
    if (!h || (store_url && !(h->url = strdup(store_url)))) {
        free(h);
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    h->ing = ing;
    uv_timer_t *timers[] = {&h->ping, &h->more, &h->relisten, &h->stall};
    for (size_t i = 0; i < SG_ARRAY_LEN(timers); i++) {
        uv_timer_init(ing->loop, timers[i]);
        timers[i]->data = h;
    }
    h->handles = true;
    uint64_t every = env_ms("SANDGLASS_STREAM_PING_MS", SSE_PING_MS);
    h->stall_ms = env_ms("SANDGLASS_STREAM_STALL_MS", SSE_STALL_MS);
    uv_timer_start(&h->ping, on_ping, every, every);
    uv_unref((uv_handle_t *)&h->ping);
    ing->sse = h;
    return 0;
}

void ingest_sse_stop(sg_ingest *ing)
{
    sse_hub *h = ing->sse;
    if (!h || !h->handles)
        return;
    h->handles = false;
    if (h->poll_on) {
        uv_poll_stop(&h->poll);
        uv_close((uv_handle_t *)&h->poll, NULL);
        h->poll_on = false;
    }
    uv_timer_t *timers[] = {&h->ping, &h->more, &h->relisten, &h->stall};
    for (size_t i = 0; i < SG_ARRAY_LEN(timers); i++) {
        uv_timer_stop(timers[i]);
        uv_close((uv_handle_t *)timers[i], NULL);
    }
}

void ingest_sse_free(sg_ingest *ing)
{
    sse_hub *h = ing->sse;
    if (!h)
        return;
    while (h->subs)
        sub_free(h, h->subs);
    sg_store_close(h->lstore);
    free(h->url);
    free(h);
    ing->sse = NULL;
}

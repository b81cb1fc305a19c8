/* ingest_limits: the ingest's connection limits and per-stream rate (see
 * ingest.h, and ingest_internal.h for the files). */
#include "ingest/ingest_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/util.h"

/* ---------------------------------------------------------------- limits
 *
 * lws hands us the accepted fd (FILTER_NETWORK_CONNECTION, where we may
 * refuse it), then creates its wsi (WSI_CREATE, same call stack), and
 * destroys the wsi at the end (WSI_DESTROY): the peer admitted is bound to
 * the wsi created next. */

static size_t bucket_of(const void *p, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
    return (size_t)(h % LIMITS_BUCKETS);
}

static void peer_put(sg_ingest *ing, peer *pe, bool reserve)
{
    pe->conns--;
    if (reserve) {
        pe->reserve--;
        ing->nreserve--;
    }
    ing->nconns--;
    if (pe->conns > 0)
        return;
    peer **pp = &ing->peers[bucket_of(pe->addr, sizeof pe->addr)];
    while (*pp != pe)
        pp = &(*pp)->next;
    *pp = pe->next;
    free(pe);
}

int ingest_limits_admit(sg_ingest *ing, int fd)
{
    if (ing->admitted) { /* the last one admitted never got its wsi */
        peer_put(ing, ing->admitted, ing->admitted_reserve);
        ing->admitted = NULL;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    unsigned char addr[16] = {0};
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return -1;
    if (ss.ss_family == AF_INET) {
        addr[10] = addr[11] = 0xff;
        memcpy(addr + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else {
        return -1;
    }
    size_t b = bucket_of(addr, sizeof addr);
    peer *pe = ing->peers[b];
    while (pe && memcmp(pe->addr, addr, sizeof addr) != 0)
        pe = pe->next;
    unsigned have = pe ? pe->conns : 0, have_reserve = pe ? pe->reserve : 0;
    bool reserve = ing->nconns - ing->nreserve >= ing->max_conns;
    if (have - have_reserve >= ing->max_per_addr ||
        (reserve && (ing->nreserve >= SG_INGEST_CONNS_RESERVE || have_reserve > 0))) {
        ing->stats.conn_refused++;
        ing->metrics.refusals[have - have_reserve >= ing->max_per_addr ? INGEST_REFUSED_ADDR_LIMIT
                                                                       : INGEST_REFUSED_CONN_LIMIT]++;
        if ((ing->stats.conn_refused & (ing->stats.conn_refused - 1)) == 0) { /* 1, 2, 4, ... */
            char a[INET6_ADDRSTRLEN] = "?";
            inet_ntop(ss.ss_family, ss.ss_family == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                                             : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
                      a, sizeof a);
            sg_log(SG_LOG_WARN, "refused a connection from %s: %s (%llu so far)", a,
                   reserve ? "too many connections" : "too many connections from one address",
                   (unsigned long long)ing->stats.conn_refused);
        }
        return -1;
    }
    if (!pe) {
        pe = calloc(1, sizeof *pe);
        if (!pe)
            return -1;
        memcpy(pe->addr, addr, sizeof addr);
        pe->next = ing->peers[b];
        ing->peers[b] = pe;
    }
    pe->conns++;
    ing->nconns++;
    if (reserve) {
        pe->reserve++;
        ing->nreserve++;
    }
    ing->admitted = pe;
    ing->admitted_reserve = reserve;
    return 0;
}

void ingest_limits_bind(sg_ingest *ing, struct lws *wsi)
{
    peer *pe = ing->admitted;
    if (!pe)
        return; /* not an accepted connection (the listener) */
    ing->admitted = NULL;
    tracked *t = calloc(1, sizeof *t);
    if (!t) { /* uncounted from here: give its place back */
        peer_put(ing, pe, ing->admitted_reserve);
        return;
    }
    t->wsi = wsi;
    t->peer = pe;
    t->reserve = ing->admitted_reserve;
    size_t b = bucket_of(&wsi, sizeof wsi);
    t->next = ing->tracked[b];
    ing->tracked[b] = t;
}

static tracked **limits_find(sg_ingest *ing, struct lws *wsi)
{
    tracked **tp = &ing->tracked[bucket_of(&wsi, sizeof wsi)];
    while (*tp && (*tp)->wsi != wsi)
        tp = &(*tp)->next;
    return tp;
}

void ingest_limits_release(sg_ingest *ing, struct lws *wsi)
{
    tracked **tp = limits_find(ing, wsi);
    tracked *t = *tp;
    if (!t)
        return;
    *tp = t->next;
    peer_put(ing, t->peer, t->reserve);
    free(t);
}

bool ingest_limits_is_reserve(sg_ingest *ing, struct lws *wsi)
{
    tracked *t = *limits_find(ing, wsi);
    return t && t->reserve;
}

void ingest_limits_free(sg_ingest *ing)
{
    for (size_t b = 0; b < LIMITS_BUCKETS; b++) {
        for (tracked *t = ing->tracked[b], *n; t; t = n) {
            n = t->next;
            free(t);
        }
        for (peer *pe = ing->peers[b], *n; pe; pe = n) {
            n = pe->next;
            free(pe);
        }
        ing->tracked[b] = NULL;
        ing->peers[b] = NULL;
    }
}


/* ---------------------------------------------------------------- rate
 *
 * A token bucket per connection (one stream each): SG_INGEST_STREAM_RATE
 * (or --max-stream-rate) tokens a second, at most a second's worth kept.
 * Throttling is lws_rx_flow_control: the frames lws already holds wait,
 * the socket fills, the uplink's window of unacked frames closes. */

void ingest_conn_flow(conn *c)
{
    lws_rx_flow_control(c->wsi, !(c->paused || c->throttled));
}

static void rate_fill(const sg_ingest *ing, conn *c, uint64_t now)
{
    double rate = (double)ing->stream_rate;
    c->tokens += (double)(now - c->tokens_ns) / 1e9 * rate;
    if (c->tokens > rate)
        c->tokens = rate;
    c->tokens_ns = now;
}

void ingest_rate_start(sg_ingest *ing, conn *c)
{
    c->tokens = (double)ing->stream_rate;
    c->tokens_ns = sg_now_mono_ns();
}

static void on_throttle(uv_timer_t *t);

/* The timer for the throttled connection whose next token comes first. */
static void rate_arm(sg_ingest *ing)
{
    double wait_s = -1;
    for (conn *c = ing->conns; c; c = c->next)
        if (c->throttled) {
            double w = -c->tokens / (double)ing->stream_rate;
            if (wait_s < 0 || w < wait_s)
                wait_s = w;
        }
    if (wait_s < 0) {
        uv_timer_stop(&ing->throttle);
        return;
    }
    uv_timer_start(&ing->throttle, on_throttle, (uint64_t)(wait_s * 1000.0) + 1, 0);
}

static void on_throttle(uv_timer_t *t)
{
    sg_ingest *ing = t->data;
    uint64_t now = sg_now_mono_ns();
    for (conn *c = ing->conns; c; c = c->next) {
        if (!c->throttled)
            continue;
        rate_fill(ing, c, now);
        if (c->tokens >= 0) {
            c->throttled = false;
            ingest_conn_flow(c);
        }
    }
    rate_arm(ing);
}

void ingest_rate_take(sg_ingest *ing, conn *c)
{
    rate_fill(ing, c, sg_now_mono_ns());
    c->tokens -= 1;
    if (c->tokens >= 0 || c->throttled || ing->stopping)
        return;
    if (!ing->throttle_init) {
        uv_timer_init(ing->loop, &ing->throttle);
        ing->throttle.data = ing;
        ing->throttle_init = true;
    }
    c->throttled = true;
    ingest_conn_flow(c);
    ing->stats.throttled++;
    if ((ing->stats.throttled & (ing->stats.throttled - 1)) == 0) /* 1, 2, 4, ... */
        sg_log(SG_LOG_WARN, "stream %s/%s/%s throttled: past %u frames a second (%llu throttles so far)",
               c->id->learner, c->id->task, c->id->sandbox, ing->stream_rate,
               (unsigned long long)ing->stats.throttled);
    rate_arm(ing);
}

void ingest_rate_stop(sg_ingest *ing)
{
    if (!ing->throttle_init)
        return;
    uv_timer_stop(&ing->throttle);
    uv_close((uv_handle_t *)&ing->throttle, NULL);
    ing->throttle_init = false;
}

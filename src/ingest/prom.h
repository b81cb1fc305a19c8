/* prom: Prometheus's text exposition format 0.0.4 and the access rule of a
 * /metrics endpoint, shared by the ingest's (ingest_metrics.c) and the
 * sandbox host's (`sandglass host`, cli/cmd_host.c): docs/METRICS.md.
 *
 * Access: with a token (--metrics-token FILE: one line, printable ASCII,
 * the file not readable by every user) every scrape must carry it as
 * `Authorization: Bearer T`, compared by SHA-256 in constant time; without
 * one, a scrape on the endpoint's own listener is answered, and one on a
 * shared port (the ingest's main port) only from a loopback peer. */
#ifndef SG_INGEST_PROM_H
#define SG_INGEST_PROM_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/err.h"
#include "ingest/http.h"

#define SG_PROM_MIME "text/plain; version=0.0.4; charset=utf-8"
#define SG_PROM_TOKEN_MAX 4096 /* bytes of a --metrics-token file's token */

/* `# HELP` and `# TYPE` lines, then the sample (counter, gauge), or the
 * buckets (le: per bucket, not cumulative, n bounds and +Inf), _sum and
 * _count of a histogram. -1 when out of memory. */
int sg_prom_head(sg_buf *b, const char *name, const char *type, const char *help);
int sg_prom_counter(sg_buf *b, const char *name, const char *help, uint64_t v);
int sg_prom_gauge(sg_buf *b, const char *name, const char *help, double v);
/* A metric with one label: name{label="names[i]"} vals[i], for i < n
 * (type "counter" or "gauge"; the names a fixed set, never a user's). */
int sg_prom_labeled(sg_buf *b, const char *name, const char *type, const char *help, const char *label,
                    const char *const *names, const uint64_t *vals, size_t n);
int sg_prom_histogram(sg_buf *b, const char *name, const char *help, const double *bounds, size_t n,
                      const uint64_t *le, uint64_t count, double sum);

typedef struct sg_prom_access {
    bool token_set; /* --metrics-token: its SHA-256 */
    uint8_t token_sha[32];
    bool own;       /* served on a listener of its own (--metrics-listen) */
} sg_prom_access;

/* --metrics-token's file (path) into a; errors name the option and file. */
int sg_prom_token_load(sg_prom_access *a, const char *path, sg_err *err);
/* Whether the peer of wsi is a loopback address (127.0.0.0/8, ::1, or
 * IPv4's as ::ffff:127.x). */
bool sg_prom_peer_loopback(struct lws *wsi);
/* NULL when the scrape may be answered; else why not, with the HTTP
 * status to answer in *status (401, 403). */
const char *sg_prom_refusal(const sg_prom_access *a, struct lws *wsi, unsigned *status);
/* Answers a scrape: b holds LWS_PRE bytes of headroom, then the text (taken). */
int sg_prom_answer(struct lws *wsi, sg_http_req *req, sg_buf *b);

/* A /metrics server of its own (the sandbox host's): an lws context on
 * the caller's libuv loop, listening on host:port (port 0: a free one),
 * answering GET /metrics with what render writes (after LWS_PRE bytes of
 * headroom already in b; -1: a 500) under a's rule, and nothing else. */
typedef int (*sg_prom_render_fn)(void *ud, sg_buf *b);
typedef struct sg_prom_server sg_prom_server;
sg_prom_server *sg_prom_server_start(uv_loop_t *loop, const char *host, int port, const sg_prom_access *a,
                                     sg_prom_render_fn render, void *ud, sg_err *err);
int sg_prom_server_port(const sg_prom_server *ps);
/* The access rule replaced (a reload's metrics token). */
void sg_prom_server_set_access(sg_prom_server *ps, const sg_prom_access *a);
/* Scrapes refused (no token, a wrong one, a peer not allowed). */
uint64_t sg_prom_server_refusals(const sg_prom_server *ps);
/* Stops listening; inside the running loop (lws closes its handles on
 * it), then sg_prom_server_free after the loop drained (the shutdown's
 * order, DEPENDENCY-NOTES). NULL is fine for both. */
void sg_prom_server_stop(sg_prom_server *ps);
void sg_prom_server_free(sg_prom_server *ps);

#endif

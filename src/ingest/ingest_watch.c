/* ingest_watch: the console's "watch live" (docs/CONSOLE.md). The ingest
 * runs no terminal and holds no supervisor's socket: a learner's terminal
 * is relayed by `sandglass serve` on the sandbox's host. What the ingest
 * does is mint, for a read token whose scope covers a sandbox, a short
 * watch token (wire/token.h: that sandbox's terminal, read-only) and say
 * where the serve is.
 *
 * Where: the serve(s) the operator names at start (`ingest --serve URL`,
 * up to SG_INGEST_SERVES_MAX). The watch page may connect to those origins
 * and no other (its Content-Security-Policy's connect-src is built from
 * them here, once: the page is served without a token, so its policy may
 * not tell anything of the store). Which of them holds the sandbox comes
 * from the store: the host whose registration (sg_hosts, `sandglass host
 * --serve-url`) lists the sandbox names its serve, and that serve is
 * tried first; the others follow in the order given (a serve that does
 * not hold the sandbox refuses it at once: "no such sandbox on this
 * host"). A registered serve the operator did not name is not tried (the
 * page could not connect to it): the answer names it ("unlisted") so the
 * page can say what to add.
 *
 *   GET /v1/watch?sandbox=ID   (a read token, Authorization: Bearer)
 *     200 {"token": T, "expires_in": 60, "sandbox", "learner", "task",
 *          "serve": URL (the first), "serves": [URL...],
 *          "host": its host's name or null, "unlisted": URL or null}
 *     400 no or a bad sandbox=; 403 a token scoped to another sandbox;
 *     404 no event of that sandbox within the token's scope;
 *     503 no serve named (--serve) */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"

#define WATCH_TTL_S 60

/* The console's policy (ingest_console.c) but for connect-src, which
 * names the serves' WebSocket origins, and styles, which xterm.js's
 * renderer sets in a <style> element of its own. */
#define WATCH_CSP_HEAD                                                                             \
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'"
#define WATCH_CSP_TAIL                                                                             \
    "; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "              \
    "require-trusted-types-for 'script'; trusted-types 'none'"

/* host: a DNS name or IPv4 address of [A-Za-z0-9.-], or [IPv6] of hex
 * digits, ':' and '.'; len its length. */
static bool host_ok(const char *h, size_t len)
{
    if (len == 0)
        return false;
    bool v6 = h[0] == '[';
    if (v6 && (len < 3 || h[len - 1] != ']'))
        return false;
    for (size_t i = v6; i < len - v6; i++) {
        char c = h[i];
        bool ok = v6 ? (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
                           c == '.'
                     : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
                           c == '-';
        if (!ok)
            return false;
    }
    return true;
}

int sg_ingest_serve_url_check(const char *url, char *out, size_t size, sg_err *err)
{
    const char *is = "a serve's URL is http://HOST[:PORT] or https://HOST[:PORT] (no path)";
    size_t len = strlen(url);
    const char *rest = strncmp(url, "http://", 7) == 0 ? url + 7 : strncmp(url, "https://", 8) == 0 ? url + 8 : NULL;
    if (!rest || len >= size || len > SG_INGEST_SERVE_URL_MAX)
        return sg_err_set(err, EINVAL, "%s", is);
    size_t n = strlen(rest);
    if (n && rest[n - 1] == '/')
        n--;
    const char *colon = rest[0] == '[' ? memchr(rest, ']', n) : memchr(rest, ':', n);
    if (rest[0] == '[' && colon) /* past the ']' */
        colon = colon + 1 < rest + n && colon[1] == ':' ? colon + 1 : NULL;
    size_t hlen = colon ? (size_t)(colon - rest) : n;
    if (!host_ok(rest, hlen))
        return sg_err_set(err, EINVAL, "%s", is);
    if (colon) {
        uint64_t port = 0;
        char p[8];
        size_t plen = n - hlen - 1;
        if (plen == 0 || plen >= sizeof p)
            return sg_err_set(err, EINVAL, "%s: a port is 1-65535", is);
        memcpy(p, colon + 1, plen);
        p[plen] = '\0';
        if (sg_parse_uint(p, 65535, &port, err) < 0 || port == 0)
            return sg_err_set(err, EINVAL, "%s: a port is 1-65535", is);
    }
    snprintf(out, size, "%.*s", (int)(rest - url + n), url);
    return 0;
}

int ingest_watch_init(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err)
{
    if (opts->nserves > SG_INGEST_SERVES_MAX)
        return sg_err_set(err, EINVAL, "at most %d serves (--serve)", SG_INGEST_SERVES_MAX);
    size_t off = (size_t)snprintf(ing->watch_csp, sizeof ing->watch_csp, "%s", WATCH_CSP_HEAD);
    for (unsigned i = 0; i < opts->nserves; i++) {
        char *u = ing->serves[i];
        if (sg_ingest_serve_url_check(opts->serves[i], u, sizeof ing->serves[i], err) < 0) {
            sg_err_prefix(err, "--serve %.200s", opts->serves[i]);
            return -1;
        }
        bool tls = u[4] == 's';
        /* http://H -> ws://H, https://H -> wss://H: the WebSocket's origin */
        off += (size_t)snprintf(ing->watch_csp + off, sizeof ing->watch_csp - off, " %s%s", tls ? "wss" : "ws",
                                u + (tls ? 5 : 4));
    }
    ing->nserves = opts->nserves;
    snprintf(ing->watch_csp + off, sizeof ing->watch_csp - off, "%s", WATCH_CSP_TAIL);
    return 0;
}

/* The host whose last registration lists sandbox sb, and its serve URL
 * (normalized as --serve's; "" when it names none or a bad one). A store
 * that cannot answer, or no host, leaves both "": the configured serves
 * are tried in their order, as before hosts registered. */
static void watch_host_of(sg_ingest *ing, const char *sb, char *name, size_t nsize, char *serve, size_t ssize)
{
    name[0] = serve[0] = '\0';
    sg_err err;
    sg_store_hosts_query q = {.sandbox = sb};
    sg_autojson json_t *hosts = sg_store_hosts(ing->store, &q, &err);
    size_t i, k;
    json_t *h, *sbx;
    json_array_foreach(hosts, i, h) {
        json_t *info = json_object_get(h, "info");
        bool lists = false;
        json_array_foreach(json_object_get(info, "sandboxes"), k, sbx)
            lists |= json_is_string(json_object_get(sbx, "id")) &&
                     strcmp(json_string_value(json_object_get(sbx, "id")), sb) == 0;
        if (!lists) /* q.sandbox is a prefix: another sandbox's id may begin with this one's */
            continue;
        const char *n = json_string_value(json_object_get(h, "name"));
        const char *u = json_string_value(json_object_get(info, "serve_url"));
        snprintf(name, nsize, "%s", n ? n : "");
        if (!u || sg_ingest_serve_url_check(u, serve, ssize, &err) < 0)
            serve[0] = '\0';
        return;
    }
}

static int first_row(void *ud, const sg_store_event *e)
{
    json_t **row = ud;
    *row = json_pack("{s:s, s:s}", "learner", e->learner, "task", e->task);
    return *row ? 0 : -1;
}

int ingest_http_watch(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    char sb[SG_NAME_MAX + 8];
    int r = ingest_urlarg(wsi, "sandbox=", sb, sizeof sb);
    if (r <= 0 || !sg_valid_name(sb))
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST,
                              ingest_error_json(r == 0 ? "sandbox= is required: the sandbox to watch"
                                                       : "sandbox= must be a sandbox id, given once"));
    if (cl->sandbox[0] && strcmp(cl->sandbox, sb) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "this read token is scoped to sandbox %s", cl->sandbox);
        return sg_http_answer(wsi, req, HTTP_STATUS_FORBIDDEN, ingest_error_json(msg));
    }
    /* The sandbox's learner and task, from its first event the token may
     * read: none is a sandbox unknown here or outside the token's scope. */
    sg_autojson json_t *row = NULL;
    sg_store_query q = {.learner = cl->learner[0] ? cl->learner : NULL, .task = cl->task[0] ? cl->task : NULL,
                        .sandbox = sb, .after_seq = -1, .after_id = -1, .limit = 1};
    sg_err err;
    if (sg_store_scan(ing->store, &q, first_row, &row, &err) < 0)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    if (!row)
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND,
                              ingest_error_json("no events of this sandbox within this read token's scope"));
    char host[SG_NAME_MAX + 1], hserve[SG_INGEST_SERVE_URL_MAX + 1];
    watch_host_of(ing, sb, host, sizeof host, hserve, sizeof hserve);
    if (ing->nserves == 0) {
        char msg[SG_INGEST_SERVE_URL_MAX + SG_NAME_MAX + 200];
        if (hserve[0])
            snprintf(msg, sizeof msg, "this ingest names no serve to watch through: the sandbox's host %s serves "
                     "at %s; start the ingest with --serve %s", host, hserve, hserve);
        else
            snprintf(msg, sizeof msg, "this ingest names no serve to watch through: start it with "
                     "--serve http://HOST:PORT (the sandbox host's sandglass serve)");
        return sg_http_answer(wsi, req, HTTP_STATUS_SERVICE_UNAVAILABLE, ingest_error_json(msg));
    }
    const char *learner = json_string_value(json_object_get(row, "learner"));
    const char *task = json_string_value(json_object_get(row, "task"));
    sg_autofree char *tok = sg_token_make_watch(ing->secret, learner, task, sb, WATCH_TTL_S, &err);
    if (!tok)
        return sg_http_answer(wsi, req, HTTP_STATUS_INTERNAL_SERVER_ERROR, ingest_error_json(err.msg));
    char id[SG_TOKEN_ID_LEN + 1];
    sg_token_id(tok, id);
    sg_log(SG_LOG_INFO, "watch token %s for sandbox %s (learner %s task %s) minted for read token %s", id, sb,
           learner, task, cl->id);
    /* the registered host's serve first, when the operator named it */
    int first = -1;
    for (unsigned i = 0; hserve[0] && i < ing->nserves; i++)
        if (strcmp(ing->serves[i], hserve) == 0)
            first = (int)i;
    json_t *serves = json_array();
    if (serves && first >= 0)
        json_array_append_new(serves, json_string(ing->serves[first]));
    for (unsigned i = 0; serves && i < ing->nserves; i++)
        if ((int)i != first)
            json_array_append_new(serves, json_string(ing->serves[i]));
    return sg_http_answer(wsi, req, HTTP_STATUS_OK,
                          json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:o, s:o, s:o}", "token", tok, "expires_in",
                                    WATCH_TTL_S, "sandbox", sb, "learner", learner, "task", task, "serve",
                                    json_string_value(json_array_get(serves, 0)), "serves", serves, "host",
                                    host[0] ? json_string(host) : json_null(), "unlisted",
                                    hserve[0] && first < 0 ? json_string(hserve) : json_null()));
}

/* sandglass export --format jsonl|csv|progsnap2 --out FILE|DIR [--learner L]
 *                  [--task T] [--sandbox ID] [--since T] [--until T]
 *                  [--pseudonymize [--key FILE]]
 *                  [--ingest http://HOST:PORT] [--token T | --secret FILE]
 * Reads the ingest's HTTP API (GET /v1/sandboxes, then GET /v1/events of
 * each stream by seq) with a read token, whose scope bounds what is
 * exported, and writes one format (docs/EXPORT.md).
 *
 * Constant memory: one page of rows at a time (the list of streams is
 * held, sorted, so the output does not depend on the store's row ids).
 * Written to OUT.tmp-PID and renamed to OUT at the end (fsynced): an
 * interrupted export never looks complete. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/evrows.h"
#include "cli/export.h"
#include "cli/ingest_http.h"
#include "cli/prefetch.h"
#include "cli/report.h"
#include "cli/timeline.h"
#include "state/state.h"
#include "wire/token.h"

#define EXPORT_PAGE 1000
#define EXPORT_TOKEN_TTL_S 300
#define EXPORT_GO (-1)
#define EXPORT_TRIES 4 /* a page's GET, when no whole answer came */
#define EXPORT_WRITEBACK (8 << 20) /* bytes written between two starts of their writeback */

static const char usage[] =
    "usage: sandglass export --format jsonl|csv|progsnap2|asciicast --out FILE|DIR\n"
    "                        [--learner L] [--task T] [--sandbox ID] [--since T] [--until T]\n"
    "                        [--pseudonymize [--key FILE]]\n"
    "                        [--ingest http://HOST:PORT] [--ingest-ca FILE]\n"
    "                        [--token T | --secret FILE]\n"
    "  --format  jsonl: one stored row a line, lossless (sandglass import reads it);\n"
    "            csv: one row per event, the payload's fields as columns;\n"
    "            progsnap2: a ProgSnap2 dataset directory (docs/EXPORT.md);\n"
    "            asciicast: each terminal session's recording kept by the ingest\n"
    "  --out     the file (jsonl, csv; - for stdout) or directory (progsnap2, asciicast)\n"
    "            to create\n"
    "  --since, --until  events whose time is at or after / at or before this UTC time\n"
    "            (2026-12-03T13:05:00Z)\n"
    "  --pseudonymize  learner ids replaced by a keyed hash (HMAC-SHA256 with --key's\n"
    "            secret, default <state>/export/pseudonym.key, created 0600)\n"
    "  --ingest, --ingest-ca, --token, --secret  as for sandglass events (a read\n"
    "            token's scope limits what is exported)\n";

typedef struct export_opts {
    const char *format, *out, *learner, *task, *sandbox, *since_arg, *until_arg;
    const char *ingest, *ingest_ca, *token_opt, *secret_path, *key_path;
    double since, until;
    bool pseudonymize;
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    uint8_t key[SG_TOKEN_SECRET_LEN];
    sg_cli_target target;
    sg_evpage page;
} export_opts;

static const sg_export_fmt export_jsonl; /* below */

static const sg_export_fmt *export_find_fmt(const char *name)
{
    static const sg_export_fmt *const all[] = {&export_jsonl, &sg_export_csv, &sg_export_ps2, &sg_export_cast};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

static double export_when(const char *arg)
{
    size_t n = strlen(arg);
    if (n < 19 || (n > 19 && arg[n - 1] != 'Z' && arg[19] != '.'))
        return -1;
    return sg_tl_ts_epoch(arg);
}

static int export_parse(int argc, char **argv, export_opts *o)
{
    static const struct option longopts[] = {
        {"format", required_argument, NULL, 'f'},  {"out", required_argument, NULL, 'o'},
        {"learner", required_argument, NULL, 'l'}, {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'}, {"since", required_argument, NULL, 'S'},
        {"until", required_argument, NULL, 'U'},   {"pseudonymize", no_argument, NULL, 'p'},
        {"key", required_argument, NULL, 'K'},     {"ingest", required_argument, NULL, 'i'},
        {"token", required_argument, NULL, 'T'},   {"secret", required_argument, NULL, 'k'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    *o = (export_opts){.ingest = sg_config_ingest()};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': o->format = optarg; break;
        case 'o': o->out = optarg; break;
        case 'l': o->learner = optarg; break;
        case 't': o->task = optarg; break;
        case 's': o->sandbox = optarg; break;
        case 'S': o->since_arg = optarg; break;
        case 'U': o->until_arg = optarg; break;
        case 'p': o->pseudonymize = true; break;
        case 'K': o->key_path = optarg; break;
        case 'i': o->ingest = optarg; break;
        case 'C': o->ingest_ca = optarg; break;
        case 'T': o->token_opt = optarg; break;
        case 'k': o->secret_path = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("export", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("export", "unexpected argument '%.64s' (export takes only options)", argv[optind]);
    if (!o->format || !export_find_fmt(o->format))
        return sg_cli_usage("export", "--format: one of jsonl, csv, progsnap2, asciicast");
    if (!o->out || !*o->out)
        return sg_cli_usage("export", "--out: the file or directory to write");
    if (export_find_fmt(o->format)->is_dir && !strcmp(o->out, "-"))
        return sg_cli_usage("export", "--out: %s writes a directory, not stdout", o->format);
    if (o->since_arg && (o->since = export_when(o->since_arg)) < 0)
        return sg_cli_usage("export", "--since: not a UTC time (2026-12-03T13:05:00Z)");
    if (o->until_arg && (o->until = export_when(o->until_arg)) < 0)
        return sg_cli_usage("export", "--until: not a UTC time (2026-12-03T13:05:00Z)");
    if (o->key_path && !o->pseudonymize)
        return sg_cli_usage("export", "--key goes with --pseudonymize");
    if (o->token_opt && (strlen(o->token_opt) > SG_TOKEN_MAX || strpbrk(o->token_opt, "\r\n ")))
        return sg_cli_usage("export", "--token: not a token");
    return EXPORT_GO;
}

/* The secret our tokens are made from (without --token), and the
 * pseudonyms' key. */
static int export_secrets(export_opts *o)
{
    sg_err err;
    sg_autofree char *secret_default = NULL, *key_default = NULL, *dir = NULL;
    if ((!o->token_opt && !o->secret_path) || (o->pseudonymize && !o->key_path)) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("export", "state directory: %s", err.msg);
    }
    if (!o->token_opt) {
        const char *p = o->secret_path ? o->secret_path : (secret_default = sg_config_secret());
        if (sg_token_secret_load(p, o->secret, &err) < 0)
            return sg_cli_failf("export", "%s (reads need a read token: pass --token, made with "
                                "`sandglass token --read`, or --secret FILE)", err.msg);
    }
    if (o->pseudonymize) {
        if (!o->key_path) {
            dir = sg_state_path("export");
            if (sg_mkdir_p(dir, 0700, &err) < 0)
                return sg_cli_failf("export", "%s", err.msg);
            o->key_path = key_default = sg_state_path("export/pseudonym.key");
        }
        if (sg_token_secret_ensure(o->key_path, o->key, &err) < 0)
            return sg_cli_failf("export", "pseudonym key: %s", err.msg);
        o->key_path = NULL; /* the default's memory goes with this frame */
    }
    return EXPORT_GO;
}

void sg_export_url_arg(char *q, size_t qlen, const char *name, const char *val)
{
    size_t o = strlen(q);
    o += (size_t)snprintf(q + o, qlen - o, "%s%s=", strchr(q, '?') ? "&" : "?", name);
    for (const unsigned char *p = (const unsigned char *)val; *p && o + 4 < qlen; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '.' || *p == '_' || *p == '~')
            q[o++] = (char)*p;
        else
            o += (size_t)snprintf(q + o, qlen - o, "%%%02X", *p);
    }
    q[o] = '\0';
}

/* The read token of one request: --token, or one made from the secret. */
static char *export_token(const export_opts *o, sg_err *err)
{
    return o->token_opt ? strdup(o->token_opt)
                        : sg_token_make_read(o->secret, NULL, NULL, NULL, EXPORT_TOKEN_TTL_S, err);
}

/* One GET under the read token: the whole answer (the caller frees), its
 * body at *body; NULL with the message printed. A request that got no
 * whole answer (the connection cut, a timeout on a loaded host) is made
 * again, up to EXPORT_TRIES times: the same page, so the same bytes. */
static char *export_get(export_opts *o, const char *path, const char **body, size_t *len)
{
    sg_err err;
    for (int try = 1;; try++) {
        sg_autofree char *tok = export_token(o, &err);
        if (!tok)
            return sg_cli_failf("export", "token: %s", err.msg), NULL;
        int status = 0;
        char *ans = sg_cli_http_get(&o->target, path, tok, &status, body, len, &err);
        if (ans && status != 200) {
            json_decref(sg_cli_http_answer_json(*body, *len, status, NULL, &err));
            sg_cli_failf("export", "%s", err.msg);
            free(ans);
            return NULL;
        }
        if (ans)
            return ans;
        if (try == EXPORT_TRIES)
            return sg_cli_failf("export", "%s (tried %d times)", err.msg, try), NULL;
        sg_cli_sayf("export", "%s; asking again", err.msg);
        usleep(200000U * (unsigned)try);
    }
}

static json_t *export_get_json(void *ctx, const char *path, sg_err *err)
{
    sg_autofree char *tok = export_token(ctx, err);
    return tok ? sg_cli_http_get_json(&((export_opts *)ctx)->target, path, tok, NULL, err) : NULL;
}

/* The answer's head read (bounded): its status, the body's length
 * (-1: not said), and the body's first bytes past it in buf. */
static int export_head(sg_cli_conn *conn, char *buf, size_t size, int *status, long long *clen, size_t *have, size_t *body_at,
                       sg_err *err)
{
    *have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t n = *have + 1 < size ? sg_cli_conn_read(conn, buf + *have, size - 1 - *have) : -1;
        if (n <= 0)
            return sg_err_set(err, EPROTO, "no whole HTTP answer from the ingest");
        *have += (size_t)n;
        buf[*have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    *body_at = (size_t)(end + 4 - buf);
    *clen = -1;
    if (sscanf(buf, "HTTP/1.%*[01] %d", status) != 1)
        return sg_err_set(err, EPROTO, "malformed HTTP answer from the ingest");
    for (char *l = strstr(buf, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
        if (!strncasecmp(l + 2, "content-length:", 15))
            *clen = strtoll(l + 17, NULL, 10);
    return 0;
}

/* GET path, its body copied to out as it arrives: the bytes, or -1. */
static long long export_copy(export_opts *o, sg_cli_conn *conn, const char *path, const char *tok, int out,
                             sg_err *err)
{
    sg_autofree char *req = sg_strdup_printf("GET %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                                             "Connection: close\r\n\r\n", path, o->target.host, o->target.port, tok);
    static char buf[65536];
    size_t have = 0, at = 0;
    int status = 0;
    long long clen = -1, got = 0;
    if (sg_cli_conn_write_all(conn, req, strlen(req)) < 0)
        return sg_err_sys(err, "send to the ingest");
    if (export_head(conn, buf, sizeof buf, &status, &clen, &have, &at, err) < 0)
        return -1;
    if (status != 200) { /* an error's answer is small: in the head's read */
        char msg[200];
        sg_autojson json_t *j = json_loads(buf + at, 0, NULL);
        const char *m = json_string_value(json_object_get(j, "error"));
        return sg_err_set(err, status == 404 ? ENOENT : EPROTO, "ingest answered HTTP %d for %.40s: %s", status, path,
                          sg_vis(m ? m : "?", strlen(m ? m : "?"), msg, sizeof msg));
    }
    if (have > at && sg_write_all(out, buf + at, have - at) < 0)
        return sg_err_sys(err, "write");
    got = (long long)(have - at);
    for (;;) {
        ssize_t n = sg_cli_conn_read(conn, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sg_err_sys(err, "read from the ingest");
        if (n == 0)
            break;
        if (sg_write_all(out, buf, (size_t)n) < 0)
            return sg_err_sys(err, "write");
        got += n;
    }
    if (clen >= 0 && got != clen)
        return sg_err_set(err, EPROTO, "truncated answer from the ingest (%lld of %lld bytes)", got, clen);
    return got;
}

static long long export_get_to(void *ctx, const char *path, int out, sg_err *err)
{
    export_opts *o = ctx;
    sg_autofree char *tok = export_token(o, err);
    sg_cli_conn conn;
    if (!tok || sg_cli_conn_open(&o->target, SG_CLI_HTTP_TIMEOUT_S, &conn, err) < 0)
        return -1;
    long long got = export_copy(o, &conn, path, tok, out, err);
    sg_cli_conn_close(&conn);
    return got;
}

/* learner -> "p-" and the first 16 bytes of HMAC-SHA256(key, learner) in hex. */
static void export_pseudonym(const export_opts *o, const char *learner, char out[40])
{
    unsigned char mac[32];
    unsigned int ml = sizeof mac;
    HMAC(EVP_sha256(), o->key, (int)sizeof o->key, (const unsigned char *)learner, strlen(learner), mac, &ml);
    strcpy(out, "p-");
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 + 2 * i, 3, "%02x", mac[i]);
}

static int stream_cmp(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    static const char *const keys[] = {"learner", "task", "sandbox"};
    for (int k = 0; k < 3; k++) {
        const char *s = json_string_value(json_object_get(x, keys[k]));
        const char *t = json_string_value(json_object_get(y, keys[k]));
        int c = strcmp(s ? s : "", t ? t : "");
        if (c)
            return c;
    }
    return 0;
}

/* The streams to export: the token's (the ingest filters by its scope),
 * under --learner, --task, --sandbox, sorted. NULL with the message. */
static json_t *export_streams(export_opts *o)
{
    const char *body;
    size_t len;
    sg_autofree char *ans = export_get(o, "/v1/sandboxes", &body, &len);
    if (!ans)
        return NULL;
    sg_err err;
    sg_autojson json_t *j = sg_cli_http_answer_json(body, len, 200, NULL, &err);
    json_t *all = json_object_get(j, "sandboxes");
    if (!json_is_array(all))
        return sg_cli_failf("export", "the ingest's /v1/sandboxes answer has no list"), NULL;
    size_t i;
    json_t *row;
    if (o->sandbox) { /* the id or a unique prefix of it (the one rule) */
        static char full[SG_NAME_MAX + 1];
        size_t n = json_array_size(all);
        sg_autofree const char **ids = sg_xcalloc(n + 1, sizeof *ids);
        json_array_foreach(all, i, row)
            ids[i] = json_string_value(json_object_get(row, "sandbox"));
        if (sg_id_resolve(o->sandbox, ids, n, " in the ingest's store", full, sizeof full, &err) < 0)
            return sg_cli_failf("export", "%s", err.msg), NULL;
        o->sandbox = full;
    }
    json_t *keep = json_array();
    json_array_foreach(all, i, row) {
        const char *want[] = {o->learner, o->task, o->sandbox}, *keys[] = {"learner", "task", "sandbox"};
        bool ok = true;
        for (int k = 0; k < 3 && ok; k++) {
            const char *v = json_string_value(json_object_get(row, keys[k]));
            ok = v && (!want[k] || !strcmp(want[k], v));
        }
        if (ok)
            json_array_append(keep, row);
    }
    size_t n = json_array_size(keep);
    sg_autofree json_t **v = sg_xcalloc(n ? n : 1, sizeof *v);
    for (i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(keep, i));
    qsort(v, n, sizeof *v, stream_cmp);
    json_array_clear(keep);
    for (i = 0; i < n; i++)
        json_array_append_new(keep, v[i]);
    return keep;
}

static bool export_in_time(const export_opts *o, const char *ts)
{
    if (!o->since && !o->until)
        return true;
    double t = sg_tl_ts_epoch(ts);
    return !((o->since && t < o->since) || (o->until && t > o->until));
}

/* One row (parsed; changed here) as the export's: without the store's id
 * (another store gives other ids), its learner pseudonymized. */
static int export_row_json(export_opts *o, sg_export *x, json_t *ev, sg_err *err)
{
    json_object_del(ev, "id");
    if (o->pseudonymize) {
        char p[40];
        const char *l = json_string_value(json_object_get(ev, "learner"));
        export_pseudonym(o, l ? l : "", p);
        json_object_set_new(ev, "learner", json_string(p));
    }
    x->rows++;
    return x->fmt->row(x, ev, err);
}

/* A scanned row ({"id":N,... as the ingest wrote it, cli/evrows.h) to a
 * format that takes it (fmt->row_text), never parsed. */
static int export_row_text(export_opts *o, sg_export *x, const sg_evrow *r, sg_err *err)
{
    x->rows++;
    return x->fmt->row_text(x, &o->page, r, err);
}

/* jsonl: the row's text without its id. */
static int jsonl_row_text(sg_export *x, const sg_evpage *pg, const sg_evrow *r, sg_err *err)
{
    const char *text = pg->out.data + r->off;
    size_t len = r->len;
    const char *comma = len > 8 && !memcmp(text, "{\"id\":", 6) ? memchr(text, ',', len) : NULL;
    if (!comma)
        return sg_err_set(err, EPROTO, "a row of the ingest's answer does not begin with its id");
    size_t rest = len - (size_t)(comma + 1 - text);
    if (fputc_unlocked('{', x->out) == EOF || fwrite_unlocked(comma + 1, 1, rest, x->out) != rest ||
        fputc_unlocked('\n', x->out) == EOF)
        return sg_err_sys(err, "write");
    return 0;
}

/* A page parsed whole (the formats that read each row's fields, or a page
 * the text scan does not take). *after: the last seq. */
static int export_page_parsed(export_opts *o, sg_export *x, const char *body, size_t len, long long *after,
                              bool *more, sg_err *err)
{
    sg_autojson json_t *j = sg_cli_http_answer_json(body, len, 200, NULL, err);
    json_t *evs = json_object_get(j, "events");
    if (!json_is_array(evs))
        return j ? sg_err_set(err, EPROTO, "the ingest's /v1/events answer has no list") : -1;
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e) {
        *after = json_integer_value(json_object_get(e, "seq"));
        if (!export_in_time(o, json_string_value(json_object_get(e, "ts"))))
            continue;
        if (export_row_json(o, x, e, err) < 0)
            return -1;
    }
    json_t *m = json_object_get(j, "more");
    *more = m ? json_is_true(m) && i > 0 : i >= EXPORT_PAGE;
    return 0;
}

/* One page's rows as the text scan gives them (the formats with row_text). */
static int export_page_scanned(export_opts *o, sg_export *x, long long *after, bool *more, sg_err *err)
{
    const sg_evpage *pg = &o->page;
    for (size_t i = 0; i < pg->n; i++) {
        const sg_evrow *r = &pg->rows[i];
        *after = r->seq;
        if (r->has_ts && (o->since || o->until)) {
            char ts[64];
            snprintf(ts, sizeof ts, "%.*s", (int)(r->ts_len < 63 ? r->ts_len : 63), pg->out.data + r->ts_off);
            if (!export_in_time(o, ts))
                continue;
        }
        if (export_row_text(o, x, r, err) < 0)
            return -1;
    }
    *more = pg->more_given ? pg->more && pg->n > 0 : pg->n >= EXPORT_PAGE;
    return 0;
}

/* ---------------------------------------------------------------- pages
 *
 * The pages are fetched ahead (cli/prefetch.h), each stream a job: one
 * fetcher per stream, one request at a time, left the pipe empty at each
 * stream's start and during each transfer (0.30x of sqlite3's dump for
 * 100 streams of 2,000 events). A fetcher alone decides where a stream
 * ends (from the page's tail: "next_after_seq":N} is there only when there
 * is more). */

typedef struct pages_ctx {
    export_opts *o;
    char **bases; /* each stream's /v1/events?... */
} pages_ctx;

/* Where the next page starts, from the page's tail; -1: this one is the last. */
static long long page_next(const char *body, size_t len)
{
    static const char key[] = "\"next_after_seq\":";
    const char *end = body + len;
    while (end > body && end[-1] != '}')
        end--;
    const char *d = end > body ? end - 1 : body;
    while (d > body && d[-1] >= '0' && d[-1] <= '9')
        d--;
    size_t kl = sizeof key - 1;
    if (d == end - 1 || (size_t)(d - body) < kl || memcmp(d - kl, key, kl) != 0)
        return -1;
    return strtoll(d, NULL, 10);
}

/* The page of stream s after *after (a fetcher's job). */
static sg_fetched page_fetch(void *ud, size_t s, long long *after)
{
    pages_ctx *c = ud;
    char path[1200];
    snprintf(path, sizeof path, "%s&limit=%d&after_seq=%lld", c->bases[s], EXPORT_PAGE, *after);
    sg_fetched f = {0};
    f.ans = export_get(c->o, path, &f.body, &f.len);
    *after = f.ans ? page_next(f.body, f.len) : -1;
    f.last = *after < 0;
    return f;
}

/* One page written; EXPORT_GO or the exit code. */
static int export_page(export_opts *o, sg_export *x, const char *body, size_t len)
{
    long long after = -1;
    bool more = false;
    sg_err err;
    o->page.members = x->fmt->members;
    bool text = x->fmt->row_text && !o->pseudonymize && sg_evpage_scan(&o->page, body, len) == 0;
    int r = text ? export_page_scanned(o, x, &after, &more, &err)
                 : export_page_parsed(o, x, body, len, &after, &more, &err);
    return r < 0 ? sg_cli_failf("export", "%s", err.msg) : EXPORT_GO;
}

/* One stream's /v1/events?learner=&task=&sandbox= (the caller frees). */
static char *stream_base(json_t *st)
{
    char base[1024] = "/v1/events";
    sg_export_url_arg(base, sizeof base, "learner", json_string_value(json_object_get(st, "learner")));
    sg_export_url_arg(base, sizeof base, "task", json_string_value(json_object_get(st, "task")));
    sg_export_url_arg(base, sizeof base, "sandbox", json_string_value(json_object_get(st, "sandbox")));
    return sg_xstrdup(base);
}

/* The file's bytes written since the last call, once they are
 * EXPORT_WRITEBACK, sent to the disk without waiting (sync_file_range's
 * WRITE): the fsync at the end then waits for the last few only, not for
 * the whole file (68 ms of a 0.5 s export of 200,000 events, all at its
 * end). Not a durability step (the fsync is): a failure is ignored, as
 * on stdout's pipe. */
static void export_writeback(sg_export *x, off_t *started)
{
    if (!x->out || x->out == stdout)
        return;
    int fd = fileno(x->out);
    off_t at = lseek(fd, 0, SEEK_CUR); /* what stdio has handed the kernel */
    if (at < 0 || at - *started < EXPORT_WRITEBACK)
        return;
    sync_file_range(fd, *started, at - *started, SYNC_FILE_RANGE_WRITE);
    *started = at;
}

/* The events of every stream, page by page, each stream's end told to
 * the format; EXPORT_GO or the exit code. */
static int export_pages(export_opts *o, sg_export *x, json_t *streams)
{
    size_t n = json_array_size(streams);
    if (n == 0)
        return EXPORT_GO;
    char **bases = sg_xcalloc(n, sizeof *bases);
    for (size_t i = 0; i < n; i++)
        bases[i] = stream_base(json_array_get(streams, i));
    pages_ctx ctx = {.o = o, .bases = bases};
    sg_prefetch pf;
    int rc = EXPORT_GO;
    off_t written = 0;
    if (sg_prefetch_start(&pf, n, page_fetch, &ctx) < 0)
        rc = sg_cli_failf("export", "start the page fetcher: %s", strerror(errno));
    for (size_t s = 0; s < n && rc == EXPORT_GO;) {
        sg_fetched f = sg_prefetch_take(&pf, s);
        rc = f.ans ? export_page(o, x, f.body, f.len) : 1;
        free(f.ans);
        export_writeback(x, &written);
        if (rc != EXPORT_GO || !f.last)
            continue;
        s++;
        sg_err err;
        if (x->fmt->stream_end && x->fmt->stream_end(x, &err) < 0)
            rc = sg_cli_failf("export", "%s", err.msg);
    }
    sg_prefetch_end(&pf);
    for (size_t i = 0; i < n; i++)
        free(bases[i]);
    free(bases);
    return rc;
}

/* ---------------------------------------------------------------- jsonl */

static int jsonl_row(sg_export *x, json_t *ev, sg_err *err)
{
    sg_autofree char *t = json_dumps(ev, JSON_COMPACT);
    if (!t)
        return sg_err_set(err, ENOMEM, "out of memory");
    if (fputs(t, x->out) == EOF || fputc('\n', x->out) == EOF)
        return sg_err_sys(err, "write");
    return 0;
}

static const sg_export_fmt export_jsonl = {.name = "jsonl", .row = jsonl_row, .row_text = jsonl_row_text};

/* ---------------------------------------------------------------- output */

/* Where the export is written until it is complete: OUT.tmp-PID. */
static char *export_tmp_name(const char *out)
{
    return sg_strdup_printf("%s.tmp-%ld", out, (long)getpid());
}

static int export_open(export_opts *o, sg_export *x, char **tmp)
{
    struct stat stt;
    if (strcmp(o->out, "-") && lstat(o->out, &stt) == 0)
        return sg_cli_failf("export", "%s exists: give a new name (an export never replaces one)", o->out);
    if (!strcmp(o->out, "-")) {
        x->out = stdout;
        return EXPORT_GO;
    }
    *tmp = export_tmp_name(o->out);
    if (x->fmt->is_dir) {
        if (mkdir(*tmp, 0755) < 0)
            return sg_cli_failf("export", "mkdir %s: %s", *tmp, strerror(errno));
        x->dir = *tmp;
        return EXPORT_GO;
    }
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || !(x->out = fdopen(fd, "w"))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sg_cli_failf("export", "create %s: %s", *tmp, strerror(e));
    }
    setvbuf(x->out, NULL, _IOFBF, 1 << 20);
    return EXPORT_GO;
}

/* The end: flushed, synced, renamed into place (or, failed, removed). */
static int export_close(export_opts *o, sg_export *x, const char *tmp, bool ok)
{
    sg_err err;
    if (x->out == stdout)
        return ok && fflush(stdout) == 0 ? 0 : 1;
    if (x->out) {
        ok = ok && fflush(x->out) == 0 && fsync(fileno(x->out)) == 0;
        ok = fclose(x->out) == 0 && ok;
        x->out = NULL;
    }
    if (!tmp)
        return ok ? 0 : 1;
    if (!ok) {
        if (x->fmt->is_dir)
            sg_rm_rf(tmp, &err);
        else
            unlink(tmp);
        return 1;
    }
    if (x->fmt->is_dir) {
        sg_autoclose int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
            fsync(dfd);
    }
    if (rename(tmp, o->out) < 0)
        return sg_cli_failf("export", "rename %s to %s: %s", tmp, o->out, strerror(errno));
    return 0;
}

static int export_run(export_opts *o, sg_export *x)
{
    sg_autojson json_t *streams = export_streams(o);
    if (!streams)
        return 1;
    sg_err err;
    if (x->fmt->begin && x->fmt->begin(x, &err) < 0)
        return sg_cli_failf("export", "%s", err.msg);
    size_t i;
    json_t *st;
    if (x->fmt->stream) { /* a format that reads each stream itself */
        json_array_foreach(streams, i, st)
            if (x->fmt->stream(x, st, &err) < 0)
                return sg_cli_failf("export", "%s", err.msg);
    } else {
        int rc = export_pages(o, x, streams);
        if (rc != EXPORT_GO)
            return rc;
    }
    if (x->fmt->end && x->fmt->end(x, &err) < 0)
        return sg_cli_failf("export", "%s", err.msg);
    if (x->out && ferror(x->out))
        return sg_cli_failf("export", "write: %s", strerror(errno));
    return 0;
}

int sg_cmd_export(int argc, char **argv)
{
    export_opts o;
    int rc = export_parse(argc, argv, &o);
    if (rc != EXPORT_GO)
        return rc;
    if ((rc = export_secrets(&o)) != EXPORT_GO)
        return rc;
    sg_err err;
    if (sg_cli_target_parse(o.ingest, o.ingest_ca, &o.target, &err) < 0)
        return sg_cli_usage("export", "%s", err.msg);
    sg_export x = {.fmt = export_find_fmt(o.format), .version = SG_VERSION, .get_json = export_get_json,
                   .get_to = export_get_to, .ctx = &o};
    sg_autofree char *tmp = NULL;
    if ((rc = export_open(&o, &x, &tmp)) != EXPORT_GO)
        return rc;
    rc = export_run(&o, &x);
    sg_evpage_free(&o.page);
    if (x.state && x.fmt->end) /* a failed run: the format's memory */
        x.fmt->end(&x, &err);
    int crc = export_close(&o, &x, tmp, rc == 0);
    return rc ? rc : crc;
}

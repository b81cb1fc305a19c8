/* sandglass events [--learner L] [--task T] [--sandbox ID] [--after-seq N]
 *                  [--kind K,..] [--since T] [--until T] [--all] [--full]
 *                  [--diff] [--utc] [--follow] [--json]
 *                  [--ingest http://127.0.0.1:7433] [--token T | --secret FILE]
 * Reads the ingest's GET /v1/events and prints JSON lines or a timeline
 * (for a person: see "timeline" below);
 * --follow then stays on GET /v1/stream (pushed events, resumed across an
 * ingest restart; see "--follow" below).
 *
 * Reads need a read token (token.h): --token, or else one this command
 * makes for itself from the ingest's secret (an operator token valid for a
 * few minutes, made anew for each request), so on the ingest's host it
 * works as it is. Pages are bounded by the ingest (rows and bytes); their
 * "more" says to ask again after the last row.
 *
 * The timeline (cli/timeline.h) prints learner-controlled text (commands, output, file
 * names): every control character, C1 control, invalid UTF-8 byte and
 * bidirectional override in it is shown escaped (\x1b, \u202e), never sent
 * to the terminal raw. --json output is JSON (escaped by its rules). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/evrows.h"
#include "cli/ingest_http.h"
#include "cli/report.h"
#include "cli/timeline.h"
#include "state/state.h"
#include "wire/ctl.h"
#include "wire/sse.h"
#include "wire/token.h"

#define PAGE 1000
#define FOLLOW_IDLE_S 45            /* a stream silent this long is dead (pings: 15 s) */
#define FOLLOW_BACKOFF_MIN_MS 100L
#define FOLLOW_BACKOFF_MAX_MS 5000L
#define FOLLOW_EVENT_MAX (64 * 1024 * 1024) /* one SSE line or frame, at most (wire/sse.h) */
#define SELF_TOKEN_TTL_S 300 /* a token this command makes for one request */
/* The kinds the timeline hides whatever they hold (without --all,
 * timeline.h; a checkpoint before an exec is hidden too, by its label):
 * not asked of the ingest (/v1/events?except_kind=). */
#define TL_HIDDEN_KINDS "activity,process,stdin"

static const char usage[] = "usage: sandglass events [--learner L] [--task T] [--sandbox ID] [--after-seq N]\n"
                            "                        [--kind K[,K]] [--since T] [--until T] [--all] [--full]\n"
                            "                        [--diff] [--utc] [--follow] [--json]\n"
                            "                        [--ingest http://HOST:PORT] [--ingest-ca FILE]\n"
                            "                        [--token T | --secret FILE]\n"
                            "  --sandbox ID  the id or a unique prefix of it (4 characters at least)\n"
                            "  --kind    only these kinds (command,test_result,checkpoint,...), none hidden\n"
                            "  --since, --until  a duration back from now (90s, 15m, 2h, 3d, 1w), a date\n"
                            "            (2026-12-03) or a time (2026-12-03T13:05[:SS][Z|+01:00])\n"
                            "  --all     also activity, process, stdin, command and per-exec checkpoints\n"
                            "  --full    all of each output that was stored (else 20 lines, 4 KiB)\n"
                            "  --diff    the diffs of changed files, under their command\n"
                            "  --utc     times in UTC (else local time, with its zone)\n"
                            "  --follow  then print each event as it is committed (the ingest's pushed\n"
                            "            stream), reconnecting and resuming when the ingest restarts\n"
                            "  --ingest  default: the one the sandbox's record names (--sandbox of this\n"
                            "            host), else $SANDGLASS_INGEST, else http://127.0.0.1:7433;\n"
                            "            https:// (or wss://) for an ingest with TLS\n"
                            "  --ingest-ca  the CA file (PEM) an https ingest's certificate is verified by\n"
                            "            (default the sandbox's record's, $SANDGLASS_INGEST_CA, else the\n"
                            "            system's trust store)\n"
                            "  --token   a read token (sandglass token --read ...)\n"
                            "  --secret  without --token: make an operator read token from this secret\n"
                            "            (default <state>/ingest/secret, the local ingest's)\n";

/* Percent-encodes everything outside the unreserved set. */
static void append_arg(char *q, size_t qlen, const char *name, const char *val)
{
    size_t o = strlen(q);
    o += (size_t)snprintf(q + o, qlen - o, "%s%s=", strchr(q, '?') ? "&" : "?", name);
    for (const unsigned char *p = (const unsigned char *)val; *p && o + 4 < qlen; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~')
            q[o++] = (char)*p;
        else
            o += (size_t)snprintf(q + o, qlen - o, "%%%02X", *p);
    }
    q[o] = '\0';
}

/* What the command line asked for. */
typedef struct events_opts {
    const char *learner, *task, *sandbox;
    const char *ingest, *ingest_ca; /* ingest_ca: NULL for the config's */
    const char *token_opt, *secret_path;
    const char *kinds; /* --kind: ",a,b," */
    long long after_seq;
    const char *since_arg, *until_arg;
    double since, until; /* seconds since the epoch; 0: none */
    bool follow, as_json, ingest_given;
    char sandbox_id[SG_NAME_MAX + 8];                           /* --sandbox resolved */
    char learner_id[SG_NAME_MAX + 8], task_id[SG_NAME_MAX + 8]; /* its stream's */
    char kinds_buf[512];
    sg_tl_printer tl;
    sg_evpage page; /* the page's rows as text (cli/evrows.h) */
} events_opts;

#define EVENTS_GO (-1) /* from a step: carry on (else: the exit code) */

/* --since/--until: a duration back from now ("90s", "15m", "2h", "3d",
 * "1w"), a date ("2026-12-03": its midnight), or a time ("2026-12-03T13:05",
 * seconds, fraction, "Z" or "+01:00" optional; ' ' for 'T' too). Without a
 * zone: local time, UTC with --utc. -1 when unreadable. */
static double parse_when(const char *arg, bool utc)
{
    char unit = 0, rest[2];
    double n;
    if (sscanf(arg, "%lf%c%1s", &n, &unit, rest) == 2 && n >= 0 && strchr("smhdw", unit)) {
        static const double per[] = {
            ['s' - 'a'] = 1, ['m' - 'a'] = 60, ['h' - 'a'] = 3600, ['d' - 'a'] = 86400, ['w' - 'a'] = 604800};
        return (double)time(NULL) - n * per[unit - 'a'];
    }
    struct tm tm = {0};
    char sep = 'T', zone[16] = "";
    double sec = 0;
    int used = 0;
    int k = sscanf(arg, "%4d-%2d-%2d%n%c%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &used, &sep, &tm.tm_hour,
                   &tm.tm_min, &used);
    if (!(k == 3 && !arg[used]) && !(k == 6 && (sep == 'T' || sep == ' ')))
        return -1;
    const char *p = arg + used;
    if (k == 6 && *p == ':') {
        char *end;
        sec = strtod(p + 1, &end);
        if (end == p + 1 || sec < 0 || sec >= 61)
            return -1;
        p = end;
    }
    if (strlen(p) >= sizeof zone)
        return -1;
    strcpy(zone, p);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    int zh = 0, zm = 0;
    char zs = 0;
    if (!zone[0])
        return (utc ? (double)timegm(&tm) : (double)mktime(&tm)) + sec;
    if (!strcmp(zone, "Z") || !strcmp(zone, "z"))
        return (double)timegm(&tm) + sec;
    if (sscanf(zone, "%c%2d:%2d%1s", &zs, &zh, &zm, rest) != 3 || (zs != '+' && zs != '-'))
        return -1;
    return (double)timegm(&tm) + sec - (zs == '-' ? -1 : 1) * (zh * 3600 + zm * 60);
}

/* The options events and sessions share (the same letters in both tables):
 * true when c was one of them. */
static bool events_common_opt(int c, events_opts *o)
{
    switch (c) {
    case 'l': o->learner = optarg; return true;
    case 't': o->task = optarg; return true;
    case 's': o->sandbox = optarg; return true;
    case 'j':
        o->as_json = true;
        sg_cli_json_errors(true);
        return true;
    case 'u': o->tl.utc = true; return true;
    case 'i':
        o->ingest = optarg, o->ingest_given = true;
        return true;
    case 'C': o->ingest_ca = optarg; return true;
    case 'T': o->token_opt = optarg; return true;
    case 'k': o->secret_path = optarg; return true;
    default: return false;
    }
}

static int events_parse(int argc, char **argv, events_opts *o)
{
    static const struct option longopts[] = {
        {"learner", required_argument, NULL, 'l'}, {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'}, {"after-seq", required_argument, NULL, 'a'},
        {"follow", no_argument, NULL, 'f'},        {"json", no_argument, NULL, 'j'},
        {"ingest", required_argument, NULL, 'i'},  {"token", required_argument, NULL, 'T'},
        {"secret", required_argument, NULL, 'k'},  {"kind", required_argument, NULL, 'K'},
        {"since", required_argument, NULL, 'S'},   {"until", required_argument, NULL, 'U'},
        {"utc", no_argument, NULL, 'u'},           {"full", no_argument, NULL, 'F'},
        {"diff", no_argument, NULL, 'd'},          {"all", no_argument, NULL, 'A'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    /* $SANDGLASS_INGEST, create's default too (its ws:// URL names the same
     * host and port) */
    *o = (events_opts){.ingest = sg_config_ingest(), .after_seq = -1};
    int c;
    optind = 1;
    opterr = 0; /* our one-line message, not getopt's */
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (events_common_opt(c, o))
            continue;
        switch (c) {
        case 'f': o->follow = true; break;
        case 'K':
            if (strlen(optarg) + 3 > sizeof o->kinds_buf || !*optarg)
                return sg_cli_usage("events", "--kind: a list of kinds (command,test_result,...)");
            snprintf(o->kinds_buf, sizeof o->kinds_buf, ",%s,", optarg);
            o->kinds = o->kinds_buf;
            break;
        case 'S':
            o->since_arg = optarg;
            break;
        case 'U':
            o->until_arg = optarg;
            break;
        case 'F':
            o->tl.full = true;
            break;
        case 'd':
            o->tl.diff = true;
            break;
        case 'A':
            o->tl.all = true;
            break;
        case 'a': {
            char *end = NULL;
            errno = 0;
            o->after_seq = strtoll(optarg, &end, 10);
            if (errno || !*optarg || *end || o->after_seq < -1) {
                return sg_cli_usage("events", "--after-seq: not an integer >= -1");
            }
            break;
        }
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("events", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("events", "unexpected argument '%.64s' (events takes only options)", argv[optind]);
    if (o->since_arg && (o->since = parse_when(o->since_arg, o->tl.utc)) < 0)
        return sg_cli_usage("events", "--since: not a time (2h, 2026-12-03, 2026-12-03T13:05:00Z)");
    if (o->until_arg && (o->until = parse_when(o->until_arg, o->tl.utc)) < 0)
        return sg_cli_usage("events", "--until: not a time (2h, 2026-12-03, 2026-12-03T13:05:00Z)");
    const char *nc = getenv("NO_COLOR");
    o->tl.color = !o->as_json && isatty(STDOUT_FILENO) && !(nc && *nc);
    o->tl.show_stream = !o->sandbox;
    if (o->kinds)
        o->tl.all = true; /* the kinds asked for, each event on its line, none hidden */
    return EVENTS_GO;
}

/* Without --token: loads the secret this command makes its tokens from. */
static int events_load_secret(const events_opts *o, uint8_t secret[SG_TOKEN_SECRET_LEN])
{
    sg_err err;
    if (o->token_opt)
        return EVENTS_GO;
    const char *secret_path = o->secret_path;
    sg_autofree char *secret_default = NULL;
    if (!secret_path) {
        if (!sg_state_dir(&err)) {
            return sg_cli_failf("events", "state directory: %s", err.msg);
        }
        secret_path = secret_default = sg_config_secret();
    }
    if (sg_token_secret_load(secret_path, secret, &err) < 0) {
        return sg_cli_failf("events", "%s (reads need a read token: pass --token, made with "
                            "`sandglass token --read` where the ingest's secret is, or --secret FILE)",
                            err.msg);
    }
    return EVENTS_GO;
}

/* The request path of one page after cursor. */
static void events_page_path(const char *base, bool by_id, long long cursor, long long after_seq,
                             char *path, size_t n)
{
    snprintf(path, n, "%s%slimit=%d", base, strchr(base, '?') ? "&" : "?", PAGE);
    if (by_id) {
        snprintf(path + strlen(path), n - strlen(path), "&after_id=%lld", cursor);
        if (after_seq >= 0)
            snprintf(path + strlen(path), n - strlen(path), "&after_seq=%lld", after_seq);
    } else if (cursor >= 0) {
        snprintf(path + strlen(path), n - strlen(path), "&after_seq=%lld", cursor);
    }
}

/* Whether an event of kind k with time ts passes --kind, --since and
 * --until. */
static bool events_wanted(const events_opts *o, const char *k, const char *ts)
{
    if (o->kinds) {
        char needle[80];
        if (!k || snprintf(needle, sizeof needle, ",%s,", k) >= (int)sizeof needle || !strstr(o->kinds, needle))
            return false;
    }
    if (o->since || o->until) {
        double t = sg_tl_ts_epoch(ts);
        if ((o->since && t < o->since) || (o->until && t > o->until))
            return false;
    }
    return true;
}

static void events_print_one(events_opts *o, json_t *ev)
{
    if (!events_wanted(o, json_string_value(json_object_get(ev, "kind")), json_string_value(json_object_get(ev, "ts"))))
        return;
    if (o->as_json) {
        sg_autofree char *line = json_dumps(ev, JSON_COMPACT);
        puts(line ? line : "{}");
    } else {
        sg_tl_print(&o->tl, ev);
    }
}

/* Prints one page's events; moves cursor past them. */
static void events_print_page(events_opts *o, json_t *events, bool by_id, long long *cursor)
{
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        events_print_one(o, ev);
        *cursor = json_integer_value(json_object_get(ev, by_id ? "id" : "seq"));
    }
    fflush(stdout);
}

/* A row's field of the page's text (plain, no escape), NUL-terminated
 * into buf (cut at n - 1 bytes: longer than any kind or time is read);
 * NULL when the row has none. */
static const char *events_row_str(const sg_evpage *pg, bool has, size_t off, size_t len, char *buf, size_t n)
{
    if (!has)
        return NULL;
    len = len < n - 1 ? len : n - 1;
    memcpy(buf, pg->out.data + off, len);
    buf[len] = '\0';
    return buf;
}

/* The cursor after row r. */
static long long events_row_cursor(const sg_evrow *r, bool by_id)
{
    return by_id ? (r->has_id ? r->id : 0) : (r->has_seq ? r->seq : 0);
}

/* Whether a scanned page says more follow. */
static bool events_page_more(const sg_evpage *pg)
{
    return pg->more_given ? pg->more && pg->n > 0 : pg->n >= PAGE;
}

/* A page scanned as text: for --json each wanted row written as it is
 * (the bytes json_dumps(JSON_COMPACT) of its tree would be), for the
 * timeline each row it may show parsed alone; moves cursor past them. */
static void events_print_rows(events_opts *o, const sg_evpage *pg, bool by_id, long long *cursor)
{
    bool filter = o->kinds || o->since || o->until;
    for (size_t i = 0; i < pg->n; i++) {
        const sg_evrow *r = &pg->rows[i];
        char kb[96], tb[64];
        const char *kind = events_row_str(pg, r->has_kind, r->kind_off, r->kind_len, kb, sizeof kb);
        *cursor = events_row_cursor(r, by_id);
        if (filter && !events_wanted(o, kind, events_row_str(pg, r->has_ts, r->ts_off, r->ts_len, tb, sizeof tb)))
            continue;
        if (o->as_json) {
            fwrite(pg->out.data + r->off, 1, r->len + 1, stdout);
            continue;
        }
        /* the timeline: a row it hides whatever it holds (TL_HIDDEN_KINDS)
         * is not parsed */
        if (!o->tl.all && kind && (!strcmp(kind, "activity") || !strcmp(kind, "process") || !strcmp(kind, "stdin")))
            continue;
        /* nor a checkpoint it hides by its payload's label and error (the
         * one before each exec: an eighth of a session's rows) */
        if (!o->tl.all && kind && !strcmp(kind, "checkpoint") && r->payload_obj && !r->has_error && r->has_label &&
            sg_tl_plumbing_label(pg->out.data + r->label_off, r->label_len))
            continue;
        /* the tree json_loadb would give (the scan took the row whole,
         * with no duplicate key: fuzz_evrows), built without its lexer */
        sg_autojson json_t *ev = sg_evrow_tree(pg, r);
        if (ev)
            sg_tl_print(&o->tl, ev);
    }
    fflush(stdout);
}

/* One page's answer printed, parsed whole (one the scan does not take,
 * or an error): *more as the page says; EVENTS_GO, or the exit code of an
 * error. */
static int events_answer(events_opts *o, const char *body, size_t len, int status, bool by_id, long long *cursor,
                         bool *more)
{
    sg_err err;
    sg_autojson json_t *ans = sg_cli_http_answer_json(body, len, status, NULL, &err);
    if (!ans)
        return sg_cli_failf("events", "%s", err.msg);
    json_t *events = json_object_get(ans, "events");
    events_print_page(o, events, by_id, cursor);
    json_t *m = json_object_get(ans, "more");
    size_t rows = json_array_size(events);
    *more = m ? json_is_true(m) && rows > 0 : rows >= PAGE;
    return EVENTS_GO;
}

/* ---------------------------------------------------------------- --follow
 *
 * After the pages, GET /v1/stream (Server-Sent Events) from the last row
 * id printed: each committed event is pushed as it commits. When the
 * connection ends (the ingest restarts, or closes a reader that fell
 * behind) it reconnects with after=<the last id printed>, with backoff,
 * for as long as it runs: nothing is skipped or printed twice. */

typedef struct follow_conn {
    sg_cli_conn c;
    sg_buf in; /* read, not yet handled */
} follow_conn;

/* More bytes into c->in (bounded): > 0, 0 at the end, -1 error. */
static int follow_fill(follow_conn *c)
{
    char chunk[65536];
    if (c->in.len >= FOLLOW_EVENT_MAX)
        return -1;
    ssize_t n = sg_cli_conn_read(&c->c, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
        return 1;
    if (n <= 0)
        return n == 0 ? 0 : -1;
    return sg_buf_append(&c->in, chunk, (size_t)n) < 0 ? -1 : 1;
}

/* The answer's head: its status, and the bytes after it left in c->buf. A
 * refusal (4xx) is printed and its exit code returned; else EVENTS_GO. */
static int follow_head(follow_conn *c, int *status)
{
    char *end;
    while (!(c->in.data && (end = strstr(c->in.data, "\r\n\r\n")))) {
        if (follow_fill(c) <= 0 || c->in.len > 65536)
            return *status = 0, EVENTS_GO;
    }
    if (sscanf(c->in.data, "HTTP/1.%*[01] %d", status) != 1)
        *status = 0;
    sg_buf_consume(&c->in, (size_t)(end + 4 - c->in.data));
    if (*status < 400 || *status >= 500 || *status == 429)
        return EVENTS_GO; /* 429/5xx: busy or failing, try again later */
    while (follow_fill(c) > 0 && c->in.len < 65536)
        ;
    sg_err err;
    sg_autojson json_t *j = c->in.len ? sg_json_parse(c->in.data, c->in.len, &err) : NULL;
    const char *msg = json_string_value(json_object_get(j, "error"));
    char vbuf[256];
    return sg_cli_failf("events", "ingest answered HTTP %d: %s", *status,
                        sg_vis(msg ? msg : "?", strlen(msg ? msg : "?"), vbuf, sizeof vbuf));
}

/* One SSE frame: an event (type "message", with data) is printed. */
static void follow_message(events_opts *o, const sg_sse_frame *f, long long *cursor)
{
    if (!f->data || (f->event && strcmp(f->event, "message") != 0))
        return; /* live, overflow, comments: the reconnect resumes from cursor */
    sg_err err;
    sg_autojson json_t *ev = sg_json_parse(f->data, f->data_len, &err);
    json_t *id = json_object_get(ev, "id");
    if (!json_is_integer(id) || json_integer_value(id) <= *cursor)
        return;
    *cursor = json_integer_value(id);
    json_t *seq = json_object_get(ev, "seq");
    if (o->after_seq < 0 || json_integer_value(seq) > o->after_seq)
        events_print_one(o, ev);
}

/* The stream's bytes (n at p) through the decoder, each event printed. -1
 * past the decoder's bounds (the connection is dropped and resumed). */
static int follow_feed(events_opts *o, sg_sse_decoder *d, const char *p, size_t n, long long *cursor)
{
    while (n > 0) {
        sg_sse_frame f;
        size_t used = 0;
        sg_err err;
        int r = sg_sse_decode(d, p, n, &used, &f, &err);
        if (r < 0)
            return -1;
        p += used;
        n -= used;
        if (r > 0)
            follow_message(o, &f, cursor);
    }
    return 0;
}

/* One connection: EVENTS_GO when it ended (reconnect), else an exit code.
 * *served: the ingest answered 200 (the backoff starts over). */
static int follow_once(events_opts *o, const sg_cli_target *t, const char *token, const char *query, long long *cursor,
                       bool *served)
{
    sg_err err;
    follow_conn c = {0};
    if (sg_cli_conn_open(t, FOLLOW_IDLE_S, &c.c, &err) < 0)
        return EVENTS_GO;
    sg_autofree char *req = sg_strdup_printf(
        "GET /v1/stream?%s%safter=%lld HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/event-stream\r\n"
        "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
        query, query[0] ? "&" : "", *cursor, t->host, t->port, token);
    int status = 0, rc = EVENTS_GO;
    if (req && sg_cli_conn_write_all(&c.c, req, strlen(req)) == 0)
        rc = follow_head(&c, &status);
    *served = status == 200;
    sg_sse_decoder dec;
    sg_sse_decoder_init(&dec, FOLLOW_EVENT_MAX, FOLLOW_EVENT_MAX);
    while (rc == EVENTS_GO && status == 200) {
        if (follow_feed(o, &dec, c.in.data, c.in.len, cursor) < 0)
            break;
        sg_buf_reset(&c.in);
        fflush(stdout);
        if (follow_fill(&c) <= 0)
            break; /* closed, or silent past FOLLOW_IDLE_S (pings come every 15 s) */
    }
    sg_sse_decoder_free(&dec);
    sg_cli_conn_close(&c.c);
    sg_buf_free(&c.in);
    return rc;
}

static int events_follow(events_opts *o, const sg_cli_target *t, const uint8_t *secret, const char *query,
                         long long cursor)
{
    long backoff_ms = FOLLOW_BACKOFF_MIN_MS;
    bool lost = false;
    for (;;) {
        sg_err err;
        sg_autofree char *own = o->token_opt ? NULL
                                             : sg_token_make_read(secret, NULL, NULL, NULL,
                                                                  SELF_TOKEN_TTL_S, &err);
        if (!o->token_opt && !own)
            return sg_cli_failf("events", "%s", err.msg);
        bool served = false;
        int rc = follow_once(o, t, o->token_opt ? o->token_opt : own, query, &cursor, &served);
        if (rc != EVENTS_GO)
            return rc;
        if (served)
            backoff_ms = FOLLOW_BACKOFF_MIN_MS;
        if (!lost || served)
            sg_cli_sayf("events", "the stream from the ingest ended; resuming after event id %lld", cursor);
        lost = true;
        struct timespec ts = {backoff_ms / 1000, (backoff_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff_ms = backoff_ms * 2 > FOLLOW_BACKOFF_MAX_MS ? FOLLOW_BACKOFF_MAX_MS : backoff_ms * 2;
    }
}

/* --sandbox naming a sandbox of this host: its full id, and (without
 * --ingest) the ingest its record names. A prefix ambiguous here is an
 * error (the one rule: sg_state_resolve_id): EVENTS_GO or the
 * exit status. */
static int events_local_sandbox(events_opts *o, sg_sandbox_meta *m)
{
    sg_err err = {0};
    char id[SG_ID_LEN + 1];
    if (!o->sandbox || !sg_state_dir(&err))
        return EVENTS_GO;
    /* too short here: the store may hold an outside agent's short name */
    if (sg_state_resolve_id(o->sandbox, id, &err) < 0)
        return err.code == EINVAL && strlen(o->sandbox) >= SG_ID_MIN_PREFIX ? sg_cli_failf("events", "%s", err.msg)
                                                                             : EVENTS_GO;
    if (sg_sandbox_meta_load(id, m, &err) < 0)
        return EVENTS_GO;
    snprintf(o->sandbox_id, sizeof o->sandbox_id, "%s", id);
    o->sandbox = o->sandbox_id;
    if (!o->ingest_given && m->ingest_url) {
        o->ingest = m->ingest_url;
        if (!o->ingest_ca && m->ingest_ca) /* the CA the sandbox's uplink verifies by */
            o->ingest_ca = m->ingest_ca;
    }
    return EVENTS_GO;
}

/* Whether a row of rows has want as its key. */
static bool events_has(json_t *rows, const char *key, const char *want)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        const char *v = json_string_value(json_object_get(row, key));
        if (v && !strcmp(v, want))
            return true;
    }
    return false;
}

/* A sandbox that is one stream: its learner and task into the query too,
 * so that the store reads it by its (learner, task, sandbox, seq) key in
 * order instead of scanning every row for the sandbox. */
static void events_whole_stream(events_opts *o, json_t *rows)
{
    size_t i, n = 0;
    json_t *row, *one = NULL;
    json_array_foreach(rows, i, row)
    {
        const char *v = json_string_value(json_object_get(row, "sandbox"));
        if (o->sandbox && v && !strcmp(v, o->sandbox))
            one = row, n++;
    }
    if (n != 1)
        return;
    snprintf(o->learner_id, sizeof o->learner_id, "%s", json_string_value(json_object_get(one, "learner")));
    snprintf(o->task_id, sizeof o->task_id, "%s", json_string_value(json_object_get(one, "task")));
    o->learner = o->learner_id;
    o->task = o->task_id;
}

/* Whether the store holds an event under the filters as given (one row
 * asked for, by the store's key when the learner is given). */
static bool events_exist(const events_opts *o, const sg_cli_target *t, const char *token)
{
    char path[1024] = "/v1/events";
    if (o->learner)
        append_arg(path, sizeof path, "learner", o->learner);
    if (o->task)
        append_arg(path, sizeof path, "task", o->task);
    if (o->sandbox)
        append_arg(path, sizeof path, "sandbox", o->sandbox);
    snprintf(path + strlen(path), sizeof path - strlen(path), "&limit=1");
    sg_err err;
    sg_autojson json_t *ans = sg_cli_http_get_json(t, path, token, NULL, &err);
    return json_array_size(json_object_get(ans, "events")) > 0;
}

/* --learner, --task, --sandbox against the streams the ingest holds (its
 * /v1/sandboxes, within the token's scope): an unknown one is an error
 * (with --follow it is taken as it is, a stream to come), and a sandbox
 * is named by the one prefix rule (base/idprefix.h), resolved by the
 * ingest's ?prefix= (sg_cli_store_sandbox). A sandbox is always looked up
 * there, also when given whole: a sandbox that is one stream is then read
 * by its stream's key (events_whole_stream); by the sandbox alone the
 * store sorts all the sandbox's rows again for each page (and for the
 * check that it has any). */
static int events_resolve(events_opts *o, const sg_cli_target *t, const char *token)
{
    if (!o->learner && !o->task && !o->sandbox)
        return EVENTS_GO;
    sg_err err;
    if (!o->sandbox && events_exist(o, t, token))
        return EVENTS_GO; /* as given: no list of every stream to read */
    sg_autojson json_t *rows = NULL;
    if (o->sandbox) {
        char id[SG_NAME_MAX + 1];
        rows = sg_cli_store_sandbox(t, token, o->sandbox, id, sizeof id, &err);
        bool named = rows || err.code == ENOENT || err.code == EINVAL; /* the store answered */
        if (!rows && err.code == ENOENT && o->follow)
            return EVENTS_GO; /* followed: its first events may be still to come */
        if (!named && events_exist(o, t, token))
            return EVENTS_GO; /* read by the sandbox alone */
        if (!rows)
            return sg_cli_failf("events", "%s", err.msg);
        snprintf(o->sandbox_id, sizeof o->sandbox_id, "%s", id);
        o->sandbox = o->sandbox_id;
    } else {
        sg_autojson json_t *ans = sg_cli_http_get_json(t, "/v1/sandboxes", token, NULL, &err);
        if (!ans)
            return sg_cli_failf("events", "%s", err.msg);
        rows = json_incref(json_object_get(ans, "sandboxes"));
    }
    const char *what[] = {"learner", "task"};
    const char *val[] = {o->learner, o->task};
    for (size_t k = 0; k < 2; k++) {
        char vb[160], sb[160];
        if (!val[k] || events_has(rows, what[k], val[k]) || o->follow)
            continue;
        sg_tl_vis_str(val[k], vb, sizeof vb);
        if (o->sandbox)
            return sg_cli_failf("events", "no %s '%s' of sandbox %s in the ingest's store (at %s:%s)", what[k], vb,
                                sg_tl_vis_str(o->sandbox, sb, sizeof sb), t->host, t->port);
        return sg_cli_failf("events", "no %s '%s' in the ingest's store (at %s:%s)", what[k], vb, t->host, t->port);
    }
    events_whole_stream(o, rows);
    return EVENTS_GO;
}

/* A read token for one request: --token, or one made from the secret
 * (made again when half its life is gone: its HMAC cost a page's time). */
static char *events_token(const events_opts *o, const uint8_t *secret, sg_err *err)
{
    static char *made;
    static struct timespec made_at;
    if (o->token_opt)
        return strdup(o->token_opt);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!made || now.tv_sec - made_at.tv_sec >= SELF_TOKEN_TTL_S / 2) {
        free(made);
        made = sg_token_make_read(secret, NULL, NULL, NULL, SELF_TOKEN_TTL_S, err);
        made_at = now;
    }
    return made ? strdup(made) : NULL;
}

/* Asks for the page after cursor on a new connection c (its answer:
 * sg_cli_http_get_recv): 0, or -1 with err. */
static int events_ask(const events_opts *o, const sg_cli_target *t, const uint8_t *secret, const char *base,
                      bool by_id, long long cursor, sg_cli_conn *c, sg_err *err)
{
    char path[1200];
    events_page_path(base, by_id, cursor, o->after_seq, path, sizeof path);
    sg_autofree char *tok = events_token(o, secret, err);
    return tok ? sg_cli_http_get_send(t, path, tok, c, err) : -1;
}

/* The pages of /v1/events, then (--follow) the stream. */
static int events_run(events_opts *o)
{
    sg_err err;
    sg_cli_target t;
    if (sg_cli_target_parse(o->ingest, o->ingest_ca, &t, &err) < 0)
        return sg_cli_usage("events", "%s", err.msg);
    if (o->token_opt && (strlen(o->token_opt) > SG_TOKEN_MAX || strpbrk(o->token_opt, "\r\n ")))
        return sg_cli_usage("events", "--token: not a token");
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    int rc = events_load_secret(o, secret);
    if (rc != EVENTS_GO)
        return rc;
    {
        sg_autofree char *tok = events_token(o, secret, &err);
        if (!tok)
            return sg_cli_failf("events", "%s", err.msg);
        if ((rc = events_resolve(o, &t, tok)) != EVENTS_GO)
            return rc;
    }
    o->tl.show_stream = !o->sandbox;
    char base[1024] = "/v1/events";
    if (o->learner)
        append_arg(base, sizeof base, "learner", o->learner);
    if (o->task)
        append_arg(base, sizeof base, "task", o->task);
    if (o->sandbox)
        append_arg(base, sizeof base, "sandbox", o->sandbox);
    /* the stream's filters (/v1/stream takes no kind=; --kind is applied as
     * its events come) */
    char filters[1024];
    snprintf(filters, sizeof filters, "%s", strchr(base, '?') ? strchr(base, '?') + 1 : "");
    if (o->kinds) { /* the store returns only those rows */
        char k[sizeof o->kinds_buf];
        snprintf(k, sizeof k, "%.*s", (int)strlen(o->kinds) - 2, o->kinds + 1);
        append_arg(base, sizeof base, "kind", k);
    } else if (!o->as_json && !o->tl.all) {
        /* the kinds the timeline hides whatever they hold stay in the
         * store (an ingest before except_kind= ignores it: they are then
         * skipped here, unparsed, as before) */
        append_arg(base, sizeof base, "except_kind", TL_HIDDEN_KINDS);
    }
    /* One stream: page in seq order. Several, or following: page by row id.
     * The next page is asked for as soon as a page is scanned (its last
     * row is the cursor), and read after this one is printed: the ingest
     * makes it meanwhile. */
    bool by_id = o->follow || !o->sandbox;
    long long cursor = by_id ? 0 : o->after_seq;
    sg_cli_conn conn;
    if (events_ask(o, &t, secret, base, by_id, cursor, &conn, &err) < 0)
        return sg_cli_failf("events", "%s", err.msg);
    for (;;) {
        int status = 0;
        const char *body = NULL;
        size_t blen = 0;
        bool more = false, asked = false;
        sg_autofree char *raw = sg_cli_http_get_recv(&t, &conn, &status, &body, &blen, &err);
        if (!raw)
            return sg_cli_failf("events", "%s", err.msg);
        if (status == 200 && sg_evpage_scan(&o->page, body, blen) == 0) {
            sg_evpage *pg = &o->page;
            more = events_page_more(pg);
            int ask = 0; /* a failed ask is said after this page, as before */
            if (more) { /* from the page's last row, as events_print_rows moves the cursor */
                ask = events_ask(o, &t, secret, base, by_id, events_row_cursor(&pg->rows[pg->n - 1], by_id), &conn,
                                 &err);
                asked = true;
            }
            events_print_rows(o, pg, by_id, &cursor);
            if (ask < 0)
                return sg_cli_failf("events", "%s", err.msg);
        } else if ((rc = events_answer(o, body, blen, status, by_id, &cursor, &more)) != EVENTS_GO) {
            return rc;
        }
        if (more && !asked && events_ask(o, &t, secret, base, by_id, cursor, &conn, &err) < 0)
            return sg_cli_failf("events", "%s", err.msg);
        if (more)
            continue;
        if (!o->follow) {
            sg_tl_flush(&o->tl, NULL);
            fflush(stdout);
            return 0;
        }
        return events_follow(o, &t, secret, filters, cursor);
    }
}

int sg_cmd_events(int argc, char **argv)
{
    sg_autofree events_opts *o = calloc(1, sizeof *o);
    if (!o)
        return sg_cli_failf("events", "out of memory");
    int rc = events_parse(argc, argv, o);
    if (rc != EVENTS_GO)
        return rc;
    /* one large buffer: a line is not a write (each page is flushed, and
     * each event followed) */
    static char obuf[1 << 20];
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    sg_sandbox_meta meta = {0};
    rc = events_local_sandbox(o, &meta);
    if (rc == EVENTS_GO)
        rc = events_run(o);
    sg_sandbox_meta_clear(&meta);
    sg_evpage_free(&o->page);
    return rc;
}

/* ---------------------------------------------------------------- sessions
 *
 * sandglass sessions [--learner L] [--task T] [--sandbox ID] [--json]
 *                    [--utc] [--ingest URL] [--token T | --secret FILE]
 * The sessions (streams) the token may see, from the ingest's
 * GET /v1/sessions, paged: one line each, or JSON lines. */

static const char sessions_usage[] =
    "usage: sandglass sessions [--learner L] [--task T] [--sandbox ID] [--json] [--utc]\n"
    "                          [--ingest http://HOST:PORT] [--ingest-ca FILE]\n"
    "                          [--token T | --secret FILE]\n"
    "  each session the read token may see: its state (active, aborted, destroyed,\n"
    "  expired), when it started, its last activity, its commands, and whether\n"
    "  its last test passed; --ingest, --ingest-ca, --token, --secret as for\n"
    "  events\n";

static int sessions_parse(int argc, char **argv, events_opts *o)
{
    static const struct option longopts[] = {
        {"learner", required_argument, NULL, 'l'}, {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"utc", no_argument, NULL, 'u'},           {"ingest", required_argument, NULL, 'i'},
        {"token", required_argument, NULL, 'T'},   {"secret", required_argument, NULL, 'k'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    o->ingest = sg_config_ingest();
    o->after_seq = -1;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (events_common_opt(c, o))
            continue;
        switch (c) {
        case 'h':
            fputs(sessions_usage, stdout);
            return 0;
        default:
            return sg_cli_bad_option("sessions", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("sessions", "unexpected argument '%.64s' (sessions takes only options)", argv[optind]);
    return EVENTS_GO;
}

static void sessions_print(const events_opts *o, json_t *row)
{
    if (o->as_json) {
        sg_autofree char *line = json_dumps(row, JSON_COMPACT);
        puts(line ? line : "{}");
        return;
    }
    char v[3][160], st[48], t0[48], t1[48], tests[32];
    const char *keys[] = {"learner", "task", "sandbox"};
    for (int i = 0; i < 3; i++)
        sg_tl_vis_str(json_string_value(json_object_get(row, keys[i])), v[i], sizeof v[i]);
    sg_tl_vis_str(json_string_value(json_object_get(row, "state")), st, sizeof st);
    sg_tl_time(&o->tl, json_string_value(json_object_get(row, "started")), t0, sizeof t0);
    sg_tl_time(&o->tl, json_string_value(json_object_get(row, "last_activity")), t1, sizeof t1);
    json_t *tx = json_object_get(row, "last_test_exit");
    snprintf(tests, sizeof tests, "%s",
             !json_is_integer(tx)              ? "-"
                 : json_integer_value(tx) == 0 ? "passing"
                                               : "failing");
    printf("%-12s %-12s %-12s %-9s %s  %s  %8lld  %s\n", v[0], v[1], v[2], st, t0, t1,
           (long long)json_integer_value(json_object_get(row, "commands")), tests);
}

int sg_cmd_sessions(int argc, char **argv)
{
    sg_autofree events_opts *o = calloc(1, sizeof *o);
    if (!o)
        return sg_cli_failf("sessions", "out of memory");
    int rc = sessions_parse(argc, argv, o);
    if (rc != EVENTS_GO)
        return rc;
    sg_err err;
    sg_cli_target t;
    if (sg_cli_target_parse(o->ingest, o->ingest_ca, &t, &err) < 0)
        return sg_cli_usage("sessions", "%s", err.msg);
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    if ((rc = events_load_secret(o, secret)) != EVENTS_GO)
        return rc;
    if (o->sandbox) { /* the id or a unique prefix of it (the one rule), in the store */
        sg_autofree char *tok = events_token(o, secret, &err);
        sg_autojson json_t *rows =
            tok ? sg_cli_store_sandbox(&t, tok, o->sandbox, o->sandbox_id, sizeof o->sandbox_id, &err) : NULL;
        if (!rows)
            return sg_cli_failf("sessions", "%s", err.msg);
        o->sandbox = o->sandbox_id;
    }
    char base[1024] = "/v1/sessions";
    if (o->learner)
        append_arg(base, sizeof base, "learner", o->learner);
    if (o->task)
        append_arg(base, sizeof base, "task", o->task);
    if (o->sandbox)
        append_arg(base, sizeof base, "sandbox", o->sandbox);
    if (!o->as_json)
        printf("%-12s %-12s %-12s %-9s %-29s  %-29s  %8s  %s\n", "LEARNER", "TASK", "SESSION", "STATE", "STARTED",
               "LAST ACTIVITY", "COMMANDS", "TESTS");
    long long after = -1;
    for (;;) {
        char path[1200];
        snprintf(path, sizeof path, "%s%safter=%lld", base, strchr(base, '?') ? "&" : "?", after);
        sg_autofree char *tok = events_token(o, secret, &err);
        if (!tok)
            return sg_cli_failf("sessions", "%s", err.msg);
        sg_autojson json_t *ans = sg_cli_http_get_json(&t, path, tok, NULL, &err);
        if (!ans)
            return sg_cli_failf("sessions", "%s", err.msg);
        json_t *rows = json_object_get(ans, "sessions"), *row;
        size_t i;
        json_array_foreach(rows, i, row)
        {
            sessions_print(o, row);
            after = json_integer_value(json_object_get(row, "cursor"));
        }
        if (!json_is_true(json_object_get(ans, "more")) || json_array_size(rows) == 0)
            break;
    }
    fflush(stdout);
    return 0;
}

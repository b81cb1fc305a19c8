/* sandglass events [--learner L] [--task T] [--sandbox ID] [--after-seq N]
 *                  [--follow] [--json] [--ingest http://127.0.0.1:7433]
 *                  [--token T | --secret FILE]
 * Reads the ingest's GET /v1/events and prints JSON lines or a timeline;
 * --follow then stays on GET /v1/stream (pushed events, resumed across an
 * ingest restart; see "--follow" below).
 *
 * Reads need a read token (token.h): --token, or else one this command
 * makes for itself from the ingest's secret (an operator token valid for a
 * few minutes, made anew for each request), so on the ingest's host it
 * works as it is. Pages are bounded by the ingest (rows and bytes); their
 * "more" says to ask again after the last row.
 *
 * The timeline prints learner-controlled text (commands, output, file
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
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/ingest_http.h"
#include "cli/report.h"
#include "state/state.h"
#include "wire/ctl.h"
#include "wire/token.h"

#define PAGE 1000
#define FOLLOW_IDLE_S 45            /* a stream silent this long is dead (pings: 15 s) */
#define FOLLOW_BACKOFF_MIN_MS 100L
#define FOLLOW_BACKOFF_MAX_MS 5000L
#define FOLLOW_EVENT_MAX (64 * 1024 * 1024) /* one SSE message, at most */
#define SELF_TOKEN_TTL_S 300 /* a token this command makes for one request */

static const char usage[] =
    "usage: sandglass events [--learner L] [--task T] [--sandbox ID] [--after-seq N]\n"
    "                        [--follow] [--json] [--ingest http://HOST:PORT]\n"
    "                        [--token T | --secret FILE]\n"
    "  --follow  then print each event as it is committed (the ingest's pushed\n"
    "            stream), reconnecting and resuming when the ingest restarts\n"
    "  --ingest  default $SANDGLASS_INGEST, else http://127.0.0.1:7433\n"
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

static int count_diff_lines(const char *diff, int *plus, int *minus)
{
    *plus = *minus = 0;
    if (!diff)
        return 0;
    for (const char *l = diff; *l; ) {
        if (l[0] == '+' && strncmp(l, "+++ ", 4) != 0)
            (*plus)++;
        else if (l[0] == '-' && strncmp(l, "--- ", 4) != 0)
            (*minus)++;
        const char *nl = strchr(l, '\n');
        if (!nl)
            break;
        l = nl + 1;
    }
    return 0;
}

/* s (len bytes) made safe for a terminal (util.h: sg_vis). */
static const char *vis(const char *s, size_t len, char *buf, size_t n)
{
    return sg_vis(s, len, buf, n);
}

/* vis of a whole string. */
static const char *vis_str(const char *s, char *buf, size_t n)
{
    return vis(s, s ? strlen(s) : 0, buf, n);
}

/* First line of s, made safe by vis, at most n bytes, into buf. */
static const char *first_line(const char *s, char *buf, size_t n)
{
    if (!s)
        s = "";
    size_t l = strcspn(s, "\n");
    vis(s, l, buf, n);
    if (s[l] && strlen(buf) + sizeof "…" <= n && !strstr(buf, "…"))
        strcat(buf, "…");
    return buf;
}

/* A process event: "pid 4 <- 3 sh -c 'x' -> exit 0 in 0.102s (exec 2, background)". */
/* The heartbeat's commands still running: "; running: exec 3 `sleep 100`
 * for 31 s, ...", appended at len while it fits. */
static void activity_running(json_t *running, char *out, size_t n, size_t len)
{
    size_t i;
    json_t *r;
    json_array_foreach(running, i, r) {
        if (len >= n)
            return;
        const char *cmd = json_string_value(json_object_get(r, "cmd"));
        char cbuf[120];
        int w = snprintf(out + len, n - len, "%s exec %lld `%s` for %.0f s", i ? "," : "; running:",
                         (long long)json_integer_value(json_object_get(r, "exec_id")),
                         vis_str(cmd ? cmd : "?", cbuf, sizeof cbuf),
                         json_number_value(json_object_get(r, "for_s")));
        if (w < 0)
            return;
        len += (size_t)w;
    }
}

static void process_summary(json_t *p, char *out, size_t n)
{
    json_t *av = json_object_get(p, "argv");
    char line[200] = "", st[48], extra[64] = "";
    if (json_is_array(av)) {
        sg_autofree char *argv_line = NULL;
        size_t cap = json_array_size(av) + 1;
        sg_autofree const char **v = calloc(cap, sizeof *v);
        for (size_t i = 0; v && i + 1 < cap; i++)
            v[i] = json_string_value(json_array_get(av, i)) ? json_string_value(json_array_get(av, i)) : "";
        argv_line = v ? sg_exec_cmdline((char *const *)v) : NULL;
        first_line(argv_line, line, sizeof line);
    } else {
        snprintf(line, sizeof line, "(argv not read: it ended first)");
    }
    json_t *ec = json_object_get(p, "exit_code"), *sig = json_object_get(p, "signal");
    if (json_is_integer(ec))
        snprintf(st, sizeof st, "exit %lld", (long long)json_integer_value(ec));
    else if (json_is_integer(sig))
        snprintf(st, sizeof st, "signal %lld", (long long)json_integer_value(sig));
    else if (json_is_true(json_object_get(p, "replaced")))
        snprintf(st, sizeof st, "exec'd another program");
    else
        snprintf(st, sizeof st, "still running");
    if (json_is_integer(json_object_get(p, "exec_id")))
        snprintf(extra, sizeof extra, " (exec %lld%s)", (long long)json_integer_value(json_object_get(p, "exec_id")),
                 json_is_true(json_object_get(p, "background")) ? ", background" : "");
    snprintf(out, n, "pid %lld <- %lld %s -> %s in %.3fs%s", (long long)json_integer_value(json_object_get(p, "pid")),
             (long long)json_integer_value(json_object_get(p, "ppid")), line, st,
             json_number_value(json_object_get(p, "duration_s")), extra);
}

static void print_timeline(json_t *ev, bool show_stream)
{
    const char *ts = json_string_value(json_object_get(ev, "ts"));
    const char *kind = json_string_value(json_object_get(ev, "kind"));
    json_t *p = json_object_get(ev, "payload");
    char tbuf[64] = "?";
    if (ts && strlen(ts) >= 23)
        vis(ts + 11, 12, tbuf, sizeof tbuf); /* HH:MM:SS.mmm */
    char line[256];
    char summary[512] = "";
    const char *cmd = json_string_value(json_object_get(p, "cmd"));
    if (!kind)
        kind = "?";
    if (strcmp(kind, "stdin") == 0) {
        snprintf(summary, sizeof summary, "> %s",
                 first_line(json_string_value(json_object_get(p, "line")), line, 200));
    } else if (strcmp(kind, "command") == 0) {
        snprintf(summary, sizeof summary, "$ %s", first_line(cmd, line, 200));
    } else if (strcmp(kind, "stdout") == 0) {
        const char *data = json_string_value(json_object_get(p, "data"));
        const char *stream = json_string_value(json_object_get(p, "stream"));
        char sbuf[48];
        snprintf(summary, sizeof summary, "[%s] %s (%zu bytes)",
                 vis_str(stream ? stream : "stdout", sbuf, sizeof sbuf),
                 first_line(data, line, 120), data ? strlen(data) : 0);
    } else if (strcmp(kind, "run_result") == 0 || strcmp(kind, "test_result") == 0) {
        json_t *ec = json_object_get(p, "exit_code");
        double dur = json_number_value(json_object_get(p, "duration_s"));
        char status[48];
        if (json_is_true(json_object_get(p, "timed_out")))
            snprintf(status, sizeof status, "timed out");
        else if (json_is_integer(ec))
            snprintf(status, sizeof status, "exit %lld", (long long)json_integer_value(ec));
        else
            snprintf(status, sizeof status, "no exit status");
        snprintf(summary, sizeof summary, "%s%s -> %s in %.3fs",
                 strcmp(kind, "test_result") == 0
                     ? (json_integer_value(ec) == 0 && json_is_integer(ec) ? "PASS " : "FAIL ")
                     : "",
                 first_line(cmd, line, 160), status, dur);
    } else if (strcmp(kind, "file_diff") == 0) {
        const char *path = json_string_value(json_object_get(p, "path"));
        const char *change = json_string_value(json_object_get(p, "change"));
        const char *old = json_string_value(json_object_get(p, "old_path"));
        int plus, minus;
        count_diff_lines(json_string_value(json_object_get(p, "diff")), &plus, &minus);
        char extra[64] = "", pbuf[200], obuf[200], cbuf[40];
        path = path ? vis_str(path, pbuf, sizeof pbuf) : NULL;
        old = old ? vis_str(old, obuf, sizeof obuf) : NULL;
        change = change ? vis_str(change, cbuf, sizeof cbuf) : NULL;
        if (json_is_true(json_object_get(p, "binary")))
            snprintf(extra, sizeof extra, ", binary");
        else if (json_is_true(json_object_get(p, "truncated")))
            snprintf(extra, sizeof extra, ", no diff (large)");
        snprintf(summary, sizeof summary, "+%d -%d %s%s%s (%s%s)", plus, minus,
                 old ? old : "", old ? " -> " : "", path ? path : "?", change ? change : "?",
                 extra);
    } else if (strcmp(kind, "process") == 0) {
        process_summary(p, summary, sizeof summary);
    } else if (strcmp(kind, "activity") == 0) {
        const char *state = json_string_value(json_object_get(p, "state"));
        json_t *sp = json_object_get(p, "spooled");
        if (!sp)
            sp = json_object_get(p, "unacked");
        char stbuf[64];
        int l = snprintf(summary, sizeof summary, "%s (%lld unacked)",
                         vis_str(state ? state : "?", stbuf, sizeof stbuf),
                         (long long)json_integer_value(sp));
        activity_running(json_object_get(p, "running"), summary, sizeof summary, (size_t)l);
    } else {
        sg_autofree char *txt = sg_json_dump(p); /* 10 digits: no float noise */
        vis_str(txt ? txt : "", summary, 220);
    }
    char kbuf[64], lbuf[3][160];
    kind = vis_str(kind, kbuf, sizeof kbuf);
    if (show_stream)
        printf("%s  %s/%s/%s  #%lld  %-12s %s\n", tbuf,
               vis_str(json_string_value(json_object_get(ev, "learner")), lbuf[0], sizeof lbuf[0]),
               vis_str(json_string_value(json_object_get(ev, "task")), lbuf[1], sizeof lbuf[1]),
               vis_str(json_string_value(json_object_get(ev, "sandbox")), lbuf[2], sizeof lbuf[2]),
               (long long)json_integer_value(json_object_get(ev, "seq")), kind, summary);
    else
        printf("%s  #%-5lld %-12s %s\n", tbuf,
               (long long)json_integer_value(json_object_get(ev, "seq")), kind, summary);
}

/* What the command line asked for. */
typedef struct events_opts {
    const char *learner, *task, *sandbox;
    const char *ingest;
    const char *token_opt, *secret_path;
    long long after_seq;
    bool follow, as_json;
} events_opts;

#define EVENTS_GO (-1) /* from a step: carry on (else: the exit code) */

static int events_parse(int argc, char **argv, events_opts *o)
{
    static const struct option longopts[] = {
        {"learner", required_argument, NULL, 'l'},
        {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'},
        {"after-seq", required_argument, NULL, 'a'},
        {"follow", no_argument, NULL, 'f'},
        {"json", no_argument, NULL, 'j'},
        {"ingest", required_argument, NULL, 'i'},
        {"token", required_argument, NULL, 'T'},
        {"secret", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* $SANDGLASS_INGEST, create's default too (its ws:// URL names the same
     * host and port) */
    const char *env_ingest = getenv("SANDGLASS_INGEST");
    *o = (events_opts){.ingest = env_ingest && *env_ingest ? env_ingest : "http://127.0.0.1:7433",
                       .after_seq = -1};
    int c;
    optind = 1;
    opterr = 0; /* our one-line message, not getopt's */
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': o->learner = optarg; break;
        case 't': o->task = optarg; break;
        case 's': o->sandbox = optarg; break;
        case 'f': o->follow = true; break;
        case 'j':
            o->as_json = true;
            sg_cli_json_errors(true);
            break;
        case 'i': o->ingest = optarg; break;
        case 'T': o->token_opt = optarg; break;
        case 'k': o->secret_path = optarg; break;
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
        secret_path = secret_default = sg_state_path("ingest/secret");
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

static void events_print_one(const events_opts *o, json_t *ev)
{
    if (o->as_json) {
        sg_autofree char *line = json_dumps(ev, JSON_COMPACT);
        puts(line ? line : "{}");
    } else {
        print_timeline(ev, !o->sandbox);
    }
}

/* Prints one page's events; moves cursor past them. */
static void events_print_page(const events_opts *o, json_t *events, bool by_id, long long *cursor)
{
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        events_print_one(o, ev);
        *cursor = json_integer_value(json_object_get(ev, by_id ? "id" : "seq"));
    }
    fflush(stdout);
}

/* ---------------------------------------------------------------- --follow
 *
 * After the pages, GET /v1/stream (Server-Sent Events) from the last row
 * id printed: each committed event is pushed as it commits. When the
 * connection ends (the ingest restarts, or closes a reader that fell
 * behind) it reconnects with after=<the last id printed>, with backoff,
 * for as long as it runs: nothing is skipped or printed twice. */

typedef struct follow_conn {
    int fd;
    char *buf;
    size_t have, cap;
} follow_conn;

/* More bytes into c->buf (bounded): > 0, 0 at the end, -1 error. */
static int follow_fill(follow_conn *c)
{
    if (c->cap - c->have < 65536) {
        if (c->cap >= FOLLOW_EVENT_MAX)
            return -1;
        char *nb = realloc(c->buf, c->cap * 2 + 65536 + 1);
        if (!nb)
            return -1;
        c->buf = nb;
        c->cap = c->cap * 2 + 65536;
    }
    ssize_t n = read(c->fd, c->buf + c->have, c->cap - c->have);
    if (n < 0 && errno == EINTR)
        return 1;
    if (n <= 0)
        return n == 0 ? 0 : -1;
    c->have += (size_t)n;
    c->buf[c->have] = '\0';
    return 1;
}

/* The answer's head: its status, and the bytes after it left in c->buf. A
 * refusal (4xx) is printed and its exit code returned; else EVENTS_GO. */
static int follow_head(follow_conn *c, int *status)
{
    char *end;
    while (!(c->buf && (end = strstr(c->buf, "\r\n\r\n")))) {
        if (follow_fill(c) <= 0 || c->have > 65536)
            return *status = 0, EVENTS_GO;
    }
    if (sscanf(c->buf, "HTTP/1.%*[01] %d", status) != 1)
        *status = 0;
    size_t hl = (size_t)(end + 4 - c->buf);
    memmove(c->buf, end + 4, c->have - hl + 1);
    c->have -= hl;
    if (*status < 400 || *status >= 500 || *status == 429)
        return EVENTS_GO; /* 429/5xx: busy or failing, try again later */
    while (follow_fill(c) > 0 && c->have < 65536)
        ;
    sg_err err;
    sg_autojson json_t *j = c->buf ? sg_json_parse(c->buf, c->have, &err) : NULL;
    const char *msg = json_string_value(json_object_get(j, "error"));
    char vbuf[256];
    return sg_cli_failf("events", "ingest answered HTTP %d: %s", *status,
                        sg_vis(msg ? msg : "?", strlen(msg ? msg : "?"), vbuf, sizeof vbuf));
}

/* One SSE message (its lines, NUL-terminated): an event is printed. */
static void follow_message(const events_opts *o, char *msg, long long *cursor)
{
    const char *data = NULL, *event = "message";
    for (char *line = strtok(msg, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6) == 0)
            data = line + 6;
        else if (strncmp(line, "event: ", 7) == 0)
            event = line + 7;
    }
    if (!data || strcmp(event, "message") != 0)
        return; /* live, overflow, comments: the reconnect resumes from cursor */
    sg_err err;
    sg_autojson json_t *ev = sg_json_parse(data, strlen(data), &err);
    json_t *id = json_object_get(ev, "id");
    if (!json_is_integer(id) || json_integer_value(id) <= *cursor)
        return;
    *cursor = json_integer_value(id);
    json_t *seq = json_object_get(ev, "seq");
    if (o->after_seq < 0 || json_integer_value(seq) > o->after_seq)
        events_print_one(o, ev);
}

/* One connection: EVENTS_GO when it ended (reconnect), else an exit code.
 * *served: the ingest answered 200 (the backoff starts over). */
static int follow_once(const events_opts *o, const sg_cli_target *t, const char *token,
                       const char *query, long long *cursor, bool *served)
{
    sg_err err;
    follow_conn c = {.fd = sg_cli_http_connect(t, FOLLOW_IDLE_S, &err)};
    if (c.fd < 0)
        return EVENTS_GO;
    sg_autofree char *req = sg_strdup_printf(
        "GET /v1/stream?%s%safter=%lld HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/event-stream\r\n"
        "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
        query, query[0] ? "&" : "", *cursor, t->host, t->port, token);
    int status = 0, rc = EVENTS_GO;
    if (req && sg_write_all(c.fd, req, strlen(req)) == 0)
        rc = follow_head(&c, &status);
    *served = status == 200;
    while (rc == EVENTS_GO && status == 200) {
        char *end;
        while (c.buf && (end = strstr(c.buf, "\n\n"))) {
            *end = '\0';
            follow_message(o, c.buf, cursor);
            size_t used = (size_t)(end + 2 - c.buf);
            memmove(c.buf, end + 2, c.have - used + 1);
            c.have -= used;
        }
        fflush(stdout);
        if (follow_fill(&c) <= 0)
            break; /* closed, or silent past FOLLOW_IDLE_S (pings come every 15 s) */
    }
    close(c.fd);
    free(c.buf);
    return rc;
}

static int events_follow(const events_opts *o, const sg_cli_target *t, const uint8_t *secret,
                         const char *query, long long cursor)
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

int sg_cmd_events(int argc, char **argv)
{
    events_opts o;
    int rc = events_parse(argc, argv, &o);
    if (rc != EVENTS_GO)
        return rc;
    sg_err err;
    sg_cli_target t;
    if (sg_cli_target_parse(o.ingest, &t, &err) < 0) {
        return sg_cli_usage("events", "%s", err.msg);
    }
    if (o.token_opt && (strlen(o.token_opt) > SG_TOKEN_MAX || strpbrk(o.token_opt, "\r\n "))) {
        return sg_cli_usage("events", "--token: not a token");
    }
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    rc = events_load_secret(&o, secret);
    if (rc != EVENTS_GO)
        return rc;
    char base[1024] = "/v1/events";
    if (o.learner)
        append_arg(base, sizeof base, "learner", o.learner);
    if (o.task)
        append_arg(base, sizeof base, "task", o.task);
    if (o.sandbox)
        append_arg(base, sizeof base, "sandbox", o.sandbox);
    const char *filters = strchr(base, '?') ? strchr(base, '?') + 1 : "";
    /* One stream: page in seq order. Several, or following: page by row id. */
    bool by_id = o.follow || !o.sandbox;
    long long cursor = by_id ? 0 : o.after_seq;
    for (;;) {
        char path[1200];
        events_page_path(base, by_id, cursor, o.after_seq, path, sizeof path);
        sg_autofree char *own = o.token_opt ? NULL
                                            : sg_token_make_read(secret, NULL, NULL, NULL,
                                                                 SELF_TOKEN_TTL_S, &err);
        if (!o.token_opt && !own) {
            return sg_cli_failf("events", "%s", err.msg);
        }
        sg_autojson json_t *ans = sg_cli_http_get_json(&t, path, o.token_opt ? o.token_opt : own, NULL, &err);
        if (!ans) {
            return sg_cli_failf("events", "%s", err.msg);
        }
        json_t *events = json_object_get(ans, "events");
        events_print_page(&o, events, by_id, &cursor);
        json_t *more = json_object_get(ans, "more");
        if (more ? json_is_true(more) && json_array_size(events) > 0
                 : json_array_size(events) >= PAGE)
            continue;
        if (!o.follow)
            return 0;
        return events_follow(&o, &t, secret, filters, cursor);
    }
}

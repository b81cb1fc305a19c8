/* timeline: the timeline `sandglass events` prints for a person
 * (cli/timeline.h). */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/timeline.h"
#include "wire/ctl.h"

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
const char *sg_tl_vis_str(const char *s, char *buf, size_t n)
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
                         sg_tl_vis_str(cmd ? cmd : "?", cbuf, sizeof cbuf),
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

#define OUT_LINES 20
#define OUT_BYTES 4096
#define TL_HELD_MAX 256 /* events held for one command; more are printed as they come */

static const char *tl_c(const sg_tl_printer *o, const char *code)
{
    return o->color ? code : "";
}

/* ts's "YYYY-MM-DDTHH:MM:SS" (digits where digits are) into tm: false
 * when it is not exactly so (then sscanf reads it, as it always did). */
static bool ts_fixed(const char *ts, struct tm *tm)
{
    static const char shape[] = "DDDD-DD-DDTDD:DD:DD";
    for (size_t i = 0; i < sizeof shape - 1; i++)
        if (shape[i] == 'D' ? !(ts[i] >= '0' && ts[i] <= '9') : ts[i] != shape[i])
            return false;
#define TS_N2(i) ((ts[i] - '0') * 10 + (ts[(i) + 1] - '0'))
    *tm = (struct tm){.tm_year = TS_N2(0) * 100 + TS_N2(2), .tm_mon = TS_N2(5), .tm_mday = TS_N2(8),
                      .tm_hour = TS_N2(11), .tm_min = TS_N2(14), .tm_sec = TS_N2(17)};
#undef TS_N2
    return true;
}

/* An event's ts (RFC 3339) in seconds since the epoch; -1 when unreadable. */
double sg_tl_ts_epoch(const char *ts)
{
    /* the last second converted: a session's events come many to one
     * (sscanf and timegm were a tenth of a line's cost) */
    static char last[20];
    static time_t last_t;
    struct tm tm = {0};
    char frac[16] = "";
    if (!ts)
        return -1;
    if (ts_fixed(ts, &tm)) {
        size_t f = strspn(ts + 19, ".0123456789"); /* %15[.0-9] */
        memcpy(frac, ts + 19, f < 15 ? f : 15);
        if (memcmp(last, ts, 19) != 0) {
            tm.tm_year -= 1900;
            tm.tm_mon -= 1;
            last_t = timegm(&tm);
            memcpy(last, ts, 19);
        }
        return (double)last_t + (frac[0] == '.' ? strtod(frac, NULL) : 0);
    }
    if (sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d%15[.0-9]", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, frac) < 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) + (frac[0] == '.' ? strtod(frac, NULL) : 0);
}

/* ts (RFC 3339, UTC, as the ingest stores it) as "2026-12-03 13:05:02.123
 * +01:00", in local time or UTC. */
void sg_tl_time(const sg_tl_printer *o, const char *ts, char *out, size_t n)
{
    /* the second last shown, as it was shown: a session's events come
     * many to a second, and its conversion is most of a line's cost */
    static time_t last_t = -1;
    static bool last_utc;
    static int off;
    static char day[40];
    double e = sg_tl_ts_epoch(ts);
    struct tm lt;
    time_t t = (time_t)e;
    if (e >= 0 && (t != last_t || o->utc != last_utc)) {
        last_t = -1;
        if (o->utc ? !gmtime_r(&t, &lt) : !localtime_r(&t, &lt))
            e = -1;
        else if (strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &lt) > 0)
            last_t = t, last_utc = o->utc, off = o->utc ? 0 : (int)(lt.tm_gmtoff % 86400);
    }
    if (e < 0 || last_t != t) {
        snprintf(out, n, "%-29s", "(no time)");
        return;
    }
    int ms = (int)((e - (double)t) * 1000.0 + 0.5);
    snprintf(out, n, "%.19s.%03d %c%02d:%02d", day, ms > 999 ? 999 : ms, off < 0 ? '-' : '+', abs(off) / 3600 % 100,
             abs(off) % 3600 / 60);
}

/* The start of an event's line: time, stream (when several) and seq. */
static void tl_head(const sg_tl_printer *o, json_t *ev)
{
    char tbuf[48], lbuf[3][160];
    sg_tl_time(o, json_string_value(json_object_get(ev, "ts")), tbuf, sizeof tbuf);
    printf("%s%s%s  ", tl_c(o, "\033[2m"), tbuf, tl_c(o, "\033[0m"));
    if (o->show_stream)
        printf("%s/%s/%s  ", sg_tl_vis_str(json_string_value(json_object_get(ev, "learner")), lbuf[0], sizeof lbuf[0]),
               sg_tl_vis_str(json_string_value(json_object_get(ev, "task")), lbuf[1], sizeof lbuf[1]),
               sg_tl_vis_str(json_string_value(json_object_get(ev, "sandbox")), lbuf[2], sizeof lbuf[2]));
    printf("#%-5lld ", (long long)json_integer_value(json_object_get(ev, "seq")));
}

/* One line of output as a terminal leaves it: a CR-LF ends the line, and
 * after a bare CR (a progress bar) the text that followed it stands. Only
 * plain text is dropped so: when what a CR would hide holds another
 * control byte (an escape sequence: a title set, a line erased), the whole
 * line is shown, its CRs escaped, so that nothing hostile goes unseen. */
static void tl_out_line(const char *l, size_t len, const char *indent)
{
    while (len > 0 && l[len - 1] == '\r')
        len--;
    for (size_t i = len; i-- > 0;) {
        if (l[i] != '\r')
            continue;
        bool plain = true;
        for (size_t j = 0; j < i && plain; j++)
            plain = l[j] == '\r' || ((unsigned char)l[j] >= 0x20 && l[j] != 0x7f);
        if (plain) {
            len -= i + 1;
            l += i + 1;
        }
        break;
    }
    char small[1024];
    size_t n = len * 4 + 16; /* sg_vis: at most 4 bytes for one */
    sg_autofree char *big = n > sizeof small ? malloc(n) : NULL;
    if (!big)
        n = sizeof small;
    printf("%s%s\n", indent, vis(l, len, big ? big : small, n));
}

/* Text (output, a diff) under its event, line by line, escaped; cut at
 * OUT_LINES lines and OUT_BYTES bytes unless --full. */
static void tl_block(const sg_tl_printer *o, const char *text, const char *indent, const char *more)
{
    if (!text)
        return;
    size_t lines = 0, bytes = 0, total = strlen(text);
    const char *l = text;
    while (*l) {
        size_t len = strcspn(l, "\n");
        if (!o->full && (lines >= OUT_LINES || bytes + len > OUT_BYTES)) {
            size_t left = 0;
            for (const char *p = l; *p; p++)
                left += *p == '\n';
            printf("%s… %zu more line%s, %zu bytes (%s)\n", indent, left + (text[total - 1] != '\n'),
                   left == 1 ? "" : "s", total - (size_t)(l - text), more);
            return;
        }
        tl_out_line(l, len, indent);
        lines++;
        bytes += len + 1;
        l += len + (l[len] == '\n');
    }
}

static const char *tl_status(json_t *p, char *status, size_t n)
{
    json_t *ec = json_object_get(p, "exit_code"), *sig = json_object_get(p, "signal");
    if (json_is_true(json_object_get(p, "timed_out")))
        snprintf(status, n, "timed out");
    else if (json_is_integer(ec))
        snprintf(status, n, "exit %lld", (long long)json_integer_value(ec));
    else if (json_is_integer(sig))
        snprintf(status, n, "killed by signal %lld", (long long)json_integer_value(sig));
    else
        snprintf(status, n, "no exit status");
    return status;
}

/* A test result's verdict: the runner's counts when its summary parsed
 * (capture/testsummary.h: "tests FAIL 3 passed, 1 failed, "), else the
 * exit status's. Returns whether it passed. */
static bool tl_test_verdict(json_t *rp, bool exit_ok, char *buf, size_t n)
{
    const char *outcome = json_string_value(json_object_get(rp, "outcome"));
    if (!json_is_true(json_object_get(rp, "parsed")) || !outcome) {
        snprintf(buf, n, "%s", exit_ok ? "tests PASS, " : "tests FAIL, ");
        return exit_ok;
    }
    bool ok = strcmp(outcome, "passed") == 0;
    const char *word = ok ? "PASS" : strcmp(outcome, "no_tests") == 0 ? "NONE RAN" :
                       strcmp(outcome, "error") == 0 ? "ERROR" : "FAIL";
    size_t k = (size_t)snprintf(buf, n, "tests %s", word);
    static const char *counts[] = {"passed", "failed", "errors", "skipped"};
    for (size_t i = 0; i < sizeof counts / sizeof *counts && k < n; i++) {
        json_int_t c = json_integer_value(json_object_get(rp, counts[i]));
        if (c > 0 || i == 0)
            k += (size_t)snprintf(buf + k, n - k, "%s %lld %s", i ? "," : "", (long long)c, counts[i]);
    }
    if (k < n)
        snprintf(buf + k, n - k, ", ");
    return ok;
}

/* "$ make test   FAIL  exit 2, 0.31 s" (res NULL: the command without a
 * result yet, "started"). */
static void tl_command_line(const sg_tl_printer *o, json_t *cmd_ev, json_t *res)
{
    json_t *cp = json_object_get(cmd_ev ? cmd_ev : res, "payload");
    json_t *rp = json_object_get(res, "payload");
    const char *cmd = json_string_value(json_object_get(cp, "cmd"));
    if (!cmd)
        cmd = json_string_value(json_object_get(rp, "cmd"));
    char line[600], status[64];
    tl_head(o, cmd_ev ? cmd_ev : res);
    printf("%s$ %s%s", tl_c(o, "\033[1m"), first_line(cmd, line, 500), tl_c(o, "\033[0m"));
    if (!res) {
        printf("   (started)\n");
        return;
    }
    bool test = strcmp(json_string_value(json_object_get(res, "kind")), "test_result") == 0;
    json_t *ec = json_object_get(rp, "exit_code");
    bool ok = json_is_integer(ec) && json_integer_value(ec) == 0;
    char verdict[160] = "";
    if (test)
        ok = tl_test_verdict(rp, ok, verdict, sizeof verdict);
    printf("   %s%s%s%s, %.3f s%s\n", tl_c(o, ok ? "\033[32m" : "\033[31m"), verdict,
           tl_status(rp, status, sizeof status), tl_c(o, "\033[0m"),
           json_number_value(json_object_get(rp, "duration_s")),
           json_is_true(json_object_get(rp, "truncated")) ? " (output cut)" : "");
    json_t *failing = json_object_get(rp, "failing_tests");
    for (size_t i = 0; test && i < json_array_size(failing) && i < 10; i++) {
        char nbuf[420];
        const char *n = json_string_value(json_array_get(failing, i));
        printf("    %sfailed: %s%s\n", tl_c(o, "\033[31m"), sg_tl_vis_str(n ? n : "", nbuf, sizeof nbuf), tl_c(o, "\033[0m"));
    }
    if (test && json_array_size(failing) > 10)
        printf("    ... and %zu more failing\n", json_array_size(failing) - 10);
}

static void tl_output(const sg_tl_printer *o, json_t *ev, json_t *p, bool under)
{
    const char *data = json_string_value(json_object_get(p, "data"));
    const char *stream = json_string_value(json_object_get(p, "stream"));
    if (!data || !*data)
        return;
    bool err = stream && strcmp(stream, "stderr") == 0;
    if (!under) {
        char sbuf[48];
        tl_head(o, ev);
        printf("output (%s)\n", sg_tl_vis_str(stream ? stream : "stdout", sbuf, sizeof sbuf));
    }
    if (json_is_true(json_object_get(p, "truncated")))
        printf("    %s… its first %lld bytes were not kept (the last 64 KiB are)%s\n", tl_c(o, "\033[2m"),
               (long long)(json_integer_value(json_object_get(p, "bytes")) - (json_int_t)strlen(data)),
               tl_c(o, "\033[0m"));
    tl_block(o, data, err ? "  ! " : "  | ", "--full for all of it");
}

static void tl_file_diff(const sg_tl_printer *o, json_t *ev, json_t *p, bool under)
{
    const char *path = json_string_value(json_object_get(p, "path"));
    const char *change = json_string_value(json_object_get(p, "change"));
    const char *old = json_string_value(json_object_get(p, "old_path"));
    const char *diff = json_string_value(json_object_get(p, "diff"));
    int plus, minus;
    count_diff_lines(diff, &plus, &minus);
    char now_vis[400], was_vis[400] = "", how_vis[40] = "changed";
    sg_tl_vis_str(path ? path : "?", now_vis, sizeof now_vis);
    if (old) {
        sg_tl_vis_str(old, was_vis, sizeof was_vis - 8);
        strcat(was_vis, " -> ");
    }
    if (change)
        sg_tl_vis_str(change, how_vis, sizeof how_vis);
    /* "+3 -1 a.py (modified)": the counts first, as git's --stat; an
     * empty directory's "d/ (directory created)" (docs/EVENTS.md) */
    char counts[48] = "";
    bool dir = json_is_true(json_object_get(p, "dir"));
    if (dir) {
        size_t l = strlen(now_vis);
        if (l + 2 <= sizeof now_vis)
            strcpy(now_vis + l, "/");
        char c[40];
        snprintf(c, sizeof c, "directory %s", how_vis);
        snprintf(how_vis, sizeof how_vis, "%s", c);
    } else if (!json_is_true(json_object_get(p, "binary")) && !json_is_true(json_object_get(p, "truncated"))) {
        snprintf(counts, sizeof counts, "+%d -%d ", plus, minus);
    }
    if (under)
        printf("  ~ ");
    else
        tl_head(o, ev);
    printf("%s%s%s (%s%s)\n", counts, was_vis, now_vis, how_vis,
           json_is_true(json_object_get(p, "binary"))          ? ", binary"
               : json_is_true(json_object_get(p, "truncated")) ? ", no diff: large"
                                                               : "");
    if (o->diff && diff)
        tl_block(o, diff, "    ", "--full for the whole diff");
}

/* A checkpoint's id, its first 12 characters (as git shows a commit),
 * cut before it is escaped (an escape or a character is never cut). */
static const char *tl_short_id(const char *id, char *buf, size_t n)
{
    return vis(id ? id : "?", id ? strnlen(id, 12) : 1, buf, n);
}

/* " (by USER via VIA)" for an operator's action (its payload's actor:
 * wire/ctl.h, EVENTS.md), "" for the supervisor's own or a cap's. */
static const char *tl_actor(json_t *p, char *out, size_t n)
{
    json_t *a = json_object_get(p, "actor");
    const char *user = json_string_value(json_object_get(a, "user"));
    json_t *uid = json_object_get(a, "uid");
    const char *via = json_string_value(json_object_get(a, "via"));
    char u[100], v[200];
    if (!user && !json_is_integer(uid)) {
        out[0] = '\0';
        return out;
    }
    if (user)
        sg_tl_vis_str(user, u, sizeof u);
    else
        snprintf(u, sizeof u, "uid %lld", (long long)json_integer_value(uid));
    snprintf(out, n, " (by %s%s%s)", u, via ? " via " : "", via ? sg_tl_vis_str(via, v, sizeof v) : "");
    return out;
}

/* A checkpoint, rollback, abort, sandbox change or limit as a sentence. */
/* A bulk event on one line: how many files, then each path and its
 * change, as many as the line holds. */
static void tl_bulk(json_t *p, char *out, size_t n)
{
    json_t *files = json_object_get(p, "files");
    size_t total = json_array_size(files), i, shown = 0;
    int l = snprintf(out, n, "%zu more files changed (past the limit of %lld): ", total,
                     (long long)json_integer_value(json_object_get(p, "limit")));
    size_t used = l > 0 && (size_t)l < n ? (size_t)l : n - 1;
    json_t *f;
    json_array_foreach(files, i, f) {
        char path[200], chg[24];
        const char *ps = json_string_value(json_object_get(f, "path")), *cs = json_string_value(json_object_get(f, "change"));
        char item[260];
        int il = snprintf(item, sizeof item, "%s%s (%s)", shown ? ", " : "", sg_tl_vis_str(ps ? ps : "?", path, sizeof path),
                          sg_tl_vis_str(cs ? cs : "?", chg, sizeof chg));
        if (il < 0 || used + (size_t)il + 24 >= n)
            break;
        memcpy(out + used, item, (size_t)il + 1);
        used += (size_t)il;
        shown++;
    }
    if (shown < total)
        snprintf(out + used, n - used, "%s... and %zu more", shown ? " " : "", total - shown);
}

/* A sandbox's change; its start seeded by create --from says from what,
 * and who created it (or destroyed it) when its actor names one. */
static void tl_sandbox(json_t *p, char *out, size_t n)
{
    char a[200], b[200], c[300], k[32], who[320];
    const char *st = json_string_value(json_object_get(p, "state"));
    const char *r = json_string_value(json_object_get(p, "reason"));
    json_t *from = json_object_get(p, "from");
    const char *src = json_string_value(json_object_get(from, "source"));
    const char *kind = json_string_value(json_object_get(from, "kind"));
    c[0] = '\0';
    if (src && kind)
        snprintf(c, sizeof c, ", seeded from %s %s (%lld files)", sg_tl_vis_str(kind, k, sizeof k),
                 sg_tl_vis_str(src, b, sizeof b),
                 (long long)json_integer_value(json_object_get(from, "files")));
    snprintf(out, n, "sandbox %s%s%s%s%s", sg_tl_vis_str(st ? st : "?", a, sizeof a), r ? ": " : "",
             r ? sg_tl_vis_str(r, b, sizeof b) : "", c, tl_actor(p, who, sizeof who));
}

static void tl_sentence(const char *kind, json_t *p, char *out, size_t n)
{
    char a[200], b[200], c[100], d[100], who[320];
#define TL_S(k)                                                                                                        \
    sg_tl_vis_str(json_string_value(json_object_get(p, k)) ? json_string_value(json_object_get(p, k)) : "?", a, sizeof a)
    if (strcmp(kind, "checkpoint") == 0) {
        const char *e = json_string_value(json_object_get(p, "error"));
        if (e)
            snprintf(out, n, "checkpoint \"%s\" failed: %s", TL_S("label"), sg_tl_vis_str(e, b, sizeof b));
        else
            snprintf(out, n, "checkpoint %s \"%s\": %lld files, %lld changed%s%s",
                     tl_short_id(json_string_value(json_object_get(p, "id")), b, sizeof b), TL_S("label"),
                     (long long)json_integer_value(json_object_get(p, "files")),
                     (long long)json_integer_value(json_object_get(p, "changed")),
                     json_object_get(p, "not_stored") ? " (some files not stored)" : "", tl_actor(p, who, sizeof who));
    } else if (strcmp(kind, "rollback") == 0) {
        json_t *k = json_object_get(p, "killed");
        snprintf(out, n, "rolled back to checkpoint %s: %lld files changed%s%s",
                 tl_short_id(json_string_value(json_object_get(p, "to")), a, sizeof a),
                 (long long)json_integer_value(json_object_get(p, "changed")),
                 json_is_array(k) && json_array_size(k) ? ", processes killed" : "", tl_actor(p, who, sizeof who));
    } else if (strcmp(kind, "session_abort") == 0) {
        /* the abort record (wire/ctl.h); the reason names who ("operator:
         * ...") when it was given by hand */
        sg_ctl_abort_reply ab;
        sg_err err;
        (void)sg_ctl_decode_abort_reply(p, &ab, &err); /* one not of its shape: all "?" (zeroed) */
        const char *r = ab.reason, *by = ab.by;
        bool named = r && by && !strncmp(r, by, strlen(by)) && r[strlen(by)] == ':';
        snprintf(out, n, "SESSION ABORTED%s%s%s: %s%s%s", named ? "" : " (by ",
                 named ? "" : sg_tl_vis_str(by ? by : "?", a, sizeof a), named ? "" : ")",
                 sg_tl_vis_str(r ? r : "?", b, sizeof b), ab.already ? " (already aborted)" : "",
                 tl_actor(p, who, sizeof who));
        sg_ctl_abort_reply_free(&ab);
    } else if (strcmp(kind, "sandbox") == 0) {
        tl_sandbox(p, out, n);
    } else if (strcmp(kind, "bulk") == 0) {
        tl_bulk(p, out, n);
    } else if (strcmp(kind, "limit") == 0) {
        json_t *v = json_object_get(p, "value"), *l = json_object_get(p, "limit");
        sg_autofree char *vs = v ? sg_json_dump(v) : NULL, *ls = l ? sg_json_dump(l) : NULL;
        snprintf(out, n, "limit reached: %s%s%s%s%s%s%s", TL_S("what"), json_object_get(p, "state") ? " " : "",
                 json_object_get(p, "state") ? sg_tl_vis_str(json_string_value(json_object_get(p, "state")), b, sizeof b)
                                             : "",
                 vs ? ", value " : "", vs ? sg_tl_vis_str(vs, c, sizeof c) : "", ls ? ", limit " : "",
                 ls ? sg_tl_vis_str(ls, d, sizeof d) : "");
    } else {
        sg_autofree char *txt = sg_json_dump(p); /* 10 digits: no float noise */
        sg_tl_vis_str(txt ? txt : "", out, n < 300 ? n : 300);
    }
#undef TL_S
}

bool sg_tl_plumbing_label(const char *label, size_t n)
{
    return (n >= 12 && !memcmp(label, "before exec ", 12)) || (n >= 21 && !memcmp(label, "before shell command ", 21));
}

/* Plumbing: shown only with --all. */
static bool tl_plumbing(const char *kind, json_t *p)
{
    if (!strcmp(kind, "activity") || !strcmp(kind, "process") || !strcmp(kind, "stdin") || !strcmp(kind, "command"))
        return true;
    const char *label = json_string_value(json_object_get(p, "label"));
    return !strcmp(kind, "checkpoint") && !json_object_get(p, "error") && label &&
           sg_tl_plumbing_label(label, json_string_length(json_object_get(p, "label")));
}

/* An event printed on its own line (not held under a command). */
static void tl_plain(const sg_tl_printer *o, json_t *ev, const char *kind, json_t *p)
{
    char summary[1024], line[256];
    if (!strcmp(kind, "stdout"))
        return tl_output(o, ev, p, false);
    if (!strcmp(kind, "file_diff"))
        return tl_file_diff(o, ev, p, false);
    if (!strcmp(kind, "run_result") || !strcmp(kind, "test_result"))
        return tl_command_line(o, NULL, ev);
    if (!strcmp(kind, "stdin"))
        snprintf(summary, sizeof summary, "typed %s",
                 first_line(json_string_value(json_object_get(p, "line")), line, 200));
    else if (!strcmp(kind, "command"))
        snprintf(summary, sizeof summary, "command %s",
                 first_line(json_string_value(json_object_get(p, "cmd")), line, 200));
    else if (!strcmp(kind, "process"))
        process_summary(p, summary, sizeof summary);
    else if (!strcmp(kind, "activity")) {
        const char *state = json_string_value(json_object_get(p, "state"));
        json_t *sp = json_object_get(p, "spooled");
        if (!sp)
            sp = json_object_get(p, "unacked");
        char stbuf[64];
        int l = snprintf(summary, sizeof summary, "activity %s (%lld unacked)",
                         sg_tl_vis_str(state ? state : "?", stbuf, sizeof stbuf), (long long)json_integer_value(sp));
        activity_running(json_object_get(p, "running"), summary, sizeof summary, (size_t)l);
    } else
        tl_sentence(kind, p, summary, sizeof summary);
    bool loud = !strcmp(kind, "session_abort") || !strcmp(kind, "limit");
    bool dim = tl_plumbing(kind, p);
    tl_head(o, ev);
    printf("%s%s%s\n",
           tl_c(o,
                loud      ? "\033[1;31m"
                    : dim ? "\033[2m"
                          : ""),
           summary, tl_c(o, loud || dim ? "\033[0m" : ""));
}

/* The held command: its line (with res, or "started"), then what it held. */
void sg_tl_flush(sg_tl_printer *o, json_t *res)
{
    if (!o->cmd_ev)
        return;
    tl_command_line(o, o->cmd_ev, res);
    size_t i;
    json_t *h;
    json_array_foreach(o->held, i, h)
    {
        const char *k = json_string_value(json_object_get(h, "kind"));
        if (!strcmp(k, "stdout"))
            tl_output(o, h, json_object_get(h, "payload"), true);
        else
            tl_file_diff(o, h, json_object_get(h, "payload"), true);
    }
    json_decref(o->cmd_ev);
    json_decref(o->held);
    o->cmd_ev = o->held = NULL;
}

void sg_tl_print(sg_tl_printer *o, json_t *ev)
{
    const char *kind = json_string_value(json_object_get(ev, "kind"));
    json_t *p = json_object_get(ev, "payload");
    if (!kind)
        kind = "?";
    if (o->all) { /* everything, in store order, one event at a time */
        if (!strcmp(kind, "run_result") || !strcmp(kind, "test_result"))
            tl_command_line(o, NULL, ev);
        else
            tl_plain(o, ev, kind, p);
        return;
    }
    bool result = !strcmp(kind, "run_result") || !strcmp(kind, "test_result");
    if (o->cmd_ev && (!strcmp(kind, "stdout") || !strcmp(kind, "file_diff")) &&
        json_array_size(o->held) < TL_HELD_MAX) {
        json_array_append(o->held, ev);
        return;
    }
    if (result) {
        if (o->cmd_ev)
            sg_tl_flush(o, ev);
        else
            tl_command_line(o, NULL, ev);
        return;
    }
    if (tl_plumbing(kind, p) && strcmp(kind, "command") != 0)
        return;
    sg_tl_flush(o, NULL); /* anything else: the held command has no result yet */
    if (!strcmp(kind, "command")) {
        o->cmd_ev = json_incref(ev);
        o->held = json_array();
        return;
    }
    tl_plain(o, ev, kind, p);
}

/* sandglass ls: the sandboxes in the state directory, for an operator:
 * their state, when they were made and last active, what runs in them,
 * whether their capture reaches the ingest. The table is a list of
 * columns (ls_cols): one more column is one more entry there and, for
 * --json, one more field in ls_json. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "state/state.h"
#include "wire/seqpacket.h"

/* How long ls waits for the supervisors' answers (all asked at once): a
 * wedged one (stopped, or busy for long) is shown as "?", never waited on. */
#define LS_INFO_TIMEOUT_MS 300
/* Connections open at once (each sandbox's one), below RLIMIT_NOFILE. */
#define LS_INFO_BATCH 256

typedef struct ls_row {
    sg_sandbox_meta m;
    const char *state; /* running, aborted, starting, dead */
    bool aborted;
    char by[32], reason[256];
    bool uplink; /* u holds the capture's uplink record */
    sg_state_uplink u;
    long long execs;     /* running execs by its supervisor; -1: not known */
    long long attached;  /* terminals with a caller; -1: not known */
    long long unacked;   /* captured events the ingest has not acknowledged; -1: not known */
    char now[SG_CTL_NOW_MAX + 1]; /* the command running now ("": none or not known) */
    time_t last_active;  /* the newest capture or terminal write; 0: none */
    bool expiry;         /* its lifecycle ends it: exp_at, exp_why (state.h's expiry.json) */
    double exp_at;
    char exp_why[16];
} ls_row;

/* running, or dead only when its init is: a sandbox whose supervisor
 * died while its init lives is taken over (revive.h), never shown dead.
 * The record is read again: the new supervisor's pid. */
static const char *ls_state(sg_sandbox_meta *m)
{
    if (sg_state_supervisor_held(m->id, NULL) == 1)
        return "running";
    sg_err err = {0};
    if (sg_revive_takeover(m->id, "ls", &err) < 0) {
        if (err.code != ESRCH)
            sg_cli_sayf("ls", "%s: %s", m->id, err.msg);
        return "dead";
    }
    sg_sandbox_meta fresh;
    if (sg_sandbox_meta_load(m->id, &fresh, NULL) == 0) {
        sg_sandbox_meta_clear(m);
        *m = fresh;
    }
    return "running";
}

static void ls_time(time_t t, char *buf, size_t n)
{
    struct tm tm;
    if (t <= 0 || !gmtime_r(&t, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, n, "-");
}

/* ------------------------------------------------------------ the info */

typedef struct ls_ask {
    ls_row *row;
    int fd;
    sg_ctl_call call;
} ls_ask;

/* One answer's message on a::fd, without blocking: true once it is over. */
static bool ls_ask_read(ls_ask *a)
{
    static char msg[SG_CTL_MSG_MAX];
    for (;;) {
        uint8_t type = 0;
        ssize_t n = sg_seqpacket_recv_typed(a->fd, &type, msg, sizeof msg, NULL, NULL);
        if (n == -EAGAIN || n == -EINTR)
            return false;
        if (n < 0)
            return true;
        sg_ctl_call_end end = sg_ctl_call_feed(&a->call, type, msg, (size_t)n);
        if (end == SG_CTL_CALL_MORE)
            continue;
        sg_ctl_info_reply info;
        sg_err err;
        if (end == SG_CTL_CALL_RESULT && sg_ctl_decode_info_reply(a->call.result, &info, &err) == 0) {
            a->row->execs = info.running_execs;
            a->row->attached = info.attached;
            a->row->unacked = info.unacked;
            snprintf(a->row->now, sizeof a->row->now, "%s", info.now ? info.now : "");
            sg_ctl_info_reply_free(&info);
        }
        return true;
    }
}

/* Asks the supervisors of rows[0..n) (the running ones) for their info at
 * once, and waits LS_INFO_TIMEOUT_MS at most for all of them. */
static void ls_ask_batch(ls_row *rows, size_t n)
{
    static ls_ask asks[LS_INFO_BATCH];
    struct pollfd pfd[LS_INFO_BATCH];
    size_t k = 0;
    sg_autofree char *body = sg_ctl_req_dump(&(sg_ctl_req){.op = SG_OP_INFO, .v = SG_CTL_VERSION});
    for (size_t i = 0; i < n && body; i++) {
        if (strcmp(rows[i].state, "running") != 0 && strcmp(rows[i].state, "aborted") != 0)
            continue;
        sg_revive_state st;
        sg_err err;
        int fd = sg_revive_connect_nb(rows[i].m.id, &st, &err);
        if (fd < 0)
            continue;
        if (st != SG_REVIVE_CONNECTED || sg_seqpacket_send_typed(fd, SG_CTL_REQ, body, strlen(body), NULL, 0) < 0) {
            close(fd);
            continue;
        }
        asks[k] = (ls_ask){.row = &rows[i], .fd = fd};
        pfd[k] = (struct pollfd){.fd = fd, .events = POLLIN};
        k++;
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t left = k; left > 0;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = LS_INFO_TIMEOUT_MS - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (ms <= 0 || poll(pfd, k, (int)ms) <= 0)
            break;
        for (size_t j = 0; j < k; j++) {
            if (pfd[j].fd < 0 || !pfd[j].revents)
                continue;
            if (ls_ask_read(&asks[j])) {
                pfd[j].fd = -1; /* poll skips it */
                left--;
            }
        }
    }
    for (size_t j = 0; j < k; j++) {
        close(asks[j].fd);
        sg_ctl_call_free(&asks[j].call);
    }
}

static void ls_ask_all(ls_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i += LS_INFO_BATCH)
        ls_ask_batch(rows + i, n - i < LS_INFO_BATCH ? n - i : LS_INFO_BATCH);
}

/* ------------------------------------------------------------ the table */

typedef struct ls_col {
    const char *head;
    int width; /* printed padded to it; the last column is not padded */
    void (*cell)(const ls_row *r, char *buf, size_t n);
} ls_col;

static void cell_id(const ls_row *r, char *b, size_t n) { snprintf(b, n, "%s", r->m.id); }
static void cell_state(const ls_row *r, char *b, size_t n) { snprintf(b, n, "%s", r->state); }
static void cell_active(const ls_row *r, char *b, size_t n) { ls_time(r->last_active, b, n); }

/* The record's time (sg_now_iso8601: UTC, microseconds) to the second,
 * as LAST ACTIVE is shown. */
static void cell_created(const ls_row *r, char *b, size_t n)
{
    const char *c = r->m.created;
    size_t l = strlen(c);
    if (l > 19 && c[10] == 'T' && strcmp(c + l - 6, "+00:00") == 0)
        snprintf(b, n, "%.19sZ", c);
    else
        snprintf(b, n, "%s", c[0] ? c : "-");
}
static void cell_learner(const ls_row *r, char *b, size_t n) { snprintf(b, n, "%s", r->m.learner); }
static void cell_task(const ls_row *r, char *b, size_t n) { snprintf(b, n, "%s", r->m.task ? r->m.task : "-"); }
static void cell_workspace(const ls_row *r, char *b, size_t n) { snprintf(b, n, "%s", r->m.workspace); }

/* A count the supervisor answers: "?" when a live one did not, "-" when
 * none runs. */
static void cell_count(const ls_row *r, long long v, char *b, size_t n)
{
    if (v >= 0)
        snprintf(b, n, "%lld", v);
    else
        snprintf(b, n, "%s", strcmp(r->state, "running") == 0 || strcmp(r->state, "aborted") == 0 ? "?" : "-");
}

static void cell_execs(const ls_row *r, char *b, size_t n) { cell_count(r, r->execs, b, n); }
static void cell_attached(const ls_row *r, char *b, size_t n) { cell_count(r, r->attached, b, n); }

/* The learner's command line: escaped, and cut to the column (a long
 * one's whole is in --json). */
static void cell_now(const ls_row *r, char *b, size_t n)
{
    char v[sizeof r->now * 4];
    sg_vis(r->now, strlen(r->now), v, sizeof v);
    size_t len = strlen(v), max = 28;
    if (!r->now[0])
        snprintf(b, n, "-");
    else if (len <= max)
        snprintf(b, n, "%s", v);
    else
        snprintf(b, n, "%.*s...", (int)sg_utf8_cut(v, len, max - 3), v);
}

/* When its lifecycle ends it (create --idle-timeout, --ttl, --keep), as
 * its supervisor last armed it, and why. */
static void cell_expires(const ls_row *r, char *b, size_t n)
{
    char in[16];
    if (!r->expiry) {
        snprintf(b, n, "-");
        return;
    }
    sg_fmt_duration(r->exp_at - sg_now_wall(), in, sizeof in);
    snprintf(b, n, "%s (%s)", in, r->exp_why);
}

static const ls_col ls_cols[] = {
    {"ID", 12, cell_id},
    {"STATE", 8, cell_state},
    {"CREATED", 20, cell_created},
    {"LAST ACTIVE", 20, cell_active},
    {"EXECS", 5, cell_execs},
    {"TERMS", 5, cell_attached},
    {"NOW", 28, cell_now},
    {"EXPIRES", 12, cell_expires},
    {"LEARNER", 16, cell_learner},
    {"TASK", 16, cell_task},
    {"WORKSPACE", 0, cell_workspace},
};
#define LS_NCOLS (sizeof ls_cols / sizeof ls_cols[0])

/* What follows the columns: an abort and why, no disk limit, an ingest
 * that does not take the events (or which node does). */
static void ls_notes(const ls_row *r)
{
    if (r->aborted) {
        size_t n = strlen(r->by); /* the reason without the "by: " before it */
        const char *why = strncmp(r->reason, r->by, n) == 0 && r->reason[n] == ':' && r->reason[n + 1] == ' '
                              ? r->reason + n + 2 : r->reason;
        char vb[sizeof r->reason * 4];
        printf("  (aborted by %s: %s)", r->by, sg_vis(why, strlen(why), vb, sizeof vb));
    }
    /* A workspace without a file system of its own (disk.h): the
     * operator's, or create could not make one. */
    if (r->m.disk == 0)
        printf("  (no disk limit)");
    char vbuf[SG_UPLINK_REASON_MAX * 4];
    if (r->uplink && strcmp(r->u.state, "connected") != 0) {
        char kept[48] = "events";
        if (r->unacked >= 0)
            snprintf(kept, sizeof kept, "%lld event%s", r->unacked, r->unacked == 1 ? "" : "s");
        printf("  (ingest %s since %s: %s; %s kept in the spool)", r->u.state, r->u.since,
               sg_vis(r->u.reason, strlen(r->u.reason), vbuf, sizeof vbuf), kept);
    } else if (r->uplink && r->m.ingest_url && strchr(r->m.ingest_url, ',') && r->u.reason[0]) {
        /* several ingest nodes: which one takes the events */
        printf("  (ingest %s since %s)", sg_vis(r->u.reason, strlen(r->u.reason), vbuf, sizeof vbuf), r->u.since);
    }
}

static void ls_print(const ls_row *r)
{
    char cell[PATH_MAX + 64];
    for (size_t c = 0; c < LS_NCOLS; c++) {
        ls_cols[c].cell(r, cell, sizeof cell);
        printf(c + 1 < LS_NCOLS ? "%-*s " : "%-*s", ls_cols[c].width, cell);
    }
    ls_notes(r);
    printf("\n");
}

static void ls_header(void)
{
    for (size_t c = 0; c < LS_NCOLS; c++)
        printf(c + 1 < LS_NCOLS ? "%-*s " : "%-*s", ls_cols[c].width, ls_cols[c].head);
    printf("\n");
}

/* The row as --json prints it: the record (state.h) and what ls found. */
static json_t *ls_json(const ls_row *r)
{
    json_t *j = sg_sandbox_meta_json(&r->m);
    char t[40];
    ls_time(r->last_active, t, sizeof t);
    json_object_set_new(j, "state", json_string(r->state));
    json_object_set_new(j, "last_active", r->last_active > 0 ? json_string(t) : json_null());
    json_object_set_new(j, "running_execs", r->execs >= 0 ? json_integer(r->execs) : json_null());
    json_object_set_new(j, "attached", r->attached >= 0 ? json_integer(r->attached) : json_null());
    json_object_set_new(j, "now", r->now[0] ? json_string(r->now) : json_null());
    json_object_set_new(j, "unacked_events", r->unacked >= 0 ? json_integer(r->unacked) : json_null());
    if (r->aborted)
        json_object_set_new(j, "abort", json_pack("{s:s, s:s}", "by", r->by, "reason", r->reason));
    if (r->expiry)
        json_object_set_new(j, "expiry", json_pack("{s:f, s:s}", "at", r->exp_at, "why", r->exp_why));
    if (r->uplink)
        json_object_set_new(j, "uplink", json_pack("{s:s, s:s, s:s}", "state", r->u.state, "reason", r->u.reason,
                                                   "since", r->u.since));
    return j;
}

/* ------------------------------------------------------------ the command */

typedef struct ls_opts {
    bool json;
    const char *learner, *task, *state;
} ls_opts;

static int ls_usage(FILE *f)
{
    fprintf(f, "usage: sandglass ls [--learner L] [--task T] [--state S] [--json]\n"
               "       sandglass ls --all-hosts [...] (every registered host's: ls --all-hosts --help)\n"
               "\n"
               "Lists this state directory's sandboxes (the pool's spares left out): id,\n"
               "state (running, aborted and why, starting, dead), created, last active (the\n"
               "newest captured event or terminal output), execs running now (\"?\": its\n"
               "supervisor did not answer within %d ms), terminals attached, the command\n"
               "running now (a shell's typed command; \"-\" at its prompt), expires (when\n"
               "the session's lifecycle ends it, and why), learner, task, workspace; a\n"
               "captured one whose ingest cannot be reached or rejects its token says so,\n"
               "with the events its spool keeps.\n"
               "\n"
               "  --learner L  only that learner's sandboxes\n"
               "  --task T     only that task's\n"
               "  --state S    only those in state S: running, aborted, starting or dead\n"
               "  --json       a JSON array of the sandboxes' records, with state,\n"
               "               last_active (RFC 3339 or null), running_execs, attached, now\n"
               "               and unacked_events (each null: not known), abort {by, reason},\n"
               "               expiry {at, why} and uplink {state:\n"
               "               connected|unreachable|rejected|error, reason, since}\n",
            LS_INFO_TIMEOUT_MS);
    return 0;
}

static int ls_parse(int argc, char **argv, ls_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--help") == 0) {
            return ls_usage(stdout);
        } else if (strcmp(a, "--learner") == 0 || strcmp(a, "--task") == 0 || strcmp(a, "--state") == 0) {
            if (i + 1 >= argc)
                return sg_cli_usage("ls", "%s needs a value", a);
            *(a[2] == 'l' ? &o->learner : a[3] == 'a' ? &o->task : &o->state) = argv[++i];
        } else {
            return sg_cli_usage("ls", "unknown option '%s'", a);
        }
    }
    static const char *const states[] = {"running", "aborted", "starting", "dead"};
    bool known = !o->state;
    for (size_t i = 0; i < sizeof states / sizeof states[0] && !known; i++)
        known = strcmp(o->state, states[i]) == 0;
    if (!known) {
        char vb[80];
        return sg_cli_usage("ls", "--state: '%s' is not running, aborted, starting or dead",
                            sg_vis(o->state, strlen(o->state), vb, sizeof vb));
    }
    return -1;
}

/* The record of sandbox id and what ls shows of it, into r: false when it
 * is not listed (a pool's spare, another learner's or task's). */
static bool ls_load(const ls_opts *o, const char *id, ls_row *r)
{
    *r = (ls_row){.execs = -1, .attached = -1, .unacked = -1};
    if (sg_sandbox_meta_load(id, &r->m, NULL) < 0)
        return false;
    sg_sandbox_meta *m = &r->m;
    if (strcmp(m->learner, SG_POOL_LEARNER) == 0 || /* a spare: `sandglass pool` counts those */
        (o->learner && strcmp(m->learner, o->learner) != 0) ||
        (o->task && (!m->task || strcmp(m->task, o->task) != 0))) {
        sg_sandbox_meta_clear(m);
        return false;
    }
    r->state = m->supervisor_pid == 0 ? "starting" : ls_state(m);
    /* An aborted session says so, and why (state.h keeps the abort). */
    r->aborted = sg_state_abort_load(m->id, r->by, sizeof r->by, r->reason, sizeof r->reason) == 1;
    if (r->aborted && strcmp(r->state, "running") == 0)
        r->state = "aborted";
    if (o->state && strcmp(r->state, o->state) != 0) {
        sg_sandbox_meta_clear(m);
        return false;
    }
    /* A captured sandbox whose events do not reach the ingest says so
     * (the capture records its uplink's state: state.h). */
    r->uplink = m->task && sg_state_uplink_load(m->id, &r->u) == 1;
    time_t spool = sg_cli_newest_mtime(m->id, "spool"), casts = sg_cli_newest_mtime(m->id, "casts");
    r->last_active = spool > casts ? spool : casts;
    r->expiry = strcmp(r->state, "dead") != 0 &&
                sg_state_expiry_load(m->id, &r->exp_at, r->exp_why, sizeof r->exp_why) == 1;
    return true;
}

int sg_cmd_ls(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--all-hosts") == 0)
            return sg_cli_handoff("ls", argv); /* sandglassd's: it speaks HTTP to the ingest */
    ls_opts o = {0};
    int rc = ls_parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("ls", err.msg);
    sg_autostrv char **ids = sg_state_list(&err);
    if (!ids)
        return sg_cli_fail("ls", err.msg);
    size_t n = 0, total = 0;
    while (ids[total])
        total++;
    sg_autofree ls_row *rows = calloc(total + 1, sizeof *rows);
    if (!rows)
        return sg_cli_fail("ls", "out of memory");
    for (size_t i = 0; i < total; i++)
        if (ls_load(&o, ids[i], &rows[n]))
            n++;
    ls_ask_all(rows, n);
    sg_autojson json_t *arr = o.json ? json_array() : NULL;
    if (!o.json)
        ls_header();
    for (size_t i = 0; i < n; i++) {
        if (arr)
            json_array_append_new(arr, ls_json(&rows[i]));
        else
            ls_print(&rows[i]);
        sg_sandbox_meta_clear(&rows[i].m);
    }
    if (arr) {
        sg_autofree char *s = sg_json_dump(arr);
        printf("%s\n", s);
    }
    return 0;
}

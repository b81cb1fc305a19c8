#include "capture/capture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "capture/budget.h"
#include "capture/contents.h"
#include "capture/junit.h"
#include "capture/procevents.h"
#include "capture/testrule.h"
#include "capture/testsummary.h"
#include "capture/watch.h"
#include "delivery/spool.h"
#include "delivery/uplink_client.h"
#include "wire/ctl.h"
#include "wire/event.h"

struct sg_capture {
    uv_loop_t *loop;
    char id[32];
    sg_spool *spool;
    sg_uplink_client *uplink;  /* to the per-host uplink daemon (delivery/uplink_daemon.h) */
    sg_watch *watch;
    sg_contents *contents; /* file contents into the spool (contents.h); NULL: none */
    sg_procevents *procs; /* programs run inside, from the kernel; NULL: unavailable */
    uv_check_t check;
    uv_timer_t heartbeat;
    bool unsynced;
    bool closed;
    int running;       /* execs in flight, for the heartbeat's state */
    struct sg_capture_exec *inflight; /* those execs, newest first: the heartbeat names them */
    /* file_diff events in this window (an exec, or the time between two):
     * past SG_CAPTURE_DIFFS_MAX they are counted, and one limit event
     * sums them up when the window closes. */
    uint64_t diffs, diffs_dropped;
    uint64_t max_diffs; /* create's --max-file-events: past it, `bulk` events */
    bool diffs_linger;  /* an exec ended with changes pending: its window stays open */
    /* The session's per-minute budgets (budget.h); exempt: the events of
     * an exec op (its caller waits on them; max_execs bounds them) are
     * counted but never dropped. */
    sg_budget budget;
    char window_start[40]; /* the open window's start, RFC 3339 */
    bool exempt;
    /* Capture lost to a full disk, kept until its report is on disk: a
     * report that cannot be written itself must not swallow the count. */
    sg_spool_loss loss;
    /* The uplink's state as last recorded for `ls` (state.h). */
    char uplink_state[SG_UPLINK_STATE_MAX];
    char uplink_reason[SG_UPLINK_REASON_MAX];
    /* The terminals' reader (sg_capture_set_before_changes) */
    void (*before_fn)(void *ud);
    void *before_ud;
    void (*changes_fn)(void *ud); /* the workspace changed (sg_capture_set_on_changes) */
    void *changes_ud;
    json_t *operator; /* an operator's action under way: its changes' cause */
};

/* The last SG_OUTPUT_CAPTURE_MAX bytes of a stream. */
typedef struct tail {
    char buf[SG_OUTPUT_CAPTURE_MAX];
    size_t start, len;
    uint64_t total;
} tail;

struct sg_capture_exec {
    sg_capture *c;
    struct sg_capture_exec *prev, *next; /* c->inflight */
    uint64_t start_ns;
    uint32_t id;
    char *cmd;
    bool is_test;
    bool batch; /* an exec op's, not a command a terminal's marks announced */
    bool shell; /* a batch exec whose terminal's marks announced commands */
    int64_t command_id; /* a shell command's: its `command` event's seq; 0: none */
    json_t *tool;
    char *junit;            /* a test's JUnit report, workspace-relative (junit.h); NULL: none */
    int64_t start_coarse_ns; /* CLOCK_REALTIME_COARSE at the start, as file times are taken */
    tail out, err;
};

#define log_line(...) sg_log(SG_LOG_WARN, "capture: " __VA_ARGS__)

/* A path cut to SG_CAPTURE_PATH_CUT bytes (at a UTF-8 boundary), for an
 * event that would not fit the ingest's frame otherwise. */
#define SG_CAPTURE_PATH_CUT 4096
static void cut_path(json_t *p, const char *key)
{
    const char *v = json_string_value(json_object_get(p, key));
    size_t n = v ? strlen(v) : 0;
    if (n <= SG_CAPTURE_PATH_CUT)
        return;
    size_t k = SG_CAPTURE_PATH_CUT;
    while (k && ((unsigned char)v[k] & 0xC0) == 0x80)
        k--;
    char flag[48];
    snprintf(flag, sizeof flag, "%s_bytes", key);
    json_object_set_new(p, flag, json_integer((json_int_t)n));
    json_object_set_new(p, key, json_stringn(v, k));
}

/* An event whose frame would pass the ingest's limit (SG_FRAME_MAX) is
 * refused there, so it is made smaller here, never dropped in silence: a
 * file_diff (a learner's path can be hundreds of KB, three bytes per
 * invalid byte, more in the diff's quoted header) loses its diff and hex
 * forms and keeps its paths' first 4 KiB (with their full lengths); any
 * other kind, or one still too big, becomes a `limit` event saying so. */
static json_t *shrink_diff(const json_t *payload, size_t bytes)
{
    json_t *p = json_deep_copy(payload);
    if (!p)
        return NULL;
    json_object_del(p, "diff");
    json_object_del(p, "path_hex");
    json_object_del(p, "old_path_hex");
    cut_path(p, "path");
    cut_path(p, "old_path");
    json_object_set_new(p, "truncated", json_true());
    json_object_set_new(p, "event_bytes", json_integer((json_int_t)bytes));
    return p;
}

#define FRAME_ROOM (SG_FRAME_MAX - 4096) /* the frame's own keys and a resend's margin */

/* Appends one event; its bytes, or -1 when the spool could not take it. */
static int64_t emit(sg_capture *c, sg_event_kind kind, json_t *payload)
{
    if (!c || c->closed) {
        json_decref(payload);
        return -1;
    }
    int64_t seq = sg_spool_next_seq(c->spool);
    sg_autojson json_t *frame = sg_event_frame(seq, kind, payload, NULL, c->id);
    if (!frame) {
        log_line("cannot build a %s event", sg_event_kind_name((int)kind));
        return -1;
    }
    c->unsynced = true;
    sg_autofree char *line = sg_json_dump(frame);
    const char *name = sg_event_kind_name((int)kind);
    for (int round = 0; line && strlen(line) > FRAME_ROOM && round < 2; round++) {
        size_t bytes = strlen(line);
        bool diff = kind == SG_EV_FILE_DIFF && round == 0;
        json_t *small = diff ? shrink_diff(json_object_get(frame, "payload"), bytes)
                             : json_pack("{s:s, s:s, s:I, s:I}", "what", "event_size", "kind", name, "bytes",
                                         (json_int_t)bytes, "limit", (json_int_t)SG_FRAME_MAX);
        log_line("a %s event of %zu bytes passes the frame limit: %s", name, bytes,
                 diff ? "its diff and long paths cut" : "a limit event instead");
        json_decref(frame);
        frame = sg_event_frame(seq, diff ? kind : SG_EV_LIMIT, small, NULL, c->id);
        free(line);
        line = frame ? sg_json_dump(frame) : NULL;
    }
    sg_err err = {0};
    if (!line || sg_spool_append(c->spool, seq, line, strlen(line), &err) < 0) {
        log_line("spool append of seq %lld failed: %s", (long long)seq, line ? err.msg : "out of memory");
        return -1;
    }
    return (int64_t)strlen(line);
}

/* ---- budgets ------------------------------------------------------------------ */

static json_t *budget_limits_json(const sg_capture *c)
{
    json_t *j = json_object();
    for (sg_budget_kind k = 0; k < SG_BUDGET_KINDS; k++)
        json_object_set_new(j, sg_budget_name(k),
                            c->budget.limit[k] ? json_integer((json_int_t)c->budget.limit[k]) : json_null());
    return j;
}

/* The window's clock: a window past its minute closes (its summary is
 * recorded when it dropped anything) and the next opens. */
static void budget_roll(sg_capture *c, bool end)
{
    uint64_t was = c->budget.window_ns;
    char start[sizeof c->window_start];
    memcpy(start, c->window_start, sizeof start);
    sg_budget_window w;
    bool due = sg_budget_roll(&c->budget, sg_now_mono_ns(), end, &w);
    if (c->budget.window_ns != was)
        sg_now_iso8601(c->window_start, sizeof c->window_start);
    if (!due)
        return;
    log_line("budget: the window from %s dropped %llu event(s) and %llu checkpoint(s)", start,
             (unsigned long long)w.dropped_events, (unsigned long long)w.dropped_checkpoints);
    int64_t n = emit(c, SG_EV_LIMIT, json_pack("{s:s, s:s, s:s, s:f, s:I, s:I, s:I, s:I, s:I, s:o}",
        "what", "budget", "state", "window_end", "window_start", start, "window_s", w.length_s,
        "events", (json_int_t)w.used[SG_BUDGET_EVENTS], "bytes", (json_int_t)w.used[SG_BUDGET_BYTES],
        "checkpoints", (json_int_t)w.used[SG_BUDGET_CHECKPOINTS],
        "dropped_events", (json_int_t)w.dropped_events,
        "dropped_checkpoints", (json_int_t)w.dropped_checkpoints, "limits", budget_limits_json(c)));
    if (n > 0)
        sg_budget_stored(&c->budget, (uint64_t)n);
}

/* The one report of a budget reached in this window. */
static void budget_reached(sg_capture *c, sg_budget_kind k)
{
    log_line("budget: %s per minute reached (%llu) in the window from %s", sg_budget_name(k),
             (unsigned long long)c->budget.limit[k], c->window_start);
    int64_t n = emit(c, SG_EV_LIMIT, json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:i, s:s}",
        "what", "budget", "state", "reached", "budget", sg_budget_name(k),
        "limit", (json_int_t)c->budget.limit[k], "count", (json_int_t)c->budget.used[k],
        "window_start", c->window_start, "window_s", SG_BUDGET_WINDOW_S, "note",
        k == SG_BUDGET_CHECKPOINTS
            ? "no more automatic checkpoints in this window"
            : "the rest of this window's events are counted, not stored (sandbox, session_abort, "
              "rollback, checkpoint, limit and an exec op's own events excepted)"));
    if (n > 0)
        sg_budget_stored(&c->budget, (uint64_t)n);
}

/* Kinds never dropped: the sandbox's life and the operator's acts, and
 * checkpoints (their own budget decides whether one is taken at all). */
static bool never_dropped(const sg_capture *c, sg_event_kind kind)
{
    return c->exempt || kind == SG_EV_SANDBOX || kind == SG_EV_SESSION_ABORT ||
           kind == SG_EV_ROLLBACK || kind == SG_EV_CHECKPOINT;
}

/* Whether the open window is past its events or bytes budget: a droppable
 * event is then counted instead of made. */
static bool budget_full(sg_capture *c)
{
    budget_roll(c, false);
    return sg_budget_over(&c->budget);
}

bool sg_capture_checkpoint_budget(sg_capture *c)
{
    if (!c || c->closed)
        return true;
    budget_roll(c, false);
    bool first = false;
    if (sg_budget_checkpoint(&c->budget, &first))
        return true;
    if (first)
        budget_reached(c, SG_BUDGET_CHECKPOINTS);
    return false;
}

void sg_capture_processes_end(sg_capture *c)
{
    if (c)
        sg_procevents_finish(c->procs);
}

void sg_capture_emit(sg_capture *c, sg_event_kind kind, json_t *payload)
{
    if (!c || c->closed) {
        json_decref(payload);
        return;
    }
    if (budget_full(c) && !never_dropped(c, kind)) {
        sg_budget_drop(&c->budget);
        json_decref(payload);
        return;
    }
    int64_t n = emit(c, kind, payload);
    sg_budget_kind k = n > 0 ? sg_budget_stored(&c->budget, (uint64_t)n) : SG_BUDGET_KINDS;
    if (k != SG_BUDGET_KINDS)
        budget_reached(c, k);
}

static void loss_merge(sg_spool_loss *into, const sg_spool_loss *l)
{
    if (!l->count)
        return;
    if (!into->count) {
        *into = *l;
        return;
    }
    into->count += l->count;
    if (l->first_seq < into->first_seq)
        into->first_seq = l->first_seq;
    if (l->last_seq > into->last_seq)
        into->last_seq = l->last_seq;
}

/* After a good sync: reports the capture lost so far, once. If the report
 * cannot be made durable (the disk is still full) the count is kept for
 * the next sync, and the failed report is not itself counted as a loss. */
static void report_loss(sg_capture *c)
{
    sg_spool_loss l;
    if (sg_spool_take_loss(c->spool, &l))
        loss_merge(&c->loss, &l);
    if (!c->loss.count)
        return;
    sg_err err = {0};
    int64_t r = emit(c, SG_EV_LIMIT, json_pack("{s:s, s:I, s:I, s:I, s:s}",
        "what", "capture_lost", "count", (json_int_t)c->loss.count,
        "first_seq", (json_int_t)c->loss.first_seq, "last_seq", (json_int_t)c->loss.last_seq,
        "error", strerror(c->loss.err)));
    if (r >= 0 && sg_spool_sync(c->spool, &err) < 0) {
        log_line("spool sync failed: %s", err.msg);
        r = -1;
    }
    c->unsynced = false;
    if (r < 0) {
        sg_spool_take_loss(c->spool, &l); /* only the report itself */
        return;
    }
    memset(&c->loss, 0, sizeof c->loss);
}

void sg_capture_sync(sg_capture *c)
{
    if (!c || !c->unsynced)
        return;
    c->unsynced = false;
    sg_err err = {0};
    if (sg_spool_sync(c->spool, &err) < 0) {
        log_line("spool sync failed: %s", err.msg);
        return;
    }
    report_loss(c);
    sg_uplink_client_notify(c->uplink);
}

static void on_check(uv_check_t *h)
{
    sg_capture_sync(h->data);
}

/* What a change was made by (docs/EVENTS.md, "Causes"): an operator's
 * action under way; else the newest exec in flight, a shell's typed
 * command when one runs; at a shell's prompt (or with nothing in
 * flight), the command whose background job last started a program, if
 * the process events know one; else the shell's exec alone. */
static void add_cause(sg_capture *c, json_t *p)
{
    if (c->operator) {
        json_object_set(p, "operator", c->operator);
        return;
    }
    const sg_capture_exec *e = c->inflight;
    uint32_t bx = 0;
    int64_t bc = 0;
    if (e && !e->shell) {
        json_object_set_new(p, "exec_id", json_integer(e->id));
        if (e->command_id)
            json_object_set_new(p, "command_id", json_integer(e->command_id));
    } else if (sg_procevents_last_background(c->procs, &bx, &bc) && (!e || bx == e->id)) {
        json_object_set_new(p, "exec_id", json_integer(bx));
        json_object_set_new(p, "command_id", json_integer(bc));
        json_object_set_new(p, "background", json_true());
    } else if (e) {
        json_object_set_new(p, "exec_id", json_integer(e->id));
    }
}

void sg_capture_set_operator(sg_capture *c, const json_t *action)
{
    if (!c)
        return;
    if (!action) /* what it changed is reported before it is over */
        sg_capture_flush_watch(c);
    json_decref(c->operator);
    c->operator = action ? json_deep_copy(action) : NULL;
}

static void on_file_change(void *ud, json_t *payload)
{
    sg_capture *c = ud;
    add_cause(c, payload);
    if (c->diffs >= c->max_diffs) {
        c->diffs_dropped++;
        json_decref(payload);
        return;
    }
    c->diffs++;
    sg_contents_capture(c->contents, c->spool, payload);
    sg_watch_charge_read(c->watch, sg_contents_take_read(c->contents));
    sg_capture_emit(c, SG_EV_FILE_DIFF, payload);
}

/* Closes a window of file_diff events: the summary of what went over. */
static void diffs_window_end(sg_capture *c)
{
    if (c->diffs_dropped)
        sg_capture_emit(c, SG_EV_LIMIT, json_pack("{s:s, s:I, s:I, s:s}", "what", "file_diff",
            "limit", (json_int_t)c->max_diffs, "not_reported", (json_int_t)c->diffs_dropped,
            "note", "more changed files than the limit: the rest are listed in bulk events"));
    c->diffs = c->diffs_dropped = 0;
    c->diffs_linger = false;
}

/* The watcher reported what an exec's end left pending: its window closes. */
static void on_watch_drained(void *ud)
{
    sg_capture *c = ud;
    if (c->diffs_linger)
        diffs_window_end(c);
}

/* The watcher asks before it makes a payload: past the budget the diff
 * and the JSON are not made at all, only counted. */
static bool diffs_gate(void *ud)
{
    sg_capture *c = ud;
    if (budget_full(c)) { /* the session's budget bounds the per-exec cap */
        sg_budget_drop(&c->budget);
        return false;
    }
    if (c->diffs < c->max_diffs)
        return true;
    c->diffs_dropped++;
    return false;
}

/* The changes past the per-exec limit, listed (watch.h). */
static void on_watch_bulk(void *ud, json_t *payload)
{
    sg_capture *c = ud;
    add_cause(c, payload);
    json_object_set_new(payload, "limit", json_integer((json_int_t)c->max_diffs));
    sg_contents_capture_bulk(c->contents, c->spool, payload); /* the paths past the limit: their contents too */
    sg_watch_charge_read(c->watch, sg_contents_take_read(c->contents));
    sg_capture_emit(c, SG_EV_BULK, payload);
}

static void on_watch_limit(void *ud, json_t *payload)
{
    sg_capture_emit(ud, SG_EV_LIMIT, payload);
}

static void on_procevent(void *ud, sg_event_kind kind, json_t *payload)
{
    sg_capture_emit(ud, kind, payload);
}

/* Process events, unless SANDGLASS_PROCEVENTS=0 (benchmarks compare). Not
 * available (rootless: no CAP_NET_ADMIN) is said once, as a limit event. */
static void procs_start(sg_capture *c, pid_t init_pid)
{
    const char *env = getenv("SANDGLASS_PROCEVENTS");
    if (init_pid <= 0 || (env && strcmp(env, "0") == 0))
        return;
    sg_err err = {0};
    c->procs = sg_procevents_new(c->loop, init_pid, on_procevent, c, &err);
    if (!c->procs) {
        log_line("no process events: %s", err.msg);
        sg_capture_emit(c, SG_EV_LIMIT, json_pack("{s:s, s:s, s:s}", "what", "process", "state", "unavailable",
                                              "error", err.msg));
    }
}

static void on_uplink_event(void *ud, const sg_uplink_event *ev)
{
    sg_capture *c = ud;
    static const char *names[] = {"connected", "disconnected", "refused", "error"};
    log_line("uplink %s (%d): %s; retry in %u ms", names[ev->type < 4 ? ev->type : 3], ev->code,
             ev->reason, ev->retry_ms);
    /* What `ls` shows: recorded at each change only (a retry every few
     * seconds that fails the same way writes nothing). */
    const char *state = ev->type == SG_UPLINK_CONNECTED ? "connected"
                      : ev->type == SG_UPLINK_DISCONNECTED ? "unreachable"
                      : ev->type == SG_UPLINK_REFUSED ? "rejected" : "error";
    char reason[SG_UPLINK_REASON_MAX];
    if (ev->type == SG_UPLINK_REFUSED && ev->code)
        snprintf(reason, sizeof reason, "%d %s", ev->code, ev->reason);
    else
        snprintf(reason, sizeof reason, "%s", ev->reason); /* connected: to which node */
    if (strcmp(state, c->uplink_state) == 0 && strcmp(reason, c->uplink_reason) == 0)
        return;
    sg_err err = {0};
    if (sg_state_uplink_save(c->id, state, reason, &err) < 0) {
        log_line("%s", err.msg);
        return;
    }
    snprintf(c->uplink_state, sizeof c->uplink_state, "%s", state);
    snprintf(c->uplink_reason, sizeof c->uplink_reason, "%s", reason);
}

struct sg_procevents *sg_capture_procevents(sg_capture *c)
{
    return c ? c->procs : NULL;
}

struct sg_watch *sg_capture_watch(sg_capture *c)
{
    return c ? c->watch : NULL;
}

uint64_t sg_capture_pending(const sg_capture *c)
{
    return c ? sg_spool_pending(c->spool) : 0;
}

void sg_capture_backlog(const sg_capture *c, uint64_t *events, uint64_t *bytes)
{
    sg_spool_stats st = {0};
    if (c)
        sg_spool_get_stats(c->spool, &st);
    *events = st.pending;
    *bytes = st.pending_bytes;
}

/* The heartbeat's period: SANDGLASS_CAPTURE_HEARTBEAT_MS overrides the
 * 30 s so tests watch heartbeats come (or keep them out of a count) without
 * waiting 30 s. */
static uint64_t heartbeat_ms(void)
{
    uint64_t v = 0;
    sg_err e = {0};
    const char *env = getenv("SANDGLASS_CAPTURE_HEARTBEAT_MS");
    return env && sg_parse_uint(env, 24ull * 3600 * 1000, &v, &e) == 0 && v > 0 ? v
                                                                              : SG_CAPTURE_HEARTBEAT_MS;
}

/* The commands running now, oldest first, each with how long so far: a
 * long command is seen running between its `command` and its result. At
 * most HEARTBEAT_RUNNING_MAX, each line cut to HEARTBEAT_CMD_MAX bytes. */
#define HEARTBEAT_RUNNING_MAX 16
#define HEARTBEAT_CMD_MAX 200
static json_t *running_json(const sg_capture *c)
{
    const struct sg_capture_exec *last = c->inflight;
    while (last && last->next)
        last = last->next;
    json_t *a = json_array();
    uint64_t now = sg_now_mono_ns();
    for (const struct sg_capture_exec *e = last; e && json_array_size(a) < HEARTBEAT_RUNNING_MAX; e = e->prev) {
        size_t n = e->cmd ? strlen(e->cmd) : 0;
        if (n > HEARTBEAT_CMD_MAX) { /* cut at a UTF-8 boundary */
            n = HEARTBEAT_CMD_MAX;
            while (n && ((unsigned char)e->cmd[n] & 0xC0) == 0x80)
                n--;
        }
        json_array_append_new(a, json_pack("{s:I, s:s%, s:f}", "exec_id", (json_int_t)e->id, "cmd",
                                           e->cmd ? e->cmd : "", n, "for_s", (double)(now - e->start_ns) / 1e9));
    }
    return a;
}

static void on_heartbeat(uv_timer_t *t)
{
    sg_capture *c = t->data;
    json_t *p = json_pack("{s:s, s:I}", "state", c->running ? "command" : "idle", "spooled",
                          (json_int_t)sg_capture_pending(c));
    if (p && c->inflight)
        json_object_set_new(p, "running", running_json(c));
    sg_capture_emit(c, SG_EV_ACTIVITY, p);
}

void sg_capture_flush_watch(sg_capture *c)
{
    sg_err err = {0};
    if (c && c->watch && sg_watch_flush(c->watch, &err) < 0)
        log_line("watcher flush: %s", err.msg);
}

/* Before changes are reported: the terminals' marks, then the programs
 * started (a background job's tells whose a change at a prompt is). */
static void before_changes(void *ud)
{
    sg_capture *c = ud;
    if (c->changes_fn)
        c->changes_fn(c->changes_ud);
    if (c->before_fn)
        c->before_fn(c->before_ud);
    sg_procevents_drain(c->procs);
}

void sg_capture_set_before_changes(sg_capture *c, void (*fn)(void *ud), void *ud)
{
    if (!c)
        return;
    c->before_fn = fn;
    c->before_ud = ud;
    if (c->watch)
        sg_watch_set_before_settle(c->watch, before_changes, c);
    sg_procevents_set_before_read(c->procs, fn, ud);
}

void sg_capture_set_on_changes(sg_capture *c, void (*fn)(void *ud), void *ud)
{
    if (!c)
        return;
    c->changes_fn = fn;
    c->changes_ud = ud;
}

static void seed_emit(void *ud, json_t *payload)
{
    sg_capture *c = ud;
    if (c->operator) /* the seeding's: set by sg_capture_new around it */
        json_object_set(payload, "operator", c->operator);
    sg_capture_emit(c, SG_EV_FILE_DIFF, payload);
}

sg_capture *sg_capture_new(uv_loop_t *loop, const sg_sandbox_meta *m, bool resumed,
                           sg_diff_fn differ, void *differ_ud, sg_err *err)
{
    sg_capture *c = calloc(1, sizeof *c);
    if (!c) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    c->loop = loop;
    snprintf(c->id, sizeof c->id, "%s", m->id);
    sg_budget_init(&c->budget, m->max_events_per_min, m->max_bytes_per_min, m->max_checkpoints_per_min);
    c->max_diffs = m->max_file_events;
    sg_autofree char *dir = sg_state_sandbox_path(m->id, "spool");
    sg_spool_report rep;
    c->spool = sg_spool_open(dir, &rep, err);
    if (!c->spool) {
        sg_err_prefix(err, "cannot open the capture spool");
        free(c);
        return NULL;
    }
    if (rep.text[0])
        log_line("spool recovery: %s", rep.text);

    /* The token is made by the uplink daemon, which signs with libcrypto:
     * this process maps neither it nor libwebsockets. */
    sg_autofree char *default_secret = sg_state_path("ingest/secret");
    sg_uplink_client_config ucfg = {
        .sandbox = m->id, .url = m->ingest_url, .learner = m->learner, .task = m->task,
        .spool_dir = dir, .secret_file = m->secret_file, .ca_file = m->ingest_ca,
        .secret_create = m->secret_file && strcmp(m->secret_file, default_secret) == 0,
    };
    c->uplink = sg_uplink_client_new(loop, &ucfg, c->spool, err);
    if (!c->uplink) {
        sg_err_prefix(err, "cannot start the uplink to %s", m->ingest_url);
        sg_spool_close(c->spool);
        free(c);
        return NULL;
    }
    sg_uplink_client_set_event_cb(c->uplink, on_uplink_event, c);
    sg_err cerr = {0};
    c->contents = sg_contents_new(m->workspace, m->capture_max_file, &cerr);
    if (!c->contents)
        log_line("file contents are not captured: %s", cerr.msg);
    /* sandglass fork's known files serve the watcher's baseline and the
     * seed of a new session only (removed unread when resumed, or when
     * contents are off) */
    sg_autofree char *known = sg_state_sandbox_path(m->id, SG_CONTENTS_KNOWN_NAME);
    if (c->contents && !resumed)
        sg_contents_load_known(c->contents, known);
    else if (known)
        unlink(known);
    /* the operator's ignore list (checked at create), or the default */
    sg_ignore *ig = sg_ignore_parse(sg_ignore_effective(m->capture_ignore), err);
    c->watch = ig ? sg_watch_new_ext(loop, m->workspace, on_file_change, c, differ, differ_ud, ig, true,
                                     sg_contents_known_sha, c->contents, err)
                  : NULL;
    if (!c->watch) {
        sg_err_prefix(err, "cannot watch the workspace");
        sg_uplink_client_close(c->uplink);
        sg_capture_free(c);
        return NULL;
    }
    sg_watch_set_limit_cb(c->watch, on_watch_limit, c);
    sg_watch_set_gate(c->watch, diffs_gate, c);
    sg_watch_set_bulk_cb(c->watch, on_watch_bulk, c);
    sg_watch_set_drained_cb(c->watch, on_watch_drained, c);
    uv_check_init(loop, &c->check);
    c->check.data = c;
    uv_check_start(&c->check, on_check);
    uv_timer_init(loop, &c->heartbeat);
    c->heartbeat.data = c;
    uint64_t hb = heartbeat_ms();
    uv_timer_start(&c->heartbeat, on_heartbeat, hb, hb);

    json_t *sb = json_pack("{s:s, s:s, s:s, s:{s:I, s:I, s:f, s:f}}",
        "state", resumed ? "resumed" : "created", "learner", m->learner, "task", m->task,
        "limits", "memory", (json_int_t)m->memory, "pids", (json_int_t)m->pids,
        "cpus", m->cpus, "timeout_s", m->timeout_s);
    json_object_set_new(sb, "budgets_per_min", budget_limits_json(c));
    json_t *from = m->forked_from && !resumed ? json_loads(m->forked_from, 0, NULL) : NULL;
    if (from) /* sandglass fork: the moment its workspace was rebuilt from */
        json_object_set_new(sb, "forked_from", from);
    json_t *seeded = m->from && !resumed ? json_loads(m->from, 0, NULL) : NULL;
    if (seeded) /* create --from: what the workspace was seeded with */
        json_object_set_new(sb, "from", seeded);
    /* who created it (none in a record from before the field) */
    sg_autojson json_t *actor = m->creator && !resumed ? json_loads(m->creator, 0, NULL) : NULL;
    if (actor)
        json_object_set(sb, "actor", actor);
    if (rep.torn || rep.quarantined || rep.blobs_dropped)
        json_object_set_new(sb, "spool_recovery", json_pack("{s:I, s:I, s:I, s:I}",
            "torn", (json_int_t)rep.torn, "quarantined", (json_int_t)rep.quarantined,
            "records", (json_int_t)rep.records, "blobs_dropped", (json_int_t)rep.blobs_dropped));
    sg_capture_emit(c, SG_EV_SANDBOX, sb);
    sg_capture_emit(c, SG_EV_ACTIVITY, json_pack("{s:s, s:I}", "state", "starting",
                                             "spooled", (json_int_t)sg_capture_pending(c)));
    if (!resumed) { /* the workspace it starts from, so every later state can be rebuilt */
        /* put there by whoever created the sandbox: an operator's action,
         * its cause (nothing else changes the workspace before the seed) */
        c->operator = json_pack("{s:s}", "action", "seed");
        if (c->operator && actor)
            json_object_set(c->operator, "actor", actor);
        sg_contents_seed(c->contents, c->spool, seed_emit, c);
        json_decref(c->operator);
        c->operator = NULL;
    }
    procs_start(c, m->init_pid);
    sg_capture_sync(c);
    return c;
}

sg_capture *sg_capture_new_on_spool(const char *sandbox_id, sg_spool *spool, sg_err *err)
{
    sg_capture *c = calloc(1, sizeof *c);
    if (!c) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(c->id, sizeof c->id, "%s", sandbox_id);
    sg_budget_init(&c->budget, 0, 0, 0);
    c->max_diffs = SG_FILE_EVENTS_DEFAULT;
    c->spool = spool;
    return c;
}

/* ---- execs -------------------------------------------------------------------- */

/* A file tool's call reads as what it does ("write_file /workspace/a.py"),
 * not as the shell script that does it in the sandbox; run_bash reads as
 * its command (the argv's). NULL: the argv's command line. */
static char *tool_cmdline(const json_t *tool)
{
    const char *name = json_string_value(json_object_get(tool, "name"));
    const char *path = json_string_value(json_object_get(json_object_get(tool, "arguments"), "path"));
    if (!name || !path || strcmp(name, "run_bash") == 0)
        return NULL;
    return sg_strdup_printf("%s %s", name, path);
}

/* A command a terminal's marks announced, past the session's budget: its
 * `events` events would be dropped, so none is made (they are counted),
 * nor is the watcher flushed for it: forged marks cost no host work per
 * command beyond their bytes. An exec op's events are never dropped. */
static bool exec_quiet(sg_capture_exec *e, unsigned events)
{
    if (e->batch || !budget_full(e->c))
        return false;
    for (unsigned i = 0; i < events; i++)
        sg_budget_drop(&e->c->budget);
    return true;
}

/* The JUnit report the test command asks for, if it is in the workspace
 * (mounted at /workspace in the sandbox; cwd is the command's there). */
static void junit_begin(sg_capture_exec *e, char *const *argv, const char *cwd)
{
    char arg[SG_JUNIT_PATH_MAX];
    if (!e->c->contents || !sg_junit_report_arg(argv, arg))
        return;
    sg_autofree char *full = arg[0] == '/' ? strdup(arg) : sg_strdup_printf("%s/%s", cwd ? cwd : "/workspace", arg);
    if (!full || strncmp(full, "/workspace/", 11) != 0 || !full[11])
        return;
    e->junit = strdup(full + 11);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    e->start_coarse_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The report's counts and names in place of the output's, when the runner
 * wrote it during this exec (an older one says nothing of this run). */
static void junit_end(const sg_capture_exec *e, sg_testsummary *s, json_t *r)
{
    size_t len = 0;
    int64_t mtime = 0;
    sg_capture *c = e->c;
    const char *buf = sg_contents_read_file(c->contents, e->junit, SG_JUNIT_MAX_BYTES, &len, &mtime);
    sg_watch_charge_read(c->watch, sg_contents_take_read(c->contents));
    sg_autofree sg_testsummary *j = buf && mtime >= e->start_coarse_ns ? malloc(sizeof *j) : NULL;
    if (!j || sg_junit_parse(buf, len, j) < 0)
        return;
    const char *runner = s->runner;
    *s = *j;
    s->runner = runner ? runner : j->runner;
    size_t n = 0;
    sg_autofree char *p = sg_utf8_sanitize(e->junit, strlen(e->junit), &n);
    json_object_set_new(r, "source", json_string("junit"));
    if (p)
        json_object_set_new(r, "report", json_stringn(p, n));
}

sg_capture_exec *sg_capture_exec_begin(sg_capture *c, uint32_t exec_id, char *const *argv,
                                       const char *cwd, const json_t *tool)
{
    return sg_capture_exec_begin_ex(c, exec_id, argv, cwd, tool, true);
}

sg_capture_exec *sg_capture_exec_begin_ex(sg_capture *c, uint32_t exec_id, char *const *argv,
                                          const char *cwd, const json_t *tool, bool flush_before)
{
    if (!c)
        return NULL;
    sg_capture_exec *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->c = c;
    e->id = exec_id;
    /* Valid UTF-8, as json_pack needs: an invalid byte (the argv array
     * below is sanitized too) must not empty the stdin, command and result
     * payloads. Exec requests come as JSON, so today this is only defence. */
    sg_autofree char *as_tool = tool ? tool_cmdline(tool) : NULL;
    sg_autofree char *cmdline = as_tool ? NULL : sg_exec_cmdline(argv);
    const char *line = as_tool ? as_tool : cmdline;
    size_t cmdlen = 0;
    e->cmd = line ? sg_utf8_sanitize(line, strlen(line), &cmdlen) : NULL;
    e->is_test = !as_tool && sg_testrule_is_test_argv(argv);
    if (e->is_test)
        junit_begin(e, argv, cwd);
    e->batch = flush_before;
    for (sg_capture_exec *x = c->inflight; x && !flush_before; x = x->next)
        if (x->batch && x->id == exec_id)
            x->shell = true;
    e->tool = tool ? json_deep_copy(tool) : NULL;
    c->running++;
    e->start_ns = sg_now_mono_ns();
    e->next = c->inflight;
    if (c->inflight)
        c->inflight->prev = e;
    c->inflight = e;
    /* Changes made before this exec (background processes) come first. */
    if (flush_before) {
        sg_capture_flush_watch(c);
        diffs_window_end(c);
    }
    json_t *av = json_array();
    for (char *const *a = argv; a && *a; a++) {
        size_t n = 0;
        sg_autofree char *s = sg_utf8_sanitize(*a, strlen(*a), &n);
        json_array_append_new(av, json_stringn(s ? s : "", n));
    }
    if (e->batch)
        sg_procevents_exec_begin(c->procs, exec_id, av, cwd);
    if (exec_quiet(e, 3)) {
        json_decref(av);
        return e;
    }
    c->exempt = e->batch;
    sg_capture_emit(c, SG_EV_STDIN, json_pack("{s:s, s:I}", "line", e->cmd ? e->cmd : "", "exec_id", (json_int_t)exec_id));
    sg_capture_emit(c, SG_EV_ACTIVITY, json_pack("{s:s, s:I}", "state", "command",
                                             "spooled", (json_int_t)sg_capture_pending(c)));
    json_t *cmd = json_pack("{s:s, s:o, s:s, s:I}", "cmd", e->cmd ? e->cmd : "", "argv", av, "cwd", cwd,
                            "exec_id", (json_int_t)exec_id);
    if (e->tool)
        json_object_set(cmd, "tool", e->tool);
    /* A typed command's id is its `command` event's seq: the window's
     * summary, if due, goes first so as not to take it. */
    budget_full(c);
    int64_t seq = sg_spool_next_seq(c->spool);
    if (!e->batch)
        json_object_set_new(cmd, "command_id", json_integer(seq));
    sg_capture_emit(c, SG_EV_COMMAND, cmd);
    if (!e->batch && sg_spool_next_seq(c->spool) > seq) {
        e->command_id = seq;
        sg_procevents_command(c->procs, exec_id, seq);
    }
    c->exempt = false;
    return e;
}

static void tail_add(tail *t, const char *buf, size_t len)
{
    t->total += len;
    if (len >= sizeof t->buf) {
        memcpy(t->buf, buf + len - sizeof t->buf, sizeof t->buf);
        t->start = 0;
        t->len = sizeof t->buf;
        return;
    }
    for (size_t i = 0; i < len; i++) {
        size_t pos = (t->start + t->len) % sizeof t->buf;
        t->buf[pos] = buf[i];
        if (t->len < sizeof t->buf)
            t->len++;
        else
            t->start = (t->start + 1) % sizeof t->buf;
    }
}

void sg_capture_exec_output(sg_capture_exec *e, bool is_stderr, const char *buf, size_t len)
{
    if (e)
        tail_add(is_stderr ? &e->err : &e->out, buf, len);
}

/* The tail's bytes in order into dst (t->len bytes). */
static void tail_copy(const tail *t, char *dst)
{
    size_t first = sizeof t->buf - t->start < t->len ? sizeof t->buf - t->start : t->len;
    memcpy(dst, t->buf + t->start, first);
    memcpy(dst + first, t->buf, t->len - first);
}

/* The runner's own counts from both streams' tails (testsummary.h). */
static void add_test_counts(const sg_capture_exec *e, const json_t *result, json_t *r)
{
    sg_autofree char *both = malloc(e->out.len + 1 + e->err.len);
    sg_autofree sg_testsummary *s = malloc(sizeof *s);
    if (!both || !s)
        return;
    tail_copy(&e->out, both);
    both[e->out.len] = '\n';
    tail_copy(&e->err, both + e->out.len + 1);
    if (sg_testsummary_parse(both, e->out.len + 1 + e->err.len, s) < 0)
        return;
    if (e->junit && r)
        junit_end(e, s, r);
    sg_testsummary_to_json(s, result, r);
}

static void emit_stream(sg_capture_exec *e, const char *name, const tail *t)
{
    if (!t->total)
        return;
    sg_autofree char *flat = malloc(t->len + 1);
    if (!flat)
        return;
    tail_copy(t, flat);
    size_t n = 0;
    sg_autofree char *clean = sg_utf8_sanitize(flat, t->len, &n);
    if (!clean)
        return;
    json_t *j = json_pack("{s:s, s:s%, s:I, s:b, s:I}", "stream", name,
        "data", clean, n, "bytes", (json_int_t)t->total, "truncated", t->total > t->len,
        "exec_id", (json_int_t)e->id);
    if (j && e->command_id)
        json_object_set_new(j, "command_id", json_integer(e->command_id));
    sg_capture_emit(e->c, SG_EV_STDOUT, j);
}

static void exec_end_events(sg_capture_exec *e, const json_t *result);

void sg_capture_exec_end(sg_capture_exec *e, const json_t *result)
{
    if (!e)
        return;
    sg_capture *c = e->c;
    /* its programs before its result */
    if (e->batch)
        sg_procevents_exec_end(c->procs, e->id);
    else if (e->command_id)
        sg_procevents_command(c->procs, e->id, 0);
    if (!exec_quiet(e, 2 + (e->out.total > 0) + (e->err.total > 0)))
        exec_end_events(e, result);
    c->running--;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->inflight = e->next;
    if (e->next)
        e->next->prev = e->prev;
    /* The exec's events are on disk before its caller hears of it. */
    sg_capture_sync(c);
    free(e->cmd);
    free(e->junit);
    json_decref(e->tool);
    free(e);
}

/* An exec's end: the watcher's changes, its output, its result, limits. */
static void exec_end_events(sg_capture_exec *e, const json_t *result)
{
    sg_capture *c = e->c;
    sg_capture_flush_watch(c);
    /* A flush is bounded: what it left comes from the loop, and counts in
     * this exec's window, closed when the watcher has drained. */
    if (sg_watch_pending(c->watch))
        c->diffs_linger = true;
    else
        diffs_window_end(c);
    c->exempt = e->batch;
    emit_stream(e, "stdout", &e->out);
    emit_stream(e, "stderr", &e->err);
    json_t *r = json_pack("{s:s, s:O, s:O, s:O, s:I}", "cmd", e->cmd ? e->cmd : "",
        "exit_code", json_object_get(result, "exit_code"),
        "duration_s", json_object_get(result, "wall_s"),
        "timed_out", json_object_get(result, "timed_out"), "exec_id", (json_int_t)e->id);
    static const char *extra[] = {"signal", "cpu_s", "memory_peak", "oom_killed", "pids_limit_hit",
                                  "output_limit_hit", "output_bytes", "aborted", "killed_by"};
    for (size_t i = 0; r && i < SG_ARRAY_LEN(extra); i++) {
        json_t *v = json_object_get(result, extra[i]);
        if (v)
            json_object_set(r, extra[i], v);
    }
    if (r && e->tool)
        json_object_set(r, "tool", e->tool);
    if (r && e->command_id)
        json_object_set_new(r, "command_id", json_integer(e->command_id));
    if (e->is_test)
        add_test_counts(e, result, r);
    sg_capture_emit(c, e->is_test ? SG_EV_TEST_RESULT : SG_EV_RUN_RESULT, r);
    static const struct {
        const char *field, *what;
    } limits[] = {{"oom_killed", "memory"}, {"pids_limit_hit", "pids"},
                  {"timed_out", "timeout"}, {"output_limit_hit", "output"}};
    for (size_t i = 0; i < SG_ARRAY_LEN(limits); i++)
        if (json_is_true(json_object_get(result, limits[i].field)))
            sg_capture_emit(c, SG_EV_LIMIT, json_pack("{s:s, s:s, s:I}", "what", limits[i].what,
                                                  "cmd", e->cmd ? e->cmd : "", "exec_id", (json_int_t)e->id));
    sg_capture_emit(c, SG_EV_ACTIVITY, json_pack("{s:s, s:I}", "state", c->running > 1 ? "command" : "idle",
                                             "spooled", (json_int_t)sg_capture_pending(c)));
    c->exempt = false;
}

/* ---- shutdown ------------------------------------------------------------------ */

int sg_capture_finish(sg_capture *c, uint64_t timeout_ms, sg_err *err)
{
    if (!c)
        return 0;
    sg_capture_processes_end(c);
    budget_roll(c, true); /* what the last window dropped, said before the end */
    sg_capture_emit(c, SG_EV_ACTIVITY, json_pack("{s:s, s:I}", "state", "stopped",
                                             "spooled", (json_int_t)sg_capture_pending(c)));
    sg_capture_sync(c);
    uv_check_stop(&c->check);
    uv_timer_stop(&c->heartbeat);
    return sg_uplink_client_drain(c->uplink, timeout_ms, err);
}

static void on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

void sg_capture_close(sg_capture *c)
{
    if (!c || c->closed)
        return;
    sg_capture_sync(c);
    c->closed = true;
    if (c->watch) {
        sg_watch_free(c->watch);
        c->watch = NULL;
    }
    if (uv_is_active((uv_handle_t *)&c->check) || c->check.loop) {
        uv_check_stop(&c->check);
        if (!uv_is_closing((uv_handle_t *)&c->check))
            uv_close((uv_handle_t *)&c->check, on_handle_closed);
        if (!uv_is_closing((uv_handle_t *)&c->heartbeat))
            uv_close((uv_handle_t *)&c->heartbeat, on_handle_closed);
    }
    sg_procevents_close(c->procs);
    if (c->uplink)
        sg_uplink_client_close(c->uplink);
}

struct sg_spool *sg_capture_spool(sg_capture *c)
{
    return c ? c->spool : NULL;
}

void sg_capture_free(sg_capture *c)
{
    if (!c)
        return;
    /* Execs still running as the supervisor ends (a destroy, a removed
     * state directory) never reach their end: their state goes here. */
    while (c->inflight) {
        sg_capture_exec *e = c->inflight;
        c->inflight = e->next;
        free(e->cmd);
        free(e->junit);
        json_decref(e->tool);
        free(e);
    }
    if (c->watch)
        sg_watch_free(c->watch);
    json_decref(c->operator);
    sg_contents_free(c->contents);
    sg_procevents_free(c->procs);
    if (c->uplink)
        sg_uplink_client_free(c->uplink);
    if (c->spool)
        sg_spool_close(c->spool);
    free(c);
}

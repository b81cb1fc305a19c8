/* capture: what a captured sandbox (one created with a task) records, on
 * the host side, in the supervisor: the events of every exec (stdin,
 * command, stdout, run_result/test_result, limit), file_diff events from
 * the workspace watcher, activity heartbeats, and the sandbox's life
 * (sandbox, session_abort, checkpoint, rollback). Every event is appended
 * to the sandbox's spool (<state>/sb/<id>/spool, never in the workspace)
 * before any send; the uplink streams the spool to the ingest.
 *
 * Group commit: events appended during one loop iteration are made durable
 * with one fdatasync at the end of it (a uv_check handle), and at once
 * before an exec's result goes back to its caller. */
#ifndef SG_CAPTURE_H
#define SG_CAPTURE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/err.h"
#include "checkpoint/diff.h"
#include "state/state.h"
#include "wire/event.h"

#define SG_CAPTURE_HEARTBEAT_MS 30000 /* idle activity heartbeat */
#define SG_CAPTURE_DRAIN_MS 10000    /* destroy waits this long for acks */
/* file_diff events per exec (and per time between two execs); past it one
 * `limit` {what: "file_diff", not_reported: N} sums up the rest. The
 * watcher's own limits (watch.h) come as `limit` events too. */
#define SG_CAPTURE_DIFFS_MAX 1000

typedef struct sg_capture sg_capture;
typedef struct sg_capture_exec sg_capture_exec;

/* Opens the spool (resuming seq after a crash), starts the watcher and the
 * uplink, and emits `sandbox` {state: created|resumed} and `activity`
 * starting. */
/* differ (with differ_ud) makes the file-change diffs (diff.h). */
sg_capture *sg_capture_new(uv_loop_t *loop, const sg_sandbox_meta *m, bool resumed,
                           sg_diff_fn differ, void *differ_ud, sg_err *err);

/* A capture that only records an exec's events into spool (taken: freed
 * with the capture): no loop, uplink, watcher, process events nor budgets.
 * For the harnesses that check the events themselves (fuzz_capture);
 * sg_capture_sync syncs the spool. */
struct sg_spool;
sg_capture *sg_capture_new_on_spool(const char *sandbox_id, struct sg_spool *spool, sg_err *err);

/* Appends one event (payload stolen). Never fails the caller: a spool that
 * cannot take it counts the loss and reports it once space returns. Past
 * the session's events or bytes budget of the minute (budget.h; the
 * record's max_*_per_min) an event is counted, not stored, unless it is
 * of a kind never dropped: sandbox, session_abort, rollback, checkpoint,
 * the budget's own limit events, and an exec op's stdin, command,
 * stdout, result and limits (not those of a command a terminal's marks
 * announced: any program can write those marks). */
void sg_capture_emit(sg_capture *c, sg_event_kind kind, json_t *payload);
/* The sandbox's programs are gone (destroy killed them): their last
 * process events (the kill's exits, or those still running) are made now,
 * so that they come before `sandbox` destroyed. The supervisor calls it
 * just before it emits that event; sg_capture_finish does it too, for a
 * supervisor that ends without a destroy. */
void sg_capture_processes_end(sg_capture *c);
/* Before an automatic checkpoint (before an exec, at a prompt): whether
 * the minute's checkpoint budget has room (counted). True without a
 * capture. */
bool sg_capture_checkpoint_budget(sg_capture *c);
/* Makes everything appended durable now and tells the uplink. */
void sg_capture_sync(sg_capture *c);
/* Reports every pending workspace change now. */
void sg_capture_flush_watch(sg_capture *c);

/* Before the watcher's settled changes are emitted: fn reads what the
 * supervisor has pending from the terminals (a command's mark, written
 * before the change it makes), so a change comes after its command. */
void sg_capture_set_before_changes(sg_capture *c, void (*fn)(void *ud), void *ud);
/* The watcher has workspace changes to report: fn is called first (the
 * session's lifecycle counts them as activity), before the
 * before-changes hook. Not called for the programs started. */
void sg_capture_set_on_changes(sg_capture *c, void (*fn)(void *ud), void *ud);
/* An operator's action (rollback, cp, seeding) changes the workspace:
 * while action is set (copied: {action, user, uid, ...}) the changes
 * reported carry it as their `operator` cause instead of an exec's;
 * NULL reports what it changed, then ends it. */
void sg_capture_set_operator(sg_capture *c, const json_t *action);
/* Events appended but not acknowledged by the ingest. */
uint64_t sg_capture_pending(const sg_capture *c);
/* The spool's backlog: events not yet acknowledged, and the bytes of the
 * segments that hold them (0 and 0 for NULL). */
void sg_capture_backlog(const sg_capture *c, uint64_t *events, uint64_t *bytes);

/* The process events (procevents.h), NULL when they are not recorded (not
 * available, or closed): held execs are read for them (execargs.h). */
struct sg_procevents *sg_capture_procevents(sg_capture *c);
/* Its workspace watcher (NULL if none): the kill switch hurries it. */
struct sg_watch *sg_capture_watch(sg_capture *c);

/* One exec: begin emits stdin, activity command and command; output keeps
 * the last SG_OUTPUT_CAPTURE_MAX bytes of each stream; end flushes the
 * watcher, emits stdout (per stream), run_result or test_result, limit
 * events, activity idle, and syncs. `result` is the exec's result object
 * (borrowed). end frees e. */
sg_capture_exec *sg_capture_exec_begin(sg_capture *c, uint32_t exec_id, char *const *argv,
                                       const char *cwd, const json_t *tool);
/* The same; without flush_before the changes not yet reported are the
 * exec's: a shell's command is known only once it runs (its mark comes
 * through the terminal), so what it changed at once is still pending. */
sg_capture_exec *sg_capture_exec_begin_ex(sg_capture *c, uint32_t exec_id, char *const *argv,
                                          const char *cwd, const json_t *tool, bool flush_before);
void sg_capture_exec_output(sg_capture_exec *e, bool is_stderr, const char *buf, size_t len);
void sg_capture_exec_end(sg_capture_exec *e, const json_t *result);

/* Outside uv_run: emits `activity` stopped, syncs and waits up to
 * timeout_ms for the ingest to acknowledge everything. Returns 0 when all
 * is acknowledged, -1 (err says how many are left) otherwise. */
/* The capture's spool (contents.h streams recordings into it). */
struct sg_spool *sg_capture_spool(sg_capture *c);
int sg_capture_finish(sg_capture *c, uint64_t timeout_ms, sg_err *err);
/* Stops the watcher and the uplink handles (inside or outside uv_run). */
void sg_capture_close(sg_capture *c);
/* Outside uv_run, after sg_capture_close and a final uv_run. */
void sg_capture_free(sg_capture *c);

#endif

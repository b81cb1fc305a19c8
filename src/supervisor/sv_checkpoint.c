/* sv_checkpoint: checkpoints, their labels, and rollback. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "base/log.h"

#define SUP_SAFETY_LABEL "before rollback"

/* The worker stops after SG_CKPT_CLIENT_IDLE_MS without a call (ckpt_client.h). */
static void on_ckpt_idle(uv_timer_t *t)
{
    sup *s = t->data;
    ckpt_flush_labels(s);
    sg_ckpt_client_stop(s->ckpt);
    uv_timer_stop(t); /* the flush re-armed it */
}

/* $SANDGLASS_CKPT_IDLE_MS (1 ms to 1 h) overrides SG_CKPT_CLIENT_IDLE_MS: the
 * tests watch the worker go without waiting 10 s. Read once. */
static uint64_t ckpt_idle_ms(sup *s)
{
    if (!s->ckpt_idle_ms) {
        uint64_t v = 0;
        sg_err e = {0};
        const char *env = getenv("SANDGLASS_CKPT_IDLE_MS");
        s->ckpt_idle_ms = env && sg_parse_uint(env, 3600000, &v, &e) == 0 && v > 0 ? v : SG_CKPT_CLIENT_IDLE_MS;
    }
    return s->ckpt_idle_ms;
}

void ckpt_used(sup *s)
{
    sg_err err = {0};
    if (sg_ckpt_client_owed_error(s->ckpt, &err))
        sg_log(SG_LOG_WARN, "checkpoint labels were not recorded: %s", err.msg);
    uv_timer_start(&s->ckpt_idle, on_ckpt_idle, ckpt_idle_ms(s), 0);
}

/* The watcher's diffs, made by the checkpoint worker. */
int ckpt_unified(void *ud, const char *path, const char *old, size_t old_len,
                const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    sup *s = ud;
    int rc = sg_ckpt_client_unified(s->ckpt, path, old, old_len, new_, new_len, out, err);
    ckpt_used(s);
    return rc;
}

/* The labels of execs found unchanged go to the store before anything
 * else asks the worker (a list must show them, in order). */
void ckpt_flush_labels(sup *s)
{
    if (!s->labels.n)
        return;
    sg_err err = {0};
    /* Not waited for: the worker's next answer settles it. */
    if (sg_ckpt_client_alias_nowait(s->ckpt, s->last_ckpt, s->labels.v, s->labels.times, s->labels.n, &err) < 0)
        sg_log(SG_LOG_WARN, "cannot record %zu checkpoint label(s): %s", s->labels.n, err.msg);
    ckpt_used(s);
    sg_labels_clear(&s->labels);
}

static void ckpt_queue_label(sup *s, const char *label)
{
    if (sg_labels_full(&s->labels))
        ckpt_flush_labels(s);
    sg_labels_push(&s->labels, label, (int64_t)time(NULL));
}

void ckpt_emit(sup *s, const char *id, const char *label, const sg_checkpoint_stats *st,
                     double ms, bool reused, json_t **info)
{
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "id", id, "label", label,
                          "files", (json_int_t)st->files, "bytes", (json_int_t)st->bytes,
                          "changed", (json_int_t)st->changed, "hashed", (json_int_t)st->hashed,
                          "took_ms", ms);
    if (reused)
        json_object_set_new(j, "unchanged", json_true());
    /* What the limits kept out (checkpoint.h: limits): never silent. */
    if (st->omitted || st->partial || st->store_full)
        json_object_set_new(j, "not_stored", json_pack("{s:I, s:I, s:b}",
            "files", (json_int_t)st->omitted, "dirs_not_walked", (json_int_t)st->partial,
            "store_full", st->store_full != 0));
    if (info)
        *info = json_deep_copy(j);
    capture_emit(s, SG_EV_CHECKPOINT, j);
}

/* A checkpoint that failed is an event too (a `checkpoint` event with
 * "error" and no id), not only a line in the log. */
static void emit_checkpoint_error(sup *s, const char *label, const sg_err *err, double ms)
{
    sg_log(SG_LOG_ERROR, "checkpoint failed: %s", err->msg);
    capture_emit(s, SG_EV_CHECKPOINT, json_pack("{s:s, s:s, s:i, s:f}", "label", label ? label : "",
                                            "error", err->msg, "errno", err->code, "took_ms", ms));
}

/* Takes a checkpoint of the workspace (from outside the sandbox) and emits
 * a checkpoint event. Returns its id (s->last_ckpt) or NULL. */
const char *ckpt_take_ex(sup *s, const char *label, bool reuse, json_t **info)
{
    char id[SG_CHECKPOINT_ID_LEN + 1];
    if (!s->ckpt)
        return NULL;
    sg_err err = {0};
    sg_checkpoint_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    bool reused = false;
    ckpt_flush_labels(s);
    int rc = sg_ckpt_client_take(s->ckpt, label, reuse, id, &st, &reused, &err);
    ckpt_used(s);
    if (rc < 0) {
        emit_checkpoint_error(s, label, &err, (double)(sg_now_mono_ns() - t0) / 1e6);
        return NULL;
    }
    memcpy(s->last_ckpt, id, sizeof id);
    s->last_stats = st;
    ckpt_emit(s, id, label, &st, (double)(sg_now_mono_ns() - t0) / 1e6, reused, info);
    return s->last_ckpt;
}

const char *ckpt_take(sup *s, const char *label, json_t **info)
{
    return ckpt_take_ex(s, label, false, info);
}

/* The checkpoint before an exec. When the workspace's fingerprint equals
 * the one taken with the last such checkpoint, nothing changed: that
 * checkpoint is the answer, as the worker would find, without the trip to
 * it; the label is queued for the store. */
void ckpt_exec(sup *s, const char *label)
{
    ckpt_prompt(s, label, false);
}

void ckpt_prompt(sup *s, const char *label, bool quiet_unchanged)
{
    if (!s->ckpt || !sg_capture_checkpoint_budget(s->cap))
        return;
    sg_fingerprint now;
    sg_err err = {0};
    uint64_t t0 = sg_now_mono_ns();
    bool usable = sg_fingerprint_take(s->meta.workspace, &now, &err) == 0 && sg_fingerprint_usable(&now);
    if (usable && s->print_valid && s->last_ckpt[0] && sg_fingerprint_equal(&now, &s->last_print)) {
        if (quiet_unchanged)
            return;
        sg_checkpoint_stats st = s->last_stats;
        st.changed = st.hashed = 0;
        ckpt_queue_label(s, label);
        ckpt_emit(s, s->last_ckpt, label, &st, (double)(sg_now_mono_ns() - t0) / 1e6, true, NULL);
        return;
    }
    s->print_valid = false;
    if (ckpt_take_ex(s, label, true, NULL) && usable) {
        s->last_print = now;
        s->print_valid = true;
    }
}

static json_t *changes_json(sg_checkpoint_change *ch, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        /* A file name need not be UTF-8, and json_pack drops what is not:
         * show such a path with U+FFFD rather than hide it from the plan. */
        sg_autofree char *path = sg_utf8_sanitize(ch[i].path, strlen(ch[i].path), NULL);
        json_array_append_new(arr, json_pack("{s:s, s:s}", "path", path ? path : "?",
                                             "change", sg_checkpoint_change_kind_name(ch[i].kind)));
    }
    return arr;
}

/* The newest checkpoint whose label is `label` (same) or is not (!same):
 * 1 and its id in out, 0 when there is none, -1 with err. */
static int newest_checkpoint(sup *s, const char *label, bool same, char out[SG_CHECKPOINT_ID_LEN + 1],
                             sg_err *err)
{
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    ckpt_flush_labels(s);
    int rc = sg_ckpt_client_list(s->ckpt, &v, &n, err);
    ckpt_used(s);
    if (rc < 0)
        return -1;
    int found = sg_labels_newest(v, n, label, same, out);
    sg_checkpoint_infos_free(v, n);
    return found;
}

/* The default rollback target: the newest checkpoint that is not the safety
 * copy a rollback keeps, or rolling back twice would undo the first
 * rollback (that copy stays reachable with --to). */
static int default_target(sup *s, char out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    int rc = newest_checkpoint(s, SUP_SAFETY_LABEL, false, out, err);
    return rc == 0 ? sg_err_set(err, ENOENT, "this sandbox has no checkpoint") : rc < 0 ? -1 : 0;
}

/* The newest checkpoint labelled exactly label. */
static int label_target(sup *s, const char *label, char out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    int rc = newest_checkpoint(s, label, true, out, err);
    return rc == 0 ? sg_err_set(err, ENOENT, "no checkpoint with the id or label '%.100s' (see 'sandglass "
                                "checkpoints')", label) : rc < 0 ? -1 : 0;
}

/* Where a rollback goes: *to as the caller gave it (an id or a prefix of
 * one), the newest checkpoint labelled *to, or none given, the default
 * target. A resolved id is written to latest and *to points at it. */
static int rollback_target(sup *s, const char **to, char latest[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    if (!*to) {
        if (default_target(s, latest, err) < 0)
            return -1;
        *to = latest;
    } else if (!sg_labels_is_id_prefix(*to)) {
        /* Not an id: the newest checkpoint with that label. */
        if (label_target(s, *to, latest, err) < 0)
            return -1;
        *to = latest;
    }
    return 0;
}

void ckpt_rollback(sup *s, client *c, const sg_ctl_rollback_req *req)
{
    sg_err err = {0};
    if (!s->ckpt) {
        client_error(c, "this sandbox has no checkpoint store");
        return;
    }
    const char *to = req->to;
    bool dry = req->dry_run, force = req->force;
    char latest[SG_CHECKPOINT_ID_LEN + 1];
    if (rollback_target(s, &to, latest, &err) < 0) {
        client_error(c, err.msg);
        return;
    }
    size_t running = 0;
    for (size_t i = 0; i < s->nexecs; i++)
        running += !s->execs[i]->finished;
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    /* The workspace is about to change (or be judged): fingerprint again. */
    s->print_valid = false;
    ckpt_flush_labels(s);
    int drc = sg_ckpt_client_diff(s->ckpt, to, &ch, &n, &err);
    ckpt_used(s);
    if (drc < 0) {
        client_error(c, err.msg);
        return;
    }
    json_t *changes = changes_json(ch, n);
    sg_checkpoint_changes_free(ch, n);
    if (dry) {
        client_result(c, json_pack("{s:s, s:o, s:I, s:b}", "to", to, "changes", changes,
                                   "running_execs", (json_int_t)running, "restored", 0));
        return;
    }
    if (n == 0 && !running) {
        /* Nothing to restore: no safety checkpoint, no kill. */
        client_result(c, json_pack("{s:s, s:o, s:I, s:b}", "to", to, "changes", changes,
                                   "changed", (json_int_t)0, "restored", 0));
        return;
    }
    if (running && !force) {
        json_decref(changes);
        char m[160];
        snprintf(m, sizeof m, "%zu exec(s) running: refusing to roll back under them (--force kills them first)", running);
        client_error(c, m);
        return;
    }
    /* Background processes left by earlier execs would race the restore
     * (a writer loop would undo it): they go too. */
    json_t *killed = NULL;
    leaves_sweep(s);
    if (running || s->leaves.n)
        killed = kill_all_user_processes(s, "rollback", "rollback --force killed it to restore the workspace");
    /* Keep the present too, so that a rollback can itself be undone. */
    json_t *safety = NULL;
    ckpt_take(s, SUP_SAFETY_LABEL, &safety);
    char target[SG_CHECKPOINT_ID_LEN + 1];
    snprintf(target, sizeof target, "%s", to);
    sg_checkpoint_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    int rrc = sg_ckpt_client_restore(s->ckpt, target, &st, &err);
    ckpt_used(s);
    if (rrc < 0) {
        json_decref(changes);
        json_decref(killed);
        json_decref(safety);
        client_error(c, err.msg);
        return;
    }
    double ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    json_t *rec = json_pack("{s:s, s:o, s:I, s:f, s:b, s:o, s:o}", "to", target, "changes", changes,
                            "changed", (json_int_t)st.changed, "took_ms", ms, "restored", 1,
                            "safety_checkpoint", safety ? json_incref(json_object_get(safety, "id")) : json_null(),
                            "killed", killed ? killed : json_null());
    /* Files recorded by size only and directories not walked (checkpoint.h:
     * limits) were left as they are: say so, never silently. */
    if (st.unrestorable)
        json_object_set_new(rec, "not_restored", json_integer((json_int_t)st.unrestorable));
    json_decref(safety);
    capture_emit(s, SG_EV_ROLLBACK, json_deep_copy(rec));
    client_result(c, rec);
}

/* The checkpoint worker runs in the sandbox's cgroup (ckptc.h), in its
 * own leaf SG_CKPT_CLIENT_LEAF: charged to the sandbox's limits, and killed
 * with it (kill_all_user_processes kills it before its proof; destroy's
 * recursive kill takes the leaf too). */
static int ckpt_join(void *ud, int fds[SG_CKPT_CLIENT_MAX_JOIN], sg_err *err)
{
    sup *s = ud;
    if (!s->cg || s->destroying)
        return 0; /* destroyed: its cgroup is going (a last diff only) */
    if (sg_cgroup_leaf_create(s->cg, SG_CKPT_CLIENT_LEAF, err) < 0)
        return -1;
    return sg_cgroup_join_fds(s->cg, SG_CKPT_CLIENT_LEAF, fds, err);
}

/* sandglass-ckpt next to this binary ($SANDGLASS_CKPT overrides). */
int ckpt_open(sup *s, sg_err *err)
{
    if (s->ckpt)
        return 0;
    char exe[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_CKPT", "sandglass-ckpt", exe, sizeof exe) < 0)
        return sg_err_set(err, ENOENT, "the checkpoint worker sandglass-ckpt is not next to the supervisor");
    sg_autofree char *repo = sg_state_sandbox_path(s->meta.id, "checkpoints.git");
    s->ckpt = sg_ckpt_client_new(exe, repo, s->meta.workspace);
    sg_ckpt_client_set_join(s->ckpt, ckpt_join, s);
    return sg_ckpt_client_start(s->ckpt, err);
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

void op_checkpoint(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    const char *label = req->u.checkpoint.label;
    char l[200];
    snprintf(l, sizeof l, "%.190s", label && *label ? label : "on request");
    json_t *info = NULL;
    if (!ckpt_take(s, l, &info))
        client_error(c, "cannot take a checkpoint (see the supervisor log)");
    else
        client_result(c, info);
}

void op_checkpoints(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    sg_err err = {0};
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    if (s->ckpt)
        ckpt_flush_labels(s);
    int lrc = s->ckpt ? sg_ckpt_client_list(s->ckpt, &v, &n, &err) : -1;
    if (s->ckpt)
        ckpt_used(s);
    if (lrc < 0) {
        client_error(c, s->ckpt ? err.msg : "this sandbox has no checkpoint store");
        return;
    }
    sg_ctl_checkpoints_reply r = {.v = n ? calloc(n, sizeof *r.v) : NULL, .n = n};
    for (size_t i = 0; r.v && i < n; i++)
        r.v[i] = (sg_ctl_checkpoint_entry){.id = v[i].id, .label = v[i].label, .time = (long long)v[i].time,
                                           .files = (long long)v[i].files, .bytes = (long long)v[i].bytes};
    client_result(c, n && !r.v ? NULL : sg_ctl_encode_checkpoints_reply(&r));
    free(r.v); /* its strings are v's */
    sg_checkpoint_infos_free(v, n);
}

void op_rollback(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    ckpt_rollback(s, c, &req->u.rollback);
}

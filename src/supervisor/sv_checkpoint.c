/* sv_checkpoint: checkpoints, their labels, and rollback. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_metrics.h"
#include "base/log.h"
#include "state/state.h"

#define SUP_SAFETY_LABEL "before rollback"

/* The actor of the checkpoints taken now (an operator's checkpoint or
 * rollback); NULL: the supervisor's own (before an exec, at a prompt). */
static json_t *ckpt_actor;

static json_t *actor_of(const struct ucred *cr, const char *via)
{
    return sg_actor_json(cr->uid, cr->pid, via); /* via: decoded, UTF-8, bounded (wire/ctl.h) */
}

json_t *sv_actor(const sv_client *c, const char *cap, const char *why)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (c && getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
        return actor_of(&cr, c->via);
    if (cap)
        return json_pack("{s:s}", "cap", cap);
    return json_pack("{s:s}", "supervisor", why ? why : "automatic");
}

void sv_actor_begin(const sv_client *c)
{
    json_decref(ckpt_actor);
    ckpt_actor = sv_actor(c, NULL, NULL);
}

void sv_actor_begin_cred(const struct ucred *who, const char *via)
{
    json_decref(ckpt_actor);
    ckpt_actor = who ? actor_of(who, via) : NULL;
}

void sv_actor_end(void)
{
    json_decref(ckpt_actor);
    ckpt_actor = NULL;
}

json_t *sv_actor_current(const char *cap, const char *why)
{
    return ckpt_actor ? json_deep_copy(ckpt_actor) : sv_actor(NULL, cap, why);
}

json_t *sv_last_checkpoint(const sv_sup *s)
{
    return s->ckpt.last[0] ? json_string(s->ckpt.last) : json_null();
}

/* The worker stops after SG_CKPT_CLIENT_IDLE_MS without a call (ckpt_client.h). */
static void on_ckpt_idle(uv_timer_t *t)
{
    sv_sup *s = t->data;
    sv_ckpt_flush_labels(s);
    sg_ckpt_client_stop(s->ckpt.client);
    uv_timer_stop(t); /* the flush re-armed it */
}

/* $SANDGLASS_CKPT_IDLE_MS (1 ms to 1 h) overrides SG_CKPT_CLIENT_IDLE_MS: the
 * tests watch the worker go without waiting 10 s. Read once. */
static uint64_t ckpt_idle_ms(sv_sup *s)
{
    if (!s->ckpt.idle_ms) {
        uint64_t v = 0;
        sg_err e = {0};
        const char *env = getenv("SANDGLASS_CKPT_IDLE_MS");
        s->ckpt.idle_ms = env && sg_parse_uint(env, 3600000, &v, &e) == 0 && v > 0 ? v : SG_CKPT_CLIENT_IDLE_MS;
    }
    return s->ckpt.idle_ms;
}

void sv_ckpt_used(sv_sup *s)
{
    sg_err err = {0};
    if (sg_ckpt_client_owed_error(s->ckpt.client, &err))
        sg_log(SG_LOG_WARN, "checkpoint labels were not recorded: %s", err.msg);
    uv_timer_start(&s->ckpt.idle, on_ckpt_idle, ckpt_idle_ms(s), 0);
}

/* The watcher's diffs, made by the checkpoint worker. */
int sv_ckpt_unified(void *ud, const char *path, const char *old, size_t old_len,
                const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    sv_sup *s = ud;
    int rc = sg_ckpt_client_unified(s->ckpt.client, path, old, old_len, new_, new_len, out, err);
    sv_ckpt_used(s);
    return rc;
}

/* The labels of execs found unchanged go to the store before anything
 * else asks the worker (a list must show them, in order). */
void sv_ckpt_flush_labels(sv_sup *s)
{
    if (!s->ckpt.labels.n)
        return;
    sg_err err = {0};
    /* Not waited for: the worker's next answer settles it. */
    if (sg_ckpt_client_alias_nowait(s->ckpt.client, s->ckpt.last, s->ckpt.labels.v, s->ckpt.labels.times, s->ckpt.labels.n, &err) < 0)
        sg_log(SG_LOG_WARN, "cannot record %zu checkpoint label(s): %s", s->ckpt.labels.n, err.msg);
    sv_ckpt_used(s);
    sg_labels_clear(&s->ckpt.labels);
}

static void ckpt_queue_label(sv_sup *s, const char *label)
{
    if (sg_labels_full(&s->ckpt.labels))
        sv_ckpt_flush_labels(s);
    sg_labels_push(&s->ckpt.labels, label, (int64_t)time(NULL));
}

void sv_ckpt_emit(sv_sup *s, const char *id, const char *label, const sg_checkpoint_stats *st,
                     double ms, bool reused, json_t **info)
{
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "id", id, "label", label,
                          "files", (json_int_t)st->files, "bytes", (json_int_t)st->bytes,
                          "changed", (json_int_t)st->changed, "hashed", (json_int_t)st->hashed,
                          "took_ms", ms);
    if (reused)
        json_object_set_new(j, "unchanged", json_true());
    json_object_set_new(j, "actor", sv_actor_current(NULL, "automatic"));
    /* What the limits kept out (checkpoint.h: limits): never silent. */
    if (st->omitted || st->partial || st->store_full)
        json_object_set_new(j, "not_stored", json_pack("{s:I, s:I, s:b}",
            "files", (json_int_t)st->omitted, "dirs_not_walked", (json_int_t)st->partial,
            "store_full", st->store_full != 0));
    if (info)
        *info = json_deep_copy(j);
    if (!reused || ms > 0) /* a spare's checkpoint handed to its claimer was timed once */
        sv_metrics_checkpoint(s, ms);
    sv_sup_emit(s, SG_EV_CHECKPOINT, j);
}

/* A checkpoint that failed is an event too (a `checkpoint` event with
 * "error" and no id), not only a line in the log. */
static void emit_checkpoint_error(sv_sup *s, const char *label, const sg_err *err, double ms)
{
    sg_log(SG_LOG_ERROR, "checkpoint failed: %s", err->msg);
    sv_metrics_checkpoint(s, ms);
    sv_sup_emit(s, SG_EV_CHECKPOINT, json_pack("{s:s, s:s, s:i, s:f, s:o}", "label", label ? label : "",
        "error", err->msg, "errno", err->code, "took_ms", ms,
        "actor", sv_actor_current(NULL, "automatic")));
}

/* Takes a checkpoint of the workspace (from outside the sandbox) and emits
 * a checkpoint event. Returns its id (s->ckpt.last) or NULL. */
const char *sv_ckpt_take_ex(sv_sup *s, const char *label, bool reuse, json_t **info)
{
    char id[SG_CHECKPOINT_ID_LEN + 1];
    if (!s->ckpt.client)
        return NULL;
    sg_err err = {0};
    sg_checkpoint_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    bool reused = false;
    sv_ckpt_flush_labels(s);
    int rc = sg_ckpt_client_take(s->ckpt.client, label, reuse, id, &st, &reused, &err);
    sv_ckpt_used(s);
    if (rc < 0) {
        emit_checkpoint_error(s, label, &err, (double)(sg_now_mono_ns() - t0) / 1e6);
        return NULL;
    }
    memcpy(s->ckpt.last, id, sizeof id);
    s->ckpt.last_stats = st;
    sv_ckpt_emit(s, id, label, &st, (double)(sg_now_mono_ns() - t0) / 1e6, reused, info);
    return s->ckpt.last;
}

const char *sv_ckpt_take(sv_sup *s, const char *label, json_t **info)
{
    return sv_ckpt_take_ex(s, label, false, info);
}

/* The checkpoint before an exec. When the workspace's fingerprint equals
 * the one taken with the last such checkpoint, nothing changed: that
 * checkpoint is the answer, as the worker would find, without the trip to
 * it; the label is queued for the store. */
void sv_ckpt_exec(sv_sup *s, const char *label)
{
    sv_ckpt_prompt(s, label, false);
}

void sv_ckpt_prompt(sv_sup *s, const char *label, bool quiet_unchanged)
{
    if (!s->ckpt.client || !sg_capture_checkpoint_budget(s->cap))
        return;
    sg_fingerprint now;
    sg_err err = {0};
    uint64_t t0 = sg_now_mono_ns();
    bool usable = sg_fingerprint_take(s->meta.workspace, &now, &err) == 0 && sg_fingerprint_usable(&now);
    if (usable && s->ckpt.print_valid && s->ckpt.last[0] && sg_fingerprint_equal(&now, &s->ckpt.last_print)) {
        if (quiet_unchanged)
            return;
        sg_checkpoint_stats st = s->ckpt.last_stats;
        st.changed = st.hashed = 0;
        ckpt_queue_label(s, label);
        sv_ckpt_emit(s, s->ckpt.last, label, &st, (double)(sg_now_mono_ns() - t0) / 1e6, true, NULL);
        return;
    }
    s->ckpt.print_valid = false;
    if (sv_ckpt_take_ex(s, label, true, NULL) && usable) {
        s->ckpt.last_print = now;
        s->ckpt.print_valid = true;
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
static int newest_checkpoint(sv_sup *s, const char *label, bool same, char out[SG_CHECKPOINT_ID_LEN + 1],
                             sg_err *err)
{
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    sv_ckpt_flush_labels(s);
    int rc = sg_ckpt_client_list(s->ckpt.client, &v, &n, err);
    sv_ckpt_used(s);
    if (rc < 0)
        return -1;
    int found = sg_labels_newest(v, n, label, same, out);
    sg_checkpoint_infos_free(v, n);
    return found;
}

/* The default rollback target: the newest checkpoint that is not the safety
 * copy a rollback keeps, or rolling back twice would undo the first
 * rollback (that copy stays reachable with --to). */
static int default_target(sv_sup *s, char out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    int rc = newest_checkpoint(s, SUP_SAFETY_LABEL, false, out, err);
    return rc == 0 ? sg_err_set(err, ENOENT, "this sandbox has no checkpoint") : rc < 0 ? -1 : 0;
}

/* The newest checkpoint labelled exactly label. */
static int label_target(sv_sup *s, const char *label, char out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    int rc = newest_checkpoint(s, label, true, out, err);
    return rc == 0 ? sg_err_set(err, ENOENT, "no checkpoint with the id or label '%.100s' (see 'sandglass "
                                "checkpoints')", label) : rc < 0 ? -1 : 0;
}

/* Where a rollback goes: *to as the caller gave it (an id or a prefix of
 * one), the newest checkpoint labelled *to, or none given, the default
 * target. A resolved id is written to latest and *to points at it. */
static int rollback_target(sv_sup *s, const char **to, char latest[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
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

/* A prefix typed (153a) becomes the one checkpoint's full id. */
static int full_id(sv_sup *s, const char **to, char full[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    if (strlen(*to) == SG_CHECKPOINT_ID_LEN)
        return 0;
    sg_checkpoint_info *v = NULL;
    size_t n = 0, hits = 0;
    sv_ckpt_flush_labels(s);
    int rc = sg_ckpt_client_list(s->ckpt.client, &v, &n, err);
    sv_ckpt_used(s);
    if (rc < 0)
        return -1;
    const char *want = *to;
    /* one id can be listed once per label it has */
    for (size_t i = 0; i < n; i++)
        if (strncmp(v[i].id, want, strlen(want)) == 0 && (!hits || strcmp(full, v[i].id) != 0) && hits++ == 0)
            snprintf(full, SG_CHECKPOINT_ID_LEN + 1, "%s", v[i].id);
    sg_checkpoint_infos_free(v, n);
    if (hits != 1)
        return sg_err_set(err, ENOENT, hits ? "checkpoint %s is ambiguous: give more of its id"
                                            : "no checkpoint %s", want);
    *to = full;
    return 0;
}

static void rollback_do(sv_sup *s, sv_client *c, const sg_ctl_rollback_req *req);

void sv_ckpt_rollback(sv_sup *s, sv_client *c, const sg_ctl_rollback_req *req)
{
    sv_actor_begin(c);
    rollback_do(s, c, req);
    sg_capture_set_operator(s->cap, NULL); /* the restore's changes, after its event */
    sv_actor_end();
}

static void rollback_do(sv_sup *s, sv_client *c, const sg_ctl_rollback_req *req)
{
    sg_err err = {0};
    if (!s->ckpt.client) {
        sv_client_error(c, "this sandbox has no checkpoint store");
        return;
    }
    const char *to = req->to;
    bool dry = req->dry_run, force = req->force;
    char latest[SG_CHECKPOINT_ID_LEN + 1];
    if (rollback_target(s, &to, latest, &err) < 0 || full_id(s, &to, latest, &err) < 0) {
        sv_client_error(c, err.msg);
        return;
    }
    size_t running = 0;
    for (size_t i = 0; i < s->exec.n; i++)
        running += !s->exec.list[i]->finished;
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    /* The workspace is about to change (or be judged): fingerprint again. */
    s->ckpt.print_valid = false;
    sv_ckpt_flush_labels(s);
    int drc = sg_ckpt_client_diff(s->ckpt.client, to, &ch, &n, &err);
    sv_ckpt_used(s);
    if (drc < 0) {
        sv_client_error(c, err.msg);
        return;
    }
    sg_autojson json_t *changes = changes_json(ch, n);
    sg_checkpoint_changes_free(ch, n);
    /* the answer (wire/ctl.h's sg_ctl_rollback_reply): the plan, nothing to do, or what was done */
    sg_ctl_rollback_reply r = {.to = (char *)to, .changes = changes, .running_execs = -1, .changed = -1,
                               .took_ms = -1};
    if (dry) {
        r.running_execs = (long long)running;
        sv_client_result(c, sg_ctl_encode_rollback_reply(&r));
        return;
    }
    if (n == 0 && !running) {
        /* Nothing to restore: no safety checkpoint, no kill. */
        r.changed = 0;
        sv_client_result(c, sg_ctl_encode_rollback_reply(&r));
        return;
    }
    if (running && !force) {
        char m[160];
        snprintf(m, sizeof m, "%zu exec(s) running: refusing to roll back under them (--force kills them first)", running);
        sv_client_error(c, m);
        return;
    }
    /* Background processes left by earlier execs would race the restore
     * (a writer loop would undo it): they go too. */
    sv_leaves_sweep(s);
    if (running || s->leaves.set.n) {
        s->hooks.kill_all(s, "rollback", "rollback --force killed it to restore the workspace", &r.kill);
        r.killed = true;
    }
    /* Keep the present too, so that a rollback can itself be undone. */
    sg_autojson json_t *safety = NULL;
    sv_ckpt_take(s, SUP_SAFETY_LABEL, &safety);
    char target[SG_CHECKPOINT_ID_LEN + 1];
    snprintf(target, sizeof target, "%s", to);
    sg_checkpoint_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    /* what the restore changes is the operator's rollback (sv_ckpt_rollback ends it) */
    json_t *op = json_pack("{s:s, s:s, s:O}", "action", "rollback", "to", target, "actor", ckpt_actor);
    sg_capture_set_operator(s->cap, op);
    json_decref(op);
    int rrc = sg_ckpt_client_restore(s->ckpt.client, target, &st, &err);
    sv_ckpt_used(s);
    if (rrc < 0) {
        sg_ctl_kill_report_free(&r.kill);
        sv_client_error(c, err.msg);
        return;
    }
    r.to = target;
    r.restored = true;
    r.changed = (long long)st.changed;
    r.took_ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    r.safety_checkpoint = (char *)json_string_value(json_object_get(safety, "id"));
    /* Files recorded by size only and directories not walked (checkpoint.h:
     * limits) were left as they are: say so, never silently. */
    r.not_restored = (long long)st.unrestorable;
    r.asked = req->to && strcmp(req->to, target) != 0 ? req->to : NULL;
    r.actor = ckpt_actor;
    json_t *rec = sg_ctl_encode_rollback_reply(&r);
    sg_ctl_kill_report_free(&r.kill);
    if (rec)
        sv_sup_emit(s, SG_EV_ROLLBACK, json_deep_copy(rec));
    sv_client_result(c, rec);
}

/* The checkpoint worker runs in the sandbox's cgroup (ckptc.h), in its
 * own leaf SG_CKPT_CLIENT_LEAF: charged to the sandbox's limits, and killed
 * with it (sv_killswitch_kill_all kills it before its proof; destroy's
 * recursive kill takes the leaf too). */
static int ckpt_join(void *ud, int fds[SG_CKPT_CLIENT_MAX_JOIN], sg_err *err)
{
    sv_sup *s = ud;
    if (!s->cg || s->destroying)
        return 0; /* destroyed: its cgroup is going (a last diff only) */
    if (sg_cgroup_leaf_create(s->cg, SG_CKPT_CLIENT_LEAF, err) < 0)
        return -1;
    return sg_cgroup_join_fds(s->cg, SG_CKPT_CLIENT_LEAF, fds, err);
}

/* sandglass-ckpt next to this binary ($SANDGLASS_CKPT overrides). */
int sv_ckpt_open(sv_sup *s, sg_err *err)
{
    if (s->ckpt.client)
        return 0;
    char exe[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_CKPT", "sandglass-ckpt", exe, sizeof exe) < 0)
        return sg_err_set(err, ENOENT, "the checkpoint worker sandglass-ckpt is not next to the supervisor");
    sg_autofree char *repo = sg_state_sandbox_path(s->meta.id, "checkpoints.git");
    s->ckpt.client = sg_ckpt_client_new(exe, repo, s->meta.workspace);
    sg_ckpt_client_set_join(s->ckpt.client, ckpt_join, s);
    return sg_ckpt_client_start(s->ckpt.client, err);
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

void sv_ckpt_op_take(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    const char *label = req->u.checkpoint.label;
    char l[200];
    snprintf(l, sizeof l, "%.190s", label && *label ? label : "on request");
    json_t *info = NULL;
    sv_actor_begin(c);
    const char *id = sv_ckpt_take(s, l, &info);
    sv_actor_end();
    if (!id)
        sv_client_error(c, "cannot take a checkpoint (see the supervisor log)");
    else
        sv_client_result(c, info);
}

void sv_ckpt_op_list(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sg_err err = {0};
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    if (s->ckpt.client)
        sv_ckpt_flush_labels(s);
    int lrc = s->ckpt.client ? sg_ckpt_client_list(s->ckpt.client, &v, &n, &err) : -1;
    if (s->ckpt.client)
        sv_ckpt_used(s);
    if (lrc < 0) {
        sv_client_error(c, s->ckpt.client ? err.msg : "this sandbox has no checkpoint store");
        return;
    }
    sg_ctl_checkpoints_reply r = {.v = n ? calloc(n, sizeof *r.v) : NULL, .n = n};
    for (size_t i = 0; r.v && i < n; i++)
        r.v[i] = (sg_ctl_checkpoint_entry){.id = v[i].id, .label = v[i].label, .time = (long long)v[i].time,
                                           .files = (long long)v[i].files, .bytes = (long long)v[i].bytes};
    sv_client_result(c, n && !r.v ? NULL : sg_ctl_encode_checkpoints_reply(&r));
    free(r.v); /* its strings are v's */
    sg_checkpoint_infos_free(v, n);
}

void sv_ckpt_op_rollback(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sv_ckpt_rollback(s, c, &req->u.rollback);
}

/* The idle stop's timer, on the loop (before it runs). */
void sv_ckpt_timer_init(sv_sup *s)
{
    uv_timer_init(&s->loop, &s->ckpt.idle);
    s->ckpt.idle.data = s;
}

/* The worker killed with the sandbox's work (never waited for). */
void sv_ckpt_kill(sv_sup *s)
{
    if (s->ckpt.client)
        sg_ckpt_client_kill(s->ckpt.client);
}

/* A SIGCHLD: the worker reaped if it was the one that ended. */
void sv_ckpt_reap(sv_sup *s)
{
    if (s->ckpt.client)
        sg_ckpt_client_reap(s->ckpt.client);
}

/* At the supervisor's end: the worker's client, the labels not stored. */
void sv_ckpt_free(sv_sup *s)
{
    sg_ckpt_client_free(s->ckpt.client);
    sg_labels_free(&s->ckpt.labels);
}

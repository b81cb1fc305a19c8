/* sv_dispatch: the requests: one handler per op. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/sv_internal.h"

/* A spare of the pool (cli/pool.c) becomes a learner's sandbox: it takes
 * the creator's learner, task, limits, caps and capture, and its session
 * clocks start now. Only a spare that never ran anything can be claimed. */
static void sup_claim(sup *s, client *c, json_t *req)
{
    sg_err err = {0};
    if (strcmp(s->meta.learner, SG_POOL_LEARNER) != 0 || s->execs_total || s->cap || s->aborted) {
        client_error(c, "this sandbox is not an unused spare of the pool");
        return;
    }
    sg_sandbox_meta want;
    if (sg_sandbox_meta_from_json(json_object_get(req, "meta"), s->meta.id, &want, &err) < 0) {
        sg_err_prefix(&err, "claim: bad sandbox record");
        client_error(c, err.msg);
        return;
    }
    /* The workspace's file system was sized when the spare was made. */
    if (want.disk != s->meta.disk) {
        char m[160];
        snprintf(m, sizeof m, "this spare's disk is %llu bytes, the create asks for %llu",
                 (unsigned long long)s->meta.disk, (unsigned long long)want.disk);
        sg_sandbox_meta_clear(&want);
        client_error(c, m);
        return;
    }
    /* Only what differs from the spare's limits is written (usually none). */
    sg_cg_limits lim = {.memory_bytes = want.memory != s->meta.memory ? want.memory : 0,
                        .pids = want.pids != s->meta.pids ? want.pids : 0,
                        .cpus = want.cpus != s->meta.cpus ? want.cpus : 0};
    if (s->cg && sg_cgroup_set_limits(s->cg, &lim, &err) < 0) {
        sg_sandbox_meta_clear(&want);
        client_error(c, err.msg);
        return;
    }
    sg_sandbox_meta *m = &s->meta;
    SG_SWAP_PTR(m->learner, want.learner);
    SG_SWAP_PTR(m->task, want.task);
    SG_SWAP_PTR(m->ingest_url, want.ingest_url);
    SG_SWAP_PTR(m->secret_file, want.secret_file);
    m->memory = want.memory;
    m->pids = want.pids;
    m->cpus = want.cpus;
    m->timeout_s = want.timeout_s;
    m->output_limit = want.output_limit;
    m->max_wall_s = want.max_wall_s;
    m->max_execs = want.max_execs;
    m->max_cpu_s = want.max_cpu_s;
    m->max_calls = want.max_calls;
    m->max_events_per_min = want.max_events_per_min;
    m->max_bytes_per_min = want.max_bytes_per_min;
    m->max_checkpoints_per_min = want.max_checkpoints_per_min;
    m->manual_checkpoints = want.manual_checkpoints;
    memcpy(m->created, want.created, sizeof m->created);
    sg_sandbox_meta_clear(&want);
    if (sg_sandbox_meta_save(m, &err) < 0) {
        client_error(c, err.msg);
        return;
    }
    if (m->task && capture_start(s, false, &err) < 0) {
        client_error(c, err.msg);
        return;
    }
    s->start_ns = sg_now_mono_ns();
    caps_arm(s);
    client_result(c, sg_sandbox_meta_json(m));
    /* The workspace is the spare's empty one, which nothing has run in
     * since its checkpoint: the capture (if any) hears of that checkpoint,
     * and the worker (stopped when idle) is not woken for it. */
    if (s->last_ckpt[0])
        emit_checkpoint(s, s->last_ckpt, "create", &s->last_stats, 0, true, NULL);
    else
        sup_checkpoint_ex(s, "create", true, NULL);
}

/* "exec": the caller's stdin crosses into the sandbox only as a pipe or
 * /dev/null (docs/SECURITY.md); none given is /dev/null. */
static void op_exec(sup *s, client *c, json_t *req, int fd_in)
{
    if (fd_in >= 0 && !sg_ctl_stdin_ok(fd_in)) {
        close(fd_in);
        client_error(c, "an exec's stdin must be a pipe or /dev/null (sandglass exec relays "
                        "anything else): refused");
        return;
    }
    if (fd_in < 0)
        fd_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    exec_start(s, c, req, fd_in);
}

static void op_attach(sup *s, client *c, json_t *req, int fd_in)
{
    sv_tty_attach(s, c, req);
}

static void op_info(sup *s, client *c, json_t *req, int fd_in)
{
    json_t *j = sg_sandbox_meta_json(&s->meta);
    json_object_set_new(j, "running_execs", json_integer((json_int_t)s->nexecs));
    json_object_set_new(j, "cgroup_layout", json_string(sg_cgroup_layout_name(sg_cgroup_layout())));
    json_object_set_new(j, "state", json_string(s->init_dead ? "broken" : s->aborted ? "aborted" : "running"));
    if (s->aborted)
        json_object_set_new(j, "abort", json_pack("{s:s, s:s}", "by", s->abort_by, "reason", s->abort_reason));
    json_object_set_new(j, "caps_now", caps_now(s));
    client_result(c, j);
}

static void op_destroy(sup *s, client *c, json_t *req, int fd_in)
{
    sup_destroy(s, c);
}

static void op_checkpoint(sup *s, client *c, json_t *req, int fd_in)
{
    const char *label = json_string_value(json_object_get(req, "label"));
    char l[200];
    snprintf(l, sizeof l, "%.190s", label && *label ? label : "on request");
    json_t *info = NULL;
    if (!sup_checkpoint(s, l, &info))
        client_error(c, "cannot take a checkpoint (see the supervisor log)");
    else
        client_result(c, info);
}

static void op_checkpoints(sup *s, client *c, json_t *req, int fd_in)
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
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:I, s:I}", "id", v[i].id,
            "label", v[i].label ? v[i].label : "", "time", (json_int_t)v[i].time,
            "files", (json_int_t)v[i].files, "bytes", (json_int_t)v[i].bytes));
    sg_checkpoint_infos_free(v, n);
    client_result(c, json_pack("{s:o}", "checkpoints", arr));
}

static void op_rollback(sup *s, client *c, json_t *req, int fd_in)
{
    sup_rollback(s, c, req);
}

static void op_abort(sup *s, client *c, json_t *req, int fd_in)
{
    const char *reason = json_string_value(json_object_get(req, "reason"));
    char r[256];
    snprintf(r, sizeof r, "operator: %s", reason && *reason ? reason : "abort requested");
    client_result(c, sup_abort(s, "operator", r));
}

static void op_claim(sup *s, client *c, json_t *req, int fd_in)
{
    sup_claim(s, c, req);
}

/* Answered once the loop serves: after the first checkpoint. */
static void op_ping(sup *s, client *c, json_t *req, int fd_in)
{
    client_result(c, json_pack("{s:b}", "pong", 1));
}

/* Destroy in after_s seconds (a negative value cancels): an agent session
 * that ended keeps its sandbox for rollback this long. */
static void op_expire(sup *s, client *c, json_t *req, int fd_in)
{
    json_t *v = json_object_get(req, "after_s");
    double after = json_is_number(v) ? json_number_value(v) : -1;
    if (!s->expire_init) {
        uv_timer_init(&s->loop, &s->expire_timer);
        s->expire_timer.data = s;
        s->expire_init = true;
    }
    uv_timer_stop(&s->expire_timer);
    if (after >= 0 && after <= 365.0 * 24 * 3600)
        uv_timer_start(&s->expire_timer, on_expire, (uint64_t)(after * 1000.0), 0);
    client_result(c, json_pack("{s:b, s:f}", "expires", after >= 0, "after_s", after));
}

/* Clears an operator's or a signal's abort, never a cap's. */
static void op_resume(sup *s, client *c, json_t *req, int fd_in)
{
    if (!s->aborted) {
        client_error(c, "the session is not aborted");
        return;
    }
    if (!sg_caps_resumable(s->abort_by)) {
        char m[400];
        snprintf(m, sizeof m, "an abort by a cap stays: %s", s->abort_reason);
        client_error(c, m);
        return;
    }
    json_t *r = json_pack("{s:b, s:s}", "resumed", 1, "was", s->abort_reason);
    s->aborted = false;
    s->abort_reason[0] = s->abort_by[0] = '\0';
    sg_state_abort_clear(s->meta.id);
    if (s->expire_init)
        uv_timer_stop(&s->expire_timer); /* in use again: no expiry */
    capture_emit(s, "activity", json_pack("{s:s}", "state", "resumed"));
    ready_next(s);
    client_result(c, r);
}

/* The requests, by "op". Only "exec" takes the fd that came with the
 * request (its stdin); every other handler finds it closed (-1). */
static const struct {
    const char *op;
    void (*run)(sup *s, client *c, json_t *req, int fd_in);
    bool takes_fd;
} ops[] = {
    {"exec", op_exec, true},
    {"attach", op_attach, false},
    {"info", op_info, false},
    {"destroy", op_destroy, false},
    {"checkpoint", op_checkpoint, false},
    {"checkpoints", op_checkpoints, false},
    {"rollback", op_rollback, false},
    {"abort", op_abort, false},
    {"claim", op_claim, false},
    {"ping", op_ping, false},
    {"expire", op_expire, false},
    {"resume", op_resume, false},
};

void handle_request(sup *s, client *c, const char *buf, size_t len, int fd_in)
{
    sg_err err = {0};
    const char *op = NULL;
    sg_autojson json_t *req = sg_ctl_parse_req(buf, len, &op, &err);
    if (!req) {
        if (fd_in >= 0)
            close(fd_in);
        client_error(c, err.msg);
        return;
    }
    /* One request per connection. An exec's connection is the command's
     * own channel: after the request it carries signals only, so whatever
     * got hold of it could not destroy, abort or checkpoint with it. */
    if (c->requested) {
        if (fd_in >= 0)
            close(fd_in);
        client_error(c, c->ex ? "an exec's connection takes signals only, not another request"
                              : "one request per connection");
        return;
    }
    c->requested = true;
    for (size_t i = 0; i < SG_ARRAY_LEN(ops); i++) {
        if (strcmp(op, ops[i].op) != 0)
            continue;
        if (!ops[i].takes_fd && fd_in >= 0)
            sg_close_reset(&fd_in);
        ops[i].run(s, c, req, fd_in);
        return;
    }
    if (fd_in >= 0)
        close(fd_in);
    char m[200];
    snprintf(m, sizeof m, "unknown request op '%.100s'", op);
    client_error(c, m);
}

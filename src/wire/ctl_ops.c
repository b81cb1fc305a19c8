/* ctl_ops: the control ops typed (ctl.h): each request's and reply's one
 * encoder and one decoder, and the protocol version. */
#include "wire/ctl.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

static const char *const op_names[SG_OP_COUNT] = {
    [SG_OP_EXEC] = "exec",         [SG_OP_ATTACH] = "attach",   [SG_OP_INFO] = "info",
    [SG_OP_DESTROY] = "destroy",   [SG_OP_CHECKPOINT] = "checkpoint",
    [SG_OP_CHECKPOINTS] = "checkpoints", [SG_OP_ROLLBACK] = "rollback", [SG_OP_ABORT] = "abort",
    [SG_OP_CLAIM] = "claim",       [SG_OP_PING] = "ping",       [SG_OP_EXPIRE] = "expire",
    [SG_OP_RESUME] = "resume",     [SG_OP_CP] = "cp",
};

const char *sg_ctl_op_name(sg_ctl_op op)
{
    return op > SG_OP_NONE && op < SG_OP_COUNT ? op_names[op] : NULL;
}

sg_ctl_op sg_ctl_op_from_name(const char *name)
{
    for (int i = SG_OP_NONE + 1; name && i < SG_OP_COUNT; i++)
        if (strcmp(name, op_names[i]) == 0)
            return (sg_ctl_op)i;
    return SG_OP_NONE;
}

bool sg_ctl_is_v0_refusal(const char *msg)
{
    return msg && strncmp(msg, SG_CTL_V0_REFUSAL, strlen(SG_CTL_V0_REFUSAL)) == 0;
}

bool sg_ctl_is_via_refusal(const char *msg)
{
    return msg && strncmp(msg, SG_CTL_VIA_REFUSAL, strlen(SG_CTL_VIA_REFUSAL)) == 0;
}

bool sg_ctl_is_rid_refusal(const char *msg)
{
    return msg && strncmp(msg, SG_CTL_RID_REFUSAL, strlen(SG_CTL_RID_REFUSAL)) == 0;
}

bool sg_ctl_is_rid_seen(const char *msg)
{
    return msg && strncmp(msg, SG_CTL_RID_SEEN, strlen(SG_CTL_RID_SEEN)) == 0;
}

/* ---- field helpers ---------------------------------------------------------- */

/* Refuses any field of j but "op", "v", "via" and the names in allowed
 * (NULL-terminated). */
static int only_fields(const json_t *j, const char *op, const char *const *allowed, sg_err *err)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)j, key, val) {
        bool ok = !strcmp(key, "op") || !strcmp(key, "v") || !strcmp(key, "via");
        for (size_t i = 0; !ok && allowed[i]; i++)
            ok = !strcmp(key, allowed[i]);
        if (!ok)
            return sg_err_set(err, EINVAL, "unknown field \"%.64s\" in %s request", key, op);
    }
    return 0;
}

/* An optional string field of at most max bytes, without NUL: *out a copy
 * or NULL when absent. */
static int opt_string(const json_t *j, const char *key, size_t max, char **out, sg_err *err)
{
    *out = NULL;
    json_t *v = json_object_get(j, key);
    if (!v)
        return 0;
    const char *s = json_string_value(v);
    if (!s || strlen(s) != json_string_length(v) || json_string_length(v) > max)
        return sg_err_set(err, EINVAL, "\"%s\" must be a string of at most %zu bytes without NUL", key, max);
    *out = strdup(s);
    return *out ? 0 : sg_err_set(err, ENOMEM, "out of memory");
}

/* An optional boolean field: absent is dflt. */
static int opt_bool(const json_t *j, const char *key, bool dflt, bool *out, sg_err *err)
{
    json_t *v = json_object_get(j, key);
    if (v && !json_is_boolean(v))
        return sg_err_set(err, EINVAL, "\"%s\" must be true or false", key);
    *out = v ? json_is_true(v) : dflt;
    return 0;
}

static int opt_number(const json_t *j, const char *key, double dflt, double *out, sg_err *err)
{
    json_t *v = json_object_get(j, key);
    if (v && !json_is_number(v))
        return sg_err_set(err, EINVAL, "\"%s\" must be a number", key);
    *out = v ? sg_json_real_canonical(json_number_value(v)) : dflt; /* as it travels */
    return 0;
}

static int opt_int(const json_t *j, const char *key, long long *out, sg_err *err)
{
    json_t *v = json_object_get(j, key);
    if (v && !json_is_integer(v))
        return sg_err_set(err, EINVAL, "\"%s\" must be an integer", key);
    *out = v ? (long long)json_integer_value(v) : 0;
    return 0;
}

/* An optional object field: *out a new reference, or NULL when absent. */
static int opt_object(const json_t *j, const char *key, void **out, sg_err *err)
{
    json_t *v = json_object_get(j, key);
    if (v && !json_is_object(v))
        return sg_err_set(err, EINVAL, "\"%s\" must be an object", key);
    *out = v ? json_incref(v) : NULL;
    return 0;
}

/* Sets key to a string (skipped when s is NULL); -1 when s is not UTF-8. */
static int set_str(json_t *j, const char *key, const char *s)
{
    if (!s)
        return 0;
    json_t *v = json_string(s);
    return v ? json_object_set_new(j, key, v) : -1;
}

/* ---- requests --------------------------------------------------------------- */

int sg_ctl_decode_attach(const void *obj, sg_ctl_attach_req *out, sg_err *err)
{
    static const char *const f[] = {"exec", "tty", "detachable", NULL};
    const json_t *j = obj;
    memset(out, 0, sizeof *out);
    if (only_fields(j, "attach", f, err) < 0 || opt_int(j, "exec", &out->exec, err) < 0 ||
        opt_bool(j, "detachable", true, &out->detachable, err) < 0)
        return -1;
    if (json_object_get(j, "exec") && out->exec <= 0)
        return sg_err_set(err, EINVAL, "\"exec\" must be an exec number > 0");
    json_t *tty = json_object_get(j, "tty");
    json_t *rows = json_object_get(tty, "rows"), *cols = json_object_get(tty, "cols");
    if (!json_is_object(tty) || json_object_size(tty) != 2 || !json_is_integer(rows) || !json_is_integer(cols) ||
        json_integer_value(rows) < 0 || json_integer_value(rows) > 65535 || json_integer_value(cols) < 0 ||
        json_integer_value(cols) > 65535)
        return sg_err_set(err, EINVAL, "\"tty\" must be {\"rows\": 0-65535, \"cols\": 0-65535}");
    out->winsz = (sg_ctl_winsz){(uint16_t)json_integer_value(rows), (uint16_t)json_integer_value(cols)};
    return 0;
}

int sg_ctl_decode_checkpoint(const void *obj, sg_ctl_checkpoint_req *out, sg_err *err)
{
    static const char *const f[] = {"label", NULL};
    memset(out, 0, sizeof *out);
    return only_fields(obj, "checkpoint", f, err) < 0 ? -1
           : opt_string(obj, "label", SG_CKPT_LABEL_MAX, &out->label, err);
}

int sg_ctl_decode_rollback(const void *obj, sg_ctl_rollback_req *out, sg_err *err)
{
    static const char *const f[] = {"to", "dry_run", "force", NULL};
    memset(out, 0, sizeof *out);
    if (only_fields(obj, "rollback", f, err) < 0 || opt_bool(obj, "dry_run", false, &out->dry_run, err) < 0 ||
        opt_bool(obj, "force", false, &out->force, err) < 0)
        return -1;
    return opt_string(obj, "to", 128, &out->to, err);
}

int sg_ctl_decode_abort(const void *obj, sg_ctl_abort_req *out, sg_err *err)
{
    static const char *const f[] = {"reason", NULL};
    memset(out, 0, sizeof *out);
    return only_fields(obj, "abort", f, err) < 0 ? -1 : opt_string(obj, "reason", 4096, &out->reason, err);
}

int sg_ctl_decode_claim(const void *obj, sg_ctl_claim_req *out, sg_err *err)
{
    static const char *const f[] = {"meta", NULL};
    memset(out, 0, sizeof *out);
    if (only_fields(obj, "claim", f, err) < 0)
        return -1;
    json_t *m = json_object_get(obj, "meta");
    if (!json_is_object(m))
        return sg_err_set(err, EINVAL, "\"meta\" must be the sandbox record (an object)");
    out->meta = json_incref(m);
    return 0;
}

int sg_ctl_decode_expire(const void *obj, sg_ctl_expire_req *out, sg_err *err)
{
    static const char *const f[] = {"after_s", NULL};
    memset(out, 0, sizeof *out);
    return only_fields(obj, "expire", f, err) < 0 ? -1 : opt_number(obj, "after_s", -1, &out->after_s, err);
}

int sg_ctl_decode_cp(const void *obj, sg_ctl_cp_req *out, sg_err *err)
{
    static const char *const f[] = {"dir", "path", "name", NULL};
    memset(out, 0, sizeof *out);
    if (only_fields(obj, "cp", f, err) < 0)
        return -1;
    const char *dir = json_string_value(json_object_get(obj, "dir"));
    if (!dir || (strcmp(dir, "in") != 0 && strcmp(dir, "out") != 0))
        return sg_err_set(err, EINVAL, "\"dir\" must be \"in\" or \"out\"");
    out->out = dir[1] == 'u';
    if (opt_string(obj, "path", PATH_MAX, &out->path, err) < 0 ||
        opt_string(obj, "name", NAME_MAX, &out->name, err) < 0)
        goto bad;
    if (!out->path) {
        sg_err_set(err, EINVAL, "\"path\" (the workspace path) is missing");
        goto bad;
    }
    if (out->name && (!*out->name || strchr(out->name, '/') || !strcmp(out->name, ".") || !strcmp(out->name, ".."))) {
        sg_err_set(err, EINVAL, "\"name\" must be one file name (no '/', not \".\" or \"..\")");
        goto bad;
    }
    if (!out->out && !out->name) {
        sg_err_set(err, EINVAL, "\"name\" (the source's name) is missing");
        goto bad;
    }
    return 0;
bad:
    free(out->path);
    free(out->name);
    memset(out, 0, sizeof *out);
    return -1;
}

/* The version of a request: absent is 0 (a CLI from before versions). */
static int decode_version(const json_t *j, int *v, sg_err *err)
{
    json_t *jv = json_object_get(j, "v");
    if (!jv) {
        *v = 0;
        return 0;
    }
    if (!json_is_integer(jv) || json_integer_value(jv) < 0)
        return sg_err_set(err, EINVAL, "\"v\" (the control protocol's version) must be an integer >= 0");
    if (json_integer_value(jv) > SG_CTL_VERSION)
        return sg_err_set(err, EPROTO, "this request speaks control protocol %lld; this sandbox's supervisor "
                          "(an older sandglass) speaks %d: use the sandglass that created the sandbox, or "
                          "destroy it and create it again", (long long)json_integer_value(jv), SG_CTL_VERSION);
    *v = (int)json_integer_value(jv);
    return 0;
}

static int decode_fields(const json_t *j, sg_ctl_req *out, sg_err *err)
{
    static const char *const none[] = {NULL};
    switch (out->op) {
    case SG_OP_EXEC:
        return sg_exec_req_parse(j, &out->u.exec, err);
    case SG_OP_ATTACH:
        return sg_ctl_decode_attach(j, &out->u.attach, err);
    case SG_OP_CHECKPOINT:
        return sg_ctl_decode_checkpoint(j, &out->u.checkpoint, err);
    case SG_OP_ROLLBACK:
        return sg_ctl_decode_rollback(j, &out->u.rollback, err);
    case SG_OP_ABORT:
        return sg_ctl_decode_abort(j, &out->u.abort, err);
    case SG_OP_CLAIM:
        return sg_ctl_decode_claim(j, &out->u.claim, err);
    case SG_OP_EXPIRE:
        return sg_ctl_decode_expire(j, &out->u.expire, err);
    case SG_OP_CP:
        return sg_ctl_decode_cp(j, &out->u.cp, err);
    default:
        return only_fields(j, sg_ctl_op_name(out->op), none, err);
    }
}

int sg_ctl_req_decode(const void *obj, sg_ctl_req *out, sg_err *err)
{
    const json_t *j = obj;
    memset(out, 0, sizeof *out);
    if (!json_is_object(j))
        return sg_err_set(err, EINVAL, "request is not a JSON object");
    const char *name = json_string_value(json_object_get(j, "op"));
    if (!name)
        return sg_err_set(err, EINVAL, "request has no string \"op\"");
    sg_ctl_op op = sg_ctl_op_from_name(name);
    if (op == SG_OP_NONE)
        return sg_err_set(err, EINVAL, "unknown request op '%.100s'", name);
    int v = 0;
    if (decode_version(j, &v, err) < 0)
        return -1;
    out->op = op;
    if (decode_fields(j, out, err) < 0 ||
        (op != SG_OP_EXEC && opt_string(j, "via", SG_CTL_VIA_MAX, &out->via, err) < 0)) {
        sg_ctl_req_free(out);
        return -1;
    }
    out->v = v;
    return 0;
}

void sg_ctl_req_free(sg_ctl_req *r)
{
    free(r->via);
    switch (r->op) {
    case SG_OP_EXEC:
        sg_exec_req_free(&r->u.exec);
        break;
    case SG_OP_CHECKPOINT:
        free(r->u.checkpoint.label);
        break;
    case SG_OP_ROLLBACK:
        free(r->u.rollback.to);
        break;
    case SG_OP_ABORT:
        free(r->u.abort.reason);
        break;
    case SG_OP_CLAIM:
        if (r->u.claim.meta)
            json_decref(r->u.claim.meta);
        break;
    case SG_OP_CP:
        free(r->u.cp.path);
        free(r->u.cp.name);
        break;
    default:
        break;
    }
    memset(r, 0, sizeof *r);
}

static json_t *strv_json(char *const *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && v && v[i]; i++) {
        json_t *s = json_string(v[i]);
        if (!s || json_array_append_new(a, s) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *winsz_json(sg_ctl_winsz w)
{
    return json_pack("{s:i, s:i}", "rows", (int)w.rows, "cols", (int)w.cols);
}

static int encode_exec(json_t *j, const sg_exec_req *e)
{
    json_t *argv = strv_json(e->argv);
    int r = argv ? json_object_set_new(j, "argv", argv) : -1;
    if (e->env) {
        json_t *env = strv_json(e->env);
        r |= env ? json_object_set_new(j, "env", env) : -1;
    }
    r |= set_str(j, "cwd", e->cwd);
    if (e->timeout_s > 0)
        r |= json_object_set_new(j, "timeout", json_real(e->timeout_s));
    if (e->tool)
        r |= json_object_set(j, "tool", e->tool);
    if (e->code_only)
        r |= json_object_set_new(j, "result", json_string("code"));
    if (e->tty)
        r |= json_object_set_new(j, "tty", winsz_json(e->winsz));
    if (e->no_record_input)
        r |= json_object_set_new(j, "record_input", json_false());
    if (e->detachable)
        r |= json_object_set_new(j, "detachable", json_true());
    r |= set_str(j, "rid", e->rid[0] ? e->rid : NULL);
    return r;
}

static int encode_fields(json_t *j, const sg_ctl_req *r)
{
    switch (r->op) {
    case SG_OP_EXEC:
        return encode_exec(j, &r->u.exec);
    case SG_OP_ATTACH: {
        int rc = json_object_set_new(j, "tty", winsz_json(r->u.attach.winsz));
        rc |= json_object_set_new(j, "detachable", json_boolean(r->u.attach.detachable));
        if (r->u.attach.exec > 0)
            rc |= json_object_set_new(j, "exec", json_integer(r->u.attach.exec));
        return rc;
    }
    case SG_OP_CHECKPOINT:
        return set_str(j, "label", r->u.checkpoint.label);
    case SG_OP_ROLLBACK:
        return set_str(j, "to", r->u.rollback.to) |
               json_object_set_new(j, "dry_run", json_boolean(r->u.rollback.dry_run)) |
               json_object_set_new(j, "force", json_boolean(r->u.rollback.force));
    case SG_OP_ABORT:
        return set_str(j, "reason", r->u.abort.reason);
    case SG_OP_CLAIM:
        return r->u.claim.meta ? json_object_set(j, "meta", r->u.claim.meta) : -1;
    case SG_OP_EXPIRE:
        return json_object_set_new(j, "after_s", json_real(r->u.expire.after_s));
    case SG_OP_CP:
        return json_object_set_new(j, "dir", json_string(r->u.cp.out ? "out" : "in")) |
            (r->u.cp.path ? set_str(j, "path", r->u.cp.path) : -1) | set_str(j, "name", r->u.cp.name);
    default:
        return 0;
    }
}

void *sg_ctl_req_encode(const sg_ctl_req *r)
{
    const char *name = sg_ctl_op_name(r->op);
    if (!name)
        return NULL;
    sg_autojson json_t *j = json_pack("{s:s}", "op", name);
    if (!j || (r->v > 0 && json_object_set_new(j, "v", json_integer(r->v)) < 0) || encode_fields(j, r) < 0 ||
        (r->via && set_str(j, "via", r->via) < 0))
        return NULL;
    return sg_steal_ptr(&j);
}

char *sg_ctl_req_dump(const sg_ctl_req *r)
{
    sg_autojson json_t *j = sg_ctl_req_encode(r);
    return j ? sg_json_dump(j) : NULL;
}

/* ---- replies ---------------------------------------------------------------- */

static int want_object(const void *obj, const char *what, sg_err *err)
{
    return json_is_object((const json_t *)obj) ? 0
           : sg_err_set(err, EINVAL, "the supervisor's %s answer is not an object", what);
}

void *sg_ctl_encode_ping_reply(const sg_ctl_ping_reply *r)
{
    return json_pack("{s:b, s:i}", "pong", r->pong, "v", r->v);
}

int sg_ctl_decode_ping_reply(const void *obj, sg_ctl_ping_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    long long v = 0;
    if (want_object(obj, "ping", err) < 0 || opt_bool(obj, "pong", false, &out->pong, err) < 0 ||
        opt_int(obj, "v", &v, err) < 0)
        return -1;
    if (v < 0 || v > 1000000)
        return sg_err_set(err, EINVAL, "\"v\" must be a protocol version");
    out->v = (int)v;
    return 0;
}

void *sg_ctl_encode_checkpoint_reply(const sg_ctl_checkpoint_reply *r)
{
    json_t *j = json_object();
    if (j && set_str(j, "id", r->id) < 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int sg_ctl_decode_checkpoint_reply(const void *obj, sg_ctl_checkpoint_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    return want_object(obj, "checkpoint", err) < 0 ? -1 : opt_string(obj, "id", 256, &out->id, err);
}

void sg_ctl_checkpoint_reply_free(sg_ctl_checkpoint_reply *r)
{
    free(r->id);
    memset(r, 0, sizeof *r);
}

/* ---- the kill's report (abort, rollback --force) ----------------------------- */

static json_t *ints_json(const long long *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* A required array of at most SG_CTL_KILL_LIST_MAX integers >= 0. */
static int ints_field(const json_t *j, const char *key, long long **out, size_t *n, sg_err *err)
{
    json_t *a = json_object_get(j, key);
    if (!json_is_array(a) || json_array_size(a) > SG_CTL_KILL_LIST_MAX)
        return sg_err_set(err, EINVAL, "\"%s\" must be an array of at most %d integers", key, SG_CTL_KILL_LIST_MAX);
    size_t len = json_array_size(a);
    *out = len ? calloc(len, sizeof **out) : NULL;
    if (len && !*out)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (*n = 0; *n < len; (*n)++) {
        json_t *v = json_array_get(a, *n);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return sg_err_set(err, EINVAL, "\"%s\" must hold integers >= 0", key);
        (*out)[*n] = json_integer_value(v);
    }
    return 0;
}

/* A required field: absent is refused, naming it. */
static int need(const json_t *j, const char *key, const char *what, sg_err *err)
{
    return json_object_get(j, key) ? 0 : sg_err_set(err, EINVAL, "%s has no \"%s\"", what, key);
}

static json_t *kill_proof_json(const sg_ctl_kill_proof *p)
{
    json_t *pids = ints_json(p->left_pids, p->n_left_pids);
    sg_autojson json_t *j = pids ? json_pack("{s:I, s:b, s:I, s:o, s:f}", "processes_left",
                                             (json_int_t)p->processes_left, "cgroup_holds_only_init",
                                             p->cgroup_holds_only_init, "init_pid", (json_int_t)p->init_pid,
                                             "left_pids", pids, "kill_ms", p->kill_ms)
                                 : NULL;
    if (!j || set_str(j, "checked_by", p->checked_by) < 0)
        return NULL;
    return sg_steal_ptr(&j);
}

int sg_ctl_encode_kill_report(void *obj, const sg_ctl_kill_report *r)
{
    json_t *j = obj, *execs = ints_json(r->execs_killed, r->n_execs_killed), *proof = kill_proof_json(&r->proof);
    if (!execs || !proof) {
        json_decref(execs);
        json_decref(proof);
        return -1;
    }
    return json_object_set_new(j, "execs_killed", execs) | json_object_set_new(j, "proof", proof) |
           json_object_set_new(j, "processes_killed", json_integer(r->processes_killed));
}

static int decode_kill_proof(const json_t *p, sg_ctl_kill_proof *out, sg_err *err)
{
    if (!json_is_object(p))
        return sg_err_set(err, EINVAL, "\"proof\" must be an object");
    if (need(p, "processes_left", "the proof", err) < 0 || need(p, "cgroup_holds_only_init", "the proof", err) < 0 ||
        opt_int(p, "processes_left", &out->processes_left, err) < 0 ||
        opt_bool(p, "cgroup_holds_only_init", false, &out->cgroup_holds_only_init, err) < 0 ||
        opt_int(p, "init_pid", &out->init_pid, err) < 0 || opt_number(p, "kill_ms", 0, &out->kill_ms, err) < 0 ||
        opt_string(p, "checked_by", 64, &out->checked_by, err) < 0)
        return -1;
    if (json_object_get(p, "left_pids") && ints_field(p, "left_pids", &out->left_pids, &out->n_left_pids, err) < 0)
        return -1;
    if (out->processes_left < 0 || out->init_pid < 0 || out->kill_ms < 0)
        return sg_err_set(err, EINVAL, "\"processes_left\", \"init_pid\" or \"kill_ms\" of the proof is negative");
    return 0;
}

int sg_ctl_decode_kill_report(const void *obj, sg_ctl_kill_report *out, sg_err *err)
{
    const json_t *j = obj;
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (!json_is_object(j))
        rc = sg_err_set(err, EINVAL, "the kill's report must be an object");
    else if (ints_field(j, "execs_killed", &out->execs_killed, &out->n_execs_killed, err) < 0 ||
             need(j, "processes_killed", "the kill's report", err) < 0 ||
             opt_int(j, "processes_killed", &out->processes_killed, err) < 0 ||
             decode_kill_proof(json_object_get(j, "proof"), &out->proof, err) < 0)
        rc = -1;
    else if (out->processes_killed < 0)
        rc = sg_err_set(err, EINVAL, "\"processes_killed\" is negative");
    if (rc < 0)
        sg_ctl_kill_report_free(out);
    return rc;
}

void sg_ctl_kill_report_free(sg_ctl_kill_report *r)
{
    free(r->execs_killed);
    free(r->proof.left_pids);
    free(r->proof.checked_by);
    memset(r, 0, sizeof *r);
}

/* ---- rollback, abort -------------------------------------------------------- */

static int encode_rollback_more(json_t *j, const sg_ctl_rollback_reply *r)
{
    int rc = set_str(j, "to", r->to) | set_str(j, "asked", r->asked);
    if (r->running_execs >= 0)
        rc |= json_object_set_new(j, "running_execs", json_integer(r->running_execs));
    if (r->changed >= 0)
        rc |= json_object_set_new(j, "changed", json_integer(r->changed));
    if (r->took_ms >= 0)
        rc |= json_object_set_new(j, "took_ms", json_real(r->took_ms));
    if (r->restored || r->safety_checkpoint)
        rc |= json_object_set_new(j, "safety_checkpoint",
                                  r->safety_checkpoint ? json_string(r->safety_checkpoint) : json_null());
    if (r->not_restored > 0)
        rc |= json_object_set_new(j, "not_restored", json_integer(r->not_restored));
    if (r->changes)
        rc |= json_object_set(j, "changes", r->changes);
    if (r->actor)
        rc |= json_object_set(j, "actor", r->actor);
    if (r->killed) {
        json_t *k = json_object();
        rc |= !k || json_object_set_new(j, "killed", k) < 0 || sg_ctl_encode_kill_report(k, &r->kill) < 0;
    } else if (r->restored) {
        rc |= json_object_set_new(j, "killed", json_null());
    }
    return rc;
}

void *sg_ctl_encode_rollback_reply(const sg_ctl_rollback_reply *r)
{
    sg_autojson json_t *j = json_pack("{s:b}", "restored", r->restored);
    if (!j || encode_rollback_more(j, r) != 0)
        return NULL;
    return sg_steal_ptr(&j);
}

/* An optional integer >= 0: *out -1 when absent. */
static int opt_count(const json_t *j, const char *key, long long *out, sg_err *err)
{
    if (!json_object_get(j, key)) {
        *out = -1;
        return 0;
    }
    if (opt_int(j, key, out, err) < 0)
        return -1;
    return *out < 0 ? sg_err_set(err, EINVAL, "\"%s\" is negative", key) : 0;
}

/* An optional string that may be null: NULL then. */
static int opt_string_or_null(const json_t *j, const char *key, size_t max, char **out, sg_err *err)
{
    if (json_is_null(json_object_get(j, key))) {
        *out = NULL;
        return 0;
    }
    return opt_string(j, key, max, out, err);
}

static int decode_rollback(const json_t *j, sg_ctl_rollback_reply *out, sg_err *err)
{
    out->took_ms = -1;
    if (want_object(j, "rollback", err) < 0 || opt_bool(j, "restored", false, &out->restored, err) < 0 ||
        opt_count(j, "running_execs", &out->running_execs, err) < 0 ||
        opt_count(j, "changed", &out->changed, err) < 0 || opt_count(j, "not_restored", &out->not_restored, err) < 0 ||
        (json_object_get(j, "took_ms") && opt_number(j, "took_ms", -1, &out->took_ms, err) < 0) ||
        opt_string(j, "to", 256, &out->to, err) < 0 || opt_string(j, "asked", 256, &out->asked, err) < 0 ||
        opt_string_or_null(j, "safety_checkpoint", 256, &out->safety_checkpoint, err) < 0 ||
        opt_object(j, "actor", &out->actor, err) < 0)
        return -1;
    if (out->not_restored < 0)
        out->not_restored = 0;
    if (out->took_ms < 0 && json_object_get(j, "took_ms"))
        return sg_err_set(err, EINVAL, "\"took_ms\" is negative");
    json_t *ch = json_object_get(j, "changes");
    if (ch && !json_is_array(ch))
        return sg_err_set(err, EINVAL, "\"changes\" must be an array");
    out->changes = ch ? json_incref(ch) : NULL;
    json_t *k = json_object_get(j, "killed");
    if (k && !json_is_null(k)) {
        if (sg_ctl_decode_kill_report(k, &out->kill, err) < 0)
            return -1;
        out->killed = true;
    }
    return 0;
}

int sg_ctl_decode_rollback_reply(const void *obj, sg_ctl_rollback_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (decode_rollback(obj, out, err) < 0) {
        sg_ctl_rollback_reply_free(out);
        return -1;
    }
    return 0;
}

void sg_ctl_rollback_reply_free(sg_ctl_rollback_reply *r)
{
    free(r->to);
    free(r->asked);
    free(r->safety_checkpoint);
    if (r->changes)
        json_decref(r->changes);
    if (r->actor)
        json_decref(r->actor);
    sg_ctl_kill_report_free(&r->kill);
    memset(r, 0, sizeof *r);
}

void *sg_ctl_encode_abort_reply(const sg_ctl_abort_reply *r)
{
    sg_autojson json_t *j = json_pack("{s:b, s:b}", "aborted", r->aborted, "already", r->already);
    if (!j || set_str(j, "by", r->by) < 0 || set_str(j, "reason", r->reason) < 0 ||
        (r->caps && json_object_set(j, "caps", r->caps) < 0) ||
        (r->actor && json_object_set(j, "actor", r->actor) < 0))
        return NULL;
    if (r->killed && sg_ctl_encode_kill_report(j, &r->kill) != 0)
        return NULL;
    if ((r->killed || r->checkpoint) &&
        json_object_set_new(j, "checkpoint", r->checkpoint ? json_string(r->checkpoint) : json_null()) < 0)
        return NULL;
    return sg_steal_ptr(&j);
}

static int decode_abort(const json_t *j, sg_ctl_abort_reply *out, sg_err *err)
{
    if (want_object(j, "abort", err) < 0 || opt_bool(j, "aborted", false, &out->aborted, err) < 0 ||
        opt_bool(j, "already", false, &out->already, err) < 0 || opt_string(j, "by", 4096, &out->by, err) < 0 ||
        opt_string(j, "reason", 4096, &out->reason, err) < 0 || opt_object(j, "caps", &out->caps, err) < 0 ||
        opt_object(j, "actor", &out->actor, err) < 0 ||
        opt_string_or_null(j, "checkpoint", 256, &out->checkpoint, err) < 0)
        return -1;
    if (!json_object_get(j, "proof"))
        return 0; /* "already": no kill */
    if (sg_ctl_decode_kill_report(j, &out->kill, err) < 0)
        return -1;
    out->killed = true;
    return 0;
}

int sg_ctl_decode_abort_reply(const void *obj, sg_ctl_abort_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (decode_abort(obj, out, err) < 0) {
        sg_ctl_abort_reply_free(out);
        return -1;
    }
    return 0;
}

void sg_ctl_abort_reply_free(sg_ctl_abort_reply *r)
{
    free(r->by);
    free(r->reason);
    free(r->checkpoint);
    if (r->caps)
        json_decref(r->caps);
    if (r->actor)
        json_decref(r->actor);
    sg_ctl_kill_report_free(&r->kill);
    memset(r, 0, sizeof *r);
}

void *sg_ctl_encode_resume_reply(const sg_ctl_resume_reply *r)
{
    sg_autojson json_t *j = json_pack("{s:b}", "resumed", r->resumed);
    if (!j || set_str(j, "was", r->was) < 0)
        return NULL;
    return sg_steal_ptr(&j);
}

int sg_ctl_decode_resume_reply(const void *obj, sg_ctl_resume_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (want_object(obj, "resume", err) < 0 || opt_bool(obj, "resumed", false, &out->resumed, err) < 0)
        return -1;
    return opt_string(obj, "was", 4096, &out->was, err);
}

void sg_ctl_resume_reply_free(sg_ctl_resume_reply *r)
{
    free(r->was);
    memset(r, 0, sizeof *r);
}

void *sg_ctl_encode_expire_reply(const sg_ctl_expire_reply *r)
{
    return json_pack("{s:b, s:f}", "expires", r->expires, "after_s", r->after_s);
}

int sg_ctl_decode_expire_reply(const void *obj, sg_ctl_expire_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (want_object(obj, "expire", err) < 0 || opt_bool(obj, "expires", false, &out->expires, err) < 0)
        return -1;
    return opt_number(obj, "after_s", 0, &out->after_s, err);
}

void *sg_ctl_encode_cp_reply(const sg_ctl_cp_reply *r)
{
    sg_autojson json_t *j =
        json_pack("{s:I, s:I, s:I, s:I, s:I}", "files", (json_int_t)r->files, "dirs", (json_int_t)r->dirs, "links",
                  (json_int_t)r->links, "bytes", (json_int_t)r->bytes, "skipped", (json_int_t)r->skipped);
    if (!j || set_str(j, "path", r->path) < 0)
        return NULL;
    return sg_steal_ptr(&j);
}

int sg_ctl_decode_cp_reply(const void *obj, sg_ctl_cp_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    static const char *const f[] = {"files", "dirs", "links", "bytes", "skipped"};
    long long *v[] = {&out->files, &out->dirs, &out->links, &out->bytes, &out->skipped};
    if (want_object(obj, "cp", err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (opt_int(obj, f[i], v[i], err) < 0)
            return -1;
        if (*v[i] < 0)
            return sg_err_set(err, EINVAL, "\"%s\" is negative", f[i]);
    }
    return opt_string(obj, "path", PATH_MAX, &out->path, err);
}

void sg_ctl_cp_reply_free(sg_ctl_cp_reply *r)
{
    free(r->path);
    memset(r, 0, sizeof *r);
}

void *sg_ctl_encode_exec_reply(const sg_ctl_exec_reply *r)
{
    json_t *j = json_pack("{s:o, s:o, s:b, s:b}", "exit_code",
                          r->exit_code >= 0 ? json_integer(r->exit_code) : json_null(), "signal",
                          r->signal > 0 ? json_integer(r->signal) : json_null(), "timed_out", r->timed_out,
                          "output_limit_hit", r->output_limit_hit);
    if (j && r->detached)
        json_object_set_new(j, "detached", json_true());
    if (j && r->exec)
        json_object_set_new(j, "exec", json_integer(r->exec));
    return j;
}

/* An integer that may be null (none): -1 then, and when absent. */
static int opt_int_or_null(const json_t *j, const char *key, long long *out, sg_err *err)
{
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        *out = -1;
        return 0;
    }
    return opt_int(j, key, out, err);
}

int sg_ctl_decode_exec_reply(const void *obj, sg_ctl_exec_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    long long code = 0, sig = 0;
    if (want_object(obj, "exec", err) < 0 || opt_int_or_null(obj, "exit_code", &code, err) < 0 ||
        opt_int_or_null(obj, "signal", &sig, err) < 0 || opt_bool(obj, "timed_out", false, &out->timed_out, err) < 0 ||
        opt_bool(obj, "output_limit_hit", false, &out->output_limit_hit, err) < 0 ||
        opt_bool(obj, "detached", false, &out->detached, err) < 0 || opt_int(obj, "exec", &out->exec, err) < 0)
        return -1;
    if (code < -1 || code > 65535 || sig < -1 || sig > 65535)
        return sg_err_set(err, EINVAL, "\"exit_code\" or \"signal\" out of range");
    out->exit_code = (int)code;
    out->signal = sig < 0 ? 0 : (int)sig;
    return 0;
}

/* ---- info, destroy, checkpoints --------------------------------------------- */

static const char *const info_fields[] = {"running_execs", "cgroup_layout", "state", "abort", "caps_now", "v",
                                          "attached", "now", "unacked", NULL};

void *sg_ctl_encode_info_reply(const sg_ctl_info_reply *r)
{
    sg_autojson json_t *j = r->record ? json_copy(r->record) : json_object();
    if (!j || json_object_set_new(j, "running_execs", json_integer(r->running_execs)) < 0 ||
        set_str(j, "cgroup_layout", r->cgroup_layout) < 0 || set_str(j, "state", r->state) < 0 ||
        json_object_set_new(j, "v", json_integer(r->v)) < 0 ||
        (r->caps_now && json_object_set(j, "caps_now", r->caps_now) < 0) ||
        (r->attached >= 0 && json_object_set_new(j, "attached", json_integer(r->attached)) < 0) ||
        set_str(j, "now", r->now) < 0 ||
        (r->unacked >= 0 && json_object_set_new(j, "unacked", json_integer(r->unacked)) < 0))
        return NULL;
    if (r->abort_by || r->abort_reason) {
        json_t *ab = json_object();
        if (!ab || json_object_set_new(j, "abort", ab) < 0 || set_str(ab, "by", r->abort_by) < 0 ||
            set_str(ab, "reason", r->abort_reason) < 0)
            return NULL;
    }
    return sg_steal_ptr(&j);
}

/* The record: every field of the answer but info_fields. */
static json_t *info_record(const json_t *j)
{
    json_t *rec = json_object();
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)j, key, val) {
        bool typed = false;
        for (size_t i = 0; !typed && info_fields[i]; i++)
            typed = !strcmp(key, info_fields[i]);
        if (rec && !typed && json_object_set(rec, key, val) < 0) {
            json_decref(rec);
            return NULL;
        }
    }
    return rec;
}

static int decode_info(const json_t *j, sg_ctl_info_reply *out, sg_err *err)
{
    long long v = 0;
    if (want_object(j, "info", err) < 0 || opt_int(j, "running_execs", &out->running_execs, err) < 0 ||
        opt_string(j, "cgroup_layout", 64, &out->cgroup_layout, err) < 0 ||
        opt_string(j, "state", 64, &out->state, err) < 0 || opt_object(j, "caps_now", &out->caps_now, err) < 0 ||
        opt_int(j, "v", &v, err) < 0 || opt_count(j, "attached", &out->attached, err) < 0 ||
        opt_string(j, "now", SG_CTL_NOW_MAX, &out->now, err) < 0 || opt_count(j, "unacked", &out->unacked, err) < 0)
        return -1;
    if (v < 0 || v > 1000000)
        return sg_err_set(err, EINVAL, "\"v\" must be a protocol version");
    out->v = (int)v;
    json_t *ab = json_object_get(j, "abort");
    if (ab && (!json_is_object(ab) || opt_string(ab, "by", 4096, &out->abort_by, err) < 0 ||
               opt_string(ab, "reason", 4096, &out->abort_reason, err) < 0))
        return json_is_object(ab) ? -1 : sg_err_set(err, EINVAL, "\"abort\" must be an object");
    out->record = info_record(j);
    return out->record ? 0 : sg_err_set(err, ENOMEM, "out of memory");
}

int sg_ctl_decode_info_reply(const void *obj, sg_ctl_info_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (decode_info(obj, out, err) < 0) {
        sg_ctl_info_reply_free(out);
        return -1;
    }
    return 0;
}

void sg_ctl_info_reply_free(sg_ctl_info_reply *r)
{
    free(r->now);
    free(r->cgroup_layout);
    free(r->state);
    free(r->abort_by);
    free(r->abort_reason);
    if (r->record)
        json_decref(r->record);
    if (r->caps_now)
        json_decref(r->caps_now);
    memset(r, 0, sizeof *r);
}

void *sg_ctl_encode_destroy_reply(const sg_ctl_destroy_reply *r)
{
    sg_autojson json_t *j = json_pack("{s:I, s:b, s:b}", "processes_left", (json_int_t)r->processes_left,
                                      "cgroup_empty", r->cgroup_empty, "cgroup_removed", r->cgroup_removed);
    if (!j || set_str(j, "destroyed", r->destroyed) < 0 ||
        (r->kill_ms >= 0 && json_object_set_new(j, "kill_ms", json_real(r->kill_ms)) < 0) ||
        (r->events_undelivered >= 0 &&
         json_object_set_new(j, "events_undelivered", json_integer(r->events_undelivered)) < 0) ||
        (r->supervisor_was_dead && json_object_set_new(j, "supervisor_was_dead", json_true()) < 0))
        return NULL;
    return sg_steal_ptr(&j);
}

int sg_ctl_decode_destroy_reply(const void *obj, sg_ctl_destroy_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    const json_t *j = obj;
    out->events_undelivered = json_object_get(j, "events_undelivered") ? 0 : -1;
    if (want_object(j, "destroy", err) < 0 || opt_int(j, "processes_left", &out->processes_left, err) < 0 ||
        opt_bool(j, "cgroup_empty", false, &out->cgroup_empty, err) < 0 ||
        opt_bool(j, "cgroup_removed", false, &out->cgroup_removed, err) < 0 ||
        opt_number(j, "kill_ms", -1, &out->kill_ms, err) < 0 ||
        (out->events_undelivered == 0 && opt_int(j, "events_undelivered", &out->events_undelivered, err) < 0) ||
        opt_bool(j, "supervisor_was_dead", false, &out->supervisor_was_dead, err) < 0 ||
        opt_string(j, "destroyed", 256, &out->destroyed, err) < 0)
        return -1;
    if (out->processes_left < 0 || (json_object_get(j, "events_undelivered") && out->events_undelivered < 0) ||
        (json_object_get(j, "kill_ms") && out->kill_ms < 0))
        return sg_ctl_destroy_reply_free(out), sg_err_set(err, EINVAL, "a count or time in the destroy answer is negative");
    return 0;
}

void sg_ctl_destroy_reply_free(sg_ctl_destroy_reply *r)
{
    free(r->destroyed);
    memset(r, 0, sizeof *r);
}

void *sg_ctl_encode_checkpoints_reply(const sg_ctl_checkpoints_reply *r)
{
    sg_autojson json_t *arr = json_array();
    for (size_t i = 0; arr && i < r->n; i++) {
        const sg_ctl_checkpoint_entry *e = &r->v[i];
        json_t *o = json_pack("{s:s?, s:s?, s:I, s:I, s:I}", "id", e->id, "label", e->label ? e->label : "",
                              "time", (json_int_t)e->time, "files", (json_int_t)e->files, "bytes",
                              (json_int_t)e->bytes);
        if (!o || json_array_append_new(arr, o) < 0)
            return NULL;
    }
    return arr ? json_pack("{s:O}", "checkpoints", arr) : NULL;
}

static int decode_checkpoint_entry(const json_t *o, sg_ctl_checkpoint_entry *e, sg_err *err)
{
    if (!json_is_object(o))
        return sg_err_set(err, EINVAL, "\"checkpoints\" must hold objects");
    if (opt_string(o, "id", 256, &e->id, err) < 0 || opt_string(o, "label", 4096, &e->label, err) < 0 ||
        opt_int(o, "time", &e->time, err) < 0 || opt_int(o, "files", &e->files, err) < 0 ||
        opt_int(o, "bytes", &e->bytes, err) < 0)
        return -1;
    if (!e->id)
        return sg_err_set(err, EINVAL, "a checkpoint has no \"id\"");
    if (e->files < 0 || e->bytes < 0)
        return sg_err_set(err, EINVAL, "a checkpoint's \"files\" or \"bytes\" is negative");
    if (!e->label && !(e->label = strdup("")))
        return sg_err_set(err, ENOMEM, "out of memory");
    return 0;
}

int sg_ctl_decode_checkpoints_reply(const void *obj, sg_ctl_checkpoints_reply *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (want_object(obj, "checkpoints", err) < 0)
        return -1;
    json_t *arr = json_object_get(obj, "checkpoints");
    if (!json_is_array(arr) || json_array_size(arr) > SG_CTL_CHECKPOINTS_MAX)
        return sg_err_set(err, EINVAL, "\"checkpoints\" must be an array of at most %d", SG_CTL_CHECKPOINTS_MAX);
    size_t n = json_array_size(arr);
    out->v = n ? calloc(n, sizeof *out->v) : NULL;
    if (n && !out->v)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (; out->n < n; out->n++) {
        if (decode_checkpoint_entry(json_array_get(arr, out->n), &out->v[out->n], err) < 0) {
            out->n++; /* its fields are freed too */
            sg_ctl_checkpoints_reply_free(out);
            return -1;
        }
    }
    return 0;
}

void sg_ctl_checkpoints_reply_free(sg_ctl_checkpoints_reply *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].id);
        free(r->v[i].label);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

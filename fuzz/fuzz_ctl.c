/* Fuzzes the supervisor's control-request parser: any bytes a local client
 * may send as a REQ message, through the same calls the supervisor makes.
 *
 * Invariants:
 *  - sg_ctl_parse_req hands out an object whose "op" is a string, and op
 *    is that string;
 *  - a parsed exec request respects ctl.h's bounds: argv has 1 to
 *    SG_EXEC_MAX_ARGS entries and a non-empty command, env at most
 *    SG_EXEC_MAX_ENV entries, each KEY=VALUE with KEY [A-Za-z_][A-Za-z0-9_]*,
 *    no string holds a NUL (each is exactly its JSON string), cwd is
 *    absolute and at most 4096 bytes, timeout 0 or in (0, 604800], a tool
 *    has a name of 1-64 bytes, code_only iff "result" is "code", tty iff
 *    "tty" is there, detachable only with tty, no_record_input iff
 *    "record_input" is false, rid 1-SG_CTL_RID_MAX of [0-9A-Za-z_-] iff
 *    "rid" is there; an exec request is refused when it names an unknown
 *    field;
 *    (also for an object parsed with JSON_ALLOW_NUL);
 *  - round trip: the parsed request written back as JSON parses to the same
 *    fields, and frees cleanly;
 *  - sg_exec_cmdline, for what is not `sh -c SCRIPT`, is the argv shell-
 *    quoted: a POSIX shell's word splitting of it gives argv back;
 *  - sg_ctl_asm_feed reassembles the input cut in parts: the same bytes,
 *    NUL-terminated, complete at the first non-PART message;
 *  - every op typed (ctl_ops.c): sg_ctl_req_decode of any object never
 *    crashes, hands nothing out on refusal, and a decoded request encodes
 *    and decodes again to the same struct (decode(encode(x)) == x); each
 *    reply decoder likewise round-trips what it decoded;
 *  - the call helper's step (sg_ctl_call_feed) takes the input cut in
 *    messages of any type without crashing or leaking. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/json.h"
#include "wire/ctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t strv_len(char **v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

/* Each string is the JSON array's string, whole (no NUL cut it short). */
static void same_strings(char **v, const json_t *arr)
{
    if (strv_len(v) != json_array_size(arr))
        abort();
    for (size_t i = 0; v[i]; i++) {
        const json_t *s = json_array_get(arr, i);
        if (strlen(v[i]) != json_string_length(s) || strcmp(v[i], json_string_value(s)) != 0)
            abort();
    }
}

static bool env_key_ok(const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv || (kv[0] >= '0' && kv[0] <= '9'))
        return false;
    for (const char *p = kv; p < eq; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

static void check_bounds(const sg_exec_req *r, const json_t *req)
{
    size_t na = strv_len(r->argv);
    if (na < 1 || na > SG_EXEC_MAX_ARGS || !r->argv[0][0])
        abort();
    same_strings(r->argv, json_object_get(req, "argv"));
    if (r->env) {
        if (strv_len(r->env) > SG_EXEC_MAX_ENV)
            abort();
        same_strings(r->env, json_object_get(req, "env"));
        for (char **e = r->env; *e; e++)
            if (!env_key_ok(*e))
                abort();
    } else if (json_object_get(req, "env")) {
        abort();
    }
    if (r->cwd && (r->cwd[0] != '/' || strlen(r->cwd) > 4096 ||
                   strlen(r->cwd) != json_string_length(json_object_get(req, "cwd"))))
        abort();
    if (!r->cwd != !json_object_get(req, "cwd"))
        abort();
    if (r->timeout_s < 0 || r->timeout_s > 604800.0 || (r->timeout_s == 0) != !json_object_get(req, "timeout"))
        abort();
    if (!r->tool != !r->tool_name || !r->tool != !json_object_get(req, "tool"))
        abort();
    if (r->tool_name && (!r->tool_name[0] || strlen(r->tool_name) > 64 || !json_is_object((json_t *)r->tool)))
        abort();
    const char *res = json_string_value(json_object_get(req, "result"));
    if (r->code_only != (res && strcmp(res, "code") == 0))
        abort();
    if (r->tty != (json_object_get(req, "tty") != NULL) || (r->detachable && !r->tty) ||
        r->detachable != json_is_true(json_object_get(req, "detachable")) ||
        r->no_record_input != json_is_false(json_object_get(req, "record_input")))
        abort();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)req, key, v) {
        if (strcmp(key, "op") && strcmp(key, "argv") && strcmp(key, "env") && strcmp(key, "cwd") &&
            strcmp(key, "timeout") && strcmp(key, "tool") && strcmp(key, "result") && strcmp(key, "tty") &&
            strcmp(key, "record_input") && strcmp(key, "detachable") && strcmp(key, "v") && strcmp(key, "rid"))
            abort();
    }
    /* "rid": 1-SG_CTL_RID_MAX of [0-9A-Za-z_-], and there iff given */
    size_t rl = strlen(r->rid);
    if (!rl != !json_object_get(req, "rid") || rl > SG_CTL_RID_MAX ||
        strspn(r->rid, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-") != rl ||
        (rl && strcmp(r->rid, json_string_value(json_object_get(req, "rid"))) != 0))
        abort();
}

static json_t *strv_json(char **v)
{
    json_t *a = json_array();
    for (size_t i = 0; v && v[i]; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

/* Writes r back as a request and parses it again: the same fields. */
static void round_trip(const sg_exec_req *r)
{
    json_t *j = json_pack("{s:s, s:o}", "op", "exec", "argv", strv_json(r->argv));
    if (r->env)
        json_object_set_new(j, "env", strv_json(r->env));
    if (r->cwd)
        json_object_set_new(j, "cwd", json_string(r->cwd));
    if (r->timeout_s)
        json_object_set_new(j, "timeout", json_real(r->timeout_s));
    if (r->tool)
        json_object_set(j, "tool", r->tool);
    if (r->code_only)
        json_object_set_new(j, "result", json_string("code"));
    if (r->tty)
        json_object_set_new(j, "tty", json_pack("{s:i, s:i}", "rows", r->winsz.rows, "cols", r->winsz.cols));
    if (r->no_record_input)
        json_object_set_new(j, "record_input", json_false());
    if (r->detachable)
        json_object_set_new(j, "detachable", json_true());
    if (r->rid[0])
        json_object_set_new(j, "rid", json_string(r->rid));
    char *s = sg_json_dump(j);
    json_decref(j);
    sg_err err;
    const char *op = NULL;
    json_t *again = s ? sg_ctl_parse_req(s, strlen(s), &op, &err) : NULL;
    sg_exec_req r2;
    if (!again || strcmp(op, "exec") != 0 || sg_exec_req_parse(again, &r2, &err) < 0)
        abort();
    check_bounds(&r2, again);
    if (strv_len(r->argv) != strv_len(r2.argv) || strv_len(r->env) != strv_len(r2.env) ||
        !r->cwd != !r2.cwd || (r->cwd && strcmp(r->cwd, r2.cwd) != 0) ||
        r->timeout_s != r2.timeout_s || r->code_only != r2.code_only || r->tty != r2.tty ||
        r->winsz.rows != r2.winsz.rows || r->winsz.cols != r2.winsz.cols || r->detachable != r2.detachable ||
        r->no_record_input != r2.no_record_input || strcmp(r->rid, r2.rid) != 0 ||
        !r->tool_name != !r2.tool_name || (r->tool_name && strcmp(r->tool_name, r2.tool_name) != 0) ||
        (r->tool && !json_equal(r->tool, r2.tool)))
        abort();
    for (size_t i = 0; r->argv[i]; i++)
        if (strcmp(r->argv[i], r2.argv[i]) != 0)
            abort();
    for (size_t i = 0; r->env && r->env[i]; i++)
        if (strcmp(r->env[i], r2.env[i]) != 0)
            abort();
    sg_exec_req_free(&r2);
    json_decref(again);
    free(s);
}

/* POSIX shell word splitting of a line of spaces, unquoted words, '...'
 * and \x; compares the words to argv. */
static void check_cmdline(char **argv)
{
    char *line = sg_exec_cmdline(argv);
    if (!line)
        abort();
    const char *b = strrchr(argv[0], '/');
    b = b ? b + 1 : argv[0];
    if ((!strcmp(b, "sh") || !strcmp(b, "bash") || !strcmp(b, "dash")) && argv[1] &&
        !strcmp(argv[1], "-c") && argv[2] && !argv[3]) {
        if (strcmp(line, argv[2]) != 0)
            abort(); /* the script itself */
        free(line);
        return;
    }
    size_t n = strlen(line), k = 0;
    char *word = malloc(n + 1);
    const char *p = line;
    while (*p) {
        if (*p == ' ') {
            p++;
            continue;
        }
        size_t w = 0;
        while (*p && *p != ' ') {
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q)
                    abort(); /* unbalanced quote */
                memcpy(word + w, p + 1, (size_t)(q - p - 1));
                w += (size_t)(q - p - 1);
                p = q + 1;
            } else if (*p == '\\') {
                if (!p[1])
                    abort();
                word[w++] = p[1];
                p += 2;
            } else {
                word[w++] = *p++;
            }
        }
        word[w] = '\0';
        if (!argv[k] || strcmp(argv[k], word) != 0)
            abort();
        k++;
    }
    if (argv[k])
        abort();
    free(word);
    free(line);
}

/* The input cut in parts, fed as the CLI feeds a RESULT's messages. */
static void check_asm(const uint8_t *data, size_t size)
{
    sg_ctl_asm a = {0};
    sg_err err;
    size_t off = 0, part = size ? (size_t)data[0] % 7 + 1 : 1;
    int rc = 0;
    while (rc == 0) {
        size_t n = size - off < part ? size - off : part;
        uint8_t type = off + n == size ? SG_CTL_RESULT : SG_CTL_RESULT_PART;
        rc = sg_ctl_asm_feed(&a, type, (const char *)data + off, n, &err);
        off += n;
        if ((rc == 1) != (type == SG_CTL_RESULT))
            abort();
    }
    if (a.len != size || (size && memcmp(a.data, data, size) != 0) || (a.data && a.data[a.len] != '\0'))
        abort();
    sg_ctl_asm_free(&a);
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool strv_eq(char **a, char **b)
{
    if (strv_len(a) != strv_len(b))
        return false;
    for (size_t i = 0; a && a[i]; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static bool exec_same(const sg_exec_req *a, const sg_exec_req *b)
{
    return strv_eq(a->argv, b->argv) && strv_eq(a->env, b->env) && str_same(a->cwd, b->cwd) &&
           a->timeout_s == b->timeout_s && str_same(a->tool_name, b->tool_name) &&
           (!a->tool == !b->tool) && (!a->tool || json_equal(a->tool, b->tool)) && a->code_only == b->code_only &&
           a->tty == b->tty && a->winsz.rows == b->winsz.rows && a->winsz.cols == b->winsz.cols &&
           a->no_record_input == b->no_record_input && a->detachable == b->detachable &&
           strcmp(a->rid, b->rid) == 0;
}

static bool req_same(const sg_ctl_req *a, const sg_ctl_req *b)
{
    if (a->op != b->op || a->v != b->v || !str_same(a->via, b->via))
        return false;
    switch (a->op) {
    case SG_OP_EXEC:
        return exec_same(&a->u.exec, &b->u.exec);
    case SG_OP_ATTACH:
        return a->u.attach.exec == b->u.attach.exec && a->u.attach.winsz.rows == b->u.attach.winsz.rows &&
               a->u.attach.winsz.cols == b->u.attach.winsz.cols && a->u.attach.detachable == b->u.attach.detachable;
    case SG_OP_CHECKPOINT:
        return str_same(a->u.checkpoint.label, b->u.checkpoint.label);
    case SG_OP_ROLLBACK:
        return str_same(a->u.rollback.to, b->u.rollback.to) && a->u.rollback.dry_run == b->u.rollback.dry_run &&
               a->u.rollback.force == b->u.rollback.force;
    case SG_OP_ABORT:
        return str_same(a->u.abort.reason, b->u.abort.reason);
    case SG_OP_CLAIM:
        return json_equal(a->u.claim.meta, b->u.claim.meta);
    case SG_OP_EXPIRE:
        return a->u.expire.after_s == b->u.expire.after_s;
    case SG_OP_CP:
        return a->u.cp.out == b->u.cp.out && str_same(a->u.cp.path, b->u.cp.path) &&
            str_same(a->u.cp.name, b->u.cp.name);
    default:
        return true;
    }
}

static bool req_empty(const sg_ctl_req *r)
{
    static const sg_ctl_req zero;
    return memcmp(r, &zero, sizeof zero) == 0;
}

/* Every op typed: decode of any object; decode(encode(x)) == x. */
static void check_typed(const json_t *req)
{
    sg_err err = {0};
    sg_ctl_req r;
    if (sg_ctl_req_decode(req, &r, &err) < 0) {
        if (!req_empty(&r) || !err.msg[0])
            abort(); /* refused: nothing handed out, and says why */
        return;
    }
    if (r.op <= SG_OP_NONE || r.op >= SG_OP_COUNT || r.v < 0 || r.v > SG_CTL_VERSION)
        abort();
    char *body = sg_ctl_req_dump(&r);
    if (!body)
        abort(); /* what was decoded encodes */
    const char *op = NULL;
    json_t *again = sg_ctl_parse_req(body, strlen(body), &op, &err);
    sg_ctl_req r2;
    if (!again || sg_ctl_req_decode(again, &r2, &err) < 0 || !req_same(&r, &r2))
        abort();
    sg_ctl_req_free(&r2);
    json_decref(again);
    free(body);
    sg_ctl_req_free(&r);
    if (!req_empty(&r))
        abort();
}

static bool json_same(const void *a, const void *b)
{
    return (!a && !b) || (a && b && json_equal((json_t *)a, (json_t *)b));
}

static bool ints_same(const long long *a, size_t na, const long long *b, size_t nb)
{
    return na == nb && (!na || memcmp(a, b, na * sizeof *a) == 0);
}

/* The kill's reports of an abort or a rollback: the same fields. */
static bool kill_same(const sg_ctl_kill_report *a, const sg_ctl_kill_report *b)
{
    const sg_ctl_kill_proof *p = &a->proof, *q = &b->proof;
    return ints_same(a->execs_killed, a->n_execs_killed, b->execs_killed, b->n_execs_killed) &&
           a->processes_killed == b->processes_killed && p->processes_left == q->processes_left &&
           p->cgroup_holds_only_init == q->cgroup_holds_only_init && p->init_pid == q->init_pid &&
           ints_same(p->left_pids, p->n_left_pids, q->left_pids, q->n_left_pids) && p->kill_ms == q->kill_ms &&
           str_same(p->checked_by, q->checked_by);
}

/* The replies: what a decoder took encodes and decodes to the same. */
static void check_replies(const json_t *j)
{
    sg_err err = {0};
    sg_ctl_ping_reply p, p2;
    if (sg_ctl_decode_ping_reply(j, &p, &err) == 0) {
        json_t *e = sg_ctl_encode_ping_reply(&p);
        if (!e || sg_ctl_decode_ping_reply(e, &p2, &err) < 0 || p.pong != p2.pong || p.v != p2.v)
            abort();
        json_decref(e);
    }
    sg_ctl_exec_reply x, x2;
    if (sg_ctl_decode_exec_reply(j, &x, &err) == 0) {
        json_t *e = sg_ctl_encode_exec_reply(&x);
        if (!e || sg_ctl_decode_exec_reply(e, &x2, &err) < 0 || memcmp(&x, &x2, sizeof x) != 0)
            abort();
        json_decref(e);
    }
    sg_ctl_abort_reply a, a2;
    if (sg_ctl_decode_abort_reply(j, &a, &err) == 0) {
        json_t *e = sg_ctl_encode_abort_reply(&a);
        if (!e || sg_ctl_decode_abort_reply(e, &a2, &err) < 0 || a.aborted != a2.aborted ||
            a.already != a2.already || !str_same(a.by, a2.by) || !str_same(a.reason, a2.reason) ||
            !json_same(a.caps, a2.caps) || !json_same(a.actor, a2.actor) || !str_same(a.checkpoint, a2.checkpoint) ||
            a.killed != a2.killed || !kill_same(&a.kill, &a2.kill))
            abort();
        json_decref(e);
        sg_ctl_abort_reply_free(&a2);
        sg_ctl_abort_reply_free(&a);
    }
    sg_ctl_rollback_reply b, b2;
    if (sg_ctl_decode_rollback_reply(j, &b, &err) == 0) {
        json_t *e = sg_ctl_encode_rollback_reply(&b);
        if (!e || sg_ctl_decode_rollback_reply(e, &b2, &err) < 0 || b.restored != b2.restored ||
            b.running_execs != b2.running_execs || !str_same(b.to, b2.to) || !json_same(b.changes, b2.changes) ||
            b.changed != b2.changed || b.took_ms != b2.took_ms || b.not_restored != b2.not_restored ||
            !str_same(b.safety_checkpoint, b2.safety_checkpoint) || !str_same(b.asked, b2.asked) ||
            !json_same(b.actor, b2.actor) || b.killed != b2.killed || !kill_same(&b.kill, &b2.kill))
            abort();
        json_decref(e);
        sg_ctl_rollback_reply_free(&b2);
        sg_ctl_rollback_reply_free(&b);
    }
    sg_ctl_checkpoint_reply c;
    if (sg_ctl_decode_checkpoint_reply(j, &c, &err) == 0)
        sg_ctl_checkpoint_reply_free(&c);
    sg_ctl_resume_reply s;
    if (sg_ctl_decode_resume_reply(j, &s, &err) == 0)
        sg_ctl_resume_reply_free(&s);
    sg_ctl_expire_reply x3;
    (void)sg_ctl_decode_expire_reply(j, &x3, &err);
    sg_ctl_cp_reply k, k2;
    if (sg_ctl_decode_cp_reply(j, &k, &err) == 0) {
        json_t *e = sg_ctl_encode_cp_reply(&k);
        if (!e || sg_ctl_decode_cp_reply(e, &k2, &err) < 0 || !str_same(k.path, k2.path) || k.files != k2.files ||
            k.dirs != k2.dirs || k.links != k2.links || k.bytes != k2.bytes || k.skipped != k2.skipped)
            abort();
        json_decref(e);
        sg_ctl_cp_reply_free(&k2);
        sg_ctl_cp_reply_free(&k);
    }
}

static bool entries_same(const sg_ctl_checkpoints_reply *a, const sg_ctl_checkpoints_reply *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (!str_same(a->v[i].id, b->v[i].id) || !str_same(a->v[i].label, b->v[i].label) ||
            a->v[i].time != b->v[i].time || a->v[i].files != b->v[i].files || a->v[i].bytes != b->v[i].bytes)
            return false;
    return true;
}

/* info, destroy and checkpoints: decode(encode(x)) == x as well. */
static void check_more_replies(const json_t *j)
{
    sg_err err = {0};
    sg_ctl_info_reply i, i2;
    if (sg_ctl_decode_info_reply(j, &i, &err) == 0) {
        json_t *e = sg_ctl_encode_info_reply(&i);
        if (!e || sg_ctl_decode_info_reply(e, &i2, &err) < 0 || i.running_execs != i2.running_execs ||
            i.v != i2.v || !str_same(i.cgroup_layout, i2.cgroup_layout) || !str_same(i.state, i2.state) ||
            !str_same(i.abort_by, i2.abort_by) || !str_same(i.abort_reason, i2.abort_reason) ||
            !json_same(i.record, i2.record) || !json_same(i.caps_now, i2.caps_now) || i.attached != i2.attached ||
            i.unacked != i2.unacked || !str_same(i.now, i2.now))
            abort();
        json_decref(e);
        sg_ctl_info_reply_free(&i2);
        sg_ctl_info_reply_free(&i);
    }
    sg_ctl_destroy_reply d, d2;
    if (sg_ctl_decode_destroy_reply(j, &d, &err) == 0) {
        json_t *e = sg_ctl_encode_destroy_reply(&d);
        if (!e || sg_ctl_decode_destroy_reply(e, &d2, &err) < 0 || !str_same(d.destroyed, d2.destroyed) ||
            d.processes_left != d2.processes_left || d.cgroup_empty != d2.cgroup_empty ||
            d.cgroup_removed != d2.cgroup_removed || d.kill_ms != d2.kill_ms ||
            d.events_undelivered != d2.events_undelivered || d.supervisor_was_dead != d2.supervisor_was_dead)
            abort();
        json_decref(e);
        sg_ctl_destroy_reply_free(&d2);
        sg_ctl_destroy_reply_free(&d);
    }
    sg_ctl_checkpoints_reply c, c2;
    if (sg_ctl_decode_checkpoints_reply(j, &c, &err) == 0) {
        json_t *e = sg_ctl_encode_checkpoints_reply(&c);
        if (!e || sg_ctl_decode_checkpoints_reply(e, &c2, &err) < 0 || !entries_same(&c, &c2))
            abort();
        json_decref(e);
        sg_ctl_checkpoints_reply_free(&c2);
        sg_ctl_checkpoints_reply_free(&c);
    }
}

/* The call helper's step over the input cut in messages: byte 0 of each
 * piece is its type. */
static void check_call(const uint8_t *data, size_t size)
{
    sg_ctl_call c = {0};
    size_t off = 0;
    while (off < size) {
        uint8_t type = data[off] % 13;
        size_t n = size - off - 1 < 17 ? size - off - 1 : (size_t)(data[off] % 31);
        if (n > size - off - 1)
            n = size - off - 1;
        sg_ctl_call_end e = sg_ctl_call_feed(&c, type, (const char *)data + off + 1, n);
        off += 1 + n;
        if (e == SG_CTL_CALL_RESULT && !json_is_object((json_t *)c.result) && c.result)
            ; /* any JSON value */
        if (e != SG_CTL_CALL_MORE)
            break;
    }
    sg_ctl_call_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_call(data, size);
    check_asm(data, size);
    sg_err err = {0};
    const char *op = NULL;
    json_t *req = sg_ctl_parse_req((const char *)data, size, &op, &err);
    sg_exec_req r;
    if (!req) {
        /* refused */
    } else if (!json_is_object(req) || !op || op != json_string_value(json_object_get(req, "op"))) {
        abort();
    } else if (sg_exec_req_parse(req, &r, &err) == 0) {
        check_bounds(&r, req);
        round_trip(&r);
        check_cmdline(r.argv);
        sg_exec_req_free(&r);
        if (r.argv || r.env || r.cwd || r.tool || r.tool_name)
            abort(); /* freed and cleared */
    } else if (r.argv || r.env || r.cwd || r.tool || r.tool_name) {
        abort(); /* a refusal hands nothing out (and leaks nothing) */
    }
    if (req) {
        check_typed(req);
        check_replies(req);
        check_more_replies(req);
    }
    json_decref(req);
    /* sg_exec_req_parse's contract holds for any object, also one whose
     * strings hold NUL (which sg_ctl_parse_req refuses before it). */
    req = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (json_is_object(req) && sg_exec_req_parse(req, &r, &err) == 0) {
        check_bounds(&r, req);
        sg_exec_req_free(&r);
    }
    json_decref(req);
    return 0;
}

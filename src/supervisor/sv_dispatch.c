/* sv_dispatch: the requests, decoded (wire/ctl.h), to the handler of their op. */
#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_dispatch.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"

static void op_info(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    json_t *j = sg_sandbox_meta_json(&s->meta);
    json_object_set_new(j, "running_execs", json_integer((json_int_t)s->nexecs));
    json_object_set_new(j, "cgroup_layout", json_string(sg_cgroup_layout_name(sg_cgroup_layout())));
    json_object_set_new(j, "state", json_string(s->init_dead ? "broken" : s->aborted ? "aborted" : "running"));
    if (s->aborted)
        json_object_set_new(j, "abort", json_pack("{s:s, s:s}", "by", s->abort_by, "reason", s->abort_reason));
    json_object_set_new(j, "caps_now", caps_now(s));
    json_object_set_new(j, "v", json_integer(SG_CTL_VERSION));
    client_result(c, j);
}

static void op_destroy(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    sup_destroy(s, c);
}

/* Answered once the loop serves: after the first checkpoint. The version
 * tells a newer client what this supervisor speaks. */
static void op_ping(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    client_result(c, sg_ctl_encode_ping_reply(&(sg_ctl_ping_reply){.pong = true, .v = SG_CTL_VERSION}));
}

/* Destroy in after_s seconds (a negative value cancels): an agent session
 * that ended keeps its sandbox for rollback this long. */
static void op_expire(sup *s, client *c, sg_ctl_req *req, int fd_in)
{
    double after = req->u.expire.after_s; /* absent: -1 */
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

/* The requests, by op (sg_ctl_req_decode's). Only "exec" takes the fd that
 * came with the request (its stdin); every other handler finds it closed (-1). */
static const struct {
    void (*run)(sup *s, client *c, sg_ctl_req *req, int fd_in);
    bool takes_fd;
} ops[SG_OP_COUNT] = {
    [SG_OP_EXEC] = {op_exec, true},
    [SG_OP_ATTACH] = {op_attach, false},
    [SG_OP_INFO] = {op_info, false},
    [SG_OP_DESTROY] = {op_destroy, false},
    [SG_OP_CHECKPOINT] = {op_checkpoint, false},
    [SG_OP_CHECKPOINTS] = {op_checkpoints, false},
    [SG_OP_ROLLBACK] = {op_rollback, false},
    [SG_OP_ABORT] = {op_abort, false},
    [SG_OP_CLAIM] = {op_claim, false},
    [SG_OP_PING] = {op_ping, false},
    [SG_OP_EXPIRE] = {op_expire, false},
    [SG_OP_RESUME] = {op_resume, false},
};

void handle_request(sup *s, client *c, const char *buf, size_t len, int fd_in)
{
    sg_err err = {0};
    const char *op = NULL;
    sg_autojson json_t *req = sg_ctl_parse_req(buf, len, &op, &err);
    if (!req) {
        sg_close_reset(&fd_in);
        client_error(c, err.msg);
        return;
    }
    /* One request per connection. An exec's connection is the command's
     * own channel: after the request it carries signals only, so whatever
     * got hold of it could not destroy, abort or checkpoint with it. */
    if (c->requested) {
        sg_close_reset(&fd_in);
        client_error(c, c->ex ? "an exec's connection takes signals only, not another request"
                              : "one request per connection");
        return;
    }
    c->requested = true;
    /* An abort the kill switch's thread answered is recorded first: a
     * request sent after its answer finds the session aborted. */
    ks_take_killed(s->ks);
    /* Strict: an unknown op or field, a field of the wrong type, a newer
     * version are refused here, by name, before any handler runs. */
    sg_ctl_req r;
    if (sg_ctl_req_decode(req, &r, &err) < 0) {
        sg_close_reset(&fd_in);
        client_error(c, err.msg);
        return;
    }
    if (!ops[r.op].takes_fd)
        sg_close_reset(&fd_in);
    ops[r.op].run(s, c, &r, fd_in);
    sg_ctl_req_free(&r);
}

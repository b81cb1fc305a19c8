/* sv_dispatch: the requests, decoded (wire/ctl.h), to the handler of their op. */
#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_cp.h"
#include "supervisor/sv_dispatch.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_start.h"
#include "supervisor/sv_tty.h"

static void op_info(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sg_autojson json_t *rec = sg_sandbox_meta_json(&s->meta), *caps = sv_killswitch_caps_now(s);
    long long attached = 0;
    const char *now = NULL;
    uint32_t newest = 0;
    for (size_t i = 0; i < s->exec.n; i++) {
        const sv_exec *ex = s->exec.list[i];
        attached += ex->tty && ex->cl;
        const char *n = sv_tty_now(ex);
        if (n[0] && ex->num >= newest) { /* the newest exec's command */
            now = n;
            newest = ex->num;
        }
    }
    sg_ctl_info_reply r = {
        .attached = attached, .now = (char *)now, .unacked = s->cap ? (long long)sg_capture_pending(s->cap) : -1,
        .record = rec, .running_execs = (long long)s->exec.n,
        .cgroup_layout = (char *)sg_cgroup_layout_name(sg_cgroup_layout()),
        .state = (char *)(s->init_dead ? "broken" : s->ks.aborted ? "aborted" : "running"),
        .abort_by = s->ks.aborted ? s->ks.by : NULL, .abort_reason = s->ks.aborted ? s->ks.reason : NULL,
        .caps_now = caps, .v = SG_CTL_VERSION,
    };
    sv_client_result(c, sg_ctl_encode_info_reply(&r));
}

static void op_destroy(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sv_sup_destroy(s, c);
}

/* Answered once the loop serves: after the first checkpoint. The version
 * tells a newer client what this supervisor speaks. */
static void op_ping(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sv_client_result(c, sg_ctl_encode_ping_reply(&(sg_ctl_ping_reply){.pong = true, .v = SG_CTL_VERSION}));
}

/* Destroy in after_s seconds (a negative value cancels): an agent session
 * that ended keeps its sandbox for rollback this long. */
static void op_expire(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    double after = req->u.expire.after_s; /* absent: -1 */
    sv_sup_expire_in(s, after <= 365.0 * 24 * 3600 ? after : -1, sv_killswitch_on_expire);
    sv_client_result(c, sg_ctl_encode_expire_reply(&(sg_ctl_expire_reply){.expires = after >= 0, .after_s = after}));
}

/* The requests, by op (sg_ctl_req_decode's). Only "exec" (its stdin) and
 * "cp" (the caller's directory) take the fd that came with the request;
 * every other handler finds it closed (-1). */
static const struct {
    void (*run)(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);
    bool takes_fd;
} ops[SG_OP_COUNT] = {
    [SG_OP_EXEC] = {sv_exec_op, true},
    [SG_OP_ATTACH] = {sv_tty_op_attach, false},
    [SG_OP_INFO] = {op_info, false},
    [SG_OP_DESTROY] = {op_destroy, false},
    [SG_OP_CHECKPOINT] = {sv_ckpt_op_take, false},
    [SG_OP_CHECKPOINTS] = {sv_ckpt_op_list, false},
    [SG_OP_ROLLBACK] = {sv_ckpt_op_rollback, false},
    [SG_OP_ABORT] = {sv_killswitch_op_abort, false},
    [SG_OP_CLAIM] = {sv_start_op_claim, false},
    [SG_OP_PING] = {op_ping, false},
    [SG_OP_EXPIRE] = {op_expire, false},
    [SG_OP_RESUME] = {sv_killswitch_op_resume, false},
    [SG_OP_CP] = {sv_cp_op, true},
};

void sv_dispatch_request(sv_sup *s, sv_client *c, const char *buf, size_t len, int fd_in)
{
    sg_err err = {0};
    const char *op = NULL;
    sg_autojson json_t *req = sg_ctl_parse_req(buf, len, &op, &err);
    if (!req) {
        sg_close_reset(&fd_in);
        sv_client_error(c, err.msg);
        return;
    }
    /* One request per connection. An exec's connection is the command's
     * own channel: after the request it carries signals only, so whatever
     * got hold of it could not destroy, abort or checkpoint with it. */
    if (c->requested) {
        sg_close_reset(&fd_in);
        sv_client_error(c, c->ex ? "an exec's connection takes signals only, not another request"
                              : "one request per connection");
        return;
    }
    c->requested = true;
    /* An abort the kill switch's thread answered is recorded first: a
     * request sent after its answer finds the session aborted. */
    ks_take_killed(s->ks.thread);
    /* Strict: an unknown op or field, a field of the wrong type, a newer
     * version are refused here, by name, before any handler runs. */
    sg_ctl_req r;
    if (sg_ctl_req_decode(req, &r, &err) < 0) {
        sg_close_reset(&fd_in);
        sv_client_error(c, err.msg);
        return;
    }
    snprintf(c->via, sizeof c->via, "%s", r.via ? r.via : "");
    if (!ops[r.op].takes_fd)
        sg_close_reset(&fd_in);
    ops[r.op].run(s, c, &r, fd_in);
    sg_ctl_req_free(&r);
}

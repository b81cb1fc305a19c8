/* sv_dispatch: the requests: one handler per op. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_dispatch.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"

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

/* ctl: messages and fds over a SOCK_SEQPACKET pair, with and without the
 * type byte: round trips, fds beyond the caller's room, truncation, EOF,
 * and a non-blocking receive with nothing there; an exec request's
 * "result" (the exit code alone or the full result). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "wire/ctl.h"

/* A socket pair and a pipe whose fds travel; closed at the end (-1: gone). */
static void open_all(int sv[2], int p[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(pipe(p), 0);
}

static void close_all(int sv[2], int p[2])
{
    int all[4] = {sv[0], sv[1], p[0], p[1]};
    for (int i = 0; i < 4; i++)
        if (all[i] >= 0)
            close(all[i]);
}

static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* The fd received refers to the same file as the one sent. */
static void same_file(int a, int b)
{
    struct stat sa, sb;
    assert_int_equal(fstat(a, &sa), 0);
    assert_int_equal(fstat(b, &sb), 0);
    assert_true(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

static void test_typed_round_trip(void **state)
{
    int sv[2], p[2];
    open_all(sv, p);
    assert_int_equal(sg_seqpacket_send_typed(sv[0], SG_CTL_REQ, "{\"op\":\"x\"}", 10, &p[0], 1), 0);
    char buf[64];
    uint8_t type = 0;
    int fds[2] = {-1, -1};
    size_t nfds = 2;
    assert_int_equal(sg_seqpacket_recv_typed(sv[1], &type, buf, sizeof buf, fds, &nfds), 10);
    assert_int_equal(type, SG_CTL_REQ);
    assert_memory_equal(buf, "{\"op\":\"x\"}", 10);
    assert_int_equal(nfds, 1);
    same_file(fds[0], p[0]);
    assert_true(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
    close(fds[0]);
    /* EOF: 0 and no type */
    close(sv[0]);
    nfds = 2;
    assert_int_equal(sg_seqpacket_recv_typed(sv[1], &type, buf, sizeof buf, fds, &nfds), 0);
    assert_int_equal(type, 0);
    assert_int_equal(nfds, 0);
    sv[0] = -1;
    close_all(sv, p);
}

static void test_raw_round_trip_and_extra_fds(void **state)
{
    int sv[2], p[2];
    open_all(sv, p);
    struct { uint32_t a, b; } msg = {7, 9}, got = {0, 0};
    int send_fds[3] = {p[0], p[1], p[0]};
    int before = count_fds();
    assert_int_equal(sg_seqpacket_send(sv[0], &msg, sizeof msg, send_fds, 3), 0);
    int fds[1] = {-1};
    size_t nfds = 1; /* room for one: the other two are closed, not leaked */
    assert_int_equal(sg_seqpacket_recv(sv[1], &got, sizeof got, 0, fds, &nfds), (ssize_t)sizeof got);
    assert_int_equal(got.a, 7);
    assert_int_equal(got.b, 9);
    assert_int_equal(nfds, 1);
    same_file(fds[0], p[0]);
    assert_int_equal(count_fds(), before + 1); /* the extra two were closed */
    close(fds[0]);
    close_all(sv, p);
}

static void test_raw_truncated_and_nonblocking(void **state)
{
    int sv[2], p[2];
    open_all(sv, p);
    char big[256], small[16];
    memset(big, 'x', sizeof big);
    /* nothing there yet */
    size_t nfds = 1;
    int fd = -1;
    int before = count_fds();
    assert_int_equal(sg_seqpacket_recv(sv[1], small, sizeof small, MSG_DONTWAIT, &fd, &nfds), -EAGAIN);
    assert_int_equal(nfds, 0);
    /* larger than the room: refused whole, its fd closed */
    assert_int_equal(sg_seqpacket_send(sv[0], big, sizeof big, &p[1], 1), 0);
    nfds = 1;
    assert_int_equal(sg_seqpacket_recv(sv[1], small, sizeof small, MSG_DONTWAIT, &fd, &nfds), -EMSGSIZE);
    assert_int_equal(nfds, 0);
    assert_int_equal(count_fds(), before); /* the fd it carried was closed */
    /* the message is gone: the next one is received */
    assert_int_equal(sg_seqpacket_send(sv[0], "ok", 2, NULL, 0), 0);
    nfds = 1;
    assert_int_equal(sg_seqpacket_recv(sv[1], small, sizeof small, 0, &fd, &nfds), 2);
    assert_memory_equal(small, "ok", 2);
    assert_int_equal(nfds, 0);
    close(sv[0]);
    assert_int_equal(sg_seqpacket_recv(sv[1], small, sizeof small, 0, NULL, NULL), 0);
    sv[0] = -1;
    close_all(sv, p);
}

static void parse_result(const char *text, int want_rc, bool want_code_only, const char *want_msg)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    sg_exec_req r;
    sg_err err = {0};
    assert_int_equal(sg_exec_req_parse(j, &r, &err), want_rc);
    if (want_rc == 0) {
        assert_int_equal(r.code_only, want_code_only);
        assert_string_equal(r.argv[0], "true");
        sg_exec_req_free(&r);
    } else {
        assert_non_null(strstr(err.msg, want_msg));
    }
    json_decref(j);
}

static void test_exec_req_result(void **state)
{
    (void)state;
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"]}", 0, false, NULL);
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"],\"result\":\"code\"}", 0, true, NULL);
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"],\"result\":\"full\"}", 0, false, NULL);
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"],\"result\":\"exit\"}", -1, false,
                 "\"result\" must be \"code\" or \"full\"");
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"],\"result\":1}", -1, false,
                 "\"result\" must be");
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"],\"results\":\"code\"}", -1, false,
                 "unknown field \"results\"");
}

static void test_exec_req_tty(void **state)
{
    (void)state;
    json_t *j = json_loads("{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24,\"cols\":80}}", 0, NULL);
    sg_exec_req r;
    sg_err err = {0};
    assert_int_equal(sg_exec_req_parse(j, &r, &err), 0);
    assert_true(r.tty);
    assert_int_equal(r.winsz.rows, 24);
    assert_int_equal(r.winsz.cols, 80);
    sg_exec_req_free(&r);
    json_decref(j);
    static const char *bad[] = {
        "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":true}",
        "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24}}",
        "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":-1,\"cols\":80}}",
        "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24,\"cols\":65536}}",
        "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24,\"cols\":80,\"x\":1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = json_loads(bad[i], 0, NULL);
        assert_int_equal(sg_exec_req_parse(j, &r, &err), -1);
        assert_non_null(strstr(err.msg, "\"tty\" must be"));
        json_decref(j);
    }
    parse_result("{\"op\":\"exec\",\"argv\":[\"true\"]}", 0, false, NULL);
}

static json_t *load(const char *text)
{
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(j);
    return j;
}

/* A reply refused names its field (and holds nothing). */
#define REFUSED(type, decode, text, field)                                                                        \
    do {                                                                                                          \
        json_t *j_ = load(text);                                                                                  \
        type o_;                                                                                                  \
        sg_err e_ = {0};                                                                                          \
        assert_int_equal(decode(j_, &o_, &e_), -1);                                                               \
        assert_non_null(strstr(e_.msg, field));                                                                   \
        json_decref(j_);                                                                                          \
    } while (0)

static void test_info_reply(void **state)
{
    (void)state;
    json_t *rec = load("{\"id\":\"abc\",\"learner\":\"l\"}"), *caps = load("{\"max_calls\":3}");
    sg_ctl_info_reply r = {.record = rec, .running_execs = 2, .cgroup_layout = "v2", .state = "aborted",
                           .abort_by = "operator", .abort_reason = "stop", .caps_now = caps, .v = SG_CTL_VERSION,
                           .attached = 1, .now = "make test", .unacked = 7};
    json_t *j = sg_ctl_encode_info_reply(&r);
    assert_non_null(j);
    /* the record's fields are at the top level, as before the type */
    assert_string_equal(json_string_value(json_object_get(j, "learner")), "l");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "abort"), "by")), "operator");
    sg_ctl_info_reply d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_decode_info_reply(j, &d, &err), 0);
    assert_true(json_equal(d.record, rec));
    assert_true(json_equal(d.caps_now, caps));
    assert_int_equal(d.running_execs, 2);
    assert_int_equal(d.v, SG_CTL_VERSION);
    assert_string_equal(d.state, "aborted");
    assert_string_equal(d.abort_reason, "stop");
    assert_int_equal(d.attached, 1);
    assert_string_equal(d.now, "make test");
    assert_int_equal(d.unacked, 7);
    assert_null(json_object_get(d.record, "now")); /* typed, not the record's */
    sg_ctl_info_reply_free(&d);
    json_decref(j);
    /* from a supervisor before them: not told (-1, NULL) */
    j = load("{\"id\":\"abc\",\"running_execs\":0}");
    assert_int_equal(sg_ctl_decode_info_reply(j, &d, &err), 0);
    assert_true(d.attached == -1 && d.unacked == -1 && d.now == NULL);
    sg_ctl_info_reply_free(&d);
    json_decref(j);
    json_decref(rec);
    json_decref(caps);
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "{\"running_execs\":\"2\"}", "\"running_execs\"");
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "{\"abort\":[]}", "\"abort\"");
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "{\"abort\":{\"by\":1}}", "\"by\"");
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "{\"caps_now\":1}", "\"caps_now\"");
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "{\"attached\":-1}", "\"attached\" is negative");
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "{\"now\":3}", "\"now\"");
    REFUSED(sg_ctl_info_reply, sg_ctl_decode_info_reply, "[]", "not an object");
}

static void test_destroy_reply(void **state)
{
    (void)state;
    sg_ctl_destroy_reply r = {.destroyed = "abc", .cgroup_empty = true, .cgroup_removed = true, .kill_ms = 1.5,
                              .events_undelivered = -1};
    json_t *j = sg_ctl_encode_destroy_reply(&r);
    assert_non_null(j);
    assert_null(json_object_get(j, "events_undelivered")); /* the event's proof: not known yet */
    assert_null(json_object_get(j, "supervisor_was_dead"));
    sg_ctl_destroy_reply d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_decode_destroy_reply(j, &d, &err), 0);
    assert_string_equal(d.destroyed, "abc");
    assert_true(d.cgroup_empty && d.cgroup_removed && !d.supervisor_was_dead);
    assert_true(d.kill_ms == 1.5);
    assert_int_equal(d.events_undelivered, -1);
    d.events_undelivered = 7;
    json_decref(j);
    j = sg_ctl_encode_destroy_reply(&d);
    sg_ctl_destroy_reply_free(&d);
    assert_int_equal(json_integer_value(json_object_get(j, "events_undelivered")), 7);
    json_decref(j);
    REFUSED(sg_ctl_destroy_reply, sg_ctl_decode_destroy_reply, "{\"cgroup_empty\":1}", "\"cgroup_empty\"");
    REFUSED(sg_ctl_destroy_reply, sg_ctl_decode_destroy_reply, "{\"events_undelivered\":1.5}", "\"events_undelivered\"");
    REFUSED(sg_ctl_destroy_reply, sg_ctl_decode_destroy_reply, "{\"processes_left\":-1}", "negative");
}

static void test_checkpoints_reply(void **state)
{
    (void)state;
    sg_ctl_checkpoint_entry v[2] = {{.id = "aa", .label = "first", .time = 10, .files = 1, .bytes = 2},
                                    {.id = "bb", .label = NULL, .time = 11, .files = 3, .bytes = 4}};
    json_t *j = sg_ctl_encode_checkpoints_reply(&(sg_ctl_checkpoints_reply){v, 2});
    assert_non_null(j);
    sg_ctl_checkpoints_reply d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_decode_checkpoints_reply(j, &d, &err), 0);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.v[0].label, "first");
    assert_string_equal(d.v[1].label, ""); /* none: "" */
    assert_int_equal(d.v[1].bytes, 4);
    sg_ctl_checkpoints_reply_free(&d);
    json_decref(j);
    REFUSED(sg_ctl_checkpoints_reply, sg_ctl_decode_checkpoints_reply, "{}", "\"checkpoints\"");
    REFUSED(sg_ctl_checkpoints_reply, sg_ctl_decode_checkpoints_reply, "{\"checkpoints\":[{\"label\":\"x\"}]}", "\"id\"");
    REFUSED(sg_ctl_checkpoints_reply, sg_ctl_decode_checkpoints_reply, "{\"checkpoints\":[{\"id\":\"a\",\"files\":\"1\"}]}",
            "\"files\"");
}

static void test_abort_reply(void **state)
{
    (void)state;
    long long execs[2] = {3, 5}, pids[1] = {42};
    json_t *caps = load("{\"max_calls\":3}"), *actor = load("{\"uid\":0}");
    sg_ctl_abort_reply r = {.aborted = true, .by = "operator", .reason = "operator: stop", .caps = caps,
                            .actor = actor, .killed = true, .checkpoint = NULL,
                            .kill = {.execs_killed = execs, .n_execs_killed = 2, .processes_killed = 9,
                                     .proof = {.processes_left = 1, .init_pid = 7, .left_pids = pids,
                                               .n_left_pids = 1, .kill_ms = 2.5, .checked_by = "cgroup"}}};
    json_t *j = sg_ctl_encode_abort_reply(&r);
    assert_non_null(j);
    /* the record as it always was: the kill's fields at the top level, "checkpoint" null */
    assert_int_equal(json_integer_value(json_object_get(j, "processes_killed")), 9);
    assert_true(json_is_null(json_object_get(j, "checkpoint")));
    assert_true(json_number_value(json_object_get(json_object_get(j, "proof"), "kill_ms")) == 2.5);
    sg_ctl_abort_reply d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_decode_abort_reply(j, &d, &err), 0);
    assert_true(d.aborted && !d.already && d.killed);
    assert_string_equal(d.by, "operator");
    assert_int_equal(d.kill.n_execs_killed, 2);
    assert_int_equal(d.kill.execs_killed[1], 5);
    assert_int_equal(d.kill.proof.left_pids[0], 42);
    assert_false(d.kill.proof.cgroup_holds_only_init);
    assert_string_equal(d.kill.proof.checked_by, "cgroup");
    assert_true(json_equal(d.caps, caps) && json_equal(d.actor, actor));
    assert_null(d.checkpoint);
    sg_ctl_abort_reply_free(&d);
    json_decref(j);
    /* "already": no kill */
    j = sg_ctl_encode_abort_reply(&(sg_ctl_abort_reply){.aborted = true, .already = true, .by = "cap", .reason = "x"});
    assert_null(json_object_get(j, "proof"));
    assert_int_equal(sg_ctl_decode_abort_reply(j, &d, &err), 0);
    assert_true(d.already && !d.killed);
    sg_ctl_abort_reply_free(&d);
    json_decref(j);
    json_decref(caps);
    json_decref(actor);
    REFUSED(sg_ctl_abort_reply, sg_ctl_decode_abort_reply, "{\"aborted\":1}", "\"aborted\"");
    REFUSED(sg_ctl_abort_reply, sg_ctl_decode_abort_reply, "{\"proof\":{}}", "\"execs_killed\"");
    REFUSED(sg_ctl_abort_reply, sg_ctl_decode_abort_reply,
            "{\"execs_killed\":[],\"processes_killed\":1,\"proof\":{\"processes_left\":0}}",
            "\"cgroup_holds_only_init\"");
    REFUSED(sg_ctl_abort_reply, sg_ctl_decode_abort_reply,
            "{\"execs_killed\":[],\"processes_killed\":1,\"proof\":{\"processes_left\":0,"
            "\"cgroup_holds_only_init\":true,\"kill_ms\":\"1\"}}",
            "\"kill_ms\"");
    REFUSED(sg_ctl_abort_reply, sg_ctl_decode_abort_reply, "{\"execs_killed\":[\"1\"],\"processes_killed\":1,\"proof\":{}}",
            "\"execs_killed\"");
    REFUSED(sg_ctl_abort_reply, sg_ctl_decode_abort_reply, "{\"caps\":[]}", "\"caps\"");
}

static void test_rollback_reply(void **state)
{
    (void)state;
    json_t *changes = load("[{\"path\":\"a\",\"change\":\"modified\"}]");
    /* the plan (a dry run) */
    sg_ctl_rollback_reply r = {.to = "abcd", .changes = changes, .running_execs = 2, .changed = -1, .took_ms = -1};
    json_t *j = sg_ctl_encode_rollback_reply(&r);
    assert_non_null(j);
    assert_null(json_object_get(j, "changed"));
    assert_null(json_object_get(j, "killed"));
    sg_ctl_rollback_reply d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_decode_rollback_reply(j, &d, &err), 0);
    assert_int_equal(d.running_execs, 2);
    assert_int_equal(d.changed, -1);
    assert_false(d.restored || d.killed);
    assert_true(json_equal(d.changes, changes));
    sg_ctl_rollback_reply_free(&d);
    json_decref(j);
    /* done, after a kill */
    long long execs[1] = {4};
    r = (sg_ctl_rollback_reply){.to = "abcd", .changes = changes, .running_execs = -1, .changed = 1, .took_ms = 3,
                                .restored = true, .safety_checkpoint = "ef", .killed = true, .asked = "ab",
                                .kill = {.execs_killed = execs, .n_execs_killed = 1, .processes_killed = 2,
                                         .proof = {.cgroup_holds_only_init = true, .kill_ms = 1}}};
    j = sg_ctl_encode_rollback_reply(&r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "killed"), "processes_killed")), 2);
    assert_int_equal(sg_ctl_decode_rollback_reply(j, &d, &err), 0);
    assert_true(d.restored && d.killed && d.kill.proof.cgroup_holds_only_init);
    assert_int_equal(d.kill.execs_killed[0], 4);
    assert_int_equal(d.running_execs, -1);
    assert_string_equal(d.safety_checkpoint, "ef");
    assert_string_equal(d.asked, "ab");
    sg_ctl_rollback_reply_free(&d);
    json_decref(j);
    json_decref(changes);
    REFUSED(sg_ctl_rollback_reply, sg_ctl_decode_rollback_reply, "{\"running_execs\":\"1\"}", "\"running_execs\"");
    REFUSED(sg_ctl_rollback_reply, sg_ctl_decode_rollback_reply, "{\"changes\":{}}", "\"changes\"");
    REFUSED(sg_ctl_rollback_reply, sg_ctl_decode_rollback_reply, "{\"killed\":{\"processes_killed\":1}}",
            "\"execs_killed\"");
    REFUSED(sg_ctl_rollback_reply, sg_ctl_decode_rollback_reply, "{\"safety_checkpoint\":1}", "\"safety_checkpoint\"");
}

/* "via": whom a request acts for, round trip, bounds, and not on exec. */
static void test_req_via(void **state)
{
    (void)state;
    sg_ctl_req r = {.op = SG_OP_ROLLBACK, .v = SG_CTL_VERSION, .via = "mcp: claude \u00e9"};
    json_t *j = sg_ctl_req_encode(&r);
    assert_non_null(j);
    sg_ctl_req d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_req_decode(j, &d, &err), 0);
    assert_string_equal(d.via, "mcp: claude \u00e9");
    sg_ctl_req_free(&d);
    json_decref(j);
    r.via = NULL; /* absent: none */
    j = sg_ctl_req_encode(&r);
    assert_null(json_object_get(j, "via"));
    assert_int_equal(sg_ctl_req_decode(j, &d, &err), 0);
    assert_null(d.via);
    sg_ctl_req_free(&d);
    json_decref(j);
    static const struct { const char *req, *msg; } bad[] = {
        {"{\"op\":\"abort\",\"via\":7}", "\"via\" must be a string"},
        {"{\"op\":\"exec\",\"argv\":[\"true\"],\"via\":\"x\"}", "unknown field \"via\" in exec request"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = json_loads(bad[i].req, 0, NULL);
        assert_non_null(j);
        assert_int_equal(sg_ctl_req_decode(j, &d, &err), -1);
        assert_non_null(strstr(err.msg, bad[i].msg));
        json_decref(j);
    }
    char longer[SG_CTL_VIA_MAX + 2];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    j = json_pack("{s:s, s:s}", "op", "checkpoint", "via", longer);
    assert_int_equal(sg_ctl_req_decode(j, &d, &err), -1);
    assert_non_null(strstr(err.msg, "at most 128 bytes"));
    json_decref(j);
    assert_true(sg_ctl_is_via_refusal("unknown field \"via\" in rollback request"));
    assert_false(sg_ctl_is_via_refusal("unknown field \"v\" in rollback request"));
}

/* An exec's "rid": it round-trips; a bad one is refused by name; the
 * refusals a client turns into what to do are recognised. */
static void test_exec_rid(void **state)
{
    (void)state;
    static char *argv[] = {"true", NULL};
    sg_ctl_req r = {.op = SG_OP_EXEC, .v = SG_CTL_VERSION, .u.exec = {.argv = argv, .rid = "0123abcd-_Z"}};
    json_t *j = sg_ctl_req_encode(&r);
    assert_non_null(j);
    sg_ctl_req d;
    sg_err err = {0};
    assert_int_equal(sg_ctl_req_decode(j, &d, &err), 0);
    assert_string_equal(d.u.exec.rid, "0123abcd-_Z");
    sg_ctl_req_free(&d);
    json_decref(j);
    r.u.exec.rid[0] = '\0'; /* none: not on the wire */
    j = sg_ctl_req_encode(&r);
    assert_null(json_object_get(j, "rid"));
    assert_int_equal(sg_ctl_req_decode(j, &d, &err), 0);
    assert_string_equal(d.u.exec.rid, "");
    sg_ctl_req_free(&d);
    json_decref(j);
    char longer[SG_CTL_RID_MAX + 2];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    json_t *bad[] = {
        json_pack("{s:s, s:[s], s:s}", "op", "exec", "argv", "true", "rid", ""),
        json_pack("{s:s, s:[s], s:s}", "op", "exec", "argv", "true", "rid", longer),
        json_pack("{s:s, s:[s], s:s}", "op", "exec", "argv", "true", "rid", "a b"),
        json_pack("{s:s, s:[s], s:i}", "op", "exec", "argv", "true", "rid", 7),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_non_null(bad[i]);
        assert_int_equal(sg_ctl_req_decode(bad[i], &d, &err), -1);
        assert_non_null(strstr(err.msg, "\"rid\" must be"));
        json_decref(bad[i]);
    }
    assert_true(sg_ctl_is_rid_refusal("unknown field \"rid\" in exec request"));
    assert_false(sg_ctl_is_rid_refusal("unknown field \"v\" in exec request"));
    assert_true(sg_ctl_is_rid_seen(SG_CTL_RID_SEEN " (exec 3): not run again"));
    assert_false(sg_ctl_is_rid_seen("session aborted: cap"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_typed_round_trip),
        cmocka_unit_test(test_raw_round_trip_and_extra_fds),
        cmocka_unit_test(test_raw_truncated_and_nonblocking),
        cmocka_unit_test(test_exec_req_result),
        cmocka_unit_test(test_exec_req_tty),
        cmocka_unit_test(test_info_reply),
        cmocka_unit_test(test_destroy_reply),
        cmocka_unit_test(test_checkpoints_reply),
        cmocka_unit_test(test_abort_reply),
        cmocka_unit_test(test_rollback_reply),
        cmocka_unit_test(test_req_via),
        cmocka_unit_test(test_exec_rid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for ckpt_proto: the checkpoint records' JSON form and the
 * length-prefixed framing, over a real socketpair. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "wire/ckpt_proto.h"

/* ---- bytes ------------------------------------------------------------------ */

/* buf -> hex -> bytes, asserting the hex text and the round trip. */
static void roundtrip_bytes(const void *buf, size_t len, const char *hex, bool no_nul)
{
    json_t *v = sg_ckpt_proto_bytes(buf, len);
    assert_non_null(v);
    assert_true(json_is_string(v));
    assert_string_equal(json_string_value(v), hex);
    sg_err err = {0};
    size_t got = 99;
    sg_autofree char *back = sg_ckpt_proto_unbytes(v, no_nul, &got, &err);
    assert_non_null(back);
    assert_int_equal(got, len);
    assert_memory_equal(back, buf, len);
    assert_int_equal(back[len], '\0');
    json_decref(v);
}

static void test_bytes_roundtrip(void **state)
{
    (void)state;
    roundtrip_bytes("", 0, "", true);
    roundtrip_bytes("a", 1, "61", true);
    roundtrip_bytes("dir/f\xff\xfe.txt", 11, "6469722f66fffe2e747874", true);
    /* every byte value but NUL */
    unsigned char all[255];
    char hex[2 * 255 + 1];
    for (int i = 0; i < 255; i++) {
        all[i] = (unsigned char)(i + 1);
        snprintf(hex + 2 * i, 3, "%02x", i + 1);
    }
    roundtrip_bytes(all, sizeof all, hex, true);
    /* a NUL inside: only without no_nul */
    roundtrip_bytes("a\0b", 3, "610062", false);
    roundtrip_bytes("\0", 1, "00", false);

    /* len is optional */
    json_t *v = json_string("6869");
    sg_err err = {0};
    sg_autofree char *s = sg_ckpt_proto_unbytes(v, true, NULL, &err);
    assert_string_equal(s, "hi");
    json_decref(v);
}

/* Asserts that v (consumed) is refused with a message. */
static void refuse_unbytes(json_t *v, bool no_nul)
{
    sg_err err = {0};
    size_t len = 77;
    char *s = sg_ckpt_proto_unbytes(v, no_nul, &len, &err);
    if (s)
        fail_msg("accepted %s", json_is_string(v) ? json_string_value(v) : "(not a string)");
    assert_int_equal(err.code, EPROTO);
    assert_true(err.msg[0] != '\0');
    assert_non_null(strstr(err.msg, "byte string"));
    assert_int_equal(len, 77); /* untouched */
    json_decref(v);
}

static void test_bytes_refused(void **state)
{
    (void)state;
    refuse_unbytes(json_string("610062"), true); /* embedded NUL */
    refuse_unbytes(json_string("00"), true);
    refuse_unbytes(json_string("6"), true);      /* odd length */
    refuse_unbytes(json_string("616"), false);
    refuse_unbytes(json_string("6g"), false);    /* not hex */
    refuse_unbytes(json_string("zz"), false);
    refuse_unbytes(json_string("6 "), false);
    refuse_unbytes(json_string("-1"), false);
    refuse_unbytes(json_string("4A"), false);    /* uppercase */
    refuse_unbytes(json_string("FF"), false);
    refuse_unbytes(json_integer(61), false);     /* not a string */
    refuse_unbytes(json_null(), false);
    refuse_unbytes(json_true(), false);
    refuse_unbytes(json_array(), false);
    refuse_unbytes(json_object(), false);
    /* a missing value */
    sg_err err = {0};
    assert_null(sg_ckpt_proto_unbytes(NULL, false, NULL, &err));
    assert_int_equal(err.code, EPROTO);
}

/* ---- stats ------------------------------------------------------------------ */

static void test_stats(void **state)
{
    (void)state;
    sg_checkpoint_stats st = {.files = 3, .dirs = 2, .bytes = (uint64_t)1 << 40,
                              .changed = 0, .hashed = 7, .skipped = INT64_MAX};
    json_t *v = sg_ckpt_proto_stats(&st);
    assert_non_null(v);
    sg_checkpoint_stats back;
    memset(&back, 0xab, sizeof back);
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_unstats(v, &back, &err), 0);
    assert_memory_equal(&back, &st, sizeof st);

    /* each field missing, negative, or not an integer */
    const char *keys[] = {"files", "dirs", "bytes", "changed", "hashed", "skipped"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *bad[] = {NULL, json_integer(-1), json_string("1"), json_real(1.0), json_null()};
        for (size_t j = 0; j < sizeof bad / sizeof *bad; j++) {
            json_t *c = json_deep_copy(v);
            if (bad[j])
                json_object_set_new(c, keys[i], bad[j]);
            else
                json_object_del(c, keys[i]);
            sg_err e = {0};
            if (sg_ckpt_proto_unstats(c, &back, &e) == 0)
                fail_msg("stats accepted with %s bad (%zu)", keys[i], j);
            assert_int_equal(e.code, EPROTO);
            assert_non_null(strstr(e.msg, "stats"));
            json_decref(c);
        }
    }
    /* not an object */
    json_t *arr = json_array();
    assert_int_equal(sg_ckpt_proto_unstats(arr, &back, &err), -1);
    assert_int_equal(sg_ckpt_proto_unstats(NULL, &back, &err), -1);
    json_decref(arr);
    json_decref(v);
}

/* ---- infos ------------------------------------------------------------------ */

static void test_infos(void **state)
{
    (void)state;
    sg_checkpoint_info in[3] = {0};
    strcpy(in[0].id, "0123456789abcdef0123456789abcdef01234567");
    in[0].label = "first";
    in[0].time = 1700000000;
    in[0].files = 1;
    in[0].dirs = 2;
    in[0].bytes = 3;
    strcpy(in[1].id, "ffffffffffffffffffffffffffffffffffffffff");
    in[1].label = "not \xff\xfe utf-8 \xc3";
    in[1].time = -5; /* before the epoch: time is signed */
    in[1].files = (uint64_t)1 << 33;
    strcpy(in[2].id, "0000000000000000000000000000000000000000");
    in[2].label = NULL; /* travels as "" */
    json_t *v = sg_ckpt_proto_infos(in, 3);
    assert_non_null(v);
    assert_int_equal(json_array_size(v), 3);

    sg_checkpoint_info *out = NULL;
    size_t n = 0;
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_uninfos(v, &out, &n, &err), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(out[i].id, in[i].id);
        assert_string_equal(out[i].label, in[i].label ? in[i].label : "");
        assert_int_equal(out[i].time, in[i].time);
        assert_int_equal(out[i].files, in[i].files);
        assert_int_equal(out[i].dirs, in[i].dirs);
        assert_int_equal(out[i].bytes, in[i].bytes);
    }
    sg_checkpoint_infos_free(out, n);

    /* an empty list */
    json_t *empty = sg_ckpt_proto_infos(NULL, 0);
    assert_int_equal(sg_ckpt_proto_uninfos(empty, &out, &n, &err), 0);
    assert_int_equal(n, 0);
    sg_checkpoint_infos_free(out, n);
    json_decref(empty);

    /* malformed entries: the whole list is refused, nothing leaks */
    struct {
        const char *key;
        json_t *val; /* NULL: field removed */
    } bad[] = {
        {"id", json_string("0123")},
        {"id", json_string("0123456789ABCDEF0123456789ABCDEF01234567")},
        {"id", json_string("0123456789abcdef0123456789abcdef0123456z")},
        {"id", json_integer(1)},
        {"id", NULL},
        {"label", json_string("abc")},
        {"label", json_string("610062")}, /* a NUL in a label */
        {"label", json_string("Ab")},
        {"label", NULL},
        {"time", json_string("1")},
        {"time", NULL},
        {"files", json_integer(-1)},
        {"files", NULL},
        {"dirs", json_integer(-2)},
        {"bytes", json_real(1.5)},
        {"bytes", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *c = json_deep_copy(v);
        json_t *e = json_array_get(c, 2); /* the last one: earlier ones are decoded first */
        if (bad[i].val)
            json_object_set_new(e, bad[i].key, bad[i].val);
        else
            json_object_del(e, bad[i].key);
        sg_err e2 = {0};
        out = (sg_checkpoint_info *)1;
        n = 9;
        if (sg_ckpt_proto_uninfos(c, &out, &n, &e2) == 0)
            fail_msg("list accepted with bad %s (%zu)", bad[i].key, i);
        assert_null(out);
        assert_int_equal(n, 0);
        assert_int_equal(e2.code, EPROTO);
        assert_non_null(strstr(e2.msg, "checkpoint list"));
        json_decref(c);
    }
    /* not an array; an entry that is not an object */
    json_t *obj = json_object();
    assert_int_equal(sg_ckpt_proto_uninfos(obj, &out, &n, &err), -1);
    assert_int_equal(err.code, EPROTO);
    json_decref(obj);
    json_t *arr = json_pack("[i]", 1);
    assert_int_equal(sg_ckpt_proto_uninfos(arr, &out, &n, &err), -1);
    json_decref(arr);
    json_decref(v);
}

/* ---- changes ---------------------------------------------------------------- */

static void test_changes(void **state)
{
    (void)state;
    sg_checkpoint_change in[5] = {0};
    const char *paths[] = {".", "a.txt", "dir/\xff\xfe name", "link", "x/y/z"};
    for (int i = 0; i < 5; i++) {
        in[i].path = (char *)paths[i];
        in[i].kind = (sg_checkpoint_change_kind)(SG_CKPT_MODIFIED + i);
        in[i].mode_now = S_IFREG | 0644u;
        in[i].mode_then = i == 1 ? 0 : (S_IFDIR | 0755u);
        in[i].uid_now = (uint32_t)(1000 + i);
        in[i].gid_now = (uint32_t)(2000 + i);
        in[i].uid_then = UINT32_MAX;
        in[i].gid_then = (uint32_t)i;
    }
    json_t *v = sg_ckpt_proto_changes(in, 5);
    assert_non_null(v);
    sg_checkpoint_change *out = NULL;
    size_t n = 0;
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_unchanges(v, &out, &n, &err), 0);
    assert_int_equal(n, 5);
    const sg_checkpoint_change_kind kinds[] = {SG_CKPT_MODIFIED, SG_CKPT_CREATED, SG_CKPT_DELETED,
                                               SG_CKPT_TYPE, SG_CKPT_META};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(out[i].path, in[i].path);
        assert_int_equal(out[i].kind, kinds[i]);
        assert_int_equal(out[i].mode_now, in[i].mode_now);
        assert_int_equal(out[i].mode_then, in[i].mode_then);
        assert_int_equal(out[i].uid_now, in[i].uid_now);
        assert_int_equal(out[i].gid_now, in[i].gid_now);
        assert_int_equal(out[i].uid_then, in[i].uid_then);
        assert_int_equal(out[i].gid_then, in[i].gid_then);
        assert_string_not_equal(sg_checkpoint_change_kind_name(out[i].kind), "?");
    }
    sg_checkpoint_changes_free(out, n);
    assert_string_equal(sg_checkpoint_change_kind_name((sg_checkpoint_change_kind)0), "?");

    json_t *empty = sg_ckpt_proto_changes(NULL, 0);
    assert_int_equal(sg_ckpt_proto_unchanges(empty, &out, &n, &err), 0);
    assert_int_equal(n, 0);
    sg_checkpoint_changes_free(out, n);
    json_decref(empty);

    struct {
        const char *key;
        json_t *val; /* NULL: field removed */
    } bad[] = {
        {"kind", json_integer(0)},
        {"kind", json_integer(6)},
        {"kind", json_integer(-1)},
        {"kind", json_string("modified")},
        {"kind", NULL},
        {"path", json_string("2e00")},  /* ".\0" */
        {"path", json_string("2E")},
        {"path", json_string("2")},
        {"path", json_string("..")},
        {"path", NULL},
        {"mode_now", json_integer(-1)},
        {"mode_now", json_integer((json_int_t)UINT32_MAX + 1)},
        {"mode_now", NULL},
        {"mode_then", json_integer(-1)},
        {"mode_then", NULL},
        {"uid_now", json_integer(-1)},
        {"uid_now", NULL},
        {"gid_now", json_integer(-1)},
        {"gid_now", NULL},
        {"uid_then", json_integer(-1)},
        {"uid_then", NULL},
        {"gid_then", json_integer(-1)},
        {"gid_then", json_real(0.0)},
        {"gid_then", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *c = json_deep_copy(v);
        json_t *e = json_array_get(c, 4);
        if (bad[i].val)
            json_object_set_new(e, bad[i].key, bad[i].val);
        else
            json_object_del(e, bad[i].key);
        sg_err e2 = {0};
        out = (sg_checkpoint_change *)1;
        n = 9;
        if (sg_ckpt_proto_unchanges(c, &out, &n, &e2) == 0)
            fail_msg("changes accepted with bad %s (%zu)", bad[i].key, i);
        assert_null(out);
        assert_int_equal(n, 0);
        assert_int_equal(e2.code, EPROTO);
        assert_non_null(strstr(e2.msg, "change list"));
        json_decref(c);
    }
    json_t *obj = json_object();
    assert_int_equal(sg_ckpt_proto_unchanges(obj, &out, &n, &err), -1);
    assert_int_equal(sg_ckpt_proto_unchanges(NULL, &out, &n, &err), -1);
    json_decref(obj);
    json_decref(v);
}

/* ---- framing ---------------------------------------------------------------- */

typedef struct pair {
    int fd[2];
} pair;

static int setup_pair(void **state)
{
    pair *p = calloc(1, sizeof *p);
    if (!p || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->fd) < 0)
        return -1;
    *state = p;
    return 0;
}

static int teardown_pair(void **state)
{
    pair *p = *state;
    for (int i = 0; i < 2; i++)
        if (p->fd[i] >= 0)
            close(p->fd[i]);
    free(p);
    return 0;
}

static void close_writer(pair *p)
{
    close(p->fd[0]);
    p->fd[0] = -1;
}

static void write_raw(int fd, const void *buf, size_t len)
{
    assert_int_equal(sg_write_all(fd, buf, len), 0);
}

static void write_frame(int fd, const char *payload)
{
    uint32_t len = (uint32_t)strlen(payload);
    write_raw(fd, &len, sizeof len);
    write_raw(fd, payload, len);
}

/* Asserts recv fails with code (0: any code) and a message. */
static void recv_refused(pair *p, int code)
{
    json_t *msg = (json_t *)1;
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &msg, &err), -1);
    assert_null(msg);
    if (code)
        assert_int_equal(err.code, code);
    assert_true(err.msg[0] != '\0');
}

static void test_frame_send_recv(void **state)
{
    pair *p = *state;
    json_t *m1 = json_pack("{s:s, s:o, s:b}", "op", "take", "label",
                           sg_ckpt_proto_bytes("\xff\x00x", 3), "reuse", 1);
    json_t *m2 = json_object();
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_send(p->fd[0], m1, &err), 0);
    assert_int_equal(sg_ckpt_proto_send(p->fd[0], m2, &err), 0);
    json_t *got = NULL;
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &got, &err), 1);
    assert_true(json_equal(got, m1));
    json_decref(got);
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &got, &err), 1);
    assert_true(json_is_object(got));
    assert_int_equal(json_object_size(got), 0);
    json_decref(got);
    /* and the other way */
    assert_int_equal(sg_ckpt_proto_send(p->fd[1], m1, &err), 0);
    assert_int_equal(sg_ckpt_proto_recv(p->fd[0], &got, &err), 1);
    assert_true(json_equal(got, m1));
    json_decref(got);

    /* the wire form: a host-order length then compact JSON */
    assert_int_equal(sg_ckpt_proto_send(p->fd[0], m2, &err), 0);
    char raw[6];
    assert_int_equal(read(p->fd[1], raw, sizeof raw), 6);
    uint32_t len;
    memcpy(&len, raw, 4);
    assert_int_equal(len, 2);
    assert_memory_equal(raw + 4, "{}", 2);

    /* a clean EOF before a message */
    close_writer(p);
    got = (json_t *)1;
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &got, &err), 0);
    assert_null(got);
    json_decref(m1);
    json_decref(m2);
}

/* A message larger than the socket buffers: the reader gets it whole
 * though it arrives in pieces (the sender is a child process). */
static void test_frame_large(void **state)
{
    pair *p = *state;
    size_t n = 3u << 20;
    char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(i * 7 + i / 251);
    json_t *m = json_pack("{s:o}", "text", sg_ckpt_proto_bytes(buf, n));
    pid_t pid = sgt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sg_err e = {0};
        int rc = sg_ckpt_proto_send(p->fd[0], m, &e);
        json_decref(m); /* for valgrind, which checks the child too */
        free(buf);
        _exit(rc == 0 ? 0 : 1);
    }
    json_t *got = NULL;
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &got, &err), 1);
    size_t len = 0;
    sg_autofree char *back = sg_ckpt_proto_unbytes(json_object_get(got, "text"), false, &len, &err);
    assert_non_null(back);
    assert_int_equal(len, n);
    assert_memory_equal(back, buf, n);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    json_decref(got);
    json_decref(m);
    free(buf);
}

static void test_frame_too_large(void **state)
{
    pair *p = *state;
    uint32_t len = SG_CKPT_PROTO_MAX + 1;
    write_raw(p->fd[0], &len, sizeof len);
    recv_refused(p, EMSGSIZE);
}

static void test_frame_too_large_max(void **state)
{
    pair *p = *state;
    uint32_t len = UINT32_MAX;
    write_raw(p->fd[0], &len, sizeof len);
    write_raw(p->fd[0], "{}", 2);
    recv_refused(p, EMSGSIZE);
}

static void test_frame_cut_after_header(void **state)
{
    pair *p = *state;
    uint32_t len = 10;
    write_raw(p->fd[0], &len, sizeof len);
    close_writer(p);
    recv_refused(p, EPIPE);
}

static void test_frame_cut_in_payload(void **state)
{
    pair *p = *state;
    uint32_t len = 10;
    write_raw(p->fd[0], &len, sizeof len);
    write_raw(p->fd[0], "{\"a\":", 5);
    close_writer(p);
    recv_refused(p, EPIPE);
}

static void test_frame_cut_in_header(void **state)
{
    pair *p = *state;
    write_raw(p->fd[0], "\x05\x00", 2);
    close_writer(p);
    recv_refused(p, EPIPE);
}

static void test_frame_not_object(void **state)
{
    pair *p = *state;
    write_frame(p->fd[0], "[1,2]");
    json_t *msg = (json_t *)1;
    sg_err e = {0};
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &msg, &e), -1);
    assert_null(msg);
    assert_int_equal(e.code, EPROTO);
    assert_non_null(strstr(e.msg, "not a JSON object"));
    write_frame(p->fd[0], "[]");
    recv_refused(p, EPROTO);
    /* scalars: the parser itself refuses them (no JSON_DECODE_ANY) */
    const char *payloads[] = {"\"op\"", "42", "null", "true"};
    for (size_t i = 0; i < sizeof payloads / sizeof *payloads; i++) {
        write_frame(p->fd[0], payloads[i]);
        recv_refused(p, 0);
    }
    /* the stream stays in step: a good message after them is read */
    write_frame(p->fd[0], "{\"op\":\"list\"}");
    json_t *got = NULL;
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_recv(p->fd[1], &got, &err), 1);
    assert_string_equal(json_string_value(json_object_get(got, "op")), "list");
    json_decref(got);
}

static void test_frame_invalid_json(void **state)
{
    pair *p = *state;
    const char *payloads[] = {"{bad", "{\"a\":1,\"a\":2}", "{} {}", "", "{\"a\":\"\xff\"}"};
    for (size_t i = 0; i < sizeof payloads / sizeof *payloads; i++) {
        write_frame(p->fd[0], payloads[i]);
        recv_refused(p, 0);
    }
}

static void test_send_peer_gone(void **state)
{
    pair *p = *state;
    close(p->fd[1]);
    p->fd[1] = -1;
    json_t *m = json_object();
    sg_err err = {0};
    assert_int_equal(sg_ckpt_proto_send(p->fd[0], m, &err), -1);
    assert_int_equal(err.code, EPIPE);
    json_decref(m);
}

int main(void)
{
    /* as the supervisor and the worker do: a gone peer is EPIPE, not a signal */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_roundtrip),
        cmocka_unit_test(test_bytes_refused),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_infos),
        cmocka_unit_test(test_changes),
        cmocka_unit_test_setup_teardown(test_frame_send_recv, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_large, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_too_large, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_too_large_max, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_cut_after_header, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_cut_in_payload, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_cut_in_header, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_not_object, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_frame_invalid_json, setup_pair, teardown_pair),
        cmocka_unit_test_setup_teardown(test_send_peer_gone, setup_pair, teardown_pair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

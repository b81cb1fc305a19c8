/* spawn: the supervisor-init messages. An EXEC message encodes and decodes
 * back to the same argv, env and cwd (also through a socket, with its
 * fds); what does not fit is refused, not cut; broken messages (no
 * terminator, a string too few or too many, no command, trailing bytes, a
 * short header) are refused; replies decode only whole and of a type init
 * sends. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "wire/seqpacket.h"
#include "wire/spawn.h"

static char *argv_ls[] = {"ls", "-l", "/workspace/a b", NULL};
static char *env_two[] = {"PATH=/bin", "HOME=/workspace", NULL};
static char *env_none[] = {NULL};

static const sg_spawn_hdr hdr0 = {.type = SG_SPAWN_EXEC, .exec_id = 42, .uid = 1000, .gid = 1001,
                                  .nfds_cg = 1, .cg_into = 1, .rlimit_as = 1u << 30};

static void check_decoded(char *msg, size_t len, char **want_argv, char **want_env, const char *want_cwd)
{
    char *strs[32];
    char **argv = NULL, **envp = NULL, *cwd = NULL;
    assert_int_equal(sg_spawn_decode(msg, len, strs, 32, &argv, &envp, &cwd), 0);
    size_t i = 0;
    for (; want_argv[i]; i++)
        assert_string_equal(argv[i], want_argv[i]);
    assert_null(argv[i]);
    for (i = 0; want_env[i]; i++)
        assert_string_equal(envp[i], want_env[i]);
    assert_null(envp[i]);
    assert_string_equal(cwd, want_cwd);
}

static void test_round_trip(void **state)
{
    (void)state;
    char msg[512];
    ssize_t n = sg_spawn_encode(msg, sizeof msg, &hdr0, argv_ls, env_two, "/workspace");
    assert_true(n > (ssize_t)sizeof(sg_spawn_hdr));
    sg_spawn_hdr h;
    assert_int_equal(sg_spawn_hdr_decode(msg, (size_t)n, &h), 0);
    assert_int_equal(h.type, SG_SPAWN_EXEC);
    assert_int_equal(h.exec_id, 42);
    assert_int_equal(h.uid, 1000);
    assert_int_equal(h.gid, 1001);
    assert_int_equal(h.argc, 3); /* counted by the encoder */
    assert_int_equal(h.envc, 2);
    assert_int_equal(h.nfds_cg, 1);
    assert_int_equal(h.rlimit_as, 1u << 30);
    check_decoded(msg, (size_t)n, argv_ls, env_two, "/workspace");
    /* no environment at all */
    n = sg_spawn_encode(msg, sizeof msg, &hdr0, argv_ls, env_none, "/");
    check_decoded(msg, (size_t)n, argv_ls, env_none, "/");
}

static void test_through_a_socket(void **state)
{
    (void)state;
    int sv[2], p[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(pipe(p), 0);
    char msg[512], got[SG_SPAWN_MSG_MAX];
    ssize_t n = sg_spawn_encode(msg, sizeof msg, &hdr0, argv_ls, env_two, "/tmp");
    int fds[3] = {p[0], p[1], p[1]};
    /* as to a ready child: typed */
    assert_int_equal(sg_seqpacket_send_typed(sv[0], SG_SPAWN_READY_TYPE, msg, (size_t)n, fds, 3), 0);
    uint8_t type = 0;
    int rfds[3];
    size_t nfds = 3;
    ssize_t r = sg_seqpacket_recv_typed(sv[1], &type, got, sizeof got, rfds, &nfds);
    assert_int_equal(r, n);
    assert_int_equal(type, SG_SPAWN_READY_TYPE);
    assert_int_equal(nfds, 3);
    check_decoded(got, (size_t)r, argv_ls, env_two, "/tmp");
    for (int i = 0; i < 3; i++)
        close(rfds[i]);
    /* as to init: plain */
    assert_int_equal(sg_seqpacket_send(sv[0], msg, (size_t)n, fds, 1), 0);
    nfds = 3;
    r = sg_seqpacket_recv(sv[1], got, sizeof got, 0, rfds, &nfds);
    assert_int_equal(r, n);
    assert_int_equal(nfds, 1);
    close(rfds[0]);
    check_decoded(got, (size_t)r, argv_ls, env_two, "/tmp");
    close(sv[0]);
    close(sv[1]);
    close(p[0]);
    close(p[1]);
}

static void test_too_long(void **state)
{
    (void)state;
    char msg[64];
    char *big[] = {"x", NULL};
    /* header (48) + "x\0" + cwd: fits exactly, then one byte short */
    char cwd[64];
    size_t room = sizeof msg - sizeof(sg_spawn_hdr) - 2 - 1;
    memset(cwd, 'c', room);
    cwd[room] = '\0';
    assert_int_equal(sg_spawn_encode(msg, sizeof msg, &hdr0, big, env_none, cwd), (ssize_t)sizeof msg);
    assert_int_equal(sg_spawn_encode(msg, sizeof msg - 1, &hdr0, big, env_none, cwd), -E2BIG);
    assert_int_equal(sg_spawn_encode(msg, sizeof(sg_spawn_hdr) - 1, &hdr0, big, env_none, "/"), -E2BIG);
}

/* A message with header h and body bytes. */
static size_t make(char *buf, sg_spawn_hdr h, uint32_t argc, uint32_t envc, const char *body, size_t blen)
{
    h.argc = argc;
    h.envc = envc;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, body, blen);
    return sizeof h + blen;
}

static void test_broken(void **state)
{
    (void)state;
    char buf[256], *strs[32], **argv, **envp, *cwd;
#define BODY(s) s, sizeof(s) - 1
    size_t n = make(buf, hdr0, 1, 0, BODY("true\0/w\0"));
    assert_int_equal(sg_spawn_decode(buf, n, strs, 32, &argv, &envp, &cwd), 0); /* the good one */
    n = make(buf, hdr0, 1, 0, BODY("true\0/w"));          /* cwd not terminated */
    assert_int_equal(sg_spawn_decode(buf, n, strs, 32, &argv, &envp, &cwd), -1);
    n = make(buf, hdr0, 1, 1, BODY("true\0/w\0"));        /* a string too few */
    assert_int_equal(sg_spawn_decode(buf, n, strs, 32, &argv, &envp, &cwd), -1);
    n = make(buf, hdr0, 1, 0, BODY("true\0/w\0x\0"));     /* a string too many */
    assert_int_equal(sg_spawn_decode(buf, n, strs, 32, &argv, &envp, &cwd), -1);
    n = make(buf, hdr0, 0, 1, BODY("A=1\0/w\0"));         /* no command */
    assert_int_equal(sg_spawn_decode(buf, n, strs, 32, &argv, &envp, &cwd), -1);
    n = make(buf, hdr0, 0xffffffffu, 0xffffffffu, BODY("a\0")); /* counts past the message */
    assert_int_equal(sg_spawn_decode(buf, n, strs, 32, &argv, &envp, &cwd), -1);
    n = make(buf, hdr0, 2, 1, BODY("a\0b\0C=1\0/\0"));    /* needs 5 table entries: 4 given */
    assert_int_equal(sg_spawn_decode(buf, n, strs, 4, &argv, &envp, &cwd), -1);
    assert_int_equal(sg_spawn_decode(buf, n, strs, 5, &argv, &envp, &cwd), 0);
    sg_spawn_hdr h;
    assert_int_equal(sg_spawn_hdr_decode(buf, sizeof h - 1, &h), -1); /* short header */
    assert_int_equal(sg_spawn_decode(buf, sizeof h - 1, strs, 32, &argv, &envp, &cwd), -1);
    assert_int_equal(sg_spawn_hdr_decode(buf, sizeof h, &h), 0);      /* header alone: PREPARE, SIGNAL */
#undef BODY
}

static void test_replies(void **state)
{
    (void)state;
    sg_spawn_reply in = {.type = SG_SPAWN_EXITED, .exec_id = 5, .pid = 9, .status = 256,
                         .maxrss_kb = 1234, .utime_us = 10, .stime_us = 20}, out;
    char buf[sizeof in + 1];
    memcpy(buf, &in, sizeof in);
    assert_int_equal(sg_spawn_reply_decode(buf, sizeof in, &out), 0);
    assert_memory_equal(&out, &in, sizeof in);
    assert_int_equal(sg_spawn_reply_decode(buf, sizeof in - 1, &out), -1); /* cut short */
    assert_int_equal(sg_spawn_reply_decode(buf, sizeof in + 1, &out), -1); /* trailing byte */
    for (uint32_t t = 0; t < 9; t++) {
        in.type = t;
        memcpy(buf, &in, sizeof in);
        bool sent_by_init = t == SG_SPAWN_SPAWNED || t == SG_SPAWN_EXITED || t == SG_SPAWN_READY ||
                            t == SG_SPAWN_NOTIFY;
        assert_int_equal(sg_spawn_reply_decode(buf, sizeof in, &out), sent_by_init ? 0 : -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_through_a_socket),
        cmocka_unit_test(test_too_long),
        cmocka_unit_test(test_broken),
        cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

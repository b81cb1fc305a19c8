/* Unit tests for counters (state/counters.h): a file's text back and forth,
 * what a parse refuses, the histogram's buckets, and a retire against a
 * scan: a destroyed sandbox's counters are in the host's sum exactly once,
 * and the sum never goes down. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "state/counters.h"
#include "state/state.h"

static char root[64];

static int group_setup(void **state)
{
    (void)state;
    strcpy(root, "/tmp/sg-counters-test-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    setenv("SANDGLASS_STATE_DIR", root, 1);
    sg_err err = {0};
    return sg_state_dir(&err) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    sg_rm_rf(root, NULL);
    return 0;
}

/* body, then its "sum" line (the FNV-1a the format ends with), into out. */
static size_t with_sum(const char *body, size_t n, char *out, size_t size)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)body[i]) * 16777619u;
    return (size_t)snprintf(out, size, "%.*ssum %08x\n", (int)n, body, h);
}

static sg_counters sample(uint64_t k)
{
    sg_counters c = {0};
    c.execs[SG_CTR_EXEC_OK] = 3 * k;
    c.execs[SG_CTR_EXEC_KILLED] = k;
    sg_ctr_observe(&c.exec_time, 2000000);  /* 2 ms */
    sg_ctr_observe(&c.exec_time, 700000000000ull); /* 700 s: +Inf */
    c.kills[SG_CTR_KILL_TIMEOUT] = k;
    c.ooms = k;
    c.limits[SG_CTR_LIMIT_CAP] = 1;
    c.expiries[SG_CTR_EXPIRY_TTL] = 2;
    c.state = SG_CTR_STATE_ABORTED;
    c.spool_events = 5;
    c.spool_bytes = 4096;
    return c;
}

static void test_roundtrip(void **state)
{
    (void)state;
    sg_counters c = sample(7), back;
    char buf[SG_COUNTERS_FILE_MAX];
    size_t n = sg_counters_format(&c, buf, sizeof buf);
    assert_true(n > 0 && n < SG_COUNTERS_FILE_MAX);
    assert_int_equal(sg_counters_parse(buf, n, &back), 0);
    assert_memory_equal(&c, &back, sizeof c);
    /* the buckets: 2 ms in le=0.0025, 700 s past the last bound */
    assert_int_equal(back.exec_time.le[2], 1);
    assert_int_equal(back.exec_time.le[SG_COUNTERS_BUCKETS], 1);
    assert_int_equal(back.exec_time.count, 2);
    /* a key of a newer build is skipped */
    char body[SG_COUNTERS_FILE_MAX], more[SG_COUNTERS_FILE_MAX];
    int bl = snprintf(body, sizeof body, "%.*sfuture 1 2 3\n", (int)(n - 13), buf);
    size_t m = with_sum(body, (size_t)bl, more, sizeof more);
    assert_int_equal(sg_counters_parse(more, m, &back), 0);
    assert_memory_equal(&c, &back, sizeof c);
    /* the same with a wrong sum, or one byte changed: refused */
    more[m - 2] = more[m - 2] == '0' ? '1' : '0';
    assert_int_equal(sg_counters_parse(more, m, &back), -1);
    buf[30] ^= 1;
    assert_int_equal(sg_counters_parse(buf, n, &back), -1);
}

static void test_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "sandglass-counters 2\nooms 1\n",      /* another format */
        "sandglass-counters 1\nooms 1",        /* no newline before the sum */
        "sandglass-counters 1\nooms x\n",      /* not a number */
        "sandglass-counters 1\nooms -1\n",
        "sandglass-counters 1\nooms 1 2\n",    /* too many */
        "sandglass-counters 1\nexecs 1 2\n",   /* too few */
        "sandglass-counters 1\nooms 99999999999999999999999\n", /* past 64 bits */
        "sandglass-counters 1\nstate 4\n",     /* "dead" is a scan's, never a file's */
        "sandglass-counters 1\nooms\n",
    };
    sg_counters c;
    char text[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = with_sum(bad[i], strlen(bad[i]), text, sizeof text); /* refused for what it says, not its sum */
        assert_int_equal(sg_counters_parse(text, n, &c), -1);
    }
    /* the good one of the same shape passes */
    size_t n = with_sum("sandglass-counters 1\nooms 1\n", 28, text, sizeof text);
    assert_int_equal(sg_counters_parse(text, n, &c), 0);
    assert_int_equal(c.ooms, 1);
    char big[SG_COUNTERS_FILE_MAX + 2];
    memset(big, '\n', sizeof big);
    memcpy(big, "sandglass-counters 1\n", 21);
    assert_int_equal(sg_counters_parse(big, sizeof big, &c), -1);
}

static void make_sandbox(const char *id, const sg_counters *c)
{
    sg_autofree char *dir = sg_state_sandbox_path(id, NULL);
    assert_int_equal(sg_mkdir_p(dir, 0700, NULL), 0);
    sg_err err = {0};
    assert_int_equal(sg_counters_save(id, c, &err), 0);
}

static void test_retire_scan(void **state)
{
    (void)state;
    sg_counters a = sample(1), b = sample(10);
    make_sandbox("aaaaaaaaaaaa", &a);
    make_sandbox("bbbbbbbbbbbb", &b);
    sg_host_counters h;
    sg_err err = {0};
    assert_int_equal(sg_counters_scan(NULL, &h, &err), 0);
    assert_int_equal(h.sandboxes, 2);
    assert_int_equal(h.states[SG_CTR_STATE_DEAD], 2); /* no supervisor holds them */
    assert_int_equal(h.total.execs[SG_CTR_EXEC_OK], 33);
    assert_int_equal(h.total.spool_events, 10);
    assert_int_equal(h.bad_files, 0);
    assert_int_equal(sg_counters_retire("aaaaaaaaaaaa", &err), 0);
    sg_autofree char *gone = sg_state_sandbox_path("aaaaaaaaaaaa", "counters");
    assert_int_equal(access(gone, F_OK), -1);
    sg_host_counters h2;
    assert_int_equal(sg_counters_scan(NULL, &h2, &err), 0);
    /* the counters stay, the gauges (its spool) go with it */
    assert_int_equal(h2.total.execs[SG_CTR_EXEC_OK], 33);
    assert_int_equal(h2.total.exec_time.count, 4);
    assert_int_equal(h2.total.spool_events, 5);
    /* a second retire of the same adds nothing (its file is gone) */
    assert_int_equal(sg_counters_retire("aaaaaaaaaaaa", &err), 0);
    assert_int_equal(sg_counters_scan(NULL, &h2, &err), 0);
    assert_int_equal(h2.total.execs[SG_CTR_EXEC_OK], 33);
    /* a bad file is skipped and counted */
    sg_autofree char *bp = sg_state_sandbox_path("bbbbbbbbbbbb", "counters");
    assert_int_equal(sg_write_file_atomic(bp, "garbage\n", 8, 0600, &err), 0);
    assert_int_equal(sg_counters_scan(NULL, &h2, &err), 0);
    assert_int_equal(h2.bad_files, 1);
    assert_int_equal(h2.total.execs[SG_CTR_EXEC_OK], 3);
    /* and retired as nothing: the sum keeps what it had */
    assert_int_equal(sg_counters_retire("bbbbbbbbbbbb", &err), 0);
    assert_int_equal(sg_counters_scan(NULL, &h2, &err), 0);
    assert_int_equal(h2.total.execs[SG_CTR_EXEC_OK], 3);
    assert_int_equal(h2.total.ooms, 1);
}

/* A scan with the cache: a file rewritten (a new inode) is read again, a
 * sandbox gone is gone from the sums, a bad file stays counted as bad. */
static void test_cache(void **state)
{
    (void)state;
    sg_counters_cache *cc = sg_counters_cache_new();
    sg_counters a = sample(2);
    make_sandbox("cccccccccccc", &a);
    sg_host_counters h, plain;
    sg_err err = {0};
    assert_int_equal(sg_counters_scan(cc, &h, &err), 0);
    assert_int_equal(sg_counters_scan(NULL, &plain, &err), 0);
    assert_memory_equal(&h, &plain, sizeof h);
    assert_int_equal(sg_counters_scan(cc, &h, &err), 0); /* from the cache */
    assert_memory_equal(&h, &plain, sizeof h);
    a.execs[SG_CTR_EXEC_OK] += 100;
    assert_int_equal(sg_counters_save("cccccccccccc", &a, &err), 0);
    assert_int_equal(sg_counters_scan(cc, &h, &err), 0);
    assert_int_equal(h.total.execs[SG_CTR_EXEC_OK], plain.total.execs[SG_CTR_EXEC_OK] + 100);
    sg_autofree char *bp = sg_state_sandbox_path("cccccccccccc", "counters");
    assert_int_equal(sg_write_file_atomic(bp, "bad\n", 4, 0600, &err), 0);
    assert_int_equal(sg_counters_scan(cc, &h, &err), 0);
    assert_int_equal(h.bad_files, 1);
    assert_int_equal(sg_counters_scan(cc, &h, &err), 0);
    assert_int_equal(h.bad_files, 1);
    sg_autofree char *dir = sg_state_sandbox_path("cccccccccccc", NULL);
    assert_int_equal(sg_rm_rf(dir, &err), 0);
    assert_int_equal(sg_counters_scan(cc, &h, &err), 0);
    assert_int_equal(h.bad_files, 0);
    assert_int_equal(h.sandboxes, plain.sandboxes - 1);
    sg_counters_cache_free(cc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_retire_scan),
        cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"

static void test_parse_size(void **state)
{
    (void)state;
    sg_err err = {0};
    uint64_t v = 0;
    assert_int_equal(sg_parse_size("512M", &v, &err), 0);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(sg_parse_size("1G", &v, &err), 0);
    assert_int_equal(v, 1ull << 30);
    assert_int_equal(sg_parse_size("4096", &v, &err), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(sg_parse_size("2MiB", &v, &err), 0);
    assert_int_equal(v, 2ull << 20);
    assert_int_equal(sg_parse_size("512Q", &v, &err), -1);
    assert_non_null(strstr(err.msg, "512Q"));
    assert_int_equal(sg_parse_size("", &v, &err), -1);
    assert_int_equal(sg_parse_size("-1M", &v, &err), -1);
    assert_int_equal(sg_parse_size("0", &v, &err), -1);
    assert_int_equal(sg_parse_size("99999999999999999999", &v, &err), -1);
    assert_int_equal(sg_parse_size("17179869184T", &v, &err), -1);
}

static void test_parse_seconds_uint(void **state)
{
    (void)state;
    sg_err err = {0};
    double d = 0;
    assert_int_equal(sg_parse_seconds("1.5", 100, &d, &err), 0);
    assert_true(d > 1.49 && d < 1.51);
    assert_int_equal(sg_parse_seconds("0", 100, &d, &err), -1);
    assert_int_equal(sg_parse_seconds("abc", 100, &d, &err), -1);
    assert_int_equal(sg_parse_seconds("nan", 100, &d, &err), -1);
    assert_int_equal(sg_parse_seconds("1000", 100, &d, &err), -1);
    /* durations: seconds, or a number with s, m, h or d */
    assert_int_equal(sg_parse_duration("90", 1e6, &d, &err), 0);
    assert_true(d == 90);
    assert_int_equal(sg_parse_duration("90s", 1e6, &d, &err), 0);
    assert_true(d == 90);
    assert_int_equal(sg_parse_duration("1.5m", 1e6, &d, &err), 0);
    assert_true(d == 90);
    assert_int_equal(sg_parse_duration("2h", 1e6, &d, &err), 0);
    assert_true(d == 7200);
    assert_int_equal(sg_parse_duration("7d", 1e6, &d, &err), 0);
    assert_true(d == 604800);
    assert_int_equal(sg_parse_duration("8d", 7 * 86400.0, &d, &err), -1);
    assert_int_equal(sg_parse_duration("5x", 1e6, &d, &err), -1);
    assert_int_equal(sg_parse_duration("5mm", 1e6, &d, &err), -1);
    assert_int_equal(sg_parse_duration("0m", 1e6, &d, &err), -1);
    assert_int_equal(sg_parse_duration("-1", 1e6, &d, &err), -1);
    assert_int_equal(sg_parse_duration("m", 1e6, &d, &err), -1);
    assert_int_equal(sg_parse_duration("inf", 1e6, &d, &err), -1);
    assert_int_equal(sg_parse_duration("", 1e6, &d, &err), -1);
    uint64_t u = 0;
    assert_int_equal(sg_parse_uint("42", 100, &u, &err), 0);
    assert_int_equal(u, 42);
    assert_int_equal(sg_parse_uint("4x", 100, &u, &err), -1);
    assert_int_equal(sg_parse_uint("101", 100, &u, &err), -1);
    /* and back, for people (ls's EXPIRES, the expiry warning) */
    char b[16];
    static const struct { double s; const char *want; } f[] = {
        {-3, "0s"}, {0, "0s"}, {0.2, "1s"}, {59, "59s"}, {119.5, "120s"}, {120, "2m"}, {900, "15m"},
        {7199, "120m"}, {7200, "2h"}, {86400, "24h"}, {172800, "2d"}, {7 * 86400, "7d"}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        sg_fmt_duration(f[i].s, b, sizeof b);
        assert_string_equal(b, f[i].want);
    }
}

static void test_valid_name(void **state)
{
    (void)state;
    assert_true(sg_valid_name("alice"));
    assert_true(sg_valid_name("task-2.3_01@x"));
    assert_false(sg_valid_name(""));
    assert_false(sg_valid_name(".."));
    assert_false(sg_valid_name("a/b"));
    assert_false(sg_valid_name("a b"));
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_false(sg_valid_name(big));
}

static void test_utf8_sanitize(void **state)
{
    (void)state;
    size_t n = 0;
    sg_autofree char *a = sg_utf8_sanitize("ok \xC3\xA9", 5, &n);
    assert_string_equal(a, "ok \xC3\xA9");
    sg_autofree char *b = sg_utf8_sanitize("x\xFFy", 3, &n);
    assert_string_equal(b, "x\xEF\xBF\xBDy");
    assert_int_equal(n, 5);
    /* encoded surrogate and overlong are replaced byte by byte */
    sg_autofree char *c = sg_utf8_sanitize("\xED\xA0\x80", 3, &n);
    assert_int_equal(n, 9);
    assert_string_equal(c, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    sg_autofree char *d = sg_utf8_sanitize("\xC0\xAF", 2, &n);
    assert_int_equal(n, 6);
    assert_string_equal(d, "\xEF\xBF\xBD\xEF\xBF\xBD");
    /* a truncated sequence at the end */
    sg_autofree char *e = sg_utf8_sanitize("a\xE2\x82", 3, &n);
    assert_string_equal(e, "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

static void test_json_strict(void **state)
{
    (void)state;
    sg_err err = {0};
    json_t *j = sg_json_parse("{\"a\":1,\"a\":2}", 13, &err);
    assert_null(j);
    assert_non_null(strstr(err.msg, "invalid JSON"));
    j = sg_json_parse("{\"a\":1} x", 9, &err);
    assert_null(j);
    j = sg_json_parse("{\"a\":1}", 7, &err);
    assert_non_null(j);
    json_decref(j);
}

static void test_files(void **state)
{
    (void)state;
    sg_err err = {0};
    char dir[] = "/tmp/sg-test-util-XXXXXX";
    assert_non_null(mkdtemp(dir));
    sg_autofree char *sub = sg_strdup_printf("%s/a/b/c", dir);
    assert_int_equal(sg_mkdir_p(sub, 0755, &err), 0);
    sg_autofree char *f = sg_strdup_printf("%s/a/b/c/f", dir);
    assert_int_equal(sg_write_file_atomic(f, "hello", 5, 0600, &err), 0);
    size_t len = 0;
    sg_autofree char *got = sg_read_file(f, 100, &len, &err);
    assert_string_equal(got, "hello");
    assert_int_equal(len, 5);
    assert_null(sg_read_file(f, 3, &len, &err));
    assert_int_equal(sg_rm_rf(dir, &err), 0);
    assert_null(sg_read_file(f, 100, &len, &err));
    assert_int_equal(err.code, ENOENT);
    char hex[13];
    assert_int_equal(sg_rand_hex(hex, 12, &err), 0);
    assert_int_equal(strlen(hex), 12);
}

static void test_id_prefix(void **state)
{
    (void)state;
    sg_err err = {0};
    char out[16];
    const char *ids[] = {"abcd00000001", "abcd00000002", "abce00000003", NULL, "abcd00000001", "ab",
                         "ffff00000001", "ffff00000002", "ffff00000003", "ffff00000004", "ffff00000005",
                         "ffff00000006"};
    size_t n = sizeof ids / sizeof ids[0];
    assert_int_equal(sg_id_resolve("abce", ids, n, "", out, sizeof out, &err), 0);
    assert_string_equal(out, "abce00000003");
    assert_int_equal(sg_id_resolve("abcd00000002", ids, n, "", out, sizeof out, &err), 0);
    assert_string_equal(out, "abcd00000002");
    /* a repeat (a sandbox of two streams) is one candidate */
    assert_int_equal(sg_id_resolve("abcd0000000", ids, n, "", out, sizeof out, &err), -1);
    assert_int_equal(err.code, EINVAL);
    assert_non_null(strstr(err.msg, "is the start of 2 sandbox ids (abcd00000001, abcd00000002)"));
    assert_int_equal(sg_id_resolve("abcd000000001", ids, n, " here", out, sizeof out, &err), -1);
    assert_int_equal(err.code, ENOENT);
    assert_string_equal(err.msg, "no sandbox 'abcd000000001' here");
    /* under 4 characters: refused, unless a whole id */
    assert_int_equal(sg_id_resolve("abc", ids, n, "", out, sizeof out, &err), -1);
    assert_int_equal(err.code, EINVAL);
    assert_non_null(strstr(err.msg, "a sandbox id prefix needs at least 4 characters"));
    assert_int_equal(sg_id_resolve("0", NULL, 0, "", out, sizeof out, &err), -1);
    assert_int_equal(err.code, EINVAL);
    assert_int_equal(sg_id_resolve("ab", ids, n, "", out, sizeof out, &err), 0);
    assert_string_equal(out, "ab");
    /* many candidates: five named, and how many */
    assert_int_equal(sg_id_resolve("ffff", ids, n, "", out, sizeof out, &err), -1);
    assert_non_null(strstr(err.msg, "is the start of 6 sandbox ids (ffff00000001, ffff00000002, ffff00000003, "
                                    "ffff00000004, ffff00000005, ...)"));
    assert_null(strstr(err.msg, "ffff00000006"));
    /* what the user typed is escaped */
    assert_int_equal(sg_id_resolve("\x1b[31m", ids, n, "", out, sizeof out, &err), -1);
    assert_null(strchr(err.msg, '\x1b'));
    /* too long for out */
    assert_int_equal(sg_id_resolve("abcd00000001", ids, n, "", out, 8, &err), -1);
    assert_int_equal(err.code, ENAMETOOLONG);
    assert_true(sg_id_matches("abcd00000001", "abcd"));
    assert_true(sg_id_matches("ab", "ab"));
    assert_false(sg_id_matches("abcd00000001", "abc"));
    assert_false(sg_id_matches("abcd00000001", "abce"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_seconds_uint),
        cmocka_unit_test(test_valid_name),
        cmocka_unit_test(test_utf8_sanitize),
        cmocka_unit_test(test_json_strict),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_id_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

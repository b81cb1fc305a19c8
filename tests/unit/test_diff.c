#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checkpoint/diff.h"
#include "checkpoint/udiff.h"

static void test_modified(void **state)
{
    (void)state;
    sg_err err = {0};
    sg_diff_result r;
    const char *a = "one\ntwo\nthree\n", *b = "one\n2\nthree\nfour\n";
    assert_int_equal(sg_udiff_unified("src/x.py", a, strlen(a), b, strlen(b), &r, &err), 0);
    assert_non_null(strstr(r.text, "--- a/src/x.py\n"));
    assert_non_null(strstr(r.text, "+++ b/src/x.py\n"));
    assert_null(strstr(r.text, "a/a/"));
    assert_non_null(strstr(r.text, "\n-two\n"));
    assert_non_null(strstr(r.text, "\n+2\n"));
    assert_non_null(strstr(r.text, "\n+four\n"));
    assert_int_equal(r.added, 2);
    assert_int_equal(r.removed, 1);
    size_t ad = 0, rm = 0;
    sg_diff_count_lines(r.text, r.len, &ad, &rm);
    assert_int_equal(ad, 2);
    assert_int_equal(rm, 1);
    assert_int_equal(strlen(r.text), r.len);
    sg_diff_result_clear(&r);
}

static void test_created_deleted_equal(void **state)
{
    (void)state;
    sg_err err = {0};
    sg_diff_result r;
    assert_int_equal(sg_udiff_unified("n.txt", NULL, 0, "hi\n", 3, &r, &err), 0);
    assert_non_null(strstr(r.text, "--- /dev/null\n"));
    assert_non_null(strstr(r.text, "+++ b/n.txt\n"));
    assert_non_null(strstr(r.text, "\n+hi\n"));
    assert_int_equal(r.added, 1);
    sg_diff_result_clear(&r);

    assert_int_equal(sg_udiff_unified("n.txt", "hi\n", 3, NULL, 0, &r, &err), 0);
    assert_non_null(strstr(r.text, "+++ /dev/null\n"));
    assert_non_null(strstr(r.text, "\n-hi\n"));
    assert_int_equal(r.removed, 1);
    sg_diff_result_clear(&r);

    assert_int_equal(sg_udiff_unified("n.txt", "same\n", 5, "same\n", 5, &r, &err), 0);
    assert_int_equal(r.len, 0);
    assert_string_equal(r.text, "");
    sg_diff_result_clear(&r);

    /* No trailing newline is marked, and a NUL-free text stays text. */
    assert_int_equal(sg_udiff_unified("t", "a", 1, "b", 1, &r, &err), 0);
    assert_non_null(strstr(r.text, "\\ No newline at end of file"));
    sg_diff_result_clear(&r);
}

static void test_binary_rule(void **state)
{
    (void)state;
    assert_false(sg_diff_is_binary("hello\n", 6));
    assert_false(sg_diff_is_binary("", 0));
    const char *u = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
    assert_false(sg_diff_is_binary(u, strlen(u)));
    assert_true(sg_diff_is_binary("a\0b", 3));
    assert_true(sg_diff_is_binary("caf\xe9", 4));             /* latin-1 */
    assert_true(sg_diff_is_binary("\xc0\xaf", 2));            /* overlong */
    assert_true(sg_diff_is_binary("\xed\xa0\x80", 3));        /* surrogate */
    assert_true(sg_diff_is_binary("\xf4\x90\x80\x80", 4));    /* > U+10FFFF */
    assert_true(sg_diff_is_binary("ab\xe2\x82", 4));          /* cut short */
    /* A NUL past the first 8 KiB still makes it binary (JSON refuses it). */
    char *big = malloc(20000);
    memset(big, 'x', 20000);
    assert_false(sg_diff_is_binary(big, 20000));
    big[15000] = '\0';
    assert_true(sg_diff_is_binary(big, 20000));
    /* ASCII is checked 8 bytes at a time: a bad or a good sequence at every
     * offset of a word, and at the very end, is still seen */
    for (size_t at = 0; at < 24; at++) {
        memset(big, 'x', 40);
        big[at] = '\xe9';
        assert_true(sg_diff_valid_utf8(big, 40) == false);
        memcpy(big + at, "\xc3\xa9", 2); /* é */
        assert_true(sg_diff_valid_utf8(big, 40));
        memcpy(big + at, "\xe2\x82", 2); /* cut short by an ASCII byte */
        assert_true(sg_diff_valid_utf8(big, 40) == false);
    }
    memset(big, 'x', 40);
    big[39] = '\xc3';
    assert_false(sg_diff_valid_utf8(big, 40));
    assert_true(sg_diff_valid_utf8(big, 39));
    free(big);
}

static void test_sha256(void **state)
{
    (void)state;
    uint8_t sha[SG_DIFF_SHA256_LEN];
    char hex[SG_DIFF_SHA256_HEX];
    sg_diff_sha256("abc", 3, sha);
    sg_diff_hex(sha, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sg_diff_sha256("", 0, sha);
    sg_diff_hex(sha, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_count_lines(void **state)
{
    (void)state;
    const char *d = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n ctx\n-old\n+new\n+more\n";
    size_t a = 0, r = 0;
    sg_diff_count_lines(d, strlen(d), &a, &r);
    assert_int_equal(a, 2);
    assert_int_equal(r, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modified),
        cmocka_unit_test(test_created_deleted_equal),
        cmocka_unit_test(test_binary_rule),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_count_lines),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sg_udiff_global_shutdown();
    return rc;
}

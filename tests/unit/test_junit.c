/* junit: JUnit XML reports into a test summary, and the report a command
 * line asks for (capture/junit.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "capture/junit.h"

static sg_testsummary s;

/* pytest's --junitxml, as pytest 7 writes it */
static void test_pytest(void **state)
{
    (void)state;
    const char *x =
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><testsuites><testsuite name=\"pytest\" errors=\"1\" "
        "failures=\"2\" skipped=\"1\" tests=\"6\" time=\"0.05\">"
        "<testcase classname=\"test_calc\" name=\"test_add\" time=\"0.001\" />"
        "<testcase classname=\"test_calc\" name=\"test_sub\"><failure message=\"assert 1 == 2\">x</failure></testcase>"
        "<testcase classname=\"test_calc\" name=\"test_mul[2-&lt;3&gt;]\"><failure message=\"m\"/>"
        "<system-out>out</system-out></testcase>"
        "<testcase classname=\"test_calc\" name=\"test_fixture\"><error message=\"fixture\"/></testcase>"
        "<testcase classname=\"test_calc\" name=\"test_skip\"><skipped message=\"no\"/></testcase>"
        "<testcase classname=\"\" name=\"test_bare\"/>"
        "</testsuite></testsuites>";
    assert_int_equal(sg_junit_parse(x, strlen(x), &s), 0);
    assert_string_equal(s.runner, "junit");
    assert_int_equal(s.run, 5);
    assert_int_equal(s.passed, 2);
    assert_int_equal(s.failed, 2);
    assert_int_equal(s.errors, 1);
    assert_int_equal(s.skipped, 1);
    assert_false(s.no_tests);
    assert_int_equal(s.nnames, 3);
    assert_string_equal(s.names[0], "test_calc.test_sub");
    assert_string_equal(s.names[1], "test_calc.test_mul[2-<3>]");
    assert_string_equal(s.names[2], "test_calc.test_fixture");
}

/* No <testcase>: the suites' attributes, summed under <testsuites>. */
static void test_suite_attributes(void **state)
{
    (void)state;
    const char *x = "<testsuites tests=\"99\"><testsuite tests=\"5\" failures=\"1\" errors=\"1\" skipped=\"1\"/>"
                    "<testsuite tests=\"2\" disabled=\"1\"><testsuite tests=\"50\"/></testsuite></testsuites>";
    assert_int_equal(sg_junit_parse(x, strlen(x), &s), 0);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.errors, 1);
    assert_int_equal(s.skipped, 2);
    assert_int_equal(s.passed, 3);
    assert_int_equal(s.run, 5);
    const char *none = "<testsuite name=\"pytest\" tests=\"0\"></testsuite>";
    assert_int_equal(sg_junit_parse(none, strlen(none), &s), 0);
    assert_true(s.no_tests);
    assert_int_equal(s.run, 0);
}

/* Hostile reports: refused whole, nothing said. */
static void test_refused(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "<testsuite><testcase name=\"a\"><failure/></testcase>", /* not closed */
        "<html><testcase name=\"a\"/></html>",                    /* not a report */
        "<?xml version=\"1.0\"?><!DOCTYPE t [<!ENTITY a \"aaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;\">]>"
        "<testsuite><testcase name=\"&b;\"><failure/></testcase></testsuite>",
        "<!DOCTYPE t SYSTEM \"file:///etc/passwd\"><testsuite/>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s.runner = "x";
        assert_int_equal(sg_junit_parse(bad[i], strlen(bad[i]), &s), -1);
        assert_null(s.runner);
        assert_int_equal(s.run + s.skipped + s.nnames, 0);
    }
    /* too deep */
    size_t n = SG_JUNIT_MAX_DEPTH + 1;
    char *deep = malloc(n * 7 + n * 8 + 32), *p = deep;
    p += sprintf(p, "<testsuite>");
    for (size_t i = 1; i < n; i++)
        p += sprintf(p, "<a>");
    for (size_t i = 1; i < n; i++)
        p += sprintf(p, "</a>");
    p += sprintf(p, "</testsuite>");
    assert_int_equal(sg_junit_parse(deep, (size_t)(p - deep), &s), -1);
    free(deep);
    /* too large: refused before any parse */
    char *big = calloc(1, SG_JUNIT_MAX_BYTES + 2);
    memcpy(big, "<testsuite>", 11);
    memset(big + 11, ' ', SG_JUNIT_MAX_BYTES - 11);
    memcpy(big + SG_JUNIT_MAX_BYTES - 12, "</testsuite>", 12);
    assert_int_equal(sg_junit_parse(big, SG_JUNIT_MAX_BYTES, &s), 0);
    big[SG_JUNIT_MAX_BYTES] = ' ';
    assert_int_equal(sg_junit_parse(big, SG_JUNIT_MAX_BYTES + 1, &s), -1);
    free(big);
}

/* Names: at most SG_TS_NAMES_MAX kept, cut at a character, deduplicated. */
static void test_names_bounded(void **state)
{
    (void)state;
    size_t cases = SG_TS_NAMES_MAX + 20;
    char *x = malloc(cases * 700 + 64), *p = x;
    p += sprintf(p, "<testsuite>");
    for (size_t i = 0; i < cases; i++) {
        p += sprintf(p, "<testcase classname=\"c%zu\" name=\"", i);
        for (int k = 0; k < 150; k++)
            p += sprintf(p, "\xC3\xA9"); /* 300 bytes of é */
        p += sprintf(p, "\"><failure/></testcase>");
    }
    p += sprintf(p, "<testcase name=\"dup\"><error/></testcase><testcase name=\"dup\"><error/></testcase>");
    p += sprintf(p, "</testsuite>");
    assert_int_equal(sg_junit_parse(x, (size_t)(p - x), &s), 0);
    assert_int_equal(s.failed, cases);
    assert_int_equal(s.errors, 2);
    assert_int_equal(s.nnames, SG_TS_NAMES_MAX);
    assert_true(s.names_truncated);
    for (size_t i = 0; i < s.nnames; i++) {
        size_t l = strlen(s.names[i]);
        assert_true(l <= SG_TS_NAME_MAX && l > SG_TS_NAME_MAX - 2);
        assert_true(((unsigned char)s.names[i][l - 1] & 0xC0) == 0x80); /* ends whole: é's second byte */
    }
    free(x);
    const char *d = "<testsuite><testcase name=\"dup\"><error/></testcase><testcase name=\"dup\"><error/></testcase>"
                    "<testcase name=\"bell\x07\"><failure/></testcase></testsuite>";
    assert_int_equal(sg_junit_parse(d, strlen(d), &s), -1); /* a control character is not XML */
    d = "<testsuite><testcase name=\"dup\"><error/></testcase><testcase name=\"dup\"><error/></testcase></testsuite>";
    assert_int_equal(sg_junit_parse(d, strlen(d), &s), 0);
    assert_int_equal(s.errors, 2);
    assert_int_equal(s.nnames, 1);
}

static void test_report_arg(void **state)
{
    (void)state;
    char path[SG_JUNIT_PATH_MAX];
    char *a1[] = {"pytest", "-q", "--junitxml=out/r.xml", NULL};
    assert_true(sg_junit_report_arg(a1, path));
    assert_string_equal(path, "out/r.xml");
    char *a2[] = {"python3", "-m", "pytest", "--junit-xml", "/workspace/r.xml", "tests", NULL};
    assert_true(sg_junit_report_arg(a2, path));
    assert_string_equal(path, "/workspace/r.xml");
    char *a3[] = {"bash", "-lc", "cd sub && pytest --junitxml 'my report.xml'; echo done", NULL};
    assert_true(sg_junit_report_arg(a3, path));
    assert_string_equal(path, "sub/my report.xml");
    char *a7[] = {"sh", "-c", "pytest --junitxml 'unterminated", NULL};
    assert_true(sg_junit_report_arg(a7, path));
    assert_string_equal(path, "unterminated");
    char *a6[] = {"sh", "-c", "cd /workspace/a; cd b && pytest --junitxml=r.xml && cd c", NULL};
    assert_true(sg_junit_report_arg(a6, path));
    assert_string_equal(path, "/workspace/a/b/r.xml");
    char *a4[] = {"sh", "-c", "gotestsum --junitfile=g.xml", NULL};
    assert_true(sg_junit_report_arg(a4, path));
    assert_string_equal(path, "g.xml");
    char *a5[] = {"vitest", "run", "--reporter=junit", "--outputFile.junit=v.xml", NULL};
    assert_true(sg_junit_report_arg(a5, path));
    assert_string_equal(path, "v.xml");
    char *n1[] = {"pytest", "-q", "--junitxml", NULL};
    assert_false(sg_junit_report_arg(n1, path));
    char *n2[] = {"pytest", "--junitxmlx=a", NULL};
    assert_false(sg_junit_report_arg(n2, path));
    char *n3[] = {"sh", "-c", "pytest -q", NULL};
    assert_false(sg_junit_report_arg(n3, path));
    char *n4[] = {NULL};
    assert_false(sg_junit_report_arg(n4, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytest),
        cmocka_unit_test(test_suite_attributes),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_names_bounded),
        cmocka_unit_test(test_report_arg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

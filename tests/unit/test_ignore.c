/* ignore: the operator's list parsed (and refused when wrong), and paths
 * matched: names at any depth, directories only, inner and leading '/',
 * escapes, the default list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "capture/ignore.h"

static sg_ignore *parse_ok(const char *list)
{
    sg_err err = {0};
    sg_ignore *ig = sg_ignore_parse(list, &err);
    if (!ig)
        fail_msg("%s: %s", list, err.msg);
    return ig;
}

static void test_default(void **state)
{
    (void)state;
    sg_ignore *ig = parse_ok(sg_ignore_effective(NULL));
    assert_true(sg_ignore_count(ig) > 10);
    assert_true(sg_ignore_needs_path(ig));
    assert_true(sg_ignore_match(ig, ".calc.py.swp", false));
    assert_true(sg_ignore_match(ig, "src/.calc.py.swp", false));
    assert_true(sg_ignore_match(ig, "calc.py~", false));
    assert_true(sg_ignore_match(ig, "a/b/.#calc.py", false));
    assert_true(sg_ignore_match(ig, "__pycache__", true));
    assert_false(sg_ignore_match(ig, "__pycache__", false)); /* a file of that name is reported */
    assert_true(sg_ignore_match(ig, "pkg/m.cpython-311.pyc", false));
    assert_true(sg_ignore_match(ig, "node_modules/.cache", true));
    assert_true(sg_ignore_match(ig, "web/node_modules/.cache", true));
    assert_false(sg_ignore_match(ig, ".cache", true));
    assert_false(sg_ignore_match(ig, "node_modules", true));
    assert_false(sg_ignore_match(ig, "calc.py", false));
    assert_false(sg_ignore_match(ig, "swp", false));
    /* the tree match looks above */
    assert_true(sg_ignore_match_tree(ig, "pkg/__pycache__/x.txt", false));
    assert_true(sg_ignore_match_tree(ig, "node_modules/.cache/babel/y.json", false));
    assert_false(sg_ignore_match_tree(ig, "node_modules/lib/index.js", false));
    sg_ignore_free(ig);
    sg_ignore *own = parse_ok(sg_ignore_effective("*.log"));
    assert_int_equal(sg_ignore_count(own), 1); /* the operator's replaces the default */
    assert_false(sg_ignore_match(own, "a.swp", false));
    sg_ignore_free(own);
}

static void test_syntax(void **state)
{
    (void)state;
    sg_ignore *ig = parse_ok("/top.txt,build/,a\\,b,x/*.o,*.[ch]~");
    assert_int_equal(sg_ignore_count(ig), 5);
    assert_true(sg_ignore_match(ig, "top.txt", false));
    assert_false(sg_ignore_match(ig, "sub/top.txt", false)); /* anchored */
    assert_true(sg_ignore_match(ig, "build", true));
    assert_true(sg_ignore_match(ig, "sub/build", true));
    assert_false(sg_ignore_match(ig, "build", false));
    assert_true(sg_ignore_match(ig, "q/a,b", false)); /* \, is a comma */
    assert_true(sg_ignore_match(ig, "x/m.o", false));
    assert_true(sg_ignore_match(ig, "deep/x/m.o", false));
    assert_false(sg_ignore_match(ig, "x/y/m.o", false)); /* '*' does not cross '/' */
    assert_true(sg_ignore_match(ig, "m.c~", false));
    assert_false(sg_ignore_match(ig, "m.py~", false));
    sg_ignore_free(ig);
    sg_ignore *none = parse_ok("");
    assert_int_equal(sg_ignore_count(none), 0);
    assert_false(sg_ignore_match(none, "a.swp", false));
    sg_ignore_free(none);
    assert_false(sg_ignore_match(NULL, "a.swp", false));
}

static void test_refused(void **state)
{
    (void)state;
    static const char *bad[] = {"a,,b", ",a", "a,", "../x", "a/../b", "./a", "a//b", "/", "a\nb", "a\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sg_err err = {0};
        sg_ignore *ig = sg_ignore_parse(bad[i], &err);
        if (ig)
            fail_msg("accepted %s", bad[i]);
        assert_true(err.msg[0] != '\0');
    }
    /* bounds: patterns and bytes */
    size_t n = SG_IGNORE_MAX_PATTERNS + 1;
    char *many = calloc(n, 2);
    for (size_t i = 0; i < n; i++)
        memcpy(many + 2 * i, i + 1 < n ? "a," : "a", 2);
    sg_err err = {0};
    assert_null(sg_ignore_parse(many, &err));
    free(many);
    char *big = malloc(SG_IGNORE_MAX_LEN + 2);
    memset(big, 'a', SG_IGNORE_MAX_LEN + 1);
    big[SG_IGNORE_MAX_LEN + 1] = '\0';
    assert_null(sg_ignore_parse(big, &err));
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

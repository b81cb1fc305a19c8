/* leafset: leaves tracked and untracked by name (a copy each, one entry
 * removed at a time, removing an unknown one is a no-op), grown past its
 * first block, freed; the highest "xN" of a cgroup listing, ignoring
 * names that are not exec leaves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "supervisor/leafset.h"

static void test_add_remove(void **state)
{
    (void)state;
    sg_leafset ls = {0};
    char name[8] = "x1";
    sg_leafset_add(&ls, name);
    name[1] = '9'; /* a copy was kept */
    assert_true(sg_leafset_has(&ls, "x1"));
    assert_false(sg_leafset_has(&ls, "x9"));
    sg_leafset_add(&ls, "x2");
    sg_leafset_add(&ls, "x2"); /* twice: two entries */
    assert_int_equal(ls.n, 3);
    assert_true(sg_leafset_remove(&ls, "x2"));
    assert_true(sg_leafset_has(&ls, "x2"));
    assert_true(sg_leafset_remove(&ls, "x2"));
    assert_false(sg_leafset_has(&ls, "x2"));
    assert_false(sg_leafset_remove(&ls, "x2"));
    assert_false(sg_leafset_remove(&ls, "x7"));
    assert_int_equal(ls.n, 1);
    assert_string_equal(ls.names[0], "x1");
    sg_leafset_free(&ls);
    assert_int_equal(ls.n, 0);
    assert_null(ls.names);
    sg_leafset_free(&ls); /* twice is harmless */
}

static void test_many(void **state)
{
    (void)state;
    sg_leafset ls = {0};
    char name[16];
    for (int i = 1; i <= 100; i++) {
        snprintf(name, sizeof name, "x%d", i);
        sg_leafset_add(&ls, name);
    }
    assert_int_equal(ls.n, 100);
    for (int i = 1; i <= 100; i += 2) {
        snprintf(name, sizeof name, "x%d", i);
        assert_true(sg_leafset_remove(&ls, name));
    }
    assert_int_equal(ls.n, 50);
    for (int i = 1; i <= 100; i++) {
        snprintf(name, sizeof name, "x%d", i);
        assert_int_equal(sg_leafset_has(&ls, name), i % 2 == 0);
    }
    sg_leafset_free(&ls);
}

static void test_highest(void **state)
{
    (void)state;
    assert_int_equal(sg_leafset_highest(NULL), 0);
    char *none[] = {NULL};
    assert_int_equal(sg_leafset_highest(none), 0);
    char *leaves[] = {"x3", "ckpt", "x12", "x7", "y99", "x", NULL};
    assert_int_equal(sg_leafset_highest(leaves), 12);
    char *big[] = {"x4294967295", "x1", NULL};
    assert_int_equal(sg_leafset_highest(big), 4294967295u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_remove),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_highest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

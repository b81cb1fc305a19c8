/* caps: which cap an exec, the clock or the CPU time reaches, and in
 * which words; tool calls against max_calls only; 0 is no cap; a cap's
 * abort is not resumable; the JSON of the caps and their figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "supervisor/caps.h"

static void test_exec_caps(void **state)
{
    (void)state;
    sg_sandbox_meta m = {0};
    char why[128] = "";
    /* no caps: never */
    assert_false(sg_caps_exec_reached(&m, 1000000, 1000000, true, why, sizeof why));
    m.max_execs = 3;
    assert_false(sg_caps_exec_reached(&m, 2, 0, false, why, sizeof why)); /* the third exec runs */
    assert_true(sg_caps_exec_reached(&m, 3, 0, false, why, sizeof why));  /* the fourth does not */
    assert_string_equal(why, "cap max_execs=3 reached");
    m.max_execs = 0;
    m.max_calls = 2;
    /* plain execs do not count against the calls' cap */
    assert_false(sg_caps_exec_reached(&m, 50, 2, false, why, sizeof why));
    assert_false(sg_caps_exec_reached(&m, 50, 1, true, why, sizeof why));
    assert_true(sg_caps_exec_reached(&m, 50, 2, true, why, sizeof why));
    assert_string_equal(why, "cap max_calls=2 reached");
    /* both reached: the execs' cap is named */
    m.max_execs = 1;
    assert_true(sg_caps_exec_reached(&m, 1, 2, true, why, sizeof why));
    assert_string_equal(why, "cap max_execs=1 reached");
    /* a short buffer is cut, not overrun */
    char small[8];
    assert_true(sg_caps_exec_reached(&m, 1, 2, true, small, sizeof small));
    assert_string_equal(small, "cap max");
}

static void test_time_caps(void **state)
{
    (void)state;
    sg_sandbox_meta m = {0};
    char why[128] = "";
    assert_false(sg_caps_timed(&m));
    assert_false(sg_caps_wall_reached(&m, 1e9, why, sizeof why));
    assert_false(sg_caps_cpu_reached(&m, 1e9, why, sizeof why));
    m.max_wall_s = 2.5;
    assert_true(sg_caps_timed(&m));
    assert_false(sg_caps_wall_reached(&m, 2.4, why, sizeof why));
    assert_true(sg_caps_wall_reached(&m, 2.5, why, sizeof why));
    assert_string_equal(why, "cap max_wall_s=2.5 reached");
    assert_false(sg_caps_cpu_reached(&m, 1e9, why, sizeof why)); /* no CPU cap */
    m.max_wall_s = 0;
    m.max_cpu_s = 0.5;
    assert_true(sg_caps_timed(&m));
    assert_false(sg_caps_cpu_reached(&m, 0.49, why, sizeof why));
    assert_true(sg_caps_cpu_reached(&m, 0.75, why, sizeof why));
    assert_string_equal(why, "cap max_cpu_s=0.5 reached");
}

static void test_resumable(void **state)
{
    (void)state;
    assert_true(sg_caps_resumable("operator"));
    assert_true(sg_caps_resumable("signal"));
    assert_false(sg_caps_resumable("cap"));
}

static void test_json(void **state)
{
    (void)state;
    sg_sandbox_meta m = {.max_wall_s = 60, .max_execs = 10};
    sg_caps_usage u = {.wall_s = 1.5, .cpu_s = 0.25, .execs = 4, .calls = 2};
    json_t *j = sg_caps_json(&m, &u);
    assert_non_null(j);
    assert_true(json_number_value(json_object_get(json_object_get(j, "max_wall_s"), "limit")) == 60.0);
    assert_true(json_number_value(json_object_get(json_object_get(j, "max_wall_s"), "value")) == 1.5);
    assert_true(json_number_value(json_object_get(json_object_get(j, "max_execs"), "limit")) == 10.0);
    assert_true(json_number_value(json_object_get(json_object_get(j, "max_execs"), "value")) == 4.0);
    /* no cap: a null limit, the figure still shown */
    assert_true(json_is_null(json_object_get(json_object_get(j, "max_cpu_s"), "limit")));
    assert_true(json_number_value(json_object_get(json_object_get(j, "max_cpu_s"), "value")) == 0.25);
    assert_true(json_is_null(json_object_get(json_object_get(j, "max_calls"), "limit")));
    assert_true(json_number_value(json_object_get(json_object_get(j, "max_calls"), "value")) == 2.0);
    assert_int_equal(json_object_size(j), 4);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exec_caps),
        cmocka_unit_test(test_time_caps),
        cmocka_unit_test(test_resumable),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* budget: a window counts events, bytes and checkpoints; the events and
 * bytes budgets report once per window (together), the checkpoints' once;
 * a window closes after SG_BUDGET_WINDOW_S (or at the end) with its
 * figures when it dropped anything; 0 is no budget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "capture/budget.h"

#define S(x) ((uint64_t)(x) * 1000000000ull)

static void test_events(void **state)
{
    (void)state;
    sg_budget b;
    sg_budget_init(&b, 3, 0, 0);
    sg_budget_window w;
    assert_false(sg_budget_roll(&b, S(100), false, &w)); /* opens the first window */
    assert_false(sg_budget_over(&b));
    assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_KINDS);
    assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_KINDS);
    assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_EVENTS); /* the third reaches it, once */
    assert_true(sg_budget_over(&b));
    sg_budget_drop(&b);
    sg_budget_drop(&b);
    assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_KINDS); /* a kind never dropped: no second report */
    assert_false(sg_budget_roll(&b, S(159), false, &w));           /* still the same minute */
    assert_true(sg_budget_over(&b));
    assert_true(sg_budget_roll(&b, S(160), false, &w)); /* closes: its summary is due */
    assert_int_equal(w.used[SG_BUDGET_EVENTS], 4);
    assert_int_equal(w.used[SG_BUDGET_BYTES], 40);
    assert_int_equal(w.dropped_events, 2);
    assert_false(sg_budget_over(&b)); /* a new window */
    assert_int_equal(b.used[SG_BUDGET_EVENTS], 0);
    assert_false(sg_budget_roll(&b, S(300), false, &w)); /* nothing dropped: no summary */
    assert_false(sg_budget_roll(&b, S(301), true, &w));
}

static void test_bytes_and_none(void **state)
{
    (void)state;
    sg_budget b;
    sg_budget_init(&b, 0, 100, 0);
    sg_budget_window w;
    sg_budget_roll(&b, S(1), false, &w);
    for (int i = 0; i < 10000; i++) /* no events budget */
        if (i < 9)
            assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_KINDS);
    sg_budget_init(&b, 0, 100, 0);
    sg_budget_roll(&b, S(1), false, &w);
    for (int i = 0; i < 9; i++)
        assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_KINDS);
    assert_int_equal(sg_budget_stored(&b, 10), SG_BUDGET_BYTES);
    assert_true(sg_budget_over(&b));
    sg_budget_drop(&b);
    assert_true(sg_budget_roll(&b, S(2), true, &w)); /* the end closes it at once */
    assert_int_equal(w.dropped_events, 1);
    sg_budget_init(&b, 0, 0, 0);
    sg_budget_roll(&b, S(1), false, &w);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(sg_budget_stored(&b, 1u << 20), SG_BUDGET_KINDS);
    assert_false(sg_budget_over(&b));
    assert_string_equal(sg_budget_name(SG_BUDGET_CHECKPOINTS), "checkpoints");
}

static void test_checkpoints(void **state)
{
    (void)state;
    sg_budget b;
    sg_budget_init(&b, 0, 0, 2);
    sg_budget_window w;
    sg_budget_roll(&b, S(5), false, &w);
    bool first = true;
    assert_true(sg_budget_checkpoint(&b, &first));
    assert_false(first);
    assert_true(sg_budget_checkpoint(&b, &first));
    assert_false(sg_budget_checkpoint(&b, &first));
    assert_true(first); /* the report is due once */
    assert_false(sg_budget_checkpoint(&b, &first));
    assert_false(first);
    assert_false(sg_budget_over(&b)); /* events still flow */
    assert_true(sg_budget_roll(&b, S(65), false, &w));
    assert_int_equal(w.dropped_checkpoints, 2);
    assert_int_equal(w.used[SG_BUDGET_CHECKPOINTS], 2);
    assert_true(sg_budget_checkpoint(&b, &first));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_bytes_and_none),
        cmocka_unit_test(test_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

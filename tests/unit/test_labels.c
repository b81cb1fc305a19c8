/* labels: the queue (copies kept with their times, full at SG_LABELS_MAX
 * and refusing more, cleared for reuse, freed); the newest checkpoint by
 * label or by "not this label" (and the newest of all when every one
 * is); which --to is an id prefix and which a label. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "supervisor/labels.h"

static void test_queue(void **state)
{
    (void)state;
    sg_labels q = {0};
    assert_false(sg_labels_full(&q));
    char label[32] = "before exec 1: true";
    assert_int_equal(sg_labels_push(&q, label, 1700000000), 0);
    label[0] = 'X'; /* a copy was kept */
    assert_string_equal(q.v[0], "before exec 1: true");
    assert_int_equal(q.times[0], 1700000000);
    for (int i = 1; i < SG_LABELS_MAX; i++) {
        assert_false(sg_labels_full(&q));
        snprintf(label, sizeof label, "l%d", i);
        assert_int_equal(sg_labels_push(&q, label, i), 0);
    }
    assert_true(sg_labels_full(&q));
    assert_int_equal(sg_labels_push(&q, "one too many", 0), -1);
    assert_int_equal(q.n, SG_LABELS_MAX);
    assert_string_equal(q.v[SG_LABELS_MAX - 1], "l255");
    sg_labels_clear(&q);
    assert_int_equal(q.n, 0);
    assert_false(sg_labels_full(&q));
    assert_int_equal(sg_labels_push(&q, "again", 5), 0);
    assert_string_equal(q.v[0], "again");
    sg_labels_free(&q);
    assert_null(q.v);
    sg_labels_free(&q);
}

static sg_checkpoint_info info(char c, char *label)
{
    sg_checkpoint_info i = {.label = label};
    memset(i.id, c, SG_CHECKPOINT_ID_LEN);
    i.id[SG_CHECKPOINT_ID_LEN] = '\0';
    return i;
}

static void test_newest(void **state)
{
    (void)state;
    /* oldest first, as the store lists them */
    sg_checkpoint_info v[] = {info('a', "create"), info('b', "step"), info('c', NULL),
                              info('d', "step"), info('e', "before rollback")};
    char out[SG_CHECKPOINT_ID_LEN + 1];
    assert_int_equal(sg_labels_newest(v, 5, "step", true, out), 1);
    assert_int_equal(out[0], 'd');
    assert_int_equal(sg_labels_newest(v, 5, "create", true, out), 1);
    assert_int_equal(out[0], 'a');
    assert_int_equal(sg_labels_newest(v, 5, "nope", true, out), 0);
    /* the default rollback target: the newest that is not a safety copy */
    assert_int_equal(sg_labels_newest(v, 5, "before rollback", false, out), 1);
    assert_int_equal(out[0], 'd');
    assert_int_equal(sg_labels_newest(v, 3, "before rollback", false, out), 1);
    assert_int_equal(out[0], 'c'); /* no label is not that label */
    /* only safety copies: the newest of them */
    sg_checkpoint_info only[] = {info('f', "before rollback"), info('g', "before rollback")};
    assert_int_equal(sg_labels_newest(only, 2, "before rollback", false, out), 1);
    assert_int_equal(out[0], 'g');
    assert_int_equal(out[SG_CHECKPOINT_ID_LEN], '\0');
    assert_int_equal(sg_labels_newest(only, 0, "before rollback", false, out), 0);
}

static void test_id_prefix(void **state)
{
    (void)state;
    assert_true(sg_labels_is_id_prefix("abcd"));
    assert_true(sg_labels_is_id_prefix("0123456789abcdef"));
    char full[SG_CHECKPOINT_ID_LEN + 2];
    memset(full, 'f', sizeof full);
    full[SG_CHECKPOINT_ID_LEN] = '\0';
    assert_true(sg_labels_is_id_prefix(full));
    full[SG_CHECKPOINT_ID_LEN] = 'f';
    full[SG_CHECKPOINT_ID_LEN + 1] = '\0';
    assert_false(sg_labels_is_id_prefix(full)); /* longer than an id */
    assert_false(sg_labels_is_id_prefix("abc"));  /* too short: a label */
    assert_false(sg_labels_is_id_prefix(""));
    assert_false(sg_labels_is_id_prefix("ABCD")); /* ids are lowercase */
    assert_false(sg_labels_is_id_prefix("step"));
    assert_false(sg_labels_is_id_prefix("abcg"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue),
        cmocka_unit_test(test_newest),
        cmocka_unit_test(test_id_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* query: the ingest's URL query arguments, from fragments as lws gives
 * them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ingest/query.h"

typedef struct q {
    const char *const *f;
} q;

static int get(void *ud, int i, char *buf, size_t size)
{
    const q *x = ud;
    for (int k = 0; k < i; k++)
        if (!x->f[k])
            return -1;
    if (!x->f[i])
        return -1;
    size_t n = strlen(x->f[i]);
    if (n >= size)
        return -2;
    memcpy(buf, x->f[i], n + 1);
    return (int)n;
}

static void test_arg(void **state)
{
    (void)state;
    const char *f[] = {"learner=alice", "task=t1", "x=", NULL};
    q x = {f};
    char buf[16];
    assert_int_equal(sg_query_arg(get, &x, "learner=", buf, sizeof buf), 1);
    assert_string_equal(buf, "alice");
    assert_int_equal(sg_query_arg(get, &x, "sandbox=", buf, sizeof buf), 0);
    assert_int_equal(sg_query_arg(get, &x, "x=", buf, sizeof buf), 1);
    assert_string_equal(buf, "");
    /* too long for the buffer: refused, not absent (a dropped filter) */
    assert_int_equal(sg_query_arg(get, &x, "learner=", buf, 5), -1);
    const char *twice[] = {"task=a", "task=b", NULL};
    x.f = twice;
    assert_int_equal(sg_query_arg(get, &x, "task=", buf, sizeof buf), -1);
}

static void test_i64(void **state)
{
    (void)state;
    const char *f[] = {"after_seq=-1", "limit=0", "a=+5", "b= 5", "c=9223372036854775808", "d=12", NULL};
    q x = {f};
    int64_t v = 7;
    assert_int_equal(sg_query_i64(get, &x, "after_seq=", -1, &v), 0);
    assert_int_equal(v, -1);
    v = 7;
    assert_int_equal(sg_query_i64(get, &x, "limit=", 1, &v), -1); /* below min */
    assert_int_equal(sg_query_i64(get, &x, "a=", 0, &v), -1);     /* '+' */
    assert_int_equal(sg_query_i64(get, &x, "b=", 0, &v), -1);     /* space */
    assert_int_equal(sg_query_i64(get, &x, "c=", 0, &v), -1);     /* overflow */
    assert_int_equal(v, 7);
    assert_int_equal(sg_query_i64(get, &x, "none=", 0, &v), 0);   /* absent: untouched */
    assert_int_equal(v, 7);
    assert_int_equal(sg_query_i64(get, &x, "d=", 0, &v), 0);
    assert_int_equal(v, 12);
}

static void test_bounds(void **state)
{
    (void)state;
    /* more fragments than SG_QUERY_FRAGS_MAX: refused */
    const char *many[SG_QUERY_FRAGS_MAX + 2];
    for (int i = 0; i <= SG_QUERY_FRAGS_MAX; i++)
        many[i] = "z=1";
    many[SG_QUERY_FRAGS_MAX + 1] = NULL;
    q x = {many};
    char buf[8];
    assert_int_equal(sg_query_arg(get, &x, "learner=", buf, sizeof buf), -1);
    many[SG_QUERY_FRAGS_MAX] = NULL; /* exactly the bound: fine */
    assert_int_equal(sg_query_arg(get, &x, "learner=", buf, sizeof buf), 0);
    /* a fragment longer than SG_QUERY_FRAG_MAX refuses every argument */
    char *big = malloc(SG_QUERY_FRAG_MAX + 2);
    memset(big, 'y', SG_QUERY_FRAG_MAX + 1);
    big[SG_QUERY_FRAG_MAX + 1] = 0;
    const char *f[] = {"learner=a", big, NULL};
    x.f = f;
    assert_int_equal(sg_query_arg(get, &x, "learner=", buf, sizeof buf), -1);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arg),
        cmocka_unit_test(test_i64),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for buf: the growable buffer and array growth, including the
 * sizes that would overflow (refused with ENOMEM, the buffer unchanged). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>

#include "base/buf.h"

static void test_append(void **state)
{
    (void)state;
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_buf_append(&b, "", 0), 0);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    for (int i = 0; i < 1000; i++)
        assert_int_equal(sg_buf_printf(&b, "%d,", i), 0);
    assert_true(b.cap > b.len);
    assert_int_equal(b.data[b.len], '\0');
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_non_null(strstr(b.data, ",999,"));
    size_t before = b.len;
    assert_int_equal(sg_buf_append(&b, "a\0b", 3), 0); /* bytes, NULs included */
    assert_int_equal(b.len, before + 3);
    assert_memory_equal(b.data + before, "a\0b", 3);
    sg_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(sg_buf_puts(&b, "x"), 0);
    size_t n = 0;
    char *s = sg_buf_steal(&b, &n);
    assert_string_equal(s, "x");
    assert_int_equal(n, 1);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    free(s);
    s = sg_buf_steal(&b, &n); /* an empty buffer gives "", not NULL */
    assert_string_equal(s, "");
    assert_int_equal(n, 0);
    free(s);
}

/* Consuming from the front: the rest moved down, still NUL-terminated;
 * too much empties it; an empty buffer stays as it is. */
static void test_consume(void **state)
{
    (void)state;
    sg_buf b = {0};
    sg_buf_consume(&b, 3);
    assert_null(b.data);
    assert_int_equal(sg_buf_puts(&b, "abcdef"), 0);
    sg_buf_consume(&b, 0);
    assert_string_equal(b.data, "abcdef");
    sg_buf_consume(&b, 2);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.data, "cdef");
    sg_buf_consume(&b, 99);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(sg_buf_puts(&b, "xy"), 0);
    assert_string_equal(b.data, "xy");
    sg_buf_free(&b);
}

static void test_overflow(void **state)
{
    (void)state;
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_buf_puts(&b, "keep"), 0);
    char *data = b.data;
    size_t cap = b.cap;
    errno = 0;
    assert_int_equal(sg_buf_reserve(&b, SIZE_MAX - 2), -1);
    assert_int_equal(errno, ENOMEM);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.cap, cap);
    assert_string_equal(b.data, "keep");
    errno = 0;
    assert_int_equal(sg_buf_reserve(&b, (size_t)PTRDIFF_MAX), -1); /* past any object's size */
    assert_int_equal(errno, ENOMEM);
    assert_string_equal(b.data, "keep");
}

static void test_grow(void **state)
{
    (void)state;
    int *v = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < 10000; i++) {
        assert_int_equal(sg_grow(&v, &cap, i + 1, sizeof *v), 0);
        assert_true(cap >= i + 1);
        v[i] = (int)i;
    }
    assert_int_equal(v[9999], 9999);
    size_t c = cap;
    assert_int_equal(sg_grow(&v, &cap, 10, sizeof *v), 0); /* never shrinks */
    assert_int_equal(cap, c);
    errno = 0;
    assert_int_equal(sg_grow(&v, &cap, (size_t)PTRDIFF_MAX / sizeof *v + 1, sizeof *v), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(cap, c);
    assert_int_equal(v[9999], 9999);
    free(v);
}

static void test_strv(void **state)
{
    (void)state;
    char **v = NULL;
    size_t n = 0, cap = 0;
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "s%d", i);
        assert_int_equal(sg_strv_push(&v, &n, &cap, name), 0);
        assert_int_equal(n, (size_t)i + 1);
        assert_true(cap >= n);
        assert_null(v[n]); /* always NULL-terminated */
    }
    assert_string_equal(v[0], "s0");
    assert_string_equal(v[99], "s99");
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_consume),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_strv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

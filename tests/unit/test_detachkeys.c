/* detachkeys: specs parsed (the default, ctrl- keys, single characters,
 * '' for off) and refused with a message naming the bad key; the filter
 * holds a started sequence back, gives it on when the next key is not the
 * sequence's, detaches on the whole one split across reads, drops what
 * follows it, and passes everything when detaching is off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cli/detachkeys.h"

static void test_parse(void **state)
{
    (void)state;
    sg_detach_keys k;
    sg_err err = {0};
    assert_int_equal(sg_detach_keys_parse(SG_DETACH_KEYS_DEFAULT, &k, &err), 0);
    assert_int_equal(k.n, 2);
    assert_int_equal(k.key[0], 0x10);
    assert_int_equal(k.key[1], 0x11);
    assert_int_equal(sg_detach_keys_parse("ctrl-@,ctrl-\\,ctrl-_,x", &k, &err), 0);
    assert_int_equal(k.n, 4);
    assert_int_equal(k.key[0], 0);
    assert_int_equal(k.key[1], 0x1c);
    assert_int_equal(k.key[2], 0x1f);
    assert_int_equal(k.key[3], 'x');
    assert_int_equal(sg_detach_keys_parse("", &k, &err), 0);
    assert_int_equal(k.n, 0);
    const char *bad[] = {"ctrl-1", "ctrl-", "ab", ",", "ctrl-p,", "a,b,c,d,e,f,g,h,i", "ctrl-P", " "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(sg_detach_keys_parse(bad[i], &k, &err), -1);
        assert_non_null(strstr(err.msg, "--detach-keys"));
    }
    memset(&err, 0, sizeof err);
    sg_detach_keys_parse("ctrl-p,ctrl-9", &k, &err);
    assert_non_null(strstr(err.msg, "'ctrl-9'"));
}

static void test_filter(void **state)
{
    (void)state;
    sg_detach_keys k;
    sg_err err = {0};
    char out[64];
    size_t n = 99;
    assert_int_equal(sg_detach_keys_parse(SG_DETACH_KEYS_DEFAULT, &k, &err), 0);
    /* plain keys pass */
    assert_false(sg_detach_filter(&k, "ls\r", 3, out, &n));
    assert_int_equal(n, 3);
    assert_memory_equal(out, "ls\r", 3);
    /* ctrl-p alone is held, then given with the next key */
    assert_false(sg_detach_filter(&k, "\x10", 1, out, &n));
    assert_int_equal(n, 0);
    assert_false(sg_detach_filter(&k, "a", 1, out, &n));
    assert_int_equal(n, 2);
    assert_memory_equal(out, "\x10" "a", 2);
    /* ctrl-p ctrl-p ctrl-q: the first is given, the pair detaches */
    assert_true(sg_detach_filter(&k, "x\x10\x10\x11" "dropped", 11, out, &n));
    assert_int_equal(n, 2);
    assert_memory_equal(out, "x\x10", 2);
    assert_int_equal(k.matched, 0);
    /* split across reads */
    assert_false(sg_detach_filter(&k, "\x10", 1, out, &n));
    assert_true(sg_detach_filter(&k, "\x11", 1, out, &n));
    assert_int_equal(n, 0);
    /* off: everything passes */
    assert_int_equal(sg_detach_keys_parse("", &k, &err), 0);
    assert_false(sg_detach_filter(&k, "\x10\x11", 2, out, &n));
    assert_int_equal(n, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_filter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

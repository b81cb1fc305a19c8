/* unit/asciicast: the asciicast v3 writer (src/capture/asciicast.c): the
 * JSON text of terminal bytes, a character split across two reads, the
 * event lines, the size bound's marker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/util.h"
#include "capture/asciicast.h"

static void esc(const char *in, size_t len, const char *want, size_t want_tail)
{
    char out[256];
    size_t tail = 99;
    size_t n = sg_cast_escape(out, in, len, &tail);
    assert_int_equal(n, strlen(want));
    assert_string_equal(out, want);
    assert_int_equal(tail, want_tail);
}

static void test_escape(void **state)
{
    (void)state;
    esc("a\"b\\c", 5, "a\\\"b\\\\c", 0);
    esc("\x1b[0m\r\n\x07\x7f", 8, "\\u001b[0m\\r\\n\\u0007\\u007f", 0);
    esc("h\xc3\xa9", 3, "h\xc3\xa9", 0);                 /* é passes as it is */
    esc("h\xc3", 2, "h", 1);                             /* half of it: held */
    esc("\xe2\x82", 2, "", 2);
    esc("\xff\xc0\xafx", 4, "\\ufffd\\ufffd\\ufffdx", 0); /* invalid, overlong */
    esc("\xed\xa0\x80", 3, "\\ufffd\\ufffd\\ufffd", 0);   /* a surrogate */
    char out[64];
    assert_int_equal(sg_cast_escape(out, "x\xc3", 2, NULL), 7); /* no tail wanted: replaced */
    assert_string_equal(out, "x\\ufffd");
}

static char *slurp(const char *path)
{
    sg_err err = {0};
    char *s = sg_read_file(path, 1 << 20, NULL, &err);
    assert_non_null(s);
    return s;
}

static void test_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/sgt-cast-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/1.cast", dir);
    sg_cast c;
    sg_err err = {0};
    assert_int_equal(sg_cast_open(&c, path, 80, 24, "xterm", "bash -i", 1000000000ull, &err), 0);
    assert_int_equal(sg_cast_open(&(sg_cast){0}, path, 80, 24, "xterm", "x", 0, &err), -1); /* O_EXCL */
    sg_cast_output(&c, 1500000000ull, "caf\xc3", 4);  /* é split across two reads */
    sg_cast_output(&c, 1600000000ull, "\xa9\r\n", 3);
    sg_cast_input(&c, 2600000000ull, "ls\r", 3);
    sg_cast_resize(&c, 2600000000ull, 100, 30);
    sg_cast_marker(&c, 2600000000ull, "ls", 2);
    sg_cast_exit(&c, 3600000000ull, 0);
    char *s = slurp(path);
    const char *want_head = "{\"version\": 3, \"term\": {\"cols\": 80, \"rows\": 24, \"type\": \"xterm\"}, \"timestamp\": ";
    assert_memory_equal(s, want_head, strlen(want_head));
    assert_non_null(strstr(s, "\"command\": \"bash -i\"}\n"
                              "[0.500000, \"o\", \"caf\"]\n"
                              "[0.100000, \"o\", \"\xc3\xa9\\r\\n\"]\n"
                              "[1.000000, \"i\", \"ls\\r\"]\n"
                              "[0.000000, \"r\", \"100x30\"]\n"
                              "[0.000000, \"m\", \"ls\"]\n"
                              "[1.000000, \"x\", \"0\"]\n"));
    free(s);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* unit/asciicast: the asciicast v3 writer (src/capture/asciicast.c): the
 * JSON text of terminal bytes, a character split across two reads, the
 * event lines, the size bound's marker, a character unfinished at the end. */
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

/* A recording in a directory of its own under /tmp. */
typedef struct {
    char dir[32];
    char path[64];
    sg_cast c;
} tmp_cast;

static void tmp_open(tmp_cast *t, const char *command, uint64_t start_ns)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/sgt-cast-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/1.cast", t->dir);
    sg_err err = {0};
    assert_int_equal(sg_cast_open(&t->c, t->path, 80, 24, "xterm", command, start_ns, &err), 0);
}

/* Its text (the caller frees it), and the directory removed. */
static char *tmp_read(tmp_cast *t)
{
    char *s = slurp(t->path);
    unlink(t->path);
    rmdir(t->dir);
    return s;
}

static void test_file(void **state)
{
    (void)state;
    tmp_cast t;
    tmp_open(&t, "bash -i", 1000000000ull);
    sg_err err = {0};
    assert_int_equal(sg_cast_open(&(sg_cast){0}, t.path, 80, 24, "xterm", "x", 0, &err), -1); /* O_EXCL */
    sg_cast_output(&t.c, 1500000000ull, "caf\xc3", 4);  /* é split across two reads */
    sg_cast_output(&t.c, 1600000000ull, "\xa9\r\n", 3);
    sg_cast_input(&t.c, 2600000000ull, "ls\r", 3);
    sg_cast_resize(&t.c, 2600000000ull, 100, 30);
    sg_cast_marker(&t.c, 2600000000ull, "ls", 2);
    sg_cast_exit(&t.c, 3600000000ull, 0);
    char *s = tmp_read(&t);
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
}

/* A session that ends inside a character (a program cut off mid-write):
 * the held bytes are written as U+FFFD before the exit, not lost. Reads
 * that make no event (all held, or nothing) leave the next event's
 * interval counted from the last event written: the player's timeline is
 * the session's. */
static void test_unfinished_at_exit(void **state)
{
    (void)state;
    tmp_cast t;
    tmp_open(&t, "sh", 0);
    sg_cast_output(&t.c, 500000000ull, "ok", 2);
    sg_cast_output(&t.c, 800000000ull, "\xe2", 1); /* all held: no event, and its time not spent */
    sg_cast_output(&t.c, 900000000ull, "\x82", 1);
    sg_cast_output(&t.c, 1000000000ull, "", 0);
    sg_cast_input(&t.c, 1000000000ull, "\xc3", 1);
    sg_cast_exit(&t.c, 2000000000ull, 3);
    char *s = tmp_read(&t);
    assert_non_null(strstr(s, "\"command\": \"sh\"}\n"
                              "[0.500000, \"o\", \"ok\"]\n"
                              "[1.500000, \"o\", \"\\ufffd\\ufffd\"]\n"
                              "[0.000000, \"i\", \"\\ufffd\"]\n"
                              "[0.000000, \"x\", \"3\"]\n"));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_unfinished_at_exit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

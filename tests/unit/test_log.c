/* Unit tests for log: the line's shape, the level filter from the
 * environment, one line per message (its newlines escaped), lws's levels;
 * a learner's bytes in a message written escaped (sg_print_vis). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <regex.h>
#include <stdio.h>
#include <unistd.h>

#include "base/log.h"

/* Runs the logging in f with stderr on a pipe; returns what was written. */
static char *logged(void (*f)(void))
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(2);
    assert_int_equal(dup2(p[1], 2), 2);
    close(p[1]);
    f();
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    char *buf = calloc(1, 65536);
    ssize_t n = read(p[0], buf, 65535);
    close(p[0]);
    assert_true(n >= 0);
    return buf;
}

static void at_info(void)
{
    unsetenv("SANDGLASS_LOG_LEVEL");
    sg_log_init("tester");
    sg_log(SG_LOG_ERROR, "broke: %d", 7);
    sg_log(SG_LOG_WARN, "two\nlines\n");
    sg_log(SG_LOG_INFO, "fine");
    sg_log(SG_LOG_DEBUG, "hidden");
    sg_log_lws(1, "lws error");
    sg_log_lws(4, "lws notice");
    sg_log_lws(16, "lws debug");
}

static void at_warn(void)
{
    setenv("SANDGLASS_LOG_LEVEL", "WARN", 1);
    sg_log_init("quiet");
    sg_log(SG_LOG_WARN, "kept");
    sg_log(SG_LOG_INFO, "dropped");
    unsetenv("SANDGLASS_LOG_LEVEL");
}

static void test_lines(void **state)
{
    (void)state;
    char *out = logged(at_info);
    regex_t re;
    assert_int_equal(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+\\+00:00 error tester: broke: 7$",
                             REG_EXTENDED | REG_NEWLINE), 0);
    assert_int_equal(regexec(&re, out, 0, NULL, 0), 0);
    regfree(&re);
    assert_non_null(strstr(out, " warn tester: two\\nlines\n")); /* one line, trailing newline dropped */
    assert_non_null(strstr(out, " info tester: fine\n"));
    assert_null(strstr(out, "hidden"));
    assert_non_null(strstr(out, " error tester: lws: lws error\n"));
    assert_non_null(strstr(out, " info tester: lws: lws notice\n"));
    assert_null(strstr(out, "lws debug"));
    size_t lines = 0;
    for (char *c = out; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 5);
    free(out);
    out = logged(at_warn);
    assert_non_null(strstr(out, " warn quiet: kept\n"));
    assert_null(strstr(out, "dropped"));
    free(out);
}

/* --log-level's parser and its override of the environment's level. */
static void at_flag(void)
{
    setenv("SANDGLASS_LOG_LEVEL", "error", 1);
    sg_log_init("flagged");
    sg_log_set_level(SG_LOG_DEBUG); /* the flag wins */
    sg_log(SG_LOG_DEBUG, "shown");
    sg_log_set_level(SG_LOG_ERROR);
    sg_log(SG_LOG_WARN, "not shown");
    unsetenv("SANDGLASS_LOG_LEVEL");
}

static void test_level_flag(void **state)
{
    (void)state;
    sg_log_level l = SG_LOG_INFO;
    assert_int_equal(sg_log_level_parse("Debug", &l), 0);
    assert_int_equal(l, SG_LOG_DEBUG);
    assert_int_equal(sg_log_level_parse("error", &l), 0);
    assert_int_equal(l, SG_LOG_ERROR);
    assert_int_equal(sg_log_level_parse("loud", &l), -1);
    assert_int_equal(sg_log_level_parse("", &l), -1);
    assert_int_equal(sg_log_level_parse("warning", &l), -1);
    assert_int_equal(sg_log_level_parse(NULL, &l), -1);
    assert_int_equal(l, SG_LOG_ERROR); /* unchanged by a refusal */
    char *out = logged(at_flag);
    assert_non_null(strstr(out, " debug flagged: shown\n"));
    assert_null(strstr(out, "not shown"));
    free(out);
    sg_log_set_level(SG_LOG_INFO);
}

/* A learner's file name in a message: title, erase, a forged line, a bidi
 * override, invalid UTF-8, C1 CSI. */
#define HOSTILE "\x1b]0;owned\x07\x1b[2K\r\n[fake] restored OK\xe2\x80\xae\xff\xc2\x9b"

static void hostile(void)
{
    unsetenv("SANDGLASS_LOG_LEVEL");
    sg_log_init("tester");
    sg_log(SG_LOG_ERROR, "readlink %s: gone\n", HOSTILE);
    sg_print_vis(2, "sandglass rollback: ", "checkpoint diff: readlink %s: gone", HOSTILE);
}

static void test_hostile(void **state)
{
    (void)state;
    char *out = logged(hostile);
    size_t lines = 0;
    for (const unsigned char *c = (const unsigned char *)out; *c; c++) {
        lines += *c == '\n';
        assert_true(*c == '\n' || (*c >= 0x20 && *c < 0x7f)); /* nothing a terminal acts on */
    }
    assert_int_equal(lines, 2); /* each message one line: none forged */
    const char *shown = "\\x1b]0;owned\\x07\\x1b[2K\\r\\n[fake] restored OK\\u202e\\xff\\u009b";
    assert_non_null(strstr(out, shown));
    assert_non_null(strstr(out, "\nsandglass rollback: checkpoint diff: readlink \\x1b]0;"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_level_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

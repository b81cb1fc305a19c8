/* unit/echoline: a command line from a terminal's echo (src/capture/
 * echoline.c), on the kernel's echo of typing, erasing and interrupting,
 * on escape sequences, at the bound, and on every split of its input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "capture/echoline.h"

/* What reading in from a prompt on gives: "LINE:text|rest", "NONE|rest"
 * or "READING" (rest: the bytes not taken, the command's output). */
static void read_in(const char *in, size_t len, size_t cut, char *out, size_t out_size)
{
    sg_echoline e;
    sg_echoline_init(&e);
    sg_echoline_start(&e);
    size_t used = sg_echoline_feed(&e, in, cut);
    if (used == cut && e.state == SG_ECHOLINE_READING)
        used += sg_echoline_feed(&e, in + cut, len - cut);
    assert_true(used <= len);
    size_t n = 0;
    bool truncated = false;
    const char *t = sg_echoline_text(&e, &n, &truncated);
    assert_int_equal(strlen(t), n);
    if (e.state == SG_ECHOLINE_LINE)
        snprintf(out, out_size, "LINE%s:%s|%.*s", truncated ? "(cut)" : "", t, (int)(len - used), in + used);
    else if (e.state == SG_ECHOLINE_NONE)
        snprintf(out, out_size, "NONE|%.*s", (int)(len - used), in + used);
    else
        snprintf(out, out_size, "READING");
}

/* The same at every split into two pieces. */
static void check(const char *in, const char *want)
{
    size_t len = strlen(in);
    char got[8192];
    for (size_t cut = 0; cut <= len; cut++) {
        read_in(in, len, cut, got, sizeof got);
        if (strcmp(got, want) != 0)
            fail_msg("cut %zu of \"%s\": got \"%s\", want \"%s\"", cut, in, got, want);
    }
}

static void test_typed(void **state)
{
    (void)state;
    check("echo hi; false\r\nhi\r\n", "LINE:echo hi; false|hi\r\n");
    check("  ls -l  \r\n", "LINE:ls -l|");
    check("a\tb\r\n", "LINE:a\tb|");
    check("echo caf\xc3\xa9\r\n", "LINE:echo caf\xc3\xa9|");
    check("echo partial", "READING");
    check("x\n", "LINE:x|"); /* no CR (-onlcr) */
}

static void test_erased(void **state)
{
    (void)state;
    /* ECHOE's "\b \b", a bare "\b", ^U's run of them, past the start */
    check("echo nevr\b \ber\r\n", "LINE:echo never|");
    check("lx\bs\r\n", "LINE:ls|");
    check("rm -rf /\b \b\b \b\b \b\b \b\b \b\b \b\b \b\b \b\b \b\b \btrue\r\n", "LINE:true|");
    /* a UTF-8 character is erased whole, as IUTF8 echoes it */
    check("caf\xc3\xa9\b \be\r\n", "LINE:cafe|");
    check("\xe2\x82\xac\b \b\r\n", "NONE|");
}

static void test_no_command(void **state)
{
    (void)state;
    check("\r\n\x1b]133;D;0\x07", "NONE|\x1b]133;D;0\x07");
    check("   \t\r\n", "NONE|");
    check("^C\r\n", "NONE|");
    check("echo never^C\r\nnext", "NONE|next");
    check("ab\b \b\b \b\r\n", "NONE|");
    /* a '^C' in the middle is text */
    check("echo ^C x\r\n", "LINE:echo ^C x|");
}

static void test_escapes(void **state)
{
    (void)state;
    /* CSI (colour, bracketed paste), OSC (BEL and ST), two- and three-byte ESCs, C0 */
    check("\x1b[?2004hls\x1b[0m\r\n", "LINE:ls|");
    check("\x1b]0;title\x07l\x1b]2;t\x1b\\s\r\n", "LINE:ls|");
    check("\x1b" "7l\x1b(Bs\x1b" "8\a\x01\r\n", "LINE:ls|");
    check("\x1bPdcs\x1b\\ls\x7f\r\n", "LINE:ls|");
    /* an OSC broken by a new ESC sequence */
    check("\x1b]0;t\x1b[1ml\x1bYs\r\n", "LINE:ls|");
    /* the newline ends the line even inside an unfinished sequence */
    check("ls\x1b[12\nout", "LINE:ls|out");
    check("ls\x1b]0;never ended\nout", "LINE:ls|out");
}

static void test_bound(void **state)
{
    (void)state;
    static char in[SG_ECHOLINE_MAX * 2 + 64];
    char got[SG_ECHOLINE_MAX * 3];
    memset(in, 'x', SG_ECHOLINE_MAX + 10);
    strcpy(in + SG_ECHOLINE_MAX + 10, "\r\nout");
    read_in(in, strlen(in), 100, got, sizeof got);
    assert_int_equal(strncmp(got, "LINE(cut):xxx", 13), 0);
    assert_int_equal(strlen(got), strlen("LINE(cut):") + SG_ECHOLINE_MAX + strlen("|out"));
    /* erasing past the bound takes back the dropped characters first */
    size_t n = SG_ECHOLINE_MAX + 3;
    memset(in, 'y', n);
    for (int i = 0; i < 5; i++, n += 3)
        memcpy(in + n, "\b \b", 3);
    strcpy(in + n, "\r\n");
    read_in(in, strlen(in), 7, got, sizeof got);
    assert_int_equal(strlen(got), strlen("LINE:") + SG_ECHOLINE_MAX - 2 + strlen("|"));
    assert_int_equal(strncmp(got, "LINE:yyy", 8), 0);
    /* an interrupted line past the bound: its ^C was dropped, still none */
    memset(in, 'w', SG_ECHOLINE_MAX + 1);
    strcpy(in + SG_ECHOLINE_MAX + 1, "^C\r\n");
    read_in(in, strlen(in), 3, got, sizeof got);
    assert_string_equal(got, "NONE|");
    /* a UTF-8 character cut by the bound is not kept half */
    memset(in, 'z', SG_ECHOLINE_MAX - 1);
    strcpy(in + SG_ECHOLINE_MAX - 1, "\xc3\xa9\xc3\xa9\r\n");
    read_in(in, strlen(in), 0, got, sizeof got);
    assert_int_equal(strlen(got), strlen("LINE(cut):") + SG_ECHOLINE_MAX - 1 + strlen("|"));
}

static void test_states(void **state)
{
    (void)state;
    sg_echoline e;
    sg_echoline_init(&e);
    assert_int_equal(sg_echoline_feed(&e, "ls\r\n", 4), 0); /* not started: takes nothing */
    sg_echoline_start(&e);
    assert_int_equal(sg_echoline_feed(&e, "ls\r\nout\r\n", 9), 4);
    assert_int_equal(e.state, SG_ECHOLINE_LINE);
    assert_int_equal(sg_echoline_feed(&e, "out\r\n", 5), 0); /* taken: nothing more */
    sg_echoline_stop(&e);
    assert_int_equal(e.state, SG_ECHOLINE_IDLE);
    size_t n = 1;
    bool cut = true;
    assert_string_equal(sg_echoline_text(&e, &n, &cut), "");
    assert_true(n == 0 && !cut);
    /* a new prompt drops the line being read */
    sg_echoline_start(&e);
    sg_echoline_feed(&e, "half", 4);
    sg_echoline_start(&e);
    sg_echoline_feed(&e, "ls\n", 3);
    assert_string_equal(sg_echoline_text(&e, &n, &cut), "ls");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_typed),   cmocka_unit_test(test_erased), cmocka_unit_test(test_no_command),
        cmocka_unit_test(test_escapes), cmocka_unit_test(test_bound),  cmocka_unit_test(test_states),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

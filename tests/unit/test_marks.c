/* unit/marks: the OSC 133 parser (src/capture/marks.c) on whole streams,
 * on every split of them, and on what is not a mark. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "capture/marks.h"

/* What the parser said, as one string: text as is, marks as <A cwd>,
 * <B>, <C cwd|cmd>, <D status>. */
typedef struct seen {
    char out[4096];
    size_t len;
} seen;

static void put(seen *s, const char *b, size_t n)
{
    assert_true(s->len + n < sizeof s->out);
    memcpy(s->out + s->len, b, n);
    s->len += n;
    s->out[s->len] = '\0';
}

static void on_mark(void *ud, const sg_mark *m)
{
    seen *s = ud;
    char b[256];
    int n = 0;
    assert_true(!m->echo_line || m->kind == SG_MARK_INPUT); /* only B has cmdline=echo */
    switch (m->kind) {
    case SG_MARK_TEXT:
        put(s, m->text, m->text_len);
        return;
    case SG_MARK_PROMPT:
        n = snprintf(b, sizeof b, "<A %.*s>", (int)m->cwd_len, m->cwd ? m->cwd : "");
        break;
    case SG_MARK_INPUT:
        n = snprintf(b, sizeof b, m->echo_line ? "<B echo>" : "<B>");
        break;
    case SG_MARK_COMMAND:
        n = snprintf(b, sizeof b, "<C %.*s|%.*s>", (int)m->cwd_len, m->cwd ? m->cwd : "", (int)m->cmd_len,
                     m->cmd ? m->cmd : "");
        break;
    case SG_MARK_DONE:
        n = snprintf(b, sizeof b, "<D %d>", m->status);
        break;
    }
    put(s, b, (size_t)n);
}

/* Parses in at every split into two pieces (and whole): always want. */
static void check(const char *in, const char *want)
{
    size_t len = strlen(in);
    for (size_t cut = 0; cut <= len; cut++) {
        sg_marks p;
        seen s = {0};
        sg_marks_init(&p);
        sg_marks_feed(&p, in, cut, on_mark, &s);
        sg_marks_feed(&p, in + cut, len - cut, on_mark, &s);
        sg_marks_end(&p, on_mark, &s);
        if (strcmp(s.out, want) != 0)
            fail_msg("cut %zu of \"%s\": got \"%s\", want \"%s\"", cut, in, s.out, want);
    }
    /* byte by byte */
    sg_marks p;
    seen s = {0};
    sg_marks_init(&p);
    for (size_t i = 0; i < len; i++)
        sg_marks_feed(&p, in + i, 1, on_mark, &s);
    sg_marks_end(&p, on_mark, &s);
    assert_string_equal(s.out, want);
}

static void test_shell_session(void **state)
{
    (void)state;
    check("\x1b]133;A;cwd=/workspace\x07$ \x1b]133;B\x07" "echo hi; false\r\n"
          "\x1b]133;C;cwd=/workspace;cmd=echo hi\x07hi\r\n\x1b]133;D;0\x07"
          "\x1b]133;C;cwd=/workspace;cmd=false\x07\x1b]133;D;1\x07\x1b]133;A;cwd=/w\x07",
          "<A /workspace>$ <B>echo hi; false\r\n<C /workspace|echo hi>hi\r\n<D 0><C /workspace|false><D 1><A /w>");
}

static void test_fields(void **state)
{
    (void)state;
    /* cmd takes the rest, ';' included; ST ends a mark as BEL does */
    check("\x1b]133;C;cwd=/a;cmd=a; b; c\x1b\\x", "<C /a|a; b; c>x");
    check("\x1b]133;D\x07\x1b]133;D;130\x07\x1b]133;D;x\x07\x1b]133;D;999\x07\x1b]133;D;1;aid=3\x07",
          "<D -1><D 130><D -1><D -1><D 1>");
    check("\x1b]133;A\x07\x1b]133;C\x07", "<A ><C |>");
    /* sh's prompt end: the command line is the echo; only that exact
     * param on B says so */
    check("$ \x1b]133;B;cmdline=echo\x07ls\r\n", "$ <B echo>ls\r\n");
    check("\x1b]133;B;aid=1;cmdline=echo\x1b\\", "<B echo>");
    check("\x1b]133;B;cmdline=echoes\x07\x1b]133;B;cmdline=\x07\x1b]133;B;cmdline=ECHO\x07", "<B><B><B>");
    check("\x1b]133;A;cmdline=echo\x07\x1b]133;C;cmdline=echo\x07\x1b]133;D;cmdline=echo\x07",
          "<A ><C |><D -1>");
}

static void test_not_marks(void **state)
{
    (void)state;
    /* other OSCs, CSI, unknown letters, a letter with no ';' after it,
     * stray ESCs and an unfinished mark are all text, byte for byte */
    check("\x1b]0;title\x07\x1b[31mred\x1b[0m", "\x1b]0;title\x07\x1b[31mred\x1b[0m");
    check("\x1b]133;Z;x\x07", "\x1b]133;Z;x\x07");
    check("\x1b]133;Ab\x07", "\x1b]133;Ab\x07");
    check("\x1b\x1b]133;B\x07", "\x1b<B>");
    check("\x1b]133;A;cwd=/x\x1bq\x1b]133;B\x07", "\x1b]133;A;cwd=/x\x1bq<B>");
    check("\x1b]133;A;cwd=/x\x1b\x1b]133;B\x07", "\x1b]133;A;cwd=/x\x1b<B>");
    check("abc\x1b]133;C;cmd=unfinished", "abc\x1b]133;C;cmd=unfinished");
}

typedef struct counted {
    size_t bytes;
    int marks;
} counted;

static void on_count(void *ud, const sg_mark *m)
{
    counted *c = ud;
    if (m->kind == SG_MARK_TEXT)
        c->bytes += m->text_len;
    else
        c->marks++;
}

/* A mark past SG_MARKS_OSC_MAX is no mark: every byte comes back as text,
 * and the next mark is parsed again. */
static void test_too_long(void **state)
{
    (void)state;
    static char in[SG_MARKS_OSC_MAX + 64];
    int n = snprintf(in, sizeof in, "\x1b]133;C;cmd=");
    memset(in + n, 'x', SG_MARKS_OSC_MAX);
    size_t len = (size_t)n + SG_MARKS_OSC_MAX;
    memcpy(in + len, "\x07\x1b]133;B\x07", 9);
    len += 9;
    sg_marks p;
    counted c = {0, 0};
    sg_marks_init(&p);
    sg_marks_feed(&p, in, len, on_count, &c);
    sg_marks_end(&p, on_count, &c);
    assert_int_equal(c.bytes, len - 8);
    assert_int_equal(c.marks, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shell_session),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_not_marks),
        cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

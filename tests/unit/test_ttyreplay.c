/* unit/ttyreplay: an attach's replay without the sequences that make a
 * terminal answer (src/supervisor/ttyreplay.c): each query left out, each
 * harmless sequence kept byte for byte, the C1 forms, a replay buffer that
 * starts mid-sequence, and every split of the input into two pieces and
 * into single bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "supervisor/ttyreplay.h"

typedef struct sink {
    char buf[16384];
    size_t len;
} sink;

static void collect(void *ud, const char *b, size_t n)
{
    sink *s = ud;
    assert_true(n > 0);
    assert_true(s->len + n <= sizeof s->buf);
    memcpy(s->buf + s->len, b, n);
    s->len += n;
}

/* The filter's output for in (len bytes), fed in pieces cut at cut, then
 * after every step bytes. */
static void run(const char *in, size_t len, bool mid, size_t cut, size_t step, sink *s)
{
    sg_ttyreplay f;
    memset(s, 0, sizeof *s);
    sg_ttyreplay_init(&f, mid, collect, s);
    for (size_t off = 0; off < len;) {
        size_t n = off < cut ? cut - off : len - off;
        if (step && n > step)
            n = step;
        sg_ttyreplay_feed(&f, in + off, n);
        off += n;
    }
    sg_ttyreplay_end(&f);
}

/* The same output, want, however the input is cut. */
static void check_mid(const char *in, size_t len, const char *want, size_t want_len, bool mid)
{
    sink s;
    for (size_t cut = 0; cut <= len; cut++) {
        run(in, len, mid, cut, 0, &s);
        if (s.len != want_len || memcmp(s.buf, want, want_len) != 0) {
            print_error("in %zu bytes cut at %zu: got %zu bytes \"%.*s\", want \"%.*s\"\n", len, cut, s.len,
                        (int)s.len, s.buf, (int)want_len, want);
            fail();
        }
    }
    run(in, len, mid, 0, 1, &s);
    assert_int_equal(s.len, want_len);
    assert_memory_equal(s.buf, want, want_len);
}

static void check(const char *in, const char *want)
{
    check_mid(in, strlen(in), want, strlen(want), false);
}

/* Each of these makes a terminal answer: it goes, the text around stays. */
static const char *const queries[] = {
    "\x1b[6n", "\x1b[5n", "\x1b[?6n", "\x1b[?15n", "\x1b[?996n",     /* DSR, DECXCPR */
    "\x1b[c", "\x1b[0c", "\x1b[>c", "\x1b[>0c", "\x1b[=c",          /* DA1, DA2, DA3 */
    "\x1b[x", "\x1b[1x", "\x1b[+x",                                  /* DECREQTPARM, DECRQPKFM */
    "\x1b[14t", "\x1b[18t", "\x1b[19t", "\x1b[21t", "\x1b[16t", "\x1b[11t", "\x1b[8;30;100t",
    "\x1b[>q", "\x1b[>0q",                                           /* XTVERSION */
    "\x1b[?2026$p", "\x1b[4$p",                                      /* DECRQM */
    "\x1b[?u", "\x1b[1$u", "\x1b[&u",                                /* kitty keyboard, DECRQTSR, DECRQUPSS */
    "\x1b[?4m", "\x1b[?1;2S",                                        /* XTQMODKEYS, XTSMGRAPHICS */
    "\x1b[1$w", "\x1b[1;1;1;1;1;1*y", "\x1b[1;1;2;2#|", "\x1b[\"v",  /* DECRQPSR, DECRQCRA, XTREPORTSGR, DECRQDE */
    "\x1bZ",                                                         /* DECID */
    "\x1bP$qm\x1b\\", "\x1bP$q\"p\x1b\\", "\x1bP$qr\x1b\\",          /* DECRQSS */
    "\x1bP+q544e\x1b\\", "\x1bP+q436f;524742\x1b\\",                 /* XTGETTCAP */
    "\x1bP=1s\x1b\\",                                                /* any other DCS */
    "\x1b]10;?\x07", "\x1b]11;?\x1b\\", "\x1b]12;?\x07", "\x1b]4;1;?\x07", "\x1b]4;0;?;15;?\x1b\\",
    "\x1b]17;?\x07", "\x1b]5;0;?\x07", "\x1b]21;foreground=?\x07", "\x1b]22;?__current__\x07",
    "\x1b]52;c;?\x07", "\x1b]52;c;aGVsbG8=\x07",                     /* the clipboard, asked or set */
    "\x1b]1337;ReportCellSize\x07", "\x1b]5522;type=read\x07",
    "\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\",                    /* kitty graphics: an APC */
    "\x1b^pm\x1b\\", "\x1bXsos\x1b\\",
    "\xc2\x9b" "6n", "\x9b" "6n", "\xc2\x9b>c", "\x9b" "c",          /* C1 forms */
    "\xc2\x9d" "11;?\xc2\x9c", "\x9d" "11;?\x9c", "\xc2\x90$qm\xc2\x9c", "\x90+q544e\x9c", "\xc2\x9a",
};

static void test_queries_go(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof queries / sizeof *queries; i++) {
        char in[256];
        snprintf(in, sizeof in, "ab%scd", queries[i]);
        check(in, "abcd");
    }
}

/* Each of these asks nothing: it stays as it came. */
static const char *const harmless[] = {
    "\x1b[1;31m", "\x1b[0m", "\x1b[38;2;1;2;3m", "\x1b[10;20H", "\x1b[2J", "\x1b[K", "\x1b[?1049h",
    "\x1b[?1049l", "\x1b[?2004h", "\x1b[?25l", "\x1b[?1004h", "\x1b[?1000h", "\x1b[2 q", "\x1b[>4;2m",
    "\x1b[>1u", "\x1b[<u", "\x1b[22;0;0t", "\x1b[23t", "\x1b[>0;1t", "\x1b[3 t", "\x1b[1*x", "\x1b[!p", "\x1b[61;1\"p",
    "\x1b[1;24r", "\x1b[4h", "\x1b[3g",
    "\x1b(B", "\x1b)0", "\x1b#8", "\x1b" "7", "\x1b" "8", "\x1b=", "\x1b>", "\x1b" "c", "\x1bM", "\x1b\\",
    "\x1b]0;a title?\x07", "\x1b]2;vim - notes.txt\x1b\\", "\x1b]7;file://host/workspace\x07",
    "\x1b]8;;https://example.org/?q=1\x1b\\link\x1b]8;;\x1b\\", "\x1b]133;A;cwd=/workspace\x07",
    "\x1b]133;D;0\x07", "\x1b]4;1;rgb:ff/00/00\x07", "\x1b]104\x07", "\x1b]112\x07",
    "\x1bPq#0;2;0;0;0#0~~@@vv@@~~@@~~$-\x1b\\",                       /* sixel */
    "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x9c\x93",         /* UTF-8 with 80..9F continuations */
    "\r\n\t\b\x07", "\xc2\xa0", "\xc2" "a",
};

static void test_harmless_stays(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof harmless / sizeof *harmless; i++) {
        char in[256];
        snprintf(in, sizeof in, "ab%scd", harmless[i]);
        check(in, in);
    }
}

static void test_a_session(void **state)
{
    (void)state;
    /* vim's start as it came to a terminal, then the shell's prompt */
    check("\x1b[?1049h\x1b[22;0;0t\x1b[>4;2m\x1b[?1h\x1b=\x1b[?2004h\x1b[1;30r\x1b[?12h\x1b[?12l\x1b[22;2t"
          "\x1b[22;1t\x1b[27m\x1b[23m\x1b[29m\x1b[m\x1b[H\x1b[2J\x1b[?25l\x1b[30;1H\"notes.txt\" [New]"
          "\x1b[2;1H\x1b[94m~  \x1b[m\x1b[?2004l\x1b[>4;m\x1bP+q436f\x1b\\\x1bP+q6b75\x1b\\\x1b[?u\x1b[c"
          "\x1b[>c\x1b]10;?\x07\x1b]11;?\x07\x1b[?25h\x1b[?1049l\x1b[23;0;0t\x1b[6n"
          "\x1b]133;A;cwd=/workspace\x07$ \x1b]133;B\x07",
          "\x1b[?1049h\x1b[22;0;0t\x1b[>4;2m\x1b[?1h\x1b=\x1b[?2004h\x1b[1;30r\x1b[?12h\x1b[?12l\x1b[22;2t"
          "\x1b[22;1t\x1b[27m\x1b[23m\x1b[29m\x1b[m\x1b[H\x1b[2J\x1b[?25l\x1b[30;1H\"notes.txt\" [New]"
          "\x1b[2;1H\x1b[94m~  \x1b[m\x1b[?2004l\x1b[>4;m"
          "\x1b[?25h\x1b[?1049l\x1b[23;0;0t"
          "\x1b]133;A;cwd=/workspace\x07$ \x1b]133;B\x07");
}

static void test_strings_and_aborts(void **state)
{
    (void)state;
    /* a string ended by another sequence: closed with ST for the terminal */
    check("\x1b]0;t\x1b[6nX", "\x1b]0;t\x1b\\X");
    check("\x1b]0;t\x1b[1mX", "\x1b]0;t\x1b\\\x1b[1mX");
    check("\x1b]11;?\x1b[1mX", "\x1b[1mX");
    check("\x1bPq#0~\x1b[6nX", "\x1bPq#0~\x1b\\X");
    /* tmux's passthrough (it may wrap any query): the DCS goes; a terminal
     * ends it at the doubled ESC too, and then sees a DSR (gone) and ST */
    check("a\x1bPtmux;\x1b\x1b[6n\x1b\\b", "a\x1b\\b");
    check("\x1b]0;t\xc2\x9b" "6nX", "\x1b]0;t\x1b\\X");
    /* two UTF-8 C1 controls in a row: each is passed as it came */
    check("\x1b]0;t\xc2\x9c\xc2\x8eX", "\x1b]0;t\xc2\x9c\xc2\x8eX");
    /* CAN and SUB abort a sequence; a C0 control inside one is executed */
    check("\x1b[6\x18n", "\x18n");
    check("\x1b[\r6n", "\r");
    check("\x1b[1\r;2H", "\r\x1b[1;2H");
    check("\x1b]11;\x1a?\x07", "\x1a?\x07");
    /* ESC restarts, a text byte ends a sequence */
    check("\x1b[6\x1b[6nX", "X");
    check("\x1b[6\xc3\xa9n", "\xc3\xa9n");
    /* a sequence cut off at the end is left out */
    check("ab\x1b[6", "ab");
    check("ab\x1b]11;", "ab");
    check("ab\x1b", "ab");
    check("ab\xc2", "ab\xc2");
    /* too long: a CSI goes, an OSC is judged by its number */
    char in[SG_TTYREPLAY_HOLD * 2 + 64], want[sizeof in];
    size_t n = (size_t)snprintf(in, sizeof in, "\x1b[");
    memset(in + n, '1', SG_TTYREPLAY_CSI_MAX);
    n += SG_TTYREPLAY_CSI_MAX;
    n += (size_t)snprintf(in + n, sizeof in - n, "mX");
    check_mid(in, n, "X", 1, false);
    n = (size_t)snprintf(in, sizeof in, "\x1b]2;");
    memset(in + n, 't', SG_TTYREPLAY_HOLD + 10);
    n += SG_TTYREPLAY_HOLD + 10;
    n += (size_t)snprintf(in + n, sizeof in - n, "\x07X");
    check_mid(in, n, in, n, false);
    memcpy(want, in, n);
    in[3] = '4'; /* OSC 4, colours: a long one may hold a query */
    check_mid(in, n, "X", 1, false);
}

static void test_mid_stream(void **state)
{
    (void)state;
    const char *a = "6n\x1b[31mX";
    check_mid(a, strlen(a), "\x1b[31mX", 6, true);
    a = "11;?\x07 text\nrest\x1b[6n.";
    check_mid(a, strlen(a), "rest.", 5, true);
    a = "$qm\x1b\\after";
    check_mid(a, strlen(a), "\x1b\\after", 7, true);
    a = "\x1b[6nA";
    check_mid(a, strlen(a), "A", 1, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queries_go),
        cmocka_unit_test(test_harmless_stays),
        cmocka_unit_test(test_a_session),
        cmocka_unit_test(test_strings_and_aborts),
        cmocka_unit_test(test_mid_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

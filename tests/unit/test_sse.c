/* sse: Server-Sent Events framing (wire/sse.h): the encoder's exact bytes
 * (those the ingest wrote before it), and the decoder fed in every cut. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "wire/sse.h"

static void encodes(const sg_sse_frame *f, const char *want)
{
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_sse_encode(&b, f), 0);
    assert_string_equal(b.data, want);
}

static void test_encode(void **state)
{
    (void)state;
    /* the ingest's messages, byte for byte as before wire/sse */
    encodes(&(sg_sse_frame){.retry = -1, .id = "42", .data = "{\"a\":1}", .data_len = 7},
            "id: 42\ndata: {\"a\":1}\n\n");
    encodes(&(sg_sse_frame){.retry = -1, .event = "live", .data = "{\"after\":3}", .data_len = 11},
            "event: live\ndata: {\"after\":3}\n\n");
    encodes(&(sg_sse_frame){.retry = -1, .comment = "ping"}, ": ping\n\n");
    encodes(&(sg_sse_frame){.retry = 1000, .comment = "sandglass stream after 7"},
            "retry: 1000\n: sandglass stream after 7\n\n");
    /* data's line breaks (LF, CRLF, CR) make data lines; empty lines kept */
    encodes(&(sg_sse_frame){.retry = -1, .data = "a\nb\r\nc\rd\n", .data_len = 9},
            "data: a\ndata: b\ndata: c\ndata: d\ndata: \n\n");
    encodes(&(sg_sse_frame){.retry = -1, .data = "", .data_len = 0}, "data: \n\n");
    encodes(&(sg_sse_frame){.retry = -1, .comment = "x\ny"}, ": x\n: y\n\n");
    /* an id or event name cannot hold a line break; b is left as it was */
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_buf_puts(&b, "kept"), 0);
    errno = 0;
    assert_int_equal(sg_sse_encode(&b, &(sg_sse_frame){.retry = -1, .id = "1\n2"}), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(sg_sse_encode(&b, &(sg_sse_frame){.retry = -1, .event = "a\rb"}), -1);
    assert_string_equal(b.data, "kept");
}

/* Decodes s cut every `cut` bytes: the frames, one per line of out as
 * "retry|comment|id|event|data" (- for a field not there). */
static void decodes(const char *s, size_t cut, const char *want)
{
    sg_sse_decoder d;
    sg_sse_decoder_init(&d, 1024, 4096);
    sg_autobuf sg_buf got = {0};
    size_t len = strlen(s), at = 0;
    while (at < len) {
        size_t n = len - at < cut ? len - at : cut;
        const char *p = s + at;
        at += n;
        while (n > 0) {
            sg_sse_frame f;
            size_t used = 0;
            sg_err err = {0};
            int r = sg_sse_decode(&d, p, n, &used, &f, &err);
            assert_int_not_equal(r, -1);
            assert_true(used <= n);
            p += used;
            n -= used;
            if (r == 0) {
                assert_int_equal(n, 0);
                continue;
            }
            assert_int_equal(f.data ? strlen(f.data) : 0, f.data_len);
            char retry[24] = "-";
            if (f.retry >= 0)
                snprintf(retry, sizeof retry, "%lld", f.retry);
            assert_int_equal(sg_buf_printf(&got, "%s|%s|%s|%s|%s\n", retry, f.comment ? f.comment : "-",
                                           f.id ? f.id : "-", f.event ? f.event : "-", f.data ? f.data : "-"),
                             0);
        }
    }
    assert_string_equal(got.data ? got.data : "", want);
    sg_sse_decoder_free(&d);
}

static void test_decode(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"id: 42\ndata: {\"a\":1}\n\n", "-|-|42|-|{\"a\":1}\n"},
        /* several data lines join with '\n'; CRLF and CR end lines as LF does */
        {"data: a\r\ndata: b\rdata:c\n\r\n", "-|-|-|-|a\nb\nc\n"},
        {"retry: 1000\n: sandglass stream after 7\n\n", "1000|sandglass stream after 7|-|-|-\n"},
        {": ping\n\n: x\n:y\n\n", "-|ping|-|-|-\n-|x\ny|-|-|-\n"},
        {"event: live\ndata: {\"after\":3}\n\nevent: overflow\ndata: x\n\n",
         "-|-|-|live|{\"after\":3}\n-|-|-|overflow|x\n"},
        /* a UTF-8 BOM opening the stream is skipped */
        {"\xEF\xBB\xBFid: 1\n\n", "-|-|1|-|-\n"},
        /* blank lines ending nothing, unknown fields, a bad retry: no frame */
        {"\n\n\r\nfoo: bar\n\nretry: 1x\n\n", ""},
        /* a field without a colon has an empty value; one space only is dropped */
        {"data\nid:  7\nevent\n\n", "-|-| 7||\n"},
        /* the last id and event of a frame win; an unended frame is not handed out */
        {"id: 1\nid: 2\nevent: a\nevent: b\ndata: d\n\ndata: half", "-|-|2|b|d\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t cut = 1; cut <= strlen(cases[i].in) + 1; cut++)
            decodes(cases[i].in, cut, cases[i].want);
}

static void test_bounds(void **state)
{
    (void)state;
    sg_sse_decoder d;
    sg_sse_frame f;
    size_t used;
    sg_err err = {0};
    /* a line over line_max, even cut in pieces */
    sg_sse_decoder_init(&d, 8, 64);
    assert_int_equal(sg_sse_decode(&d, "data: 12", 8, &used, &f, &err), 0);
    assert_int_equal(sg_sse_decode(&d, "3\n\n", 3, &used, &f, &err), -1);
    assert_int_equal(err.code, EMSGSIZE);
    assert_non_null(strstr(err.msg, "SSE line is over 8 bytes"));
    /* and the decoder stays failed */
    assert_int_equal(sg_sse_decode(&d, "\n", 1, &used, &f, &err), -1);
    sg_sse_decoder_free(&d);
    /* a frame over frame_max, each line within line_max */
    sg_sse_decoder_init(&d, 16, 20);
    const char *s = "data: 0123456789\ndata: 0123456789\n\n";
    assert_int_equal(sg_sse_decode(&d, s, strlen(s), &used, &f, &err), -1);
    assert_non_null(strstr(err.msg, "SSE frame is over 20 bytes"));
    sg_sse_decoder_free(&d);
    /* at the bounds exactly: taken */
    sg_sse_decoder_init(&d, 16, 22);
    assert_int_equal(sg_sse_decode(&d, s, strlen(s), &used, &f, &err), 1);
    assert_int_equal(f.data_len, 21);
    assert_int_equal(used, strlen(s));
    sg_sse_decoder_free(&d);
}

/* encode -> decode gives the frame back (data's line breaks as '\n'). */
static void test_round_trip(void **state)
{
    (void)state;
    sg_sse_frame in = {.retry = 5, .comment = "c1\nc2", .id = "9", .event = "e", .data = "x\r\ny\n", .data_len = 5};
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_sse_encode(&b, &in), 0);
    sg_sse_decoder d;
    sg_sse_decoder_init(&d, 64, 256);
    sg_sse_frame f;
    size_t used;
    sg_err err = {0};
    assert_int_equal(sg_sse_decode(&d, b.data, b.len, &used, &f, &err), 1);
    assert_int_equal(used, b.len);
    assert_int_equal(f.retry, 5);
    assert_string_equal(f.comment, "c1\nc2");
    assert_string_equal(f.id, "9");
    assert_string_equal(f.event, "e");
    assert_int_equal(f.data_len, 4);
    assert_memory_equal(f.data, "x\ny\n", 4);
    sg_sse_decoder_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

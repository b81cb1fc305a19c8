/* test_framescan: the ingest's frame scanner gives sg_event_validate's
 * verdict on every frame (close code; on acceptance seq, kind, ts and the
 * payload), takes the fast path on ordinary frames and the fallback only on
 * the rare constructs framescan.h lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "ingest/framescan.h"
#include "wire/event.h"

#define TS "2026-11-29T17:00:00.123456+00:00"
#define GOOD "{\"seq\":3,\"kind\":\"command\",\"payload\":{\"cmd\":\"ls\"},\"ts\":\"" TS "\"}"

/* Runs both checks on buf; fails the test if they disagree. Returns the
 * scanner's result; *fell tells whether it took the fallback. */
static int agree(const char *buf, size_t len, const char *sb, bool *fell)
{
    sg_err e1 = {0}, e2 = {0};
    sg_frame_view v;
    sg_event ev;
    int r1 = sg_frame_scan(buf, len, sb, &v, &e1);
    int r2 = sg_event_validate(buf, len, sb, &ev, &e2);
    if (r1 != r2)
        fail_msg("disagree on %.*s: scan %d (%s), validate %d (%s)", (int)(len < 300 ? len : 300),
                 buf, r1, e1.msg, r2, e2.msg);
    if (r1 < 0 && !strstr(e1.msg, "invalid JSON") && strcmp(e1.msg, e2.msg) != 0)
        fail_msg("schema message differs on %.*s: '%s' vs '%s'", (int)len, buf, e1.msg, e2.msg);
    if (fell)
        *fell = v.fallback;
    if (r1 == 0) {
        assert_int_equal(v.seq, ev.seq);
        assert_int_equal(v.kind, ev.kind);
        assert_int_equal(v.ts_len, strlen(ev.ts));
        assert_memory_equal(v.ts, ev.ts, v.ts_len);
        json_t *p = json_loadb(v.payload, v.payload_len, JSON_REJECT_DUPLICATES, NULL);
        if (!p || !json_equal(p, ev.payload))
            fail_msg("payload differs on %.*s: %.*s", (int)len, buf, (int)v.payload_len, v.payload);
        json_decref(p);
    } else {
        assert_null(v.root);
        assert_null(v.dump);
    }
    sg_frame_view_clear(&v);
    sg_event_clear(&ev);
    return r1;
}

static int agree_s(const char *s, const char *sb, bool *fell)
{
    return agree(s, strlen(s), sb, fell);
}

static void test_accept(void **state)
{
    (void)state;
    sg_err err = {0};
    sg_frame_view v;
    assert_int_equal(sg_frame_scan(GOOD, strlen(GOOD), "sb1", &v, &err), 0);
    assert_false(v.fallback);
    assert_null(v.root);
    assert_int_equal(v.seq, 3);
    assert_int_equal(v.kind, SG_EV_COMMAND);
    assert_int_equal(v.ts_len, strlen(TS));
    assert_memory_equal(v.ts, TS, v.ts_len);
    const char *want = "{\"cmd\":\"ls\"}";
    assert_int_equal(v.payload_len, strlen(want));
    assert_memory_equal(v.payload, want, v.payload_len);
    assert_ptr_equal(v.payload, strstr(GOOD, want)); /* borrowed, not copied */
    sg_frame_view_clear(&v);

    /* whitespace everywhere, any key order, sandbox_id, seq 0 and -0,
     * every kind, the largest seq, nested payloads with every JSON type */
    static const char *const ok[] = {
        " \t\r\n{ \"payload\" : { } , \"ts\" : \"t\" , \"kind\" : \"stdin\" , \"seq\" : 0 } \n",
        "{\"seq\":0,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"sb1\"}",
        "{\"seq\":-0,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"\"}",
        "{\"seq\":9223372036854775807,\"kind\":\"sandbox\",\"payload\":{},\"ts\":\"t\"}",
        "{\"seq\":1,\"kind\":\"run_result\",\"payload\":{\"cmd\":\"x\",\"exit_code\":-1,"
        "\"duration_s\":0.25,\"timed_out\":false,\"n\":null,\"t\":true,\"big\":9.9e307,"
        "\"neg\":-9223372036854775808,\"tiny\":1e-400,\"z\":0e999999999999999999,"
        "\"a\":[[],[{}],[1,\"2\",[3.5E+2,-0.0e-0]]]},\"ts\":\"t\"}",
        "{\"seq\":2,\"kind\":\"stdout\",\"payload\":{\"data\":\"tab\\tnl\\nq\\\"bs\\\\sl\\/"
        "\\b\\f\\r \\u00e9 \\u20AC \\ud83d\\ude00 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x7f\"},"
        "\"ts\":\"t\"}",
        ("{\"seq\":5,\"kind\":\"file_diff\",\"payload\":{\"a\":{\"a\":{\"a\":1}},\"b\":{\"a\":2}},"
         "\"ts\":\"t\"}"),
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(ok); i++) {
        bool fell = true;
        if (agree_s(ok[i], "sb1", &fell) != 0)
            fail_msg("case %zu refused: %s", i, ok[i]);
        if (fell)
            fail_msg("case %zu took the fallback: %s", i, ok[i]);
    }
    for (int k = 0; k < SG_EV__COUNT; k++) {
        char f[256];
        snprintf(f, sizeof f, "{\"seq\":%d,\"kind\":\"%s\",\"payload\":{},\"ts\":\"t\"}", k,
                 sg_event_kind_name(k));
        assert_int_equal(sg_frame_scan(f, strlen(f), NULL, &v, &err), 0);
        assert_int_equal(v.kind, k);
        assert_int_equal(v.seq, k);
        sg_frame_view_clear(&v);
    }
}

typedef struct refusal {
    const char *frame;
    int code;
    const char *msg; /* substring of the scanner's error */
} refusal;

#define F(payload) "{\"seq\":1,\"kind\":\"stdin\",\"payload\":" payload ",\"ts\":\"t\"}"

static const refusal refusals[] = {
    /* not JSON, or not the JSON jansson accepts */
    {"", SG_CLOSE_BAD_DATA, "invalid JSON at byte 0"},
    {"   ", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {"\"str\"", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {"1", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {"null", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {"[1]", SG_CLOSE_BAD_DATA, "frame is not a JSON object"},
    {"[1,]", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {"{\"seq\":1,", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {"{\"seq\":1}}", SG_CLOSE_BAD_DATA, "end of input expected"},
    {F("{}") " {}", SG_CLOSE_BAD_DATA, "end of input expected"},
    {F("{}") "x", SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{,}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":1,}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\" 1}"), SG_CLOSE_BAD_DATA, "':' expected"},
    {F("{\"a\":1 \"b\":2}"), SG_CLOSE_BAD_DATA, "',' or '}' expected"},
    {F("{\"a\":[1 2]}"), SG_CLOSE_BAD_DATA, "',' or ']' expected"},
    {F("{'a':1}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{a:1}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":tru}"), SG_CLOSE_BAD_DATA, "invalid literal"},
    {F("{\"a\":True}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":nulll}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":NaN}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":Infinity}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":\"unterminated}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    /* numbers */
    {F("{\"a\":01}"), SG_CLOSE_BAD_DATA, "leading zero"},
    {F("{\"a\":-01}"), SG_CLOSE_BAD_DATA, "leading zero"},
    {F("{\"a\":+1}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":.5}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":1.}"), SG_CLOSE_BAD_DATA, "digit expected after '.'"},
    {F("{\"a\":1.e5}"), SG_CLOSE_BAD_DATA, "digit expected after '.'"},
    {F("{\"a\":1e}"), SG_CLOSE_BAD_DATA, "digit expected in exponent"},
    {F("{\"a\":1e+}"), SG_CLOSE_BAD_DATA, "digit expected in exponent"},
    {F("{\"a\":-}"), SG_CLOSE_BAD_DATA, "invalid number"},
    {F("{\"a\":-a}"), SG_CLOSE_BAD_DATA, "invalid number"},
    {F("{\"a\":0x10}"), SG_CLOSE_BAD_DATA, "invalid JSON"},
    {F("{\"a\":9223372036854775808}"), SG_CLOSE_BAD_DATA, "int64"},
    {F("{\"a\":-9223372036854775809}"), SG_CLOSE_BAD_DATA, "int64"},
    {F("{\"a\":100000000000000000000}"), SG_CLOSE_BAD_DATA, "int64"},
    {F("{\"a\":1e309}"), SG_CLOSE_BAD_DATA, "real number overflow"},
    {F("{\"a\":-1e400}"), SG_CLOSE_BAD_DATA, "real number overflow"},
    {F("{\"a\":123.4e307}"), SG_CLOSE_BAD_DATA, "real number overflow"},
    {F("{\"a\":0.00001e314}"), SG_CLOSE_BAD_DATA, "real number overflow"},
    {F("{\"a\":1e99999999999999999999999}"), SG_CLOSE_BAD_DATA, "real number overflow"},
    /* strings */
    {F("{\"a\":\"\x01\"}"), SG_CLOSE_BAD_DATA, "control character"},
    {F("{\"a\":\"\x1f\"}"), SG_CLOSE_BAD_DATA, "control character"},
    {F("{\"a\":\"line\nbreak\"}"), SG_CLOSE_BAD_DATA, "control character"},
    {F("{\"a\":\"\t\"}"), SG_CLOSE_BAD_DATA, "control character"},
    {F("{\"a\":\"\\u0000\"}"), SG_CLOSE_BAD_DATA, "\\u0000"},
    {F("{\"a\":\"\\x41\"}"), SG_CLOSE_BAD_DATA, "invalid escape"},
    {F("{\"a\":\"\\U0041\"}"), SG_CLOSE_BAD_DATA, "invalid escape"},
    {F("{\"a\":\"\\u12G4\"}"), SG_CLOSE_BAD_DATA, "invalid \\u escape"},
    {F("{\"a\":\"\\u12\"}"), SG_CLOSE_BAD_DATA, "invalid"},
    {F("{\"a\":\"\\ud800\"}"), SG_CLOSE_BAD_DATA, "high surrogate"},
    {F("{\"a\":\"\\ud800x\"}"), SG_CLOSE_BAD_DATA, "high surrogate"},
    {F("{\"a\":\"\\ud800\\n\"}"), SG_CLOSE_BAD_DATA, "high surrogate"},
    {F("{\"a\":\"\\ud800\\ud800\"}"), SG_CLOSE_BAD_DATA, "high surrogate"},
    {F("{\"a\":\"\\ud800\\u0041\"}"), SG_CLOSE_BAD_DATA, "high surrogate"},
    {F("{\"a\":\"\\ud800\\uzzzz\"}"), SG_CLOSE_BAD_DATA, "invalid \\u escape"},
    {F("{\"a\":\"\\udc00\"}"), SG_CLOSE_BAD_DATA, "low surrogate"},
    {F("{\"a\":\"\\udfff\\ud800\"}"), SG_CLOSE_BAD_DATA, "low surrogate"},
    /* UTF-8 */
    {F("{\"a\":\"\xff\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\x80\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xc0\xaf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},       /* overlong '/' */
    {F("{\"a\":\"\xc1\xbf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xe0\x80\xaf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},   /* overlong */
    {F("{\"a\":\"\xe0\x9f\xbf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xf0\x80\x80\xaf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xf0\x8f\xbf\xbf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xed\xa0\x80\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},   /* U+D800 */
    {F("{\"a\":\"\xed\xbf\xbf\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},   /* U+DFFF */
    {F("{\"a\":\"\xf4\x90\x80\x80\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"}, /* > U+10FFFF */
    {F("{\"a\":\"\xf5\x80\x80\x80\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xc3\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},           /* truncated */
    {F("{\"a\":\"\xe2\x82\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"\xc3\xc3\"}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},
    {F("{\"a\":\"x\"\xc3\xa9}"), SG_CLOSE_BAD_DATA, "invalid JSON"},       /* outside a string */
    {F("{\"\xff\":1}"), SG_CLOSE_BAD_DATA, "invalid UTF-8"},               /* in a key */
    /* duplicate keys at any depth (also when the JSON schema is fine) */
    {"{\"seq\":1,\"seq\":2,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
     "duplicate object key"},
    {F("{\"a\":1,\"b\":2,\"a\":3}"), SG_CLOSE_BAD_DATA, "duplicate object key"},
    {F("{\"x\":[{\"k\":1,\"k\":1}]}"), SG_CLOSE_BAD_DATA, "duplicate object key"},
    {F("{\"x\":{\"y\":{\"z\":{\"\":1,\"\":2}}}}"), SG_CLOSE_BAD_DATA, "duplicate object key"},
    /* a duplicate beats identity spoofing: the JSON itself is invalid */
    {"{\"learner_id\":1,\"learner_id\":1,\"seq\":1}", SG_CLOSE_BAD_DATA, "duplicate"},
    /* identity spoofing beats every schema error */
    {"{\"learner_id\":\"a\"}", SG_CLOSE_POLICY, "learner_id"},
    {"{\"x\":1,\"task_id\":null,\"seq\":-5}", SG_CLOSE_POLICY, "task_id"},
    {"{\"task_id\":1,\"learner_id\":2}", SG_CLOSE_POLICY, "learner_id"},
    {"{\"kind\":7,\"sandbox_id\":5}", SG_CLOSE_POLICY, "sandbox_id is not a string"},
    {"{\"sandbox_id\":\"other\",\"zzz\":1}", SG_CLOSE_POLICY,
     "frame sandbox_id differs from the token's sandbox: other"},
    {"{\"sandbox_id\":\"sb10\",\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}",
     SG_CLOSE_POLICY, "differs"},
    {"{\"sandbox_id\":\"sb\",\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}",
     SG_CLOSE_POLICY, "differs"},
    /* schema, in event.c's order */
    {"{}", SG_CLOSE_BAD_DATA, "frame has no kind"},
    {"{\"x\":1,\"kind\":5}", SG_CLOSE_BAD_DATA, "unknown top-level key: x"},
    {"{\"kind\":5,\"x\":1,\"y\":2}", SG_CLOSE_BAD_DATA, "unknown top-level key: x"},
    {"{\"seq\":-1,\"kind\":5}", SG_CLOSE_BAD_DATA, "kind is not a string"},
    {"{\"seq\":-1,\"kind\":\"nope\"}", SG_CLOSE_BAD_DATA, "unknown kind: nope"},
    {"{\"seq\":-1,\"kind\":\"Stdin\"}", SG_CLOSE_BAD_DATA, "unknown kind: Stdin"},
    {"{\"seq\":-1,\"kind\":\"stdi\"}", SG_CLOSE_BAD_DATA, "unknown kind: stdi"},
    {"{\"seq\":-1,\"kind\":\"stdinn\"}", SG_CLOSE_BAD_DATA, "unknown kind: stdinn"},
    {"{\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA, "frame has no seq"},
    {"{\"seq\":-1,\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "seq is not a non-negative integer"},
    {"{\"seq\":-9223372036854775808,\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":1.0,\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":1e2,\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":\"1\",\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":true,\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":null,\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":[1],\"kind\":\"stdin\"}", SG_CLOSE_BAD_DATA, "non-negative"},
    {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{}}", SG_CLOSE_BAD_DATA, "frame has no ts"},
    {"{\"seq\":1,\"kind\":\"stdin\",\"ts\":7}", SG_CLOSE_BAD_DATA, "ts is not a string"},
    {"{\"seq\":1,\"kind\":\"stdin\",\"ts\":null}", SG_CLOSE_BAD_DATA, "ts is not a string"},
    {"{\"seq\":1,\"kind\":\"stdin\",\"ts\":\"t\"}", SG_CLOSE_BAD_DATA, "frame has no payload"},
    {F("[]"), SG_CLOSE_BAD_DATA, "payload is not an object"},
    {F("null"), SG_CLOSE_BAD_DATA, "payload is not an object"},
    {F("\"{}\""), SG_CLOSE_BAD_DATA, "payload is not an object"},
    {F("1"), SG_CLOSE_BAD_DATA, "payload is not an object"},
};

static void test_refusals(void **state)
{
    (void)state;
    for (size_t i = 0; i < SG_ARRAY_LEN(refusals); i++) {
        const refusal *c = &refusals[i];
        sg_err err = {0};
        sg_frame_view v;
        int r = sg_frame_scan(c->frame, strlen(c->frame), "sb1", &v, &err);
        if (r != -c->code || !strstr(err.msg, c->msg))
            fail_msg("case %zu (%s): got %d '%s', want %d '%s'", i, c->frame, r, err.msg,
                     -c->code, c->msg);
        assert_null(v.root);
        agree_s(c->frame, "sb1", NULL);
    }
    /* no expected sandbox: any sandbox_id in a frame is a spoof */
    const char *sb = "{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"a\"}";
    assert_int_equal(agree_s(sb, NULL, NULL), -SG_CLOSE_POLICY);
    assert_int_equal(agree_s(sb, "a", NULL), 0);
    /* the length counts, not a NUL: a trailing NUL, and one in a string */
    const char nul[] = F("{}") "\0";
    assert_int_equal(agree(nul, sizeof nul - 1, "sb1", NULL), -SG_CLOSE_BAD_DATA);
    const char nul2[] = F("{\"a\":\"x\0y\"}");
    assert_int_equal(agree(nul2, sizeof nul2 - 1, "sb1", NULL), -SG_CLOSE_BAD_DATA);
    /* the byte offset of a JSON error */
    sg_err err = {0};
    sg_frame_view v;
    const char *at = F("{\"a\":\"\\q\"}");
    assert_int_equal(sg_frame_scan(at, strlen(at), NULL, &v, &err), -SG_CLOSE_BAD_DATA);
    char want[64];
    snprintf(want, sizeof want, "at byte %zu:", (size_t)(strstr(at, "\\q") - at));
    assert_non_null(strstr(err.msg, want));
}

static void test_too_big(void **state)
{
    (void)state;
    size_t n = SG_FRAME_MAX + 1; /* GOOD, then spaces up to n bytes */
    sg_autofree char *buf = malloc(n + 1);
    assert_non_null(buf);
    snprintf(buf, n + 1, "%-*s", (int)n, GOOD);
    sg_err err = {0};
    sg_frame_view v;
    assert_int_equal(sg_frame_scan(buf, n, "sb1", &v, &err), -SG_CLOSE_TOO_BIG);
    assert_non_null(strstr(err.msg, "exceeds"));
    assert_int_equal(agree(buf, n, "sb1", NULL), -SG_CLOSE_TOO_BIG);
    assert_int_equal(agree(buf, n - 1, "sb1", NULL), 0);
    /* too big wins over invalid JSON */
    buf[0] = 'x';
    assert_int_equal(agree(buf, n, "sb1", NULL), -SG_CLOSE_TOO_BIG);
    /* a big valid payload at the limit, on the fast path */
    const char *head = "{\"seq\":1,\"kind\":\"stdout\",\"ts\":\"t\",\"payload\":{\"data\":\"";
    const char *tail = "\"}}";
    size_t h = strlen(head), t = strlen(tail);
    memcpy(buf, head, h);
    for (size_t i = h; i < SG_FRAME_MAX - t; i++)
        buf[i] = (char)('a' + i % 26);
    memcpy(buf + SG_FRAME_MAX - t, tail, t);
    bool fell = true;
    assert_int_equal(agree(buf, SG_FRAME_MAX, "sb1", &fell), 0);
    assert_false(fell);
}

/* The constructs left to jansson: same verdict, through the fallback. */
static void test_fallback(void **state)
{
    (void)state;
    /* lengths from sizeof: some of these hold NULs */
#define C(lit, code) {lit, sizeof lit - 1, code}
    static const struct {
        const char *frame;
        size_t len;
        int code;
    } cases[] = {
        C(F("{\"\\u0061\":1}"), 0),
        C(F("{\"a\":1,\"\\u0061\":2}"), -SG_CLOSE_BAD_DATA),        /* duplicate once unescaped */
        C(F("{\"\\u0000\":1}"), -SG_CLOSE_BAD_DATA),                /* NUL in a key */
        C(F("{\"\\ud800\":1}"), -SG_CLOSE_BAD_DATA),
        C("{\"seq\":1,\"kind\":\"stdin\",\"pay\\u006coad\":{\"a\":[1]},\"ts\":\"t\"}", 0),
        C("{\"seq\":1,\"kind\":\"std\\u0069n\",\"payload\":{},\"ts\":\"t\"}", 0),
        C("{\"seq\":1,\"kind\":\"std\\u0069nn\",\"payload\":{},\"ts\":\"t\"}", -SG_CLOSE_BAD_DATA),
        C("{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"2026\\u002d01\"}", 0),
        C("{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"sb\\u0031\"}", 0),
        C("{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"sb\\u0032\"}",
          -SG_CLOSE_POLICY),
        C("{\"task\\u005fid\":1}", -SG_CLOSE_POLICY),
        C(F("{\"a\":1.5e308}"), 0),                                   /* near DBL_MAX */
        C(F("{\"a\":1.7976931348623157e308}"), 0),
        C(F("{\"a\":1.7976931348623159e308}"), -SG_CLOSE_BAD_DATA),   /* rounds to inf */
        C(F("{\"a\":9.9e308}"), -SG_CLOSE_BAD_DATA),
        C(F("{\"a\":0.18e310}"), -SG_CLOSE_BAD_DATA),
        /* jansson 2.14 skips a NUL right after a number or a literal */
        C("{\"seq\":1\0,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", 0),
        C(F("{\"a\":true\0}"), 0),
        C(F("{\"a\":\"x\"\0}"), -SG_CLOSE_BAD_DATA),
        C(F("{\"a\":1\0\0}"), -SG_CLOSE_BAD_DATA),
        C("\0" F("{}"), -SG_CLOSE_BAD_DATA),
    };
#undef C
    for (size_t i = 0; i < SG_ARRAY_LEN(cases); i++) {
        bool fell = false;
        int r = agree(cases[i].frame, cases[i].len, "sb1", &fell);
        if (r != cases[i].code)
            fail_msg("case %zu: got %d, want %d", i, r, cases[i].code);
        if (r == 0 && !fell)
            fail_msg("case %zu did not take the fallback", i);
    }

    /* the payload key escaped: its bytes are dumped from the tree */
    const char *esc = "{\"seq\":1,\"kind\":\"stdin\",\"pay\\u006coad\":{\"a\":[1]},\"ts\":\"t\"}";
    sg_err err = {0};
    sg_frame_view v;
    assert_int_equal(sg_frame_scan(esc, strlen(esc), NULL, &v, &err), 0);
    assert_true(v.fallback);
    assert_non_null(v.dump);
    assert_int_equal(v.payload_len, strlen("{\"a\":[1]}"));
    assert_memory_equal(v.payload, "{\"a\":[1]}", v.payload_len);
    sg_frame_view_clear(&v);
    assert_null(v.root);
}

/* Many keys in one object; nesting up to and beyond jansson's limit. */
static void test_limits(void **state)
{
    (void)state;
    char buf[16384];
    for (int nkeys = SG_FRAMESCAN_OBJ_KEYS - 1; nkeys <= SG_FRAMESCAN_OBJ_KEYS + 1; nkeys++) {
        for (int dup = 0; dup < 2; dup++) {
            size_t o = (size_t)snprintf(buf, sizeof buf, "{\"seq\":1,\"kind\":\"stdin\",\"ts\":\"t\",\"payload\":{");
            for (int k = 0; k < nkeys; k++)
                o += (size_t)snprintf(buf + o, sizeof buf - o, "%s\"k%d\":%d", k ? "," : "",
                                      dup && k == nkeys - 1 ? 0 : k, k);
            o += (size_t)snprintf(buf + o, sizeof buf - o, "}}");
            bool fell = false;
            int r = agree(buf, o, NULL, &fell);
            assert_int_equal(r, dup ? -SG_CLOSE_BAD_DATA : 0);
            if (!dup)
                assert_int_equal(fell, nkeys > SG_FRAMESCAN_OBJ_KEYS);
        }
    }
    /* 8 nested objects of 30 keys and more: past SG_FRAMESCAN_KEYS open keys */
    size_t o = (size_t)snprintf(buf, sizeof buf, "{\"seq\":1,\"kind\":\"stdin\",\"ts\":\"t\",\"payload\":");
    for (int d = 0; d < 20; d++) {
        buf[o++] = '{';
        for (int k = 0; k < 30; k++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "\"k%d\":%d,", k, k);
        o += (size_t)snprintf(buf + o, sizeof buf - o, "\"in\":");
    }
    buf[o++] = '1';
    for (int d = 0; d < 20; d++)
        buf[o++] = '}';
    buf[o++] = '}';
    bool fell = false;
    assert_int_equal(agree(buf, o, NULL, &fell), 0);
    assert_true(fell);

    /* depth: the frame is 1; jansson refuses a value at depth 2049 */
    size_t cap = 8 * 4096;
    sg_autofree char *deep = malloc(cap);
    assert_non_null(deep);
    int depths[] = {SG_FRAMESCAN_DEPTH - 1, SG_FRAMESCAN_DEPTH, SG_FRAMESCAN_DEPTH + 1,
                    2047, 2048, 2049, 3000};
    for (size_t i = 0; i < SG_ARRAY_LEN(depths); i++) {
        for (int scalar = 0; scalar < 2; scalar++) {
            /* the payload is depth 2, its "a" 3: arrays from there put
             * the innermost array (or the scalar inside it) at depths[i] */
            int arrays = depths[i] - 2 - scalar;
            size_t n = (size_t)snprintf(deep, cap, "{\"seq\":1,\"kind\":\"stdin\",\"ts\":\"t\",\"payload\":{\"a\":");
            for (int a = 0; a < arrays; a++)
                deep[n++] = '[';
            if (scalar)
                deep[n++] = '7';
            for (int a = 0; a < arrays; a++)
                deep[n++] = ']';
            deep[n++] = '}';
            deep[n++] = '}';
            int r = agree(deep, n, NULL, &fell);
            int deepest = 3 + arrays - 1 + scalar;
            assert_int_equal(r, deepest > 2048 ? -SG_CLOSE_BAD_DATA : 0);
            if (r == 0)
                assert_int_equal(fell, deepest > SG_FRAMESCAN_DEPTH);
        }
    }
}

/* ---- agreement over generated cases */

static size_t ncases;

/* Values of every kind, valid and not, put where the schema looks and
 * inside the payload. */
static const char *const values[] = {
    "0", "-0", "1", "-1", "7", "42", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "00", "01", "-", "+1", "1.5", "1.",
    ".5", "1e5", "1E+5", "1e-5", "1e", "2.5e308", "1e308", "-1e308", "1e-400", "0.0",
    "-0.0e0", "true", "false", "null", "tru", "nul", "True", "\"\"", "\"stdin\"",
    "\"command\"", "\"sb1\"", "\"sb2\"", "\"t\"", "\"\\n\"", "\"\\u00e9\"", "\"\\ud83d\\ude00\"",
    "\"\\ud83d\"", "\"\\ude00\"", "\"\\u0000\"", "\"\\u001f\"", "\"\x1f\"", "\"\x7f\"",
    "\"\xc3\xa9\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbf\"", "\"\xf4\x8f\xbf\xbf\"",
    "\"abc", "\"a\\\"b\"", "\"a\\\\\"", "\"\\/\"", "\"\\a\"", "[]", "[1,2]", "[1,]", "[,1]",
    "[", "]", "{}", "{\"a\":1}", "{\"a\":1,\"a\":1}", "{\"a\":1,\"b\":{\"a\":1}}", "{\"a\"}",
    "{\"a\":}", "{1:1}", "[[[]]]", "[{\"x\":[{\"y\":null}]}]", "", " ", "x", "\"x\" \"y\"",
};

static const char *const keys[] = {"seq", "kind", "ts", "payload", "sandbox_id",
                                   "learner_id", "task_id", "extra"};

static void count_agree(const char *buf, size_t len, const char *sb)
{
    agree(buf, len, sb, NULL);
    ncases++;
}

static void test_agreement(void **state)
{
    (void)state;
    char buf[4096];
    ncases = 0;
    /* each value in each top-level field, in a valid frame otherwise */
    for (size_t k = 0; k < SG_ARRAY_LEN(keys); k++) {
        for (size_t v = 0; v < SG_ARRAY_LEN(values); v++) {
            const char *vals[4] = {"1", "\"stdin\"", "\"t\"", "{}"};
            int n = snprintf(buf, sizeof buf, "{");
            for (size_t f = 0; f < 4; f++)
                n += snprintf(buf + n, sizeof buf - (size_t)n, "%s\"%s\":%s", f ? "," : "",
                              keys[f], f == k ? values[v] : vals[f]);
            if (k >= 4)
                n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"%s\":%s", keys[k], values[v]);
            n += snprintf(buf + n, sizeof buf - (size_t)n, "}");
            count_agree(buf, (size_t)n, "sb1");
            count_agree(buf, (size_t)n, NULL);
        }
    }
    /* each value inside the payload, alone, in an array, and nested */
    for (size_t v = 0; v < SG_ARRAY_LEN(values); v++) {
        static const char *const shapes[] = {"{\"v\":@}", "{\"v\":[@]}", "{\"v\":[1,@,{}]}",
                                             "{\"o\":{\"v\":@,\"w\":0}}", "{\"v\":@,\"v2\":@}"};
        for (size_t s = 0; s < SG_ARRAY_LEN(shapes); s++) {
            char payload[512];
            size_t o = 0;
            for (const char *c = shapes[s]; *c; c++) { /* '@' stands for the value */
                size_t l = *c == '@' ? strlen(values[v]) : 1;
                memcpy(payload + o, *c == '@' ? values[v] : c, l);
                o += l;
            }
            payload[o] = '\0';
            int n = snprintf(buf, sizeof buf,
                             "{\"seq\":2,\"kind\":\"stdout\",\"payload\":%s,\"ts\":\"t\"}", payload);
            count_agree(buf, (size_t)n, "sb1");
        }
    }
    /* every key order of the five fields (120 permutations) */
    static const char *const kv[] = {"\"seq\":4", "\"kind\":\"limit\"", "\"ts\":\"x\"",
                                     "\"payload\":{\"p\":[]}", "\"sandbox_id\":\"sb1\""};
    for (int p = 0; p < 120; p++) {
        int idx[5] = {0, 1, 2, 3, 4}, q = p;
        for (int i = 4; i > 0; i--) { /* factorial-base digits pick a permutation */
            int j = q % (i + 1);
            q /= i + 1;
            int t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
        int n = snprintf(buf, sizeof buf, "{%s,%s,%s,%s,%s}", kv[idx[0]], kv[idx[1]], kv[idx[2]],
                         kv[idx[3]], kv[idx[4]]);
        assert_int_equal(agree(buf, (size_t)n, "sb1", NULL), 0);
        ncases++;
    }
    /* every prefix of a rich frame, and every single-byte change to it */
    const char *rich = "{\"seq\":12,\"kind\":\"run_result\",\"payload\":{\"cmd\":\"a\\u00e9\xc3\xa9\","
                       "\"n\":[-1.5e3,0,true,null],\"o\":{\"x\":\"\\ud83d\\ude00\"}},"
                       "\"ts\":\"2026\",\"sandbox_id\":\"sb1\"}";
    size_t rl = strlen(rich);
    for (size_t cut = 0; cut <= rl; cut++)
        count_agree(rich, cut, "sb1");
    static const unsigned char subst[] = {' ', '"', '\\', '{', '}', '[', ']', ':', ',', '0',
                                          '-', 'e', 'u', 'x', 0x00, 0x01, 0x80, 0xc3, 0xff};
    for (size_t at = 0; at < rl; at++) {
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(buf, rich, rl);
            buf[at] = (char)subst[k];
            count_agree(buf, rl, "sb1");
            /* and the byte inserted there */
            memcpy(buf, rich, at);
            buf[at] = (char)subst[k];
            memcpy(buf + at + 1, rich + at, rl - at);
            count_agree(buf, rl + 1, "sb1");
        }
    }
    /* pseudo-random splices of the above (a fixed seed: reproducible) */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 3000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const char *v = values[x % SG_ARRAY_LEN(values)];
        size_t at = (size_t)(x >> 20) % rl, drop = (size_t)(x >> 40) % 4;
        size_t n = 0;
        memcpy(buf, rich, at);
        n = at;
        memcpy(buf + n, v, strlen(v));
        n += strlen(v);
        size_t rest = at + drop < rl ? at + drop : rl;
        memcpy(buf + n, rich + rest, rl - rest);
        n += rl - rest;
        count_agree(buf, n, "sb1");
    }
    print_message("# %zu frames checked against sg_event_validate\n", ncases);
    assert_true(ncases > 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_agreement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

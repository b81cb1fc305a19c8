#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "wire/event.h"

#define GOOD "{\"seq\": 3, \"kind\": \"command\", \"payload\": {\"cmd\": \"ls\"}, \"ts\": \"2026-01-01T00:00:00+00:00\"}"

static int validate(const char *s, const char *sb, sg_err *err)
{
    sg_event ev;
    int r = sg_event_validate(s, strlen(s), sb, &ev, err);
    sg_event_clear(&ev);
    return r;
}

static void test_kinds(void **state)
{
    (void)state;
    const char *names[] = {"stdin", "command", "stdout", "run_result", "test_result", "file_diff",
                           "activity", "session_abort", "checkpoint", "rollback", "limit",
                           "sandbox"};
    for (size_t i = 0; i < SG_ARRAY_LEN(names); i++) {
        assert_int_equal(sg_event_kind_from_name(names[i]), (int)i);
        assert_string_equal(sg_event_kind_name((int)i), names[i]);
    }
    assert_int_equal(sg_event_kind_from_name("telepathy"), -1);
    assert_int_equal(sg_event_kind_from_name(NULL), -1);
    assert_null(sg_event_kind_name(SG_EV__COUNT));
    assert_null(sg_event_kind_name(-1));
}

static void test_good_frame(void **state)
{
    (void)state;
    sg_err err = {0};
    sg_event ev;
    assert_int_equal(sg_event_validate(GOOD, strlen(GOOD), "sb1", &ev, &err), 0);
    assert_int_equal(ev.seq, 3);
    assert_int_equal(ev.kind, SG_EV_COMMAND);
    assert_string_equal(ev.ts, "2026-01-01T00:00:00+00:00");
    assert_string_equal(json_string_value(json_object_get(ev.payload, "cmd")), "ls");
    sg_event_clear(&ev);
    assert_null(ev.root);

    /* Optional sandbox_id equal to the token's; seq 0 is fine. */
    const char *with_sb =
        "{\"seq\":0,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"sb1\"}";
    assert_int_equal(validate(with_sb, "sb1", &err), 0);
}

static void test_frame_builder_roundtrip(void **state)
{
    (void)state;
    sg_err err = {0};
    sg_autojson json_t *f = sg_event_frame(7, SG_EV_FILE_DIFF, json_pack("{s:s}", "path", "a"), NULL, "sb9");
    assert_non_null(f);
    sg_autofree char *txt = sg_json_dump(f);
    sg_event ev;
    assert_int_equal(sg_event_validate(txt, strlen(txt), "sb9", &ev, &err), 0);
    assert_int_equal(ev.seq, 7);
    assert_int_equal(ev.kind, SG_EV_FILE_DIFF);
    assert_true(strlen(ev.ts) > 20);
    sg_event_clear(&ev);

    sg_autojson json_t *g = sg_event_frame(1, SG_EV_STDIN, NULL, "T", NULL);
    assert_non_null(g);
    assert_null(json_object_get(g, "sandbox_id"));
    assert_string_equal(json_string_value(json_object_get(g, "ts")), "T");
    assert_null(sg_event_frame(1, SG_EV__COUNT, json_object(), NULL, NULL));
    assert_null(sg_event_frame(1, (sg_event_kind)-1, json_object(), NULL, NULL));
    assert_null(sg_event_frame(-1, SG_EV_STDIN, json_object(), NULL, NULL));
    assert_null(sg_event_frame(1, SG_EV_STDIN, json_array(), NULL, NULL));
}

typedef struct refusal {
    const char *frame;
    int code;
    const char *msg; /* substring of the error */
} refusal;

static void test_refusals(void **state)
{
    (void)state;
    static const refusal cases[] = {
        {"[1]", SG_CLOSE_BAD_DATA, "not a JSON object"},
        {"\"str\"", SG_CLOSE_BAD_DATA, "invalid JSON"}, /* jansson: object or array only */
        {"{\"seq\":1,\"seq\":2,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "duplicate"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{\"a\":1,\"a\":2},\"ts\":\"t\"}",
         SG_CLOSE_BAD_DATA, "duplicate"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{\"a\":\"\xff\"},\"ts\":\"t\"}",
         SG_CLOSE_BAD_DATA, "invalid JSON"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{\"a\":\"\xed\xa0\x80\"},\"ts\":\"t\"}",
         SG_CLOSE_BAD_DATA, "invalid JSON"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"} {}", SG_CLOSE_BAD_DATA,
         "invalid JSON"},
        {"{\"seq\":1,", SG_CLOSE_BAD_DATA, "invalid JSON"},
        {"", SG_CLOSE_BAD_DATA, "invalid JSON"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"learner_id\":\"a\"}",
         SG_CLOSE_POLICY, "learner_id"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"task_id\":\"a\"}",
         SG_CLOSE_POLICY, "task_id"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"other\"}",
         SG_CLOSE_POLICY, "sandbox_id differs"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":5}",
         SG_CLOSE_POLICY, "sandbox_id is not a string"},
        {"{\"seq\":1,\"kind\":\"telepathy\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "unknown kind: telepathy"},
        {"{\"seq\":1,\"kind\":5,\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "kind is not a string"},
        {"{\"seq\":1,\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA, "no kind"},
        {"{\"seq\":-1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "non-negative integer"},
        {"{\"seq\":1.0,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "non-negative integer"},
        {"{\"seq\":\"1\",\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "non-negative integer"},
        {"{\"seq\":true,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "non-negative integer"},
        {"{\"seq\":99999999999999999999,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}",
         SG_CLOSE_BAD_DATA, "invalid JSON"},
        {"{\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}", SG_CLOSE_BAD_DATA, "no seq"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{}}", SG_CLOSE_BAD_DATA, "no ts"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":7}", SG_CLOSE_BAD_DATA,
         "ts is not a string"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"ts\":\"t\"}", SG_CLOSE_BAD_DATA, "no payload"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":[],\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "payload is not an object"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":null,\"ts\":\"t\"}", SG_CLOSE_BAD_DATA,
         "payload is not an object"},
        {"{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"x\":1}", SG_CLOSE_BAD_DATA,
         "unknown top-level key: x"},
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(cases); i++) {
        sg_err err = {0};
        int r = validate(cases[i].frame, "sb1", &err);
        if (r != -cases[i].code || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu (%s): got %d '%s', want %d '%s'", i, cases[i].frame, r, err.msg,
                     -cases[i].code, cases[i].msg);
    }
    /* No expected sandbox: any frame sandbox_id is a spoof. */
    sg_err err = {0};
    assert_int_equal(
        validate("{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\",\"sandbox_id\":\"a\"}",
                 NULL, &err),
        -SG_CLOSE_POLICY);
    /* Embedded NUL is refused (the length, not strlen, is what counts). */
    const char nul[] = "{\"seq\":1,\"kind\":\"stdin\",\"payload\":{},\"ts\":\"t\"}\0";
    sg_event ev;
    assert_int_equal(sg_event_validate(nul, sizeof nul - 1, "sb1", &ev, &err), -SG_CLOSE_BAD_DATA);
}

static void test_too_big(void **state)
{
    (void)state;
    size_t n = SG_FRAME_MAX + 1;
    sg_autofree char *buf = malloc(n);
    assert_non_null(buf);
    memset(buf, ' ', n);
    memcpy(buf, GOOD, strlen(GOOD)); /* valid JSON padded with spaces */
    sg_err err = {0};
    sg_event ev;
    assert_int_equal(sg_event_validate(buf, n, "sb1", &ev, &err), -SG_CLOSE_TOO_BIG);
    assert_non_null(strstr(err.msg, "exceeds"));
    assert_null(ev.root);
    assert_int_equal(sg_event_validate(buf, n - 1, "sb1", &ev, &err), 0);
    sg_event_clear(&ev);
}

static void test_raw_payload(void **state)
{
    (void)state;
    const char *f[] = {
        "{\"seq\":1,\"kind\":\"stdin\",\"payload\":{\"line\":\"a}\\\"b{\",\"n\":[1,{\"x\":\"]\"}]},\"ts\":\"t\"}",
        " { \"payload\" : {} , \"seq\" : 0 , \"kind\" : \"stdin\" , \"ts\" : \"t\" } ",
    };
    const char *want[] = {"{\"line\":\"a}\\\"b{\",\"n\":[1,{\"x\":\"]\"}]}", "{}"};
    for (size_t i = 0; i < 2; i++) {
        sg_event ev;
        sg_err err = {0};
        assert_int_equal(sg_event_validate(f[i], strlen(f[i]), NULL, &ev, &err), 0);
        const char *raw = NULL;
        size_t n = 0;
        assert_int_equal(sg_event_raw_payload(f[i], strlen(f[i]), &raw, &n), 0);
        assert_int_equal(n, strlen(want[i]));
        assert_memory_equal(raw, want[i], n);
        json_t *again = json_loadb(raw, n, 0, NULL);
        assert_true(json_equal(again, ev.payload));
        json_decref(again);
        sg_event_clear(&ev);
    }
    /* a key written with an escape: not found raw (the ingest dumps it) */
    const char *esc = "{\"seq\":1,\"kind\":\"stdin\",\"pay\\u006coad\":{},\"ts\":\"t\"}";
    const char *raw;
    size_t n;
    assert_int_equal(sg_event_raw_payload(esc, strlen(esc), &raw, &n), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_raw_payload),
        cmocka_unit_test(test_good_frame),
        cmocka_unit_test(test_frame_builder_roundtrip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_too_big),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* uplinkd_msg: the supervisor <-> uplink daemon messages (wire/uplinkd.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "delivery/uplink.h"
#include "wire/uplinkd.h"

#define HELLO(extra) \
    "{\"op\":\"hello\",\"v\":1,\"sandbox\":\"0123456789ab\",\"url\":\"ws://h:1\",\"spool\":\"/s\"," \
    "\"synced\":3,\"secret_file\":\"/k\",\"learner\":\"l\",\"task\":\"t\"" extra "}"

static int parse(const char *s, sg_uplinkd_msg *m, sg_err *e)
{
    return sg_uplinkd_msg_parse(s, strlen(s), m, e);
}

static void test_msgs(void **state)
{
    (void)state;
    sg_uplinkd_msg m;
    sg_err e = {0};
    assert_int_equal(parse(HELLO(",\"secret_create\":true"), &m, &e), 0);
    assert_int_equal(m.op, SG_UPLINKD_HELLO);
    assert_string_equal(m.sandbox, "0123456789ab");
    assert_int_equal(m.seq, 3);
    assert_true(m.secret_create);
    sg_uplinkd_msg_clear(&m);
    assert_int_equal(parse("{\"op\":\"synced\",\"seq\":-1}", &m, &e), 0);
    assert_int_equal(m.seq, -1);
    sg_uplinkd_msg_clear(&m);
    const char *bad[] = {
        "{\"op\":\"synced\",\"seq\":-2}", "{\"op\":\"synced\",\"seq\":\"1\"}", "{\"seq\":1}", "[1]",
        "{\"op\":\"bye\"}", "{\"op\":\"hello\",\"v\":2}", HELLO(",\"spool\":\"rel\""),
        HELLO(",\"ca_file\":\"/ca.pem\""), /* a CA file needs v 2: a v1 daemon would ignore it */
        "{\"op\":\"synced\",\"seq\":1,\"seq\":2}", "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        assert_int_equal(parse(bad[i], &m, &e), -1);
        assert_true(e.msg[0] != 0);
        assert_null(m.json);
    }
}

static void test_replies(void **state)
{
    (void)state;
    sg_uplinkd_reply r;
    sg_err e = {0};
    const char *ack = "{\"ack\":40}";
    assert_int_equal(sg_uplinkd_reply_parse(ack, strlen(ack), &r, &e), 0);
    assert_int_equal(r.kind, SG_UPLINKD_ACK);
    assert_int_equal(r.ack, 40);
    sg_uplinkd_reply_clear(&r);
    const char *ev = "{\"event\":\"what\",\"code\":99999999999,\"retry_ms\":-5}";
    assert_int_equal(sg_uplinkd_reply_parse(ev, strlen(ev), &r, &e), 0);
    assert_int_equal(r.event, SG_UPLINK_ERROR); /* an unknown name */
    assert_int_equal(r.code, 0);                /* out of int range */
    assert_int_equal(r.retry_ms, 0);
    assert_string_equal(r.reason, "");
    sg_uplinkd_reply_clear(&r);
    const char *low = "{\"ack\":-2}", *none = "{\"x\":1}";
    assert_int_equal(sg_uplinkd_reply_parse(low, strlen(low), &r, &e), -1);
    assert_int_equal(sg_uplinkd_reply_parse(none, strlen(none), &r, &e), -1);
}

/* What each end sends, as the other reads it. */
static void test_encode(void **state)
{
    (void)state;
    sg_err e = {0};
    sg_uplinkd_msg h = {.op = SG_UPLINKD_HELLO, .sandbox = "0123456789ab", .url = "ws://h:1", .spool = "/s",
                        .secret_file = "/k", .learner = "l", .task = "t", .seq = 3, .secret_create = true};
    char *text = sg_uplinkd_msg_encode(&h);
    assert_non_null(strstr(text, "\"v\":1"));
    sg_uplinkd_msg m;
    assert_int_equal(parse(text, &m, &e), 0);
    assert_int_equal(m.op, SG_UPLINKD_HELLO);
    assert_string_equal(m.spool, "/s");
    assert_int_equal(m.seq, 3);
    assert_true(m.secret_create);
    sg_uplinkd_msg_clear(&m);
    free(text);
    text = sg_uplinkd_msg_encode(&(sg_uplinkd_msg){.op = SG_UPLINKD_SYNCED, .seq = 9});
    assert_string_equal(text, "{\"op\":\"synced\",\"seq\":9}");
    free(text);
    text = sg_uplinkd_reply_encode(&(sg_uplinkd_reply){.kind = SG_UPLINKD_EVENT, .event = 99, .code = 1008,
                                                       .reason = "x", .retry_ms = 5});
    assert_string_equal(text, "{\"event\":\"error\",\"code\":1008,\"reason\":\"x\",\"retry_ms\":5}");
    free(text);
    text = sg_uplinkd_reply_encode(&(sg_uplinkd_reply){.kind = SG_UPLINKD_ACK, .ack = -1});
    assert_string_equal(text, "{\"ack\":-1}");
    free(text);
    text = sg_uplinkd_reply_encode(&(sg_uplinkd_reply){.kind = SG_UPLINKD_REFUSED, .reason = "no"});
    assert_string_equal(text, "{\"error\":\"no\"}");
    free(text);
    /* another version's hello is refused, saying which this end speaks */
    assert_int_equal(parse(HELLO(",\"v\":2"), &m, &e), -1);
}

/* Version 2: the CA file a wss:// ingest is verified by travels in the
 * hello; a v2 hello without one is taken too, a relative path or another
 * version is not. */
static void test_ca_file(void **state)
{
    (void)state;
    sg_err e = {0};
    sg_uplinkd_msg m;
    const char *v2 = "{\"op\":\"hello\",\"v\":2,\"sandbox\":\"0123456789ab\",\"url\":\"wss://h:1\",\"spool\":\"/s\","
                     "\"synced\":3,\"secret_file\":\"/k\",\"learner\":\"l\",\"task\":\"t\"";
    char buf[512];
    snprintf(buf, sizeof buf, "%s,\"ca_file\":\"/etc/ca.pem\"}", v2);
    assert_int_equal(parse(buf, &m, &e), 0);
    assert_string_equal(m.ca_file, "/etc/ca.pem");
    sg_uplinkd_msg_clear(&m);
    snprintf(buf, sizeof buf, "%s}", v2);
    assert_int_equal(parse(buf, &m, &e), 0);
    assert_null(m.ca_file);
    sg_uplinkd_msg_clear(&m);
    snprintf(buf, sizeof buf, "%s,\"ca_file\":\"ca.pem\"}", v2);
    assert_int_equal(parse(buf, &m, &e), -1);
    assert_non_null(strstr(e.msg, "ca_file"));
    char v3[512];
    snprintf(v3, sizeof v3, "%s}", v2);
    v3[strstr(v3, "\"v\":2") - v3 + 4] = '3';
    assert_int_equal(parse(v3, &m, &e), -1);
    sg_uplinkd_msg h = {.op = SG_UPLINKD_HELLO, .sandbox = "0123456789ab", .url = "wss://h:1", .spool = "/s",
                        .secret_file = "/k", .learner = "l", .task = "t", .seq = 3, .ca_file = "/ca.pem"};
    char *text = sg_uplinkd_msg_encode(&h);
    assert_non_null(strstr(text, "\"v\":2"));
    assert_int_equal(parse(text, &m, &e), 0);
    assert_string_equal(m.ca_file, "/ca.pem");
    sg_uplinkd_msg_clear(&m);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_msgs),
        cmocka_unit_test(test_replies),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_ca_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

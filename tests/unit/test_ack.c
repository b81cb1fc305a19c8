/* ack: the ingest's acks typed (wire/ack.h): round trip, an ack of the
 * builds before versions taken, an ack of a newer version refused with
 * what to do; and the uplink meeting that newer ack on a real spool (no
 * WebSocket, as fuzz/fuzz_uplink.c drives it): it stops, keeps the spool,
 * and drain says why at once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <libwebsockets.h>

#include "base/util.h"
#include "delivery/uplink_internal.h"
#include "wire/ack.h"

static void test_round_trip(void **cm)
{
    (void)cm;
    char buf[SG_ACK_MSG_MAX];
    int64_t acks[] = {-1, 0, 7, INT64_MAX};
    for (size_t i = 0; i < sizeof acks / sizeof acks[0]; i++) {
        int n = sg_ack_encode(&(sg_ack){.ack = acks[i], .v = SG_ACK_VERSION}, buf, sizeof buf);
        assert_true(n > 0);
        sg_ack a;
        sg_err err = {0};
        assert_int_equal(sg_ack_decode(buf, (size_t)n, &a, &err), 0);
        assert_true(a.ack == acks[i]);
        assert_int_equal(a.v, SG_ACK_VERSION);
    }
    assert_int_equal(sg_ack_encode(&(sg_ack){.ack = INT64_MIN, .v = 1}, buf, 8), -1); /* does not fit */
}

/* The ingest of the builds before versions sends {"ack": N}: version 0. */
static void test_version_0(void **cm)
{
    (void)cm;
    char buf[SG_ACK_MSG_MAX];
    int n = sg_ack_encode(&(sg_ack){.ack = 5}, buf, sizeof buf);
    assert_string_equal(buf, "{\"ack\":5}");
    sg_ack a;
    sg_err err = {0};
    assert_int_equal(sg_ack_decode(buf, (size_t)n, &a, &err), 0);
    assert_int_equal(a.ack, 5);
    assert_int_equal(a.v, 0);
}

static void refused(const char *msg, int code, const char *says)
{
    sg_ack a;
    sg_err err = {0};
    assert_int_equal(sg_ack_decode(msg, strlen(msg), &a, &err), -1);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, says))
        fail_msg("'%s': '%s' does not say '%s'", msg, err.msg, says);
}

static void test_refused(void **cm)
{
    (void)cm;
    refused("{\"ack\":5,\"v\":2}", EPROTO, "the ingest acks in uplink protocol 2; this sandglass reads up to 1");
    refused("{\"ack\":5,\"v\":2}", EPROTO, "'sandglass flush ID'");
    refused("{\"ack\":\"5\"}", EINVAL, "\"ack\"");
    refused("{\"ack\":-2,\"v\":1}", EINVAL, "\"ack\"");
    refused("{\"v\":1}", EINVAL, "\"ack\"");
    refused("{\"ack\":1,\"v\":-1}", EINVAL, "\"v\"");
    refused("{\"ack\":1,\"v\":1.0}", EINVAL, "\"v\"");
    refused("[1]", EINVAL, "not a JSON object");
    refused("{\"ack\":1", EINVAL, "not a JSON object");
}

static int n_stopped;
static char stopped_why[512];

static void on_event(void *ud, const sg_uplink_event *ev)
{
    (void)ud;
    if (ev->type == SG_UPLINK_REFUSED && ev->retry_ms == 0) {
        n_stopped++;
        snprintf(stopped_why, sizeof stopped_why, "%s", ev->reason);
    }
}

static void feed(sg_uplink *u, const char *msg)
{
    memcpy(u->rx, msg, strlen(msg));
    u->rx_len = strlen(msg);
    sg_uplink_handle_message(u);
}

static void test_uplink_meets_newer_ingest(void **cm)
{
    (void)cm;
    char dir[128];
    snprintf(dir, sizeof dir, "/dev/shm/sg-test-ack-%d", (int)getpid());
    sg_err err = {0};
    sg_rm_rf(dir, &err);
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    assert_non_null(sp);
    for (int i = 0; i < 5; i++) {
        char rec[32];
        int n = snprintf(rec, sizeof rec, "{\"seq\":%d}", i);
        assert_int_equal(sg_spool_append(sp, i, rec, (size_t)n, &err), 0);
    }
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_uplink *u = calloc(1, sizeof *u);
    assert_non_null(u);
    u->spool = sp;
    u->st = ST_OPEN; /* connected, no wsi: nothing is written */
    u->ev_fn = on_event;
    u->stats.acked_seq = -1;
    u->cur = sg_spool_cursor_new(sp, -1, LWS_PRE, &err);
    assert_non_null(u->cur);
    feed(u, "{\"ack\":-1}");      /* an ingest of the builds before versions */
    assert_true(u->ready);
    u->stats.sent_seq = 4; /* as write_records does: all five sent */
    feed(u, "{\"ack\":2,\"v\":1}"); /* this build's */
    assert_int_equal(sg_spool_acked_seq(sp), 2);
    feed(u, "{\"ack\":4,\"v\":2}"); /* a newer one: not read */
    assert_int_equal(u->st, ST_STOPPED);
    assert_int_equal(n_stopped, 1);
    assert_non_null(strstr(stopped_why, "uplink protocol 2"));
    assert_int_equal(sg_spool_acked_seq(sp), 2);
    assert_int_equal(sg_spool_pending(sp), 2); /* kept */
    assert_int_equal(sg_uplink_drain(u, 1000, &err), -1);
    assert_int_equal(err.code, EPROTO);
    assert_non_null(strstr(err.msg, "deliver them with the sandglass of the ingest's version"));
    sg_spool_cursor_free(u->cur);
    free(u);
    sg_spool_close(sp);
    sg_rm_rf(dir, &err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_version_0),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_uplink_meets_newer_ingest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_spool_blobs: blob records (file contents, recordings) in the spool
 * beside the events, and the blob frames they hold: they take no seq of
 * their own, go before their event through every cursor (owner, reader,
 * after a reopen, after a seek or an ack), and never split from it at a
 * segment's rotation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "delivery/spool.h"
#include "wire/event.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sg-test-blobs-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sg_err err;
    return sg_rm_rf(tmpdir, &err);
}

/* seq % 3 blobs before each event: "b<seq>.<k>", then the event "e<seq>". */
static void fill(sg_spool *sp, int64_t n)
{
    sg_err err;
    for (int64_t s = 0; s < n; s++) {
        char buf[256];
        for (int k = 0; k < s % 3; k++) {
            int m = snprintf(buf, sizeof buf, "b%" PRId64 ".%d%*s", s, k, (int)(s * 7 % 200), "");
            assert_int_equal(sg_spool_append_blob(sp, buf, (size_t)m, &err), 0);
        }
        int m = snprintf(buf, sizeof buf, "e%" PRId64, s);
        assert_int_equal(sg_spool_append(sp, s, buf, (size_t)m, &err), 0);
    }
    assert_int_equal(sg_spool_sync(sp, &err), 0);
}

/* Reads everything after `after` and checks the order: returns the events read. */
static int64_t check(sg_spool *sp, int64_t after)
{
    sg_err err;
    sg_spool_cursor *c = sg_spool_cursor_new(sp, after, 8, &err);
    assert_non_null(c);
    char *data;
    size_t len;
    int64_t seq, want = after + 1, events = 0;
    int blobs = 0, rc;
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err)) == 1) {
        char exp[64];
        assert_int_equal(seq, want);
        if (sg_spool_cursor_was_blob(c)) {
            snprintf(exp, sizeof exp, "b%" PRId64 ".%d", seq, blobs++);
            assert_true(len >= strlen(exp) && memcmp(data, exp, strlen(exp)) == 0);
            continue;
        }
        assert_int_equal(blobs, seq % 3); /* every blob of the event, before it */
        snprintf(exp, sizeof exp, "e%" PRId64, seq);
        assert_int_equal(len, strlen(exp));
        assert_memory_equal(data, exp, len);
        blobs = 0;
        want++;
        events++;
    }
    assert_int_equal(rc, 0);
    sg_spool_cursor_free(c);
    return events;
}

static void test_blobs_with_events(void **state)
{
    (void)state;
    sg_err err;
    sg_autofree char *dir = sg_strdup_printf("%s/spool", tmpdir);
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    assert_non_null(sp);
    sg_spool_set_segment_bytes(sp, 300); /* many rotations */
    fill(sp, 200);
    assert_int_equal(sg_spool_next_seq(sp), 200);
    assert_int_equal(check(sp, -1), 200);
    assert_int_equal(check(sp, 41), 158); /* a seek lands before the blobs of 42 */
    assert_int_equal(sg_spool_ack(sp, 99, &err), 0);
    assert_int_equal(check(sp, 99), 100);
    /* a reader, as the uplink daemon */
    sg_spool *rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    sg_spool_reader_set_synced(rd, sg_spool_synced_seq(sp));
    assert_int_equal(check(rd, 99), 100);
    assert_int_equal(check(rd, 150), 49);
    sg_spool_close(rd);
    sg_spool_close(sp);
    /* recovery keeps them, nothing quarantined */
    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.quarantined, 0);
    assert_int_equal(rep.placeholders, 0);
    assert_int_equal(sg_spool_next_seq(sp), 200);
    assert_int_equal(check(sp, 99), 100);
    sg_spool_close(sp);
}

/* After seq `after`: the event `want` (seq after + 1) alone, no blob before it. */
static void only_event_after(sg_spool *sp, int64_t after, const char *want)
{
    sg_err err;
    sg_spool_cursor *c = sg_spool_cursor_new(sp, after, 0, &err);
    char *data;
    size_t len;
    int64_t seq;
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), 1);
    assert_true(!sg_spool_cursor_was_blob(c) && seq == after + 1 && len == strlen(want));
    assert_memory_equal(data, want, len);
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), 0);
    sg_spool_cursor_free(c);
}

/* Blobs whose event was never written (a crash between them) are dropped
 * at recovery and counted: they are not the next event's files. Blobs
 * before a kept event stay with it. */
static void test_blob_tail(void **state)
{
    (void)state;
    sg_err err;
    sg_autofree char *dir = sg_strdup_printf("%s/spool", tmpdir);
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    assert_non_null(sp);
    fill(sp, 3);
    assert_int_equal(sg_spool_append_blob(sp, "b3.0", 4, &err), 0);
    assert_int_equal(sg_spool_append_blob(sp, "b3.1", 4, &err), 0);
    assert_int_equal(sg_spool_next_seq(sp), 3); /* a blob takes no seq */
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_close(sp);
    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.blobs_dropped, 2);
    assert_non_null(strstr(rep.text, "2 blob records"));
    assert_int_equal(rep.last_seq, 2);
    assert_int_equal(sg_spool_next_seq(sp), 3);
    assert_int_equal(sg_spool_append(sp, 3, "e3", 2, &err), 0);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    /* the event alone, after 2's blobs and event */
    assert_int_equal(check(sp, 0), 3);
    only_event_after(sp, 2, "e3");
    sg_spool_close(sp);
    /* a clean reopen drops nothing */
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.blobs_dropped, 0);
    assert_int_equal(check(sp, 0), 3);
    sg_spool_close(sp);
}

/* Several segments: the last one emptied (a torn record cut off, or a
 * file left empty) makes the one before it the tail, and the blobs at its
 * end are dropped at the first recovery; a segment holding only such
 * blobs goes whole. A second recovery finds nothing to drop. */
static void test_blob_tail_segments(void **state)
{
    (void)state;
    sg_err err;
    for (int shape = 0; shape < 3; shape++) {
        sg_autofree char *dir = sg_strdup_printf("%s/spool%d", tmpdir, shape);
        sg_spool *sp = sg_spool_open(dir, NULL, &err);
        assert_non_null(sp);
        sg_spool_set_segment_bytes(sp, 200);
        fill(sp, 20);
        assert_int_equal(sg_spool_append_blob(sp, "b20.0", 5, &err), 0);
        assert_int_equal(sg_spool_sync(sp, &err), 0);
        sg_spool_close(sp);
        /* a later segment past the blobs: empty, torn, or only blobs; a
         * blob record of seq 20 as spool.h lays it out (little-endian) */
        sg_autofree char *later = sg_strdup_printf("%s/seg-%020d.log", dir, 900);
        uint8_t rec[SG_SPOOL_HDR_SIZE + 5] = "SGR1";
        uint32_t len32 = 5, type = SG_SPOOL_REC_BLOB;
        uint64_t seq64 = 20;
        memcpy(rec + 4, &len32, 4);
        memcpy(rec + 8, &seq64, 8);
        memcpy(rec + 16, &type, 4);
        memcpy(rec + SG_SPOOL_HDR_SIZE, "b20.1", 5);
        uint32_t crc = sg_spool_crc32c(sg_spool_crc32c(0, rec, 20), "b20.1", 5);
        memcpy(rec + 20, &crc, 4);
        size_t n = shape == 0 ? 0 : shape == 1 ? sizeof rec - 3 /* torn */ : sizeof rec;
        assert_int_equal(sg_write_file_atomic(later, rec, n, 0600, &err), 0);
        sg_spool_report rep;
        sp = sg_spool_open(dir, &rep, &err);
        assert_non_null(sp);
        assert_int_equal(rep.blobs_dropped, shape == 2 ? 2 : 1);
        assert_int_equal(sg_spool_next_seq(sp), 20);
        assert_int_equal(check(sp, -1), 20);
        sg_spool_close(sp);
        sp = sg_spool_open(dir, &rep, &err);
        assert_non_null(sp);
        assert_true(rep.blobs_dropped == 0 && rep.torn == 0 && rep.quarantined == 0);
        assert_int_equal(sg_spool_next_seq(sp), 20);
        assert_int_equal(sg_spool_append(sp, 20, "e20", 3, &err), 0);
        assert_int_equal(sg_spool_sync(sp, &err), 0);
        /* after e19: e20 alone, its dropped blobs not before it */
        only_event_after(sp, 19, "e20");
        sg_spool_close(sp);
    }
}

static void test_blob_frames(void **state)
{
    (void)state;
    const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    unsigned char data[1000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 31);
    for (size_t n = 0; n < 6; n++) { /* every base64 tail */
        size_t flen;
        sg_autofree char *f = sg_blob_content_frame(sha, n ? 1000 : 0, n ? 10 : 0, data, n ? n + 300 : 0, &flen);
        assert_non_null(f);
        assert_true(sg_blob_is(f, flen));
        sg_blob b;
        sg_err err = {0};
        assert_int_equal(sg_blob_parse(f, flen, &b, &err), 0);
        assert_int_equal(b.kind, SG_BLOB_CONTENT);
        assert_string_equal(b.sha256, sha);
        assert_int_equal(b.len, n ? n + 300 : 0);
        assert_true(b.len == 0 || memcmp(b.data, data, b.len) == 0);
        sg_blob_clear(&b);
    }
    size_t flen;
    sg_autofree char *k = sg_blob_cast_frame("3.cast", 0, "hi", 2, &flen);
    sg_blob b;
    sg_err err = {0};
    assert_int_equal(sg_blob_parse(k, flen, &b, &err), 0);
    assert_true(b.kind == SG_BLOB_CAST && strcmp(b.session, "3.cast") == 0 && b.len == 2);
    sg_blob_clear(&b);
    static const char *const bad[] = {
        "{\"content\":{\"sha256\":\"x\",\"size\":1,\"off\":0,\"data\":\"AA==\"}}",
        "{\"content\":{\"sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\","
        "\"size\":1,\"off\":0,\"data\":\"AAA=\"}}",          /* 2 bytes past size 1 */
        "{\"content\":{\"sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\","
        "\"size\":1,\"off\":0,\"data\":\"AB==\"}}",          /* not canonical */
        "{\"cast\":{\"session\":\"../x\",\"off\":0,\"data\":\"\"}}",
        "{\"cast\":{\"session\":\"a\",\"off\":0,\"data\":\"\",\"more\":1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sg_blob_parse(bad[i], strlen(bad[i]), &b, &err), -SG_CLOSE_BAD_DATA);
        assert_null(b.data);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_blobs_with_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blob_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blob_tail_segments, setup, teardown),
        cmocka_unit_test(test_blob_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

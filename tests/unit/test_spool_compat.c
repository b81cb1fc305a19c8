/* test_spool_compat: the spool's format across builds (spool.h:
 * Versions). tests/fixtures/spool-v1 is a spool written by a real captured
 * sandbox of the build before the spool had a format file (made by
 * tests/fixtures/make_spool_fixture.py): this build reads every record of
 * it as the ingest would take it, and records its format. A spool of a
 * newer format, or with an unreadable format file, is refused at open (by
 * the owner and by a reader) before recovery touches a byte, with a
 * message that says what to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "delivery/spool.h"
#include "wire/event.h"

#define FIXTURE_RECORDS 27 /* seqs 0..26, none acked */

static char tmpdir[256], spooldir[300];

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    sg_autoclose int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, data, len), 0);
}

/* A copy of the fixture in spooldir. */
static int setup(void **state)
{
    (void)state;
    const char *src = getenv("SG_SPOOL_FIXTURE");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sg-test-spoolcompat-XXXXXX");
    if (!src || !mkdtemp(tmpdir))
        return -1;
    snprintf(spooldir, sizeof spooldir, "%s/spool", tmpdir);
    if (mkdir(spooldir, 0700) < 0)
        return -1;
    sg_autoclosedir DIR *d = opendir(src);
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", src, de->d_name);
        size_t n = 0;
        sg_err err = {0};
        sg_autofree char *data = sg_read_file(p, 1 << 20, &n, &err);
        if (!data)
            return -1;
        write_file(spooldir, de->d_name, data, n);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sg_err err;
    return sg_rm_rf(tmpdir, &err);
}

static bool exists(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", spooldir, name);
    return access(p, F_OK) == 0;
}

/* Every record, in order, is a frame the ingest takes. */
static void read_all(sg_spool *sp)
{
    sg_err err = {0};
    sg_spool_cursor *c = sg_spool_cursor_new(sp, -1, 0, &err);
    assert_non_null(c);
    char *rec, sandbox[64] = "";
    size_t len;
    int64_t seq, want = 0;
    int rc;
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &rec, &len, &seq, &err)) == 1) {
        assert_int_equal(seq, want++);
        sg_autojson json_t *j = json_loadb(rec, len, 0, NULL);
        assert_non_null(j);
        if (!sandbox[0])
            snprintf(sandbox, sizeof sandbox, "%s", json_string_value(json_object_get(j, "sandbox_id")));
        sg_event ev;
        assert_int_equal(sg_event_validate(rec, len, sandbox, &ev, &err), 0);
        assert_int_equal(ev.seq, seq);
        assert_true(sg_event_ts_valid(ev.ts, strlen(ev.ts)));
        if (seq == 0)
            assert_int_equal(ev.kind, SG_EV_SANDBOX);
        sg_event_clear(&ev);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(want, FIXTURE_RECORDS);
    sg_spool_cursor_free(c);
}

static void test_previous_build_read(void **state)
{
    (void)state;
    sg_err err = {0};
    assert_false(exists("format"));
    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(spooldir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.records, FIXTURE_RECORDS);
    assert_int_equal(rep.torn + rep.quarantined + rep.placeholders, 0);
    assert_false(rep.ack_reset);
    assert_int_equal(sg_spool_acked_seq(sp), -1);
    assert_int_equal(sg_spool_next_seq(sp), FIXTURE_RECORDS);
    read_all(sp);
    /* This build appends after them, in its format. */
    sg_autojson json_t *f = sg_event_frame(FIXTURE_RECORDS, SG_EV_ACTIVITY, NULL, NULL, NULL);
    sg_autofree char *line = sg_json_dump(f);
    assert_int_equal(sg_spool_append(sp, FIXTURE_RECORDS, line, strlen(line), &err), 0);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_close(sp);
    /* The format is recorded; the spool opens again as this build's. */
    size_t n = 0;
    char p[512];
    snprintf(p, sizeof p, "%s/format", spooldir);
    sg_autofree char *fmt = sg_read_file(p, 4096, &n, &err);
    assert_non_null(fmt);
    assert_string_equal(fmt, "sandglass spool format 2\n"); /* SG_SPOOL_FORMAT */
    sp = sg_spool_open(spooldir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.records, FIXTURE_RECORDS + 1);
    assert_false(exists("quarantine.log"));
    sg_spool_close(sp);
}

/* A spool this build must not read: refused whole, nothing touched. */
static void refused(const char *format, const char *want_msg)
{
    sg_err err = {0};
    write_file(spooldir, "format", format, strlen(format));
    assert_null(sg_spool_open(spooldir, NULL, &err));
    assert_int_equal(err.code, EPROTO);
    assert_non_null(strstr(err.msg, want_msg));
    assert_null(sg_spool_open_reader(spooldir, NULL, NULL, &err));
    assert_non_null(strstr(err.msg, want_msg));
    assert_false(exists("quarantine.log"));
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/seg-00000000000000000000.log", spooldir);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 7020); /* the fixture's segment, untouched */
}

static void test_newer_format_refused(void **state)
{
    (void)state;
    refused("sandglass spool format 3\n", "written by a newer sandglass; this build reads format 2: deliver it");
}

static void test_unreadable_format_refused(void **state)
{
    (void)state;
    refused("\x1b[31mnot a format\n", "unreadable format file");
    refused("sandglass spool format 0\n", "unreadable format file");
}

/* A fresh spool has the file from its start; a reader takes it. */
static void test_fresh_spool(void **state)
{
    (void)state;
    sg_err err = {0};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/fresh", tmpdir);
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    assert_non_null(sp);
    sg_spool *rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    sg_spool_close(rd);
    sg_spool_close(sp);
    char p[512];
    snprintf(p, sizeof p, "%s/format", dir);
    assert_int_equal(access(p, F_OK), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_previous_build_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_format_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreadable_format_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fresh_spool, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

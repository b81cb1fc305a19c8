/* test_spool: the spool on real files: append/sync/reopen, torn tail,
 * corrupt records, ack trimming, disk full on a real tiny tmpfs, recovery
 * after SIGKILL of a writer, and a read-only reader next to a real owner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "delivery/spool.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sg-test-spool-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    sg_err err;
    umount2(tmpdir, MNT_DETACH); /* the disk-full test mounts a tmpfs here */
    return sg_rm_rf(tmpdir, &err);
}

static char *spool_dir(void)
{
    return sg_strdup_printf("%s/spool", tmpdir);
}

/* Deterministic payload of a seq, so content can be checked after reopen. */
static size_t payload(char *buf, size_t cap, int64_t seq)
{
    int n = snprintf(buf, cap, "{\"seq\":%" PRId64 ",\"kind\":\"stdout\",\"payload\":{\"pad\":\"",
                     seq);
    size_t pad = (size_t)(seq % 97);
    for (size_t i = 0; i < pad && (size_t)n + 4 < cap; i++)
        buf[n++] = (char)('a' + (seq + (int64_t)i) % 26);
    n += snprintf(buf + n, cap - (size_t)n, "\"},\"ts\":\"t\"}");
    return (size_t)n;
}

static void append_n(sg_spool *sp, int64_t n)
{
    sg_err err;
    char buf[512];
    for (int64_t i = 0; i < n; i++) {
        int64_t seq = sg_spool_next_seq(sp);
        size_t len = payload(buf, sizeof buf, seq);
        assert_int_equal(sg_spool_append(sp, seq, buf, len, &err), 0);
    }
}

/* Reads every record after `after` and checks seq contiguity and content;
 * returns the number read. is_gap (optional) collects placeholder seqs. */
static int64_t check_all(sg_spool *sp, int64_t after, int64_t *gaps, size_t *ngaps)
{
    sg_err err;
    sg_spool_cursor *c = sg_spool_cursor_new(sp, after, 16, &err);
    assert_non_null(c);
    char *data;
    size_t len;
    int64_t seq, want = after + 1, n = 0;
    int rc;
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err)) == 1) {
        assert_int_equal(seq, want);
        memset(data - 16, 0xAA, 16); /* the headroom is ours to write */
        char buf[512];
        size_t el = payload(buf, sizeof buf, seq);
        if (len == el && memcmp(buf, data, len) == 0) {
            /* intact */
        } else {
            assert_non_null(memmem(data, len, "spool_gap", 9));
            assert_non_null(gaps);
            gaps[(*ngaps)++] = seq;
        }
        want++;
        n++;
    }
    assert_int_equal(rc, 0);
    sg_spool_cursor_free(c);
    return n;
}

static size_t count_segments(const char *dir)
{
    sg_autoclosedir DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "seg-", 4) == 0)
            n++;
    return n;
}

/* Path of the idx-th segment (sorted). */
static char *segment_path(const char *dir, size_t idx)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    assert_true(n > 0);
    char *out = NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(list[i]->d_name, "seg-", 4) == 0 && k++ == idx && !out)
            out = sg_strdup_printf("%s/%s", dir, list[i]->d_name);
        free(list[i]);
    }
    free(list);
    assert_non_null(out);
    return out;
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

/* ------------------------------------------------------------------ tests */

static void test_crc32c(void **state)
{
    /* The standard check value of CRC-32C. */
    assert_int_equal(sg_spool_crc32c(0, "123456789", 9), 0xE3069283u);
    /* Chaining equals one pass, across the 8-byte fast path. */
    const char *s = "The quick brown fox jumps over the lazy dog, twice over.";
    size_t n = strlen(s);
    for (size_t cut = 0; cut <= n; cut++)
        assert_int_equal(sg_spool_crc32c(sg_spool_crc32c(0, s, cut), s + cut, n - cut),
                         sg_spool_crc32c(0, s, n));
}

static void test_append_sync_reopen(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(sg_spool_next_seq(sp), 0);
    assert_int_equal(sg_spool_synced_seq(sp), -1);
    assert_int_equal(sg_spool_acked_seq(sp), -1);

    /* Wrong seq and oversized records are refused without side effects. */
    assert_int_equal(sg_spool_append(sp, 5, "x", 1, &err), -1);
    assert_int_equal(err.code, EINVAL);
    sg_autofree char *big = calloc(1, SG_SPOOL_RECORD_MAX + 1);
    assert_int_equal(sg_spool_append(sp, 0, big, SG_SPOOL_RECORD_MAX + 1, &err), -1);
    assert_int_equal(err.code, EMSGSIZE);

    append_n(sp, 100);
    assert_int_equal(sg_spool_next_seq(sp), 100);
    assert_int_equal(sg_spool_pending(sp), 100);

    /* Only synced records are readable by a cursor bounded by synced_seq. */
    sg_spool_cursor *c = sg_spool_cursor_new(sp, -1, 0, &err);
    char *data;
    size_t len;
    int64_t seq;
    assert_int_equal(sg_spool_cursor_next(c, sg_spool_synced_seq(sp), &data, &len, &seq, &err), 0);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    assert_int_equal(sg_spool_synced_seq(sp), 99);
    assert_int_equal(sg_spool_cursor_next(c, sg_spool_synced_seq(sp), &data, &len, &seq, &err), 1);
    assert_int_equal(seq, 0);
    /* max_seq bounds a cursor too. */
    assert_int_equal(sg_spool_cursor_next(c, 0, &data, &len, &seq, &err), 0);
    sg_spool_cursor_free(c);

    /* 10 more, not synced: a clean close keeps them (page cache) and the
     * reopen makes them durable. */
    append_n(sp, 10);
    sg_spool_close(sp);

    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_string_equal(rep.text, "");
    assert_int_equal(rep.records, 110);
    assert_int_equal(rep.first_seq, 0);
    assert_int_equal(rep.last_seq, 109);
    assert_int_equal(sg_spool_next_seq(sp), 110);
    assert_int_equal(sg_spool_synced_seq(sp), 109);
    assert_int_equal(check_all(sp, -1, NULL, NULL), 110);
    assert_int_equal(check_all(sp, 57, NULL, NULL), 52);

    /* One writer per spool. */
    assert_null(sg_spool_open(dir, NULL, &err));
    assert_int_equal(err.code, EBUSY);
    sg_spool_close(sp);
}

static void test_torn_tail(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    append_n(sp, 10);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_close(sp);
    sg_autofree char *seg = segment_path(dir, 0);
    off_t good = file_size(seg);

    /* A header that promises more than follows: a crash mid-write. */
    {
        sg_autoclose int fd = open(seg, O_WRONLY | O_APPEND);
        unsigned char hdr[SG_SPOOL_HDR_SIZE] = "SGR1";
        hdr[4] = 200;
        hdr[8] = 10;
        assert_int_equal(write(fd, hdr, sizeof hdr), (ssize_t)sizeof hdr);
        assert_int_equal(write(fd, "{\"seq\":10,", 10), 10);
    }
    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.torn, 1);
    assert_int_equal(rep.torn_bytes, SG_SPOOL_HDR_SIZE + 10);
    assert_int_equal(rep.quarantined, 0);
    assert_non_null(strstr(rep.text, "torn"));
    assert_int_equal(file_size(seg), good);
    assert_int_equal(sg_spool_next_seq(sp), 10);
    /* The cut-off seq is reused: it was never synced, so never sent. */
    append_n(sp, 1);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_close(sp);

    /* The last record cut in the middle of its payload. */
    assert_int_equal(truncate(seg, file_size(seg) - 3), 0);
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.torn, 1);
    assert_int_equal(sg_spool_next_seq(sp), 10);
    assert_int_equal(check_all(sp, -1, NULL, NULL), 10);
    sg_spool_close(sp);

    /* Reopening again finds nothing more to do. */
    sp = sg_spool_open(dir, &rep, &err);
    assert_string_equal(rep.text, "");
    sg_spool_close(sp);
}

static void flip_byte(const char *path, off_t off)
{
    sg_autoclose int fd = open(path, O_RDWR);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
}

/* Offset of the record with the given seq in a segment file. */
static off_t record_offset(const char *path, int64_t want)
{
    sg_autofree char *buf = sg_read_file(path, 64 << 20, NULL, NULL);
    size_t n = (size_t)file_size(path);
    size_t off = 0;
    while (off + SG_SPOOL_HDR_SIZE <= n) {
        uint32_t len;
        int64_t seq;
        memcpy(&len, buf + off + 4, 4);
        memcpy(&seq, buf + off + 8, 8);
        if (seq == want)
            return (off_t)off;
        off += SG_SPOOL_HDR_SIZE + len;
    }
    fail_msg("seq %" PRId64 " not found", want);
    return -1;
}

static void test_corrupt_middle(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    append_n(sp, 20);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_close(sp);
    sg_autofree char *seg = segment_path(dir, 0);

    /* Record 5: payload byte flipped (checksum). Record 12: magic broken,
     * so the reader has to find the next record by itself. */
    flip_byte(seg, record_offset(seg, 5) + SG_SPOOL_HDR_SIZE + 3);
    off_t r12 = record_offset(seg, 12);
    flip_byte(seg, r12);
    off_t r5 = record_offset(seg, 5), r6 = record_offset(seg, 6);

    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.quarantined, 2);
    assert_int_equal(rep.placeholders, 2);
    assert_int_equal(rep.torn, 0);
    assert_int_equal(rep.records, 18);
    assert_non_null(strstr(rep.text, "quarantine"));
    assert_int_equal(sg_spool_next_seq(sp), 20);
    int64_t gaps[4];
    size_t ng = 0;
    assert_int_equal(check_all(sp, -1, gaps, &ng), 20);
    assert_int_equal(ng, 2);
    assert_int_equal(gaps[0], 5);
    assert_int_equal(gaps[1], 12);
    sg_spool_close(sp);

    /* The corrupt bytes are kept in the quarantine file. */
    sg_autofree char *qpath = sg_strdup_printf("%s/quarantine.log", dir);
    size_t qlen;
    sg_autofree char *q = sg_read_file(qpath, 1 << 20, &qlen, &err);
    assert_non_null(q);
    assert_true(qlen >= (size_t)(r6 - r5));
    assert_non_null(strstr(q, "offset"));

    /* Recovery is idempotent. */
    sp = sg_spool_open(dir, &rep, &err);
    assert_string_equal(rep.text, "");
    assert_int_equal(rep.records, 20);
    sg_spool_close(sp);
}

static void test_corrupt_segment_end(void **state)
{
    /* The last record of a segment that is not the last one: not a torn
     * write (the writer went on), so quarantined and refilled, and the next
     * segment is untouched. */
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    sg_spool_set_segment_bytes(sp, 1024);
    append_n(sp, 60);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_close(sp);
    assert_true(count_segments(dir) >= 3);
    sg_autofree char *seg0 = segment_path(dir, 0);
    sg_autofree char *seg1 = segment_path(dir, 1);
    off_t end = file_size(seg0);
    flip_byte(seg0, end - 1);
    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_int_equal(rep.quarantined, 1);
    assert_int_equal(rep.torn, 0);
    assert_int_equal(rep.placeholders, 1);
    int64_t gaps[4];
    size_t ng = 0;
    assert_int_equal(check_all(sp, -1, gaps, &ng), 60);
    assert_int_equal(ng, 1);
    sg_spool_close(sp);

    /* A whole segment lost: its seqs are filled (the stream must stay
     * contiguous or the ingest's contiguous ack stalls forever). */
    int64_t first_of_2;
    {
        sp = sg_spool_open(dir, NULL, &err);
        sg_autofree char *seg2 = segment_path(dir, 2);
        first_of_2 = strtoll(strrchr(seg2, '/') + 5, NULL, 10);
        sg_spool_close(sp);
    }
    assert_int_equal(unlink(seg1), 0);
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_true(rep.placeholders > 0);
    ng = 0;
    int64_t many[64];
    assert_int_equal(check_all(sp, -1, many, &ng), 60);
    assert_true(ng >= 2);
    assert_true(many[ng - 1] == first_of_2 - 1);
    sg_spool_close(sp);
}

static void test_ack_trims(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    sg_spool_set_segment_bytes(sp, 1024);
    append_n(sp, 200);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    size_t before = count_segments(dir);
    assert_true(before > 10);

    sg_spool_cursor *c = sg_spool_cursor_new(sp, 100, 0, &err);
    char *data;
    size_t len;
    int64_t seq;
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), 1);
    assert_int_equal(seq, 101);

    assert_int_equal(sg_spool_ack(sp, 150, &err), 0);
    assert_int_equal(sg_spool_acked_seq(sp), 150);
    assert_int_equal(sg_spool_pending(sp), 49);
    size_t after = count_segments(dir);
    assert_true(after < before);
    assert_true(after >= 1);
    /* A cursor in a trimmed segment moves on to what is left. */
    int rc;
    int64_t last = seq;
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err)) == 1) {
        assert_true(seq > last);
        last = seq;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(last, 199);
    sg_spool_cursor_free(c);

    /* An old ack changes nothing. */
    assert_int_equal(sg_spool_ack(sp, 20, &err), 0);
    assert_int_equal(sg_spool_acked_seq(sp), 150);
    /* Everything acked: only the active segment stays. */
    assert_int_equal(sg_spool_ack(sp, 199, &err), 0);
    assert_int_equal(count_segments(dir), 1);
    assert_int_equal(sg_spool_pending(sp), 0);
    sg_spool_close(sp);

    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_string_equal(rep.text, "");
    assert_int_equal(sg_spool_acked_seq(sp), 199);
    assert_int_equal(sg_spool_next_seq(sp), 200);
    assert_int_equal(check_all(sp, 199, NULL, NULL), 0);
    assert_int_equal(sg_spool_ack(sp, 210, &err), 0); /* beyond what we have */
    assert_int_equal(sg_spool_next_seq(sp), 211);
    sg_spool_close(sp);

    /* A torn ack slot: the other slot still holds a valid (older) ack. */
    sg_autofree char *ackp = sg_strdup_printf("%s/ack", dir);
    sp = sg_spool_open(dir, NULL, &err);
    int64_t a = sg_spool_acked_seq(sp);
    sg_spool_close(sp);
    for (off_t o = 0; o < 64; o += 32) {
        sg_autoclose int fd = open(ackp, O_RDWR);
        unsigned char slot[32];
        assert_int_equal(pread(fd, slot, 32, o), 32);
        int64_t v;
        memcpy(&v, slot + 8, 8);
        if (v == a) {
            slot[9] ^= 1;
            assert_int_equal(pwrite(fd, slot, 32, o), 32);
        }
    }
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_false(rep.ack_reset);
    assert_true(sg_spool_acked_seq(sp) < a);
    assert_true(sg_spool_acked_seq(sp) >= 199);
    sg_spool_close(sp);

    /* The ack file lost while the segments start above 0: replay all, and
     * no placeholders for what was trimmed long ago. */
    assert_int_equal(unlink(ackp), 0);
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_true(rep.ack_reset);
    assert_int_equal(rep.placeholders, 0);
    assert_int_equal(sg_spool_acked_seq(sp), -1);
    assert_true(sg_spool_pending(sp) > 0);
    assert_true(sg_spool_pending(sp) < 200);
    sg_spool_close(sp);
    sp = sg_spool_open(dir, &rep, &err);
    assert_true(rep.ack_reset);
    assert_int_equal(rep.placeholders, 0);
    sg_spool_close(sp);
}

/* ENOSPC for real: a 64 KiB tmpfs in a private mount namespace. */
static void test_disk_full(void **state)
{
    if (geteuid() != 0)
        skip();
    sg_err err;
    assert_int_equal(unshare(CLONE_NEWNS), 0);
    assert_int_equal(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL), 0);
    assert_int_equal(mount("tmpfs", tmpdir, "tmpfs", 0, "size=64k,mode=0700"), 0);

    /* Ballast we delete later to "free space". */
    sg_autofree char *ballast = sg_strdup_printf("%s/ballast", tmpdir);
    {
        sg_autoclose int fd = open(ballast, O_WRONLY | O_CREAT, 0600);
        char blk[4096] = {0};
        for (int i = 0; i < 4; i++)
            assert_int_equal(write(fd, blk, sizeof blk), (ssize_t)sizeof blk);
    }
    sg_autofree char *dir = spool_dir();
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    assert_non_null(sp);
    char rec[1000];
    memset(rec, 'x', sizeof rec);
    int64_t ok = 0, failed = 0, first_fail = -1;
    for (int i = 0; i < 200; i++) {
        int64_t seq = sg_spool_next_seq(sp);
        if (sg_spool_append(sp, seq, rec, sizeof rec, &err) == 0) {
            assert_int_equal(failed, 0); /* no success between failures here */
            ok++;
        } else {
            assert_true(err.code == ENOSPC || err.code == EDQUOT);
            if (first_fail < 0)
                first_fail = seq;
            assert_int_equal(seq, first_fail); /* no seq consumed */
            failed++;
        }
    }
    assert_true(ok > 10);
    assert_true(failed > 10);
    /* The segment holds exactly the good records. */
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    assert_int_equal(sg_spool_synced_seq(sp), ok - 1);

    /* Space comes back: the next append goes on with the same seq and the
     * loss is reported once. */
    assert_int_equal(unlink(ballast), 0);
    int64_t seq = sg_spool_next_seq(sp);
    assert_int_equal(seq, ok);
    assert_int_equal(sg_spool_append(sp, seq, rec, sizeof rec, &err), 0);
    assert_int_equal(sg_spool_sync(sp, &err), 0);
    sg_spool_loss loss;
    assert_true(sg_spool_take_loss(sp, &loss));
    assert_int_equal(loss.count, failed);
    assert_int_equal(loss.first_seq, first_fail);
    assert_int_equal(loss.err, ENOSPC);
    assert_false(sg_spool_take_loss(sp, &loss));
    sg_spool_close(sp);

    /* Never corrupted: a reopen finds every record valid and contiguous. */
    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_string_equal(rep.text, "");
    assert_int_equal(rep.records, ok + 1);
    assert_int_equal(sg_spool_next_seq(sp), ok + 1);
    sg_spool_cursor *c = sg_spool_cursor_new(sp, -1, 0, &err);
    char *data;
    size_t len;
    int64_t s, n = 0;
    while (sg_spool_cursor_next(c, INT64_MAX, &data, &len, &s, &err) == 1) {
        assert_int_equal(s, n++);
        assert_int_equal(len, sizeof rec);
    }
    assert_int_equal(n, ok + 1);
    sg_spool_cursor_free(c);
    sg_spool_close(sp);
}

/* A child appends, syncs and acks in a loop and reports each synced seq on
 * a pipe; it is SIGKILLed at a random moment; the reopened spool must hold
 * every synced seq, contiguous, with the right content. */
static void writer_child(const char *dir, int wfd)
{
    sg_err err;
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    if (!sp)
        _exit(2);
    sg_spool_set_segment_bytes(sp, 8192);
    char buf[512];
    unsigned r = (unsigned)getpid();
    for (;;) {
        int batch = 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % 20;
        for (int i = 0; i < batch; i++) {
            int64_t seq = sg_spool_next_seq(sp);
            size_t len = payload(buf, sizeof buf, seq);
            if (sg_spool_append(sp, seq, buf, len, &err) < 0)
                _exit(3);
        }
        if (sg_spool_sync(sp, &err) < 0)
            _exit(4);
        int64_t s = sg_spool_synced_seq(sp);
        if (s > 300 && s % 7 == 0 && sg_spool_ack(sp, s - 300, &err) < 0)
            _exit(5);
        if (write(wfd, &s, sizeof s) != sizeof s)
            _exit(6);
    }
}

/* In a child: a spool whose fdatasync fails (EIO, from a seccomp filter:
 * tmpfs and a healthy disk never fail one). Exits 0 when the spool cut
 * the unsynced records off, rewound next_seq and counted the loss. */
static void sync_eio_child(const char *dir)
{
    sg_err err;
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    if (!sp)
        _exit(2);
    char buf[512];
    for (int64_t seq = 0; seq < 5; seq++) {
        size_t len = payload(buf, sizeof buf, seq);
        if (sg_spool_append(sp, seq, buf, len, &err) < 0)
            _exit(3);
    }
    if (sg_spool_sync(sp, &err) < 0 || sg_spool_synced_seq(sp) != 4)
        _exit(4);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fdatasync, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EIO & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
        _exit(5);
    for (int64_t seq = 5; seq < 10; seq++) {
        size_t len = payload(buf, sizeof buf, seq);
        if (sg_spool_append(sp, seq, buf, len, &err) < 0)
            _exit(6);
    }
    if (sg_spool_sync(sp, &err) != -1 || err.code != EIO)
        _exit(7);
    sg_spool_loss loss;
    if (sg_spool_next_seq(sp) != 5 || sg_spool_synced_seq(sp) != 4 || !sg_spool_take_loss(sp, &loss) ||
        loss.count != 5 || loss.first_seq != 5 || loss.last_seq != 9 || loss.err != EIO)
        _exit(8);
    sg_spool_close(sp);
    _exit(0);
}

/* README: "a failed fdatasync cuts off the unsynced records and rewinds
 * the seq (only synced records are ever sent)". */
static void test_sync_failure_rewinds(void **state)
{
    sg_err err;
    char dir[sizeof tmpdir + 16]; /* not on the heap: the child _exits with it */
    snprintf(dir, sizeof dir, "%s/spool", tmpdir);
    pid_t pid = sgt_fork();
    assert_true(pid >= 0);
    if (pid == 0)
        sync_eio_child(dir);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* On disk: exactly the synced records, whole and contiguous. */
    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(dir, &rep, &err);
    assert_non_null(sp);
    assert_int_equal(rep.quarantined, 0);
    assert_int_equal(sg_spool_next_seq(sp), 5);
    assert_int_equal(check_all(sp, -1, NULL, NULL), 5);
    sg_spool_close(sp);
}

static void test_sigkill(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    srand((unsigned)ts.tv_nsec);
    int64_t prev_next = 0;
    for (int round = 0; round < 8; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = sgt_fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            writer_child(dir, p[1]);
        }
        close(p[1]);
        /* the writer has synced some records this round before the kill
         * (a fixed sleep alone is not enough under valgrind on a loaded
         * host: the last check needs the spool to grow) */
        int64_t s, synced = -1;
        while (synced < prev_next + 15 && read(p[0], &s, sizeof s) == sizeof s)
            synced = s;
        usleep(20000 + (useconds_t)(rand() % 100000));
        assert_int_equal(kill(pid, SIGKILL), 0);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        while (read(p[0], &s, sizeof s) == sizeof s)
            synced = s;
        close(p[0]);

        sg_spool_report rep;
        sg_spool *sp = sg_spool_open(dir, &rep, &err);
        assert_non_null(sp);
        assert_int_equal(rep.quarantined, 0);
        int64_t next = sg_spool_next_seq(sp);
        assert_true(next >= synced + 1); /* nothing synced is lost */
        int64_t acked = sg_spool_acked_seq(sp);
        /* Every record from the ack on, contiguous and intact. */
        assert_int_equal(check_all(sp, acked, NULL, NULL), next - 1 - acked);
        prev_next = next;
        sg_spool_close(sp);
    }
    assert_true(prev_next > 100);
}

/* ------------------------------------------------------------ reader tests */

/* What a reader's ack_fn saw; with an owner, it forwards the ack to it as
 * the supervisor does. */
typedef struct acks {
    sg_spool *owner;
    int calls;
    int64_t last;
} acks;

static void on_ack(void *ud, int64_t seq)
{
    acks *a = ud;
    a->calls++;
    a->last = seq;
    sg_err err;
    if (a->owner && sg_spool_ack(a->owner, seq, &err) < 0)
        fail_msg("owner ack %" PRId64 ": %s", seq, err.msg);
}

/* Syncs the owner and reports its synced seq to the reader. */
static void sync_report(sg_spool *owner, sg_spool *rd)
{
    sg_err err;
    assert_int_equal(sg_spool_sync(owner, &err), 0);
    sg_spool_reader_set_synced(rd, sg_spool_synced_seq(owner));
}

/* Reads with c until it has nothing more: exactly seqs first..last, in
 * order, with their payload bytes. */
static void expect_records(sg_spool_cursor *c, int64_t max_seq, int64_t first, int64_t last)
{
    sg_err err;
    char *data;
    size_t len;
    int64_t seq, want = first;
    int rc;
    while ((rc = sg_spool_cursor_next(c, max_seq, &data, &len, &seq, &err)) == 1) {
        assert_int_equal(seq, want);
        char buf[512];
        size_t el = payload(buf, sizeof buf, seq);
        assert_int_equal(len, el);
        assert_memory_equal(data, buf, len);
        want++;
    }
    if (rc < 0)
        fail_msg("cursor at %" PRId64 ": %s", want, err.msg);
    assert_int_equal(want, last + 1);
}

/* First seq of the idx-th segment (sorted), from its name. */
static int64_t segment_first(const char *dir, size_t idx)
{
    sg_autofree char *p = segment_path(dir, idx);
    return strtoll(strrchr(p, '/') + 5, NULL, 10);
}

/* The last seq of the segment that holds seq (not the newest segment). */
static int64_t segment_last_of(const char *dir, int64_t seq)
{
    size_t n = count_segments(dir);
    for (size_t i = 0; i + 1 < n; i++)
        if (segment_first(dir, i + 1) > seq)
            return segment_first(dir, i + 1) - 1;
    fail_msg("seq %" PRId64 " is in the newest segment", seq);
    return -1;
}

/* Path of the segment that holds seq (the last one named at or below it). */
static char *segment_of(const char *dir, int64_t seq)
{
    size_t n = count_segments(dir), i = 0;
    while (i + 1 < n && segment_first(dir, i + 1) <= seq)
        i++;
    return segment_path(dir, i);
}

static void test_reader_reads_synced(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *owner = sg_spool_open(dir, NULL, &err);
    assert_non_null(owner);
    acks a = {0};
    sg_spool *rd = sg_spool_open_reader(dir, on_ack, &a, &err);
    assert_non_null(rd);
    sg_spool_cursor *c = sg_spool_cursor_new(rd, -1, 16, &err);
    assert_non_null(c);
    /* An empty spool: nothing synced, nothing to read. */
    assert_int_equal(sg_spool_synced_seq(rd), -1);
    assert_int_equal(sg_spool_next_seq(rd), 0);
    sg_spool_reader_set_synced(rd, -1);
    expect_records(c, INT64_MAX, 0, -1);

    append_n(owner, 50);
    assert_int_equal(sg_spool_sync(owner, &err), 0);
    /* Synced on disk, but not reported yet. */
    expect_records(c, INT64_MAX, 0, -1);
    sg_spool_reader_set_synced(rd, 49);
    assert_int_equal(sg_spool_synced_seq(rd), 49);
    assert_int_equal(sg_spool_next_seq(rd), 50);
    assert_int_equal(sg_spool_pending(rd), 50);
    /* max_seq bounds a reader's cursor as an owner's. */
    expect_records(c, 9, 0, 9);
    expect_records(c, INT64_MAX, 10, 49);

    /* Appended (even synced) but not reported: never returned. */
    append_n(owner, 10);
    expect_records(c, INT64_MAX, 50, 49);
    assert_int_equal(sg_spool_sync(owner, &err), 0);
    expect_records(c, INT64_MAX, 50, 49);
    sg_spool_reader_set_synced(rd, 59);
    sg_spool_reader_set_synced(rd, 30); /* never backwards */
    assert_int_equal(sg_spool_synced_seq(rd), 59);
    expect_records(c, INT64_MAX, 50, 59);

    /* Bytes the cursor read ahead before they were synced are read again:
     * record 66 is "half written" (a byte off) when the window takes it in,
     * then completed and synced. */
    append_n(owner, 10);
    sg_autofree char *seg = segment_path(dir, 0);
    off_t r66 = record_offset(seg, 66) + SG_SPOOL_HDR_SIZE + 5;
    flip_byte(seg, r66);
    sg_spool_reader_set_synced(rd, 64);
    expect_records(c, INT64_MAX, 60, 64);
    flip_byte(seg, r66);
    sync_report(owner, rd);
    expect_records(c, INT64_MAX, 65, 69);

    /* A reader reads whatever an owner's cursor reads, from any point, and
     * the headroom before each payload is the caller's (LWS_PRE). */
    sg_spool_cursor_seek(c, 33);
    for (int64_t want = 34; want < 37; want++) {
        char *data;
        size_t len;
        int64_t seq;
        assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), 1);
        assert_int_equal(seq, want);
        memset(data - 16, 0xAA, 16);
    }
    expect_records(c, INT64_MAX, 37, 69);
    sg_spool_cursor *c2 = sg_spool_cursor_new(rd, 68, 0, &err);
    expect_records(c2, INT64_MAX, 69, 69);
    sg_spool_cursor_free(c2);

    sg_spool_stats st;
    sg_spool_get_stats(rd, &st);
    assert_int_equal(st.next_seq, 70);
    assert_int_equal(st.synced_seq, 69);
    assert_int_equal(st.acked_seq, -1);
    assert_int_equal(st.pending, 70);
    assert_int_equal(st.appended, 0);
    assert_int_equal(a.calls, 0);
    sg_spool_cursor_free(c);
    sg_spool_close(rd);
    sg_spool_close(owner);
}

static void test_reader_rotation(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *owner = sg_spool_open(dir, NULL, &err);
    sg_spool_set_segment_bytes(owner, 1024);
    sg_spool *rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    sg_spool_set_segment_bytes(rd, 1024); /* harmless */
    sg_spool_cursor *c = sg_spool_cursor_new(rd, -1, 0, &err);

    /* Reading while the owner writes: the cursor follows each rotation. */
    for (int round = 0; round < 10; round++) {
        int64_t from = sg_spool_next_seq(owner);
        append_n(owner, 30);
        sync_report(owner, rd);
        expect_records(c, INT64_MAX, from, from + 29);
    }
    assert_true(count_segments(dir) > 10);
    /* And in one go over all of them, from the start and from the middle. */
    sg_spool_cursor_seek(c, -1);
    expect_records(c, INT64_MAX, 0, 299);
    int64_t mid = segment_first(dir, 5);
    sg_spool_cursor_seek(c, mid - 1); /* the last record of a segment */
    expect_records(c, INT64_MAX, mid, 299);
    sg_spool_cursor_seek(c, mid);
    expect_records(c, INT64_MAX, mid + 1, 299);
    sg_spool_cursor_free(c);
    sg_spool_close(rd);
    sg_spool_close(owner);
}

static void test_reader_ack(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *owner = sg_spool_open(dir, NULL, &err);
    sg_spool_set_segment_bytes(owner, 1024);
    acks a = {.owner = owner};
    sg_spool *rd = sg_spool_open_reader(dir, on_ack, &a, &err);
    append_n(owner, 200);
    sync_report(owner, rd);
    size_t before = count_segments(dir);
    assert_true(before > 10);

    sg_spool_cursor *c = sg_spool_cursor_new(rd, -1, 0, &err);
    sg_spool_cursor *behind = sg_spool_cursor_new(rd, -1, 0, &err);
    expect_records(c, 30, 0, 30);
    expect_records(behind, 10, 0, 10);
    /* The ingest acks the rest of the cursor's segment: the owner trims
     * it while the cursor has it open. */
    sg_autofree char *cur = segment_of(dir, 31);
    int64_t seg0_last = segment_last_of(dir, 0), cur_last = segment_last_of(dir, 31);
    assert_true(seg0_last > 10 && seg0_last < 31);
    assert_true(cur_last > 31);
    assert_int_equal(sg_spool_ack(rd, cur_last, &err), 0);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.last, cur_last);
    assert_int_equal(sg_spool_acked_seq(rd), cur_last);
    assert_int_equal(sg_spool_acked_seq(owner), cur_last);
    assert_int_equal(sg_spool_pending(rd), (uint64_t)(199 - cur_last));
    assert_true(count_segments(dir) < before);
    assert_int_equal(access(cur, F_OK), -1);
    /* The open, deleted segment still reads, then the next one. */
    expect_records(c, 60, 31, 60);
    /* A cursor further behind reads its open segment to the end, then
     * skips the acked records whose segments are gone. */
    expect_records(behind, seg0_last, 11, seg0_last);
    expect_records(behind, 60, cur_last + 1, 60);

    /* An ack far ahead of a cursor at the end of its segment: the records
     * it covers are gone, and the cursor goes on with the oldest left (an
     * owner's cursor does too). */
    int64_t end = segment_last_of(dir, 61);
    expect_records(c, end, 61, end);
    assert_int_equal(sg_spool_ack(rd, 100, &err), 0);
    assert_int_equal(a.calls, 2);
    assert_int_equal(sg_spool_acked_seq(owner), 100);
    assert_int_equal(sg_spool_pending(rd), 99);
    /* An ack not above the current one is not passed on. */
    assert_int_equal(sg_spool_ack(rd, 20, &err), 0);
    assert_int_equal(sg_spool_ack(rd, 100, &err), 0);
    assert_int_equal(a.calls, 2);
    assert_int_equal(sg_spool_acked_seq(rd), 100);
    int64_t oldest = segment_first(dir, 0);
    assert_true(oldest > end + 1 && oldest <= 101);
    expect_records(c, INT64_MAX, oldest, 199);
    sg_spool_cursor_free(behind); /* with a deleted segment open */

    /* Fresh cursors after the trim: from the ack, and from before it. */
    sg_spool_cursor *c2 = sg_spool_cursor_new(rd, 100, 0, &err);
    expect_records(c2, INT64_MAX, 101, 199);
    sg_spool_cursor_seek(c2, -1);
    expect_records(c2, INT64_MAX, oldest, 199);

    /* The owner goes on; both cursors see the new records; everything acked
     * leaves only the owner's active segment. */
    append_n(owner, 50);
    sync_report(owner, rd);
    expect_records(c, INT64_MAX, 200, 249);
    expect_records(c2, INT64_MAX, 200, 249);
    assert_int_equal(sg_spool_ack(rd, 249, &err), 0);
    assert_int_equal(count_segments(dir), 1);
    assert_int_equal(sg_spool_pending(rd), 0);
    append_n(owner, 5);
    sync_report(owner, rd);
    expect_records(c, INT64_MAX, 250, 254);
    expect_records(c2, INT64_MAX, 250, 254);
    sg_spool_cursor_seek(c2, 249);
    expect_records(c2, INT64_MAX, 250, 254);

    /* The ingest acks beyond what we have (its store outlived our spool):
     * passed on, the owner skips those seqs, and the synced seq stays what
     * the owner reports. */
    assert_int_equal(sg_spool_ack(rd, 300, &err), 0);
    assert_int_equal(a.last, 300);
    assert_int_equal(sg_spool_next_seq(owner), 301);
    assert_int_equal(sg_spool_next_seq(rd), 301);
    assert_int_equal(sg_spool_synced_seq(rd), 254);
    assert_int_equal(sg_spool_pending(rd), 0);
    append_n(owner, 3);
    sync_report(owner, rd);
    expect_records(c, INT64_MAX, 301, 303); /* over the acked hole */
    sg_spool_cursor_seek(c2, 300);
    expect_records(c2, INT64_MAX, 301, 303);

    sg_spool_cursor_free(c2);
    sg_spool_cursor_free(c);
    sg_spool_close(rd);
    sg_spool_close(owner);

    /* The owner reopening finds the acks the reader passed on. */
    sg_spool_report rep;
    owner = sg_spool_open(dir, &rep, &err);
    assert_non_null(owner);
    assert_int_equal(sg_spool_acked_seq(owner), 300);
    assert_int_equal(rep.quarantined, 0);
    sg_spool_close(owner);
}

static void test_reader_ack_file(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *owner = sg_spool_open(dir, NULL, &err);
    sg_spool_set_segment_bytes(owner, 1024);
    append_n(owner, 100);
    assert_int_equal(sg_spool_sync(owner, &err), 0);
    assert_int_equal(sg_spool_ack(owner, 40, &err), 0);

    sg_spool *rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    assert_int_equal(sg_spool_acked_seq(rd), 40);
    assert_int_equal(sg_spool_synced_seq(rd), -1);
    assert_int_equal(sg_spool_next_seq(rd), 41);
    assert_int_equal(sg_spool_pending(rd), 0);
    sg_spool_reader_set_synced(rd, 99);
    assert_int_equal(sg_spool_pending(rd), 59);
    assert_int_equal(sg_spool_next_seq(rd), 100);
    sg_spool_cursor *c = sg_spool_cursor_new(rd, sg_spool_acked_seq(rd), 0, &err);
    expect_records(c, INT64_MAX, 41, 99);
    sg_spool_cursor_free(c);
    sg_spool_ack(rd, 60, &err); /* no ack_fn: recorded, nothing written */
    assert_int_equal(sg_spool_acked_seq(rd), 60);
    sg_spool_close(rd);
    assert_int_equal(sg_spool_acked_seq(owner), 40);
    sg_spool_close(owner);

    /* An unreadable ack file: -1, everything on disk is replayed (its
     * oldest record is above 0: the rest was trimmed). */
    sg_autofree char *ackp = sg_strdup_printf("%s/ack", dir);
    {
        sg_autoclose int fd = open(ackp, O_WRONLY | O_TRUNC);
        assert_int_equal(write(fd, "garbage", 7), 7);
    }
    rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    assert_int_equal(sg_spool_acked_seq(rd), -1);
    sg_spool_reader_set_synced(rd, 99);
    assert_int_equal(sg_spool_pending(rd), 100);
    int64_t oldest = segment_first(dir, 0);
    assert_true(oldest > 0 && oldest <= 41);
    c = sg_spool_cursor_new(rd, -1, 0, &err);
    expect_records(c, INT64_MAX, oldest, 99);
    sg_spool_cursor_free(c);
    sg_spool_close(rd);

    /* No ack file at all: -1 as well. */
    assert_int_equal(unlink(ackp), 0);
    rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    assert_int_equal(sg_spool_acked_seq(rd), -1);
    sg_spool_close(rd);
    assert_int_equal(access(ackp, F_OK), -1); /* and it made none */
}

static void test_reader_refuses_and_detects(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir();
    sg_spool *owner = sg_spool_open(dir, NULL, &err);
    sg_spool_set_segment_bytes(owner, 1024);
    append_n(owner, 60);
    assert_int_equal(sg_spool_sync(owner, &err), 0);
    sg_spool_close(owner); /* the reader needs no live owner */
    size_t nseg = count_segments(dir);
    assert_true(nseg >= 4);
    sg_autofree char *seg0 = segment_path(dir, 0);
    off_t size0 = file_size(seg0);

    sg_spool *rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    sg_spool_reader_set_synced(rd, 59);
    char buf[512];
    size_t len = payload(buf, sizeof buf, 60);
    assert_int_equal(sg_spool_append(rd, 60, buf, len, &err), -1);
    assert_int_equal(err.code, EPERM);
    assert_non_null(strstr(err.msg, "read-only spool reader"));
    assert_int_equal(sg_spool_sync(rd, &err), -1);
    assert_int_equal(err.code, EPERM);
    assert_non_null(strstr(err.msg, "read-only spool reader"));
    sg_spool_loss loss;
    assert_false(sg_spool_take_loss(rd, &loss));
    assert_int_equal(count_segments(dir), nseg);
    assert_int_equal(file_size(seg0), size0);

    /* A half-written record after the synced ones is never looked at. */
    sg_autofree char *last = segment_path(dir, nseg - 1);
    {
        sg_autoclose int fd = open(last, O_WRONLY | O_APPEND);
        assert_int_equal(write(fd, "SGR1\xff\xff", 6), 6);
    }
    sg_spool_cursor *c = sg_spool_cursor_new(rd, -1, 0, &err);
    expect_records(c, INT64_MAX, 0, 59);

    /* A payload byte flipped in a synced record: EBADMSG, naming where. */
    sg_autofree char *seg1 = segment_path(dir, 1);
    int64_t first1 = segment_first(dir, 1);
    flip_byte(seg1, record_offset(seg1, first1 + 1) + SG_SPOOL_HDR_SIZE + 2);
    sg_spool_cursor_seek(c, -1);
    char *data;
    int64_t seq;
    int rc;
    int64_t n = 0;
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err)) == 1)
        n++;
    assert_int_equal(rc, -1);
    assert_int_equal(n, first1 + 1);
    assert_int_equal(err.code, EBADMSG);
    assert_non_null(strstr(err.msg, "checksum"));
    assert_non_null(strstr(err.msg, strrchr(seg1, '/') + 1));
    assert_non_null(strstr(err.msg, "offset"));
    /* It stays put: the same error again, no crash. */
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), -1);
    assert_int_equal(err.code, EBADMSG);
    flip_byte(seg1, record_offset(seg1, first1 + 1) + SG_SPOOL_HDR_SIZE + 2);

    /* A broken header (magic). */
    off_t r5 = record_offset(seg0, 5);
    flip_byte(seg0, r5);
    sg_spool_cursor_seek(c, 4);
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), -1);
    assert_int_equal(err.code, EBADMSG);
    assert_non_null(strstr(err.msg, "bad record header"));
    flip_byte(seg0, r5);

    /* A segment gone that nothing acked: the seqs do not follow on. */
    sg_autofree char *seg2 = segment_path(dir, 2);
    int64_t first2 = segment_first(dir, 2);
    assert_int_equal(unlink(seg2), 0);
    sg_spool_cursor_seek(c, first2 - 2);
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), 1);
    assert_int_equal(seq, first2 - 1);
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), -1);
    assert_int_equal(err.code, EBADMSG);
    assert_non_null(strstr(err.msg, "was expected"));
    /* The newest segment gone: synced seqs nowhere on disk. */
    assert_int_equal(unlink(last), 0);
    int64_t first_last = strtoll(strrchr(last, '/') + 5, NULL, 10);
    sg_spool_cursor_seek(c, first_last - 1);
    assert_int_equal(sg_spool_cursor_next(c, INT64_MAX, &data, &len, &seq, &err), -1);
    assert_int_equal(err.code, ENODATA);
    assert_non_null(strstr(err.msg, "no segment holds it"));
    sg_spool_cursor_free(c);
    sg_spool_close(rd);
}

static void test_reader_open_errors(void **state)
{
    sg_err err;
    sg_autofree char *dir = spool_dir(); /* never created */
    assert_null(sg_spool_open_reader(dir, NULL, NULL, &err));
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.msg, dir));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(access(dir, F_OK), -1); /* not created either */

    sg_autofree char *file = sg_strdup_printf("%s/file", tmpdir);
    {
        sg_autoclose int fd = open(file, O_WRONLY | O_CREAT, 0600);
        assert_true(fd >= 0);
    }
    assert_null(sg_spool_open_reader(file, NULL, NULL, &err));
    assert_int_equal(err.code, ENOTDIR);

    /* A reader takes no lock: it opens next to a live owner, and the owner
     * still opens next to a reader (one owner only). */
    sg_spool *owner = sg_spool_open(dir, NULL, &err);
    assert_non_null(owner);
    sg_spool *rd = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd);
    sg_spool *rd2 = sg_spool_open_reader(dir, NULL, NULL, &err);
    assert_non_null(rd2);
    sg_spool_close(owner);
    owner = sg_spool_open(dir, NULL, &err);
    assert_non_null(owner);
    sg_spool_close(rd2);
    sg_spool_close(rd);
    sg_spool_close(owner);
    sg_spool_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test_setup_teardown(test_sync_failure_rewinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_sync_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_middle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_segment_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ack_trims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_reads_synced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_ack, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_ack_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_refuses_and_detects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_open_errors, setup, teardown),
        /* last: it moves this process into its own mount namespace */
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

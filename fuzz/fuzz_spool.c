/* fuzz_spool: arbitrary bytes as spool segment files (and ack file) for
 * the recovery reader. Properties checked beyond "no crash": recovery
 * yields records with strictly increasing, contiguous seqs that read back
 * with valid checksums; every record read back is one found whole in the
 * input (recovery invents nothing but its spool_gap placeholders, with the
 * seq they stand for); no blob record is left after the last event; a
 * second recovery finds nothing left to repair or drop;
 * the recovered spool accepts the next append, which reads back.
 * Seeds: fuzz/gen_spool_corpus.py writes fuzz/corpus/spool. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "delivery/spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put(const char *dir, const char *name, const uint8_t *b, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    sg_err err;
    if (sg_write_file_atomic(path, b, n, 0600, &err) < 0)
        abort();
}

/* Whether a recovered record is one of the input's: its header (with this
 * seq) and payload found together, or the placeholder for this seq. */
static bool from_input(const uint8_t *in, size_t n, const char *rec, size_t len, int64_t seq, uint32_t type)
{
    char want[64];
    snprintf(want, sizeof want, "{\"seq\":%lld,\"kind\":\"activity\"", (long long)seq);
    if (len > strlen(want) && memcmp(rec, want, strlen(want)) == 0 &&
        memmem(rec, len, "\"spool_gap\"", 11))
        return true;
    uint8_t hdr[20] = "SGR1";
    uint32_t l32 = (uint32_t)len;
    uint64_t s64 = (uint64_t)seq;
    memcpy(hdr + 4, &l32, 4); /* little-endian hosts only, as the harness's ack slot */
    memcpy(hdr + 8, &s64, 8);
    memcpy(hdr + 16, &type, 4); /* an event's or a blob's record (spool.h) */
    for (const uint8_t *p = in; n - (size_t)(p - in) >= sizeof hdr + 4 + len;) {
        const uint8_t *h = memmem(p, n - (size_t)(p - in), hdr, sizeof hdr);
        if (!h)
            return false;
        size_t left = n - (size_t)(h - in);
        if (left >= sizeof hdr + 4 + len && memcmp(h + 24, rec, len) == 0)
            return true;
        p = h + 1;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char dir[128];
    snprintf(dir, sizeof dir, "/dev/shm/sg-fuzz-spool-%d", (int)getpid());
    sg_err err;
    sg_rm_rf(dir, &err);
    if (sg_mkdir_p(dir, 0700, &err) < 0)
        abort();

    /* byte 0: layout flags; byte 1: split point / ack seq */
    uint8_t flags = data[0], b1 = data[1];
    data += 2;
    size -= 2;
    if (flags & 1) {
        size_t cut = size ? (size * b1) / 256 : 0;
        put(dir, "seg-00000000000000000000.log", data, cut);
        put(dir, "seg-00000000000000000007.log", data + cut, size - cut);
    } else {
        put(dir, "seg-00000000000000000000.log", data, size);
    }
    if (flags & 2) {
        /* a valid ack slot for seq b1 - 1 */
        uint8_t slot[32] = "SGAK";
        int64_t s = (int64_t)b1 - 1;
        memcpy(slot + 8, &s, 8);
        uint32_t c = sg_spool_crc32c(0, slot, 16);
        memcpy(slot + 16, &c, 4);
        put(dir, "ack", slot, sizeof slot);
    }

    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(dir, &rep, &err);
    if (!sp)
        abort(); /* recovery must always succeed on a writable dir */
    sg_spool_cursor *c = sg_spool_cursor_new(sp, -1, 16, &err);
    char *rec;
    size_t len;
    int64_t seq, prev = -1;
    int rc;
    bool blob = false;
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &rec, &len, &seq, &err)) == 1) {
        /* a blob record carries the seq of the event after it and takes none */
        blob = sg_spool_cursor_was_blob(c);
        if (prev >= 0 && seq != prev + 1)
            abort();
        if (!blob)
            prev = seq;
        if (!from_input(data, size, rec, len, seq, blob ? SG_SPOOL_REC_BLOB : SG_SPOOL_REC_EVENT))
            abort();
    }
    if (rc < 0)
        abort();
    /* blobs after the spool's last event (their event never written) were
     * dropped at recovery, whichever segment they were in */
    if (blob)
        abort();
    sg_spool_cursor_free(c);
    int64_t next = sg_spool_next_seq(sp);
    if (prev >= next)
        abort();
    sg_spool_close(sp);

    sp = sg_spool_open(dir, &rep, &err);
    if (!sp || rep.torn || rep.quarantined || rep.placeholders || rep.blobs_dropped ||
        sg_spool_next_seq(sp) != next)
        abort();
    if (sg_spool_append(sp, next, "{}", 2, &err) < 0 || sg_spool_sync(sp, &err) < 0)
        abort();
    c = sg_spool_cursor_new(sp, next - 1, 0, &err);
    if (!c)
        abort();
    /* blob records left without their event (a crash between the two) come
     * first; one past a cut tail may carry a later seq: harmless, a blob
     * frame has no seq on the wire and its content is stored by hash */
    while ((rc = sg_spool_cursor_next(c, INT64_MAX, &rec, &len, &seq, &err)) == 1 && sg_spool_cursor_was_blob(c))
        if (seq < next)
            abort();
    if (rc != 1 || seq != next || len != 2 || memcmp(rec, "{}", 2) != 0)
        abort();
    sg_spool_cursor_free(c);
    sg_spool_close(sp);
    sg_rm_rf(dir, &err);
    return 0;
}

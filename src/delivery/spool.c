/* spool: durable, checksummed, group-committed event log (see spool.h).
 * This file: CRC32C, the record and ack formats, open and close, and the
 * writer; recovery is in spool_recover.c, reading in spool_cursor.c. */
#include "delivery/spool.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "delivery/spool_internal.h"

#define ACK_MAGIC "SGAK"

/* ------------------------------------------------------------------ CRC32C */

static uint32_t crc_tab[8][256];

__attribute__((constructor)) static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_tab[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_tab[k][i] = (crc_tab[k - 1][i] >> 8) ^ crc_tab[0][crc_tab[k - 1][i] & 0xff];
}

uint32_t sg_spool_crc32c(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    crc = ~crc;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_tab[7][w & 0xff] ^ crc_tab[6][(w >> 8) & 0xff] ^
              crc_tab[5][(w >> 16) & 0xff] ^ crc_tab[4][(w >> 24) & 0xff] ^
              crc_tab[3][(w >> 32) & 0xff] ^ crc_tab[2][(w >> 40) & 0xff] ^
              crc_tab[1][(w >> 48) & 0xff] ^ crc_tab[0][w >> 56];
        p += 8;
        len -= 8;
    }
#endif
    while (len--)
        crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ----------------------------------------------------------------- records */

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

uint64_t sg_spool_get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

static void put32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

void sg_spool_rec_header(uint8_t hdr[SG_SPOOL_HDR_SIZE], int64_t seq, uint32_t type,
                         const void *data, size_t len)
{
    memcpy(hdr, SG_SPOOL_REC_MAGIC, 4);
    put32(hdr + 4, (uint32_t)len);
    put64(hdr + 8, (uint64_t)seq);
    put32(hdr + 16, type);
    uint32_t c = sg_spool_crc32c(0, hdr, 20);
    put32(hdr + 20, sg_spool_crc32c(c, data, len));
}

uint32_t sg_spool_rec_type(const uint8_t *h)
{
    return get32(h + 16);
}

/* Payload length of the record header at h, or -1 if h is not one. */
int64_t sg_spool_hdr_payload_len(const uint8_t *h)
{
    uint32_t len = get32(h + 4);
    if (memcmp(h, SG_SPOOL_REC_MAGIC, 4) != 0 || len > SG_SPOOL_RECORD_MAX)
        return -1;
    return len;
}

/* Whether the checksum of the whole record at r (header + plen bytes) holds. */
bool sg_spool_rec_crc_ok(const uint8_t *r, uint32_t plen)
{
    uint32_t c = sg_spool_crc32c(0, r, 20);
    return sg_spool_crc32c(c, r + SG_SPOOL_HDR_SIZE, plen) == get32(r + 20);
}

/* Size of the valid record at b[off], or 0 if there is none. */
size_t sg_spool_rec_valid_at(const uint8_t *b, size_t n, size_t off, int64_t *seq, uint32_t *type)
{
    if (n - off < SG_SPOOL_HDR_SIZE || memcmp(b + off, SG_SPOOL_REC_MAGIC, 4) != 0)
        return 0;
    uint32_t len = get32(b + off + 4);
    int64_t s = (int64_t)sg_spool_get64(b + off + 8);
    if (len > SG_SPOOL_RECORD_MAX || len > n - off - SG_SPOOL_HDR_SIZE || s < 0 ||
        get32(b + off + 16) > SG_SPOOL_REC_BLOB)
        return 0;
    if (!sg_spool_rec_crc_ok(b + off, len))
        return 0;
    *seq = s;
    if (type)
        *type = get32(b + off + 16);
    return SG_SPOOL_HDR_SIZE + len;
}

/* ------------------------------------------------------------------- spool */

void sg_spool_seg_filename(char buf[SG_SPOOL_SEG_NAME_LEN + 8], int64_t name)
{
    snprintf(buf, SG_SPOOL_SEG_NAME_LEN + 8, "seg-%020" PRId64 ".log", name);
}

int sg_spool_parse_seg_name(const char *s, int64_t *out)
{
    if (strlen(s) != SG_SPOOL_SEG_NAME_LEN || strncmp(s, "seg-", 4) != 0 ||
        strcmp(s + 24, ".log") != 0)
        return -1;
    int64_t v = 0;
    for (int i = 4; i < 24; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

void sg_spool_rep_note(sg_spool_report *rep, const char *fmt, ...)
{
    if (!rep)
        return;
    size_t n = strlen(rep->text);
    if (n + 2 >= sizeof rep->text)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->text + n, sizeof rep->text - n - 1, fmt, ap);
    va_end(ap);
    n = strlen(rep->text);
    rep->text[n] = '\n';
    rep->text[n + 1] = '\0';
}

int sg_spool_seg_push(sg_spool *sp, seg s, sg_err *err)
{
    if (sg_grow(&sp->segs, &sp->cap, sp->nsegs + 1, sizeof *sp->segs) < 0)
        return sg_err_set(err, ENOMEM, "out of memory");
    sp->segs[sp->nsegs++] = s;
    return 0;
}

int sg_spool_cmp_seg(const void *a, const void *b)
{
    const seg *x = a, *y = b;
    return (x->name > y->name) - (x->name < y->name);
}

/* --- ack file: two 32-byte slots {magic, 0, seq, crc32c}; the valid slot
 * with the highest seq wins, so a torn write keeps the other. */

static void ack_encode(uint8_t slot[SG_SPOOL_ACK_SLOT], int64_t seq)
{
    memset(slot, 0, SG_SPOOL_ACK_SLOT);
    memcpy(slot, ACK_MAGIC, 4);
    put64(slot + 8, (uint64_t)seq);
    put32(slot + 16, sg_spool_crc32c(0, slot, 16));
}

static int ack_decode(const uint8_t slot[SG_SPOOL_ACK_SLOT], int64_t *seq)
{
    if (memcmp(slot, ACK_MAGIC, 4) != 0 || get32(slot + 16) != sg_spool_crc32c(0, slot, 16))
        return -1;
    *seq = (int64_t)sg_spool_get64(slot + 8);
    /* INT64_MAX would leave no seq to number the next record. */
    return *seq >= -1 && *seq < INT64_MAX ? 0 : -1;
}

/* Decodes the ack file's bytes: the valid slot with the highest seq wins
 * (-1 if neither is valid). Returns that slot, or -1. */
int sg_spool_ack_read(const uint8_t *slots, ssize_t got, int64_t *seq)
{
    int64_t a0 = -1, a1 = -1;
    bool v0 = got >= SG_SPOOL_ACK_SLOT && ack_decode(slots, &a0) == 0;
    bool v1 = got >= 2 * SG_SPOOL_ACK_SLOT && ack_decode(slots + SG_SPOOL_ACK_SLOT, &a1) == 0;
    int best = v0 && (!v1 || a0 >= a1) ? 0 : v1 ? 1 : -1;
    *seq = best == 0 ? a0 : best == 1 ? a1 : -1;
    return best;
}

int sg_spool_ack_write(sg_spool *sp, int64_t seq, sg_err *err)
{
    uint8_t slot[SG_SPOOL_ACK_SLOT];
    ack_encode(slot, seq);
    if (pwrite(sp->ackfd, slot, sizeof slot, (off_t)sp->ack_slot * SG_SPOOL_ACK_SLOT) != SG_SPOOL_ACK_SLOT)
        return sg_err_sys(err, "write %s/ack", sp->dir);
    sp->ack_slot ^= 1;
    return 0;
}

static void spool_closep(sg_spool **sp)
{
    sg_spool_close(*sp);
}

/* A spool struct with nothing open yet, and its directory opened. */
static sg_spool *spool_alloc(const char *dir, const char *what, sg_err *err)
{
    __attribute__((cleanup(spool_closep))) sg_spool *sp = calloc(1, sizeof *sp);
    if (!sp) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    sp->dirfd = sp->lockfd = sp->ackfd = sp->actfd = -1;
    sp->seg_bytes = SG_SPOOL_SEGMENT_BYTES_DEFAULT;
    sp->loss.first_seq = sp->loss.last_seq = -1;
    sp->dir = strdup(dir);
    if (!sp->dir) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sp->dirfd < 0) {
        sg_err_sys(err, "open spool %s%s", dir, what);
        return NULL;
    }
    return sg_steal_ptr(&sp);
}

/* --- format file: "sandglass spool format N\n" (spool.h: Versions). */

#define FORMAT_FILE "format"
#define FORMAT_PREFIX "sandglass spool format "

/* The spool's format: 0 when it has no format file (a spool of a build
 * before the file, whose records are format 1's), or -1 with err when the
 * file is unreadable or names a format this build does not read. */
static int format_read(const sg_spool *sp, sg_err *err)
{
    char buf[64] = {0};
    sg_autoclose int fd = openat(sp->dirfd, FORMAT_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0)
        return sg_err_sys(err, "open %s/" FORMAT_FILE, sp->dir);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n < 0)
        return sg_err_sys(err, "read %s/" FORMAT_FILE, sp->dir);
    size_t pl = strlen(FORMAT_PREFIX);
    char *end = NULL;
    long v = strncmp(buf, FORMAT_PREFIX, pl) == 0 ? strtol(buf + pl, &end, 10) : 0;
    if (!end || end == buf + pl || *end != '\n' || v < 1) {
        char shown[64];
        sg_vis(buf, (size_t)n, shown, sizeof shown);
        return sg_err_set(err, EPROTO, "spool %s: unreadable format file (\"%s\"): not a spool this "
                          "build can read; move the directory aside to start an empty spool", sp->dir, shown);
    }
    if (v > SG_SPOOL_FORMAT)
        return sg_err_set(err, EPROTO, "spool %s is format %ld, written by a newer sandglass; this build "
                          "reads format %d: deliver it with the newer build (run the sandbox's "
                          "supervisor until `sandglass ls` shows nothing pending), then use this one",
                          sp->dir, v, SG_SPOOL_FORMAT);
    return (int)v;
}

/* Records the format, atomically (a temporary file renamed: recovery
 * removes a leftover *.tmp). */
static int format_write(sg_spool *sp, sg_err *err)
{
    char line[64];
    int n = snprintf(line, sizeof line, FORMAT_PREFIX "%d\n", SG_SPOOL_FORMAT);
    sg_autoclose int fd = openat(sp->dirfd, FORMAT_FILE ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || sg_write_all(fd, line, (size_t)n) < 0 || fdatasync(fd) < 0 ||
        renameat(sp->dirfd, FORMAT_FILE ".tmp", sp->dirfd, FORMAT_FILE) < 0 || fsync(sp->dirfd) < 0)
        return sg_err_sys(err, "write %s/" FORMAT_FILE, sp->dir);
    return 0;
}

sg_spool *sg_spool_open(const char *dir, sg_spool_report *rep, sg_err *err)
{
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->first_seq = rep->last_seq = rep->acked_seq = -1;
    }
    if (sg_mkdir_p(dir, 0700, err) < 0) {
        sg_err_prefix(err, "spool");
        return NULL;
    }
    __attribute__((cleanup(spool_closep))) sg_spool *sp = spool_alloc(dir, "", err);
    if (!sp)
        return NULL;
    sp->lockfd = openat(sp->dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (sp->lockfd < 0) {
        sg_err_sys(err, "open %s/lock", dir);
        return NULL;
    }
    if (flock(sp->lockfd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK)
            sg_err_set(err, EBUSY, "spool %s is in use by another process", dir);
        else
            sg_err_sys(err, "lock %s/lock", dir);
        return NULL;
    }
    /* Before recovery: records of a newer format must not be taken for
     * corrupt ones and quarantined. */
    int format = format_read(sp, err);
    if (format < 0)
        return NULL;
    if (sg_spool_recover(sp, rep, err) < 0) {
        sg_err_prefix(err, "recover spool %s", dir);
        return NULL;
    }
    if (format == 0 && format_write(sp, err) < 0)
        return NULL;
    return sg_steal_ptr(&sp);
}

sg_spool *sg_spool_open_reader(const char *dir, sg_spool_ack_fn ack_fn, void *ud, sg_err *err)
{
    __attribute__((cleanup(spool_closep))) sg_spool *sp = spool_alloc(dir, " for reading", err);
    if (!sp)
        return NULL;
    sp->reader = true;
    sp->ack_fn = ack_fn;
    sp->ack_ud = ud;
    if (format_read(sp, err) < 0)
        return NULL;
    /* A missing or unreadable ack means everything is replayed, as
     * recovery's ack_reset: the ingest's own ack then decides. */
    uint8_t slots[2 * SG_SPOOL_ACK_SLOT] = {0};
    ssize_t got = -1;
    sg_autoclose int afd = openat(sp->dirfd, "ack", O_RDONLY | O_CLOEXEC);
    if (afd >= 0)
        got = pread(afd, slots, sizeof slots, 0);
    sg_spool_ack_read(slots, got, &sp->acked_seq);
    /* Nothing is known synced until the owner says so. */
    sp->synced_seq = -1;
    sp->next_seq = sp->acked_seq + 1;
    return sg_steal_ptr(&sp);
}

void sg_spool_reader_set_synced(sg_spool *sp, int64_t seq)
{
    if (!sp->reader || seq <= sp->synced_seq)
        return;
    sp->synced_seq = seq;
    if (seq >= sp->next_seq)
        sp->next_seq = seq + 1;
}

static int refuse_write(const sg_spool *sp, const char *what, sg_err *err)
{
    return sg_err_set(err, EPERM, "spool %s: cannot %s: read-only spool reader (the owner writes)",
                      sp->dir, what);
}

void sg_spool_close(sg_spool *sp)
{
    if (!sp)
        return;
    sg_closep(&sp->actfd);
    sg_closep(&sp->ackfd);
    sg_closep(&sp->lockfd);
    sg_closep(&sp->dirfd);
    free(sp->segs);
    free(sp->dir);
    free(sp);
}

void sg_spool_set_segment_bytes(sg_spool *sp, size_t bytes)
{
    sp->seg_bytes = bytes ? bytes : 1;
}

int64_t sg_spool_next_seq(const sg_spool *sp)
{
    return sp->next_seq;
}

int64_t sg_spool_synced_seq(const sg_spool *sp)
{
    return sp->synced_seq;
}

int64_t sg_spool_acked_seq(const sg_spool *sp)
{
    return sp->acked_seq;
}

static void loss_add(sg_spool *sp, int64_t first, int64_t last, int e)
{
    if (last < first)
        return;
    if (sp->loss.count == 0) {
        sp->loss.first_seq = first;
        sp->loss.last_seq = last;
        sp->loss.err = e;
    } else {
        if (first < sp->loss.first_seq)
            sp->loss.first_seq = first;
        if (last > sp->loss.last_seq)
            sp->loss.last_seq = last;
    }
    uint64_t n = (uint64_t)(last - first + 1);
    sp->loss.count += n;
    sp->lost += n;
}

bool sg_spool_take_loss(sg_spool *sp, sg_spool_loss *out)
{
    if (sp->loss.count == 0)
        return false;
    *out = sp->loss;
    memset(&sp->loss, 0, sizeof sp->loss);
    sp->loss.first_seq = sp->loss.last_seq = -1;
    return true;
}

seg *sg_spool_active(sg_spool *sp)
{
    return sp->nsegs ? &sp->segs[sp->nsegs - 1] : NULL;
}

int sg_spool_sync(sg_spool *sp, sg_err *err)
{
    if (sp->reader)
        return refuse_write(sp, "sync", err);
    seg *a = sg_spool_active(sp);
    if (sp->synced_seq >= sp->next_seq - 1 || !a || a->size == sp->synced_size) {
        sp->synced_seq = sp->next_seq - 1;
        return 0;
    }
    if (fdatasync(sp->actfd) < 0) {
        int e = errno;
        /* After a failed fdatasync the unsynced pages are in doubt: cut them
         * off and reuse their seqs (they were never sent). */
        if (ftruncate(sp->actfd, (off_t)sp->synced_size) == 0) {
            a->size = sp->synced_size;
            loss_add(sp, sp->synced_seq + 1, sp->next_seq - 1, e);
            sp->next_seq = sp->synced_seq + 1;
            if (a->first > sp->synced_seq)
                a->first = a->last = -1;
            else
                a->last = sp->synced_seq;
        }
        errno = e;
        return sg_err_sys(err, "sync spool %s", sp->dir);
    }
    sp->synced_size = a->size;
    sp->synced_seq = sp->next_seq - 1;
    sp->syncs++;
    return 0;
}

/* Starts a new segment named next_seq, syncing the old one first so that
 * unsynced records only ever live in the active segment. */
static int rotate(sg_spool *sp, sg_err *err)
{
    if (sp->actfd >= 0 && sg_spool_sync(sp, err) < 0)
        return -1;
    char name[SG_SPOOL_SEG_NAME_LEN + 8];
    sg_spool_seg_filename(name, sp->next_seq);
    seg *a = sg_spool_active(sp);
    if (a && a->name == sp->next_seq && a->size == 0)
        return 0; /* an empty active segment already has this name */
    int fd = openat(sp->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return sg_err_sys(err, "create %s/%s", sp->dir, name);
    if (fsync(sp->dirfd) < 0) {
        int e = errno;
        close(fd);
        unlinkat(sp->dirfd, name, 0);
        errno = e;
        return sg_err_sys(err, "sync %s", sp->dir);
    }
    if (sg_spool_seg_push(sp, (seg){.name = sp->next_seq, .first = -1, .last = -1}, err) < 0) {
        close(fd);
        return -1;
    }
    sg_closep(&sp->actfd);
    sp->actfd = fd;
    sp->synced_size = 0;
    return 0;
}

/* One record of either type at seq (next_seq). A segment is not rotated
 * while it holds blob records of seq (a.last == seq): they stay in the
 * segment their event is in, which a reader finds by name. */
static int append_rec(sg_spool *sp, int64_t seq, uint32_t type, const void *data, size_t len,
                      sg_err *err)
{
    bool blob = type == SG_SPOOL_REC_BLOB;
    if (sp->reader)
        return refuse_write(sp, "append", err);
    if (seq != sp->next_seq)
        return sg_err_set(err, EINVAL, "spool append: seq %" PRId64 " is not the next seq %" PRId64,
                          seq, sp->next_seq);
    if (len > SG_SPOOL_RECORD_MAX)
        return sg_err_set(err, EMSGSIZE, "spool append: record of %zu bytes exceeds %d",
                          len, SG_SPOOL_RECORD_MAX);
    seg *a = sg_spool_active(sp);
    if (!a || sp->actfd < 0 || (a->size >= sp->seg_bytes && a->last < seq)) {
        if (rotate(sp, err) < 0) {
            if (!blob)
                loss_add(sp, sp->next_seq, sp->next_seq, err->code);
            sg_err_prefix(err, "spool append");
            return -1;
        }
        a = sg_spool_active(sp);
    }
    uint8_t hdr[SG_SPOOL_HDR_SIZE];
    sg_spool_rec_header(hdr, seq, type, data, len);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)data, len}};
    size_t total = sizeof hdr + len, done = 0;
    while (done < total) {
        ssize_t w = pwritev(sp->actfd, iov, 2, (off_t)(a->size + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            /* Cut back to the last good record: the spool stays valid. */
            if (ftruncate(sp->actfd, (off_t)a->size) < 0) { /* nothing better to do */ }
            if (!blob)
                loss_add(sp, seq, seq, e);
            errno = e;
            return sg_err_sys(err, "spool append seq %" PRId64, seq);
        }
        done += (size_t)w;
        /* advance the iovecs past what was written */
        size_t skip = (size_t)w;
        for (int i = 0; i < 2; i++) {
            size_t t = skip < iov[i].iov_len ? skip : iov[i].iov_len;
            iov[i].iov_base = (char *)iov[i].iov_base + t;
            iov[i].iov_len -= t;
            skip -= t;
        }
    }
    a->size += total;
    if (a->first < 0)
        a->first = seq;
    a->last = seq;
    if (!blob) {
        sp->next_seq = seq + 1;
        sp->appended++;
    }
    return 0;
}

int sg_spool_append(sg_spool *sp, int64_t seq, const void *data, size_t len, sg_err *err)
{
    return append_rec(sp, seq, SG_SPOOL_REC_EVENT, data, len, err);
}

int sg_spool_append_blob(sg_spool *sp, const void *data, size_t len, sg_err *err)
{
    return append_rec(sp, sp->next_seq, SG_SPOOL_REC_BLOB, data, len, err);
}

int sg_spool_ack(sg_spool *sp, int64_t seq, sg_err *err)
{
    if (seq <= sp->acked_seq)
        return 0;
    if (seq == INT64_MAX) /* the peer's bytes: next_seq = seq + 1 would overflow */
        return sg_err_set(err, ERANGE, "ack %" PRId64 " is out of range: no seq could follow it", seq);
    if (sp->reader) {
        /* The owner persists it, trims, and (for an ack beyond its next
         * seq) skips ahead; its synced seq comes back by
         * sg_spool_reader_set_synced, so synced_seq stays what it reported
         * (never more than what is on disk). */
        sp->acked_seq = seq;
        if (seq >= sp->next_seq)
            sp->next_seq = seq + 1;
        if (sp->ack_fn)
            sp->ack_fn(sp->ack_ud, seq);
        return 0;
    }
    if (sg_spool_ack_write(sp, seq, err) < 0)
        return -1;
    sp->acked_seq = seq;
    if (seq >= sp->next_seq) {
        /* The ingest has seqs we do not (a spool lost to corruption): never
         * hand them out again, or the ingest would drop our new events as
         * duplicates. */
        sp->next_seq = seq + 1;
        sp->synced_seq = seq;
    }
    /* Whole segments the ack covers, never the active one. */
    size_t k = 0;
    while (k + 1 < sp->nsegs && sp->segs[k].last <= seq)
        k++;
    if (k == 0)
        return 0;
    /* The ack must be on disk before the records it covers go: else a crash
     * could leave neither, and seqs would be handed out again. */
    if (fdatasync(sp->ackfd) < 0)
        return sg_err_sys(err, "sync %s/ack", sp->dir);
    for (size_t i = 0; i < k; i++) {
        char name[SG_SPOOL_SEG_NAME_LEN + 8];
        sg_spool_seg_filename(name, sp->segs[i].name);
        if (unlinkat(sp->dirfd, name, 0) < 0 && errno != ENOENT)
            return sg_err_sys(err, "remove %s/%s", sp->dir, name);
    }
    memmove(sp->segs, sp->segs + k, (sp->nsegs - k) * sizeof *sp->segs);
    sp->nsegs -= k;
    return 0;
}

uint64_t sg_spool_pending(const sg_spool *sp)
{
    if (sp->reader) /* it cannot see appended, unsynced records */
        return sp->synced_seq > sp->acked_seq ? (uint64_t)(sp->synced_seq - sp->acked_seq) : 0;
    int64_t base = sp->acked_seq;
    for (size_t i = 0; i < sp->nsegs; i++) {
        if (sp->segs[i].first >= 0) {
            if (sp->segs[i].first - 1 > base)
                base = sp->segs[i].first - 1;
            break;
        }
    }
    int64_t last = sp->next_seq - 1;
    return last > base ? (uint64_t)(last - base) : 0;
}

void sg_spool_get_stats(const sg_spool *sp, sg_spool_stats *out)
{
    out->next_seq = sp->next_seq;
    out->synced_seq = sp->synced_seq;
    out->acked_seq = sp->acked_seq;
    out->pending = sg_spool_pending(sp);
    out->appended = sp->appended;
    out->syncs = sp->syncs;
    out->lost = sp->lost;
    out->segments = sp->nsegs;
    out->pending_bytes = 0;
    for (size_t i = 0; i < sp->nsegs && !sp->reader; i++)
        if (sp->segs[i].last > sp->acked_seq)
            out->pending_bytes += sp->segs[i].size;
}

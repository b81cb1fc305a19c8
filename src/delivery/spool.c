/* spool: durable, checksummed, group-committed event log (see spool.h). */
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

#define REC_MAGIC "SGR1"
#define ACK_MAGIC "SGAK"
#define ACK_SLOT 32
#define SEG_NAME_LEN 28            /* "seg-" + 20 digits + ".log" */
#define CURSOR_CHUNK (256 * 1024)  /* read-ahead of a cursor */

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

static uint64_t get64(const uint8_t *p)
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

static void rec_header(uint8_t hdr[SG_SPOOL_HDR_SIZE], int64_t seq, const void *data, size_t len)
{
    memcpy(hdr, REC_MAGIC, 4);
    put32(hdr + 4, (uint32_t)len);
    put64(hdr + 8, (uint64_t)seq);
    put32(hdr + 16, 0);
    uint32_t c = sg_spool_crc32c(0, hdr, 20);
    put32(hdr + 20, sg_spool_crc32c(c, data, len));
}

/* Payload length of the record header at h, or -1 if h is not one. */
static int64_t hdr_payload_len(const uint8_t *h)
{
    uint32_t len = get32(h + 4);
    if (memcmp(h, REC_MAGIC, 4) != 0 || len > SG_SPOOL_RECORD_MAX)
        return -1;
    return len;
}

/* Whether the checksum of the whole record at r (header + plen bytes) holds. */
static bool rec_crc_ok(const uint8_t *r, uint32_t plen)
{
    uint32_t c = sg_spool_crc32c(0, r, 20);
    return sg_spool_crc32c(c, r + SG_SPOOL_HDR_SIZE, plen) == get32(r + 20);
}

/* Size of the valid record at b[off], or 0 if there is none. */
static size_t rec_valid_at(const uint8_t *b, size_t n, size_t off, int64_t *seq)
{
    if (n - off < SG_SPOOL_HDR_SIZE || memcmp(b + off, REC_MAGIC, 4) != 0)
        return 0;
    uint32_t len = get32(b + off + 4);
    int64_t s = (int64_t)get64(b + off + 8);
    if (len > SG_SPOOL_RECORD_MAX || len > n - off - SG_SPOOL_HDR_SIZE || s < 0 ||
        get32(b + off + 16) != 0)
        return 0;
    if (!rec_crc_ok(b + off, len))
        return 0;
    *seq = s;
    return SG_SPOOL_HDR_SIZE + len;
}

/* ------------------------------------------------------------------- spool */

typedef struct seg {
    int64_t name;          /* seq in the file name (first seq when created) */
    int64_t first, last;   /* record seqs; -1 when empty */
    uint64_t size;         /* valid bytes */
} seg;

struct sg_spool {
    char *dir;
    int dirfd, lockfd, ackfd;
    int actfd;             /* fd of segs[nsegs-1], -1 if no segment */
    seg *segs;
    size_t nsegs, cap;
    uint64_t synced_size;  /* bytes of the active segment known on disk */
    int64_t next_seq, synced_seq, acked_seq;
    int ack_slot;
    size_t seg_bytes;
    sg_spool_loss loss;
    uint64_t appended, syncs, lost;
    size_t ncursors;
    /* A reader (sg_spool_open_reader) writes nothing: segs is its last
     * directory listing (names only), synced_seq what the owner reported. */
    bool reader;
    sg_spool_ack_fn ack_fn;
    void *ack_ud;
};

static void seg_filename(char buf[SEG_NAME_LEN + 8], int64_t name)
{
    snprintf(buf, SEG_NAME_LEN + 8, "seg-%020" PRId64 ".log", name);
}

static int parse_seg_name(const char *s, int64_t *out)
{
    if (strlen(s) != SEG_NAME_LEN || strncmp(s, "seg-", 4) != 0 ||
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

static void rep_note(sg_spool_report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void rep_note(sg_spool_report *rep, const char *fmt, ...)
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

static int seg_push(sg_spool *sp, seg s, sg_err *err)
{
    if (sg_grow(&sp->segs, &sp->cap, sp->nsegs + 1, sizeof *sp->segs) < 0)
        return sg_err_set(err, ENOMEM, "out of memory");
    sp->segs[sp->nsegs++] = s;
    return 0;
}

static int cmp_seg(const void *a, const void *b)
{
    const seg *x = a, *y = b;
    return (x->name > y->name) - (x->name < y->name);
}

/* --- ack file: two 32-byte slots {magic, 0, seq, crc32c}; the valid slot
 * with the highest seq wins, so a torn write keeps the other. */

static void ack_encode(uint8_t slot[ACK_SLOT], int64_t seq)
{
    memset(slot, 0, ACK_SLOT);
    memcpy(slot, ACK_MAGIC, 4);
    put64(slot + 8, (uint64_t)seq);
    put32(slot + 16, sg_spool_crc32c(0, slot, 16));
}

static int ack_decode(const uint8_t slot[ACK_SLOT], int64_t *seq)
{
    if (memcmp(slot, ACK_MAGIC, 4) != 0 || get32(slot + 16) != sg_spool_crc32c(0, slot, 16))
        return -1;
    *seq = (int64_t)get64(slot + 8);
    /* INT64_MAX would leave no seq to number the next record. */
    return *seq >= -1 && *seq < INT64_MAX ? 0 : -1;
}

/* Decodes the ack file's bytes: the valid slot with the highest seq wins
 * (-1 if neither is valid). Returns that slot, or -1. */
static int ack_read(const uint8_t *slots, ssize_t got, int64_t *seq)
{
    int64_t a0 = -1, a1 = -1;
    bool v0 = got >= ACK_SLOT && ack_decode(slots, &a0) == 0;
    bool v1 = got >= 2 * ACK_SLOT && ack_decode(slots + ACK_SLOT, &a1) == 0;
    int best = v0 && (!v1 || a0 >= a1) ? 0 : v1 ? 1 : -1;
    *seq = best == 0 ? a0 : best == 1 ? a1 : -1;
    return best;
}

static int ack_write(sg_spool *sp, int64_t seq, sg_err *err)
{
    uint8_t slot[ACK_SLOT];
    ack_encode(slot, seq);
    if (pwrite(sp->ackfd, slot, sizeof slot, (off_t)sp->ack_slot * ACK_SLOT) != ACK_SLOT)
        return sg_err_sys(err, "write %s/ack", sp->dir);
    sp->ack_slot ^= 1;
    return 0;
}

/* --- recovery */

enum { IT_REC, IT_BAD };

typedef struct item {
    int type;
    size_t off, len;
    int64_t seq;
    int64_t gap;           /* IT_REC: placeholders to write before it */
    bool tail;             /* IT_BAD: reaches the end of the file */
    const char *why;
} item;

typedef struct items {
    item *v;
    size_t n, cap;
} items;

static void items_freep(items *it)
{
    free(it->v);
}

typedef struct mapping {
    void *p;
    size_t n;
} mapping;

static void unmapp(mapping *m)
{
    if (m->p)
        munmap(m->p, m->n);
}

static int items_push(items *it, item x)
{
    if (sg_grow(&it->v, &it->cap, it->n + 1, sizeof *it->v) < 0)
        return -1;
    it->v[it->n++] = x;
    return 0;
}

/* Splits b[0..n) into valid records and bad regions; a bad region ends
 * where the next valid record starts. */
static int scan(const uint8_t *b, size_t n, items *out)
{
    size_t off = 0;
    while (off < n) {
        int64_t seq;
        size_t sz = rec_valid_at(b, n, off, &seq);
        if (sz) {
            if (items_push(out, (item){.type = IT_REC, .off = off, .len = sz, .seq = seq}) < 0)
                return -1;
            off += sz;
            continue;
        }
        size_t found = n;
        for (size_t p = off + 1; p + SG_SPOOL_HDR_SIZE <= n; p++) {
            const uint8_t *q = memmem(b + p, n - p, REC_MAGIC, 4);
            if (!q)
                break;
            p = (size_t)(q - b);
            int64_t s2;
            if (rec_valid_at(b, n, p, &s2)) {
                found = p;
                break;
            }
        }
        if (items_push(out, (item){.type = IT_BAD, .off = off, .len = found - off,
                                   .tail = found == n, .why = "bad record"}) < 0)
            return -1;
        off = found;
    }
    return 0;
}

static int placeholder(char *buf, size_t cap, int64_t seq, const char *ts)
{
    return snprintf(buf, cap,
                    "{\"seq\":%" PRId64 ",\"kind\":\"activity\",\"payload\":{\"state\":"
                    "\"spool_gap\",\"reason\":\"event lost to spool corruption, "
                    "found at recovery\"},\"ts\":\"%s\"}",
                    seq, ts);
}

static int quarantine(sg_spool *sp, const char *segname, const uint8_t *b, const item *x,
                      sg_err *err)
{
    sg_autoclose int fd = openat(sp->dirfd, "quarantine.log",
                                 O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return sg_err_sys(err, "open %s/quarantine.log", sp->dir);
    char ts[64];
    sg_now_iso8601(ts, sizeof ts);
    char head[256];
    int hn = snprintf(head, sizeof head, "\n# %s %s offset %zu length %zu: %s\n", ts, segname,
                      x->off, x->len, x->why);
    if (sg_write_all(fd, head, (size_t)hn) < 0 || sg_write_all(fd, b + x->off, x->len) < 0 ||
        fdatasync(fd) < 0)
        return sg_err_sys(err, "write %s/quarantine.log", sp->dir);
    return 0;
}

/* Rewrites a segment with its valid records and the placeholders, via a
 * temporary file renamed over it (buffered: a gap can mean many
 * placeholders). */
static int rewrite_segment(sg_spool *sp, seg *s, const char *name, const uint8_t *b,
                           const items *it, sg_err *err)
{
    char tmp[SEG_NAME_LEN + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = openat(sp->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return sg_err_sys(err, "create %s/%s", sp->dir, tmp);
    sg_autofclose FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return sg_err_sys(err, "create %s/%s", sp->dir, tmp);
    }
    char ts[64];
    sg_now_iso8601(ts, sizeof ts);
    uint64_t size = 0;
    s->first = s->last = -1;
    for (size_t i = 0; i < it->n; i++) {
        const item *x = &it->v[i];
        if (x->type != IT_REC)
            continue;
        for (int64_t g = x->seq - x->gap; g < x->seq; g++) {
            char ph[256];
            int pn = placeholder(ph, sizeof ph, g, ts);
            uint8_t hdr[SG_SPOOL_HDR_SIZE];
            rec_header(hdr, g, ph, (size_t)pn);
            fwrite(hdr, 1, sizeof hdr, f);
            fwrite(ph, 1, (size_t)pn, f);
            size += SG_SPOOL_HDR_SIZE + (size_t)pn;
            if (s->first < 0)
                s->first = g;
            s->last = g;
        }
        fwrite(b + x->off, 1, x->len, f);
        size += x->len;
        if (s->first < 0)
            s->first = x->seq;
        s->last = x->seq;
    }
    if (fflush(f) != 0 || ferror(f))
        return sg_err_sys(err, "write %s/%s", sp->dir, tmp);
    if (fdatasync(fileno(f)) < 0)
        return sg_err_sys(err, "sync %s/%s", sp->dir, tmp);
    if (renameat(sp->dirfd, tmp, sp->dirfd, name) < 0)
        return sg_err_sys(err, "rename %s/%s", sp->dir, tmp);
    if (fsync(sp->dirfd) < 0)
        return sg_err_sys(err, "sync %s", sp->dir);
    s->size = size;
    return 0;
}

/* Validates one segment; *prev is the last seq kept before it (-1: none
 * yet), fill_from the first seq that must exist (-1: unknown). */
static int recover_segment(sg_spool *sp, seg *s, bool last, int64_t *prev, int64_t fill_from,
                           sg_spool_report *rep, sg_err *err)
{
    char name[SEG_NAME_LEN + 8];
    seg_filename(name, s->name);
    sg_autoclose int fd = openat(sp->dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "open %s/%s", sp->dir, name);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sg_err_sys(err, "stat %s/%s", sp->dir, name);
    s->first = s->last = -1;
    s->size = 0;
    if (st.st_size == 0)
        return 0;
    __attribute__((cleanup(unmapp))) mapping m = {NULL, (size_t)st.st_size};
    void *p = mmap(NULL, m.n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return sg_err_sys(err, "map %s/%s", sp->dir, name);
    m.p = p;
    const uint8_t *b = p;
    size_t n = m.n;

    __attribute__((cleanup(items_freep))) items it = {0};
    if (scan(b, n, &it) < 0)
        return sg_err_set(err, ENOMEM, "out of memory");

    /* Order: seqs strictly increase; a small jump is a hole to fill. */
    bool dirty = false;
    size_t torn_at = n;
    for (size_t i = 0; i < it.n; i++) {
        item *x = &it.v[i];
        if (x->type == IT_REC) {
            int64_t want = *prev >= 0 ? *prev + 1 : fill_from;
            if (*prev >= 0 && x->seq <= *prev) {
                x->type = IT_BAD;
                x->why = "seq not above the previous record";
            } else if (want >= 0 && x->seq > want) {
                if (x->seq - want > SG_SPOOL_GAP_MAX) {
                    x->type = IT_BAD;
                    x->why = "seq jumps too far";
                } else {
                    x->gap = x->seq - want;
                    dirty = true;
                    if (rep)
                        rep->placeholders += (size_t)x->gap;
                    rep_note(rep, "spool %s: seqs %" PRId64 "..%" PRId64
                             " missing; filled with spool_gap records",
                             name, want, x->seq - 1);
                }
            }
            if (x->type == IT_REC) {
                *prev = x->seq;
                if (s->first < 0)
                    s->first = x->seq - x->gap;
                s->last = x->seq;
                s->size = x->off + x->len;
                if (rep)
                    rep->records++;
                continue;
            }
        }
        if (x->tail && last && i == it.n - 1) {
            torn_at = x->off;
            if (rep) {
                rep->torn++;
                rep->torn_bytes += x->len;
            }
            rep_note(rep, "spool %s: torn last record (%zu bytes at offset %zu) cut off",
                     name, x->len, x->off);
            continue;
        }
        dirty = true;
        if (quarantine(sp, name, b, x, err) < 0)
            return -1;
        if (rep) {
            rep->quarantined++;
            rep->quarantined_bytes += x->len;
        }
        rep_note(rep, "spool %s: %zu corrupt bytes at offset %zu (%s) moved to quarantine.log",
                 name, x->len, x->off, x->why);
    }

    if (dirty)
        return rewrite_segment(sp, s, name, b, &it, err);
    if (torn_at < n) {
        if (ftruncate(fd, (off_t)torn_at) < 0 || fdatasync(fd) < 0)
            return sg_err_sys(err, "cut %s/%s", sp->dir, name);
        s->size = torn_at;
        return 0;
    }
    /* What a SIGKILLed writer left in the page cache becomes durable. */
    if (last && fdatasync(fd) < 0)
        return sg_err_sys(err, "sync %s/%s", sp->dir, name);
    return 0;
}

/* Fills sp->segs with the segment files, sorted by name (a reader lists
 * again whenever it looks for a segment). */
static int list_segments(sg_spool *sp, sg_err *err)
{
    sp->nsegs = 0;
    int dfd = dup(sp->dirfd);
    if (dfd < 0)
        return sg_err_sys(err, "dup");
    sg_autoclosedir DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return sg_err_sys(err, "read %s", sp->dir);
    }
    rewinddir(d); /* the dup shares dirfd's offset, at the end after a listing */
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        int64_t name;
        if (l > 4 && strcmp(de->d_name + l - 4, ".tmp") == 0) {
            if (sp->reader)
                continue; /* the owner's to clean up */
            unlinkat(sp->dirfd, de->d_name, 0); /* a rewrite that did not finish */
        } else if (parse_seg_name(de->d_name, &name) == 0) {
            if (seg_push(sp, (seg){.name = name, .first = -1, .last = -1}, err) < 0)
                return -1;
        }
    }
    if (sp->nsegs > 1)
        qsort(sp->segs, sp->nsegs, sizeof *sp->segs, cmp_seg);
    return 0;
}

static int recover(sg_spool *sp, sg_spool_report *rep, sg_err *err)
{
    if (list_segments(sp, err) < 0)
        return -1;
    /* The ack. */
    bool ack_exists = faccessat(sp->dirfd, "ack", F_OK, 0) == 0;
    sp->ackfd = openat(sp->dirfd, "ack", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (sp->ackfd < 0)
        return sg_err_sys(err, "open %s/ack", sp->dir);
    uint8_t slots[2 * ACK_SLOT] = {0};
    ssize_t got = pread(sp->ackfd, slots, sizeof slots, 0);
    if (got < 0)
        return sg_err_sys(err, "read %s/ack", sp->dir);
    int best = ack_read(slots, got, &sp->acked_seq);
    sp->ack_slot = best == 0 ? 1 : 0; /* overwrite the older */

    bool ack_known = best >= 0 || (!ack_exists && sp->nsegs == 0);
    if (!ack_known && sp->nsegs > 0) {
        if (rep)
            rep->ack_reset = true;
        rep_note(rep, "spool: ack file unreadable; replaying every record");
    }
    if (!ack_exists && sp->nsegs == 0) {
        /* A fresh spool: "nothing acked" is a known state, not a lost file. */
        sp->ack_slot = 0;
        if (ack_write(sp, -1, err) < 0)
            return -1;
        if (fdatasync(sp->ackfd) < 0 || fsync(sp->dirfd) < 0)
            return sg_err_sys(err, "sync %s/ack", sp->dir);
    }

    /* The segments, oldest first. */
    int64_t prev = -1;
    int64_t fill_from = ack_known ? sp->acked_seq + 1 : -1;
    for (size_t i = 0; i < sp->nsegs; i++) {
        if (recover_segment(sp, &sp->segs[i], i + 1 == sp->nsegs, &prev, fill_from, rep,
                            err) < 0)
            return -1;
    }
    if (rep)
        rep->segments = sp->nsegs;

    /* Drop empty segments; the active one is created at the next append. */
    size_t k = 0;
    for (size_t i = 0; i < sp->nsegs; i++) {
        if (sp->segs[i].first >= 0) {
            sp->segs[k++] = sp->segs[i];
            continue;
        }
        char name[SEG_NAME_LEN + 8];
        seg_filename(name, sp->segs[i].name);
        unlinkat(sp->dirfd, name, 0);
    }
    sp->nsegs = k;

    int64_t max = prev > sp->acked_seq ? prev : sp->acked_seq;
    sp->next_seq = max + 1;
    sp->synced_seq = max;
    if (sp->nsegs > 0) {
        seg *a = &sp->segs[sp->nsegs - 1];
        char name[SEG_NAME_LEN + 8];
        seg_filename(name, a->name);
        sp->actfd = openat(sp->dirfd, name, O_RDWR | O_CLOEXEC);
        if (sp->actfd < 0)
            return sg_err_sys(err, "open %s/%s", sp->dir, name);
        sp->synced_size = a->size;
    }
    if (rep) {
        rep->first_seq = sp->nsegs ? sp->segs[0].first : -1;
        rep->last_seq = prev;
        rep->acked_seq = sp->acked_seq;
    }
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
    if (recover(sp, rep, err) < 0) {
        sg_err_prefix(err, "recover spool %s", dir);
        return NULL;
    }
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
    /* A missing or unreadable ack means everything is replayed, as
     * recovery's ack_reset: the ingest's own ack then decides. */
    uint8_t slots[2 * ACK_SLOT] = {0};
    ssize_t got = -1;
    sg_autoclose int afd = openat(sp->dirfd, "ack", O_RDONLY | O_CLOEXEC);
    if (afd >= 0)
        got = pread(afd, slots, sizeof slots, 0);
    ack_read(slots, got, &sp->acked_seq);
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

static seg *active(sg_spool *sp)
{
    return sp->nsegs ? &sp->segs[sp->nsegs - 1] : NULL;
}

int sg_spool_sync(sg_spool *sp, sg_err *err)
{
    if (sp->reader)
        return refuse_write(sp, "sync", err);
    seg *a = active(sp);
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
    char name[SEG_NAME_LEN + 8];
    seg_filename(name, sp->next_seq);
    seg *a = active(sp);
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
    if (seg_push(sp, (seg){.name = sp->next_seq, .first = -1, .last = -1}, err) < 0) {
        close(fd);
        return -1;
    }
    sg_closep(&sp->actfd);
    sp->actfd = fd;
    sp->synced_size = 0;
    return 0;
}

int sg_spool_append(sg_spool *sp, int64_t seq, const void *data, size_t len, sg_err *err)
{
    if (sp->reader)
        return refuse_write(sp, "append", err);
    if (seq != sp->next_seq)
        return sg_err_set(err, EINVAL, "spool append: seq %" PRId64 " is not the next seq %" PRId64,
                          seq, sp->next_seq);
    if (len > SG_SPOOL_RECORD_MAX)
        return sg_err_set(err, EMSGSIZE, "spool append: record of %zu bytes exceeds %d",
                          len, SG_SPOOL_RECORD_MAX);
    seg *a = active(sp);
    if (!a || sp->actfd < 0 || a->size >= sp->seg_bytes) {
        if (rotate(sp, err) < 0) {
            loss_add(sp, sp->next_seq, sp->next_seq, err->code);
            sg_err_prefix(err, "spool append");
            return -1;
        }
        a = active(sp);
    }
    uint8_t hdr[SG_SPOOL_HDR_SIZE];
    rec_header(hdr, seq, data, len);
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
    sp->next_seq = seq + 1;
    sp->appended++;
    return 0;
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
    if (ack_write(sp, seq, err) < 0)
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
        char name[SEG_NAME_LEN + 8];
        seg_filename(name, sp->segs[i].name);
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
}

/* ------------------------------------------------------------------ cursor */

struct sg_spool_cursor {
    sg_spool *sp;
    int64_t after;         /* records <= after are skipped */
    int fd;                /* current segment, -1: pick one */
    int64_t seg_name;
    uint64_t off;          /* next record in it */
    uint8_t *buf;          /* [headroom][cap] */
    size_t headroom, cap;
    uint64_t win_off;      /* file range held at buf + headroom */
    size_t win_len;
    int64_t win_synced;    /* reader: the synced seq when the window was read */
    bool gap_ok;           /* reader: nothing older is on disk, so the next
                              record may be above after + 1 */
};

sg_spool_cursor *sg_spool_cursor_new(sg_spool *sp, int64_t after_seq, size_t headroom,
                                     sg_err *err)
{
    sg_spool_cursor *c = calloc(1, sizeof *c);
    if (!c) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    c->sp = sp;
    c->fd = -1;
    c->headroom = headroom;
    c->cap = CURSOR_CHUNK;
    c->buf = malloc(headroom + c->cap);
    if (!c->buf) {
        free(c);
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    sg_spool_cursor_seek(c, after_seq);
    sp->ncursors++;
    return c;
}

void sg_spool_cursor_seek(sg_spool_cursor *c, int64_t after_seq)
{
    sg_close_reset(&c->fd);
    c->after = after_seq;
    c->off = 0;
    c->win_len = 0;
    c->win_synced = -1;
    c->gap_ok = false;
}

void sg_spool_cursor_free(sg_spool_cursor *c)
{
    if (!c)
        return;
    sg_closep(&c->fd);
    c->sp->ncursors--;
    free(c->buf);
    free(c);
}

static const seg *find_seg(const sg_spool *sp, int64_t name)
{
    for (size_t i = 0; i < sp->nsegs; i++)
        if (sp->segs[i].name == name)
            return &sp->segs[i];
    return NULL;
}

/* Reads file bytes from off into the window: a chunk, at least `need`
 * bytes unless the file ends first, never past `end`. */
static int window_fill(sg_spool_cursor *c, uint64_t off, size_t need, uint64_t end, sg_err *err)
{
    c->win_len = 0; /* a failed read leaves nothing stale behind */
    if (need > c->cap) {
        uint8_t *n = realloc(c->buf, c->headroom + need);
        if (!n)
            return sg_err_set(err, ENOMEM, "out of memory");
        c->buf = n;
        c->cap = need;
    }
    size_t want = c->cap;
    if (end - off < want)
        want = (size_t)(end - off);
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(c->fd, c->buf + c->headroom + got, want - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sg_err_sys(err, "read spool segment");
        if (r == 0)
            break;
        got += (size_t)r;
    }
    c->win_off = off;
    c->win_len = got;
    c->win_synced = c->sp->synced_seq;
    return 0;
}

/* Makes file bytes [off, off+need) available in the window. */
static int window(sg_spool_cursor *c, uint64_t off, size_t need, uint64_t end, sg_err *err)
{
    if (off >= c->win_off && off + need <= c->win_off + c->win_len)
        return 0;
    /* never read past `end`: bytes beyond it may not be synced yet */
    if (window_fill(c, off, need, end, err) < 0)
        return -1;
    if (c->win_len < need)
        return sg_err_set(err, EIO, "spool segment shorter than expected");
    return 0;
}

/* Hands out the record at r (at c->off in the window) and moves past it. */
static int cursor_take(sg_spool_cursor *c, uint8_t *r, uint32_t plen, int64_t rs, char **data,
                       size_t *len, int64_t *seq)
{
    c->off += SG_SPOOL_HDR_SIZE + plen;
    c->after = rs;
    *data = (char *)r + SG_SPOOL_HDR_SIZE;
    *len = plen;
    *seq = rs;
    return 1;
}

static int reader_next(sg_spool_cursor *c, int64_t max_seq, char **data, size_t *len,
                       int64_t *seq, sg_err *err);

int sg_spool_cursor_next(sg_spool_cursor *c, int64_t max_seq, char **data, size_t *len,
                         int64_t *seq, sg_err *err)
{
    sg_spool *sp = c->sp;
    if (sp->reader)
        return reader_next(c, max_seq, data, len, seq, err);
    for (;;) {
        const seg *s = NULL;
        if (c->fd >= 0) {
            s = find_seg(sp, c->seg_name);
            if (!s) /* trimmed under us: everything in it was acked */
                sg_close_reset(&c->fd);
        }
        if (c->fd < 0) {
            /* records are in seq order across segments */
            for (size_t i = 0; i < sp->nsegs; i++) {
                if (sp->segs[i].last > c->after) {
                    s = &sp->segs[i];
                    break;
                }
            }
            if (!s)
                return 0;
            char name[SEG_NAME_LEN + 8];
            seg_filename(name, s->name);
            c->fd = openat(sp->dirfd, name, O_RDONLY | O_CLOEXEC);
            if (c->fd < 0)
                return sg_err_sys(err, "open %s/%s", sp->dir, name);
            c->seg_name = s->name;
            c->off = 0;
            c->win_len = 0;
            c->win_off = 0;
        }
        bool is_active = s == active(sp);
        uint64_t end = is_active ? sp->synced_size : s->size;
        if (c->off + SG_SPOOL_HDR_SIZE > end) {
            if (is_active)
                return 0;
            sg_close_reset(&c->fd); /* every record in it is <= after */
            continue;
        }
        if (window(c, c->off, SG_SPOOL_HDR_SIZE, end, err) < 0)
            return -1;
        const uint8_t *h = c->buf + c->headroom + (c->off - c->win_off);
        int64_t plen = hdr_payload_len(h);
        if (plen < 0 || c->off + SG_SPOOL_HDR_SIZE + (uint64_t)plen > end)
            return sg_err_set(err, EBADMSG, "spool segment %" PRId64 ": bad record at %" PRIu64,
                              c->seg_name, c->off);
        int64_t rs = (int64_t)get64(h + 8);
        if (rs <= c->after) {
            c->off += SG_SPOOL_HDR_SIZE + (uint64_t)plen;
            continue;
        }
        if (rs > max_seq)
            return 0;
        if (window(c, c->off, SG_SPOOL_HDR_SIZE + (size_t)plen, end, err) < 0)
            return -1;
        uint8_t *r = c->buf + c->headroom + (c->off - c->win_off);
        if (!rec_crc_ok(r, (uint32_t)plen))
            return sg_err_set(err, EBADMSG, "spool record seq %" PRId64 ": checksum mismatch", rs);
        return cursor_take(c, r, (uint32_t)plen, rs, data, len, seq);
    }
}

/* --- a reader's cursor: it has no segment table and no sizes, only the
 * owner's synced seq. Seqs are contiguous, so the record it wants is
 * always after + 1; it reads one only once the owner reported it synced
 * (then every byte before it in its segment is final too), and finds its
 * segment by name (a segment is named by its first seq). */

static int reader_bad(const sg_spool_cursor *c, sg_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int reader_bad(const sg_spool_cursor *c, sg_err *err, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char name[SEG_NAME_LEN + 8];
    seg_filename(name, c->seg_name);
    return sg_err_set(err, EBADMSG, "spool %s/%s offset %" PRIu64 ": %s", c->sp->dir, name,
                      c->off, what);
}

/* Makes [c->off, c->off + need) available: 1, or 0 if the file ends right
 * at c->off and eof_ok. Bytes read before `seq` was reported synced may be
 * half written, or cut and rewritten since (a failed sync), so they are
 * read again. */
static int reader_window(sg_spool_cursor *c, size_t need, int64_t seq, bool eof_ok, sg_err *err)
{
    if (seq <= c->win_synced && c->off >= c->win_off &&
        c->off + need <= c->win_off + c->win_len)
        return 1;
    if (window_fill(c, c->off, need, UINT64_MAX, err) < 0)
        return -1;
    if (c->win_len >= need)
        return 1;
    if (c->win_len == 0 && eof_ok)
        return 0;
    return reader_bad(c, err, "record cut short (%zu of %zu bytes)", c->win_len, need);
}

/* Switches to segment `name`: 1, 0 if it is gone (trimmed), -1 on error. */
static int reader_open(sg_spool_cursor *c, int64_t name, sg_err *err)
{
    char fn[SEG_NAME_LEN + 8];
    seg_filename(fn, name);
    int fd = openat(c->sp->dirfd, fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : sg_err_sys(err, "open %s/%s", c->sp->dir, fn);
    sg_close_reset(&c->fd);
    c->fd = fd;
    c->seg_name = name;
    c->off = 0;
    c->win_off = 0;
    c->win_len = 0;
    c->gap_ok = false;
    return 1;
}

/* Lists the segments and opens the one to go on with: after a segment
 * named `done`, the next one; for a fresh position (done < 0), the newest
 * one named at or below after + 1, or else the oldest. 1: opened, 0: none. */
static int reader_locate(sg_spool_cursor *c, int64_t done, sg_err *err)
{
    sg_spool *sp = c->sp;
    for (;;) { /* again if the owner trims one between listing and open */
        if (list_segments(sp, err) < 0)
            return -1;
        int64_t want = c->after + 1;
        size_t i = 0;
        if (done >= 0) {
            while (i < sp->nsegs && sp->segs[i].name <= done)
                i++;
        } else {
            while (i + 1 < sp->nsegs && sp->segs[i + 1].name <= want)
                i++;
        }
        if (i >= sp->nsegs)
            return 0;
        int r = reader_open(c, sp->segs[i].name, err);
        if (r != 0) {
            c->gap_ok = r > 0 && done < 0 && i == 0 && sp->segs[0].name > want;
            return r;
        }
    }
}

/* No segment holds `want`: fine if everything up to synced is acked (the
 * owner may have trimmed it all); an owner reports a seq synced only once
 * its record is on disk, so otherwise records are missing. */
static int reader_missing(const sg_spool_cursor *c, int64_t want, sg_err *err)
{
    const sg_spool *sp = c->sp;
    if (sp->synced_seq <= sp->acked_seq)
        return 0;
    return sg_err_set(err, ENODATA, "spool %s: seq %" PRId64 " is synced but no segment holds it",
                      sp->dir, want);
}

static int reader_next(sg_spool_cursor *c, int64_t max_seq, char **data, size_t *len,
                       int64_t *seq, sg_err *err)
{
    sg_spool *sp = c->sp;
    for (;;) {
        /* Above the owner's synced seq a record may be half written: not a
         * byte of it is read. */
        if (c->after >= sp->synced_seq || c->after >= max_seq)
            return 0;
        int64_t want = c->after + 1;
        int r;
        if (c->fd < 0) {
            r = reader_locate(c, -1, err);
            if (r <= 0)
                return r < 0 ? -1 : reader_missing(c, want, err);
        }
        r = reader_window(c, SG_SPOOL_HDR_SIZE, want, true, err);
        if (r < 0)
            return -1;
        if (r == 0) {
            /* The end of this segment: the owner went on in one named by
             * its next seq, unless that one is trimmed already. */
            r = want != c->seg_name ? reader_open(c, want, err) : 0;
            if (r == 0)
                r = reader_locate(c, c->seg_name, err);
            if (r <= 0)
                return r < 0 ? -1 : reader_missing(c, want, err);
            continue;
        }
        const uint8_t *h = c->buf + c->headroom + (c->off - c->win_off);
        int64_t plen = hdr_payload_len(h);
        if (plen < 0)
            return reader_bad(c, err, "bad record header (seq %" PRId64 " expected)", want);
        int64_t rs = (int64_t)get64(h + 8);
        if (rs <= c->after) {
            c->off += SG_SPOOL_HDR_SIZE + (uint64_t)plen;
            continue;
        }
        if (rs != want) {
            /* A jump is only over seqs that are acked (trimmed, or skipped
             * by an owner that got an ack beyond its next seq), or to the
             * oldest record on disk (what an owner's cursor replays too). */
            if (!c->gap_ok && rs - 1 > sp->acked_seq)
                return reader_bad(c, err, "record seq %" PRId64 " where seq %" PRId64
                                  " was expected", rs, want);
            if (rs > c->win_synced) { /* read before it was synced */
                c->win_len = 0;
                if (rs > sp->synced_seq)
                    return 0;
                continue;
            }
        }
        if (rs > max_seq)
            return 0;
        r = reader_window(c, SG_SPOOL_HDR_SIZE + (size_t)plen, rs, false, err);
        if (r < 0)
            return -1;
        uint8_t *rec = c->buf + c->headroom + (c->off - c->win_off);
        if (!rec_crc_ok(rec, (uint32_t)plen))
            return reader_bad(c, err, "checksum mismatch in record seq %" PRId64, rs);
        c->gap_ok = false;
        return cursor_take(c, rec, (uint32_t)plen, rs, data, len, seq);
    }
}

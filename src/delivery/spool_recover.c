/* spool_recover: the spool's recovery at open (spool.h: Recovery) -- a
 * torn last record is cut off, a corrupt region elsewhere goes to
 * quarantine.log and out of its segment, lost seqs become placeholders. */
#include "delivery/spool_internal.h"

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
#include "base/json.h"
#include "base/util.h"
#include "wire/event.h"

/* --- recovery */

enum { IT_REC, IT_BAD };

typedef struct item {
    int type;
    size_t off, len;
    int64_t seq;
    int64_t gap;           /* IT_REC: placeholders to write before it */
    uint32_t rtype;        /* IT_REC: SG_SPOOL_REC_EVENT or _BLOB */
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
        uint32_t rtype = 0;
        size_t sz = sg_spool_rec_valid_at(b, n, off, &seq, &rtype);
        if (sz) {
            if (items_push(out, (item){.type = IT_REC, .off = off, .len = sz, .seq = seq,
                                       .rtype = rtype}) < 0)
                return -1;
            off += sz;
            continue;
        }
        size_t found = n;
        for (size_t p = off + 1; p + SG_SPOOL_HDR_SIZE <= n; p++) {
            const uint8_t *q = memmem(b + p, n - p, SG_SPOOL_REC_MAGIC, 4);
            if (!q)
                break;
            p = (size_t)(q - b);
            int64_t s2;
            if (sg_spool_rec_valid_at(b, n, p, &s2, NULL)) {
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

/* The record that stands in for seq, lost to corruption: built by the one
 * frame builder (wire/event.h); the spool does not know its sandbox, so it
 * has no sandbox_id (the ingest takes a frame without one). */
static char *placeholder(int64_t seq, const char *ts)
{
    json_t *f = sg_event_frame(seq, SG_EV_ACTIVITY,
                               json_pack("{s:s, s:s}", "state", "spool_gap", "reason",
                                         "event lost to spool corruption, found at recovery"),
                               ts, NULL);
    char *s = f ? sg_json_dump(f) : NULL;
    json_decref(f);
    return s;
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
    char tmp[SG_SPOOL_SEG_NAME_LEN + 16];
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
            sg_autofree char *ph = placeholder(g, ts);
            if (!ph)
                return sg_err_set(err, ENOMEM, "out of memory");
            size_t pn = strlen(ph);
            uint8_t hdr[SG_SPOOL_HDR_SIZE];
            sg_spool_rec_header(hdr, g, SG_SPOOL_REC_EVENT, ph, pn);
            fwrite(hdr, 1, sizeof hdr, f);
            fwrite(ph, 1, pn, f);
            size += SG_SPOOL_HDR_SIZE + pn;
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
    char name[SG_SPOOL_SEG_NAME_LEN + 8];
    sg_spool_seg_filename(name, s->name);
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
            if (x->rtype == SG_SPOOL_REC_BLOB) {
                /* A blob goes with the event of its seq, the next one
                 * (before the first event kept: one at or below where
                 * the events must start, an acked one kept in its
                 * segment with its event). */
                if (*prev >= 0 ? x->seq != want : (fill_from >= 0 && x->seq > fill_from)) {
                    x->type = IT_BAD;
                    x->why = "blob record out of place";
                } else {
                    if (s->first < 0)
                        s->first = x->seq;
                    s->last = x->seq;
                    s->size = x->off + x->len;
                    continue;
                }
            } else if (*prev >= 0 && x->seq <= *prev) {
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
                    sg_spool_rep_note(rep, "spool %s: seqs %" PRId64 "..%" PRId64
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
            sg_spool_rep_note(rep, "spool %s: torn last record (%zu bytes at offset %zu) cut off",
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
        sg_spool_rep_note(rep, "spool %s: %zu corrupt bytes at offset %zu (%s) moved to quarantine.log",
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

/* Blob records after the spool's last event: their event was never
 * written (a crash came between a file's content and its file_diff), so
 * they would go with the next event appended, whose files they are not.
 * They are cut off the end and counted (blobs_dropped). The tail is the
 * last segment that holds a record after the segments' own recovery: a
 * segment left empty (or holding only such blobs, dropped whole) makes the
 * one before it the tail, so a second recovery finds none left. */
static int drop_tail_blobs(sg_spool *sp, sg_spool_report *rep, sg_err *err)
{
    for (size_t i = sp->nsegs; i-- > 0;) {
        seg *s = &sp->segs[i];
        if (s->first < 0 || s->size == 0)
            continue;
        char name[SG_SPOOL_SEG_NAME_LEN + 8];
        sg_spool_seg_filename(name, s->name);
        sg_autoclose int fd = openat(sp->dirfd, name, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return sg_err_sys(err, "open %s/%s", sp->dir, name);
        __attribute__((cleanup(unmapp))) mapping m = {NULL, (size_t)s->size};
        void *p = mmap(NULL, m.n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return sg_err_sys(err, "map %s/%s", sp->dir, name);
        m.p = p;
        __attribute__((cleanup(items_freep))) items it = {0};
        if (scan(p, m.n, &it) < 0)
            return sg_err_set(err, ENOMEM, "out of memory");
        /* the trailing blob records (a bad region, which recovery leaves
         * none of, ends the search) */
        size_t k = it.n, dropped = 0;
        while (k > 0 && it.v[k - 1].type == IT_REC && it.v[k - 1].rtype == SG_SPOOL_REC_BLOB)
            k--, dropped++;
        if (!dropped)
            return 0; /* the spool ends with an event */
        size_t cut = it.v[k].off;
        if (ftruncate(fd, (off_t)cut) < 0 || fdatasync(fd) < 0)
            return sg_err_sys(err, "cut %s/%s", sp->dir, name);
        s->first = k ? it.v[0].seq : -1;
        s->last = k ? it.v[k - 1].seq : -1;
        s->size = cut;
        if (rep)
            rep->blobs_dropped += dropped;
        sg_spool_rep_note(rep, "spool %s: %zu blob records (%zu bytes) after the last event dropped "
                          "(their event was never written)", name, dropped, m.n - cut);
        if (k)
            return 0;
    }
    return 0;
}

/* Fills sp->segs with the segment files, sorted by name (a reader lists
 * again whenever it looks for a segment). */
int sg_spool_list_segments(sg_spool *sp, sg_err *err)
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
        } else if (sg_spool_parse_seg_name(de->d_name, &name) == 0) {
            if (sg_spool_seg_push(sp, (seg){.name = name, .first = -1, .last = -1}, err) < 0)
                return -1;
        }
    }
    if (sp->nsegs > 1)
        qsort(sp->segs, sp->nsegs, sizeof *sp->segs, sg_spool_cmp_seg);
    return 0;
}

int sg_spool_recover(sg_spool *sp, sg_spool_report *rep, sg_err *err)
{
    if (sg_spool_list_segments(sp, err) < 0)
        return -1;
    /* The ack. */
    bool ack_exists = faccessat(sp->dirfd, "ack", F_OK, 0) == 0;
    sp->ackfd = openat(sp->dirfd, "ack", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (sp->ackfd < 0)
        return sg_err_sys(err, "open %s/ack", sp->dir);
    uint8_t slots[2 * SG_SPOOL_ACK_SLOT] = {0};
    ssize_t got = pread(sp->ackfd, slots, sizeof slots, 0);
    if (got < 0)
        return sg_err_sys(err, "read %s/ack", sp->dir);
    int best = sg_spool_ack_read(slots, got, &sp->acked_seq);
    sp->ack_slot = best == 0 ? 1 : 0; /* overwrite the older */

    bool ack_known = best >= 0 || (!ack_exists && sp->nsegs == 0);
    if (!ack_known && sp->nsegs > 0) {
        if (rep)
            rep->ack_reset = true;
        sg_spool_rep_note(rep, "spool: ack file unreadable; replaying every record");
    }
    if (!ack_exists && sp->nsegs == 0) {
        /* A fresh spool: "nothing acked" is a known state, not a lost file. */
        sp->ack_slot = 0;
        if (sg_spool_ack_write(sp, -1, err) < 0)
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
    if (drop_tail_blobs(sp, rep, err) < 0)
        return -1;
    if (rep)
        rep->segments = sp->nsegs;

    /* Drop empty segments; the active one is created at the next append. */
    size_t k = 0;
    for (size_t i = 0; i < sp->nsegs; i++) {
        if (sp->segs[i].first >= 0) {
            sp->segs[k++] = sp->segs[i];
            continue;
        }
        char name[SG_SPOOL_SEG_NAME_LEN + 8];
        sg_spool_seg_filename(name, sp->segs[i].name);
        unlinkat(sp->dirfd, name, 0);
    }
    sp->nsegs = k;

    int64_t max = prev > sp->acked_seq ? prev : sp->acked_seq;
    sp->next_seq = max + 1;
    sp->synced_seq = max;
    if (sp->nsegs > 0) {
        seg *a = &sp->segs[sp->nsegs - 1];
        char name[SG_SPOOL_SEG_NAME_LEN + 8];
        sg_spool_seg_filename(name, a->name);
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

/* spool_cursor: reading a spool's records back in seq order -- the
 * owner's cursor over its segment table, and a reader's (the uplink
 * daemon's, sg_spool_open_reader) that knows only the synced seq. */
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
#include "base/util.h"

#define CURSOR_CHUNK (256 * 1024)  /* read-ahead of a cursor */

/* ------------------------------------------------------------------ cursor */

struct sg_spool_cursor {
    sg_spool *sp;
    int64_t after;         /* records <= after are skipped */
    int fd;                /* current segment, -1: pick one */
    int64_t seg_name;
    uint64_t off;          /* next record in it */
    sg_buf buf;            /* [headroom][cap]: its data as a region (len unused) */
    size_t headroom, cap;
    uint64_t win_off;      /* file range held at buf + headroom */
    size_t win_len;
    int64_t win_synced;    /* reader: the synced seq when the window was read */
    bool gap_ok;           /* reader: nothing older is on disk, so the next
                              record may be above after + 1 */
    bool blob;             /* the record last handed out is a blob record */
    int64_t done_seg;      /* the last segment read to its end (-1: none): a
                              blob past its segment's last event leaves `after`
                              below the segment's last seq, which would pick it
                              again for ever */
};

/* The window's first byte (after the headroom). */
static uint8_t *win(const sg_spool_cursor *c)
{
    return (uint8_t *)c->buf.data + c->headroom;
}

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
    if (sg_buf_reserve(&c->buf, headroom + c->cap) < 0) {
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
    c->done_seg = -1;
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
    sg_buf_free(&c->buf);
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
        if (sg_buf_reserve(&c->buf, c->headroom + need) < 0)
            return sg_err_set(err, ENOMEM, "out of memory");
        c->cap = need;
    }
    size_t want = c->cap;
    if (end - off < want)
        want = (size_t)(end - off);
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(c->fd, win(c) + got, want - got, (off_t)(off + got));
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
    /* A blob record shares its seq with the event after it: still wanted. */
    c->blob = sg_spool_rec_type(r) == SG_SPOOL_REC_BLOB;
    if (!c->blob)
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
                if (sp->segs[i].last > c->after && sp->segs[i].name > c->done_seg) {
                    s = &sp->segs[i];
                    break;
                }
            }
            if (!s)
                return 0;
            char name[SG_SPOOL_SEG_NAME_LEN + 8];
            sg_spool_seg_filename(name, s->name);
            c->fd = openat(sp->dirfd, name, O_RDONLY | O_CLOEXEC);
            if (c->fd < 0)
                return sg_err_sys(err, "open %s/%s", sp->dir, name);
            c->seg_name = s->name;
            c->off = 0;
            c->win_len = 0;
            c->win_off = 0;
        }
        bool is_active = s == sg_spool_active(sp);
        uint64_t end = is_active ? sp->synced_size : s->size;
        if (c->off + SG_SPOOL_HDR_SIZE > end) {
            if (is_active)
                return 0;
            c->done_seg = c->seg_name;
            sg_close_reset(&c->fd); /* every record in it is <= after, or handed out */
            continue;
        }
        if (window(c, c->off, SG_SPOOL_HDR_SIZE, end, err) < 0)
            return -1;
        const uint8_t *h = win(c) + (c->off - c->win_off);
        int64_t plen = sg_spool_hdr_payload_len(h);
        if (plen < 0 || c->off + SG_SPOOL_HDR_SIZE + (uint64_t)plen > end)
            return sg_err_set(err, EBADMSG, "spool segment %" PRId64 ": bad record at %" PRIu64,
                              c->seg_name, c->off);
        int64_t rs = (int64_t)sg_spool_get64(h + 8);
        if (rs <= c->after) {
            c->off += SG_SPOOL_HDR_SIZE + (uint64_t)plen;
            continue;
        }
        if (rs > max_seq)
            return 0;
        if (window(c, c->off, SG_SPOOL_HDR_SIZE + (size_t)plen, end, err) < 0)
            return -1;
        uint8_t *r = win(c) + (c->off - c->win_off);
        if (!sg_spool_rec_crc_ok(r, (uint32_t)plen))
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
    char name[SG_SPOOL_SEG_NAME_LEN + 8];
    sg_spool_seg_filename(name, c->seg_name);
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
    char fn[SG_SPOOL_SEG_NAME_LEN + 8];
    sg_spool_seg_filename(fn, name);
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
        if (sg_spool_list_segments(sp, err) < 0)
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
        const uint8_t *h = win(c) + (c->off - c->win_off);
        int64_t plen = sg_spool_hdr_payload_len(h);
        if (plen < 0)
            return reader_bad(c, err, "bad record header (seq %" PRId64 " expected)", want);
        int64_t rs = (int64_t)sg_spool_get64(h + 8);
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
        uint8_t *rec = win(c) + (c->off - c->win_off);
        if (!sg_spool_rec_crc_ok(rec, (uint32_t)plen))
            return reader_bad(c, err, "checksum mismatch in record seq %" PRId64, rs);
        c->gap_ok = false;
        return cursor_take(c, rec, (uint32_t)plen, rs, data, len, seq);
    }
}


bool sg_spool_cursor_was_blob(const sg_spool_cursor *c)
{
    return c->blob;
}

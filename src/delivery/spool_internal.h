/* spool_internal: the spool's private interface, shared by the files of
 * src/delivery/ that implement spool.h and by nothing else (spool.h is the
 * public one, and holds the format and the rules). The parts:
 *   spool.c          CRC32C, the record and ack formats, open and close,
 *                    the writer (append, sync, rotate, ack)
 *   spool_recover.c  recovery at open: torn tails, quarantine, placeholders
 *   spool_cursor.c   reading records back, the owner's cursor and a
 *                    reader's (sg_spool_open_reader)
 * `seg` keeps the short name it had in the one spool.c (no symbol); the
 * functions shared between the files are sg_spool_. */
#ifndef SG_SPOOL_INTERNAL_H
#define SG_SPOOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "delivery/spool.h"

#define SG_SPOOL_REC_MAGIC "SGR1"
#define SG_SPOOL_ACK_SLOT 32
#define SG_SPOOL_SEG_NAME_LEN 28            /* "seg-" + 20 digits + ".log" */

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

/* ---------- records (spool.c) ---------- */

uint64_t sg_spool_get64(const uint8_t *p);
/* type: SG_SPOOL_REC_EVENT or SG_SPOOL_REC_BLOB (spool.h). */
void sg_spool_rec_header(uint8_t hdr[SG_SPOOL_HDR_SIZE], int64_t seq, uint32_t type,
                         const void *data, size_t len);
/* The type of the valid record header at h. */
uint32_t sg_spool_rec_type(const uint8_t *h);
/* Payload length of the record header at h, or -1 if h is not one. */
int64_t sg_spool_hdr_payload_len(const uint8_t *h);
/* Whether the checksum of the whole record at r (header + plen bytes) holds. */
bool sg_spool_rec_crc_ok(const uint8_t *r, uint32_t plen);
/* Size of the valid record at b[off], or 0 if there is none. */
size_t sg_spool_rec_valid_at(const uint8_t *b, size_t n, size_t off, int64_t *seq, uint32_t *type);

/* ---------- segments and the ack file (spool.c) ---------- */

void sg_spool_seg_filename(char buf[SG_SPOOL_SEG_NAME_LEN + 8], int64_t name);
int sg_spool_parse_seg_name(const char *s, int64_t *out);
int sg_spool_seg_push(sg_spool *sp, seg s, sg_err *err);
int sg_spool_cmp_seg(const void *a, const void *b);
/* The segment appended to: the last one, or NULL. */
seg *sg_spool_active(sg_spool *sp);
/* Appends a line to the recovery report's text (rep may be NULL). */
void sg_spool_rep_note(sg_spool_report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Decodes the ack file's bytes: the valid slot with the highest seq wins
 * (-1 if neither is valid). Returns that slot, or -1. */
int sg_spool_ack_read(const uint8_t *slots, ssize_t got, int64_t *seq);
int sg_spool_ack_write(sg_spool *sp, int64_t seq, sg_err *err);

/* ---------- recovery (spool_recover.c) ---------- */

/* Fills sp->segs with the segment files, sorted by name (a reader lists
 * again whenever it looks for a segment). */
int sg_spool_list_segments(sg_spool *sp, sg_err *err);
/* Opens the ack file and recovers every segment (spool.h: Recovery). */
int sg_spool_recover(sg_spool *sp, sg_spool_report *rep, sg_err *err);

#endif

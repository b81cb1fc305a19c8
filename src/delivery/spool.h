/* spool: the per-sandbox durable event log, written before any send.
 *
 * A directory (under the state dir, never in the workspace) holds
 *   seg-<first seq, 20 digits>.log   append-only segments, rotated at
 *                                    sg_spool_set_segment_bytes (4 MiB)
 *   ack                              the highest seq the ingest acked
 *                                    (two checksummed slots, alternating)
 *   quarantine.log                   corrupt bytes found at recovery
 *   lock                             flock: one writer (owner) per spool
 *   format                           "sandglass spool format N\n"
 *
 * A record is a 24-byte little-endian header + payload (one wire frame):
 *   u32 magic "SGR1" | u32 payload length | i64 seq | u32 type |
 *   u32 CRC32C of the header's first 20 bytes and the payload.
 * type 0: an event (format 1 had only these, the field reserved as 0);
 * type 1 (format 2): a blob frame (wire/event.h: a file content's or a
 * recording's part), which takes no seq of its own: it carries the seq of
 * the event appended after it (sg_spool_next_seq() when written), is sent
 * before that event and acked with it. Several may share a seq; they
 * never advance next_seq, are never counted as lost events, and stay in
 * the segment of their event (no rotation between them). Blobs after the
 * spool's last event (a crash between them and their event) are dropped
 * at recovery and counted (sg_spool_report.blobs_dropped): they would
 * otherwise go with the next event appended, whose they are not. The
 * tail is the last segment holding a record once each is recovered (an
 * emptied last segment makes the one before it the tail).
 *
 * Versions: the format file names the spool's format, SG_SPOOL_FORMAT
 * (1: the records and ack file above). A spool without it was written by a
 * build before the file (b7b6c74 and earlier), in format 1: it is read as
 * such and the file is written after its recovery. A newer format (or an
 * unreadable file) is refused at open, owner and reader alike, before
 * recovery looks at a record, with an error saying what to do; a build that
 * changes the layout of a record or the ack raises SG_SPOOL_FORMAT and
 * reads the formats before it (tests/fixtures/spool-v1: a spool of the
 * build before the file, read by unit/spool).
 *
 * Seqs are contiguous from 0: the ingest acks the highest *contiguous* seq,
 * so a hole would stall acks forever. Hence:
 *  - append takes exactly sg_spool_next_seq(); a failed append (disk full)
 *    consumes no seq, and a failed sync cuts the unsynced records off and
 *    rewinds next_seq to synced + 1. Only synced records are ever sent, so a
 *    rewound seq was never seen by the ingest and is safe to reuse. Lost
 *    events are counted (sg_spool_take_loss) for one report event.
 *  - recovery (sg_spool_open) replaces each record lost to corruption by a
 *    placeholder record {"seq":N,"kind":"activity","payload":{"state":
 *    "spool_gap",...}} so the stream stays contiguous.
 *
 * Recovery: a torn last record (crash mid-write) is cut off with a warning;
 * a corrupt region anywhere else is appended to quarantine.log and removed
 * from its segment (rewritten atomically); the records after it are kept.
 * Everything found on disk is fdatasync'ed, so synced_seq = last seq.
 *
 * Not thread-safe: one owner (the supervisor's loop). Another process may
 * read the spool with sg_spool_open_reader (the uplink daemon). */
#ifndef SG_SPOOL_H
#define SG_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_SPOOL_FORMAT 2 /* the format this build writes and the newest it reads */
/* A record's type (the header's u32 after the seq; 0 in format 1). */
#define SG_SPOOL_REC_EVENT 0u
#define SG_SPOOL_REC_BLOB 1u
#define SG_SPOOL_HDR_SIZE 24
#define SG_SPOOL_SEGMENT_BYTES_DEFAULT (4u << 20)
#define SG_SPOOL_REPORT_TEXT 2048
/* A seq jump larger than this inside the spool is not a gap to fill but a
 * corrupt record (bounds the placeholders recovery writes). */
#define SG_SPOOL_GAP_MAX 50000

typedef struct sg_spool sg_spool;
typedef struct sg_spool_cursor sg_spool_cursor;

typedef struct sg_spool_report {
    size_t segments;           /* segment files found */
    size_t records;            /* valid records kept */
    size_t torn;               /* torn tails cut off (0 or 1) */
    size_t torn_bytes;
    size_t quarantined;        /* corrupt regions moved to quarantine.log */
    size_t quarantined_bytes;
    size_t placeholders;       /* missing seqs filled with a spool_gap record */
    size_t blobs_dropped;      /* blob records after the last event, whose event was never written */
    bool ack_reset;            /* ack file unreadable: everything is replayed */
    int64_t first_seq;         /* oldest record kept, -1 if none */
    int64_t last_seq;          /* newest record kept, -1 if none */
    int64_t acked_seq;
    char text[SG_SPOOL_REPORT_TEXT]; /* one warning per line, for the log */
} sg_spool_report;

typedef struct sg_spool_loss {
    uint64_t count;            /* events lost to a failed write or sync */
    int64_t first_seq;         /* the seqs they were appended with (reused */
    int64_t last_seq;          /*  since they were never sent) */
    int err;                   /* errno of the first failure (ENOSPC, ...) */
} sg_spool_loss;

typedef struct sg_spool_stats {
    int64_t next_seq, synced_seq, acked_seq;
    uint64_t pending;          /* appended but not acked */
    uint64_t pending_bytes;    /* bytes of the segments holding those (an owner's; 0 for a reader) */
    uint64_t appended, syncs, lost;
    size_t segments;
} sg_spool_stats;

/* Opens (creating dir 0700 if needed) and recovers the spool. rep optional. */
sg_spool *sg_spool_open(const char *dir, sg_spool_report *rep, sg_err *err);

/* Called by a reader's sg_spool_ack: the owner persists the ack and trims. */
typedef void (*sg_spool_ack_fn)(void *ud, int64_t seq);

/* A second process's view of a spool another process owns (the uplink
 * daemon), to send it: cursors, sg_spool_ack and the getters work as on an
 * owned spool; sg_spool_append and sg_spool_sync fail with EPERM.
 *  - It opens dir read-only, takes no lock, recovers nothing, and never
 *    writes or deletes a file: the owner stays the only writer.
 *  - acked_seq starts at the ack file's value (-1 if the file is missing or
 *    unreadable, as recovery's ack_reset: everything is replayed).
 *    sg_spool_ack records a higher ack and hands it to ack_fn (may be
 *    NULL), which passes it to the owner's sg_spool_ack; no file changes.
 *  - synced_seq is what the owner reports (sg_spool_reader_set_synced), -1
 *    until then: a cursor never reads a byte of a record above it, since
 *    the owner may still be writing it, or cut it after a failed sync.
 *    next_seq = max(synced, acked) + 1 (as the owner skips ahead on an ack
 *    beyond its next seq); pending = synced - acked (appended, unsynced
 *    records are invisible here); stats count no appends, syncs or losses,
 *    and `segments` is the reader's last directory listing.
 *  - Segments trimmed by the owner under a cursor: the open one still
 *    reads; the next is found by name (its first seq) or a new listing.
 *    Acked records that are gone are skipped, as by an owner's cursor.
 *  - A cursor wants seq after + 1 next: another seq (unless the ones in
 *    between are acked), a bad magic, length or checksum is EBADMSG
 *    naming the segment and offset; a synced seq that no segment holds is
 *    ENODATA.
 *  - When the owner reopens (recovers) the spool, open a new reader:
 *    recovery may replace a segment file an open cursor still reads.
 * Any number of readers may share a directory with its owner. */
sg_spool *sg_spool_open_reader(const char *dir, sg_spool_ack_fn ack_fn, void *ud, sg_err *err);
/* The owner's synced seq, as it reports it: records up to it are complete
 * on disk and may be read. Never goes backwards (a smaller value is
 * ignored). No effect on an owned spool. */
void sg_spool_reader_set_synced(sg_spool *sp, int64_t seq);

/* Closes (no sync: call sg_spool_sync first for durability). NULL is fine.
 * Every cursor must be freed before. */
void sg_spool_close(sg_spool *sp);
/* Segment rotation size (tests use small ones). */
void sg_spool_set_segment_bytes(sg_spool *sp, size_t bytes);

int64_t sg_spool_next_seq(const sg_spool *sp);
/* Appends one record with seq == sg_spool_next_seq() (write(2), no fsync).
 * len <= SG_SPOOL_RECORD_MAX. On ENOSPC/EDQUOT/EIO the segment is cut back
 * to before the record, the loss is counted, and -1 returned (errno in
 * err->code); a later append retries. */
int sg_spool_append(sg_spool *sp, int64_t seq, const void *data, size_t len, sg_err *err);
/* Appends a blob record at seq sg_spool_next_seq() (above), which it does
 * not advance. Same limits and errors as sg_spool_append; a failed one is
 * not counted in the loss (no event is lost). */
int sg_spool_append_blob(sg_spool *sp, const void *data, size_t len, sg_err *err);
/* Group commit: one fdatasync for everything appended since the last sync.
 * On failure the unsynced records are cut off and counted as lost,
 * next_seq rewinds, and -1 is returned. */
int sg_spool_sync(sg_spool *sp, sg_err *err);
/* Highest seq that is on disk for sure (-1: none). Only these may be sent. */
int64_t sg_spool_synced_seq(const sg_spool *sp);
int64_t sg_spool_acked_seq(const sg_spool *sp);
/* Records the ingest's ack (ignores one not above the current ack) and
 * deletes the segments it fully covers (a reader hands it to its ack_fn). */
int sg_spool_ack(sg_spool *sp, int64_t seq, sg_err *err);
uint64_t sg_spool_pending(const sg_spool *sp);
/* If events were lost since the last call, fills out, resets, returns true. */
bool sg_spool_take_loss(sg_spool *sp, sg_spool_loss *out);
void sg_spool_get_stats(const sg_spool *sp, sg_spool_stats *out);

/* Reads records with seq > after_seq in order. Each returned payload has
 * `headroom` writable bytes before it (LWS_PRE for lws_write). */
sg_spool_cursor *sg_spool_cursor_new(sg_spool *sp, int64_t after_seq, size_t headroom,
                                     sg_err *err);
/* Returns 1 and the next record if its seq <= max_seq, 0 if there is none
 * (yet), -1 on a read error or a record found corrupt. *data stays valid
 * until the next call. */
int sg_spool_cursor_next(sg_spool_cursor *c, int64_t max_seq, char **data, size_t *len,
                         int64_t *seq, sg_err *err);
/* Whether the record the last sg_spool_cursor_next returned is a blob
 * record (its seq is the event's after it, not yet handed out). */
bool sg_spool_cursor_was_blob(const sg_spool_cursor *c);
/* Repositions to the first record with seq > after_seq. */
void sg_spool_cursor_seek(sg_spool_cursor *c, int64_t after_seq);
void sg_spool_cursor_free(sg_spool_cursor *c);

/* CRC32C (Castagnoli), software, slicing-by-8. crc = 0 to start. */
uint32_t sg_spool_crc32c(uint32_t crc, const void *buf, size_t len);

#endif

/* event: the event kinds, the wire frame, and the ingest's strict frame
 * validator.
 *
 * Wire frame (as the original Python agent sends it):
 *   {"seq": N, "kind": K, "payload": {...}, "ts": "RFC 3339"[, "sandbox_id": ID]}
 * Identity (learner, task, sandbox) is bound at the WebSocket handshake by a
 * token and is never taken from a frame.
 *
 * Refusals and the WebSocket close code the ingest sends for each
 * (sg_event_validate returns the negated code):
 *   1009 SG_CLOSE_TOO_BIG     more than SG_FRAME_MAX bytes
 *   1007 SG_CLOSE_BAD_DATA    invalid UTF-8, invalid JSON, trailing garbage,
 *                             duplicate key, not an object; and schema errors:
 *                             unknown top-level key, unknown kind, seq not a
 *                             non-negative integer, ts missing or not a
 *                             string, payload missing or not an object
 *   1008 SG_CLOSE_POLICY      identity spoofing: learner_id or task_id in the
 *                             frame, or a sandbox_id other than the token's;
 *                             and (checked by the ingest, store.h) a seq that
 *                             is not the stream's next nor an identical
 *                             resend
 *   1007 (by the ingest)      a ts that is not RFC 3339 (sg_event_ts_valid)
 *   1003 SG_CLOSE_UNSUPPORTED a binary message (checked by the ingest)
 */
#ifndef SG_EVENT_H
#define SG_EVENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_CLOSE_UNSUPPORTED 1003
#define SG_CLOSE_BAD_DATA 1007
#define SG_CLOSE_POLICY 1008
#define SG_CLOSE_TOO_BIG 1009

typedef enum sg_event_kind {
    SG_EV_STDIN,
    SG_EV_COMMAND,
    SG_EV_STDOUT,
    SG_EV_RUN_RESULT,
    SG_EV_TEST_RESULT,
    SG_EV_FILE_DIFF,
    SG_EV_ACTIVITY,
    SG_EV_SESSION_ABORT,
    SG_EV_CHECKPOINT,
    SG_EV_ROLLBACK,
    SG_EV_LIMIT,
    SG_EV_SANDBOX,
    SG_EV_PROCESS, /* a program run in the sandbox, seen from the host (procevents.h) */
    SG_EV_BULK,    /* the changes of an exec past its file_diff limit, listed (watch.h) */
    SG_EV__COUNT
} sg_event_kind;

/* "stdin", "command", ...; NULL for an out-of-range kind. */
const char *sg_event_kind_name(int kind);
/* The kind for a name, or -1 if unknown. */
int sg_event_kind_from_name(const char *name);

/* The one builder of a wire frame (the capture's events, the spool's
 * recovery placeholders). payload is stolen (NULL: empty object); ts NULL
 * means now; sandbox_id NULL omits the key. NULL on a kind out of range, a
 * negative seq, a payload that is not an object, or OOM. */
json_t *sg_event_frame(int64_t seq, sg_event_kind kind, json_t *payload,
                       const char *ts, const char *sandbox_id);

/* A validated frame. root owns everything; the other fields borrow from it. */
typedef struct sg_event {
    json_t *root;
    int64_t seq;
    int kind;           /* sg_event_kind */
    const char *ts;     /* client's timestamp */
    json_t *payload;    /* an object */
} sg_event;

void sg_event_clear(sg_event *ev);

/* Strict check of one untrusted frame. expect_sandbox_id: the token's
 * sandbox (a frame's optional sandbox_id must equal it; NULL: any frame
 * sandbox_id is refused). Returns 0 and fills out, or the negated close
 * code (-1007, -1008, -1009) with err saying exactly what is wrong. */
int sg_event_validate(const char *buf, size_t len, const char *expect_sandbox_id,
                      sg_event *out, sg_err *err);

/* Whether ts (len bytes) is an RFC 3339 date-time, as the clients write it
 * (the C capture: "2026-12-02T02:04:59.123456+00:00"; the original Python
 * agent, datetime.isoformat(): the same, or without the fraction when it is
 * zero): YYYY-MM-DD, 'T' (or 't' or ' '), hh:mm:ss, an optional fraction of
 * 1-9 digits, then 'Z', 'z' or +hh:mm / -hh:mm; every field in range (the
 * day within its month, second 60 allowed for a leap second). The ingest
 * refuses other ts (close 1007); sg_event_validate itself does not check
 * it. */
bool sg_event_ts_valid(const char *ts, size_t len);

/* The bytes of the "payload" object as they stand in a frame that
 * sg_event_validate accepted, so the store keeps them without a re-dump.
 * -1 when the key is written with escapes (then dump the parsed payload). */
int sg_event_raw_payload(const char *buf, size_t len, const char **start, size_t *plen);

/* ---- blob frames: file contents and terminal recordings ------------------
 *
 * They travel on the event stream's connection and spool (a spool record of
 * kind SG_SPOOL_REC_BLOB, delivery/spool.h), but take no seq: the store
 * keeps them by what they are (a content by its sha256, a recording part by
 * its session and offset), so a replay stores nothing twice. Written by
 * sg_blob_*_frame only, compact, in exactly this form:
 *   {"content":{"sha256":HEX64,"size":N,"off":O,"data":BASE64}}
 *   {"cast":{"session":NAME,"off":O,"data":BASE64}}
 * at most SG_BLOB_PART raw bytes per frame (base64: well below
 * SG_FRAME_MAX). A content's parts cover [0, size) in order; a file of
 * size 0 is one part with no data. */
#define SG_BLOB_PART (384 * 1024)
#define SG_BLOB_SESSION_MAX 128

typedef enum sg_blob_kind { SG_BLOB_CONTENT = 1, SG_BLOB_CAST = 2 } sg_blob_kind;

typedef struct sg_blob {
    sg_blob_kind kind;
    char sha256[65];                       /* content */
    int64_t size;                          /* content: the whole size */
    char session[SG_BLOB_SESSION_MAX + 1]; /* cast */
    int64_t off;
    unsigned char *data;                   /* owned (sg_blob_clear) */
    size_t len;
} sg_blob;

/* The frame text (malloc'd, *flen bytes, NUL-terminated), or NULL (OOM, or
 * len above SG_BLOB_PART, or a bad sha256 / session). */
char *sg_blob_content_frame(const char *sha256, int64_t size, int64_t off, const void *data,
                            size_t len, size_t *flen);
char *sg_blob_cast_frame(const char *session, int64_t off, const void *data, size_t len,
                         size_t *flen);
/* Whether buf is meant as a blob frame (begins as one): then
 * sg_blob_parse decides it, else it is an event frame. */
bool sg_blob_is(const char *buf, size_t len);
/* Strict check of one untrusted blob frame: 0 and out, or -1007 with err. */
int sg_blob_parse(const char *buf, size_t len, sg_blob *out, sg_err *err);
void sg_blob_clear(sg_blob *b);

/* A session name for a cast frame: [A-Za-z0-9._-], 1..SG_BLOB_SESSION_MAX. */
bool sg_blob_session_valid(const char *s);

#endif

/* uplinkd: the messages between a supervisor and the per-host uplink
 * daemon (uplink.sock, delivery/uplink_daemon.h), typed, encoded and
 * parsed in one place, without sockets, for both ends and for
 * fuzz/fuzz_uplinkd.c (which round-trips them). One JSON object a
 * SOCK_SEQPACKET message:
 *   supervisor -> daemon  {"op":"hello","v":1,"sandbox","url","spool",
 *                          "secret_file","secret_create","learner","task",
 *                          "synced"[,"ca_file"]}   once, first
 *                         {"op":"synced","seq":N}   records up to N on disk
 *   daemon -> supervisor  {"ack":N} | {"event":NAME,"code","reason",
 *                          "retry_ms"} | {"error":TEXT} (then it closes)
 * Version: hello's "v" (SG_UPLINKD_VERSION). 2 added "ca_file" (the CAs a
 * wss:// ingest's certificate is verified by, an absolute path); a hello
 * without it says "v":1, which a daemon of version 1 still takes, and one
 * with it says 2, which such a daemon refuses instead of verifying by the
 * system's CAs behind the operator's back. The daemon lives longer than
 * one build (one per host, shared by every supervisor): a hello of another
 * version is answered {"error":...} saying which it speaks, and the
 * supervisor reports that as an uplink error (`sandglass ls`); stop the old
 * daemon (it exits when idle) to let the new build start its own.
 * Parsed strings point into the parsed JSON (held in the struct) until
 * sg_uplinkd_*_clear. */
#ifndef SG_WIRE_UPLINKD_H
#define SG_WIRE_UPLINKD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* One message either way, at the most (SOCK_SEQPACKET). */
#define SG_UPLINKD_MSG_MAX 65536
/* hello's "v": the protocol this build speaks. */
#define SG_UPLINKD_VERSION 2

typedef enum sg_uplinkd_op { SG_UPLINKD_HELLO, SG_UPLINKD_SYNCED } sg_uplinkd_op;

/* supervisor -> daemon */
typedef struct sg_uplinkd_msg {
    sg_uplinkd_op op;
    /* hello: every string non-empty, sandbox a valid name, spool absolute */
    const char *sandbox, *url, *spool, *secret_file, *learner, *task;
    const char *ca_file; /* hello: optional (NULL: the system's CAs), absolute */
    bool secret_create;
    int64_t seq; /* hello's synced, or synced's seq: >= -1 */
    json_t *json;
} sg_uplinkd_msg;

/* One message. -1 with err (a one-line reason for the peer) when it is not
 * JSON, has no op, an unknown op or version, a missing or bad field. */
int sg_uplinkd_msg_parse(const char *buf, size_t len, sg_uplinkd_msg *m, sg_err *err);
void sg_uplinkd_msg_clear(sg_uplinkd_msg *m);
/* The message's text (hello: every string of m, v SG_UPLINKD_VERSION;
 * synced: seq), to free; NULL on OOM or a string that is not UTF-8. m's
 * json is not used. */
char *sg_uplinkd_msg_encode(const sg_uplinkd_msg *m);

typedef enum sg_uplinkd_reply_kind { SG_UPLINKD_ACK, SG_UPLINKD_EVENT, SG_UPLINKD_REFUSED } sg_uplinkd_reply_kind;

/* EVENT's names, in the order of delivery/uplink.h's sg_uplink_event_type
 * (uplink_client.c checks that they agree). */
typedef enum sg_uplinkd_event {
    SG_UPLINKD_EV_CONNECTED,
    SG_UPLINKD_EV_DISCONNECTED,
    SG_UPLINKD_EV_REFUSED,
    SG_UPLINKD_EV_ERROR,
    SG_UPLINKD_EV__COUNT
} sg_uplinkd_event;

/* daemon -> supervisor */
typedef struct sg_uplinkd_reply {
    sg_uplinkd_reply_kind kind;
    int64_t ack;         /* ACK: >= -1 */
    int event;           /* EVENT: an sg_uplinkd_event (an unknown name: error) */
    int code;            /* EVENT: its code, 0 unless in int range */
    const char *reason;  /* EVENT: never NULL; REFUSED: the daemon's error */
    uint32_t retry_ms;   /* EVENT: 0 unless in (0, UINT32_MAX) */
    json_t *json;
} sg_uplinkd_reply;

int sg_uplinkd_reply_parse(const char *buf, size_t len, sg_uplinkd_reply *r, sg_err *err);
void sg_uplinkd_reply_clear(sg_uplinkd_reply *r);
/* The reply's text, to free; NULL on OOM. An event out of range is sent as
 * error; a NULL reason as "". */
char *sg_uplinkd_reply_encode(const sg_uplinkd_reply *r);

#endif

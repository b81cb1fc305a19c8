/* uplinkd_msg: the messages between a supervisor and the uplink daemon
 * (the wire in uplink_daemon.h), parsed in one place, without sockets, for
 * both ends and for fuzz/fuzz_uplinkd.c. The strings point into the parsed
 * JSON (held in the struct) until sg_uplinkd_*_clear. */
#ifndef SG_UPLINKD_MSG_H
#define SG_UPLINKD_MSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* One message either way, at the most (SOCK_SEQPACKET). */
#define SG_UPLINKD_MSG_MAX 65536

typedef enum sg_uplinkd_op { SG_UPLINKD_HELLO, SG_UPLINKD_SYNCED } sg_uplinkd_op;

/* supervisor -> daemon */
typedef struct sg_uplinkd_msg {
    sg_uplinkd_op op;
    /* hello: every string non-empty, sandbox a valid name, spool absolute */
    const char *sandbox, *url, *spool, *secret_file, *learner, *task;
    bool secret_create;
    int64_t seq; /* hello's synced, or synced's seq: >= -1 */
    json_t *json;
} sg_uplinkd_msg;

/* One message. -1 with err (a one-line reason for the peer) when it is not
 * JSON, has no op, an unknown op or version, a missing or bad field. */
int sg_uplinkd_msg_parse(const char *buf, size_t len, sg_uplinkd_msg *m, sg_err *err);
void sg_uplinkd_msg_clear(sg_uplinkd_msg *m);

typedef enum sg_uplinkd_reply_kind { SG_UPLINKD_ACK, SG_UPLINKD_EVENT, SG_UPLINKD_REFUSED } sg_uplinkd_reply_kind;

/* daemon -> supervisor */
typedef struct sg_uplinkd_reply {
    sg_uplinkd_reply_kind kind;
    int64_t ack;         /* ACK: >= -1 */
    int event;           /* EVENT: an sg_uplink_event_type (an unknown name: error) */
    int code;            /* EVENT: its code, 0 unless in int range */
    const char *reason;  /* EVENT: never NULL; REFUSED: the daemon's error */
    uint32_t retry_ms;   /* EVENT: 0 unless in (0, UINT32_MAX) */
    json_t *json;
} sg_uplinkd_reply;

int sg_uplinkd_reply_parse(const char *buf, size_t len, sg_uplinkd_reply *r, sg_err *err);
void sg_uplinkd_reply_clear(sg_uplinkd_reply *r);

#endif

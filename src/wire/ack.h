/* ack: the ingest's answer on an uplink connection (ws://.../v1/ingest,
 * subprotocol "sg-ingest"), typed: the one encoder (the ingest) and the one
 * decoder (the supervisor's uplink, `sandglass flush`, fuzz/fuzz_uplink.c).
 *
 *   ingest -> uplink   {"ack": N, "v": SG_ACK_VERSION}
 *
 * N: the highest contiguous seq the ingest has committed for the stream,
 * -1 when none. Sent after the handshake and after each commit.
 *
 * Version history: 0 (no "v"): {"ack": N}, the ingest of the builds before
 * versions (and what the original Python agent reads: it reads "ack" only);
 * 1: the same, with "v". A decoder takes its own version and every older
 * one; an ack of a newer version is refused with EPROTO and a message that
 * says what to do (the uplink then stops and keeps its spool: uplink.h). */
#ifndef SG_WIRE_ACK_H
#define SG_WIRE_ACK_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_ACK_VERSION 1
#define SG_ACK_MSG_MAX 64 /* an encoded ack, at most (NUL included) */

typedef struct sg_ack {
    int64_t ack; /* >= -1 */
    int v;       /* the sender's version; absent on the wire: 0 */
} sg_ack;

/* Writes the ack (with "v" when a->v > 0) into buf; returns its length, or
 * -1 when it does not fit. */
int sg_ack_encode(const sg_ack *a, char *buf, size_t size);

/* Strict decode of one message: a JSON object whose "ack" is an integer
 * >= -1 and whose "v", when there, an integer >= 0; other fields are
 * ignored (an older build's ack had none). -1 with err naming what is
 * wrong; EPROTO when the ack's version is newer than SG_ACK_VERSION. */
int sg_ack_decode(const char *buf, size_t len, sg_ack *out, sg_err *err);

#endif

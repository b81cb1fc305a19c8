/* libFuzzer target: the uplink's handling of what the ingest sends (its
 * acks: network bytes), through uplink.c's own message handler
 * (sg_uplink_handle_message, delivery/uplink_internal.h) on a real spool,
 * without a WebSocket connection (lws is never called: no wsi).
 *
 * Input: byte 0 the number of records spooled (mod 24), then messages from
 * the ingest, one a line.
 *
 * Invariants, after each message:
 *  - exactly the messages that are a JSON object with an integer "ack" in
 *    [-1, INT64_MAX - SG_UPLINK_WINDOW] (uplink.h) and no "v" or an integer
 *    "v" in [0, SG_ACK_VERSION] (wire/ack.h) are taken (the uplink's stats
 *    show that ack); one with an integer "v" above SG_ACK_VERSION stops the
 *    uplink (one SG_UPLINK_REFUSED event, retry 0, the spool unchanged);
 *    any other is one SG_UPLINK_ERROR event and changes nothing;
 *    sg_spool_ack itself refuses INT64_MAX;
 *  - a connection's first ack trims nothing past the spool's own ack (the
 *    uplink resends from the lower of the two; an ack below the spool's is
 *    one error event); a later ack counts only up to what the connection
 *    sent, and the spool's ack is then the highest taken, never beyond what
 *    the spool can number: next_seq > acked (no seq overflow, UBSan); an
 *    ack the spool cannot take is an error event, not a change;
 *  - what the uplink would send next (its cursor, up to the synced seq and
 *    the window) continues without gap or repeat after the ack;
 *  - reopened, the spool recovers the ack it was given. */
#include <jansson.h>
#include <libwebsockets.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "delivery/uplink_internal.h"
#include "wire/ack.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t n_errors, n_events, n_refused;

static void on_event(void *ud, const sg_uplink_event *ev)
{
    (void)ud;
    n_events++;
    if (ev->type == SG_UPLINK_ERROR)
        n_errors++;
    if (ev->type == SG_UPLINK_REFUSED && ev->retry_ms == 0)
        n_refused++;
    if (!ev->reason)
        abort();
}

/* The ack a message carries by the protocol (uplink.h), or false; *newer:
 * an object whose "v" is an integer above SG_ACK_VERSION. */
static bool wanted_ack(const char *p, size_t n, int64_t *ack, bool *newer)
{
    json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
    json_t *a = json_object_get(j, "ack"), *v = json_object_get(j, "v");
    *newer = json_is_object(j) && json_is_integer(v) && json_integer_value(v) > SG_ACK_VERSION;
    bool ok = json_is_object(j) && json_is_integer(a) && json_integer_value(a) >= -1 &&
              json_integer_value(a) <= INT64_MAX - SG_UPLINK_WINDOW &&
              (!v || (json_is_integer(v) && json_integer_value(v) >= 0 && !*newer));
    if (ok)
        *ack = (int64_t)json_integer_value(a);
    json_decref(j);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char dir[128];
    snprintf(dir, sizeof dir, "/dev/shm/sg-fuzz-uplink-%d", (int)getpid());
    sg_err err;
    sg_rm_rf(dir, &err);
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    if (!sp)
        abort();
    sg_spool_set_segment_bytes(sp, 64); /* a few records a segment: acks trim */
    int nrec = data[0] % 24;
    for (int i = 0; i < nrec; i++) {
        char rec[32];
        int n = snprintf(rec, sizeof rec, "{\"seq\":%d}", i);
        if (sg_spool_append(sp, i, rec, (size_t)n, &err) < 0)
            abort();
    }
    if (sg_spool_sync(sp, &err) < 0)
        abort();

    sg_uplink *u = calloc(1, sizeof *u);
    u->spool = sp;
    u->stats.acked_seq = -1;
    u->st = ST_OPEN; /* connected, no wsi: want_write does nothing */
    u->ev_fn = on_event;
    u->cur = sg_spool_cursor_new(sp, sg_spool_acked_seq(sp), LWS_PRE, &err);
    if (!u->cur)
        abort();
    n_errors = n_events = n_refused = 0;
    int64_t sent = -2; /* the last seq read from the cursor; -2: none yet */
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *line = p;
        p += n + (nl ? 1 : 0);
        if (n > sizeof u->rx)
            continue; /* the receive path refuses it before handle_message */
        memcpy(u->rx, line, n);
        u->rx_len = n;
        int64_t ack = 0, spool_ack0 = sg_spool_acked_seq(sp);
        size_t errors0 = n_errors;
        sg_uplink_stats st0 = u->stats;
        bool newer = false;
        bool take = wanted_ack(line, n, &ack, &newer);
        bool was_ready = u->ready;
        sg_uplink_handle_message(u);
        int64_t spool_ack = sg_spool_acked_seq(sp);
        if (newer) {
            /* stopped, saying so once; nothing taken */
            if (u->st != ST_STOPPED || n_refused != 1 || n_errors != errors0 || spool_ack != spool_ack0 ||
                u->stats.acked_seq != st0.acked_seq || !strstr(u->stuck, "uplink protocol"))
                abort();
            break;
        }
        if (!take) {
            if (n_errors != errors0 + 1 || spool_ack != spool_ack0 ||
                memcmp(&u->stats, &st0, sizeof st0) != 0)
                abort();
            continue;
        }
        if (!u->ready)
            abort();
        if (!was_ready) {
            /* The first ack trims nothing past the spool's own ack: the
             * uplink resends from the lower of the two (uplink.c). */
            int64_t from = ack < spool_ack0 ? ack : spool_ack0;
            if (u->stats.acked_seq != from || spool_ack != spool_ack0 ||
                n_errors != errors0 + (ack < spool_ack0 ? 1 : 0))
                abort();
            sent = from;
        } else {
            /* Later acks cover only what this connection sent. */
            int64_t capped = ack < st0.sent_seq ? ack : st0.sent_seq;
            if (capped <= st0.acked_seq) {
                if (u->stats.acked_seq != st0.acked_seq || spool_ack != spool_ack0 || n_errors != errors0)
                    abort();
            } else {
                if (u->stats.acked_seq != capped)
                    abort();
                if (n_errors == errors0 ? spool_ack != (capped > spool_ack0 ? capped : spool_ack0)
                                        : spool_ack != spool_ack0)
                    abort(); /* taken: the spool's ack; refused: unchanged */
            }
        }
        if (sg_spool_next_seq(sp) <= spool_ack)
            abort();
        /* What write_records would send now. */
        int64_t max = sg_spool_synced_seq(sp);
        if (max > u->stats.acked_seq + SG_UPLINK_WINDOW)
            max = u->stats.acked_seq + SG_UPLINK_WINDOW;
        char *rec;
        size_t len;
        int64_t seq;
        int rc;
        while ((rc = sg_spool_cursor_next(u->cur, max, &rec, &len, &seq, &err)) == 1) {
            /* No repeat; no gap where the spool still holds the records
             * (below its ack, trimmed segments may be gone). */
            if (seq <= sent || seq > max || (sent >= spool_ack && seq != sent + 1))
                abort();
            sent = seq;
            u->stats.sent_seq = seq; /* as write_records does */
        }
        if (rc < 0)
            abort();
    }
    /* The spool's own bound, for acks that come another way (uplink_client). */
    int64_t before = sg_spool_acked_seq(sp);
    if (sg_spool_ack(sp, INT64_MAX, &err) == 0 || sg_spool_acked_seq(sp) != before)
        abort();
    int64_t final_ack = sg_spool_acked_seq(sp);
    int64_t final_next = sg_spool_next_seq(sp);
    sg_spool_cursor_free(u->cur);
    free(u);
    sg_spool_close(sp);
    sg_spool_report rep;
    sp = sg_spool_open(dir, &rep, &err);
    if (!sp || sg_spool_acked_seq(sp) != final_ack || sg_spool_next_seq(sp) != final_next ||
        sg_spool_next_seq(sp) <= final_ack)
        abort();
    sg_spool_close(sp);
    sg_rm_rf(dir, &err);
    return 0;
}

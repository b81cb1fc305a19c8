/* libFuzzer target: the ingest's frame checks on arbitrary bytes, with and
 * without an expected sandbox id.
 *
 * sg_event_validate (jansson) must hand out a non-negative seq, a known
 * kind, a string ts and an object payload, and the raw payload bytes must
 * parse to that payload. sg_frame_scan (the ingest's hot path) is checked
 * against it differentially: the same close code for every input, and on
 * acceptance the same seq, kind, ts and payload. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "framescan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The scanner's verdict must be the validator's. */
static void differential(const char *buf, size_t size, const char *sb, int want,
                         const sg_event *ev)
{
    sg_frame_view v;
    sg_err err;
    int r = sg_frame_scan(buf, size, sb, &v, &err);
    if (r != want)
        abort();
    if (r < 0) {
        if (v.root || v.dump)
            abort(); /* a refusal must not hand anything out */
        return;
    }
    if (v.seq != ev->seq || v.kind != ev->kind || v.ts_len != strlen(ev->ts) ||
        memcmp(v.ts, ev->ts, v.ts_len) != 0)
        abort();
    json_t *p = json_loadb(v.payload, v.payload_len, JSON_REJECT_DUPLICATES, NULL);
    if (!p || !json_equal(p, ev->payload))
        abort();
    json_decref(p);
    sg_frame_view_clear(&v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_event ev;
    sg_err err;
    for (int i = 0; i < 2; i++) {
        const char *sb = i ? "sb1" : NULL;
        int r = sg_event_validate((const char *)data, size, sb, &ev, &err);
        if (r == 0) {
            if (ev.seq < 0 || !sg_event_kind_name(ev.kind) || !ev.ts || !json_is_object(ev.payload))
                abort();
            /* The raw payload the ingest stores must be exactly the parsed one. */
            const char *raw;
            size_t rawlen;
            if (sg_event_raw_payload((const char *)data, size, &raw, &rawlen) == 0) {
                json_t *again = json_loadb(raw, rawlen, JSON_REJECT_DUPLICATES, NULL);
                if (!again || !json_equal(again, ev.payload))
                    abort();
                json_decref(again);
            }
        } else if (r != -SG_CLOSE_BAD_DATA && r != -SG_CLOSE_POLICY && r != -SG_CLOSE_TOO_BIG) {
            abort();
        } else if (ev.root) {
            abort(); /* a refusal must not hand anything out */
        }
        differential((const char *)data, size, sb, r, &ev);
        sg_event_clear(&ev);
    }
    return 0;
}

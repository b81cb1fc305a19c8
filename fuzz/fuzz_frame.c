/* libFuzzer target: the ingest's frame validator on arbitrary bytes, with
 * and without an expected sandbox id. A frame that passes must have a
 * non-negative seq, a known kind, a string ts and an object payload. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_event ev;
    sg_err err;
    for (int i = 0; i < 2; i++) {
        int r = sg_event_validate((const char *)data, size, i ? "sb1" : NULL, &ev, &err);
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
            sg_event_clear(&ev);
        } else if (r != -SG_CLOSE_BAD_DATA && r != -SG_CLOSE_POLICY && r != -SG_CLOSE_TOO_BIG) {
            abort();
        } else if (ev.root) {
            abort(); /* a refusal must not hand anything out */
        }
    }
    return 0;
}

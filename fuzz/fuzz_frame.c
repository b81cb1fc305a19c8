/* libFuzzer target: the ingest's frame checks on arbitrary bytes, with and
 * without an expected sandbox id.
 *
 * sg_event_validate (jansson) must hand out a non-negative seq, a known
 * kind, a string ts and an object payload, and the raw payload bytes must
 * parse to that payload. sg_frame_scan (the ingest's hot path) is checked
 * against it differentially: the same close code for every input, and on
 * acceptance the same seq, kind, ts and payload.
 *
 * sg_event_ts_valid (the ingest's ts check) is checked against a reference
 * built from other parts (a POSIX regex for the syntax, timegm/gmtime for
 * the ranges), on the input itself and on every accepted frame's ts. */
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/framescan.h"
#include "wire/event.h"

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

/* RFC 3339 as event.h states it, by other means than event.c's. */
static bool ts_reference(const char *ts, size_t len)
{
    static regex_t re;
    static bool compiled;
    if (!compiled) {
        if (regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
                         "(\\.[0-9]{1,9})?([Zz]|[-+][0-9]{2}:[0-9]{2})$",
                    REG_EXTENDED | REG_NOSUB) != 0)
            abort();
        compiled = true;
    }
    char buf[64];
    if (len >= sizeof buf || memchr(ts, '\0', len))
        return false;
    memcpy(buf, ts, len);
    buf[len] = '\0';
    if (regexec(&re, buf, 0, NULL, 0) != 0)
        return false;
    struct tm tm = {0};
    int y, mo, d, h, mi, se;
    if (sscanf(buf, "%4d-%2d-%2d%*c%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &se) != 6)
        abort();
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se == 60 ? 59 : se; /* a leap second */
    time_t t = timegm(&tm);
    struct tm back;
    if (!gmtime_r(&t, &back) || back.tm_year != y - 1900 || back.tm_mon != mo - 1 ||
        back.tm_mday != d || back.tm_hour != h || back.tm_min != mi || se > 60)
        return false; /* normalised: a field was out of range */
    const char *off = buf + len - 6;
    if (buf[len - 1] != 'Z' && buf[len - 1] != 'z') {
        int oh = (off[1] - '0') * 10 + off[2] - '0', om = (off[4] - '0') * 10 + off[5] - '0';
        if (oh > 23 || om > 59)
            return false;
    }
    return true;
}

static void ts_differential(const char *ts, size_t len)
{
    if (sg_event_ts_valid(ts, len) != ts_reference(ts, len))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ts_differential((const char *)data, size);
    sg_event ev;
    sg_err err;
    for (int i = 0; i < 2; i++) {
        const char *sb = i ? "sb1" : NULL;
        int r = sg_event_validate((const char *)data, size, sb, &ev, &err);
        if (r == 0) {
            if (ev.seq < 0 || !sg_event_kind_name(ev.kind) || !ev.ts || !json_is_object(ev.payload))
                abort();
            ts_differential(ev.ts, strlen(ev.ts));
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

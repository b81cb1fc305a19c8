/* ack: the ingest's acks on an uplink connection (ack.h). */
#include "wire/ack.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"

int sg_ack_encode(const sg_ack *a, char *buf, size_t size)
{
    int n = a->v > 0 ? snprintf(buf, size, "{\"ack\":%" PRId64 ",\"v\":%d}", a->ack, a->v)
                     : snprintf(buf, size, "{\"ack\":%" PRId64 "}", a->ack);
    return n < 0 || (size_t)n >= size ? -1 : n;
}

int sg_ack_decode(const char *buf, size_t len, sg_ack *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    sg_err perr;
    sg_autojson json_t *j = sg_json_parse(buf, len, &perr);
    if (!json_is_object(j))
        return sg_err_set(err, EINVAL, "the ingest's message is not a JSON object (want {\"ack\": N})");
    json_t *v = json_object_get(j, "v");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0))
        return sg_err_set(err, EINVAL, "the ingest's ack has a \"v\" (its protocol version) that is not an "
                          "integer >= 0");
    if (v && json_integer_value(v) > SG_ACK_VERSION)
        return sg_err_set(err, EPROTO, "the ingest acks in uplink protocol %" JSON_INTEGER_FORMAT
                          "; this sandglass reads up to %d: its events stay in the spool; deliver them "
                          "with the sandglass of the ingest's version ('sandglass flush ID'), or run an "
                          "ingest of this version", json_integer_value(v), SG_ACK_VERSION);
    json_t *a = json_object_get(j, "ack");
    if (!json_is_integer(a) || json_integer_value(a) < -1)
        return sg_err_set(err, EINVAL, "the ingest's message has no \"ack\" integer >= -1 (want {\"ack\": N})");
    out->ack = (int64_t)json_integer_value(a);
    out->v = v ? (int)json_integer_value(v) : 0;
    return 0;
}

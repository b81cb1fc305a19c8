/* libFuzzer target: the messages between a supervisor and the uplink
 * daemon (src/wire/uplinkd.c: the wire in uplinkd.h), bytes
 * any process of the daemon's user can send on uplink.sock, and that the
 * daemon sends back. Byte 0 picks the direction (even: supervisor ->
 * daemon, odd: daemon -> supervisor); the rest is one message.
 *
 * Invariants, against an oracle written here on the parsed JSON:
 *  - a message is taken exactly when the wire allows it: hello (v 1, every
 *    string present and non-empty, sandbox a valid name, spool absolute,
 *    synced an integer >= -1) or synced (seq an integer >= -1); what is
 *    taken equals the JSON's fields, and re-encoded (sg_uplinkd_msg_encode)
 *    it parses to the same struct;
 *  - a reply is taken exactly when it has an integer ack >= -1, or a string
 *    event (an unknown name is the error event), or a string error; the
 *    event's code is in int range, its retry in (0, UINT32_MAX) or 0, its
 *    reason never NULL; re-encoded (sg_uplinkd_reply_encode) it parses to
 *    the same struct. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "delivery/uplink.h"
#include "wire/uplinkd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *ostr(json_t *j, const char *k)
{
    const char *v = json_string_value(json_object_get(j, k));
    return v && *v ? v : NULL;
}

static bool same(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Both absent, or the same. */
static bool same_opt(const char *a, const char *b)
{
    return (!a && !b) || same(a, b);
}

static void check_msg(const char *buf, size_t len)
{
    sg_err err = {0}, oerr = {0};
    sg_uplinkd_msg m;
    int r = sg_uplinkd_msg_parse(buf, len, &m, &err);
    json_t *j = sg_json_parse(buf, len, &oerr);
    const char *op = json_string_value(json_object_get(j, "op"));
    json_t *seq = json_object_get(j, "seq"), *synced = json_object_get(j, "synced"), *v = json_object_get(j, "v");
    bool want_synced = op && strcmp(op, "synced") == 0 && json_is_integer(seq) && json_integer_value(seq) >= -1;
    json_int_t vi = json_integer_value(v);
    bool ca_ok = !json_object_get(j, "ca_file") || (ostr(j, "ca_file") && ostr(j, "ca_file")[0] == '/' && vi == 2);
    bool want_hello = op && strcmp(op, "hello") == 0 && json_is_integer(v) && (vi == 1 || vi == 2) && ca_ok &&
                      ostr(j, "sandbox") && sg_valid_name(ostr(j, "sandbox")) && ostr(j, "url") &&
                      ostr(j, "spool") && ostr(j, "spool")[0] == '/' && ostr(j, "secret_file") &&
                      ostr(j, "learner") && ostr(j, "task") && json_is_integer(synced) &&
                      json_integer_value(synced) >= -1;
    if ((r == 0) != (want_synced || want_hello))
        abort();
    if (r < 0 && !err.msg[0])
        abort();
    if (r == 0 && want_synced && (m.op != SG_UPLINKD_SYNCED || m.seq != json_integer_value(seq)))
        abort();
    if (r == 0 && want_hello) {
        if (m.op != SG_UPLINKD_HELLO || m.seq != json_integer_value(synced) || !same(m.sandbox, ostr(j, "sandbox")) ||
            !same(m.url, ostr(j, "url")) || !same(m.spool, ostr(j, "spool")) ||
            !same(m.secret_file, ostr(j, "secret_file")) || !same(m.learner, ostr(j, "learner")) ||
            !same(m.task, ostr(j, "task")) || m.secret_create != json_is_true(json_object_get(j, "secret_create")) ||
            !same_opt(m.ca_file, ostr(j, "ca_file")))
            abort();
    }
    if (r == 0) { /* round trip: encoded, it parses to the same struct */
        char *text = sg_uplinkd_msg_encode(&m);
        sg_uplinkd_msg m2;
        if (!text || sg_uplinkd_msg_parse(text, strlen(text), &m2, &err) < 0 || m2.op != m.op ||
            m2.seq != m.seq || m2.secret_create != (m.op == SG_UPLINKD_HELLO && m.secret_create))
            abort();
        if (m.op == SG_UPLINKD_HELLO &&
            (!same(m2.sandbox, m.sandbox) || !same(m2.url, m.url) || !same(m2.spool, m.spool) ||
             !same(m2.secret_file, m.secret_file) || !same(m2.learner, m.learner) || !same(m2.task, m.task) ||
             !same_opt(m2.ca_file, m.ca_file)))
            abort();
        sg_uplinkd_msg_clear(&m2);
        free(text);
    }
    if (r == 0)
        sg_uplinkd_msg_clear(&m);
    json_decref(j);
}

static void check_reply(const char *buf, size_t len)
{
    sg_err err = {0}, oerr = {0};
    sg_uplinkd_reply r;
    int rc = sg_uplinkd_reply_parse(buf, len, &r, &err);
    json_t *j = sg_json_parse(buf, len, &oerr);
    json_t *ack = json_object_get(j, "ack");
    const char *ev = json_string_value(json_object_get(j, "event"));
    const char *error = json_string_value(json_object_get(j, "error"));
    bool want_ack = json_is_integer(ack) && json_integer_value(ack) >= -1;
    bool want = want_ack || (!json_is_integer(ack) && (ev || error));
    if ((rc == 0) != want)
        abort();
    if (rc == 0) {
        if (want_ack && (r.kind != SG_UPLINKD_ACK || r.ack != json_integer_value(ack)))
            abort();
        if (!want_ack && ev && (r.kind != SG_UPLINKD_EVENT || r.event < 0 || r.event > SG_UPLINK_ERROR || !r.reason))
            abort();
        if (!want_ack && !ev && (r.kind != SG_UPLINKD_REFUSED || !same(r.reason, error)))
            abort();
        json_int_t retry = json_integer_value(json_object_get(j, "retry_ms"));
        if (r.kind == SG_UPLINKD_EVENT && r.retry_ms != (retry > 0 && retry < UINT32_MAX ? (uint32_t)retry : 0))
            abort();
        /* round trip: encoded, it parses to the same struct */
        char *text = sg_uplinkd_reply_encode(&r);
        sg_uplinkd_reply r2;
        if (!text || sg_uplinkd_reply_parse(text, strlen(text), &r2, &err) < 0 || r2.kind != r.kind)
            abort();
        if ((r.kind == SG_UPLINKD_ACK && r2.ack != r.ack) ||
            (r.kind == SG_UPLINKD_EVENT && (r2.event != r.event || r2.code != r.code || r2.retry_ms != r.retry_ms)) ||
            (r.kind != SG_UPLINKD_ACK && !same(r2.reason, r.reason)))
            abort();
        sg_uplinkd_reply_clear(&r2);
        free(text);
        sg_uplinkd_reply_clear(&r);
    }
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        check_msg((const char *)data + 1, size - 1);
    else
        check_reply((const char *)data + 1, size - 1);
    return 0;
}

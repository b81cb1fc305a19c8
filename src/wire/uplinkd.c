/* uplinkd: supervisor <-> uplink daemon messages (see uplinkd.h). */
#include "wire/uplinkd.h"

#include <errno.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"

static const char *const event_names[SG_UPLINKD_EV__COUNT] = {"connected", "disconnected", "refused", "error"};

static const char *str_field(json_t *j, const char *key)
{
    const char *v = json_string_value(json_object_get(j, key));
    return v && *v ? v : NULL;
}

int sg_uplinkd_msg_parse(const char *buf, size_t len, sg_uplinkd_msg *m, sg_err *err)
{
    memset(m, 0, sizeof *m);
    json_t *j = sg_json_parse(buf, len, err);
    if (!j)
        return -1;
    m->json = j;
    const char *op = json_is_object(j) ? json_string_value(json_object_get(j, "op")) : NULL;
    if (!op) {
        sg_uplinkd_msg_clear(m);
        return sg_err_set(err, EPROTO, "message without \"op\"");
    }
    if (strcmp(op, "synced") == 0) {
        json_t *seq = json_object_get(j, "seq");
        if (!json_is_integer(seq) || json_integer_value(seq) < -1) {
            sg_uplinkd_msg_clear(m);
            return sg_err_set(err, EINVAL, "synced: \"seq\" must be an integer >= -1");
        }
        m->op = SG_UPLINKD_SYNCED;
        m->seq = (int64_t)json_integer_value(seq);
        return 0;
    }
    if (strcmp(op, "hello") != 0) {
        char shown[48];
        sg_vis(op, strlen(op), shown, sizeof shown);
        sg_uplinkd_msg_clear(m);
        return sg_err_set(err, EPROTO, "unknown op \"%s\"", shown);
    }
    m->op = SG_UPLINKD_HELLO;
    m->sandbox = str_field(j, "sandbox");
    m->url = str_field(j, "url");
    m->spool = str_field(j, "spool");
    m->secret_file = str_field(j, "secret_file");
    m->learner = str_field(j, "learner");
    m->task = str_field(j, "task");
    m->ca_file = str_field(j, "ca_file");
    m->secret_create = json_is_true(json_object_get(j, "secret_create"));
    json_t *v = json_object_get(j, "v"), *synced = json_object_get(j, "synced");
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > SG_UPLINKD_VERSION) {
        sg_uplinkd_msg_clear(m);
        return sg_err_set(err, EPROTO, "hello: unknown protocol version (this uplink daemon speaks "
                          "\"v\":%d; stop it to let the sandbox's build start its own)", SG_UPLINKD_VERSION);
    }
    if (!m->sandbox || !sg_valid_name(m->sandbox) || !m->url || !m->spool || m->spool[0] != '/' ||
        !m->secret_file || !m->learner || !m->task || !json_is_integer(synced) ||
        json_integer_value(synced) < -1) {
        sg_uplinkd_msg_clear(m);
        return sg_err_set(err, EINVAL, "hello: sandbox, url, spool (absolute), secret_file, "
                                       "learner, task and synced (an integer >= -1) are required");
    }
    json_t *ca = json_object_get(j, "ca_file");
    if (ca && (!m->ca_file || m->ca_file[0] != '/' || json_integer_value(v) < 2)) {
        sg_uplinkd_msg_clear(m);
        return sg_err_set(err, EINVAL, "hello: \"ca_file\" must be an absolute path (and \"v\" 2)");
    }
    m->seq = (int64_t)json_integer_value(synced);
    return 0;
}

void sg_uplinkd_msg_clear(sg_uplinkd_msg *m)
{
    json_decref(m->json);
    memset(m, 0, sizeof *m);
}

int sg_uplinkd_reply_parse(const char *buf, size_t len, sg_uplinkd_reply *r, sg_err *err)
{
    memset(r, 0, sizeof *r);
    json_t *j = sg_json_parse(buf, len, err);
    if (!j)
        return -1;
    r->json = j;
    json_t *ack = json_object_get(j, "ack");
    const char *ev = json_string_value(json_object_get(j, "event"));
    const char *error = json_string_value(json_object_get(j, "error"));
    if (json_is_integer(ack)) {
        if (json_integer_value(ack) < -1) {
            sg_uplinkd_reply_clear(r);
            return sg_err_set(err, EINVAL, "ack below -1");
        }
        r->kind = SG_UPLINKD_ACK;
        r->ack = (int64_t)json_integer_value(ack);
        return 0;
    }
    if (ev) {
        r->kind = SG_UPLINKD_EVENT;
        r->event = SG_UPLINKD_EV_ERROR;
        for (int i = 0; i < SG_UPLINKD_EV__COUNT; i++)
            if (strcmp(ev, event_names[i]) == 0)
                r->event = i;
        json_int_t code = json_integer_value(json_object_get(j, "code"));
        json_int_t retry = json_integer_value(json_object_get(j, "retry_ms"));
        r->code = code >= INT32_MIN && code <= INT32_MAX ? (int)code : 0;
        r->retry_ms = retry > 0 && retry < UINT32_MAX ? (uint32_t)retry : 0;
        r->reason = json_string_value(json_object_get(j, "reason"));
        if (!r->reason)
            r->reason = "";
        return 0;
    }
    if (error) {
        r->kind = SG_UPLINKD_REFUSED;
        r->reason = error;
        return 0;
    }
    sg_uplinkd_reply_clear(r);
    return sg_err_set(err, EPROTO, "a message from the uplink daemon with neither ack, event nor error");
}

void sg_uplinkd_reply_clear(sg_uplinkd_reply *r)
{
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/* The text of j (stolen), or NULL. */
static char *dump(json_t *j)
{
    char *text = j ? sg_json_dump(j) : NULL;
    json_decref(j);
    return text;
}

char *sg_uplinkd_msg_encode(const sg_uplinkd_msg *m)
{
    if (m->op == SG_UPLINKD_SYNCED)
        return dump(json_pack("{s:s, s:I}", "op", "synced", "seq", (json_int_t)m->seq));
    json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:b, s:s, s:s, s:I}", "op", "hello",
                          "v", m->ca_file ? 2 : 1, "sandbox", m->sandbox, "url", m->url, "spool", m->spool,
                          "secret_file", m->secret_file, "secret_create", m->secret_create,
                          "learner", m->learner, "task", m->task, "synced", (json_int_t)m->seq);
    if (j && m->ca_file && json_object_set_new(j, "ca_file", json_string(m->ca_file)) < 0) {
        json_decref(j);
        return NULL;
    }
    return dump(j);
}

char *sg_uplinkd_reply_encode(const sg_uplinkd_reply *r)
{
    const char *reason = r->reason ? r->reason : "";
    switch (r->kind) {
    case SG_UPLINKD_ACK:
        return dump(json_pack("{s:I}", "ack", (json_int_t)r->ack));
    case SG_UPLINKD_EVENT: {
        int ev = r->event >= 0 && r->event < SG_UPLINKD_EV__COUNT ? r->event : SG_UPLINKD_EV_ERROR;
        return dump(json_pack("{s:s, s:i, s:s, s:I}", "event", event_names[ev], "code", r->code,
                              "reason", reason, "retry_ms", (json_int_t)r->retry_ms));
    }
    case SG_UPLINKD_REFUSED:
        return dump(json_pack("{s:s}", "error", reason));
    }
    return NULL;
}

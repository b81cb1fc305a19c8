/* event: kinds, wire frame, strict frame validator (see event.h). */
#include "wire/event.h"

#include <stdbool.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

static const char *const kind_names[SG_EV__COUNT] = {
    [SG_EV_STDIN] = "stdin",
    [SG_EV_COMMAND] = "command",
    [SG_EV_STDOUT] = "stdout",
    [SG_EV_RUN_RESULT] = "run_result",
    [SG_EV_TEST_RESULT] = "test_result",
    [SG_EV_FILE_DIFF] = "file_diff",
    [SG_EV_ACTIVITY] = "activity",
    [SG_EV_SESSION_ABORT] = "session_abort",
    [SG_EV_CHECKPOINT] = "checkpoint",
    [SG_EV_ROLLBACK] = "rollback",
    [SG_EV_LIMIT] = "limit",
    [SG_EV_SANDBOX] = "sandbox",
    [SG_EV_PROCESS] = "process",
    [SG_EV_BULK] = "bulk",
};

const char *sg_event_kind_name(int kind)
{
    if (kind < 0 || kind >= SG_EV__COUNT)
        return NULL;
    return kind_names[kind];
}

int sg_event_kind_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < SG_EV__COUNT; i++)
        if (strcmp(name, kind_names[i]) == 0)
            return i;
    return -1;
}

json_t *sg_event_frame(int64_t seq, sg_event_kind kind, json_t *payload,
                       const char *ts, const char *sandbox_id)
{
    if (!payload)
        payload = json_object();
    const char *name = sg_event_kind_name((int)kind);
    if (!name || seq < 0 || !json_is_object(payload)) {
        json_decref(payload);
        return NULL;
    }
    char now[64];
    if (!ts) {
        sg_now_iso8601(now, sizeof now);
        ts = now;
    }
    json_t *f = json_pack("{s:I, s:s, s:o, s:s}", "seq", (json_int_t)seq, "kind", name,
                          "payload", payload, "ts", ts);
    if (!f)
        return NULL; /* json_pack's "o" steals payload even on failure */
    if (sandbox_id && json_object_set_new(f, "sandbox_id", json_string(sandbox_id)) < 0) {
        json_decref(f);
        return NULL;
    }
    return f;
}

void sg_event_clear(sg_event *ev)
{
    if (ev->root)
        json_decref(ev->root);
    memset(ev, 0, sizeof *ev);
}

static int refuse(sg_err *err, int close_code, const char *msg, const char *arg)
{
    if (arg)
        sg_err_set(err, 0, "%s: %.200s", msg, arg);
    else
        sg_err_set(err, 0, "%s", msg);
    return -close_code;
}

int sg_event_validate(const char *buf, size_t len, const char *expect_sandbox_id,
                      sg_event *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > SG_FRAME_MAX) {
        sg_err_set(err, 0, "frame of %zu bytes exceeds the limit of %d bytes", len,
                   SG_FRAME_MAX);
        return -SG_CLOSE_TOO_BIG;
    }
    /* Strict: duplicate keys, invalid UTF-8, trailing garbage, NUL, deep
     * nesting are all refused by the parser. */
    sg_autojson json_t *root = sg_json_parse(buf, len, err);
    if (!root)
        return -SG_CLOSE_BAD_DATA;
    if (!json_is_object(root))
        return refuse(err, SG_CLOSE_BAD_DATA, "frame is not a JSON object", NULL);

    /* Identity spoofing first: it is a policy violation whatever else is wrong. */
    if (json_object_get(root, "learner_id"))
        return refuse(err, SG_CLOSE_POLICY,
                      "frame carries learner_id (identity comes from the token only)", NULL);
    if (json_object_get(root, "task_id"))
        return refuse(err, SG_CLOSE_POLICY,
                      "frame carries task_id (identity comes from the token only)", NULL);
    json_t *sb = json_object_get(root, "sandbox_id");
    if (sb) {
        if (!json_is_string(sb))
            return refuse(err, SG_CLOSE_POLICY, "frame sandbox_id is not a string", NULL);
        if (!expect_sandbox_id || strcmp(json_string_value(sb), expect_sandbox_id) != 0)
            return refuse(err, SG_CLOSE_POLICY,
                          "frame sandbox_id differs from the token's sandbox",
                          json_string_value(sb));
    }

    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "seq") && strcmp(key, "kind") && strcmp(key, "payload") &&
            strcmp(key, "ts") && strcmp(key, "sandbox_id"))
            return refuse(err, SG_CLOSE_BAD_DATA, "unknown top-level key", key);
    }

    json_t *kind = json_object_get(root, "kind");
    if (!kind)
        return refuse(err, SG_CLOSE_BAD_DATA, "frame has no kind", NULL);
    if (!json_is_string(kind))
        return refuse(err, SG_CLOSE_BAD_DATA, "kind is not a string", NULL);
    int k = sg_event_kind_from_name(json_string_value(kind));
    if (k < 0)
        return refuse(err, SG_CLOSE_BAD_DATA, "unknown kind", json_string_value(kind));

    json_t *seq = json_object_get(root, "seq");
    if (!seq)
        return refuse(err, SG_CLOSE_BAD_DATA, "frame has no seq", NULL);
    if (!json_is_integer(seq) || json_integer_value(seq) < 0)
        return refuse(err, SG_CLOSE_BAD_DATA, "seq is not a non-negative integer", NULL);

    json_t *ts = json_object_get(root, "ts");
    if (!ts)
        return refuse(err, SG_CLOSE_BAD_DATA, "frame has no ts", NULL);
    if (!json_is_string(ts))
        return refuse(err, SG_CLOSE_BAD_DATA, "ts is not a string", NULL);

    json_t *payload = json_object_get(root, "payload");
    if (!payload)
        return refuse(err, SG_CLOSE_BAD_DATA, "frame has no payload", NULL);
    if (!json_is_object(payload))
        return refuse(err, SG_CLOSE_BAD_DATA, "payload is not an object", NULL);

    out->seq = json_integer_value(seq);
    out->kind = k;
    out->ts = json_string_value(ts);
    out->payload = payload;
    out->root = sg_steal_ptr(&root);
    return 0;
}

/* ---- raw payload ---------------------------------------------------------- */

static size_t skip_ws(const char *b, size_t i, size_t len)
{
    while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
        i++;
    return i;
}

/* End of the JSON string starting at b[i] == '"', or 0. */
static size_t skip_string(const char *b, size_t i, size_t len, bool *escaped)
{
    for (i++; i < len; i++) {
        if (b[i] == '\\') {
            *escaped = true;
            i++;
        } else if (b[i] == '"') {
            return i + 1;
        }
    }
    return 0;
}

/* End of the JSON value starting at b[i], or 0. */
static size_t skip_value(const char *b, size_t i, size_t len)
{
    bool esc = false;
    if (i >= len)
        return 0;
    if (b[i] == '"')
        return skip_string(b, i, len, &esc);
    if (b[i] != '{' && b[i] != '[') {
        while (i < len && !strchr(",}] \t\r\n", b[i]))
            i++;
        return i;
    }
    int depth = 0;
    for (; i < len; i++) {
        char c = b[i];
        if (c == '"') {
            size_t e = skip_string(b, i, len, &esc);
            if (!e)
                return 0;
            i = e - 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

int sg_event_raw_payload(const char *b, size_t len, const char **start, size_t *plen)
{
    size_t i = skip_ws(b, 0, len);
    if (i >= len || b[i] != '{')
        return -1;
    i++;
    for (;;) {
        i = skip_ws(b, i, len);
        if (i >= len || b[i] != '"')
            return -1;
        bool esc = false;
        size_t kend = skip_string(b, i, len, &esc);
        if (!kend)
            return -1;
        bool is_payload = !esc && kend - i == 9 && memcmp(b + i, "\"payload\"", 9) == 0;
        i = skip_ws(b, kend, len);
        if (i >= len || b[i] != ':')
            return -1;
        i = skip_ws(b, i + 1, len);
        size_t vend = skip_value(b, i, len);
        if (!vend)
            return -1;
        if (is_payload) {
            if (b[i] != '{')
                return -1;
            *start = b + i;
            *plen = vend - i;
            return 0;
        }
        i = skip_ws(b, vend, len);
        if (i >= len || b[i] != ',')
            return -1; /* the end, and no plain "payload" key */
        i++;
    }
}

/* n digits at p as a number, or -1. */
static int digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

bool sg_event_ts_valid(const char *ts, size_t len)
{
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    /* "YYYY-MM-DDThh:mm:ss" is 19 bytes; then fraction and offset. */
    if (!ts || len < 20 || len > 19 + 10 + 6)
        return false;
    if (ts[4] != '-' || ts[7] != '-' || (ts[10] != 'T' && ts[10] != 't' && ts[10] != ' ') ||
        ts[13] != ':' || ts[16] != ':')
        return false;
    int y = digits(ts, 4), mo = digits(ts + 5, 2), d = digits(ts + 8, 2),
        h = digits(ts + 11, 2), mi = digits(ts + 14, 2), se = digits(ts + 17, 2);
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h < 0 || h > 23 ||
        mi < 0 || mi > 59 || se < 0 || se > 60)
        return false;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap)
        return false;
    size_t i = 19;
    if (ts[i] == '.') {
        size_t f = ++i;
        while (i < len && ts[i] >= '0' && ts[i] <= '9')
            i++;
        if (i == f || i - f > 9)
            return false;
    }
    if (i < len && (ts[i] == 'Z' || ts[i] == 'z'))
        return i + 1 == len;
    if (i + 6 != len || (ts[i] != '+' && ts[i] != '-') || ts[i + 3] != ':')
        return false;
    int oh = digits(ts + i + 1, 2), om = digits(ts + i + 4, 2);
    return oh >= 0 && oh <= 23 && om >= 0 && om <= 59;
}

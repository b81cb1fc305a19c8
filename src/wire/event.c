/* event: kinds, wire frame, strict frame validator (see event.h). */
#include "wire/event.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

/* ---- blob frames (event.h) ---------------------------------------------- */

static const char b64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_digits[v >> 18];
        out[o++] = b64_digits[(v >> 12) & 63];
        out[o++] = b64_digits[(v >> 6) & 63];
        out[o++] = b64_digits[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = b64_digits[v >> 18];
        out[o++] = b64_digits[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_digits[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict: padded, canonical (the unused bits zero). Bytes in out (room:
 * n / 4 * 3), or -1. */
static ssize_t b64_decode(const char *in, size_t n, unsigned char *out)
{
    if (n % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        bool last = i + 4 == n;
        for (int k = 0; k < 4; k++)
            v[k] = b64_val((unsigned char)in[i + k]);
        int pad = last && in[i + 3] == '=' ? (in[i + 2] == '=' ? 2 : 1) : 0;
        if (v[0] < 0 || v[1] < 0 || (pad < 2 && v[2] < 0) || (pad < 1 && v[3] < 0))
            return -1;
        if ((pad == 2 && (v[1] & 15)) || (pad == 1 && (v[2] & 3)))
            return -1;
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                     (uint32_t)(pad < 2 ? v[2] : 0) << 6 | (uint32_t)(pad < 1 ? v[3] : 0);
        out[o++] = (unsigned char)(x >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(x >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)x;
    }
    return (ssize_t)o;
}

static bool hex64_valid(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    for (size_t i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

bool sg_blob_session_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SG_BLOB_SESSION_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* head, the data in base64, then "\"}}". */
static char *blob_frame(const char *head, int hn, const void *data, size_t len, size_t *flen)
{
    if (hn < 0 || len > SG_BLOB_PART)
        return NULL;
    size_t cap = (size_t)hn + (len + 2) / 3 * 4 + 4;
    char *f = malloc(cap);
    if (!f)
        return NULL;
    memcpy(f, head, (size_t)hn);
    size_t o = (size_t)hn + b64_encode(data, len, f + hn);
    memcpy(f + o, "\"}}", 4);
    *flen = o + 3;
    return f;
}

char *sg_blob_content_frame(const char *sha256, int64_t size, int64_t off, const void *data,
                            size_t len, size_t *flen)
{
    if (!hex64_valid(sha256) || size < 0 || off < 0)
        return NULL;
    char head[192];
    int hn = snprintf(head, sizeof head, "{\"content\":{\"sha256\":\"%s\",\"size\":%lld,"
                      "\"off\":%lld,\"data\":\"", sha256, (long long)size, (long long)off);
    return blob_frame(head, hn, data, len, flen);
}

char *sg_blob_cast_frame(const char *session, int64_t off, const void *data, size_t len,
                         size_t *flen)
{
    if (!sg_blob_session_valid(session) || off < 0)
        return NULL;
    char head[256];
    int hn = snprintf(head, sizeof head, "{\"cast\":{\"session\":\"%s\",\"off\":%lld,\"data\":\"",
                      session, (long long)off);
    return blob_frame(head, hn, data, len, flen);
}

bool sg_blob_is(const char *buf, size_t len)
{
    static const char c1[] = "{\"content\":", c2[] = "{\"cast\":";
    return (len >= sizeof c1 - 1 && memcmp(buf, c1, sizeof c1 - 1) == 0) ||
           (len >= sizeof c2 - 1 && memcmp(buf, c2, sizeof c2 - 1) == 0);
}

void sg_blob_clear(sg_blob *b)
{
    if (b) {
        free(b->data);
        b->data = NULL;
    }
}

static int blob_data(json_t *body, sg_blob *out, sg_err *err)
{
    json_t *d = json_object_get(body, "data");
    if (!json_is_string(d))
        return sg_err_set(err, EINVAL, "blob frame: data is not a string");
    size_t n = json_string_length(d);
    if (n > (SG_BLOB_PART + 2) / 3 * 4)
        return sg_err_set(err, EINVAL, "blob frame: more than %d bytes of data", SG_BLOB_PART);
    out->data = malloc(n / 4 * 3 + 1);
    if (!out->data)
        return sg_err_set(err, ENOMEM, "out of memory");
    ssize_t got = b64_decode(json_string_value(d), n, out->data);
    if (got < 0)
        return sg_err_set(err, EINVAL, "blob frame: data is not canonical base64");
    out->len = (size_t)got;
    return 0;
}

static int blob_int(json_t *body, const char *key, int64_t *v, sg_err *err)
{
    json_t *x = json_object_get(body, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return sg_err_set(err, EINVAL, "blob frame: %s is not a non-negative integer", key);
    *v = json_integer_value(x);
    return 0;
}

static int blob_check(json_t *root, sg_blob *out, sg_err *err)
{
    if (!json_is_object(root) || json_object_size(root) != 1)
        return sg_err_set(err, EINVAL, "blob frame: not an object of one key");
    json_t *body = json_object_get(root, "content");
    out->kind = SG_BLOB_CONTENT;
    if (!body) {
        body = json_object_get(root, "cast");
        out->kind = SG_BLOB_CAST;
    }
    if (!json_is_object(body))
        return sg_err_set(err, EINVAL, "blob frame: content or cast is not an object");
    if (json_object_size(body) != (out->kind == SG_BLOB_CONTENT ? 4u : 3u) ||
        blob_int(body, "off", &out->off, err) < 0 || blob_data(body, out, err) < 0)
        return err->code ? -1 : sg_err_set(err, EINVAL, "blob frame: unknown keys");
    if (out->kind == SG_BLOB_CAST) {
        const char *s = json_string_value(json_object_get(body, "session"));
        if (!sg_blob_session_valid(s))
            return sg_err_set(err, EINVAL, "blob frame: bad session name");
        snprintf(out->session, sizeof out->session, "%s", s);
        return 0;
    }
    const char *h = json_string_value(json_object_get(body, "sha256"));
    if (!hex64_valid(h) || blob_int(body, "size", &out->size, err) < 0)
        return err->code ? -1 : sg_err_set(err, EINVAL, "blob frame: sha256 is not 64 lowercase hex");
    if (out->off > out->size || (int64_t)out->len > out->size - out->off ||
        (out->len == 0 && out->size != 0))
        return sg_err_set(err, EINVAL, "blob frame: part [%lld, +%zu) outside size %lld",
                          (long long)out->off, out->len, (long long)out->size);
    memcpy(out->sha256, h, 65);
    return 0;
}

int sg_blob_parse(const char *buf, size_t len, sg_blob *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > SG_FRAME_MAX)
        return sg_err_set(err, EMSGSIZE, "frame exceeds the size limit"), -SG_CLOSE_TOO_BIG;
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return sg_err_set(err, EINVAL, "invalid JSON: %s", je.text), -SG_CLOSE_BAD_DATA;
    err->code = 0;
    int r = blob_check(root, out, err);
    json_decref(root);
    if (r < 0) {
        sg_blob_clear(out);
        return -SG_CLOSE_BAD_DATA;
    }
    return 0;
}

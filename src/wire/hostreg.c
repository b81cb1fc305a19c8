/* hostreg: a sandbox host's registration, checked (see hostreg.h). */
#include "wire/hostreg.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

typedef enum { F_NAME, F_NAME_OR_NULL, F_TEXT, F_TEXT_OR_NULL, F_URL_OR_NULL, F_STATE, F_COUNT } field_kind;

typedef struct field {
    const char *key;
    field_kind kind;
    long long max; /* F_COUNT: the largest value */
    long long min; /* F_COUNT: the smallest */
} field;

static const field top_fields[] = {
    {"v", F_COUNT, 1 << 20, 0}, /* then held to SG_HOSTREG_VERSION, named */
    {"name", F_NAME, 0, 0},
    {"serve_url", F_URL_OR_NULL, 0, 0},
    {"version", F_TEXT, 0, 0},
    {"heartbeat_s", F_COUNT, SG_HOSTREG_HEARTBEAT_MAX, 1},
    {"sandboxes_total", F_COUNT, 1LL << 40, 0},
};

static const field cap_fields[] = {
    {"cpus", F_COUNT, 1 << 20, 0},
    {"memory_bytes", F_COUNT, 1LL << 60, 0},
    {"max_sandboxes", F_COUNT, 1 << 20, 0},
    {"pool_size", F_COUNT, 1 << 20, 0},
};

static const field sb_fields[] = {
    {"id", F_NAME, 0, 0},
    {"learner", F_NAME, 0, 0},
    {"task", F_NAME_OR_NULL, 0, 0},
    {"state", F_STATE, 0, 0},
    {"created", F_TEXT, 0, 0},
    {"last_active", F_TEXT_OR_NULL, 0, 0},
};

int sg_hostreg_state_known(const char *s)
{
    static const char *const states[] = {"running", "aborted", "starting", "dead"};
    for (size_t i = 0; i < SG_ARRAY_LEN(states); i++)
        if (strcmp(s, states[i]) == 0)
            return 1;
    return 0;
}

/* Printable ASCII, no space before or after, 1..max bytes. */
static bool text_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return s[0] != ' ' && s[n - 1] != ' ';
}

static bool url_ok(const char *s)
{
    if (!text_ok(s, SG_HOSTREG_URL_MAX) || strchr(s, ' '))
        return false;
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

/* One field's value v checked (NULL: absent). NULL, or what is wrong. */
static const char *check_value(const field *f, json_t *v)
{
    if (!v)
        return "missing";
    bool nullable = f->kind == F_NAME_OR_NULL || f->kind == F_TEXT_OR_NULL || f->kind == F_URL_OR_NULL;
    if (json_is_null(v))
        return nullable ? NULL : "must not be null";
    if (f->kind == F_COUNT) {
        if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max)
            return "must be a whole number in range";
        return NULL;
    }
    const char *s = json_string_value(v);
    if (!s)
        return "must be a string";
    switch (f->kind) {
    case F_NAME:
    case F_NAME_OR_NULL:
        return sg_valid_name(s) ? NULL : "not a valid name (letters, digits, '.', '_', '-', '@'; 128 at most)";
    case F_URL_OR_NULL:
        return url_ok(s) ? NULL : "not an http:// or https:// URL of printable ASCII (512 bytes at most)";
    case F_STATE:
        return sg_hostreg_state_known(s) ? NULL : "not running, aborted, starting or dead";
    default:
        return text_ok(s, SG_HOSTREG_TEXT_MAX) ? NULL : "not printable ASCII of 1..64 bytes";
    }
}

/* The fields of obj (an object, named where) into out, each checked; a
 * key not in fields is refused. */
static int check_object(json_t *obj, const field *fields, size_t n, const char *where, json_t *out, sg_err *err)
{
    if (!json_is_object(obj))
        return sg_err_set(err, EINVAL, "%s: must be an object", where);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(key, fields[i].key) == 0;
        if (!known) {
            char vis[80];
            return sg_err_set(err, EINVAL, "%s%sunknown field '%s'", where, where[0] ? ": " : "",
                              sg_vis(key, strlen(key), vis, sizeof vis));
        }
    }
    for (size_t i = 0; i < n; i++) {
        v = json_object_get(obj, fields[i].key);
        const char *why = check_value(&fields[i], v);
        if (why)
            return sg_err_set(err, EINVAL, "%s%s%s: %s", where, where[0] ? "." : "", fields[i].key, why);
        json_object_set(out, fields[i].key, v);
    }
    return 0;
}

static int check_sandboxes(json_t *sbs, json_t *out, sg_err *err)
{
    if (!json_is_array(sbs))
        return sg_err_set(err, EINVAL, "sandboxes: %s", sbs ? "must be an array" : "missing");
    if (json_array_size(sbs) > SG_HOSTREG_SANDBOXES_MAX)
        return sg_err_set(err, EINVAL, "sandboxes: more than %d listed", SG_HOSTREG_SANDBOXES_MAX);
    json_t *arr = json_array();
    json_object_set_new(out, "sandboxes", arr);
    size_t i;
    json_t *sb;
    json_array_foreach(sbs, i, sb) {
        char where[32];
        snprintf(where, sizeof where, "sandboxes[%zu]", i);
        json_t *one = json_object();
        json_array_append_new(arr, one);
        if (check_object(sb, sb_fields, SG_ARRAY_LEN(sb_fields), where, one, err) < 0)
            return -1;
    }
    return 0;
}

json_t *sg_hostreg_parse(const char *buf, size_t len, sg_err *err)
{
    if (len > SG_HOSTREG_BODY_MAX)
        return sg_err_set(err, EFBIG, "registration: larger than %d bytes", SG_HOSTREG_BODY_MAX), NULL;
    sg_autojson json_t *in = sg_json_parse(buf, len, err);
    if (!in) { /* the parser's message may quote the bytes: escaped */
        char vis[sizeof err->msg];
        sg_vis(err->msg, strlen(err->msg), vis, sizeof vis);
        sg_err_set(err, EINVAL, "registration: not JSON: %s", vis);
        return NULL;
    }
    if (!json_is_object(in))
        return sg_err_set(err, EINVAL, "registration: must be a JSON object"), NULL;
    static const char *const nested[] = {"capacity", "sandboxes"};
    sg_autojson json_t *top = json_deep_copy(in);
    for (size_t i = 0; top && i < SG_ARRAY_LEN(nested); i++)
        json_object_del(top, nested[i]);
    sg_autojson json_t *out = json_object(), *cap = json_object();
    if (!top || !out || !cap)
        return sg_err_set(err, ENOMEM, "out of memory"), NULL;
    if (check_object(top, top_fields, SG_ARRAY_LEN(top_fields), "", out, err) < 0 ||
        check_object(json_object_get(in, "capacity") ?: json_null(), cap_fields, SG_ARRAY_LEN(cap_fields),
                     "capacity", cap, err) < 0 ||
        check_sandboxes(json_object_get(in, "sandboxes"), out, err) < 0)
        return NULL;
    if (json_integer_value(json_object_get(out, "v")) != SG_HOSTREG_VERSION)
        return sg_err_set(err, EINVAL, "v: unknown version (this ingest knows %d)", SG_HOSTREG_VERSION), NULL;
    if ((json_int_t)json_array_size(json_object_get(out, "sandboxes")) >
        json_integer_value(json_object_get(out, "sandboxes_total")))
        return sg_err_set(err, EINVAL, "sandboxes_total: fewer than the sandboxes listed"), NULL;
    json_object_set(out, "capacity", cap);
    return json_incref(out);
}

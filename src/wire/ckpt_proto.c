/* ckpt_proto: checkpoint records and their wire form (see wire/ckpt_proto.h). */
#include "wire/ckpt_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

void sg_checkpoint_infos_free(sg_checkpoint_info *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i].label);
    free(v);
}

void sg_checkpoint_changes_free(sg_checkpoint_change *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i].path);
    free(v);
}

const char *sg_checkpoint_change_kind_name(sg_checkpoint_change_kind k)
{
    switch (k) {
    case SG_CKPT_MODIFIED: return "modified";
    case SG_CKPT_CREATED: return "created";
    case SG_CKPT_DELETED: return "deleted";
    case SG_CKPT_TYPE: return "type";
    case SG_CKPT_META: return "mode";
    }
    return "?";
}

/* ---- framing ------------------------------------------------------------ */

/* 1: all len bytes; 0: end of file before any; -1 with err. */
static int read_full(int fd, void *buf, size_t len, sg_err *err)
{
    ssize_t got = sg_read_all(fd, buf, len);
    if (got < 0)
        return sg_err_sys(err, "checkpoint worker: read");
    if ((size_t)got < len)
        return got == 0 ? 0 : sg_err_set(err, EPIPE, "checkpoint worker: message cut short");
    return 1;
}

/* MSG_NOSIGNAL: a peer that is gone is EPIPE, never a SIGPIPE. */
static int send_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int sg_ckpt_proto_send(int fd, const json_t *msg, sg_err *err)
{
    sg_autofree char *s = json_dumps(msg, JSON_COMPACT);
    if (!s)
        return sg_err_set(err, ENOMEM, "checkpoint worker: cannot encode a message");
    size_t n = strlen(s);
    if (n > SG_CKPT_PROTO_MAX)
        return sg_err_set(err, EMSGSIZE, "checkpoint worker: message of %zu bytes is too large", n);
    uint32_t len = (uint32_t)n;
    if (send_full(fd, &len, sizeof len) < 0 || send_full(fd, s, n) < 0)
        return sg_err_sys(err, "checkpoint worker: write");
    return 0;
}

int sg_ckpt_proto_recv(int fd, json_t **msg, sg_err *err)
{
    *msg = NULL;
    uint32_t len;
    int r = read_full(fd, &len, sizeof len, err);
    if (r <= 0)
        return r;
    if (len > SG_CKPT_PROTO_MAX)
        return sg_err_set(err, EMSGSIZE, "checkpoint worker: message of %u bytes is too large", len);
    sg_autofree char *buf = malloc(len ? len : 1);
    if (!buf)
        return sg_err_set(err, ENOMEM, "checkpoint worker: out of memory");
    if (len) {
        int r2 = read_full(fd, buf, len, err);
        if (r2 == 0)
            sg_err_set(err, EPIPE, "checkpoint worker: message cut short");
        if (r2 <= 0)
            return -1;
    }
    json_t *j = sg_json_parse(buf, len, err);
    if (!j)
        return -1;
    if (!json_is_object(j)) {
        json_decref(j);
        return sg_err_set(err, EPROTO, "checkpoint worker: a message is not a JSON object");
    }
    *msg = j;
    return 1;
}

/* ---- values --------------------------------------------------------------- */

json_t *sg_ckpt_proto_bytes(const void *buf, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = buf;
    sg_autofree char *hex = malloc(2 * len + 1);
    if (!hex)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        hex[2 * i] = digits[p[i] >> 4];
        hex[2 * i + 1] = digits[p[i] & 15];
    }
    return json_stringn(hex, 2 * len);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

char *sg_ckpt_proto_unbytes(const json_t *v, bool no_nul, size_t *len, sg_err *err)
{
    const char *hex = json_string_value(v);
    size_t n = json_string_length(v);
    if (!hex || n % 2) {
        sg_err_set(err, EPROTO, "checkpoint worker: a byte string is not even-length hex");
        return NULL;
    }
    char *out = malloc(n / 2 + 1);
    if (!out) {
        sg_err_set(err, ENOMEM, "checkpoint worker: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0 || (no_nul && hi == 0 && lo == 0)) {
            free(out);
            sg_err_set(err, EPROTO, "checkpoint worker: bad byte string");
            return NULL;
        }
        out[i] = (char)(hi << 4 | lo);
    }
    out[n / 2] = '\0';
    if (len)
        *len = n / 2;
    return out;
}

/* An unsigned field of obj; false when missing, not an integer or negative. */
static bool get_u64(const json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static bool get_u32(const json_t *obj, const char *key, uint32_t *out)
{
    uint64_t x;
    if (!get_u64(obj, key, &x) || x > UINT32_MAX)
        return false;
    *out = (uint32_t)x;
    return true;
}

static int bad(sg_err *err, const char *what)
{
    return sg_err_set(err, EPROTO, "checkpoint worker: malformed %s", what);
}

/* An id: exactly SG_CHECKPOINT_ID_LEN hex digits. */
static bool get_id(const json_t *obj, char out[SG_CHECKPOINT_ID_LEN + 1])
{
    const char *s = json_string_value(json_object_get(obj, "id"));
    if (!s || strlen(s) != SG_CHECKPOINT_ID_LEN || strspn(s, "0123456789abcdef") != SG_CHECKPOINT_ID_LEN)
        return false;
    memcpy(out, s, SG_CHECKPOINT_ID_LEN + 1);
    return true;
}

json_t *sg_ckpt_proto_stats(const sg_checkpoint_stats *st)
{
    json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "files", (json_int_t)st->files,
                     "dirs", (json_int_t)st->dirs, "bytes", (json_int_t)st->bytes,
                     "changed", (json_int_t)st->changed, "hashed", (json_int_t)st->hashed,
                     "skipped", (json_int_t)st->skipped);
    /* The limits' counters travel only when set (checkpoint.h: limits). */
    if (st->omitted)
        json_object_set_new(j, "omitted", json_integer((json_int_t)st->omitted));
    if (st->partial)
        json_object_set_new(j, "partial", json_integer((json_int_t)st->partial));
    if (st->unrestorable)
        json_object_set_new(j, "unrestorable", json_integer((json_int_t)st->unrestorable));
    if (st->store_full)
        json_object_set_new(j, "store_full", json_true());
    return j;
}

int sg_ckpt_proto_unstats(const json_t *v, sg_checkpoint_stats *st, sg_err *err)
{
    if (!get_u64(v, "files", &st->files) || !get_u64(v, "dirs", &st->dirs) ||
        !get_u64(v, "bytes", &st->bytes) || !get_u64(v, "changed", &st->changed) ||
        !get_u64(v, "hashed", &st->hashed) || !get_u64(v, "skipped", &st->skipped))
        return bad(err, "checkpoint stats");
    st->omitted = st->partial = st->unrestorable = 0;
    if ((json_object_get(v, "omitted") && !get_u64(v, "omitted", &st->omitted)) ||
        (json_object_get(v, "partial") && !get_u64(v, "partial", &st->partial)) ||
        (json_object_get(v, "unrestorable") && !get_u64(v, "unrestorable", &st->unrestorable)))
        return bad(err, "checkpoint stats");
    st->store_full = json_is_true(json_object_get(v, "store_full")) ? 1 : 0;
    return 0;
}

json_t *sg_ckpt_proto_infos(const sg_checkpoint_info *v, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *l = v[i].label ? v[i].label : "";
        json_array_append_new(arr, json_pack("{s:s, s:o, s:I, s:I, s:I, s:I}", "id", v[i].id,
                                             "label", sg_ckpt_proto_bytes(l, strlen(l)),
                                             "time", (json_int_t)v[i].time,
                                             "files", (json_int_t)v[i].files,
                                             "dirs", (json_int_t)v[i].dirs,
                                             "bytes", (json_int_t)v[i].bytes));
    }
    return arr;
}

int sg_ckpt_proto_uninfos(const json_t *v, sg_checkpoint_info **out, size_t *n, sg_err *err)
{
    *out = NULL;
    *n = 0;
    if (!json_is_array(v))
        return bad(err, "checkpoint list");
    size_t len = json_array_size(v);
    sg_checkpoint_info *a = calloc(len ? len : 1, sizeof *a);
    if (!a)
        return sg_err_set(err, ENOMEM, "checkpoint worker: out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        json_t *t = json_object_get(e, "time");
        sg_err e2 = {0};
        if (!get_id(e, a[i].id) || !json_is_integer(t) || !get_u64(e, "files", &a[i].files) ||
            !get_u64(e, "dirs", &a[i].dirs) || !get_u64(e, "bytes", &a[i].bytes) ||
            !(a[i].label = sg_ckpt_proto_unbytes(json_object_get(e, "label"), true, NULL, &e2))) {
            sg_checkpoint_infos_free(a, len);
            return bad(err, "checkpoint list entry");
        }
        a[i].time = (int64_t)json_integer_value(t);
    }
    *out = a;
    *n = len;
    return 0;
}

json_t *sg_ckpt_proto_changes(const sg_checkpoint_change *v, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:o, s:i, s:I, s:I, s:I, s:I, s:I, s:I}",
                                             "path", sg_ckpt_proto_bytes(v[i].path, strlen(v[i].path)),
                                             "kind", (int)v[i].kind,
                                             "mode_now", (json_int_t)v[i].mode_now,
                                             "mode_then", (json_int_t)v[i].mode_then,
                                             "uid_now", (json_int_t)v[i].uid_now,
                                             "gid_now", (json_int_t)v[i].gid_now,
                                             "uid_then", (json_int_t)v[i].uid_then,
                                             "gid_then", (json_int_t)v[i].gid_then));
    return arr;
}

int sg_ckpt_proto_unchanges(const json_t *v, sg_checkpoint_change **out, size_t *n, sg_err *err)
{
    *out = NULL;
    *n = 0;
    if (!json_is_array(v))
        return bad(err, "change list");
    size_t len = json_array_size(v);
    sg_checkpoint_change *a = calloc(len ? len : 1, sizeof *a);
    if (!a)
        return sg_err_set(err, ENOMEM, "checkpoint worker: out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        uint32_t kind = 0;
        sg_err e2 = {0};
        if (!get_u32(e, "kind", &kind) || kind < SG_CKPT_MODIFIED || kind > SG_CKPT_META ||
            !get_u32(e, "mode_now", &a[i].mode_now) || !get_u32(e, "mode_then", &a[i].mode_then) ||
            !get_u32(e, "uid_now", &a[i].uid_now) || !get_u32(e, "gid_now", &a[i].gid_now) ||
            !get_u32(e, "uid_then", &a[i].uid_then) || !get_u32(e, "gid_then", &a[i].gid_then) ||
            !(a[i].path = sg_ckpt_proto_unbytes(json_object_get(e, "path"), true, NULL, &e2))) {
            sg_checkpoint_changes_free(a, len);
            return bad(err, "change list entry");
        }
        a[i].kind = (sg_checkpoint_change_kind)kind;
    }
    *out = a;
    *n = len;
    return 0;
}

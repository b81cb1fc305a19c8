/* libFuzzer target: the checkpoint worker protocol (ckpt_proto.c) as the
 * supervisor reads it. The worker reads the learner's workspace with
 * libgit2; what it sends back (paths, labels, counts) is the learner's
 * doing, and a worker subverted through its inputs could send anything.
 *
 * Invariants:
 *  - framing: the input as a byte stream (4-byte length, JSON object, ...)
 *    yields exactly the messages whose length is at most SG_CKPT_PROTO_MAX
 *    and whose bytes are a JSON object, in order, each equal to its bytes
 *    parsed; the stream stops at the first bad or cut-short message, and a
 *    clean end is 0;
 *  - byte strings: sg_ckpt_proto_unbytes of any JSON string succeeds exactly
 *    for even-length lowercase hex (and no 00 byte with no_nul), gives
 *    len = n / 2 bytes, NUL-terminated, and encodes back to the same
 *    string; the input's own bytes go through bytes/unbytes unchanged;
 *  - records: stats, checkpoint lists and change lists, decoded from any
 *    object or array in the input, are the message's own values, and
 *    re-encode and decode to the same values; a change's kind is one of
 *    the enum's, paths and labels have no NUL, ids are 40 lowercase hex
 *    digits. */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "wire/ckpt_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static void check_unbytes(const json_t *v)
{
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    for (int no_nul = 0; no_nul < 2; no_nul++) {
        sg_err err;
        size_t len = 12345;
        char *out = sg_ckpt_proto_unbytes(v, no_nul, &len, &err);
        bool want = s && n % 2 == 0 && is_lower_hex(s, n);
        if (want && no_nul)
            for (size_t i = 0; i + 1 < n; i += 2)
                want &= !(s[i] == '0' && s[i + 1] == '0');
        if (!out != !want)
            abort();
        if (!out)
            continue;
        if (len != n / 2 || out[len] != '\0' || (no_nul && memchr(out, 0, len)))
            abort();
        json_t *back = sg_ckpt_proto_bytes(out, len);
        if (!json_equal(back, (json_t *)v))
            abort();
        json_decref(back);
        free(out);
    }
}

/* An integer member (0 when absent). */
static int64_t ival(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

static void check_stats(const json_t *v)
{
    sg_checkpoint_stats a, b;
    sg_err err;
    memset(&a, 0xa5, sizeof a);
    if (sg_ckpt_proto_unstats(v, &a, &err) < 0)
        return;
    if (a.files != (uint64_t)ival(v, "files") || a.dirs != (uint64_t)ival(v, "dirs") ||
        a.bytes != (uint64_t)ival(v, "bytes") || a.changed != (uint64_t)ival(v, "changed") ||
        a.hashed != (uint64_t)ival(v, "hashed") || a.skipped != (uint64_t)ival(v, "skipped") ||
        a.omitted != (uint64_t)ival(v, "omitted") || a.partial != (uint64_t)ival(v, "partial") ||
        a.unrestorable != (uint64_t)ival(v, "unrestorable") ||
        a.store_full != json_is_true(json_object_get(v, "store_full")))
        abort(); /* not the message's values */
    json_t *j = sg_ckpt_proto_stats(&a);
    memset(&b, 0x5a, sizeof b);
    if (!j || sg_ckpt_proto_unstats(j, &b, &err) < 0 || memcmp(&a, &b, sizeof a) != 0)
        abort();
    json_decref(j);
}

static void check_infos(const json_t *v)
{
    sg_checkpoint_info *a = NULL, *b = NULL;
    size_t n = 7, m = 7;
    sg_err err;
    if (sg_ckpt_proto_uninfos(v, &a, &n, &err) < 0) {
        if (a || n)
            abort();
        return;
    }
    if (n != json_array_size(v))
        abort();
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (strlen(a[i].id) != SG_CHECKPOINT_ID_LEN || !is_lower_hex(a[i].id, SG_CHECKPOINT_ID_LEN) ||
            !a[i].label || strcmp(a[i].id, json_string_value(json_object_get(e, "id"))) != 0 ||
            a[i].time != ival(e, "time") || a[i].files != (uint64_t)ival(e, "files") ||
            a[i].dirs != (uint64_t)ival(e, "dirs") || a[i].bytes != (uint64_t)ival(e, "bytes") ||
            strlen(a[i].label) * 2 != json_string_length(json_object_get(e, "label")))
            abort(); /* not the message's values */
    }
    json_t *j = sg_ckpt_proto_infos(a, n);
    if (!j || sg_ckpt_proto_uninfos(j, &b, &m, &err) < 0 || m != n)
        abort();
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i].id, b[i].id) || strcmp(a[i].label, b[i].label) || a[i].time != b[i].time ||
            a[i].files != b[i].files || a[i].dirs != b[i].dirs || a[i].bytes != b[i].bytes)
            abort();
    json_decref(j);
    sg_checkpoint_infos_free(a, n);
    sg_checkpoint_infos_free(b, m);
}

static void check_changes(const json_t *v)
{
    sg_checkpoint_change *a = NULL, *b = NULL;
    size_t n = 7, m = 7;
    sg_err err;
    if (sg_ckpt_proto_unchanges(v, &a, &n, &err) < 0) {
        if (a || n)
            abort();
        return;
    }
    if (n != json_array_size(v))
        abort();
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (a[i].kind < SG_CKPT_MODIFIED || a[i].kind > SG_CKPT_META || !a[i].path ||
            !strcmp(sg_checkpoint_change_kind_name(a[i].kind), "?") ||
            (int64_t)a[i].kind != ival(e, "kind") || a[i].mode_now != ival(e, "mode_now") ||
            a[i].mode_then != ival(e, "mode_then") || a[i].uid_now != ival(e, "uid_now") ||
            a[i].gid_now != ival(e, "gid_now") || a[i].uid_then != ival(e, "uid_then") ||
            a[i].gid_then != ival(e, "gid_then") ||
            strlen(a[i].path) * 2 != json_string_length(json_object_get(e, "path")))
            abort(); /* not the message's values */
    }
    json_t *j = sg_ckpt_proto_changes(a, n);
    if (!j || sg_ckpt_proto_unchanges(j, &b, &m, &err) < 0 || m != n)
        abort();
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i].path, b[i].path) || a[i].kind != b[i].kind || a[i].mode_now != b[i].mode_now ||
            a[i].mode_then != b[i].mode_then || a[i].uid_now != b[i].uid_now ||
            a[i].gid_now != b[i].gid_now || a[i].uid_then != b[i].uid_then ||
            a[i].gid_then != b[i].gid_then)
            abort();
    json_decref(j);
    sg_checkpoint_changes_free(a, n);
    sg_checkpoint_changes_free(b, m);
}

/* Every value of a message, as the supervisor might decode it. */
static void walk(const json_t *v, int depth)
{
    if (depth > 8)
        return;
    if (json_is_string(v)) {
        check_unbytes(v);
    } else if (json_is_object(v)) {
        check_stats(v);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
            walk(x, depth + 1);
    } else if (json_is_array(v)) {
        check_infos(v);
        check_changes(v);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
            walk(x, depth + 1);
    }
}

/* The input as the worker's byte stream, against a reading of it here. */
static void check_stream(const uint8_t *data, size_t size)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        abort();
    if (size && write(p[1], data, size) != (ssize_t)size)
        abort();
    close(p[1]);
    size_t off = 0;
    for (;;) {
        json_t *msg = NULL;
        sg_err err;
        int r = sg_ckpt_proto_recv(p[0], &msg, &err);
        /* What this stream holds at off. */
        int want;
        json_t *exp = NULL;
        if (off == size) {
            want = 0;
        } else if (size - off < 4) {
            want = -1;
        } else {
            uint32_t len;
            memcpy(&len, data + off, 4);
            exp = len <= SG_CKPT_PROTO_MAX && len <= size - off - 4
                      ? json_loadb((const char *)data + off + 4, len, JSON_REJECT_DUPLICATES, NULL)
                      : NULL;
            want = json_is_object(exp) ? 1 : -1;
            off += 4 + (size_t)len;
        }
        if (r != want || (r == 1 && !json_equal(msg, exp)) || (r != 1 && msg))
            abort();
        if (msg)
            walk(msg, 0);
        json_decref(msg);
        json_decref(exp);
        if (r != 1)
            break;
    }
    close(p[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 60000)
        return 0; /* the pipe holds the whole stream */
    check_stream(data, size);
    /* The input as one message's JSON. */
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
    walk(j, 0);
    json_decref(j);
    /* The input's own bytes as a path or label. */
    json_t *b = sg_ckpt_proto_bytes(data, size);
    check_unbytes(b);
    sg_err err;
    size_t len;
    char *back = sg_ckpt_proto_unbytes(b, false, &len, &err);
    if (!back || len != size || (size && memcmp(back, data, size) != 0))
        abort();
    free(back);
    json_decref(b);
    return 0;
}

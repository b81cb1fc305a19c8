/* ckpt_worker: serves checkpoint requests from a supervisor (see checkpoint/ckpt_worker.h). */
#include "checkpoint/ckpt_worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/udiff.h"
#include "wire/ckpt_proto.h"

/* One argument in hex (see wire/ckpt_proto.h); NULL with err. */
static char *arg_bytes(json_t *req, const char *key, bool no_nul, size_t *len, sg_err *err)
{
    char *s = sg_ckpt_proto_unbytes(json_object_get(req, key), no_nul, len, err);
    if (!s)
        sg_err_prefix(err, "argument \"%s\"", key);
    return s;
}

static const char *arg_id(json_t *req, sg_err *err)
{
    const char *id = json_string_value(json_object_get(req, "id"));
    if (!id)
        sg_err_set(err, EINVAL, "argument \"id\" is missing");
    return id;
}

static json_t *do_take(sg_ckpt_store *st, json_t *req, sg_err *err)
{
    sg_autofree char *label = arg_bytes(req, "label", true, NULL, err);
    if (!label)
        return NULL;
    char id[SG_CHECKPOINT_ID_LEN + 1];
    sg_checkpoint_stats stats = {0};
    bool reused = false;
    if (sg_checkpoint_take_ex(st, label, json_is_true(json_object_get(req, "reuse")), id, &stats,
                              &reused, err) < 0)
        return NULL;
    return json_pack("{s:s, s:b, s:o}", "id", id, "reused", reused, "stats", sg_ckpt_proto_stats(&stats));
}

/* {"id", "labels": [{"label": hex, "time": n}, ...]}: labels of execs
 * the supervisor found unchanged, recorded in order. */
static json_t *do_alias(sg_ckpt_store *st, json_t *req, sg_err *err)
{
    const char *id = arg_id(req, err);
    json_t *labels = json_object_get(req, "labels");
    if (!id)
        return NULL;
    if (!json_is_array(labels)) {
        sg_err_set(err, EINVAL, "argument \"labels\" is not an array");
        return NULL;
    }
    size_t n = json_array_size(labels);
    char **v = sg_xcalloc(n + 1, sizeof *v);
    int64_t *times = sg_xcalloc(n + 1, sizeof *times);
    size_t got = 0;
    json_t *l;
    json_array_foreach(labels, got, l) {
        json_t *t = json_object_get(l, "time");
        if (!(v[got] = arg_bytes(l, "label", true, NULL, err)))
            break;
        if (!json_is_integer(t)) {
            sg_err_set(err, EINVAL, "a label has no \"time\"");
            free(v[got]);
            v[got] = NULL;
            break;
        }
        times[got] = (int64_t)json_integer_value(t);
    }
    /* One call for the whole batch: one lock, one check, one append. */
    int rc = got == n ? sg_checkpoint_alias(st, id, v, times, n, err) : -1;
    for (size_t i = 0; i < got; i++)
        free(v[i]);
    free(v);
    free(times);
    return rc < 0 ? NULL : json_object();
}

static json_t *do_list(sg_ckpt_store *st, sg_err *err)
{
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    if (sg_checkpoint_list(st, &v, &n, err) < 0)
        return NULL;
    json_t *r = json_pack("{s:o}", "checkpoints", sg_ckpt_proto_infos(v, n));
    sg_checkpoint_infos_free(v, n);
    return r;
}

static json_t *do_diff(sg_ckpt_store *st, json_t *req, sg_err *err)
{
    const char *id = arg_id(req, err);
    if (!id)
        return NULL;
    sg_checkpoint_change *v = NULL;
    size_t n = 0;
    if (sg_checkpoint_diff(st, id, &v, &n, err) < 0)
        return NULL;
    json_t *r = json_pack("{s:o}", "changes", sg_ckpt_proto_changes(v, n));
    sg_checkpoint_changes_free(v, n);
    return r;
}

static json_t *do_restore(sg_ckpt_store *st, json_t *req, sg_err *err)
{
    const char *id = arg_id(req, err);
    if (!id)
        return NULL;
    sg_checkpoint_stats stats = {0};
    if (sg_checkpoint_restore(st, id, &stats, err) < 0)
        return NULL;
    return json_pack("{s:o}", "stats", sg_ckpt_proto_stats(&stats));
}

/* A side absent from the request is an absent file (NULL). */
static json_t *do_unified(json_t *req, sg_err *err)
{
    sg_autofree char *path = arg_bytes(req, "path", true, NULL, err);
    if (!path)
        return NULL;
    sg_autofree char *old = NULL, *new_ = NULL;
    size_t olen = 0, nlen = 0;
    if (json_object_get(req, "old") && !(old = arg_bytes(req, "old", false, &olen, err)))
        return NULL;
    if (json_object_get(req, "new") && !(new_ = arg_bytes(req, "new", false, &nlen, err)))
        return NULL;
    sg_diff_result r;
    if (sg_udiff_unified(path, old, olen, new_, nlen, &r, err) < 0)
        return NULL;
    json_t *out = json_pack("{s:o, s:I, s:I}", "text", sg_ckpt_proto_bytes(r.text, r.len),
                            "added", (json_int_t)r.added, "removed", (json_int_t)r.removed);
    sg_diff_result_clear(&r);
    return out;
}

static void store_closep(sg_ckpt_store **st)
{
    if (*st)
        sg_checkpoint_close(*st);
}

int sg_ckpt_worker_serve(int fd, sg_err *err)
{
    __attribute__((cleanup(store_closep))) sg_ckpt_store *st = NULL;
    for (;;) {
        json_t *req = NULL;
        int r = sg_ckpt_proto_recv(fd, &req, err);
        if (r <= 0)
            return r;
        const char *op = json_string_value(json_object_get(req, "op"));
        sg_err e = {0};
        json_t *ok = NULL;
        if (!op) {
            sg_err_set(&e, EINVAL, "a request has no \"op\"");
        } else if (strcmp(op, "open") == 0) {
            sg_autofree char *repo = arg_bytes(req, "repo", true, NULL, &e);
            sg_autofree char *ws = repo ? arg_bytes(req, "workspace", true, NULL, &e) : NULL;
            if (st) {
                sg_err_set(&e, EALREADY, "the store is already open");
            } else if (ws && (st = sg_checkpoint_open(repo, ws, &e))) {
                ok = json_object();
            }
        } else if (strcmp(op, "unified") == 0) {
            ok = do_unified(req, &e);
        } else if (!st) {
            sg_err_set(&e, EINVAL, "\"%s\" before \"open\"", op);
        } else if (strcmp(op, "take") == 0) {
            ok = do_take(st, req, &e);
        } else if (strcmp(op, "alias") == 0) {
            ok = do_alias(st, req, &e);
        } else if (strcmp(op, "list") == 0) {
            ok = do_list(st, &e);
        } else if (strcmp(op, "diff") == 0) {
            ok = do_diff(st, req, &e);
        } else if (strcmp(op, "restore") == 0) {
            ok = do_restore(st, req, &e);
        } else {
            sg_err_set(&e, EINVAL, "unknown op \"%s\"", op);
        }
        json_decref(req);
        /* An error may quote a path that is not UTF-8. */
        sg_autofree char *msg = ok ? NULL : sg_utf8_sanitize(e.msg, strlen(e.msg), NULL);
        json_t *ans = ok ? json_pack("{s:o}", "ok", ok)
                         : json_pack("{s:s, s:i}", "error", msg && *msg ? msg : "failed", "errno", e.code);
        if (!ans)
            ans = json_pack("{s:s, s:i}", "error", "cannot encode the answer", "errno", ENOMEM);
        int sr = sg_ckpt_proto_send(fd, ans, err);
        json_decref(ans);
        if (sr < 0) /* the supervisor stopped us with an answer in flight: not an error */
            return err->code == EPIPE || err->code == ECONNRESET ? 0 : -1;
    }
}

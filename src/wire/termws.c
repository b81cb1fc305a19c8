/* termws: the terminal WebSocket's text messages (termws.h). */
#include "wire/termws.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

#define AUTH_IS "the first message is {\"token\": T, \"rows\": R, \"cols\": C}"
#define RESIZE_IS "after the token, a text message is {\"resize\": {\"rows\": R, \"cols\": C}}"

char *sg_termws_encode(const sg_termws_msg *m, size_t *len)
{
    sg_autojson json_t *j = NULL;
    switch (m->kind) {
    case SG_TERMWS_AUTH:
        j = json_pack("{s:s, s:i, s:i}", "token", m->token ? m->token : "", "rows", (int)m->rows, "cols",
                      (int)m->cols);
        break;
    case SG_TERMWS_RESIZE:
        j = json_pack("{s:{s:i, s:i}}", "resize", "rows", (int)m->rows, "cols", (int)m->cols);
        break;
    case SG_TERMWS_EXIT:
        j = json_pack("{s:i}", "exit", m->exit_code);
        break;
    case SG_TERMWS_ERROR:
        j = json_pack("{s:s}", "error", m->error ? m->error : "");
        break;
    case SG_TERMWS_WATCHERS:
        j = json_pack("{s:I}", "watchers", (json_int_t)m->watchers);
        break;
    default:
        return NULL;
    }
    char *s = j ? sg_json_dump(j) : NULL;
    if (s && len)
        *len = strlen(s);
    return s;
}

/* Refuses any field of j not in allowed (NULL-terminated). */
static int only_fields(const json_t *j, const char *const *allowed, const char *is, sg_err *err)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)j, key, val) {
        bool ok = false;
        for (size_t i = 0; !ok && allowed[i]; i++)
            ok = !strcmp(key, allowed[i]);
        char vis[48]; /* the sender's own bytes, but shown on a terminal */
        if (!ok)
            return sg_err_set(err, EINVAL, "%s: unknown field \"%s\"", is, sg_vis(key, strlen(key), vis, sizeof vis));
    }
    return 0;
}

/* rows and cols of obj, each an integer in 1..SG_TERMWS_WINSZ_MAX. */
static int winsz(const json_t *obj, sg_termws_msg *out, const char *is, sg_err *err)
{
    static const char *const names[] = {"rows", "cols"};
    uint16_t *dst[] = {&out->rows, &out->cols};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(obj, names[i]);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > SG_TERMWS_WINSZ_MAX)
            return sg_err_set(err, EINVAL, "%s: \"%s\" must be an integer 1-%d", is, names[i], SG_TERMWS_WINSZ_MAX);
        *dst[i] = (uint16_t)json_integer_value(v);
    }
    return 0;
}

/* A string field without NUL: a copy in *out. */
static int string_field(const json_t *j, const char *key, char **out, const char *is, sg_err *err)
{
    json_t *v = json_object_get(j, key);
    const char *s = json_string_value(v);
    if (!s || strlen(s) != json_string_length(v))
        return sg_err_set(err, EINVAL, "%s: \"%s\" must be a string without NUL", is, key);
    *out = strdup(s);
    return *out ? 0 : sg_err_set(err, ENOMEM, "out of memory");
}

static json_t *parse(const char *buf, size_t len, sg_err *err)
{
    if (len > SG_TERMWS_TEXT_MAX) {
        sg_err_set(err, EMSGSIZE, "a text message is at most %d bytes", SG_TERMWS_TEXT_MAX);
        return NULL;
    }
    sg_err perr;
    json_t *j = sg_json_parse(buf, len, &perr);
    if (!json_is_object(j)) {
        if (j)
            json_decref(j);
        sg_err_set(err, EINVAL, "a text message is a JSON object");
        return NULL;
    }
    return j;
}

static int decode_browser(const json_t *j, bool authed, sg_termws_msg *out, sg_err *err)
{
    if (!authed) {
        static const char *const f[] = {"token", "rows", "cols", NULL};
        out->kind = SG_TERMWS_AUTH;
        return only_fields(j, f, AUTH_IS, err) < 0 || winsz(j, out, AUTH_IS, err) < 0
               ? -1 : string_field(j, "token", &out->token, AUTH_IS, err);
    }
    static const char *const f[] = {"resize", NULL}, *const fr[] = {"rows", "cols", NULL};
    json_t *rs = json_object_get(j, "resize");
    out->kind = SG_TERMWS_RESIZE;
    if (only_fields(j, f, RESIZE_IS, err) < 0)
        return -1;
    if (!json_is_object(rs))
        return sg_err_set(err, EINVAL, "%s: \"resize\" must be an object", RESIZE_IS);
    return only_fields(rs, fr, RESIZE_IS, err) < 0 ? -1 : winsz(rs, out, RESIZE_IS, err);
}

int sg_termws_decode_browser(const char *buf, size_t len, bool authed, sg_termws_msg *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    sg_autojson json_t *j = parse(buf, len, err);
    if (!j)
        return -1;
    if (decode_browser(j, authed, out, err) < 0) {
        sg_termws_msg_free(out);
        return -1;
    }
    return 0;
}

int sg_termws_decode_serve(const char *buf, size_t len, sg_termws_msg *out, sg_err *err)
{
    static const char *const is =
        "serve's text message is {\"exit\": N}, {\"error\": \"...\"} or {\"watchers\": N}";
    memset(out, 0, sizeof *out);
    sg_autojson json_t *j = parse(buf, len, err);
    if (!j)
        return -1;
    static const char *const f[] = {"exit", "error", "watchers", NULL};
    if (only_fields(j, f, is, err) < 0)
        return -1;
    if (json_object_size(j) != 1)
        return sg_err_set(err, EINVAL, "%s: one field of the three", is);
    json_t *w = json_object_get(j, "watchers");
    if (w) {
        if (!json_is_integer(w) || json_integer_value(w) < 0 || json_integer_value(w) > SG_TERMWS_WATCHERS_MAX)
            return sg_err_set(err, EINVAL, "%s: \"watchers\" must be an integer 0-%d", is, SG_TERMWS_WATCHERS_MAX);
        out->kind = SG_TERMWS_WATCHERS;
        out->watchers = (unsigned)json_integer_value(w);
        return 0;
    }
    json_t *x = json_object_get(j, "exit");
    if (x) {
        if (!json_is_integer(x) || json_integer_value(x) < INT_MIN || json_integer_value(x) > INT_MAX)
            return sg_err_set(err, EINVAL, "%s: \"exit\" must be an integer", is);
        out->kind = SG_TERMWS_EXIT;
        out->exit_code = (int)json_integer_value(x);
        return 0;
    }
    out->kind = SG_TERMWS_ERROR;
    if (string_field(j, "error", &out->error, is, err) < 0) {
        sg_termws_msg_free(out);
        return -1;
    }
    return 0;
}

void sg_termws_msg_free(sg_termws_msg *m)
{
    free(m->token);
    free(m->error);
    memset(m, 0, sizeof *m);
}

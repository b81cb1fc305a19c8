#include "mcp/mcp.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "mcp/tools.h"

#define MCP_PROGRESS_INTERVAL_NS 1000000000ull /* one progress notification a second */
#define MCP_LIST_TTL_MS 3600000 /* the tool list never changes while we run */

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"

/* Legacy versions we answer initialize with (newest first). */
static const char *const legacy_versions[] = {
    SG_MCP_PROTOCOL_LEGACY, "2025-06-18", "2025-03-26", "2024-11-05",
};
static const char *const modern_versions[] = {SG_MCP_PROTOCOL_MODERN};

struct sg_mcp {
    sg_mcp_io io;
    char *workspace;
    char *instructions; /* initialize's and discover's, naming the tools (tools.h) */
    bool initialized;
    char via[SG_CTL_VIA_MAX + 1]; /* "mcp: " and the client's name (initialize); "": not told */
    sg_mcp_call *calls;
    size_t ncalls;
};

/* ---- small helpers ---------------------------------------------------------- */

static void mcp_log(sg_mcp *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mcp_log(sg_mcp *m, const char *fmt, ...)
{
    if (!m->io.log)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    m->io.log(m->io.ud, buf);
}

static void send_json(sg_mcp *m, json_t *msg)
{
    sg_autofree char *s = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (s)
        m->io.send(m->io.ud, s, strlen(s));
}

static json_t *server_info(void)
{
    return json_pack("{s:s, s:s, s:s}", "name", "sandglass", "title", "sandglass sandbox",
                     "version", SG_VERSION);
}

static void send_result(sg_mcp *m, const json_t *id, json_t *result, bool modern)
{
    if (modern) {
        if (!json_object_get(result, "resultType"))
            json_object_set_new(result, "resultType", json_string("complete"));
        json_t *meta = json_object_get(result, "_meta");
        if (!meta) {
            meta = json_object();
            json_object_set_new(result, "_meta", meta);
        }
        json_object_set_new(meta, META_SERVER_INFO, server_info());
    }
    send_json(m, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_error(sg_mcp *m, const json_t *id, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void send_error(sg_mcp *m, const json_t *id, int code, json_t *data, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The message may quote client bytes cut anywhere: keep it valid UTF-8. */
    size_t n;
    sg_autofree char *clean = sg_utf8_sanitize(msg, strlen(msg), &n);
    json_t *err = json_pack("{s:i, s:s}", "code", code, "message", clean ? clean : "error");
    if (data)
        json_object_set_new(err, "data", data);
    json_t *idv = id ? json_incref((json_t *)id) : json_null();
    send_json(m, json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", idv, "error", err));
}

static bool in_list(const char *v, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v, list[i]) == 0)
            return true;
    return false;
}

static json_t *version_list(const char *const *list, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(list[i]));
    return a;
}

/* ---- paths ------------------------------------------------------------------ */

char *sg_mcp_resolve_path(const char *workspace, const char *path, sg_err *err)
{
    if (!path || !*path) {
        sg_err_set(err, EINVAL, "path is empty");
        return NULL;
    }
    size_t wl = strlen(workspace);
    if (strlen(path) >= PATH_MAX) {
        sg_err_set(err, ENAMETOOLONG, "path is too long (at most %d bytes)", PATH_MAX - 1);
        return NULL;
    }
    /* Lexical normalisation: the command runs inside the sandbox, where a
     * symlink cannot lead anywhere the sandbox user could not write anyway;
     * this only keeps the tools to the workspace, as documented. */
    sg_autofree char *full = path[0] == '/' ? strdup(path) : sg_strdup_printf("%s/%s", workspace, path);
    sg_autofree char *out = malloc(strlen(full) + 2);
    if (!full || !out) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    size_t o = 0;
    const char *p = full;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 1 && p[0] == '.') {
            /* skip */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the slash */
        } else {
            out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    if (strncmp(out, workspace, wl) != 0 || (out[wl] != '\0' && out[wl] != '/')) {
        sg_err_set(err, EPERM, "path '%.200s' is outside the workspace %s", path, workspace);
        return NULL;
    }
    return sg_steal_ptr(&out);
}

/* ---- calls ------------------------------------------------------------------ */

static sg_mcp_call *call_new(size_t out_cap, size_t err_cap)
{
    sg_mcp_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = c->in_fd = -1;
    c->out.cap = out_cap;
    c->err.cap = err_cap;
    c->out.data = malloc(out_cap + 1);
    c->err.data = malloc(err_cap + 1);
    if (!c->out.data || !c->err.data) {
        free(c->out.data);
        free(c->err.data);
        free(c);
        return NULL;
    }
    return c;
}

static void call_free(sg_mcp_call *c)
{
    if (!c)
        return;
    json_decref(c->id);
    json_decref(c->progress_token);
    json_decref(c->req);
    free(c->input);
    free(c->path);
    free(c->edit);
    sg_buf_free(&c->reply);
    free(c->out.data);
    free(c->err.data);
    sg_ctl_call_free(&c->answer);
    free(c);
}

static json_t *text_result(const char *text, size_t len, bool is_error)
{
    size_t n;
    sg_autofree char *clean = sg_utf8_sanitize(text, len, &n);
    json_t *r = json_pack("{s:[{s:s, s:s%}]}", "content", "type", "text", "text",
                          clean ? clean : "", clean ? n : 0);
    if (is_error)
        json_object_set_new(r, "isError", json_true());
    return r;
}

static void answer_tool_error(sg_mcp *m, const json_t *id, bool modern, const char *msg)
{
    send_result(m, id, text_result(msg, strlen(msg), true), modern);
}

/* Builds the call for tools/call: returns it, or NULL after answering
 * (protocol error or failed tool). */
static sg_mcp_call *plan_call(sg_mcp *m, const json_t *id, bool modern, const char *name, const json_t *args)
{
    const sg_mcp_tool *tool = sg_mcp_tool_find(name);
    if (!tool) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "Unknown tool: %.200s", name);
        return NULL;
    }
    /* Schema checks: a client that validates never fails these. */
    char why[256];
    if (sg_mcp_tool_check_args(tool, args, why, sizeof why)) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "Invalid arguments for tool %s: %s", name, why);
        return NULL;
    }
    if (m->ncalls >= SG_MCP_MAX_CALLS) {
        snprintf(why, sizeof why, "too many tool calls in flight (at most %d); retry when one has finished",
                 SG_MCP_MAX_CALLS);
        answer_tool_error(m, id, modern, why);
        return NULL;
    }
    sg_mcp_call *c = call_new(tool->out_cap, SG_MCP_OUTPUT_MAX);
    if (!c) {
        send_error(m, id, SG_MCP_INTERNAL_ERROR, NULL, "out of memory");
        return NULL;
    }
    c->tool = tool;
    c->modern = modern;
    c->id = json_incref((json_t *)id);
    const char *path = json_string_value(json_object_get(args, "path"));
    sg_err err = {0};
    const char *fail = NULL;
    if (path && !(c->path = sg_mcp_resolve_path(m->workspace, path, &err)))
        fail = err.msg;
    if (!fail)
        fail = tool->plan(c, args, m->workspace, why, sizeof why);
    if (!fail && !c->req)
        fail = "out of memory";
    /* a checkpoint or rollback records whom it was for (an exec is the
     * learner's command: its cause is the exec itself) */
    const char *op = json_string_value(json_object_get(c->req, "op"));
    if (!fail && m->via[0] && op && strcmp(op, "exec") != 0 &&
        json_object_set_new(c->req, "via", json_string(m->via)) < 0)
        fail = "out of memory";
    /* an exec's id: a copy the transport resends (a connection reset
     * before any answer) is refused if it was started after all (ctl.h) */
    char rid[33];
    if (!fail && op && strcmp(op, "exec") == 0 && sg_rand_hex(rid, 32, NULL) == 0 &&
        json_object_set_new(c->req, "rid", json_string(rid)) < 0)
        fail = "out of memory";
    if (fail) {
        answer_tool_error(m, id, modern, fail);
        call_free(c);
        return NULL;
    }
    return c;
}

int sg_mcp_call_output(sg_mcp_call *c, bool is_stderr, const char *buf, size_t len)
{
    sg_mcp_buf *b = is_stderr ? &c->err : &c->out;
    b->total += len;
    size_t room = b->cap - b->len;
    if (len > room)
        len = room;
    memcpy(b->data + b->len, buf, len);
    b->len += len;
    if (is_stderr || !c->tool->reply || c->replied)
        return 0;
    int r = c->tool->reply(c, &c->reply);
    if (r == 1)
        c->replied = true;
    return r;
}

static void unlink_call(sg_mcp *m, sg_mcp_call *c)
{
    for (sg_mcp_call **p = &m->calls; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            m->ncalls--;
            return;
        }
    }
}

/* Answers c and frees it (already unlinked). */
static void answer_call(sg_mcp *m, sg_mcp_call *c, const json_t *result, const char *error)
{
    json_t *r;
    if (error || !result) {
        char msg[SG_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "%s: %s", c->tool->name, error ? error : "no result");
        r = text_result(msg, strlen(msg), true);
    } else {
        sg_autobuf sg_buf t = {0};
        int failed = c->tool->shape(c, result, &t);
        r = failed < 0 ? text_result("out of memory", 13, true) : text_result(t.data ? t.data : "", t.len, failed);
    }
    send_result(m, c->id, r, c->modern);
    call_free(c);
}

/* The concurrency model (mcp.h): the calls are kept in the order they
 * came; a call that may write starts when every call before it has ended,
 * one that only reads when no call before it may write. Starts what may
 * start now. */
static void schedule(sg_mcp *m)
{
again:;
    bool any_before = false, writer_before = false;
    for (sg_mcp_call *c = m->calls; c; c = c->next) {
        if (!c->running && !(c->tool->writes ? any_before : writer_before)) {
            c->running = true;
            sg_err err = {0};
            if (m->io.start(m->io.ud, c, &err) < 0) {
                unlink_call(m, c);
                answer_call(m, c, NULL, err.msg);
                goto again; /* the list changed under us */
            }
        }
        any_before = true;
        writer_before |= c->tool->writes;
    }
}

void sg_mcp_call_done(sg_mcp *m, sg_mcp_call *c, const json_t *result, const char *error)
{
    unlink_call(m, c);
    answer_call(m, c, result, error);
    schedule(m);
}

/* Calls before c (still in flight) that hold it back. */
static size_t waiting_for(sg_mcp *m, const sg_mcp_call *c)
{
    size_t n = 0;
    for (sg_mcp_call *o = m->calls; o && o != c; o = o->next)
        n += c->tool->writes || o->tool->writes;
    return n;
}

int sg_mcp_tick(sg_mcp *m, uint64_t now_ns)
{
    int64_t next = -1;
    for (sg_mcp_call *c = m->calls; c; c = c->next) {
        if (!c->progress_token)
            continue;
        if (now_ns >= c->next_progress_ns) {
            double el = (double)(now_ns - c->start_ns) / 1e9;
            char msg[160];
            if (c->running)
                snprintf(msg, sizeof msg, "%s running for %.0f s, %" PRIu64 " bytes of output",
                         c->tool->name, el, c->out.total + c->err.total);
            else
                snprintf(msg, sizeof msg, "%s waiting for %zu earlier call%s to finish (%.0f s)", c->tool->name,
                         waiting_for(m, c), waiting_for(m, c) == 1 ? "" : "s", el);
            /* progress: elapsed seconds, increasing with every notification */
            send_json(m, json_pack("{s:s, s:s, s:{s:O, s:f, s:s}}", "jsonrpc", "2.0",
                "method", "notifications/progress", "params", "progressToken", c->progress_token,
                "progress", el, "message", msg));
            c->next_progress_ns = now_ns + MCP_PROGRESS_INTERVAL_NS;
        }
        int64_t in = (int64_t)((c->next_progress_ns - now_ns + 999999) / 1000000);
        if (next < 0 || in < next)
            next = in;
    }
    return next > INT32_MAX ? INT32_MAX : (int)next;
}

/* ---- dispatch --------------------------------------------------------------- */

static json_t *tools_list(void)
{
    json_t *t = json_array();
    for (size_t i = 0; i < sg_mcp_ntools; i++)
        json_array_append_new(t, sg_mcp_tool_def(&sg_mcp_tools[i]));
    return t;
}

/* Whom this session's operator actions act for: "mcp: " and the client's
 * name, cut at a character's start to fit (wire/ctl.h's "via"). */
static void set_via(sg_mcp *m, const char *name)
{
    m->via[0] = '\0';
    if (!name || !*name)
        return;
    static const char pre[] = "mcp: ";
    size_t len = sg_utf8_cut(name, strlen(name), sizeof m->via - sizeof pre);
    snprintf(m->via, sizeof m->via, "%s%.*s", pre, (int)len, name);
}

const char *sg_mcp_via(const sg_mcp *m)
{
    return m->via[0] ? m->via : NULL;
}

static void do_initialize(sg_mcp *m, const json_t *id, const json_t *params)
{
    const char *want = json_string_value(json_object_get(params, "protocolVersion"));
    if (!want || !json_is_object(json_object_get(params, "capabilities"))) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL,
                   "initialize needs params.protocolVersion (string) and params.capabilities (object)");
        return;
    }
    const char *v = in_list(want, legacy_versions, SG_ARRAY_LEN(legacy_versions)) ? want : SG_MCP_PROTOCOL_LEGACY;
    m->initialized = true;
    json_t *ci = json_object_get(params, "clientInfo");
    set_via(m, json_string_value(json_object_get(ci, "name")));
    mcp_log(m, "initialize: client %.64s %.32s asks %.32s, answering %s",
            json_string_value(json_object_get(ci, "name")) ?: "?",
            json_string_value(json_object_get(ci, "version")) ?: "?", want, v);
    send_result(m, id, json_pack("{s:s, s:{s:{}}, s:o, s:s}", "protocolVersion", v,
        "capabilities", "tools", "serverInfo", server_info(), "instructions", m->instructions), false);
}

static void do_tools_call(sg_mcp *m, const json_t *id, const json_t *params, bool modern)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    if (!name) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "tools/call needs params.name (string)");
        return;
    }
    json_t *args = json_object_get(params, "arguments");
    sg_autojson json_t *empty = json_object();
    if (!args)
        args = empty;
    if (!json_is_object(args)) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "Invalid arguments for tool %.200s: arguments must be an object", name);
        return;
    }
    for (sg_mcp_call *o = m->calls; o; o = o->next) {
        if (json_equal(o->id, (json_t *)id)) {
            send_error(m, id, SG_MCP_INVALID_REQUEST, NULL, "request id is already in use by a call in flight");
            return;
        }
    }
    sg_mcp_call *c = plan_call(m, id, modern, name, args);
    if (!c)
        return;
    json_t *tok = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (json_is_string(tok) || json_is_integer(tok))
        c->progress_token = json_incref(tok);
    c->start_ns = sg_now_mono_ns();
    c->next_progress_ns = c->start_ns + MCP_PROGRESS_INTERVAL_NS;
    /* At the end: the list is the order the calls came in. */
    sg_mcp_call **tail = &m->calls;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    m->ncalls++;
    schedule(m);
}

static void do_cancelled(sg_mcp *m, const json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    if (!rid)
        return;
    for (sg_mcp_call *c = m->calls; c; c = c->next) {
        if (json_equal(c->id, rid)) {
            const char *why = json_string_value(json_object_get(params, "reason"));
            mcp_log(m, "cancelled %s call%s%s%.200s", c->tool->name, c->running ? "" : " (not started)",
                    why ? ": " : "", why ? why : "");
            unlink_call(m, c);
            if (c->running)
                m->io.cancel(m->io.ud, c);
            call_free(c); /* per spec: no answer for a cancelled request */
            schedule(m);
            return;
        }
    }
}

/* Validates the modern _meta of a request. Returns 1 when the request is
 * modern, 0 when it is legacy, -1 after answering an error. */
static int check_era(sg_mcp *m, const json_t *id, const json_t *params)
{
    json_t *meta = json_object_get(params, "_meta");
    json_t *ver = json_object_get(meta, META_VERSION);
    if (!ver)
        return 0;
    const char *v = json_string_value(ver);
    if (!v) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "_meta[\"%s\"] must be a string", META_VERSION);
        return -1;
    }
    if (!in_list(v, modern_versions, SG_ARRAY_LEN(modern_versions))) {
        /* A legacy session's client may name its version: serve it as legacy. */
        if (m->initialized && in_list(v, legacy_versions, SG_ARRAY_LEN(legacy_versions)))
            return 0;
        send_error(m, id, SG_MCP_UNSUPPORTED_VERSION,
                   json_pack("{s:o, s:O}", "supported", version_list(modern_versions, SG_ARRAY_LEN(modern_versions)),
                             "requested", ver),
                   "Unsupported protocol version");
        return -1;
    }
    if (!json_is_object(json_object_get(meta, META_CAPS))) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "_meta[\"%s\"] (object) is required", META_CAPS);
        return -1;
    }
    return 1;
}

static void handle_request(sg_mcp *m, const json_t *id, const char *method, const json_t *params)
{
    if (params && !json_is_object(params)) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "params must be an object");
        return;
    }
    json_t *meta = json_object_get(params, "_meta");
    if (meta && !json_is_object(meta)) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "params._meta must be an object");
        return;
    }
    int era = check_era(m, id, params);
    if (era < 0)
        return;
    bool modern = era == 1;
    if (strcmp(method, "initialize") == 0) {
        if (modern) {
            send_error(m, id, SG_MCP_INVALID_REQUEST, NULL, "initialize is not part of protocol %s", SG_MCP_PROTOCOL_MODERN);
            return;
        }
        do_initialize(m, id, params);
        return;
    }
    if (strcmp(method, "ping") == 0) {
        send_result(m, id, json_object(), modern);
        return;
    }
    if (strcmp(method, "server/discover") == 0) {
        if (!modern) {
            send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "server/discover needs _meta[\"%s\"] and _meta[\"%s\"]",
                       META_VERSION, META_CAPS);
            return;
        }
        send_result(m, id, json_pack("{s:o, s:{s:{}}, s:s, s:i, s:s}",
            "supportedVersions", version_list(modern_versions, SG_ARRAY_LEN(modern_versions)),
            "capabilities", "tools", "instructions", m->instructions,
            "ttlMs", MCP_LIST_TTL_MS, "cacheScope", "private"), true);
        return;
    }
    bool known = strcmp(method, "tools/list") == 0 || strcmp(method, "tools/call") == 0;
    if (!known) {
        send_error(m, id, SG_MCP_METHOD_NOT_FOUND, NULL, "Method not found: %.200s", method);
        return;
    }
    if (!modern && !m->initialized) {
        send_error(m, id, SG_MCP_INVALID_REQUEST, NULL,
                   "not initialized: send initialize first (or use protocol %s with _meta on every request)",
                   SG_MCP_PROTOCOL_MODERN);
        return;
    }
    if (strcmp(method, "tools/list") == 0) {
        if (json_object_get(params, "cursor")) {
            send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "invalid cursor");
            return;
        }
        json_t *r = json_pack("{s:o}", "tools", tools_list());
        if (modern) {
            json_object_set_new(r, "ttlMs", json_integer(MCP_LIST_TTL_MS));
            json_object_set_new(r, "cacheScope", json_string("private"));
        }
        send_result(m, id, r, modern);
        return;
    }
    do_tools_call(m, id, params, modern);
}

void sg_mcp_handle_line(sg_mcp *m, const char *buf, size_t len)
{
    while (len && (buf[len - 1] == '\r' || buf[len - 1] == ' ' || buf[len - 1] == '\t'))
        len--;
    size_t skip = 0;
    while (skip < len && (buf[skip] == ' ' || buf[skip] == '\t'))
        skip++;
    if (skip == len)
        return; /* blank line */
    json_error_t je;
    sg_autojson json_t *msg = json_loadb(buf + skip, len - skip, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!msg) {
        send_error(m, NULL, SG_MCP_PARSE_ERROR, NULL, "Parse error: %s (byte %d)", je.text, je.position);
        return;
    }
    if (json_is_array(msg)) {
        send_error(m, NULL, SG_MCP_INVALID_REQUEST, NULL, "Invalid Request: JSON-RPC batches are not supported by MCP");
        return;
    }
    if (!json_is_object(msg)) {
        send_error(m, NULL, SG_MCP_INVALID_REQUEST, NULL, "Invalid Request: a message is a JSON object");
        return;
    }
    json_t *id = json_object_get(msg, "id");
    bool id_ok = json_is_string(id) || json_is_integer(id);
    const char *ver = json_string_value(json_object_get(msg, "jsonrpc"));
    json_t *jm = json_object_get(msg, "method");
    if (!jm && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
        /* A response: we never send requests, so there is nothing to match. */
        mcp_log(m, "ignored a response from the client");
        return;
    }
    if (id && !id_ok) {
        send_error(m, NULL, SG_MCP_INVALID_REQUEST, NULL, "Invalid Request: id must be a string or an integer");
        return;
    }
    if (!ver || strcmp(ver, "2.0") != 0) {
        if (id)
            send_error(m, id, SG_MCP_INVALID_REQUEST, NULL, "Invalid Request: jsonrpc must be \"2.0\"");
        return;
    }
    const char *method = json_string_value(jm);
    if (!method) {
        if (id)
            send_error(m, id, SG_MCP_INVALID_REQUEST, NULL, "Invalid Request: method must be a string");
        return;
    }
    json_t *params = json_object_get(msg, "params");
    if (!id) {
        /* Notifications get no answer, whatever they are. */
        if (strcmp(method, "notifications/cancelled") == 0 && json_is_object(params))
            do_cancelled(m, params);
        else if (strcmp(method, "notifications/initialized") != 0)
            mcp_log(m, "ignored notification %.100s", method);
        return;
    }
    handle_request(m, id, method, params);
}

void sg_mcp_oversized(sg_mcp *m, uint64_t len)
{
    send_error(m, NULL, SG_MCP_INVALID_REQUEST, json_pack("{s:I, s:I}", "size", (json_int_t)len, "max", (json_int_t)SG_MCP_MSG_MAX),
               "Invalid Request: message too large (%" PRIu64 " bytes or more; at most %u)", len, SG_MCP_MSG_MAX);
}

/* ---- lifetime --------------------------------------------------------------- */

sg_mcp *sg_mcp_new(const sg_mcp_io *io, const char *workspace)
{
    sg_mcp *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->io = *io;
    m->workspace = strdup(workspace ? workspace : "/workspace");
    sg_autobuf sg_buf in = {0};
    int r = sg_buf_puts(&in, "Tools run inside an isolated Linux sandbox; its workspace is /workspace "
        "(relative paths are resolved there). Every call is recorded, and the workspace is "
        "checkpointed before each call that may write: use `checkpoint` to mark a state and "
        "`rollback` to restore one. Calls that may write (");
    r |= sg_mcp_tool_names(&in, 1);
    r |= sg_buf_puts(&in, ") run one at a time, in the order they were sent; the others (");
    r |= sg_mcp_tool_names(&in, 0);
    r |= sg_buf_puts(&in, ") run alongside each other once the writes sent before them have ended.");
    m->instructions = r < 0 ? NULL : sg_buf_steal(&in, NULL);
    if (!m->workspace || !m->instructions) {
        free(m->workspace);
        free(m->instructions);
        free(m);
        return NULL;
    }
    return m;
}

void sg_mcp_free(sg_mcp *m)
{
    if (!m)
        return;
    while (m->calls) {
        sg_mcp_call *c = m->calls;
        m->calls = c->next;
        if (c->running)
            m->io.cancel(m->io.ud, c);
        call_free(c);
    }
    free(m->workspace);
    free(m->instructions);
    free(m);
}

sg_mcp_call *sg_mcp_calls(sg_mcp *m)
{
    return m->calls;
}

size_t sg_mcp_ncalls(const sg_mcp *m)
{
    return m->ncalls;
}

bool sg_mcp_initialized(const sg_mcp *m)
{
    return m->initialized;
}

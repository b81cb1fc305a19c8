/* libFuzzer target: the MCP message parser and dispatcher on arbitrary
 * bytes, split into lines as stdin would be. Tool calls that start are
 * completed (with the input's tail as their output), some cancelled, and
 * progress ticked, so the result formatting is fuzzed too.
 *
 * Invariants (mcp.h, JSON-RPC 2.0):
 *  - every message is one line of JSON: a response (an "id", and exactly
 *    one of "result" / "error", an error with an integer code and a string
 *    message) or a notification (a string "method", no "id");
 *  - one answer per request: a line that is an object with a string or
 *    integer "id" (and is not a client's response) gets exactly one
 *    response with that id, at once or, when its tool call started, when
 *    the call is done; a notification (no "id") and a client's response
 *    get none; a line that is not JSON, not an object, or whose id is of
 *    another type gets exactly one error with id null; a cancelled call is
 *    never answered, and sg_mcp_free answers nothing;
 *  - a request naming the modern protocol is answered in the modern shape
 *    (result.resultType, result._meta serverInfo), at once or when done; one
 *    naming a version that is neither modern nor a legacy one gets -32022;
 *  - the calls in flight are those started and not yet done or cancelled,
 *    and those waiting their turn, with distinct ids; a cancellation
 *    removes its call; the calls running keep the order (mcp.h): one that
 *    may write runs alone with nothing before it, one that reads has no
 *    write before it; a call that waits is answered when it has run;
 *  - every planned request is one the supervisor's own parser accepts
 *    (sg_exec_req_parse for "exec"), runs in /workspace, and every planned
 *    path is /workspace or under /workspace/, normalised (no ".", "..",
 *    "//" or trailing "/") and passed on as the command's argument;
 *  - sg_mcp_resolve_path never leaves the workspace, its result is
 *    normalised and resolves to itself;
 *  - edit_file's dialogue (tools.c's edit_reply), given a file as its
 *    script sends it (length, newline, bytes), answers once: "4\n" when
 *    old_string is not in it, "5\n" when it is there more than once
 *    without replace_all, else "w\n" and the file with every occurrence,
 *    left to right and not overlapping, replaced (a byte-by-byte scan
 *    here agrees). */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/json.h"
#include "mcp/mcp.h"
#include "mcp/tools.h"
#include "wire/ctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WS "/workspace"
#define MAX_STARTED 8

typedef struct fz {
    sg_mcp_call *started[MAX_STARTED];
    size_t nstarted;
    json_t *answers;      /* responses sent since the last reset */
    size_t notifications; /* notifications sent since the last reset */
    size_t starts;        /* calls started since the last reset */
    sg_mcp_call *last_started;
} fz;

static void fz_reset(fz *f)
{
    json_array_clear(f->answers);
    f->notifications = 0;
    f->starts = 0;
    f->last_started = NULL;
}

static void fz_send(void *ud, const char *msg, size_t len)
{
    fz *f = ud;
    if (memchr(msg, '\n', len))
        abort(); /* a message must be one line */
    sg_err err;
    json_t *j = sg_json_parse(msg, len, &err);
    if (!j || !json_is_object(j) || !json_is_string(json_object_get(j, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(j, "jsonrpc")), "2.0") != 0)
        abort();
    json_t *id = json_object_get(j, "id");
    json_t *res = json_object_get(j, "result"), *e = json_object_get(j, "error");
    if (id) {
        if (!json_is_string(id) && !json_is_integer(id) && !json_is_null(id))
            abort();
        if (!res == !e || json_object_get(j, "method"))
            abort(); /* exactly one of result and error */
        if (e && (!json_is_integer(json_object_get(e, "code")) ||
                  !json_is_string(json_object_get(e, "message"))))
            abort();
        if (res && !json_is_object(res))
            abort();
        json_array_append(f->answers, j);
    } else {
        if (!json_is_string(json_object_get(j, "method")) || res || e)
            abort();
        json_t *tok = json_object_get(json_object_get(j, "params"), "progressToken");
        if (!json_is_string(tok) && !json_is_integer(tok))
            abort();
        f->notifications++;
    }
    json_decref(j);
}

static bool path_ok(const char *p)
{
    if (strcmp(p, WS) != 0 && strncmp(p, WS "/", sizeof WS) != 0)
        return false;
    size_t n = strlen(p);
    if (p[n - 1] == '/' || strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../"))
        return false;
    if (n >= 2 && strcmp(p + n - 2, "/.") == 0)
        return false;
    if (n >= 3 && strcmp(p + n - 3, "/..") == 0)
        return false;
    return true;
}

static int fz_start(void *ud, sg_mcp_call *c, sg_err *err)
{
    fz *f = ud;
    if (!c->req || (!json_is_string(c->id) && !json_is_integer(c->id)))
        abort();
    for (size_t i = 0; i < f->nstarted; i++)
        if (json_equal(f->started[i]->id, c->id))
            abort(); /* two calls in flight with one id */
    const char *op = json_string_value(json_object_get(c->req, "op"));
    if (!op)
        abort();
    /* What the supervisor will parse (sg_ctl_parse_req after the dump). */
    char *dump = sg_json_dump(c->req);
    const char *op2 = NULL;
    json_t *again = dump ? sg_ctl_parse_req(dump, strlen(dump), &op2, err) : NULL;
    if (!again || strcmp(op, op2) != 0)
        abort();
    free(dump);
    const char *tool = c->tool->name;
    bool file_tool = strcmp(tool, "write_file") == 0 || strcmp(tool, "edit_file") == 0 ||
                     strcmp(tool, "read_file") == 0;
    if (file_tool != (c->path != NULL))
        abort();
    if (c->path && !path_ok(c->path))
        abort();
    if (strcmp(op, "exec") == 0) {
        sg_exec_req r;
        if (sg_exec_req_parse(again, &r, err) < 0)
            abort(); /* we planned a request the supervisor refuses */
        if (!r.cwd || strcmp(r.cwd, WS) != 0 || !r.tool_name)
            abort();
        if (c->path) {
            bool found = false;
            for (char **a = r.argv; *a; a++)
                found |= strcmp(*a, c->path) == 0;
            if (!found)
                abort();
        }
        sg_exec_req_free(&r);
    } else if (strcmp(op, "checkpoint") != 0 && strcmp(op, "rollback") != 0) {
        abort();
    } else if (strcmp(tool, op) != 0) {
        abort();
    }
    json_decref(again);
    if (f->nstarted == MAX_STARTED)
        return sg_err_set(err, EBUSY, "busy");
    f->started[f->nstarted++] = c;
    f->starts++;
    f->last_started = c;
    return 0;
}

static void fz_cancel(void *ud, sg_mcp_call *c)
{
    fz *f = ud;
    for (size_t i = 0; i < f->nstarted; i++) {
        if (f->started[i] == c) {
            f->nstarted--;
            f->started[i] = f->started[f->nstarted];
            return;
        }
    }
    abort(); /* cancelled a call that was not started, or twice */
}

static const char *const legacy[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

/* The modern shape of a result. */
static bool modern_shape(const json_t *answer)
{
    json_t *res = json_object_get(answer, "result");
    return !res || (json_is_string(json_object_get(res, "resultType")) &&
                    json_is_object(json_object_get(json_object_get(res, "_meta"),
                                                   "io.modelcontextprotocol/serverInfo")));
}

/* The answers from index from on are failed starts (a call whose turn
 * came and whose transport refused it): tool results with isError. */
static bool only_failed_starts(const fz *f, size_t from)
{
    for (size_t i = from; i < json_array_size(f->answers); i++) {
        json_t *res = json_object_get(json_array_get(f->answers, i), "result");
        if (!json_is_true(json_object_get(res, "isError")))
            return false;
    }
    return true;
}

static sg_mcp_call *call_of(sg_mcp *m, const json_t *id)
{
    for (sg_mcp_call *c = sg_mcp_calls(m); c; c = c->next)
        if (json_equal(c->id, (json_t *)id))
            return c;
    return NULL;
}

/* The calls running are exactly the started ones, and keep the order. */
static void check_calls(sg_mcp *m, const fz *f)
{
    size_t running = 0, n = 0;
    bool any_before = false, writer_before = false;
    for (sg_mcp_call *c = sg_mcp_calls(m); c; c = c->next, n++) {
        bool mine = false;
        for (size_t i = 0; i < f->nstarted; i++)
            mine |= f->started[i] == c;
        if (mine != c->running)
            abort();
        if (c->running) {
            running++;
            if (c->tool->writes ? any_before : writer_before)
                abort(); /* ran out of turn */
        }
        for (sg_mcp_call *o = c->next; o; o = o->next)
            if (json_equal(o->id, c->id))
                abort(); /* two calls in flight with one id */
        any_before = true;
        writer_before |= c->tool->writes;
    }
    if (running != f->nstarted || n != sg_mcp_ncalls(m))
        abort();
}

/* Checks what one line got, from the line alone (see the invariants). */
static void check_line(sg_mcp *m, fz *f, const char *p, size_t n)
{
    size_t nans = json_array_size(f->answers);
    if (f->notifications)
        abort(); /* only the tick sends notifications */
    while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    while (n && (*p == ' ' || *p == '\t'))
        p++, n--;
    if (!n) {
        if (nans || f->starts)
            abort();
        return;
    }
    json_t *msg = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
    json_t *id = json_object_get(msg, "id");
    bool response = msg && !json_object_get(msg, "method") &&
                    (json_object_get(msg, "result") || json_object_get(msg, "error"));
    if (!json_is_object(msg) || (id && !json_is_string(id) && !json_is_integer(id) && !response)) {
        /* one error, id null */
        if (nans != 1 || f->starts ||
            !json_is_null(json_object_get(json_array_get(f->answers, 0), "id")) ||
            !json_object_get(json_array_get(f->answers, 0), "error"))
            abort();
    } else if (!id || response) {
        /* A cancellation takes its call out of flight, and may let calls
         * that waited for it start (a failed start is answered). */
        json_t *params = json_object_get(msg, "params");
        json_t *rid = json_object_get(params, "requestId");
        const char *method = json_string_value(json_object_get(msg, "method"));
        bool cancel = rid && method && strcmp(method, "notifications/cancelled") == 0 &&
                      json_is_object(params) && json_is_string(json_object_get(msg, "jsonrpc")) &&
                      strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") == 0;
        if ((!cancel && (nans || f->starts)) || !only_failed_starts(f, 0))
            abort();
        if (cancel && call_of(m, rid))
            abort();
    } else if (f->starts || (!nans && call_of(m, id))) {
        /* Started, or waiting its turn: answered when done. */
        sg_mcp_call *c = call_of(m, id);
        if (f->starts > 1 || nans || !c || (f->starts && (f->last_started != c || !c->running)))
            abort();
        const char *ver = json_string_value(json_object_get(json_object_get(json_object_get(msg, "params"), "_meta"),
                                                            "io.modelcontextprotocol/protocolVersion"));
        if (c->modern != (ver && strcmp(ver, SG_MCP_PROTOCOL_MODERN) == 0))
            abort();
    } else {
        json_t *a = json_array_get(f->answers, 0);
        if (nans != 1 || !json_equal(json_object_get(a, "id"), id))
            abort();
        /* The era the request asked for. */
        json_t *params = json_object_get(msg, "params");
        json_t *meta = json_object_get(params, "_meta");
        const char *ver = json_string_value(json_object_get(meta, "io.modelcontextprotocol/protocolVersion"));
        const char *rpc = json_string_value(json_object_get(msg, "jsonrpc"));
        if (ver && rpc && strcmp(rpc, "2.0") == 0 && json_is_string(json_object_get(msg, "method")) &&
            json_is_object(params) && json_is_object(meta)) {
            bool known = strcmp(ver, SG_MCP_PROTOCOL_MODERN) == 0;
            for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
                known |= strcmp(ver, legacy[i]) == 0;
            json_t *code = json_object_get(json_object_get(a, "error"), "code");
            if (!known && json_integer_value(code) != SG_MCP_UNSUPPORTED_VERSION)
                abort();
            if (strcmp(ver, SG_MCP_PROTOCOL_MODERN) == 0 && !modern_shape(a))
                abort();
        }
    }
    json_decref(msg);
    check_calls(m, f);
}

/* The resolver alone: never outside, normalised, a fixed point. */
static void check_resolve(const uint8_t *data, size_t size)
{
    char *path = strndup((const char *)data, size); /* stops at a NUL, as a C string would */
    if (!path)
        return;
    sg_err e2;
    char *r = sg_mcp_resolve_path(WS, path, &e2);
    if (r) {
        if (!path_ok(r))
            abort();
        char *r2 = sg_mcp_resolve_path(WS, r, &e2);
        if (!r2 || strcmp(r, r2) != 0)
            abort();
        free(r2);
    }
    free(r);
    free(path);
}

/* The file as the script sends it: its length, a newline, its bytes
 * (the input); the answer checked against a byte-by-byte scan. */
static void check_edit(sg_mcp_call *c, const uint8_t *data, size_t size)
{
    if (!c->tool->reply || c->replied || !c->edit_old)
        return;
    char hdr[32];
    int h = snprintf(hdr, sizeof hdr, "%zu\n", size);
    if (sg_mcp_call_output(c, false, hdr, (size_t)h) != 0 || size > c->out.cap - (size_t)h)
        return; /* not whole yet; or a file larger than the script sends */
    if (sg_mcp_call_output(c, false, (const char *)data, size) != 1 || !c->replied)
        abort(); /* the whole file: answered once */
    sg_buf want = {0};
    size_t count = 0;
    for (size_t i = 0; i < size;) {
        if (i + c->edit_old <= size && memcmp(data + i, c->edit, c->edit_old) == 0) {
            sg_buf_append(&want, c->edit + c->edit_old, c->edit_new);
            i += c->edit_old;
            count++;
        } else {
            sg_buf_append(&want, data + i++, 1);
        }
    }
    const char *verdict = count == 0 ? "4\n" : count > 1 && !c->edit_all ? "5\n" : NULL;
    if (verdict ? c->reply.len != 2 || memcmp(c->reply.data, verdict, 2) != 0
                : c->reply.len != want.len + 2 || memcmp(c->reply.data, "w\n", 2) != 0 ||
                      (want.len && memcmp(c->reply.data + 2, want.data, want.len) != 0))
        abort();
    if (count != c->edit_count)
        abort();
    sg_buf_free(&want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {.answers = json_array()};
    sg_mcp_io io = {.send = fz_send, .start = fz_start, .cancel = fz_cancel, .ud = &f};
    sg_mcp *m = sg_mcp_new(&io, WS);
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fz_reset(&f);
        sg_mcp_handle_line(m, p, n);
        check_line(m, &f, p, n);
        p += n + (nl ? 1 : 0);
    }
    fz_reset(&f);
    sg_mcp_tick(m, UINT64_MAX / 2);
    size_t want_progress = 0;
    for (sg_mcp_call *c = sg_mcp_calls(m); c; c = c->next)
        want_progress += c->progress_token != NULL;
    if (json_array_size(f.answers) || f.notifications != want_progress)
        abort(); /* one progress notification per call that asked for them */
    /* Complete all but one of the calls with a result built from the input:
     * each gets exactly one answer, with its id, in its era's shape. */
    sg_err err;
    json_t *res = sg_json_parse((const char *)data, size, &err);
    while (f.nstarted > 1) {
        sg_mcp_call *c = f.started[--f.nstarted];
        json_t *id = json_incref(c->id);
        bool modern = c->modern;
        fz_reset(&f);
        check_edit(c, data, size);
        sg_mcp_call_output(c, f.nstarted & 1, (const char *)data, size);
        if (f.nstarted & 2)
            sg_mcp_call_done(m, c, NULL, "fuzz error");
        else
            sg_mcp_call_done(m, c, json_is_object(res) ? res : NULL, NULL);
        /* Its answer first; then those whose turn came and failed to start. */
        json_t *a = json_array_get(f.answers, 0);
        if (json_array_size(f.answers) < 1 || !only_failed_starts(&f, 1) || f.notifications ||
            !json_equal(json_object_get(a, "id"), id) ||
            !json_is_array(json_object_get(json_object_get(a, "result"), "content")) ||
            (modern && !modern_shape(a)))
            abort();
        check_calls(m, &f);
        json_decref(id);
    }
    json_decref(res);
    fz_reset(&f);
    sg_mcp_free(m); /* cancels what is left, answering nothing */
    if (f.nstarted || json_array_size(f.answers) || f.notifications)
        abort();
    json_decref(f.answers);
    check_resolve(data, size);
    return 0;
}

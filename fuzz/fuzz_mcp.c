/* libFuzzer target: the MCP message parser and dispatcher on arbitrary
 * bytes, split into lines as stdin would be. Every request must get
 * exactly one answer that is a single line of valid JSON-RPC; tool calls
 * that start are completed (with the input's tail as their output), some
 * cancelled, and progress ticked, so the result formatting is fuzzed too. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fz {
    sg_mcp_call *started[8];
    size_t nstarted;
} fz;

static void fz_send(void *ud, const char *msg, size_t len)
{
    (void)ud;
    if (memchr(msg, '\n', len))
        abort(); /* a message must be one line */
    sg_err err;
    json_t *j = sg_json_parse(msg, len, &err);
    if (!j || !json_is_object(j) || !json_is_string(json_object_get(j, "jsonrpc")))
        abort();
    json_t *e = json_object_get(j, "error");
    if (e && (!json_is_integer(json_object_get(e, "code")) || !json_is_string(json_object_get(e, "message"))))
        abort();
    json_decref(j);
}

static int fz_start(void *ud, sg_mcp_call *c, sg_err *err)
{
    fz *f = ud;
    if (!c->req || !json_is_string(json_object_get(c->req, "op")))
        abort();
    if (f->nstarted == sizeof f->started / sizeof f->started[0])
        return sg_err_set(err, EBUSY, "busy");
    f->started[f->nstarted++] = c;
    return 0;
}

static void fz_cancel(void *ud, sg_mcp_call *c)
{
    fz *f = ud;
    for (size_t i = 0; i < f->nstarted; i++)
        if (f->started[i] == c)
            f->started[i] = f->started[--f->nstarted];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {0};
    sg_mcp_io io = {.send = fz_send, .start = fz_start, .cancel = fz_cancel, .ud = &f};
    sg_mcp *m = sg_mcp_new(&io, "/workspace");
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        sg_mcp_handle_line(m, p, n);
        p += n + (nl ? 1 : 0);
    }
    sg_mcp_tick(m, UINT64_MAX / 2);
    /* Complete half of the calls with a result built from the input. */
    sg_err err;
    json_t *res = sg_json_parse((const char *)data, size, &err);
    while (f.nstarted > 1) {
        sg_mcp_call *c = f.started[--f.nstarted];
        sg_mcp_call_output(c, f.nstarted & 1, (const char *)data, size);
        if (f.nstarted & 2)
            sg_mcp_call_done(m, c, NULL, "fuzz error");
        else
            sg_mcp_call_done(m, c, json_is_object(res) ? res : NULL, NULL);
    }
    json_decref(res);
    sg_mcp_free(m); /* cancels what is left */
    char *path = strndup((const char *)data, size); /* stops at a NUL, as a C string would */
    if (path) {
        sg_err e2;
        char *r = sg_mcp_resolve_path("/workspace", path, &e2);
        if (r && strncmp(r, "/workspace", 10) != 0)
            abort(); /* never outside */
        free(r);
        free(path);
    }
    return 0;
}

/* mcp: the JSON-RPC parsing and dispatch, without a sandbox. The scripts
 * the file tools run inside a sandbox are run here for real, with /bin/sh
 * and coreutils (no interpreter) in a temporary directory standing in for
 * /workspace. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "mcp/mcp.h"
#include "mcp/tools.h"

#define MAX_OUT 64

typedef struct fixture {
    char *out[MAX_OUT];
    size_t nout;
    sg_mcp_call *started[MAX_OUT];
    size_t nstarted;
    sg_mcp_call *cancelled[MAX_OUT];
    size_t ncancelled;
    int fail_start;
    char ws[64];
    sg_mcp *m;
} fixture;

static void io_send(void *ud, const char *msg, size_t len)
{
    fixture *f = ud;
    assert_true(f->nout < MAX_OUT);
    assert_null(memchr(msg, '\n', len)); /* one message, one line */
    f->out[f->nout++] = strndup(msg, len);
}

static int io_start(void *ud, sg_mcp_call *c, sg_err *err)
{
    fixture *f = ud;
    if (f->fail_start)
        return sg_err_set(err, ECONNREFUSED, "no supervisor");
    f->started[f->nstarted++] = c;
    return 0;
}

static void io_cancel(void *ud, sg_mcp_call *c)
{
    fixture *f = ud;
    f->cancelled[f->ncancelled++] = c;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->ws, sizeof f->ws, "/tmp/sg-mcp-test-XXXXXX");
    assert_non_null(mkdtemp(f->ws));
    sg_mcp_io io = {.send = io_send, .start = io_start, .cancel = io_cancel, .ud = f};
    f->m = sg_mcp_new(&io, f->ws);
    assert_non_null(f->m);
    *state = f;
    return 0;
}

static void clear_out(fixture *f)
{
    for (size_t i = 0; i < f->nout; i++)
        free(f->out[i]);
    f->nout = 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sg_mcp_free(f->m);
    clear_out(f);
    sg_rm_rf(f->ws, NULL);
    free(f);
    return 0;
}

static void feed(fixture *f, const char *line)
{
    sg_mcp_handle_line(f->m, line, strlen(line));
}

/* The single answer to the last line, parsed; the caller decrefs. */
static json_t *answer(fixture *f)
{
    assert_int_equal(f->nout, 1);
    sg_err err = {0};
    json_t *j = sg_json_parse(f->out[0], strlen(f->out[0]), &err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "jsonrpc")), "2.0");
    clear_out(f);
    return j;
}

static int error_code(json_t *j)
{
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    assert_true(json_is_string(json_object_get(e, "message")));
    return (int)json_integer_value(json_object_get(e, "code"));
}

static const char *result_text(json_t *j)
{
    json_t *r = json_object_get(j, "result");
    return json_string_value(json_object_get(json_array_get(json_object_get(r, "content"), 0), "text"));
}

#define INIT "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\",\"capabilities\":{}}}"
#define MODERN_META "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}"

static void initialize(fixture *f)
{
    char buf[256];
    snprintf(buf, sizeof buf, INIT, "2025-11-25");
    feed(f, buf);
    json_decref(answer(f));
    feed(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    assert_int_equal(f->nout, 0);
}

static void test_resolve_path(void **state)
{
    (void)state;
    sg_err err = {0};
    struct { const char *in, *out; } ok[] = {
        {"a.txt", "/workspace/a.txt"}, {"/workspace/a/b", "/workspace/a/b"},
        {"./a//b/../c", "/workspace/a/c"}, {"/workspace", "/workspace"}, {".", "/workspace"},
        {"a/../../workspace/x", "/workspace/x"}, {"-rf", "/workspace/-rf"},
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(ok); i++) {
        sg_autofree char *p = sg_mcp_resolve_path("/workspace", ok[i].in, &err);
        assert_non_null(p);
        assert_string_equal(p, ok[i].out);
    }
    const char *bad[] = {"", "..", "../etc/passwd", "/etc/passwd", "/workspacex/a", "/", "a/../../../x"};
    for (size_t i = 0; i < SG_ARRAY_LEN(bad); i++) {
        assert_null(sg_mcp_resolve_path("/workspace", bad[i], &err));
    }
    assert_non_null(strstr(err.msg, "outside the workspace"));
}

static void test_initialize_negotiation(void **state)
{
    fixture *f = *state;
    char buf[256];
    /* before initialize: refused, but ping works */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}");
    json_t *j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_REQUEST);
    assert_int_equal(json_integer_value(json_object_get(j, "id")), 5);
    json_decref(j);
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}");
    j = answer(f);
    assert_true(json_is_object(json_object_get(j, "result")));
    assert_string_equal(json_string_value(json_object_get(j, "id")), "p");
    json_decref(j);
    assert_false(sg_mcp_initialized(f->m));

    const char *cases[][2] = {{"2025-11-25", "2025-11-25"}, {"2025-03-26", "2025-03-26"},
                              {"2024-11-05", "2024-11-05"}, {"2031-01-01", "2025-11-25"}};
    for (size_t i = 0; i < SG_ARRAY_LEN(cases); i++) {
        snprintf(buf, sizeof buf, INIT, cases[i][0]);
        feed(f, buf);
        j = answer(f);
        json_t *r = json_object_get(j, "result");
        assert_string_equal(json_string_value(json_object_get(r, "protocolVersion")), cases[i][1]);
        assert_true(json_is_object(json_object_get(json_object_get(r, "capabilities"), "tools")));
        assert_string_equal(json_string_value(json_object_get(json_object_get(r, "serverInfo"), "name")), "sandglass");
        assert_null(json_object_get(r, "resultType"));
        json_decref(j);
    }
    assert_true(sg_mcp_initialized(f->m));
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"capabilities\":{}}}");
    j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_PARAMS);
    json_decref(j);
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
    j = answer(f);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "result"), "tools")), 6);
    json_decref(j);
}

static void test_modern(void **state)
{
    fixture *f = *state;
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":\"d\",\"method\":\"server/discover\",\"params\":{" MODERN_META "}}");
    json_t *j = answer(f);
    json_t *r = json_object_get(j, "result");
    assert_string_equal(json_string_value(json_object_get(r, "resultType")), "complete");
    assert_string_equal(json_string_value(json_array_get(json_object_get(r, "supportedVersions"), 0)), "2026-07-28");
    assert_true(json_is_object(json_object_get(json_object_get(r, "capabilities"), "tools")));
    assert_true(json_is_integer(json_object_get(r, "ttlMs")));
    assert_non_null(json_object_get(json_object_get(r, "_meta"), "io.modelcontextprotocol/serverInfo"));
    json_decref(j);
    /* stateless: tools/list without initialize */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}");
    j = answer(f);
    r = json_object_get(j, "result");
    assert_int_equal(json_array_size(json_object_get(r, "tools")), 6);
    assert_string_equal(json_string_value(json_object_get(r, "cacheScope")), "private");
    assert_string_equal(json_string_value(json_object_get(r, "resultType")), "complete");
    json_decref(j);
    assert_false(sg_mcp_initialized(f->m));
    /* unsupported version */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
            "\"io.modelcontextprotocol/protocolVersion\":\"2099-01-01\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}");
    j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_UNSUPPORTED_VERSION);
    json_t *d = json_object_get(json_object_get(j, "error"), "data");
    assert_string_equal(json_string_value(json_object_get(d, "requested")), "2099-01-01");
    assert_string_equal(json_string_value(json_array_get(json_object_get(d, "supported"), 0)), "2026-07-28");
    json_decref(j);
    /* missing capabilities, non-string version */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
            "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}");
    j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_PARAMS);
    json_decref(j);
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
            "\"io.modelcontextprotocol/protocolVersion\":7}}}");
    j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_PARAMS);
    json_decref(j);
    /* server/discover without _meta is not a modern request */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"server/discover\"}");
    j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_PARAMS);
    json_decref(j);
}

static void test_bad_messages(void **state)
{
    fixture *f = *state;
    struct { const char *line; int code; bool null_id; } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,", SG_MCP_PARSE_ERROR, true},
        {"not json", SG_MCP_PARSE_ERROR, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"method\":\"x\"}", SG_MCP_PARSE_ERROR, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\\u0000\"}", SG_MCP_PARSE_ERROR, true},
        {"[1,2]", SG_MCP_INVALID_REQUEST, true},
        {"42", SG_MCP_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", SG_MCP_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", SG_MCP_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", SG_MCP_INVALID_REQUEST, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", SG_MCP_INVALID_REQUEST, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"nope\"}", SG_MCP_METHOD_NOT_FOUND, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[]}", SG_MCP_INVALID_PARAMS, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"_meta\":3}}", SG_MCP_INVALID_PARAMS, false},
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(cases); i++) {
        feed(f, cases[i].line);
        json_t *j = answer(f);
        assert_int_equal(error_code(j), cases[i].code);
        assert_true(cases[i].null_id ? json_is_null(json_object_get(j, "id")) : json_is_integer(json_object_get(j, "id")));
        json_decref(j);
    }
    /* no answer: notifications (known or not), responses, blank lines */
    feed(f, "{\"jsonrpc\":\"2.0\",\"method\":\"nope\"}");
    feed(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":99}}");
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
    feed(f, "   \r");
    feed(f, "");
    assert_int_equal(f->nout, 0);
    sg_mcp_oversized(f->m, (uint64_t)SG_MCP_MSG_MAX + 1);
    json_t *j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_REQUEST);
    assert_true(json_is_null(json_object_get(j, "id")));
    json_decref(j);
    /* still serving */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\r");
    j = answer(f);
    assert_non_null(json_object_get(j, "result"));
    json_decref(j);
}

static void test_tools_call_errors(void **state)
{
    fixture *f = *state;
    initialize(f);
    const char *proto[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"rm_rf\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\",\"arguments\":[]}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\",\"arguments\":{}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\",\"arguments\":{\"command\":1}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\",\"offset\":\"1\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"edit_file\",\"arguments\":{\"path\":\"a\",\"old_string\":\"x\",\"new_string\":\"y\",\"replace_all\":1}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"checkpoint\",\"arguments\":{\"x\":1}}}",
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(proto); i++) {
        feed(f, proto[i]);
        json_t *j = answer(f);
        assert_int_equal(error_code(j), SG_MCP_INVALID_PARAMS);
        json_decref(j);
    }
    /* tool-level failures: a result with isError */
    const char *tool[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"write_file\",\"arguments\":{\"path\":\"../x\",\"content\":\"\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"edit_file\",\"arguments\":{\"path\":\"a\",\"old_string\":\"\",\"new_string\":\"y\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"edit_file\",\"arguments\":{\"path\":\"a\",\"old_string\":\"y\",\"new_string\":\"y\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\",\"limit\":0}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\",\"arguments\":{\"command\":\"x\",\"timeout\":-1}}}",
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(tool); i++) {
        feed(f, tool[i]);
        json_t *j = answer(f);
        assert_true(json_is_true(json_object_get(json_object_get(j, "result"), "isError")));
        json_decref(j);
    }
    assert_int_equal(f->nstarted, 0);
    /* the transport cannot start it: answered as a failed call */
    f->fail_start = 1;
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\",\"arguments\":{\"command\":\"true\"}}}");
    json_t *j = answer(f);
    assert_true(json_is_true(json_object_get(json_object_get(j, "result"), "isError")));
    assert_non_null(strstr(result_text(j), "no supervisor"));
    json_decref(j);
    assert_int_equal(sg_mcp_ncalls(f->m), 0);
}

/* The exit status as the supervisor's result, to the core. */
static void run_done(fixture *f, sg_mcp_call *c, int st)
{
    json_t *res = json_pack("{s:i, s:n, s:b}", "exit_code", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
                            "signal", "timed_out", 0);
    f->nstarted = 0;
    sg_mcp_call_done(f->m, c, res, NULL);
    json_decref(res);
}

/* A tool with a dialogue (edit_file): stdout fed as it comes, the core's
 * answer written on stdin when it has one, as cmd_mcp.c does. */
static void run_dialogue(fixture *f, sg_mcp_call *c, char **argv)
{
    int in[2], out[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    int err = memfd_create("err", 0);
    pid_t pid = sgt_fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err, 2);
        close(in[1]);
        close(out[0]);
        if (chdir(json_string_value(json_object_get(c->req, "cwd"))) < 0)
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    free(argv);
    close(in[0]);
    close(out[1]);
    char buf[8192];
    ssize_t r;
    while ((r = read(out[0], buf, sizeof buf)) > 0) {
        int rc = sg_mcp_call_output(c, false, buf, (size_t)r);
        assert_true(rc >= 0);
        if (rc == 1 && in[1] >= 0) {
            assert_int_equal(sg_write_all(in[1], c->reply.data, c->reply.len), 0);
            close(in[1]);
            in[1] = -1;
        }
    }
    if (in[1] >= 0)
        close(in[1]);
    close(out[0]);
    int st;
    waitpid(pid, &st, 0);
    lseek(err, 0, SEEK_SET);
    while ((r = read(err, buf, sizeof buf)) > 0)
        sg_mcp_call_output(c, true, buf, (size_t)r);
    close(err);
    run_done(f, c, st);
}

/* Runs a planned exec locally: argv from the request, stdin from the call's
 * input, in the fixture's directory; feeds the output and the exit status
 * back as the supervisor would. */
static void run_locally(fixture *f, sg_mcp_call *c)
{
    json_t *req = c->req;
    assert_string_equal(json_string_value(json_object_get(req, "op")), "exec");
    json_t *tool = json_object_get(req, "tool");
    assert_true(json_is_string(json_object_get(tool, "name")));
    assert_true(json_is_object(json_object_get(tool, "arguments")));
    sg_autofree char *body = sg_json_dump(req);
    assert_true(strlen(body) < SG_CTL_MSG_MAX); /* fits one control message */
    json_t *av = json_object_get(req, "argv");
    size_t n = json_array_size(av);
    char **argv = calloc(n + 1, sizeof *argv);
    for (size_t i = 0; i < n; i++)
        argv[i] = (char *)json_string_value(json_array_get(av, i));
    if (c->tool->reply) {
        run_dialogue(f, c, argv);
        return;
    }
    int in = memfd_create("in", 0), out = memfd_create("out", 0), err = memfd_create("err", 0);
    if (c->input)
        assert_int_equal(sg_write_all(in, c->input, c->input_len), 0);
    lseek(in, 0, SEEK_SET);
    pid_t pid = sgt_fork();
    if (pid == 0) {
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        if (chdir(json_string_value(json_object_get(req, "cwd"))) < 0)
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    free(argv);
    char buf[8192];
    ssize_t r;
    lseek(out, 0, SEEK_SET);
    while ((r = read(out, buf, sizeof buf)) > 0)
        sg_mcp_call_output(c, false, buf, (size_t)r);
    lseek(err, 0, SEEK_SET);
    while ((r = read(err, buf, sizeof buf)) > 0)
        sg_mcp_call_output(c, true, buf, (size_t)r);
    close(in);
    close(out);
    close(err);
    run_done(f, c, st);
}

/* One tools/call through dispatch and a local run; returns the answer. */
static json_t *tool_call(fixture *f, const char *name, json_t *args)
{
    json_t *msg = json_pack("{s:s, s:i, s:s, s:{s:s, s:o}}", "jsonrpc", "2.0", "id", 42, "method", "tools/call",
                            "params", "name", name, "arguments", args);
    sg_autofree char *line = sg_json_dump(msg);
    json_decref(msg);
    feed(f, line);
    if (f->nout)
        return answer(f);
    assert_int_equal(f->nstarted, 1);
    run_locally(f, f->started[0]);
    return answer(f);
}

static char *file_text(fixture *f, const char *rel)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", f->ws, rel);
    return sg_read_file(p, 1 << 20, NULL, NULL);
}

static void test_file_tools(void **state)
{
    fixture *f = *state;
    initialize(f);
    const char *content = "alpha\nbeta \xc3\xbc\ngamma beta\n";
    json_t *j = tool_call(f, "write_file", json_pack("{s:s, s:s}", "path", "d/e/f.txt", "content", content));
    assert_null(json_object_get(json_object_get(j, "result"), "isError"));
    assert_non_null(strstr(result_text(j), "wrote 25 bytes"));
    json_decref(j);
    sg_autofree char *got = file_text(f, "d/e/f.txt");
    assert_string_equal(got, content);

    j = tool_call(f, "read_file", json_pack("{s:s}", "path", "d/e/f.txt"));
    assert_string_equal(result_text(j), content);
    json_decref(j);
    j = tool_call(f, "read_file", json_pack("{s:s, s:i, s:i}", "path", "d/e/f.txt", "offset", 2, "limit", 1));
    assert_string_equal(result_text(j), "beta \xc3\xbc\n");
    json_decref(j);
    j = tool_call(f, "read_file", json_pack("{s:s}", "path", "missing"));
    assert_true(json_is_true(json_object_get(json_object_get(j, "result"), "isError")));
    assert_non_null(strstr(result_text(j), "no such file"));
    json_decref(j);
    j = tool_call(f, "read_file", json_pack("{s:s}", "path", "d"));
    assert_non_null(strstr(result_text(j), "is a directory"));
    json_decref(j);

    /* edit: unique, missing, ambiguous, replace_all; the mode is kept */
    sg_autofree char *fp = sg_strdup_printf("%s/d/e/f.txt", f->ws);
    chmod(fp, 0751);
    j = tool_call(f, "edit_file", json_pack("{s:s, s:s, s:s}", "path", "d/e/f.txt", "old_string", "alpha", "new_string", "A\nB"));
    assert_non_null(strstr(result_text(j), "replaced 1 occurrence in"));
    json_decref(j);
    j = tool_call(f, "edit_file", json_pack("{s:s, s:s, s:s}", "path", "d/e/f.txt", "old_string", "zzz", "new_string", "y"));
    assert_true(json_is_true(json_object_get(json_object_get(j, "result"), "isError")));
    assert_non_null(strstr(result_text(j), "not found"));
    json_decref(j);
    j = tool_call(f, "edit_file", json_pack("{s:s, s:s, s:s}", "path", "d/e/f.txt", "old_string", "beta", "new_string", "y"));
    assert_non_null(strstr(result_text(j), "occurs 2 times"));
    json_decref(j);
    j = tool_call(f, "edit_file", json_pack("{s:s, s:s, s:s, s:b}", "path", "d/e/f.txt", "old_string", "beta",
                                            "new_string", "$&\\1 @x", "replace_all", 1));
    assert_non_null(strstr(result_text(j), "replaced 2 occurrences"));
    json_decref(j);
    sg_autofree char *edited = file_text(f, "d/e/f.txt");
    assert_string_equal(edited, "A\nB\n$&\\1 @x \xc3\xbc\ngamma $&\\1 @x\n");
    struct stat st;
    assert_int_equal(stat(fp, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0751);
    j = tool_call(f, "edit_file", json_pack("{s:s, s:s, s:s}", "path", "nofile", "old_string", "a", "new_string", "b"));
    assert_non_null(strstr(result_text(j), "no such file"));
    json_decref(j);

    /* run_bash: stdout, stderr, exit code */
    j = tool_call(f, "run_bash", json_pack("{s:s}", "command", "echo o; echo e >&2; exit 4"));
    assert_string_equal(result_text(j), "o\n[stderr]\ne\n[exit code 4]");
    assert_true(json_is_true(json_object_get(json_object_get(j, "result"), "isError")));
    json_decref(j);
    j = tool_call(f, "run_bash", json_pack("{s:s}", "command", "printf 'bad \\377 utf8'"));
    assert_string_equal(result_text(j), "bad \xef\xbf\xbd utf8\n[exit code 0]");
    json_decref(j);
}

static void test_large_argument_capture(void **state)
{
    fixture *f = *state;
    initialize(f);
    size_t big = 3u * 1024 * 1024;
    char *content = malloc(big + 1);
    memset(content, 'x', big);
    content[big] = '\0';
    json_t *j = tool_call(f, "write_file", json_pack("{s:s, s:s}", "path", "big.txt", "content", content));
    assert_non_null(strstr(result_text(j), "wrote 3145728 bytes"));
    json_decref(j);
    sg_autofree char *p = sg_strdup_printf("%s/big.txt", f->ws);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, (off_t)big);
    free(content);
    /* a file over the bound is refused before anything runs */
    content = malloc(SG_MCP_FILE_MAX + 2);
    memset(content, 'y', SG_MCP_FILE_MAX + 1);
    content[SG_MCP_FILE_MAX + 1] = '\0';
    j = tool_call(f, "write_file", json_pack("{s:s, s:s}", "path", "big.txt", "content", content));
    assert_non_null(strstr(result_text(j), "too large"));
    json_decref(j);
    free(content);
}

static void test_cancel_and_progress(void **state)
{
    fixture *f = *state;
    initialize(f);
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\","
            "\"arguments\":{\"command\":\"sleep 60\"},\"_meta\":{\"progressToken\":\"t1\"}}}");
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\","
            "\"arguments\":{\"command\":\"sleep 1\"}}}");
    /* "7" may write too: it waits for "a" (see test_call_order) */
    assert_int_equal(f->nstarted, 1);
    assert_int_equal(sg_mcp_ncalls(f->m), 2);
    sg_mcp_call *a = f->started[0], *b = sg_mcp_calls(f->m)->next;
    assert_false(b->running);
    /* the same id again while "a" runs */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"run_bash\","
            "\"arguments\":{\"command\":\"true\"}}}");
    json_t *j = answer(f);
    assert_int_equal(error_code(j), SG_MCP_INVALID_REQUEST);
    json_decref(j);
    /* progress: only for the call with a token, once a second */
    assert_int_equal(sg_mcp_tick(f->m, a->start_ns + 500000000ull), 500);
    assert_int_equal(f->nout, 0);
    sg_mcp_call_output(a, false, "12345", 5);
    int next = sg_mcp_tick(f->m, a->start_ns + 1500000000ull);
    assert_int_equal(next, 1000);
    j = answer(f);
    assert_string_equal(json_string_value(json_object_get(j, "method")), "notifications/progress");
    json_t *p = json_object_get(j, "params");
    assert_string_equal(json_string_value(json_object_get(p, "progressToken")), "t1");
    assert_true(json_real_value(json_object_get(p, "progress")) > 1.4);
    assert_non_null(strstr(json_string_value(json_object_get(p, "message")), "5 bytes"));
    json_decref(j);
    /* cancel "a": the transport is told, nothing is answered */
    feed(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"a\",\"reason\":\"x\"}}");
    assert_int_equal(f->ncancelled, 1);
    assert_ptr_equal(f->cancelled[0], a);
    assert_int_equal(f->nout, 0);
    assert_int_equal(sg_mcp_ncalls(f->m), 1);
    assert_ptr_equal(sg_mcp_calls(f->m), b);
    /* and "7" has its turn */
    assert_int_equal(f->nstarted, 2);
    assert_ptr_equal(f->started[1], b);
    assert_true(b->running);
    assert_int_equal(sg_mcp_tick(f->m, b->start_ns), -1);
    /* "b" ends with an error from the supervisor: a failed tool call */
    sg_mcp_call_done(f->m, b, NULL, "session aborted: test");
    j = answer(f);
    assert_int_equal(json_integer_value(json_object_get(j, "id")), 7);
    assert_non_null(strstr(result_text(j), "session aborted: test"));
    json_decref(j);
    assert_int_equal(sg_mcp_ncalls(f->m), 0);
    /* freeing with a call in flight cancels it */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"checkpoint\",\"arguments\":{\"label\":\"l\"}}}");
    assert_int_equal(f->nstarted, 3);
    assert_string_equal(json_string_value(json_object_get(f->started[2]->req, "op")), "checkpoint");
    assert_string_equal(json_string_value(json_object_get(f->started[2]->req, "label")), "l");
}

#define CALL(id, tool, args) "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":\"" \
    tool "\",\"arguments\":" args ",\"_meta\":{\"progressToken\":" id "}}}"

/* The supervisor's answer to a started exec call. */
static void finish(fixture *f, sg_mcp_call *c, int code)
{
    json_t *res = json_pack("{s:i}", "exit_code", code);
    sg_mcp_call_done(f->m, c, res, NULL);
    json_decref(res);
}

static json_int_t answered_id(fixture *f)
{
    json_t *j = answer(f);
    json_int_t id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    return id;
}

/* Writes run one at a time in the order they came; reads run together,
 * after the writes sent before them. */
static void test_call_order(void **state)
{
    fixture *f = *state;
    initialize(f);
    feed(f, CALL("1", "write_file", "{\"path\":\"a\",\"content\":\"1\"}"));
    feed(f, CALL("2", "run_bash", "{\"command\":\"echo 2 > a\"}"));
    feed(f, CALL("3", "read_file", "{\"path\":\"a\"}"));
    feed(f, CALL("4", "checkpoint", "{}"));
    feed(f, CALL("5", "edit_file", "{\"path\":\"a\",\"old_string\":\"2\",\"new_string\":\"5\"}"));
    feed(f, CALL("6", "read_file", "{\"path\":\"a\"}"));
    assert_int_equal(f->nout, 0);
    assert_int_equal(sg_mcp_ncalls(f->m), 6);
    assert_int_equal(f->nstarted, 1);
    assert_string_equal(f->started[0]->tool->name, "write_file");
    /* the waiting ones say what they wait for */
    sg_mcp_call *w = sg_mcp_calls(f->m)->next;
    sg_mcp_tick(f->m, w->start_ns + 1100000000ull);
    bool saw_wait = false;
    for (size_t i = 0; i < f->nout; i++)
        saw_wait |= strstr(f->out[i], "run_bash waiting for 1 earlier call to finish") != NULL;
    assert_true(saw_wait);
    clear_out(f);
    finish(f, f->started[0], 0);
    assert_int_equal(answered_id(f), 1);
    assert_int_equal(f->nstarted, 2);
    assert_string_equal(f->started[1]->tool->name, "run_bash");
    finish(f, f->started[1], 0);
    assert_int_equal(answered_id(f), 2);
    /* the read and the checkpoint together; the edit waits for both, the
     * last read for the edit */
    assert_int_equal(f->nstarted, 4);
    assert_string_equal(f->started[2]->tool->name, "read_file");
    assert_string_equal(f->started[3]->tool->name, "checkpoint");
    sg_mcp_call *ck = f->started[3];
    finish(f, f->started[2], 0);
    assert_int_equal(answered_id(f), 3);
    assert_int_equal(f->nstarted, 4);
    json_t *res = json_pack("{s:s}", "id", "c0ffee");
    sg_mcp_call_done(f->m, ck, res, NULL);
    json_decref(res);
    assert_int_equal(answered_id(f), 4);
    assert_int_equal(f->nstarted, 5);
    assert_string_equal(f->started[4]->tool->name, "edit_file");
    /* a waiting call that is cancelled never starts, and is not answered */
    feed(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":6}}");
    assert_int_equal(f->ncancelled, 0);
    assert_int_equal(f->nout, 0);
    assert_int_equal(sg_mcp_ncalls(f->m), 1);
    /* a call whose start fails when its turn comes is answered, and the
     * next one starts */
    feed(f, CALL("7", "run_bash", "{\"command\":\"true\"}"));
    feed(f, CALL("8", "read_file", "{\"path\":\"a\"}"));
    assert_int_equal(f->nstarted, 5);
    f->fail_start = 1;
    finish(f, f->started[4], 0);
    /* 5 done; 7 failed to start, then 8 (fail_start still set) */
    assert_int_equal(f->nout, 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *jj = sg_json_parse(f->out[i], strlen(f->out[i]), NULL);
        assert_int_equal(json_integer_value(json_object_get(jj, "id")), i == 0 ? 5 : i == 1 ? 7 : 8);
        assert_int_equal(json_is_true(json_object_get(json_object_get(jj, "result"), "isError")), i > 0);
        json_decref(jj);
    }
    clear_out(f);
    assert_int_equal(sg_mcp_ncalls(f->m), 0);
}

/* Every tool of the table is listed with its schema, and its schema is
 * what the arguments are checked against. */
static void test_tool_table(void **state)
{
    fixture *f = *state;
    initialize(f);
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
    json_t *j = answer(f);
    json_t *tools = json_object_get(json_object_get(j, "result"), "tools");
    assert_int_equal(json_array_size(tools), sg_mcp_ntools);
    for (size_t i = 0; i < sg_mcp_ntools; i++) {
        const sg_mcp_tool *t = &sg_mcp_tools[i];
        json_t *d = json_array_get(tools, i);
        assert_string_equal(json_string_value(json_object_get(d, "name")), t->name);
        json_t *props = json_object_get(json_object_get(d, "inputSchema"), "properties");
        assert_true(json_object_size(props) > 0);
        assert_int_equal(json_is_true(json_object_get(json_object_get(d, "annotations"), "readOnlyHint")), !t->writes);
        assert_ptr_equal(sg_mcp_tool_find(t->name), t);
        /* each property is known to the check, a wrong type of each refused */
        const char *k;
        json_t *p;
        json_object_foreach(props, k, p) {
            char why[256];
            json_t *args = json_pack("{s:[]}", k);
            const char *bad = sg_mcp_tool_check_args(t, args, why, sizeof why);
            assert_non_null(bad);
            assert_non_null(strstr(bad, "wrong type"));
            json_decref(args);
        }
        json_t *args = json_pack("{s:i}", "no_such_arg", 1);
        char why[256];
        assert_non_null(strstr(sg_mcp_tool_check_args(t, args, why, sizeof why), "unknown property"));
        json_decref(args);
    }
    json_decref(j);
    /* The instructions name every tool, from the table. */
    char buf[256];
    snprintf(buf, sizeof buf, INIT, "2025-11-25");
    feed(f, buf);
    j = answer(f);
    const char *ins = json_string_value(json_object_get(json_object_get(j, "result"), "instructions"));
    assert_non_null(ins);
    for (size_t i = 0; i < sg_mcp_ntools; i++)
        assert_non_null(strstr(ins, sg_mcp_tools[i].name));
    assert_non_null(strstr(ins, "(run_bash, write_file, edit_file, rollback) run one at a time"));
    json_decref(j);
}

static void test_checkpoint_rollback_results(void **state)
{
    fixture *f = *state;
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{" MODERN_META
            ",\"name\":\"rollback\",\"arguments\":{\"to\":\"abc123\"}}}");
    assert_int_equal(f->nstarted, 1);
    sg_mcp_call *c = f->started[0];
    assert_string_equal(json_string_value(json_object_get(c->req, "op")), "rollback");
    assert_string_equal(json_string_value(json_object_get(c->req, "to")), "abc123");
    json_t *res = json_pack("{s:b, s:[{s:s, s:s}, {s:s, s:s}]}", "restored", 1, "changes",
                            "path", "a.txt", "change", "modified", "path", "new.txt", "change", "deleted");
    sg_mcp_call_done(f->m, c, res, NULL);
    json_decref(res);
    json_t *j = answer(f);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "result"), "resultType")), "complete");
    assert_string_equal(result_text(j), "rolled back to checkpoint abc123: 2 changes\nmodified a.txt\ndeleted new.txt\n");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_path),
        cmocka_unit_test_setup_teardown(test_initialize_negotiation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modern, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tools_call_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_tools, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_argument_capture, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_and_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_rollback_results, setup, teardown),
        cmocka_unit_test_setup_teardown(test_call_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool_table, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

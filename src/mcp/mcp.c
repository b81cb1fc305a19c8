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

#define MCP_PROGRESS_INTERVAL_NS 1000000000ull /* one progress notification a second */
#define MCP_MAX_TIMEOUT_S (7 * 24 * 3600.0)
#define MCP_LIST_TTL_MS 3600000 /* the tool list never changes while we run */

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"

/* Legacy versions we answer initialize with (newest first). */
static const char *const legacy_versions[] = {
    SG_MCP_PROTOCOL_LEGACY, "2025-06-18", "2025-03-26", "2024-11-05",
};
static const char *const modern_versions[] = {SG_MCP_PROTOCOL_MODERN};

static const char server_instructions[] =
    "Tools run inside an isolated Linux sandbox; its workspace is /workspace "
    "(relative paths are resolved there). Every call is recorded, and the "
    "workspace is checkpointed before each call that may write: use "
    "`checkpoint` to mark a state and `rollback` to restore one.";

struct sg_mcp {
    sg_mcp_io io;
    char *workspace;
    bool initialized;
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
                     "version", "0.1.0");
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

/* ---- tools ------------------------------------------------------------------ */

static const char *const tool_names[] = {
    [SG_MCP_TOOL_RUN_BASH] = "run_bash",
    [SG_MCP_TOOL_WRITE_FILE] = "write_file",
    [SG_MCP_TOOL_EDIT_FILE] = "edit_file",
    [SG_MCP_TOOL_READ_FILE] = "read_file",
    [SG_MCP_TOOL_CHECKPOINT] = "checkpoint",
    [SG_MCP_TOOL_ROLLBACK] = "rollback",
};

static json_t *prop(const char *type, const char *desc)
{
    return json_pack("{s:s, s:s}", "type", type, "description", desc);
}

static json_t *tool_def(const char *name, const char *title, const char *desc, json_t *props,
                        json_t *required, bool read_only, bool destructive)
{
    json_t *schema = json_pack("{s:s, s:o, s:b}", "type", "object", "properties", props,
                               "additionalProperties", 0);
    if (required)
        json_object_set_new(schema, "required", required);
    return json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}",
        "name", name, "title", title, "description", desc, "inputSchema", schema,
        "annotations", "title", title, "readOnlyHint", read_only, "destructiveHint", destructive,
        "idempotentHint", read_only, "openWorldHint", 0);
}

static json_t *tools_list(void)
{
    json_t *t = json_array();
    json_array_append_new(t, tool_def("run_bash", "Run a shell command",
        "Runs a command with bash -c in the sandbox, in /workspace. Returns its stdout, its stderr "
        "and its exit code (the result is an error when the exit code is not 0). State persists "
        "between calls (files, background processes). Offline: the sandbox has no network.",
        json_pack("{s:o, s:o}",
            "command", prop("string", "The bash command line to run."),
            "timeout", json_pack("{s:s, s:s, s:i, s:f}", "type", "number", "description",
                                 "Seconds before the command is killed (default: the sandbox's).",
                                 "exclusiveMinimum", 0, "maximum", MCP_MAX_TIMEOUT_S)),
        json_pack("[s]", "command"), false, true));
    json_array_append_new(t, tool_def("write_file", "Write a file",
        "Creates or overwrites a text file in the workspace with the given content (parent "
        "directories are created). Paths are relative to /workspace or absolute under it.",
        json_pack("{s:o, s:o}",
            "path", prop("string", "File path, relative to /workspace or absolute under it."),
            "content", prop("string", "The complete new content of the file.")),
        json_pack("[s, s]", "path", "content"), false, true));
    json_array_append_new(t, tool_def("edit_file", "Edit a file",
        "Replaces an exact string in a file. old_string must occur exactly once unless "
        "replace_all is true; the call fails when it is missing or not unique (add context).",
        json_pack("{s:o, s:o, s:o, s:o}",
            "path", prop("string", "File path, relative to /workspace or absolute under it."),
            "old_string", prop("string", "The exact text to replace."),
            "new_string", prop("string", "The text to put in its place."),
            "replace_all", prop("boolean", "Replace every occurrence (default false).")),
        json_pack("[s, s, s]", "path", "old_string", "new_string"), false, true));
    json_array_append_new(t, tool_def("read_file", "Read a file",
        "Returns the text of a file in the workspace. offset (1-based line) and limit (lines) "
        "read a part of a large file.",
        json_pack("{s:o, s:{s:s, s:s, s:i}, s:{s:s, s:s, s:i}}",
            "path", prop("string", "File path, relative to /workspace or absolute under it."),
            "offset", "type", "integer", "description", "First line to return (1-based).", "minimum", 1,
            "limit", "type", "integer", "description", "Most lines to return.", "minimum", 1),
        json_pack("[s]", "path"), true, false));
    json_array_append_new(t, tool_def("checkpoint", "Checkpoint the workspace",
        "Records the current state of the whole workspace and returns its id.",
        json_pack("{s:o}", "label", prop("string", "A short name for this checkpoint.")),
        NULL, false, false));
    json_array_append_new(t, tool_def("rollback", "Roll the workspace back",
        "Restores the workspace exactly as it was at a checkpoint (default: the latest), "
        "undoing every change since, also those made by shell commands. Returns the changes.",
        json_pack("{s:o}", "to", prop("string", "Checkpoint id (default: the latest).")),
        NULL, false, true));
    return t;
}

/* A copy of the arguments for the capture: long strings are cut so that the
 * request fits in one control message. */
static json_t *capture_args(const json_t *args, bool *cut)
{
    json_t *c = json_object();
    const char *k;
    json_t *v;
    *cut = false;
    json_object_foreach((json_t *)args, k, v) {
        if (json_is_string(v) && json_string_length(v) > SG_MCP_CAPTURE_ARG_MAX) {
            const char *s = json_string_value(v);
            size_t n = SG_MCP_CAPTURE_ARG_MAX;
            while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
                n--; /* keep whole UTF-8 sequences */
            json_object_set_new(c, k, json_stringn(s, n));
            *cut = true;
        } else {
            json_object_set(c, k, v);
        }
    }
    return c;
}

static json_t *exec_req(const char *cwd, const char *tool, const json_t *args, json_t *argv)
{
    bool cut;
    json_t *cap = capture_args(args, &cut);
    json_t *t = json_pack("{s:s, s:o}", "name", tool, "arguments", cap);
    if (cut)
        json_object_set_new(t, "arguments_truncated", json_true());
    return json_pack("{s:s, s:o, s:s, s:o}", "op", "exec", "argv", argv, "cwd", cwd, "tool", t);
}

/* Scripts run inside the sandbox, as the sandbox user: the writes happen
 * there and cannot escape it through a symlink. */
static const char write_script[] =
    "set -e; d=$(dirname -- \"$1\"); [ -d \"$d\" ] || mkdir -p -- \"$d\"; "
    "if [ -d \"$1\" ]; then echo \"$1: is a directory\" >&2; exit 2; fi; cat > \"$1\"";

static const char read_script[] =
    "f=$1; if [ ! -e \"$f\" ]; then echo \"$f: no such file\" >&2; exit 2; fi; "
    "if [ -d \"$f\" ]; then echo \"$f: is a directory\" >&2; exit 2; fi; "
    "if [ ! -r \"$f\" ]; then echo \"$f: permission denied\" >&2; exit 2; fi; "
    "if [ \"$3\" = all ]; then tail -n \"+$2\" -- \"$f\" | head -c \"$4\"; "
    "else tail -n \"+$2\" -- \"$f\" | head -n \"$3\" | head -c \"$4\"; fi";

/* Exact-string replacement, binary-safe: old and new come on stdin, their
 * lengths as arguments. The file is rewritten in place (mode, owner and
 * hard links kept). Exit 3: cannot read or write, 4: not found, 5: not
 * unique. Prints the number of replacements. */
static const char edit_script[] =
    "use strict; my ($p,$ol,$nl,$all,$max)=@ARGV; binmode STDIN; local $/; "
    "my $in=<STDIN>; $in='' unless defined $in; "
    "length($in)==$ol+$nl or do { print STDERR \"short edit payload\\n\"; exit 3 }; "
    "my $old=substr($in,0,$ol); my $new=substr($in,$ol,$nl); "
    "-e $p or do { print STDERR \"$p: no such file\\n\"; exit 3 }; "
    "-f _ or do { print STDERR \"$p: not a regular file\\n\"; exit 3 }; "
    "-s _ <= $max or do { print STDERR \"$p: larger than $max bytes\\n\"; exit 3 }; "
    "open(my $f,'+<:raw',$p) or do { print STDERR \"$p: $!\\n\"; exit 3 }; "
    "my $c=<$f>; $c='' unless defined $c; "
    "my @at; my $i=0; while(($i=index($c,$old,$i))>=0){ push @at,$i; $i+=length($old); } "
    "if(!@at){ print STDERR \"old_string not found in $p\\n\"; exit 4 } "
    "if(@at>1 && !$all){ print STDERR \"old_string occurs \".scalar(@at).\" times in $p; "
    "add context to make it unique, or set replace_all\\n\"; exit 5 } "
    "for my $k (reverse @at){ substr($c,$k,length($old))=$new } "
    "seek($f,0,0) or die; print $f $c or do { print STDERR \"$p: $!\\n\"; exit 3 }; "
    "truncate($f,tell($f)) or die; close($f) or do { print STDERR \"$p: $!\\n\"; exit 3 }; "
    "print scalar(@at),\"\\n\";";

/* Type checks of the arguments against the input schema; NULL when fine,
 * else the problem (static string). */
static const char *check_arg(const json_t *args, const char *name, json_type type, bool required)
{
    json_t *v = json_object_get(args, name);
    if (!v)
        return required ? "missing" : NULL;
    bool ok = type == JSON_REAL ? json_is_number(v)
            : type == JSON_TRUE ? json_is_boolean(v)
            : json_typeof(v) == type;
    return ok ? NULL : "wrong type";
}

static const char *const run_bash_args[] = {"command", "timeout", NULL};
static const char *const write_args[] = {"path", "content", NULL};
static const char *const edit_args[] = {"path", "old_string", "new_string", "replace_all", NULL};
static const char *const read_args[] = {"path", "offset", "limit", NULL};
static const char *const ckpt_args[] = {"label", NULL};
static const char *const rollback_args[] = {"to", NULL};

static const char *unknown_arg(const json_t *args, const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v) {
        bool found = false;
        for (const char *const *p = known; *p; p++)
            if (strcmp(k, *p) == 0)
                found = true;
        if (!found)
            return k;
    }
    return NULL;
}

static sg_mcp_call *call_new(size_t out_cap, size_t err_cap)
{
    sg_mcp_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = -1;
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
    free(c->out.data);
    free(c->err.data);
    sg_ctl_asm_free(&c->answer);
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
    sg_err err = {0};
    int tool = -1;
    for (size_t i = 0; i < SG_ARRAY_LEN(tool_names); i++)
        if (strcmp(name, tool_names[i]) == 0)
            tool = (int)i;
    if (tool < 0) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "Unknown tool: %.200s", name);
        return NULL;
    }
    static const char *const *const known[] = {
        [SG_MCP_TOOL_RUN_BASH] = run_bash_args, [SG_MCP_TOOL_WRITE_FILE] = write_args,
        [SG_MCP_TOOL_EDIT_FILE] = edit_args, [SG_MCP_TOOL_READ_FILE] = read_args,
        [SG_MCP_TOOL_CHECKPOINT] = ckpt_args, [SG_MCP_TOOL_ROLLBACK] = rollback_args,
    };
    const char *bad = unknown_arg(args, known[tool]);
    if (bad) {
        send_error(m, id, SG_MCP_INVALID_PARAMS, NULL,
                   "Invalid arguments for tool %s: unknown property '%.100s'", name, bad);
        return NULL;
    }
    /* Schema checks: a client that validates never sends these. */
    struct { const char *arg; json_type type; bool req; } checks[6];
    size_t nchk = 0;
#define CHK(a, t, r) checks[nchk++] = (typeof(checks[0])){a, t, r}
    switch (tool) {
    case SG_MCP_TOOL_RUN_BASH: CHK("command", JSON_STRING, true); CHK("timeout", JSON_REAL, false); break;
    case SG_MCP_TOOL_WRITE_FILE: CHK("path", JSON_STRING, true); CHK("content", JSON_STRING, true); break;
    case SG_MCP_TOOL_EDIT_FILE:
        CHK("path", JSON_STRING, true); CHK("old_string", JSON_STRING, true);
        CHK("new_string", JSON_STRING, true); CHK("replace_all", JSON_TRUE, false); break;
    case SG_MCP_TOOL_READ_FILE:
        CHK("path", JSON_STRING, true); CHK("offset", JSON_INTEGER, false); CHK("limit", JSON_INTEGER, false); break;
    case SG_MCP_TOOL_CHECKPOINT: CHK("label", JSON_STRING, false); break;
    case SG_MCP_TOOL_ROLLBACK: CHK("to", JSON_STRING, false); break;
    default: break;
    }
#undef CHK
    for (size_t i = 0; i < nchk; i++) {
        const char *why = check_arg(args, checks[i].arg, checks[i].type, checks[i].req);
        if (why) {
            send_error(m, id, SG_MCP_INVALID_PARAMS, NULL, "Invalid arguments for tool %s: %s property '%s'",
                       name, why, checks[i].arg);
            return NULL;
        }
    }
    if (m->ncalls >= SG_MCP_MAX_CALLS) {
        char msg[128];
        snprintf(msg, sizeof msg, "too many tool calls in flight (at most %d); retry when one has finished",
                 SG_MCP_MAX_CALLS);
        answer_tool_error(m, id, modern, msg);
        return NULL;
    }
    size_t out_cap = tool == SG_MCP_TOOL_READ_FILE ? SG_MCP_READ_MAX + 1 : SG_MCP_OUTPUT_MAX;
    sg_mcp_call *c = call_new(out_cap, SG_MCP_OUTPUT_MAX);
    if (!c) {
        send_error(m, id, SG_MCP_INTERNAL_ERROR, NULL, "out of memory");
        return NULL;
    }
    c->tool = (sg_mcp_tool)tool;
    c->modern = modern;
    c->id = json_incref((json_t *)id);
    const char *path = json_string_value(json_object_get(args, "path"));
    if (path) {
        c->path = sg_mcp_resolve_path(m->workspace, path, &err);
        if (!c->path) {
            answer_tool_error(m, id, modern, err.msg);
            call_free(c);
            return NULL;
        }
    }
    const char *fail = NULL;
    char failbuf[160];
    switch (c->tool) {
    case SG_MCP_TOOL_RUN_BASH: {
        json_t *cmd = json_object_get(args, "command");
        if (json_string_length(cmd) > SG_MCP_COMMAND_MAX) {
            snprintf(failbuf, sizeof failbuf, "command is too long (at most %u bytes; write a script with write_file)",
                     SG_MCP_COMMAND_MAX);
            fail = failbuf;
            break;
        }
        c->req = exec_req(m->workspace, name, args, json_pack("[s, s, O]", "/bin/bash", "-c", cmd));
        json_t *to = json_object_get(args, "timeout");
        if (to) {
            double t = json_number_value(to);
            if (!(t > 0) || !isfinite(t) || t > MCP_MAX_TIMEOUT_S) {
                fail = "timeout must be a positive number of seconds (at most 7 days)";
                break;
            }
            json_object_set_new(c->req, "timeout", json_real(t));
        }
        break;
    }
    case SG_MCP_TOOL_WRITE_FILE: {
        json_t *content = json_object_get(args, "content");
        if (json_string_length(content) > SG_MCP_FILE_MAX) {
            snprintf(failbuf, sizeof failbuf, "content is too large (at most %u bytes)", SG_MCP_FILE_MAX);
            fail = failbuf;
            break;
        }
        c->content_len = json_string_length(content);
        c->input = malloc(c->content_len + 1);
        if (!c->input) {
            fail = "out of memory";
            break;
        }
        memcpy(c->input, json_string_value(content), c->content_len);
        c->input_len = c->content_len;
        c->req = exec_req(m->workspace, name, args, json_pack("[s, s, s, s, s]", "/bin/sh", "-c", write_script, "sh", c->path));
        break;
    }
    case SG_MCP_TOOL_EDIT_FILE: {
        json_t *o = json_object_get(args, "old_string"), *n = json_object_get(args, "new_string");
        size_t ol = json_string_length(o), nl = json_string_length(n);
        if (ol == 0) {
            fail = "old_string is empty (use write_file to create a file)";
            break;
        }
        if (ol == nl && memcmp(json_string_value(o), json_string_value(n), ol) == 0) {
            fail = "old_string and new_string are the same";
            break;
        }
        if (ol > SG_MCP_FILE_MAX || nl > SG_MCP_FILE_MAX) {
            snprintf(failbuf, sizeof failbuf, "old_string and new_string must be at most %u bytes", SG_MCP_FILE_MAX);
            fail = failbuf;
            break;
        }
        c->input = malloc(ol + nl + 1);
        if (!c->input) {
            fail = "out of memory";
            break;
        }
        memcpy(c->input, json_string_value(o), ol);
        memcpy(c->input + ol, json_string_value(n), nl);
        c->input_len = ol + nl;
        char a_ol[32], a_nl[32], a_max[32];
        snprintf(a_ol, sizeof a_ol, "%zu", ol);
        snprintf(a_nl, sizeof a_nl, "%zu", nl);
        snprintf(a_max, sizeof a_max, "%u", SG_MCP_FILE_MAX);
        bool all = json_is_true(json_object_get(args, "replace_all"));
        c->req = exec_req(m->workspace, name, args, json_pack("[s, s, s, s, s, s, s, s, s]", "perl", "-e", edit_script,
                                               "--", c->path, a_ol, a_nl, all ? "1" : "0", a_max));
        break;
    }
    case SG_MCP_TOOL_READ_FILE: {
        json_int_t off = 1, lim = 0;
        json_t *jo = json_object_get(args, "offset"), *jl = json_object_get(args, "limit");
        if (jo)
            off = json_integer_value(jo);
        if (jl)
            lim = json_integer_value(jl);
        if (off < 1 || (jl && lim < 1)) {
            fail = "offset and limit must be positive integers";
            break;
        }
        char a_off[32], a_lim[32], a_max[32];
        snprintf(a_off, sizeof a_off, "%" JSON_INTEGER_FORMAT, off);
        if (jl)
            snprintf(a_lim, sizeof a_lim, "%" JSON_INTEGER_FORMAT, lim);
        else
            snprintf(a_lim, sizeof a_lim, "all");
        snprintf(a_max, sizeof a_max, "%u", SG_MCP_READ_MAX + 1);
        c->req = exec_req(m->workspace, name, args, json_pack("[s, s, s, s, s, s, s, s]", "/bin/sh", "-c", read_script, "sh",
                                               c->path, a_off, a_lim, a_max));
        break;
    }
    case SG_MCP_TOOL_CHECKPOINT: {
        json_t *label = json_object_get(args, "label");
        if (label && json_string_length(label) > SG_CKPT_LABEL_MAX) {
            snprintf(failbuf, sizeof failbuf, "label is too long (at most %d bytes)", SG_CKPT_LABEL_MAX);
            fail = failbuf;
            break;
        }
        c->req = json_pack("{s:s}", "op", "checkpoint");
        json_object_set_new(c->req, "label", label ? json_incref(label) : json_string("mcp checkpoint"));
        break;
    }
    case SG_MCP_TOOL_ROLLBACK: {
        json_t *to = json_object_get(args, "to");
        if (to && (json_string_length(to) == 0 || json_string_length(to) > 128)) {
            fail = "to must be a checkpoint id";
            break;
        }
        c->req = json_pack("{s:s, s:b, s:b}", "op", "rollback", "dry_run", 0, "force", 0);
        if (to)
            json_object_set(c->req, "to", to);
        break;
    }
    }
    if (!fail && !c->req)
        fail = "out of memory";
    if (fail) {
        answer_tool_error(m, id, modern, fail);
        call_free(c);
        return NULL;
    }
    return c;
}

/* ---- results ---------------------------------------------------------------- */

static void buf_add(sg_mcp_buf *b, const char *s, size_t n)
{
    b->total += n;
    size_t room = b->cap - b->len;
    if (n > room)
        n = room;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

void sg_mcp_call_output(sg_mcp_call *c, bool is_stderr, const char *buf, size_t len)
{
    buf_add(is_stderr ? &c->err : &c->out, buf, len);
}

/* Appends to a growing text; aborts on OOM like sg_strdup_printf. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void text_add(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->s, cap);
        if (!p)
            abort();
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void text_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        text_add(t, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void text_add_buf(text *t, const sg_mcp_buf *b, const char *what)
{
    text_add(t, b->data, b->len);
    if (b->total > b->len) {
        if (b->len && b->data[b->len - 1] != '\n')
            text_add(t, "\n", 1);
        text_printf(t, "[%s truncated: %" PRIu64 " more bytes not shown]\n", what, b->total - b->len);
    }
}

static json_t *exec_tool_result(sg_mcp_call *c, const json_t *res)
{
    json_t *jcode = json_object_get(res, "exit_code");
    int code = json_is_integer(jcode) ? (int)json_integer_value(jcode) : -1;
    json_t *jsig = json_object_get(res, "signal");
    int sig = json_is_integer(jsig) ? (int)json_integer_value(jsig) : 0;
    bool timed_out = json_is_true(json_object_get(res, "timed_out"));
    bool limit = json_is_true(json_object_get(res, "output_limit_hit"));
    text t = {0};
    text_add(&t, "", 0);
    bool ok = code == 0 && !timed_out;
    switch (c->tool) {
    case SG_MCP_TOOL_RUN_BASH:
        text_add_buf(&t, &c->out, "stdout");
        if (c->err.total) {
            if (t.len && t.s[t.len - 1] != '\n')
                text_add(&t, "\n", 1);
            text_add(&t, "[stderr]\n", 9);
            text_add_buf(&t, &c->err, "stderr");
        }
        if (t.len && t.s[t.len - 1] != '\n')
            text_add(&t, "\n", 1);
        if (timed_out)
            text_printf(&t, "[timed out; killed]\n");
        if (limit)
            text_printf(&t, "[output limit reached; killed]\n");
        if (sig)
            text_printf(&t, "[exit code %d: killed by signal %d]", code, sig);
        else
            text_printf(&t, "[exit code %d]", code);
        break;
    case SG_MCP_TOOL_READ_FILE:
        if (ok) {
            if (c->out.total > SG_MCP_READ_MAX) {
                text_add(&t, c->out.data, SG_MCP_READ_MAX);
                text_printf(&t, "\n[truncated at %u bytes: read the rest with offset and limit]", SG_MCP_READ_MAX);
            } else {
                text_add(&t, c->out.data, c->out.len);
            }
        }
        break;
    case SG_MCP_TOOL_WRITE_FILE:
        if (ok)
            text_printf(&t, "wrote %zu bytes to %s", c->content_len, c->path);
        break;
    case SG_MCP_TOOL_EDIT_FILE:
        if (ok) {
            long n = c->out.len ? strtol(c->out.data, NULL, 10) : 0;
            text_printf(&t, "replaced %ld occurrence%s in %s", n, n == 1 ? "" : "s", c->path);
        } else if (code == 127) {
            text_printf(&t, "edit_file needs perl inside the sandbox's root file system: ");
        }
        break;
    default:
        break;
    }
    if (!ok && c->tool != SG_MCP_TOOL_RUN_BASH) {
        if (c->err.len)
            text_add(&t, c->err.data, c->err.len);
        else
            text_printf(&t, "%s failed (exit code %d)", tool_names[c->tool], code);
    }
    json_t *r = text_result(t.s, t.len, !ok);
    free(t.s);
    return r;
}

static json_t *op_tool_result(sg_mcp_call *c, const json_t *res)
{
    text t = {0};
    text_add(&t, "", 0);
    if (c->tool == SG_MCP_TOOL_CHECKPOINT) {
        const char *id = json_string_value(json_object_get(res, "id"));
        text_printf(&t, "checkpoint %s", id ? id : "(no id)");
        const char *label = json_string_value(json_object_get(c->req, "label"));
        if (label)
            text_printf(&t, " (%.256s)", label);
    } else {
        json_t *changes = json_object_get(res, "changes");
        bool restored = json_is_true(json_object_get(res, "restored"));
        const char *to = json_string_value(json_object_get(res, "to"));
        if (!to)
            to = json_string_value(json_object_get(c->req, "to"));
        text_printf(&t, "%s to checkpoint %s: %zu change%s\n", restored ? "rolled back" : "nothing restored",
                    to ? to : "(latest)", json_array_size(changes), json_array_size(changes) == 1 ? "" : "s");
        size_t i;
        json_t *ch;
        json_array_foreach(changes, i, ch) {
            if (i >= 200) {
                text_printf(&t, "... and %zu more\n", json_array_size(changes) - i);
                break;
            }
            const char *p = json_string_value(json_object_get(ch, "path"));
            const char *k = json_string_value(json_object_get(ch, "change"));
            text_printf(&t, "%s %.900s\n", k ? k : "changed", p ? p : "?");
        }
    }
    json_t *r = text_result(t.s, t.len, false);
    free(t.s);
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

void sg_mcp_call_done(sg_mcp *m, sg_mcp_call *c, const json_t *result, const char *error)
{
    unlink_call(m, c);
    json_t *r;
    if (error || !result) {
        char msg[SG_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "%s: %s", tool_names[c->tool], error ? error : "no result");
        r = text_result(msg, strlen(msg), true);
    } else if (c->tool == SG_MCP_TOOL_CHECKPOINT || c->tool == SG_MCP_TOOL_ROLLBACK) {
        r = op_tool_result(c, result);
    } else {
        r = exec_tool_result(c, result);
    }
    send_result(m, c->id, r, c->modern);
    call_free(c);
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
            snprintf(msg, sizeof msg, "%s running for %.0f s, %" PRIu64 " bytes of output",
                     tool_names[c->tool], el, c->out.total + c->err.total);
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
    mcp_log(m, "initialize: client %.64s %.32s asks %.32s, answering %s",
            json_string_value(json_object_get(ci, "name")) ?: "?",
            json_string_value(json_object_get(ci, "version")) ?: "?", want, v);
    send_result(m, id, json_pack("{s:s, s:{s:{}}, s:o, s:s}", "protocolVersion", v,
        "capabilities", "tools", "serverInfo", server_info(), "instructions", server_instructions), false);
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
    c->next = m->calls;
    m->calls = c;
    m->ncalls++;
    sg_err err = {0};
    if (m->io.start(m->io.ud, c, &err) < 0)
        sg_mcp_call_done(m, c, NULL, err.msg);
}

static void do_cancelled(sg_mcp *m, const json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    if (!rid)
        return;
    for (sg_mcp_call *c = m->calls; c; c = c->next) {
        if (json_equal(c->id, rid)) {
            const char *why = json_string_value(json_object_get(params, "reason"));
            mcp_log(m, "cancelled %s call%s%.200s", tool_names[c->tool], why ? ": " : "", why ? why : "");
            unlink_call(m, c);
            m->io.cancel(m->io.ud, c);
            call_free(c); /* per spec: no answer for a cancelled request */
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
            "capabilities", "tools", "instructions", server_instructions,
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
    if (!m->workspace) {
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
        m->io.cancel(m->io.ud, c);
        call_free(c);
    }
    free(m->workspace);
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

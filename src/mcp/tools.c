#include "mcp/tools.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "mcp/mcp.h"
#include "wire/ctl.h"

#define MCP_MAX_TIMEOUT_S 604800 /* 7 days, as run_bash's schema says */

#define PATH_PROP "\"path\": {\"type\": \"string\", " \
    "\"description\": \"File path, relative to /workspace or absolute under it.\"}"

/* ---- result text ------------------------------------------------------------ */

/* The result's text goes into an sg_buf; each appender returns -1 on out
 * of memory (ORed together by the shapers: tools.h). */
static int text_nl(sg_buf *t)
{
    return t->len && t->data[t->len - 1] != '\n' ? sg_buf_append(t, "\n", 1) : 0;
}

static int text_add_buf(sg_buf *t, const sg_mcp_buf *b, const char *what)
{
    int r = sg_buf_append(t, b->data, b->len);
    if (b->total > b->len) {
        r |= text_nl(t);
        r |= sg_buf_printf(t, "[%s truncated: %" PRIu64 " more bytes not shown]\n", what, b->total - b->len);
    }
    return r;
}

/* ---- what every exec tool shares ------------------------------------------- */

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

/* The exec request of a call (ctl.h's encoder): argv in the workspace,
 * the tool and its arguments named for the capture (which records what
 * the call does, not the script that does it). */
static json_t *exec_req(const char *cwd, const char *tool, const json_t *args, char *const *argv, double timeout_s)
{
    bool cut;
    json_t *cap = capture_args(args, &cut);
    sg_autojson json_t *t = json_pack("{s:s, s:o}", "name", tool, "arguments", cap);
    if (t && cut)
        json_object_set_new(t, "arguments_truncated", json_true());
    sg_ctl_req r = {.op = SG_OP_EXEC, .v = SG_CTL_VERSION,
                    .u.exec = {.argv = (char **)argv, .cwd = (char *)cwd, .tool = t, .timeout_s = timeout_s}};
    return t ? sg_ctl_req_encode(&r) : NULL;
}

static int exit_code(const json_t *res)
{
    json_t *j = json_object_get(res, "exit_code");
    return json_is_integer(j) ? (int)json_integer_value(j) : -1;
}

static bool exec_ok(const json_t *res)
{
    return exit_code(res) == 0 && !json_is_true(json_object_get(res, "timed_out"));
}

/* A file tool that failed: the script's own message, or its exit code. */
static int file_failed(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    int r = c->err.len ? sg_buf_append(t, c->err.data, c->err.len)
                       : sg_buf_printf(t, "%s failed (exit code %d)", c->tool->name, exit_code(res));
    return r < 0 ? -1 : 1;
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

/* Exact-string replacement, binary-safe, with no interpreter in the
 * sandbox: a dialogue over the command's stdin and stdout. The script
 * (sh and coreutils, as the other file tools) copies the file aside and
 * sends its length and bytes; sandglass finds the occurrences (edit_reply)
 * and answers "w\n" and the new bytes, which the script writes over the
 * file in place (mode, owner and hard links kept), or the exit code it is
 * to end with. Exit 3: cannot read or write, 4: not found, 5: not unique. */
static const char edit_script[] =
    "p=$1; if [ ! -e \"$p\" ]; then echo \"$p: no such file\" >&2; exit 3; fi; "
    "if [ ! -f \"$p\" ]; then echo \"$p: not a regular file\" >&2; exit 3; fi; "
    "if [ ! -r \"$p\" ] || [ ! -w \"$p\" ]; then echo \"$p: permission denied\" >&2; exit 3; fi; "
    "t=$(mktemp) || exit 3; trap 'rm -f \"$t\"' EXIT; cat -- \"$p\" > \"$t\" || exit 3; "
    "n=$(wc -c < \"$t\") || exit 3; n=$((n)); "
    "if [ \"$n\" -gt \"$2\" ]; then echo \"$p: larger than $2 bytes\" >&2; exit 3; fi; "
    "printf '%s\\n' \"$n\"; cat -- \"$t\" || exit 3; "
    "IFS= read -r go || exit 3; [ \"$go\" = w ] || exit \"$go\"; cat > \"$p\"";

/* ---- run_bash --------------------------------------------------------------- */

static const char *plan_run_bash(sg_mcp_call *c, const json_t *args, const char *ws, char *why, size_t n)
{
    json_t *cmd = json_object_get(args, "command");
    if (json_string_length(cmd) > SG_MCP_COMMAND_MAX) {
        snprintf(why, n, "command is too long (at most %u bytes; write a script with write_file)",
                 SG_MCP_COMMAND_MAX);
        return why;
    }
    json_t *to = json_object_get(args, "timeout");
    double t = to ? json_number_value(to) : 0;
    if (to && (!(t > 0) || !isfinite(t) || t > MCP_MAX_TIMEOUT_S))
        return "timeout must be a positive number of seconds (at most 7 days)";
    char *argv[] = {"/bin/bash", "-c", (char *)json_string_value(cmd), NULL};
    c->req = exec_req(ws, c->tool->name, args, argv, to ? t : 0);
    return NULL;
}

static int shape_run_bash(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    int r = text_add_buf(t, &c->out, "stdout");
    if (c->err.total) {
        r |= text_nl(t);
        r |= sg_buf_puts(t, "[stderr]\n");
        r |= text_add_buf(t, &c->err, "stderr");
    }
    r |= text_nl(t);
    if (json_is_true(json_object_get(res, "timed_out")))
        r |= sg_buf_puts(t, "[timed out; killed]\n");
    if (json_is_true(json_object_get(res, "output_limit_hit")))
        r |= sg_buf_puts(t, "[output limit reached; killed]\n");
    json_t *jsig = json_object_get(res, "signal");
    int sig = json_is_integer(jsig) ? (int)json_integer_value(jsig) : 0;
    if (sig)
        r |= sg_buf_printf(t, "[exit code %d: killed by signal %d]", exit_code(res), sig);
    else
        r |= sg_buf_printf(t, "[exit code %d]", exit_code(res));
    return r < 0 ? -1 : !exec_ok(res);
}

/* ---- write_file ------------------------------------------------------------- */

static const char *plan_write_file(sg_mcp_call *c, const json_t *args, const char *ws, char *why, size_t n)
{
    json_t *content = json_object_get(args, "content");
    if (json_string_length(content) > SG_MCP_FILE_MAX) {
        snprintf(why, n, "content is too large (at most %u bytes)", SG_MCP_FILE_MAX);
        return why;
    }
    c->content_len = json_string_length(content);
    c->input = malloc(c->content_len + 1);
    if (!c->input)
        return "out of memory";
    memcpy(c->input, json_string_value(content), c->content_len);
    c->input_len = c->content_len;
    char *argv[] = {"/bin/sh", "-c", (char *)write_script, "sh", c->path, NULL};
    c->req = exec_req(ws, c->tool->name, args, argv, 0);
    return NULL;
}

static int shape_write_file(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    if (!exec_ok(res))
        return file_failed(c, res, t);
    return sg_buf_printf(t, "wrote %zu bytes to %s", c->content_len, c->path);
}

/* ---- edit_file -------------------------------------------------------------- */

static const char *plan_edit_file(sg_mcp_call *c, const json_t *args, const char *ws, char *why, size_t n)
{
    json_t *o = json_object_get(args, "old_string"), *nw = json_object_get(args, "new_string");
    size_t ol = json_string_length(o), nl = json_string_length(nw);
    if (ol == 0)
        return "old_string is empty (use write_file to create a file)";
    if (ol == nl && memcmp(json_string_value(o), json_string_value(nw), ol) == 0)
        return "old_string and new_string are the same";
    if (ol > SG_MCP_FILE_MAX || nl > SG_MCP_FILE_MAX) {
        snprintf(why, n, "old_string and new_string must be at most %u bytes", SG_MCP_FILE_MAX);
        return why;
    }
    c->edit = malloc(ol + nl + 1);
    if (!c->edit)
        return "out of memory";
    memcpy(c->edit, json_string_value(o), ol);
    memcpy(c->edit + ol, json_string_value(nw), nl);
    c->edit_old = ol;
    c->edit_new = nl;
    c->edit_all = json_is_true(json_object_get(args, "replace_all"));
    char a_max[32];
    snprintf(a_max, sizeof a_max, "%u", SG_MCP_FILE_MAX);
    char *argv[] = {"/bin/sh", "-c", (char *)edit_script, "sh", c->path, a_max, NULL};
    c->req = exec_req(ws, c->tool->name, args, argv, 0);
    return NULL;
}

/* The offsets of old in the file, left to right, not overlapping (at
 * most max of them). */
static size_t edit_find(const sg_mcp_call *c, const char *f, size_t len, size_t *at, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; k < max && i + c->edit_old <= len;) {
        const char *hit = memmem(f + i, len - i, c->edit, c->edit_old);
        if (!hit)
            break;
        at[k++] = (size_t)(hit - f);
        i = (size_t)(hit - f) + c->edit_old;
    }
    return k;
}

/* The dialogue's step (tools.h): once the file's length and bytes are in,
 * the answer: "w\n" and the new content, or the exit code to end with. */
static int edit_reply(sg_mcp_call *c, sg_buf *out)
{
    const char *nl = memchr(c->out.data, '\n', c->out.len < 24 ? c->out.len : 24);
    if (!nl)
        return c->out.len < 24 ? 0 : sg_buf_puts(out, "3\n") < 0 ? -1 : 1;
    size_t hdr = (size_t)(nl - c->out.data) + 1;
    unsigned long long flen = strtoull(c->out.data, NULL, 10);
    if (flen > SG_MCP_FILE_MAX) /* the script refuses it first */
        return sg_buf_puts(out, "3\n") < 0 ? -1 : 1;
    if (c->out.len < hdr + flen)
        return 0;
    const char *f = c->out.data + hdr;
    size_t max = flen / c->edit_old + 1;
    sg_autofree size_t *at = malloc(max * sizeof *at);
    if (!at)
        return -1;
    c->edit_count = edit_find(c, f, flen, at, max);
    if (c->edit_count == 0 || (c->edit_count > 1 && !c->edit_all)) {
        c->edit_verdict = c->edit_count ? 5 : 4;
        return sg_buf_printf(out, "%d\n", c->edit_verdict) < 0 ? -1 : 1;
    }
    int r = sg_buf_puts(out, "w\n");
    size_t from = 0;
    for (size_t k = 0; k < c->edit_count; k++) {
        r |= sg_buf_append(out, f + from, at[k] - from);
        r |= sg_buf_append(out, c->edit + c->edit_old, c->edit_new);
        from = at[k] + c->edit_old;
    }
    r |= sg_buf_append(out, f + from, flen - from);
    return r < 0 ? -1 : 1;
}

static int shape_edit_file(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    if (c->edit_verdict == 4 && exit_code(res) == 4)
        return sg_buf_printf(t, "old_string not found in %s", c->path) < 0 ? -1 : 1;
    if (c->edit_verdict == 5 && exit_code(res) == 5)
        return sg_buf_printf(t, "old_string occurs %zu times in %s; add context to make it unique, or set "
                             "replace_all", c->edit_count, c->path) < 0 ? -1 : 1;
    if (!exec_ok(res))
        return file_failed(c, res, t);
    size_t n = c->edit_count;
    return sg_buf_printf(t, "replaced %zu occurrence%s in %s", n, n == 1 ? "" : "s", c->path);
}

/* ---- read_file -------------------------------------------------------------- */

static const char *plan_read_file(sg_mcp_call *c, const json_t *args, const char *ws, char *why, size_t n)
{
    (void)why;
    (void)n;
    json_t *jo = json_object_get(args, "offset"), *jl = json_object_get(args, "limit");
    json_int_t off = jo ? json_integer_value(jo) : 1, lim = jl ? json_integer_value(jl) : 0;
    if (off < 1 || (jl && lim < 1))
        return "offset and limit must be positive integers";
    char a_off[32], a_lim[32], a_max[32];
    snprintf(a_off, sizeof a_off, "%" JSON_INTEGER_FORMAT, off);
    if (jl)
        snprintf(a_lim, sizeof a_lim, "%" JSON_INTEGER_FORMAT, lim);
    else
        snprintf(a_lim, sizeof a_lim, "all");
    snprintf(a_max, sizeof a_max, "%u", SG_MCP_READ_MAX + 1);
    char *argv[] = {"/bin/sh", "-c", (char *)read_script, "sh", c->path, a_off, a_lim, a_max, NULL};
    c->req = exec_req(ws, c->tool->name, args, argv, 0);
    return NULL;
}

static int shape_read_file(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    if (!exec_ok(res))
        return file_failed(c, res, t);
    if (c->out.total <= SG_MCP_READ_MAX)
        return sg_buf_append(t, c->out.data, c->out.len);
    return sg_buf_append(t, c->out.data, SG_MCP_READ_MAX) |
           sg_buf_printf(t, "\n[truncated at %u bytes: read the rest with offset and limit]", SG_MCP_READ_MAX);
}

/* ---- checkpoint and rollback ------------------------------------------------ */

static const char *plan_checkpoint(sg_mcp_call *c, const json_t *args, const char *ws, char *why, size_t n)
{
    (void)ws;
    json_t *label = json_object_get(args, "label");
    if (label && json_string_length(label) > SG_CKPT_LABEL_MAX) {
        snprintf(why, n, "label is too long (at most %d bytes)", SG_CKPT_LABEL_MAX);
        return why;
    }
    sg_ctl_req r = {.op = SG_OP_CHECKPOINT, .v = SG_CTL_VERSION,
                    .u.checkpoint.label = label ? (char *)json_string_value(label) : "mcp checkpoint"};
    c->req = sg_ctl_req_encode(&r);
    return NULL;
}

static int shape_checkpoint(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    const char *id = json_string_value(json_object_get(res, "id"));
    int r = sg_buf_printf(t, "checkpoint %s", id ? id : "(no id)");
    const char *label = json_string_value(json_object_get(c->req, "label"));
    if (label)
        r |= sg_buf_printf(t, " (%.256s)", label);
    return r;
}

static const char *plan_rollback(sg_mcp_call *c, const json_t *args, const char *ws, char *why, size_t n)
{
    (void)ws;
    (void)why;
    (void)n;
    json_t *to = json_object_get(args, "to");
    if (to && (json_string_length(to) == 0 || json_string_length(to) > 128))
        return "to must be a checkpoint id";
    sg_ctl_req r = {.op = SG_OP_ROLLBACK, .v = SG_CTL_VERSION,
                    .u.rollback.to = to ? (char *)json_string_value(to) : NULL};
    c->req = sg_ctl_req_encode(&r);
    return NULL;
}

static int shape_rollback(const sg_mcp_call *c, const json_t *res, sg_buf *t)
{
    __attribute__((cleanup(sg_ctl_rollback_reply_free))) sg_ctl_rollback_reply rb = {0};
    sg_err err = {0};
    if (sg_ctl_decode_rollback_reply(res, &rb, &err) < 0)
        return sg_buf_printf(t, "the supervisor's rollback answer: %s\n", err.msg);
    json_t *changes = rb.changes;
    bool restored = rb.restored;
    const char *to = rb.to;
    if (!to)
        to = json_string_value(json_object_get(c->req, "to"));
    size_t nch = json_array_size(changes);
    int r = sg_buf_printf(t, "%s to checkpoint %s: %zu change%s\n", restored ? "rolled back" : "nothing restored",
                          to ? to : "(latest)", nch, nch == 1 ? "" : "s");
    size_t i;
    json_t *ch;
    json_array_foreach(changes, i, ch) {
        if (i >= 200) {
            r |= sg_buf_printf(t, "... and %zu more\n", nch - i);
            break;
        }
        const char *p = json_string_value(json_object_get(ch, "path"));
        const char *k = json_string_value(json_object_get(ch, "change"));
        r |= sg_buf_printf(t, "%s %.900s\n", k ? k : "changed", p ? p : "?");
    }
    return r;
}

/* ---- the table -------------------------------------------------------------- */

const sg_mcp_tool sg_mcp_tools[] = {
    {
        .name = "run_bash",
        .title = "Run a shell command",
        .description =
            "Runs a command with bash -c in the sandbox, in /workspace. Returns its stdout, its stderr "
            "and its exit code (the result is an error when the exit code is not 0). State persists "
            "between calls (files, background processes). Offline: the sandbox has no network. "
            "Calls that may write run one at a time, in the order they were sent.",
        .schema = "{\"properties\": {"
            "\"command\": {\"type\": \"string\", \"description\": \"The bash command line to run.\"}, "
            "\"timeout\": {\"type\": \"number\", \"description\": "
            "\"Seconds before the command is killed (default: the sandbox's).\", "
            "\"exclusiveMinimum\": 0, \"maximum\": 604800}}, "
            "\"required\": [\"command\"]}",
        .writes = true,
        .destructive = true,
        .out_cap = SG_MCP_OUTPUT_MAX,
        .plan = plan_run_bash,
        .shape = shape_run_bash,
    },
    {
        .name = "write_file",
        .title = "Write a file",
        .description =
            "Creates or overwrites a text file in the workspace with the given content (parent "
            "directories are created). Paths are relative to /workspace or absolute under it.",
        .schema = "{\"properties\": {" PATH_PROP ", "
            "\"content\": {\"type\": \"string\", \"description\": \"The complete new content of the file.\"}}, "
            "\"required\": [\"path\", \"content\"]}",
        .writes = true,
        .destructive = true,
        .out_cap = SG_MCP_OUTPUT_MAX,
        .plan = plan_write_file,
        .shape = shape_write_file,
    },
    {
        .name = "edit_file",
        .title = "Edit a file",
        .description =
            "Replaces an exact string in a file. old_string must occur exactly once unless "
            "replace_all is true; the call fails when it is missing or not unique (add context).",
        .schema = "{\"properties\": {" PATH_PROP ", "
            "\"old_string\": {\"type\": \"string\", \"description\": \"The exact text to replace.\"}, "
            "\"new_string\": {\"type\": \"string\", \"description\": \"The text to put in its place.\"}, "
            "\"replace_all\": {\"type\": \"boolean\", \"description\": \"Replace every occurrence (default false).\"}}, "
            "\"required\": [\"path\", \"old_string\", \"new_string\"]}",
        .writes = true,
        .destructive = true,
        .out_cap = SG_MCP_FILE_MAX + 32, /* the file, for the dialogue (edit_reply) */
        .plan = plan_edit_file,
        .shape = shape_edit_file,
        .reply = edit_reply,
    },
    {
        .name = "read_file",
        .title = "Read a file",
        .description =
            "Returns the text of a file in the workspace. offset (1-based line) and limit (lines) "
            "read a part of a large file.",
        .schema = "{\"properties\": {" PATH_PROP ", "
            "\"offset\": {\"type\": \"integer\", \"description\": \"First line to return (1-based).\", \"minimum\": 1}, "
            "\"limit\": {\"type\": \"integer\", \"description\": \"Most lines to return.\", \"minimum\": 1}}, "
            "\"required\": [\"path\"]}",
        .writes = false,
        .out_cap = SG_MCP_READ_MAX + 1,
        .plan = plan_read_file,
        .shape = shape_read_file,
    },
    {
        .name = "checkpoint",
        .title = "Checkpoint the workspace",
        .description = "Records the current state of the whole workspace and returns its id.",
        .schema = "{\"properties\": {"
            "\"label\": {\"type\": \"string\", \"description\": \"A short name for this checkpoint.\"}}}",
        .writes = false,
        .out_cap = SG_MCP_OUTPUT_MAX,
        .plan = plan_checkpoint,
        .shape = shape_checkpoint,
    },
    {
        .name = "rollback",
        .title = "Roll the workspace back",
        .description =
            "Restores the workspace exactly as it was at a checkpoint (default: the latest), "
            "undoing every change since, also those made by shell commands. Returns the changes.",
        .schema = "{\"properties\": {"
            "\"to\": {\"type\": \"string\", \"description\": \"Checkpoint id (default: the latest).\"}}}",
        .writes = true,
        .destructive = true,
        .out_cap = SG_MCP_OUTPUT_MAX,
        .plan = plan_rollback,
        .shape = shape_rollback,
    },
};
const size_t sg_mcp_ntools = SG_ARRAY_LEN(sg_mcp_tools);
_Static_assert(MCP_MAX_TIMEOUT_S == 604800, "run_bash's schema states the timeout bound");

const sg_mcp_tool *sg_mcp_tool_find(const char *name)
{
    for (size_t i = 0; i < sg_mcp_ntools; i++)
        if (strcmp(name, sg_mcp_tools[i].name) == 0)
            return &sg_mcp_tools[i];
    return NULL;
}

int sg_mcp_tool_names(sg_buf *b, int writes)
{
    int r = 0;
    bool first = true;
    for (size_t i = 0; i < sg_mcp_ntools; i++) {
        if (writes >= 0 && sg_mcp_tools[i].writes != (writes == 1))
            continue;
        r |= sg_buf_printf(b, "%s%s", first ? "" : ", ", sg_mcp_tools[i].name);
        first = false;
    }
    return r;
}

/* The schema of t, parsed; the table is ours, so a schema that does not
 * parse is a bug (the unit test parses every one). */
static json_t *schema_of(const sg_mcp_tool *t)
{
    json_t *s = json_loads(t->schema, JSON_REJECT_DUPLICATES, NULL);
    if (!s)
        abort();
    return s;
}

json_t *sg_mcp_tool_def(const sg_mcp_tool *t)
{
    json_t *s = schema_of(t);
    json_t *schema = json_pack("{s:s, s:O, s:b}", "type", "object", "properties", json_object_get(s, "properties"),
                               "additionalProperties", 0);
    json_t *req = json_object_get(s, "required");
    if (req)
        json_object_set(schema, "required", req);
    json_decref(s);
    bool ro = !t->writes;
    return json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}",
        "name", t->name, "title", t->title, "description", t->description, "inputSchema", schema,
        "annotations", "title", t->title, "readOnlyHint", ro, "destructiveHint", t->destructive,
        "idempotentHint", ro, "openWorldHint", 0);
}

static bool fits_type(const json_t *v, const char *type)
{
    if (strcmp(type, "string") == 0)
        return json_is_string(v);
    if (strcmp(type, "number") == 0)
        return json_is_number(v);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(v);
    if (strcmp(type, "boolean") == 0)
        return json_is_boolean(v);
    return false;
}

const char *sg_mcp_tool_check_args(const sg_mcp_tool *t, const json_t *args, char *why, size_t whylen)
{
    sg_autojson json_t *s = schema_of(t);
    json_t *props = json_object_get(s, "properties");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v) {
        json_t *p = json_object_get(props, k);
        if (!p) {
            snprintf(why, whylen, "unknown property '%.100s'", k);
            return why;
        }
        if (!fits_type(v, json_string_value(json_object_get(p, "type")))) {
            snprintf(why, whylen, "wrong type property '%s' (must be a %s)", k,
                     json_string_value(json_object_get(p, "type")));
            return why;
        }
    }
    size_t i;
    json_array_foreach(json_object_get(s, "required"), i, v) {
        if (!json_object_get(args, json_string_value(v))) {
            snprintf(why, whylen, "missing property '%s'", json_string_value(v));
            return why;
        }
    }
    return NULL;
}

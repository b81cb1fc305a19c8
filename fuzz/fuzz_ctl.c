/* Fuzzes the supervisor's control-request parser: any bytes a local client
 * may send as a REQ message, through the same calls the supervisor makes.
 *
 * Invariants:
 *  - sg_ctl_parse_req hands out an object whose "op" is a string, and op
 *    is that string;
 *  - a parsed exec request respects ctl.h's bounds: argv has 1 to
 *    SG_EXEC_MAX_ARGS entries and a non-empty command, env at most
 *    SG_EXEC_MAX_ENV entries, each KEY=VALUE with KEY [A-Za-z_][A-Za-z0-9_]*,
 *    no string holds a NUL (each is exactly its JSON string), cwd is
 *    absolute and at most 4096 bytes, timeout 0 or in (0, 604800], a tool
 *    has a name of 1-64 bytes, code_only iff "result" is "code", tty iff
 *    "tty" is there, detachable only with tty, no_record_input iff
 *    "record_input" is false; an exec request is refused when it names an
 *    unknown field;
 *    (also for an object parsed with JSON_ALLOW_NUL);
 *  - round trip: the parsed request written back as JSON parses to the same
 *    fields, and frees cleanly;
 *  - sg_exec_cmdline, for what is not `sh -c SCRIPT`, is the argv shell-
 *    quoted: a POSIX shell's word splitting of it gives argv back;
 *  - sg_ctl_asm_feed reassembles the input cut in parts: the same bytes,
 *    NUL-terminated, complete at the first non-PART message. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/json.h"
#include "wire/ctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t strv_len(char **v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

/* Each string is the JSON array's string, whole (no NUL cut it short). */
static void same_strings(char **v, const json_t *arr)
{
    if (strv_len(v) != json_array_size(arr))
        abort();
    for (size_t i = 0; v[i]; i++) {
        const json_t *s = json_array_get(arr, i);
        if (strlen(v[i]) != json_string_length(s) || strcmp(v[i], json_string_value(s)) != 0)
            abort();
    }
}

static bool env_key_ok(const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv || (kv[0] >= '0' && kv[0] <= '9'))
        return false;
    for (const char *p = kv; p < eq; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

static void check_bounds(const sg_exec_req *r, const json_t *req)
{
    size_t na = strv_len(r->argv);
    if (na < 1 || na > SG_EXEC_MAX_ARGS || !r->argv[0][0])
        abort();
    same_strings(r->argv, json_object_get(req, "argv"));
    if (r->env) {
        if (strv_len(r->env) > SG_EXEC_MAX_ENV)
            abort();
        same_strings(r->env, json_object_get(req, "env"));
        for (char **e = r->env; *e; e++)
            if (!env_key_ok(*e))
                abort();
    } else if (json_object_get(req, "env")) {
        abort();
    }
    if (r->cwd && (r->cwd[0] != '/' || strlen(r->cwd) > 4096 ||
                   strlen(r->cwd) != json_string_length(json_object_get(req, "cwd"))))
        abort();
    if (!r->cwd != !json_object_get(req, "cwd"))
        abort();
    if (r->timeout_s < 0 || r->timeout_s > 604800.0 || (r->timeout_s == 0) != !json_object_get(req, "timeout"))
        abort();
    if (!r->tool != !r->tool_name || !r->tool != !json_object_get(req, "tool"))
        abort();
    if (r->tool_name && (!r->tool_name[0] || strlen(r->tool_name) > 64 || !json_is_object((json_t *)r->tool)))
        abort();
    const char *res = json_string_value(json_object_get(req, "result"));
    if (r->code_only != (res && strcmp(res, "code") == 0))
        abort();
    if (r->tty != (json_object_get(req, "tty") != NULL) || (r->detachable && !r->tty) ||
        r->detachable != json_is_true(json_object_get(req, "detachable")) ||
        r->no_record_input != json_is_false(json_object_get(req, "record_input")))
        abort();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)req, key, v) {
        if (strcmp(key, "op") && strcmp(key, "argv") && strcmp(key, "env") && strcmp(key, "cwd") &&
            strcmp(key, "timeout") && strcmp(key, "tool") && strcmp(key, "result") && strcmp(key, "tty") &&
            strcmp(key, "record_input") && strcmp(key, "detachable"))
            abort();
    }
}

static json_t *strv_json(char **v)
{
    json_t *a = json_array();
    for (size_t i = 0; v && v[i]; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

/* Writes r back as a request and parses it again: the same fields. */
static void round_trip(const sg_exec_req *r)
{
    json_t *j = json_pack("{s:s, s:o}", "op", "exec", "argv", strv_json(r->argv));
    if (r->env)
        json_object_set_new(j, "env", strv_json(r->env));
    if (r->cwd)
        json_object_set_new(j, "cwd", json_string(r->cwd));
    if (r->timeout_s)
        json_object_set_new(j, "timeout", json_real(r->timeout_s));
    if (r->tool)
        json_object_set(j, "tool", r->tool);
    if (r->code_only)
        json_object_set_new(j, "result", json_string("code"));
    if (r->tty)
        json_object_set_new(j, "tty", json_pack("{s:i, s:i}", "rows", r->winsz.rows, "cols", r->winsz.cols));
    if (r->no_record_input)
        json_object_set_new(j, "record_input", json_false());
    if (r->detachable)
        json_object_set_new(j, "detachable", json_true());
    char *s = sg_json_dump(j);
    json_decref(j);
    sg_err err;
    const char *op = NULL;
    json_t *again = s ? sg_ctl_parse_req(s, strlen(s), &op, &err) : NULL;
    sg_exec_req r2;
    if (!again || strcmp(op, "exec") != 0 || sg_exec_req_parse(again, &r2, &err) < 0)
        abort();
    check_bounds(&r2, again);
    if (strv_len(r->argv) != strv_len(r2.argv) || strv_len(r->env) != strv_len(r2.env) ||
        !r->cwd != !r2.cwd || (r->cwd && strcmp(r->cwd, r2.cwd) != 0) ||
        r->timeout_s != r2.timeout_s || r->code_only != r2.code_only || r->tty != r2.tty ||
        r->winsz.rows != r2.winsz.rows || r->winsz.cols != r2.winsz.cols || r->detachable != r2.detachable ||
        r->no_record_input != r2.no_record_input ||
        !r->tool_name != !r2.tool_name || (r->tool_name && strcmp(r->tool_name, r2.tool_name) != 0) ||
        (r->tool && !json_equal(r->tool, r2.tool)))
        abort();
    for (size_t i = 0; r->argv[i]; i++)
        if (strcmp(r->argv[i], r2.argv[i]) != 0)
            abort();
    for (size_t i = 0; r->env && r->env[i]; i++)
        if (strcmp(r->env[i], r2.env[i]) != 0)
            abort();
    sg_exec_req_free(&r2);
    json_decref(again);
    free(s);
}

/* POSIX shell word splitting of a line of spaces, unquoted words, '...'
 * and \x; compares the words to argv. */
static void check_cmdline(char **argv)
{
    char *line = sg_exec_cmdline(argv);
    if (!line)
        abort();
    const char *b = strrchr(argv[0], '/');
    b = b ? b + 1 : argv[0];
    if ((!strcmp(b, "sh") || !strcmp(b, "bash") || !strcmp(b, "dash")) && argv[1] &&
        !strcmp(argv[1], "-c") && argv[2] && !argv[3]) {
        if (strcmp(line, argv[2]) != 0)
            abort(); /* the script itself */
        free(line);
        return;
    }
    size_t n = strlen(line), k = 0;
    char *word = malloc(n + 1);
    const char *p = line;
    while (*p) {
        if (*p == ' ') {
            p++;
            continue;
        }
        size_t w = 0;
        while (*p && *p != ' ') {
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q)
                    abort(); /* unbalanced quote */
                memcpy(word + w, p + 1, (size_t)(q - p - 1));
                w += (size_t)(q - p - 1);
                p = q + 1;
            } else if (*p == '\\') {
                if (!p[1])
                    abort();
                word[w++] = p[1];
                p += 2;
            } else {
                word[w++] = *p++;
            }
        }
        word[w] = '\0';
        if (!argv[k] || strcmp(argv[k], word) != 0)
            abort();
        k++;
    }
    if (argv[k])
        abort();
    free(word);
    free(line);
}

/* The input cut in parts, fed as the CLI feeds a RESULT's messages. */
static void check_asm(const uint8_t *data, size_t size)
{
    sg_ctl_asm a = {0};
    sg_err err;
    size_t off = 0, part = size ? (size_t)data[0] % 7 + 1 : 1;
    int rc = 0;
    while (rc == 0) {
        size_t n = size - off < part ? size - off : part;
        uint8_t type = off + n == size ? SG_CTL_RESULT : SG_CTL_RESULT_PART;
        rc = sg_ctl_asm_feed(&a, type, (const char *)data + off, n, &err);
        off += n;
        if ((rc == 1) != (type == SG_CTL_RESULT))
            abort();
    }
    if (a.len != size || (size && memcmp(a.buf, data, size) != 0) || a.buf[a.len] != '\0')
        abort();
    sg_ctl_asm_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_asm(data, size);
    sg_err err = {0};
    const char *op = NULL;
    json_t *req = sg_ctl_parse_req((const char *)data, size, &op, &err);
    sg_exec_req r;
    if (!req) {
        /* refused */
    } else if (!json_is_object(req) || !op || op != json_string_value(json_object_get(req, "op"))) {
        abort();
    } else if (sg_exec_req_parse(req, &r, &err) == 0) {
        check_bounds(&r, req);
        round_trip(&r);
        check_cmdline(r.argv);
        sg_exec_req_free(&r);
        if (r.argv || r.env || r.cwd || r.tool || r.tool_name)
            abort(); /* freed and cleared */
    } else if (r.argv || r.env || r.cwd || r.tool || r.tool_name) {
        abort(); /* a refusal hands nothing out (and leaks nothing) */
    }
    json_decref(req);
    /* sg_exec_req_parse's contract holds for any object, also one whose
     * strings hold NUL (which sg_ctl_parse_req refuses before it). */
    req = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (json_is_object(req) && sg_exec_req_parse(req, &r, &err) == 0) {
        check_bounds(&r, req);
        sg_exec_req_free(&r);
    }
    json_decref(req);
    return 0;
}

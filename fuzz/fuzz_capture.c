/* libFuzzer target: the capture's events for one exec (capture.c), made
 * from learner bytes: the command's argv, its output, and an agent's tool
 * object, on a real spool: a capture made by sg_capture_new_on_spool (no
 * uplink daemon, watcher or loop; delivery is not under test).
 *
 * Input: byte 0 argc (1..8), byte 1 flags (1 timed out, 2 a tool call,
 * 4 output limit hit, bits 3-7 exit code), byte 2 how many times the output
 * is repeated (bits 0-6 mod 40, to pass the 64 KiB tail; bit 7: in one
 * write instead of one a repeat), then argc NUL-terminated argv
 * entries, then the output (first half stdout, second half stderr).
 *
 * Invariants:
 *  - every frame spooled is one the ingest accepts (sg_event_validate and
 *    sg_frame_scan with the sandbox's id, and its ts check), seqs
 *    contiguous from 0;
 *  - the events are stdin, activity, command, stdout/stderr for each stream
 *    that had output, run_result or test_result (the test rule's verdict),
 *    a limit per limit hit, activity, in that order;
 *  - stdin's line and the results' cmd are the command line
 *    (sg_exec_cmdline) made valid UTF-8, command's argv the argv made valid
 *    UTF-8, and the results carry the exit code: nothing the learner typed
 *    is dropped from the record;
 *  - a stream's event holds its last SG_OUTPUT_CAPTURE_MAX bytes made valid
 *    UTF-8, its byte count, and whether it was cut. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/json.h"
#include "base/util.h"
#include "capture/capture.h"
#include "capture/testrule.h"
#include "delivery/spool.h"
#include "ingest/framescan.h"
#include "wire/ctl.h"
#include "wire/event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SANDBOX "0123456789ab"

static json_t *clean_string(const char *s, size_t n)
{
    size_t cn;
    char *c = sg_utf8_sanitize(s, n, &cn);
    json_t *j = json_stringn(c, cn);
    free(c);
    return j;
}

/* The tail a stream's event must hold. */
static void check_stream(json_t *p, const char *name, const uint8_t *out, size_t n, unsigned rep)
{
    uint64_t total = (uint64_t)n * rep;
    size_t keep = total < SG_OUTPUT_CAPTURE_MAX ? (size_t)total : SG_OUTPUT_CAPTURE_MAX;
    char *t = malloc(keep + 1);
    for (size_t i = 0; i < keep; i++) /* byte i of the tail is byte total-keep+i of the stream */
        t[i] = (char)out[(size_t)((total - keep + i) % n)];
    json_t *want = clean_string(t, keep);
    free(t);
    if (strcmp(json_string_value(json_object_get(p, "stream")), name) != 0 ||
        !json_equal(json_object_get(p, "data"), want) ||
        json_integer_value(json_object_get(p, "bytes")) != (json_int_t)total ||
        json_is_true(json_object_get(p, "truncated")) != (total > SG_OUTPUT_CAPTURE_MAX))
        abort();
    json_decref(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    size_t argc = data[0] % 8 + 1;
    uint8_t flags = data[1];
    unsigned rep = (data[2] & 0x7f) % 40 + 1;
    bool one_write = data[2] & 0x80;
    const uint8_t *p = data + 3, *end = data + size;
    char *argv[9];
    size_t k = 0;
    while (k < argc && p < end) {
        const uint8_t *z = memchr(p, 0, (size_t)(end - p));
        if (!z)
            break;
        argv[k++] = (char *)p;
        p = z + 1;
    }
    argv[k] = NULL;
    if (!k || !argv[0][0])
        return 0;
    const uint8_t *out = p, *err_out = p + (end - p) / 2;
    size_t nout = (size_t)(err_out - out), nerr = (size_t)(end - err_out);

    char dir[128];
    snprintf(dir, sizeof dir, "/dev/shm/sg-fuzz-capture-%d", (int)getpid());
    sg_err err;
    sg_rm_rf(dir, &err);
    sg_spool *sp = sg_spool_open(dir, NULL, &err);
    sg_capture *c = sp ? sg_capture_new_on_spool(SANDBOX, sp, &err) : NULL;
    if (!c)
        abort();
    json_t *tool = NULL;
    if (flags & 2)
        tool = json_pack("{s:s, s:{s:o}}", "name", "run_bash", "arguments", "command",
                         clean_string(argv[k - 1], strlen(argv[k - 1])));
    sg_capture_exec *e = sg_capture_exec_begin(c, 7, argv, "/workspace", tool);
    if (one_write) {
        for (int s2 = 0; s2 < 2; s2++) {
            const uint8_t *b = s2 ? err_out : out;
            size_t n = s2 ? nerr : nout;
            char *all = malloc(n * rep + 1);
            for (unsigned r = 0; r < rep; r++)
                memcpy(all + (size_t)r * n, b, n);
            sg_capture_exec_output(e, s2, all, n * rep);
            free(all);
        }
    } else {
        for (unsigned r = 0; r < rep; r++) {
            sg_capture_exec_output(e, false, (const char *)out, nout);
            sg_capture_exec_output(e, true, (const char *)err_out, nerr);
        }
    }
    json_t *result = json_pack("{s:i, s:f, s:b, s:b}", "exit_code", flags >> 3, "wall_s", 0.25,
                               "timed_out", flags & 1, "output_limit_hit", (flags & 4) != 0);
    sg_capture_exec_end(e, result);

    /* What was spooled, as the ingest and a reader of the record see it. */
    char *cmd = sg_exec_cmdline(argv);
    json_t *want_cmd = clean_string(cmd, strlen(cmd));
    free(cmd);
    bool is_test = sg_testrule_is_test_argv(argv);
    const char *want_kinds[12];
    size_t nk = 0;
    want_kinds[nk++] = "stdin";
    want_kinds[nk++] = "activity";
    want_kinds[nk++] = "command";
    if (nout)
        want_kinds[nk++] = "stdout";
    if (nerr)
        want_kinds[nk++] = "stdout";
    want_kinds[nk++] = is_test ? "test_result" : "run_result";
    if (flags & 1)
        want_kinds[nk++] = "limit";
    if (flags & 4)
        want_kinds[nk++] = "limit";
    want_kinds[nk++] = "activity";

    sg_spool_cursor *cur = sg_spool_cursor_new(sp, -1, 0, &err);
    char *rec;
    size_t len, i = 0;
    int64_t seq;
    int rc;
    bool seen_out = false;
    while ((rc = sg_spool_cursor_next(cur, INT64_MAX, &rec, &len, &seq, &err)) == 1) {
        sg_event ev;
        sg_frame_view v;
        if (seq != (int64_t)i || i >= nk)
            abort();
        if (sg_event_validate(rec, len, SANDBOX, &ev, &err) != 0)
            abort(); /* the ingest would refuse it, and the stream would stall */
        if (sg_frame_scan(rec, len, SANDBOX, &v, &err) != 0)
            abort();
        sg_frame_view_clear(&v);
        if (!sg_event_ts_valid(ev.ts, strlen(ev.ts)))
            abort();
        const char *kind = sg_event_kind_name(ev.kind);
        if (strcmp(kind, want_kinds[i]) != 0)
            abort();
        json_t *pl = ev.payload;
        if (!strcmp(kind, "stdin") && !json_equal(json_object_get(pl, "line"), want_cmd))
            abort(); /* the command line lost or changed */
        if (!strcmp(kind, "command")) {
            json_t *av = json_object_get(pl, "argv");
            if (!json_equal(json_object_get(pl, "cmd"), want_cmd) || json_array_size(av) != k)
                abort();
            for (size_t a = 0; a < k; a++) {
                json_t *want = clean_string(argv[a], strlen(argv[a]));
                if (!json_equal(json_array_get(av, a), want))
                    abort();
                json_decref(want);
            }
        }
        if (!strcmp(kind, "stdout")) {
            bool first = !seen_out && nout;
            check_stream(pl, first ? "stdout" : "stderr", first ? out : err_out, first ? nout : nerr, rep);
            seen_out = true;
        }
        if ((!strcmp(kind, "run_result") || !strcmp(kind, "test_result")) &&
            (!json_equal(json_object_get(pl, "cmd"), want_cmd) ||
             json_integer_value(json_object_get(pl, "exit_code")) != flags >> 3 ||
             !json_is_integer(json_object_get(pl, "exit_code"))))
            abort(); /* the result lost its command or exit code */
        sg_event_clear(&ev);
        i++;
    }
    if (rc < 0 || i != nk)
        abort();
    sg_spool_cursor_free(cur);
    json_decref(want_cmd);
    json_decref(result);
    json_decref(tool);
    sg_capture_free(c); /* and its spool */
    sg_rm_rf(dir, &err);
    return 0;
}

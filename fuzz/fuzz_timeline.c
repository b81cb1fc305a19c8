/* libFuzzer target: the timeline `sandglass events` prints (sg_tl_print,
 * src/cli/timeline.c). Stored
 * events are learner-controlled: commands, output, file names, and, with
 * a stream token, any field of a frame.
 *
 * Input: byte 0 picks the event's kind (or 0xff: the rest is the whole
 * event as JSON), byte 1 bit 0 shows the stream columns, bits 1-5 the
 * options (--all, --full, --diff, --utc), bit 6 an event held
 * before it (a command: its output is held until its result); the rest, made
 * valid UTF-8 (as every string the ingest stores is), fills every string
 * field the printer reads.
 *
 * Invariants (issue 13: "Render control characters visibly"):
 *  - whole lines: the output is empty (a hidden event) or ends in '\n'
 *    (an event prints its line and its output or diff below it);
 *  - no byte a terminal acts on: no C0 control but that newline, no DEL;
 *  - valid UTF-8 without C1 controls, line or paragraph separators, or
 *    bidirectional marks, embeddings, overrides and isolates.
 * These are checked when built with -DSG_FUZZ_TIMELINE_STRICT
 * (fuzz/meson.build: timeline_strict, on); without it only "no crash".
 * The printer before 2a43aac printed learner bytes raw and fails them on
 * the first seed. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/json.h"
#include "cli/timeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const kinds[] = {"stdin",         "command",  "stdout",     "run_result", "test_result",
                                    "file_diff",     "activity", "checkpoint", "limit",      "rollback",
                                    "session_abort", "sandbox",  "process",    "bulk"};
static const char *const fields[] = {"line",  "cmd",   "data", "stream", "path", "change", "old_path", "diff",
                                     "state", "label", "id",   "to",     "by",   "reason", "what",     "error"};

static int out_fd = -1;

#ifdef SG_FUZZ_TIMELINE_STRICT
/* The code point of the UTF-8 sequence at p (n bytes left), its length in
 * *len; -1 when it is not well formed. */
static long decode(const unsigned char *p, size_t n, size_t *len)
{
    json_t *s = NULL;
    for (size_t l = 1; l <= 4 && l <= n; l++) {
        if ((s = json_stringn((const char *)p, l))) {
            /* jansson accepts exactly the well-formed sequences */
            *len = l;
            json_decref(s);
            long c = p[0] < 0x80 ? p[0] : p[0] < 0xe0 ? p[0] & 0x1f : p[0] < 0xf0 ? p[0] & 0x0f : p[0] & 0x07;
            for (size_t i = 1; i < l; i++)
                c = c << 6 | (p[i] & 0x3f);
            return c;
        }
    }
    return -1;
}
#endif

static void check_output(const unsigned char *o, size_t n)
{
#ifdef SG_FUZZ_TIMELINE_STRICT
    if (n > 0 && o[n - 1] != '\n')
        abort(); /* not whole lines */
    for (size_t i = 0; i < n;) {
        size_t l = 1;
        long c = decode(o + i, n - i, &l);
        if (c < 0)
            abort(); /* invalid UTF-8 */
        if ((c < 0x20 && c != '\n') || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == 0x2028 ||
            c == 0x2029 || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) ||
            c == 0x200e || c == 0x200f || c == 0x061c)
            abort(); /* a character a terminal acts on */
        i += l;
    }
#else
    (void)o;
    (void)n;
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (out_fd < 0) {
        /* stdout goes to a memfd: what the printer prints is read back */
        out_fd = memfd_create("timeline", MFD_CLOEXEC);
        if (out_fd < 0 || dup2(out_fd, STDOUT_FILENO) < 0)
            abort();
    }
    uint8_t k = data[0], flags = data[1];
    data += 2;
    size -= 2;
    json_t *ev;
    if (k == 0xff) {
        ev = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
        if (!json_is_object(ev)) {
            json_decref(ev);
            return 0;
        }
    } else {
        size_t n;
        char *s = sg_utf8_sanitize((const char *)data, size, &n);
        if (!s)
            return 0;
        json_t *p = json_object();
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            json_object_set_new(p, fields[i], json_stringn(s, n));
        json_object_set_new(p, "exit_code", json_integer(flags >> 1));
        ev = json_pack("{s:s, s:I, s:s%, s:o, s:s%, s:s%, s:s%}", "kind",
                       kinds[k % (sizeof kinds / sizeof kinds[0])], "seq", (json_int_t)size, "ts", s, n,
                       "payload", p, "learner", s, n, "task", s, n, "sandbox", s, n);
        if (k & 0x80) /* the kind itself from the learner */
            json_object_set_new(ev, "kind", json_stringn(s, n));
        free(s);
    }
    if (ftruncate(out_fd, 0) < 0 || lseek(out_fd, 0, SEEK_SET) < 0)
        abort();
    sg_tl_printer tp = {.show_stream = flags & 1,
                     .all = flags & 2,
                     .full = flags & 4,
                     .diff = flags & 8,
                     .utc = flags & 16}; /* no colour: its ESC is ours, the check would take it for a leak */
    if (flags & 64) {                    /* a command before it, whose result it may be */
        json_t *c = json_pack("{s:s, s:I, s:s, s:{s:s}}", "kind", "command", "seq", (json_int_t)0, "ts",
                              "2026-12-03T13:05:02.123Z", "payload", "cmd", "make test");
        sg_tl_print(&tp, c);
        json_decref(c);
    }
    sg_tl_print(&tp, ev);
    sg_tl_flush(&tp, NULL);
    fflush(stdout);
    json_decref(ev);
    off_t n = lseek(out_fd, 0, SEEK_CUR);
    unsigned char *o = malloc((size_t)n + 1);
    if (n < 0 || pread(out_fd, o, (size_t)n, 0) != n)
        abort();
    check_output(o, (size_t)n);
    free(o);
    return 0;
}

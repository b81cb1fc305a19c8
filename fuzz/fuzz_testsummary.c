/* libFuzzer target: the test runners' summaries (testsummary.c) on learner
 * output.
 *
 * Invariants:
 *  - run = passed + failed + errors, no count over SG_TS_COUNT_MAX;
 *  - at most SG_TS_NAMES_MAX names, each at most SG_TS_NAME_MAX bytes of
 *    valid UTF-8 without control characters, and none without a runner;
 *  - deterministic: the same output gives the same summary;
 *  - the JSON payload holds the same counts and names, and an outcome of
 *    the four. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capture/testsummary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool valid_utf8(const char *s)
{
    json_t *j = json_string(s); /* jansson refuses invalid UTF-8 */
    bool ok = j != NULL;
    json_decref(j);
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 && *s != '\t')
            return false;
    return ok;
}

static void check(const sg_testsummary *s)
{
    if (s->run != s->passed + s->failed + s->errors)
        abort();
    if (s->passed > SG_TS_COUNT_MAX || s->failed > SG_TS_COUNT_MAX || s->errors > SG_TS_COUNT_MAX ||
        s->skipped > SG_TS_COUNT_MAX)
        abort();
    if (s->nnames > SG_TS_NAMES_MAX || (!s->runner && (s->nnames || s->run || s->skipped)))
        abort();
    for (size_t i = 0; i < s->nnames; i++)
        if (!s->names[i][0] || strlen(s->names[i]) > SG_TS_NAME_MAX || !valid_utf8(s->names[i]))
            abort();
}

static void check_json(const sg_testsummary *s, int code)
{
    json_t *res = json_pack("{s:i}", "exit_code", code);
    json_t *r = json_object();
    sg_testsummary_to_json(s, res, r);
    const char *o = json_string_value(json_object_get(r, "outcome"));
    if (!o || (strcmp(o, "passed") && strcmp(o, "failed") && strcmp(o, "no_tests") && strcmp(o, "error")))
        abort();
    if (json_is_true(json_object_get(r, "parsed")) != (s->runner != NULL))
        abort();
    if (s->runner) {
        json_t *names = json_object_get(r, "failing_tests");
        if (json_array_size(names) != s->nnames ||
            json_integer_value(json_object_get(r, "run")) != (json_int_t)s->run)
            abort();
        if ((s->failed || s->errors) && strcmp(o, "failed"))
            abort();
    }
    json_decref(r);
    json_decref(res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_testsummary *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    if (sg_testsummary_parse((const char *)data, size, a) == 0 &&
        sg_testsummary_parse((const char *)data, size, b) == 0) {
        check(a);
        if (a->runner != b->runner || a->run != b->run || a->skipped != b->skipped || a->nnames != b->nnames)
            abort();
        for (size_t i = 0; i < a->nnames; i++)
            if (strcmp(a->names[i], b->names[i]))
                abort();
        check_json(a, size ? data[0] % 3 : 0);
    }
    free(a);
    free(b);
    return 0;
}

/* libFuzzer target: learner-written JUnit XML reports (capture/junit.c).
 *
 * Invariants:
 *  - a parse that fails says nothing (no runner, no counts, no names);
 *  - run = passed + failed + errors, no count over SG_TS_COUNT_MAX;
 *  - at most SG_TS_NAMES_MAX names, each non-empty, at most SG_TS_NAME_MAX
 *    bytes of valid UTF-8, and no more names than failed + errors;
 *  - deterministic; the command-line reader never writes past its buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capture/junit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const sg_testsummary *s, int rc)
{
    if (rc < 0 && (s->runner || s->run || s->skipped || s->nnames))
        abort();
    if (s->run != s->passed + s->failed + s->errors)
        abort();
    if (s->passed > SG_TS_COUNT_MAX || s->failed > SG_TS_COUNT_MAX || s->errors > SG_TS_COUNT_MAX ||
        s->skipped > SG_TS_COUNT_MAX)
        abort();
    if (s->nnames > SG_TS_NAMES_MAX || s->nnames > s->failed + s->errors)
        abort();
    for (size_t i = 0; i < s->nnames; i++) {
        json_t *j = json_string(s->names[i]); /* jansson refuses invalid UTF-8 */
        if (!j || !s->names[i][0] || strlen(s->names[i]) > SG_TS_NAME_MAX)
            abort();
        json_decref(j);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_testsummary *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    int ra = sg_junit_parse((const char *)data, size, a);
    int rb = sg_junit_parse((const char *)data, size, b);
    check(a, ra);
    if (ra != rb || a->run != b->run || a->skipped != b->skipped || a->nnames != b->nnames)
        abort();
    for (size_t i = 0; i < a->nnames; i++)
        if (strcmp(a->names[i], b->names[i]))
            abort();
    free(a);
    free(b);
    /* the same bytes as a shell line asking for a report */
    char *line = strndup((const char *)data, size); /* up to a NUL byte */
    char *argv[] = {"sh", "-c", line, NULL};
    char path[SG_JUNIT_PATH_MAX];
    if (sg_junit_report_arg(argv, path) && strlen(path) >= SG_JUNIT_PATH_MAX)
        abort();
    free(line);
    return 0;
}

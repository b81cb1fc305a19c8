/* testsummary: the counts a test runner printed about its own run, read
 * from the tail of a test command's output (sans I/O: bytes in, a struct
 * out), so `test_result` says what ran, not only the exit status.
 *
 * Runners: pytest, unittest, jest, vitest, mocha, go test, cargo test,
 * rspec. Each line is matched once against each runner's fixed patterns
 * (after dropping terminal escape sequences and CRs, and cut to
 * TS_LINE_MAX bytes), so the work is linear in the input, and the state is
 * fixed-size whatever the input. Several summaries of one runner add up
 * (cargo's one per test binary, go's one per package, two commands on one
 * line); of different runners, the one whose summary came last is kept.
 *
 * The output is hostile (the learner's program writes it): counts are
 * capped, run = passed + failed + errors always holds, at most
 * SG_TS_NAMES_MAX failing names are kept, each at most SG_TS_NAME_MAX bytes
 * of valid UTF-8. */
#ifndef SG_TESTSUMMARY_H
#define SG_TESTSUMMARY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_TS_NAMES_MAX 50
#define SG_TS_NAME_MAX 200
#define SG_TS_COUNT_MAX 1000000000000ULL /* a count past this is read as this */

typedef struct sg_testsummary {
    const char *runner; /* a static name; NULL: no runner's summary found */
    uint64_t run, passed, failed, errors, skipped;
    bool no_tests; /* the runner said that no test ran */
    bool partial;  /* only failures are listed (go test without -v) */
    bool names_truncated;
    size_t nnames;
    char names[SG_TS_NAMES_MAX][SG_TS_NAME_MAX + 1]; /* valid UTF-8 */
} sg_testsummary;

/* Parses len bytes of output. Returns 0, or -1 (out of memory; out then
 * says nothing parsed). */
int sg_testsummary_parse(const char *buf, size_t len, sg_testsummary *out);

/* Copies a failing test's name into dst (SG_TS_NAME_MAX + 1 bytes): cut to
 * SG_TS_NAME_MAX bytes of valid UTF-8, never inside a character. */
void sg_testsummary_name_copy(char *dst, const char *src);

/* passed, failed, no_tests or error, from the summary and the exec's
 * result (exit_code, timed_out, killed_by as in run_result). */
const char *sg_testsummary_outcome(const sg_testsummary *s, const json_t *result);

/* Adds runner, parsed, outcome, the counts and failing_tests to a
 * test_result payload r. */
void sg_testsummary_to_json(const sg_testsummary *s, const json_t *result, json_t *r);

#endif

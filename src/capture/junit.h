/* junit: a test runner's JUnit XML report read into a test summary (sans
 * I/O: bytes in, a struct out), and which report an exec's command line
 * asks a runner to write, so `test_result` takes its counts and failing
 * tests' names from the runner's own report (capture.c reads it from the
 * workspace with the contents' bounded reads, contents.h).
 *
 * The report is hostile (the learner's program can write any bytes there):
 * at most SG_JUNIT_MAX_BYTES are parsed, elements nest at most
 * SG_JUNIT_MAX_DEPTH deep, a document type declaration (and with it every
 * entity) is refused, the counts are capped at SG_TS_COUNT_MAX, at most
 * SG_TS_NAMES_MAX failing names are kept, each cut to SG_TS_NAME_MAX bytes
 * of valid UTF-8 (testsummary.h). The parser is expat.
 *
 * Counting: each <testcase> is one test: failed when it holds <failure>,
 * an error when it holds <error> (and no <failure>), skipped when it holds
 * <skipped>, else passed; its name is "classname.name" (or name alone).
 * A report without any <testcase> is read from its suites' attributes
 * (tests, failures, errors, skipped or disabled) instead: the root
 * <testsuite>'s, or the sum over the <testsuite>s directly under the root
 * <testsuites>. */
#ifndef SG_JUNIT_H
#define SG_JUNIT_H

#include <stdbool.h>
#include <stddef.h>

#include "capture/testsummary.h"

#define SG_JUNIT_MAX_BYTES (4u * 1024 * 1024)
#define SG_JUNIT_MAX_DEPTH 64
#define SG_JUNIT_PATH_MAX 1024

/* Parses len bytes of a JUnit XML report into out (runner "junit").
 * Returns 0, or -1 when the bytes are not such a report (not well-formed
 * XML, too large, too deep, a DOCTYPE, no <testsuites>/<testsuite> root,
 * out of memory): out then says nothing parsed (runner NULL). */
int sg_junit_parse(const char *buf, size_t len, sg_testsummary *out);

/* The report path a command asks its test runner to write, copied into
 * path (SG_JUNIT_PATH_MAX bytes), as it was given (relative to the exec's
 * cwd or absolute). Understood: pytest's --junitxml=P, --junitxml P,
 * --junit-xml=P, --junit-xml P; gotestsum's --junitfile=P / --junitfile P;
 * vitest's --outputFile.junit=P. argv is looked into as words; `sh -c
 * LINE` (any shell, as testrule.h) as LINE split into words (quotes
 * honoured). The last one given wins. Returns whether one was found. */
bool sg_junit_report_arg(char *const *argv, char *path);

#endif

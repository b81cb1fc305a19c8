/* libFuzzer target: the test rule (testrule.c) on learner command lines.
 * The input is both a command line (NUL bytes read as newlines) and an
 * argv (split at NUL bytes).
 *
 * Invariants:
 *  - deterministic: the same verdict twice, for the line and for the argv;
 *  - the argv's verdict is the verdict of its recorded command line
 *    (sg_exec_cmdline, what the timeline shows): a command recorded as
 *    `pytest 'a b'` is a test exactly when its argv is. For `sh -c SCRIPT`,
 *    which is recorded as SCRIPT, the argv is compared as zsh -c SCRIPT
 *    (the same rule, without the recording's shortcut);
 *  - a finished simple command before a line changes nothing:
 *    "true; LINE" is a test exactly when LINE is;
 *  - bounded: argv words past the rule's limits are cut, never overrun
 *    (ASan), whatever their number and length. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capture/testrule.h"
#include "wire/ctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 100

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size + 1);
    memcpy(line, data, size);
    line[size] = '\0';
    for (size_t i = 0; i < size; i++)
        if (!line[i])
            line[i] = '\n';
    bool t = sg_testrule_is_test_line(line);
    if (sg_testrule_is_test_line(line) != t)
        abort();
    char *prefixed = malloc(size + 7);
    memcpy(prefixed, "true; ", 6);
    memcpy(prefixed + 6, line, size + 1);
    if (sg_testrule_is_test_line(prefixed) != t)
        abort();
    free(prefixed);
    free(line);

    /* argv: the input split at NUL bytes (a trailing NUL ends the last). */
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    size_t argc = 0;
    for (char *p = buf; p < buf + size && argc < MAX_ARGS; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;
    if (argc && argv[0][0]) {
        bool ta = sg_testrule_is_test_argv(argv);
        if (sg_testrule_is_test_argv(argv) != ta)
            abort();
        const char *b = strrchr(argv[0], '/');
        b = b ? b + 1 : argv[0];
        char *saved = argv[0];
        if ((!strcmp(b, "sh") || !strcmp(b, "bash") || !strcmp(b, "dash")) && argc == 3 &&
            !strcmp(argv[1], "-c"))
            argv[0] = (char *)"zsh";
        char *cmd = sg_exec_cmdline(argv);
        if (!cmd)
            abort();
        if (sg_testrule_is_test_line(cmd) != ta)
            abort();
        argv[0] = saved;
        free(cmd);
    }
    free(buf);
    return 0;
}

/* sandglass shell ID --repl: the original agent's line mode, without a
 * terminal (seeds/003, run_command): each line of stdin, stripped and
 * unless empty, runs as `sh -c LINE` in the workspace as one ordinary exec,
 * so the capture reports it as the original did — stdin, activity command,
 * command, stdout per stream, run_result or test_result, activity idle —
 * with a checkpoint before it, its file_diff and process events besides.
 *
 * Where this differs from the original, on purpose: each line's stdin is
 * /dev/null (the original's command inherited the REPL's own stdin and
 * could swallow the lines after it); its output is also shown here (the
 * original kept it for the events only); the test rule is sandglass's
 * (testrule.h), not "test" anywhere in the line (`cat test.txt` is not a
 * test). At EOF the REPL ends with the last line's exit status; the
 * capture of file changes goes on in the supervisor until the sandbox is
 * destroyed, as the original's daemon mode did, without this process. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "cli/cmds.h"
#include "cli/report.h"

#define REPL_EXIT_INTERNAL 125
#define REPL_LINE_MAX (32 * 1024) /* a line longer is refused (an exec request is 64 KiB) */

/* The line without the white space around it, in place. */
static char *strip(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')
        s++;
    size_t n = strlen(s);
    while (n && strchr(" \t\n\r\f\v", s[n - 1]))
        s[--n] = 0;
    return s;
}

/* One line as `sandglass exec ID [opts] -- sh -c LINE`, under the name
 * shell. The exec's signal handlers are its own while it runs; between
 * lines a signal ends the REPL, as the original's KeyboardInterrupt did. */
static int run_line(const char *id, char **opts, int nopts, char *line)
{
    char **xargv = calloc((size_t)nopts + 8, sizeof *xargv);
    if (!xargv)
        return REPL_EXIT_INTERNAL;
    int xn = 0;
    xargv[xn++] = "shell";
    xargv[xn++] = (char *)id;
    for (int i = 0; i < nopts; i++)
        xargv[xn++] = opts[i];
    xargv[xn++] = "--";
    xargv[xn++] = "sh";
    xargv[xn++] = "-c";
    xargv[xn++] = line;
    xargv[xn] = NULL;
    optind = 0;
    sg_cmd_exec_reset();
    int code = sg_cmd_exec_as("shell", xn, xargv);
    free(xargv);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    fflush(stdout);
    return code;
}

int sg_cli_shell_repl(const char *id, char **opts, int nopts)
{
    /* The lines come on our stdin; each command's stdin is /dev/null. */
    int lines_fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (lines_fd < 0 || null < 0 || dup2(null, 0) < 0) {
        sg_cli_sayf("shell", "cannot set up the REPL's stdin: %s", strerror(errno));
        return REPL_EXIT_INTERNAL;
    }
    close(null);
    sg_autofclose FILE *in = fdopen(lines_fd, "r");
    if (!in) {
        close(lines_fd);
        sg_cli_sayf("shell", "cannot read stdin: %s", strerror(errno));
        return REPL_EXIT_INTERNAL;
    }
    sg_autofree char *buf = NULL;
    size_t cap = 0;
    ssize_t n;
    int code = 0;
    unsigned long lineno = 0;
    while ((n = getline(&buf, &cap, in)) >= 0) {
        lineno++;
        if (n > REPL_LINE_MAX) {
            sg_cli_sayf("shell", "line %lu is longer than %d bytes: not run", lineno, REPL_LINE_MAX);
            code = REPL_EXIT_INTERNAL;
            continue;
        }
        if (memchr(buf, 0, (size_t)n)) {
            sg_cli_sayf("shell", "line %lu holds a NUL byte: not run", lineno);
            code = REPL_EXIT_INTERNAL;
            continue;
        }
        char *line = strip(buf);
        if (!*line)
            continue;
        code = run_line(id, opts, nopts, line);
    }
    return code;
}

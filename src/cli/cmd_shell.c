/* sandglass shell: an interactive shell on a terminal made inside the
 * sandbox: `exec -t -i` of the sandbox's shell launcher (rootfs.c writes
 * /etc/sandglass/shell, read-only: bash if the sandbox has it, else sh,
 * with the host's shell integration), or of the CMD given. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmds.h"
#include "cli/common.h"

#define SHELL_EXIT_INTERNAL 125

static void shell_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass shell ID [--cwd DIR] [--env K=V]... [--timeout S] [--no-record-input]\n"
        "                          [-- CMD [ARG...]]\n"
        "       sandglass shell ID --repl [--cwd DIR] [--env K=V]... [--timeout S] < LINES\n"
        "\n"
        "Opens an interactive shell in the live sandbox ID on a terminal made inside\n"
        "it, as the sandbox user (bash if the sandbox has it, else sh; or CMD). This\n"
        "terminal is in raw mode until the shell ends and is always restored; TERM and\n"
        "the window size (and every resize) are passed on. HOME is /home/sandbox, a\n"
        "private directory outside the workspace. The shell is one exec: the kill\n"
        "switch, the limits and the exec time limit (--timeout, else the sandbox's)\n"
        "apply to it and to everything started from it. Exit status: the shell's;\n"
        "125: sandglass's own error. The session is recorded on the host as an\n"
        "asciicast v3 file (sandglass cast ID); in a captured sandbox each command the\n"
        "shell runs is captured as an exec is.\n"
        "\n"
        "  --cwd DIR     start in this directory inside the sandbox (default /workspace)\n"
        "  --env K=V     one more environment variable (repeatable)\n"
        "  --timeout S   wall time for the whole shell session (with --repl: for each line)\n"
        "  --repl        no terminal: each line of stdin runs as `sh -c LINE` (one exec each,\n"
        "                its stdin /dev/null), captured as the original agent's REPL was;\n"
        "                exit status: the last line's\n"
        "  --no-record-input  the recording keeps the output but not the keys typed\n");
}

int sg_cmd_shell(int argc, char **argv)
{
    static const struct option opts[] = {
        {"cwd", required_argument, NULL, 'c'},
        {"env", required_argument, NULL, 'e'},
        {"timeout", required_argument, NULL, 'T'},
        {"repl", no_argument, NULL, 'r'},
        {"no-record-input", no_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    /* exec's argv: "shell" ID -t -i [options] -- CMD... */
    char **xargv = calloc((size_t)argc + 8, sizeof *xargv);
    if (!xargv)
        return SHELL_EXIT_INTERNAL;
    int xn = 0;
    xargv[xn++] = "shell";
    const char *id = NULL;
    if (argc >= 2 && argv[1][0] != '-') {
        id = argv[1];
        argv++;
        argc--;
    }
    xargv[xn++] = NULL; /* the id, below */
    xargv[xn++] = "-t";
    xargv[xn++] = "-i";
    opterr = 0;
    bool repl = false, no_record_input = false;
    int c;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 'c': xargv[xn++] = "--cwd"; xargv[xn++] = optarg; break;
        case 'e': xargv[xn++] = "--env"; xargv[xn++] = optarg; break;
        case 'T': xargv[xn++] = "--timeout"; xargv[xn++] = optarg; break;
        case 'r': repl = true; break;
        case 'N': no_record_input = true; break;
        case 'h':
            shell_usage(stdout);
            free(xargv);
            return 0;
        default:
            fprintf(stderr, "sandglass shell: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
            free(xargv);
            return SHELL_EXIT_INTERNAL;
        }
    }
    if (!id && optind < argc && strcmp(argv[optind], "--") != 0)
        id = argv[optind++];
    if (!id) {
        shell_usage(stderr);
        fprintf(stderr, "sandglass shell: missing sandbox id\n");
        free(xargv);
        return SHELL_EXIT_INTERNAL;
    }
    if (repl) {
        if (optind < argc) {
            fprintf(stderr, "sandglass shell: --repl takes its commands on stdin, not '%s'\n", argv[optind]);
            free(xargv);
            return SHELL_EXIT_INTERNAL;
        }
        /* the exec options, after "shell" ID -t -i */
        int code = sg_cli_shell_repl(id, xargv + 4, xn - 4);
        free(xargv);
        return code;
    }
    if (!isatty(0)) {
        fprintf(stderr, "sandglass shell: needs a terminal on stdin (stdin is not a terminal)\n");
        free(xargv);
        return SHELL_EXIT_INTERNAL;
    }
    xargv[1] = (char *)id;
    if (no_record_input)
        xargv[xn++] = "--no-record-input";
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    xargv[xn++] = "--";
    if (optind < argc) {
        while (optind < argc)
            xargv[xn++] = argv[optind++];
    } else {
        xargv[xn++] = "/bin/sh";
        xargv[xn++] = "/etc/sandglass/shell";
    }
    xargv[xn] = NULL;
    optind = 0; /* exec parses anew */
    int code = sg_cmd_exec_as("shell", xn, xargv);
    free(xargv);
    return code;
}

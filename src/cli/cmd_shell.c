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

#include "base/bounds.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/detachkeys.h"
#include "state/state.h"

#define SHELL_EXIT_INTERNAL 125

static void shell_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass shell ID [--cwd DIR] [--env K=V]... [--timeout S] [--no-record-input]\n"
        "                          [--detach-keys KEYS] [-- CMD [ARG...]]\n"
        "       sandglass shell ID --attach [EXEC] [--detach-keys KEYS]\n"
        "       sandglass shell ID --repl [--cwd DIR] [--env K=V]... [--timeout S] < LINES\n"
        "\n"
        "Opens an interactive shell in the live sandbox ID on a terminal made inside\n"
        "it, as the sandbox user (bash if the sandbox has it, else sh; or CMD). This\n"
        "terminal is in raw mode until the shell ends and is always restored; TERM and\n"
        "the window size (and every resize) are passed on. HOME is /home/sandbox, a\n"
        "private directory outside the workspace. The shell is one exec: the kill\n"
        "switch and the limits apply to it and to everything started from it; the\n"
        "sandbox's per-exec time limit does not (a session is not one command):\n"
        "only --timeout bounds its time. Exit status: the shell's;\n"
        "125: sandglass's own error. The session is recorded on the host as an\n"
        "asciicast v3 file (sandglass cast ID); in a captured sandbox each command the\n"
        "shell runs is captured as an exec is.\n"
        "\n"
        "Detaching: Ctrl-P Ctrl-Q (or --detach-keys) leaves the shell running without\n"
        "this terminal, and so does closing the terminal (SIGHUP); its output goes on\n"
        "being captured and recorded, and the limits still hold. `--attach` reattaches\n"
        "(the last 64 KiB of its output are shown again, without what a program asked\n"
        "its terminal); a shell has one terminal at a time. The shell ends when it\n"
        "exits, at its --timeout, or with the sandbox.\n"
        "\n"
        "  --cwd DIR     start in this directory inside the sandbox (default /workspace)\n"
        "  --env K=V     one more environment variable (repeatable)\n"
        "  --timeout S   wall time for the whole shell session (default: none); with --repl:\n"
        "                for each line (default: the sandbox's per-exec limit)\n"
        "  --repl        no terminal: each line of stdin runs as `sh -c LINE` (one exec each,\n"
        "                its stdin /dev/null), captured as the original agent's REPL was;\n"
        "                exit status: the last line's\n"
        "  --no-record-input  the recording keeps the output but not the keys typed\n"
        "  --detach-keys KEYS  the keys that detach (default ctrl-p,ctrl-q; ctrl-a..z,\n"
        "                ctrl-@ [ \\ ] ^ _ or one character, comma-separated); '' turns\n"
        "                detaching off: closing the terminal then hangs the shell up\n"
        "  --attach [EXEC]  attach this terminal to the detached shell (EXEC: its exec\n"
        "                number, when several are detached)\n");
}

/* --attach [EXEC]: nothing else but --detach-keys goes with it. */
static int shell_attach(const char *id, int argc, char **argv, bool other, const char *detach_keys)
{
    long num = 0;
    if (optind < argc && strcmp(argv[optind], "--") != 0) {
        char *end = NULL;
        num = strtol(argv[optind], &end, 10);
        if (!*argv[optind] || *end || num <= 0 || num > 0x7fffffff) {
            sg_cli_sayf("shell", "--attach takes an exec number, not '%.64s'", argv[optind]);
            return SHELL_EXIT_INTERNAL;
        }
        optind++;
    }
    if (other || optind < argc) {
        sg_cli_sayf("shell",
                    "--attach takes only an exec number and --detach-keys (the shell "
                    "runs as it was started)");
        return SHELL_EXIT_INTERNAL;
    }
    return sg_cmd_exec_attach(id, num, detach_keys);
}

int sg_cmd_shell(int argc, char **argv)
{
    static const struct option opts[] = {
        {"cwd", required_argument, NULL, 'c'},
        {"env", required_argument, NULL, 'e'},
        {"timeout", required_argument, NULL, 'T'},
        {"repl", no_argument, NULL, 'r'},
        {"no-record-input", no_argument, NULL, 'N'},
        {"detach-keys", required_argument, NULL, 'D'},
        {"attach", no_argument, NULL, 'a'},
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
    bool repl = false, no_record_input = false, attach = false, other = false;
    const char *detach_keys = SG_DETACH_KEYS_DEFAULT;
    int c;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 'c': xargv[xn++] = "--cwd"; xargv[xn++] = optarg; other = true; break;
        case 'e': xargv[xn++] = "--env"; xargv[xn++] = optarg; other = true; break;
        case 'T': xargv[xn++] = "--timeout"; xargv[xn++] = optarg; other = true; break;
        case 'r': repl = true; break;
        case 'N': no_record_input = true; other = true; break;
        case 'D': detach_keys = optarg; break;
        case 'a': attach = true; break;
        case 'h':
            shell_usage(stdout);
            free(xargv);
            return 0;
        default:
            sg_cli_sayf("shell", "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
            free(xargv);
            return SHELL_EXIT_INTERNAL;
        }
    }
    if (!id && optind < argc && strcmp(argv[optind], "--") != 0)
        id = argv[optind++];
    if (!id) {
        shell_usage(stderr);
        sg_cli_sayf("shell", "missing sandbox id");
        free(xargv);
        return SHELL_EXIT_INTERNAL;
    }
    /* the id or a unique prefix of it (the one rule), for every way on */
    static char full[SG_ID_LEN + 1];
    sg_err rerr = {0};
    if (!sg_state_dir(&rerr) || sg_state_resolve_id(id, full, &rerr) < 0) {
        sg_cli_sayf("shell", "%s", rerr.msg);
        free(xargv);
        return SHELL_EXIT_INTERNAL;
    }
    id = full;
    if (attach) {
        free(xargv);
        return shell_attach(id, argc, argv, repl || other, detach_keys);
    }
    if (repl) {
        if (optind < argc) {
            sg_cli_sayf("shell", "--repl takes its commands on stdin, not '%s'", argv[optind]);
            free(xargv);
            return SHELL_EXIT_INTERNAL;
        }
        /* the exec options, after "shell" ID -t -i */
        int code = sg_cli_shell_repl(id, xargv + 4, xn - 4);
        free(xargv);
        return code;
    }
    if (!isatty(0)) {
        sg_cli_sayf("shell", "needs a terminal on stdin (stdin is not a terminal)");
        free(xargv);
        return SHELL_EXIT_INTERNAL;
    }
    xargv[1] = (char *)id;
    if (no_record_input)
        xargv[xn++] = "--no-record-input";
    xargv[xn++] = "--detach-keys";
    xargv[xn++] = (char *)detach_keys;
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

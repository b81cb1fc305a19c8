/* sandglassd: the subcommands that need the heavy libraries (libuv, lws,
 * libgit2, OpenSSL, SQLite, libpq). Users call them through `sandglass`,
 * which execs this binary with the same arguments and argv[0]
 * "sandglass"; messages name the program the user ran (cli/report.h). */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"
#include "cli/report.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} daemon_cmds[] = {
    {"ingest", sg_cmd_ingest, "run the event ingest (WebSocket + HTTP, SQLite store)"},
    {"token", sg_cmd_token, "print an ingest token for an outside capture agent"},
    {"events", sg_cmd_events, "read captured events from an ingest"},
    {"ls", sg_cmd_ls_hosts, "list every registered host's sandboxes (ls --all-hosts)"},
    {"abort", sg_cmd_abort_remote, "abort a sandbox of another host, through its serve"},
    {"destroy", sg_cmd_destroy_remote, "destroy a sandbox of another host, through its serve"},
    {"cast", sg_cmd_cast_store, "a terminal session's recording from the ingest's store"},
    {"workspace", sg_cmd_workspace, "rebuild a workspace at an event from the ingest's store"},
    {"fork", sg_cmd_fork, "a new sandbox from another's workspace at an event"},
    {"sessions", sg_cmd_sessions, "list the sessions an ingest holds, with their state"},
    {"flush", sg_cmd_flush, "deliver the capture of destroyed sandboxes the ingest missed"},
    {"serve", sg_cmd_serve, "serve the learner's terminal in a browser (this host's sandboxes)"},
    {"host", sg_cmd_host, "the sandbox host's daemon: its cgroups, the pool, its metrics"},
    {"export", sg_cmd_export, "export an ingest's events (jsonl, csv, progsnap2, asciicast)"},
    {"import", sg_cmd_import, "load a jsonl export into a store (an operator's action)"},
    {"purge", sg_cmd_purge, "remove a learner's, task's or sandbox's events from a store"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sandglassd COMMAND [OPTIONS]\n\n"
               "The subcommands of sandglass that need the heavy libraries; 'sandglass COMMAND'\n"
               "runs the same thing.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof daemon_cmds / sizeof daemon_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", daemon_cmds[i].name, daemon_cmds[i].help);
    fprintf(f, "\nRun 'sandglassd COMMAND --help' for a command's options and their defaults.\n"
               "Exit codes: 0 done, 1 failed, 2 a usage error.\n");
}

int main(int argc, char **argv)
{
    const char *base = argc > 0 && argv[0] ? strrchr(argv[0], '/') : NULL;
    base = base ? base + 1 : argc > 0 && argv[0] ? argv[0] : "";
    sg_cli_set_prog(strcmp(base, "sandglass") == 0 ? "sandglass" : "sandglassd");
    if (argc < 2) {
        sg_print_vis(2, "sandglassd: ", "missing command (see 'sandglassd --help')");
        return SG_CLI_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("sandglassd " SG_VERSION "\n");
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof daemon_cmds / sizeof daemon_cmds[0]; i++) {
        if (strcmp(argv[1], daemon_cmds[i].name) == 0) {
            sg_err err = {0}; /* the operator's defaults (sandglass.conf(5)) */
            if (sg_config_load(&err) < 0) {
                sg_print_vis(2, strcmp(base, "sandglass") == 0 ? "sandglass: " : "sandglassd: ", "%s", err.msg);
                return 1;
            }
            return daemon_cmds[i].fn(argc - 1, argv + 1);
        }
    }
    sg_print_vis(2, "sandglassd: ", "unknown command '%.64s' (see 'sandglassd --help')", argv[1]);
    return SG_CLI_USAGE;
}

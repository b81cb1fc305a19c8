/* sandglassd: the subcommands that need the heavy libraries (libuv, lws,
 * libgit2, OpenSSL, SQLite, libpq). Users call them through `sandglass`,
 * which execs this binary with the same arguments. */
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
} daemon_cmds[] = {
    {"supervisor", sg_cmd_supervisor},
    {"ingest", sg_cmd_ingest},
    {"token", sg_cmd_token},
    {"events", sg_cmd_events},
    {"flush", sg_cmd_flush},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "sandglassd: missing subcommand (it is run by sandglass)\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof daemon_cmds / sizeof daemon_cmds[0]; i++)
        if (strcmp(argv[1], daemon_cmds[i].name) == 0)
            return daemon_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sandglassd: unknown subcommand '%s'\n", argv[1]);
    return 2;
}

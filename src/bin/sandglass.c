/* sandglass: the command line. A thin layer over the modules: each
 * subcommand lives in its own cmd_*.c. This binary links only libc and
 * jansson so that `sandglass exec` starts fast; subcommands that need the
 * heavy libraries run in `sandglassd`, found next to this binary. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/limits.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cmds[] = {
    {"create", sg_cmd_create, "create a sandbox and print its id"},
    {"exec", sg_cmd_exec, "run a command inside a live sandbox"},
    {"shell", sg_cmd_shell, "an interactive shell in a live sandbox, on a terminal"},
    {"cast", sg_cmd_cast, "a terminal session's recording (asciicast v3)"},
    {"ls", sg_cmd_ls, "list sandboxes"},
    {"destroy", sg_cmd_destroy, "kill everything in a sandbox and remove it"},
    {"gc", sg_cmd_gc, "remove what crashed supervisors left behind"},
    {"mcp", sg_cmd_mcp, "serve an agent session over MCP (stdio) in a sandbox"},
    {"abort", sg_cmd_abort, "kill switch: stop the session and every process in it"},
    {"resume", sg_cmd_resume, "clear an operator's abort"},
    {"cp", sg_cmd_cp, "copy files and trees into or out of a workspace"},
    {"checkpoint", sg_cmd_checkpoint, "snapshot the workspace now"},
    {"checkpoints", sg_cmd_checkpoints, "list a sandbox's checkpoints"},
    {"rollback", sg_cmd_rollback, "restore the workspace to a checkpoint"},
    {"pool", sg_cmd_pool, "keep spare sandboxes ready, so that create only claims one"},
};

static const struct {
    const char *name;
    const char *help;
} daemon_cmds[] = {
    {"ingest", "run the event ingest (WebSocket + HTTP, SQLite store)"},
    {"token", "print an ingest token for an outside capture agent"},
    {"events", "read captured events from an ingest"},
    {"workspace", "rebuild a workspace at an event from the ingest's store"},
    {"fork", "a new sandbox from another's workspace at an event"},
    {"sessions", "list the sessions an ingest holds, with their state"},
    {"flush", "deliver the capture of destroyed sandboxes the ingest missed"},
    {"serve", "serve the learner's terminal in a browser (this host's sandboxes)"},
    {"host", "the sandbox host's daemon: its cgroups, the pool, its metrics"},
    {"export", "export an ingest's events (jsonl, csv, progsnap2, asciicast)"},
    {"import", "load a jsonl export into a store (an operator's action)"},
    {"purge", "remove a learner's, task's or sandbox's events from a store"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sandglass COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].help);
    for (size_t i = 0; i < sizeof daemon_cmds / sizeof daemon_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", daemon_cmds[i].name, daemon_cmds[i].help);
    fprintf(f, "\nRun 'sandglass COMMAND --help' for a command's options and their defaults; the\n"
               "defaults can be set in /etc/sandglass/sandglass.conf, ~/.config/sandglass/sandglass.conf\n"
               "or SANDGLASS_* variables (man 5 sandglass.conf).\n"
               "Exit codes: 0 done, 1 failed, 2 a usage error; exec: the command's own status,\n"
               "125 sandglass's error, 126 the command could not start, 127 not found.\n"
               "'sandglass --version' prints the version (" SG_VERSION ").\n");
}

int main(int argc, char **argv)
{
    /* jansson seeds its hash function from /dev/urandom on first use (an
     * open, a read, a close on every exec); the kernel hands each process
     * 16 random bytes at exec already. */
    const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
    if (r) {
        size_t seed;
        memcpy(&seed, r, sizeof seed);
        json_object_seed(seed);
    }
    /* fds 0-2 are always open before we open anything: a caller that
     * closed one would otherwise see our control socket land there and be
     * handed to the sandbox as its stdin (docs/SECURITY.md). */
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int null = open("/dev/null", O_RDWR);
            if (null < 0)
                return 125;
            if (null != fd) { /* cannot happen: the lowest free fd is fd */
                close(null);
                return 125;
            }
        }
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("sandglass " SG_VERSION "\n");
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name) == 0) {
            /* The operator's defaults (sandglass.conf(5)); sandglassd
             * reads them itself. */
            sg_err err = {0};
            if (sg_config_load(&err) < 0) {
                sg_print_vis(2, "sandglass: ", "%s", err.msg);
                return 1;
            }
            return cmds[i].fn(argc - 1, argv + 1);
        }
    }
    for (size_t i = 0; i < sizeof daemon_cmds / sizeof daemon_cmds[0]; i++) {
        if (strcmp(argv[1], daemon_cmds[i].name) == 0) {
            char path[PATH_MAX];
            if (sg_cli_daemon_path(path, sizeof path) < 0) {
                sg_print_vis(2, "sandglass: ", "cannot find sandglassd next to this binary");
                return 1;
            }
            /* Named as the user ran it: its messages say "sandglass CMD". */
            argv[0] = "sandglass";
            execv(path, argv);
            sg_print_vis(2, "sandglass: ", "cannot run %s: %s", path, strerror(errno));
            return 1;
        }
    }
    sg_print_vis(2, "sandglass: ", "unknown command '%.64s' (see 'sandglass --help')", argv[1]);
    return SG_CLI_USAGE;
}

/* sandglass-supervisor supervisor ID --ready-fd N: run by `sandglass create`
 * and by a takeover (wire/revive.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cmds.h"
#include "cli/report.h"
#include "supervisor/supervisor.h"

int sg_cmd_supervisor(int argc, char **argv)
{
    const char *id = NULL;
    int ready = -1, seed = -1;
    bool adopt = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ready-fd") == 0 && i + 1 < argc)
            ready = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed-fd") == 0 && i + 1 < argc)
            seed = atoi(argv[++i]);
        else if (strcmp(argv[i], "--adopt") == 0)
            adopt = true;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: sandglass-supervisor supervisor ID --ready-fd N [--seed-fd N | --adopt]\n"
                   "  the supervisor of sandbox ID, run by 'sandglass create' (not by hand)\n"
                   "  --ready-fd N  writes \"ok\" or \"error: ...\" there once set up\n"
                   "  --seed-fd N   waits for \"ok\" there (the workspace filled) before its\n"
                   "                capture and first checkpoint; anything else fails the start\n"
                   "  --adopt       take over a live sandbox whose supervisor died\n");
            return 0;
        }
        else if (!id && argv[i][0] != '-')
            id = argv[i];
        else {
            return sg_cli_usage("supervisor", "unexpected argument '%.64s'", argv[i]);
        }
    }
    if (!id || !sg_valid_name(id)) {
        return sg_cli_usage("supervisor", "missing or invalid sandbox id");
    }
    if (seed >= 0 && adopt)
        return sg_cli_usage("supervisor", "--seed-fd is for a new sandbox, not with --adopt");
    return sg_supervisor_run(id, ready, seed, adopt);
}

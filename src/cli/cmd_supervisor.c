/* sandglassd supervisor ID --ready-fd N: run by `sandglass create`. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cmds.h"
#include "supervisor/supervisor.h"

int sg_cmd_supervisor(int argc, char **argv)
{
    const char *id = NULL;
    int ready = -1;
    bool adopt = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ready-fd") == 0 && i + 1 < argc)
            ready = atoi(argv[++i]);
        else if (strcmp(argv[i], "--adopt") == 0)
            adopt = true;
        else if (!id && argv[i][0] != '-')
            id = argv[i];
        else {
            fprintf(stderr, "sandglassd supervisor: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!id || !sg_valid_name(id)) {
        fprintf(stderr, "sandglassd supervisor: missing or invalid sandbox id\n");
        return 2;
    }
    return sg_supervisor_run(id, ready, adopt);
}

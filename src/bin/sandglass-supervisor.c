/* sandglass-supervisor: the per-sandbox supervisor as its own binary, so
 * that it does not load the ingest's store libraries (libpq, SQLite) at
 * every sandbox start. `sandglass create` and a takeover run it. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cli/cmds.h"
#include "cli/report.h"
#include "sandbox/disk.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "reclaim") == 0) /* destroy's disk, in the background */
        return sg_disk_reclaim_main(argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[1], "supervisor") != 0) {
        sg_print_vis(
            2, "sandglass-supervisor: ", "run by sandglass create (sandglass-supervisor supervisor ID --ready-fd N)");
        return 2;
    }
    sg_cli_set_prog("sandglass-supervisor");
    return sg_cmd_supervisor(argc - 1, argv + 1);
}

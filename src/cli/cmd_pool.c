/* sandglass pool: how many spare sandboxes to keep ready (pool.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/pool.h"

static void pool_usage(FILE *f)
{
    fprintf(f, "usage: sandglass pool [N] [--json]\n"
               "\n"
               "Keeps spare sandboxes ready, so that a create claims one instead of\n"
               "building it (root only; a create with its own --workspace, --rootfs or\n"
               "rootless always builds). The pool is empty until asked for.\n"
               "\n"
               "  N       keep N spares ready (0 to %d; 0 destroys them); without N, print\n"
               "          the pool's size and how many spares are ready\n"
               "  --json  print {size, ready}\n", SG_POOL_MAX);
}

int sg_cmd_pool(int argc, char **argv)
{
    bool json = false, refill = false, have_n = false;
    uint64_t n = 0;
    sg_err err = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--refill") == 0) {
            refill = true; /* internal: create's background refill */
        } else if (strcmp(argv[i], "--help") == 0) {
            pool_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || have_n) {
            return sg_cli_usage("pool", "unexpected argument '%.100s'", argv[i]);
        } else {
            /* 0 empties the pool (sg_parse_uint starts at 1) */
            if (strcmp(argv[i], "0") != 0 && sg_parse_uint(argv[i], SG_POOL_MAX, &n, &err) < 0)
                return sg_cli_usage("pool", "invalid size '%.32s': from 0 (empty) to %d", argv[i], SG_POOL_MAX);
            have_n = true;
        }
    }
    if (!sg_state_dir(&err))
        return sg_cli_fail("pool", err.msg);
    if ((have_n || refill) && geteuid() != 0)
        return sg_cli_fail("pool", "the pool needs root (a rootless create always builds its sandbox)");
    if (refill)
        return sg_pool_resize(sg_pool_size(), false, &err) < 0 ? 1 : 0;
    if (have_n && sg_pool_resize((unsigned)n, true, &err) < 0)
        return sg_cli_fail("pool", err.msg);
    if (json)
        printf("{\"size\":%u,\"ready\":%u}\n", sg_pool_size(), sg_pool_ready());
    else
        printf("pool: size %u, %u spare(s) ready\n", sg_pool_size(), sg_pool_ready());
    return 0;
}

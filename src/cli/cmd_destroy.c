/* sandglass destroy: asks the supervisor to kill every process of the
 * sandbox, prove its cgroup empty and remove it; waits until the
 * supervisor has exited. A sandbox whose supervisor died is cleaned up
 * from here. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "checkpoint/ckpt_client.h"
#include "sandbox/cgroup.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "state/state.h"

json_t *sg_cli_destroy(const char *id, bool verbose, sg_err *err)
{
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, err) < 0)
        return NULL;
    sg_sandbox_meta_clear(&m);
    /* A supervisor that died while the sandbox's init lives is replaced
     * first: the sandbox is destroyed by its own supervisor, which proves
     * it empty and delivers its capture (with the "destroyed" event). */
    sg_err terr = {0};
    bool dead = sg_revive_takeover(id, "destroy", &terr) < 0;
    pid_t sup = 0;
    if (!dead && sg_sandbox_meta_load(id, &m, NULL) == 0) {
        sup = m.supervisor_pid;
        sg_sandbox_meta_clear(&m);
    }

    /* The supervisor may be inside a long checkpoint: its worker is killed
     * first, so this request never waits for it (checkpoint/ckpt_client.h). */
    sg_err kerr = {0};
    if (sg_ckpt_client_kill_sandbox_worker(id, &kerr) < 0)
        fprintf(stderr, "sandglass destroy: the checkpoint worker: %s\n", kerr.msg);
    sg_autojson json_t *req = json_pack("{s:s}", "op", "destroy");
    sg_err rerr = {0};
    json_t *res = dead ? NULL : sg_cli_request(id, req, &rerr);
    if (!res) {
        /* The sandbox's init is dead too (no supervisor can take it over),
         * or its supervisor could not finish (its init or cgroup gone):
         * destroy stays idempotent and cleans up whatever is left from
         * here, saying what it found. */
        if (!dead)
            fprintf(stderr, "sandglass destroy: the supervisor could not destroy %s (%s): cleaning up "
                    "from here\n", id, rerr.msg);
        else
            fprintf(stderr, "sandglass destroy: the supervisor of %s is not running and none can take "
                    "it over (%s): cleaning up from here\n", id, terr.msg);
        if (sg_cli_cleanup_dead(id, verbose, err) < 0)
            return NULL;
        return json_pack("{s:s, s:i, s:b, s:b, s:b}", "destroyed", id, "processes_left", 0,
                         "cgroup_empty", 1, "cgroup_removed", 1, "supervisor_was_dead", 1);
    }
    /* The supervisor lived in its own cgroup, beside the sandbox's: it is
     * removed once the supervisor has exited (a leftover goes with gc). */
    sg_err serr = {0};
    if (sup > 0 && sg_state_wait_exit(sup, 10000) && sg_cgroup_supervisor_remove(id, &serr) < 0)
        fprintf(stderr, "sandglass destroy: %s\n", serr.msg);
    json_int_t left = json_integer_value(json_object_get(res, "events_undelivered"));
    if (left > 0)
        fprintf(stderr, "sandglass destroy: %lld captured event%s of %s could not be delivered to the "
                "ingest: kept in the state directory's undelivered/%s; deliver them with "
                "'sandglass flush %s'\n", (long long)left, left == 1 ? "" : "s", id, id, id);
    return res;
}

static void destroy_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass destroy ID [--json]\n"
        "\n"
        "Kills every process of the sandbox, proves its cgroup empty, removes its\n"
        "cgroups, mounts, state and (when create made it) its workspace. Whatever\n"
        "is left of a broken sandbox (dead supervisor, gone cgroup) is removed too.\n"
        "A captured sandbox's events the ingest has not acknowledged are kept for\n"
        "'sandglass flush'. ID may be a unique prefix of the sandbox's id.\n"
        "\n"
        "  --json    print the proof as one JSON object (errors as JSON on stderr)\n");
}

int sg_cmd_destroy(int argc, char **argv)
{
    bool json = false;
    const char *arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
            sg_cli_json_errors(true);
        } else if (strcmp(argv[i], "--help") == 0) {
            destroy_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            return sg_cli_usage("destroy", "unknown option '%s'", argv[i]);
        } else if (!arg) {
            arg = argv[i];
        } else {
            return sg_cli_usage("destroy", "takes one sandbox id, got '%s' too", argv[i]);
        }
    }
    if (!arg)
        return sg_cli_usage("destroy", "missing sandbox id");
    sg_err err = {0};
    char id[SG_ID_LEN + 1];
    if (!sg_state_dir(&err) || sg_state_resolve_id(arg, id, &err) < 0)
        return sg_cli_fail("destroy", err.msg);
    sg_autojson json_t *res = sg_cli_destroy(id, !json, &err);
    if (!res)
        return sg_cli_fail("destroy", err.msg);
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        printf("destroyed %s\n", id);
    }
    return 0;
}

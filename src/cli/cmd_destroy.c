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

#include "ckptc.h"
#include "cleanup.h"
#include "cmds.h"
#include "common.h"
#include "jsonutil.h"
#include "state.h"
#include "util.h"

/* Waits for a process that is not our child to exit. */
static void wait_gone(pid_t pid, int timeout_ms)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        poll(&p, 1, timeout_ms);
        close(pfd);
        return;
    }
    for (int i = 0; i < timeout_ms / 5 && sg_state_pid_alive(pid); i++)
        usleep(5000);
}

int sg_cmd_destroy(int argc, char **argv)
{
    bool json = false;
    const char *id = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: sandglass destroy ID [--json]\n");
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "sandglass destroy: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (!id)
            id = argv[i];
        else
            return sg_cli_fail("destroy", "takes one sandbox id");
    }
    if (!id)
        return sg_cli_fail("destroy", "missing sandbox id");
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("destroy", err.msg);
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, &err) < 0)
        return sg_cli_fail("destroy", err.msg);
    pid_t sup = m.supervisor_pid;
    sg_sandbox_meta_clear(&m);

    /* The supervisor may be inside a long checkpoint: its worker is killed
     * first, so this request never waits for it (ckptc.h). */
    sg_err kerr = {0};
    if (sg_ckptc_kill_sandbox_worker(id, &kerr) < 0)
        fprintf(stderr, "sandglass destroy: the checkpoint worker: %s\n", kerr.msg);
    sg_autojson json_t *req = json_pack("{s:s}", "op", "destroy");
    sg_autojson json_t *res = sg_cli_request(id, req, &err);
    if (!res) {
        /* The supervisor is gone (crashed or killed), or it could not
         * finish (its init or cgroup gone): destroy stays idempotent and
         * cleans up whatever is left from here, saying what it found. */
        bool alive = sg_state_pid_alive(sup);
        if (alive && err.code != ENOENT && err.code != ECONNREFUSED)
            fprintf(stderr, "sandglass destroy: the supervisor could not destroy %s (%s): cleaning up "
                    "from here\n", id, err.msg);
        else
            fprintf(stderr, "sandglass destroy: the supervisor of %s is not running: cleaning up from "
                    "here\n", id);
        sg_err cerr = {0};
        if (sg_cli_cleanup_dead(id, !json, &cerr) < 0)
            return sg_cli_fail("destroy", cerr.msg);
        res = json_pack("{s:s, s:i, s:b, s:b, s:b}", "destroyed", id, "processes_left", 0,
                        "cgroup_empty", 1, "cgroup_removed", 1, "supervisor_was_dead", 1);
    } else {
        wait_gone(sup, 10000);
        json_int_t left = json_integer_value(json_object_get(res, "events_undelivered"));
        if (left > 0)
            fprintf(stderr, "sandglass destroy: %lld captured event%s of %s could not be delivered to the "
                    "ingest: kept in the state directory's undelivered/%s; deliver them with "
                    "'sandglass flush %s'\n", (long long)left, left == 1 ? "" : "s", id, id, id);
    }
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        printf("destroyed %s\n", id);
    }
    return 0;
}

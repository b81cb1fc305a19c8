/* sandglass-ckpt: a sandbox's checkpoint worker (wire/ckpt_proto.h says why it is
 * a process of its own). Its supervisor spawns it on demand and closes the
 * socket when it has been idle for a while; it then exits.
 *
 *   sandglass-ckpt PARENT_PID [NJOIN]   fd 3: the socket to the supervisor
 *                                      fds 4..4+NJOIN-1: cgroup.procs files
 *
 * It first joins the sandbox's cgroup (checkpoint/ckpt_client.h: the work it does is
 * charged to the sandbox) and refuses to run when it cannot.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/log.h"
#include "checkpoint/ckpt_worker.h"
#include "checkpoint/udiff.h"

int main(int argc, char **argv)
{
    sg_log_init("sandglass-ckpt");
    char *end = NULL, *end2 = NULL;
    long parent = argc >= 2 ? strtol(argv[1], &end, 10) : 0;
    long njoin = argc == 3 ? strtol(argv[2], &end2, 10) : 0;
    if ((argc != 2 && argc != 3) || !end || *end || parent <= 1 || fcntl(3, F_GETFD) < 0 ||
        (argc == 3 && (!end2 || *end2 || njoin < 0 || njoin > 8))) {
        sg_log(SG_LOG_ERROR, "bad arguments (it is run by a sandbox's supervisor)");
        return 2;
    }
    for (int i = 0; i < (int)njoin; i++) {
        if (write(4 + i, "0", 1) != 1) {
            sg_log(SG_LOG_ERROR, "cannot join the sandbox's cgroup: %s", strerror(errno));
            return 1;
        }
        close(4 + i);
    }
    /* Never outlive the supervisor, even if it is SIGKILLed while a long
     * checkpoint keeps this process from seeing the socket close. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != (pid_t)parent)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "sandglass-ckpt");
    sg_err err = {0};
    if (sg_udiff_global_init(&err) < 0) {
        sg_log(SG_LOG_ERROR, "%s", err.msg);
        return 1;
    }
    int rc = sg_ckpt_worker_serve(3, &err);
    if (rc < 0)
        sg_log(SG_LOG_ERROR, "%s", err.msg);
    sg_udiff_global_shutdown();
    return rc < 0 ? 1 : 0;
}

/* sandglass-uplink: the per-host uplink daemon (delivery/uplink_daemon.h says why it is a
 * process of its own). A captured sandbox's supervisor starts it when none
 * answers on <state>/uplink.sock; it exits when no sandbox has used it for
 * a while.
 *
 *   sandglass-uplink        (no arguments; $SANDGLASS_STATE_DIR as usual)
 */
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "base/log.h"
#include "delivery/uplink_daemon.h"

int main(int argc, char **argv)
{
    (void)argv;
    sg_log_init("sandglass-uplink");
    if (argc != 1) {
        sg_log(SG_LOG_ERROR, "takes no arguments (a supervisor starts it)");
        return 2;
    }
    prctl(PR_SET_NAME, "sandglass-uplin"); /* comm holds 15 characters */
    /* lws's notices (4 lines per session started) would grow the log of a
     * long-lived daemon; errors and warnings stay. */
    lws_set_log_level(getenv("SG_UPLINK_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE : LLL_ERR | LLL_WARN,
                      sg_log_lws);
    sg_err err = {0};
    int rc = sg_uplink_daemon_serve(&err);
    if (rc < 0)
        sg_log(SG_LOG_ERROR, "%s", err.msg);
    return rc < 0 ? 1 : 0;
}

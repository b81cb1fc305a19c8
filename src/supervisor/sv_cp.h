/* sv_cp: `sandglass cp`, a file or a tree copied into or out of the
 * workspace by the supervisor (sandbox/wscopy.h), as the operator's action:
 * what a copy in changes is reported by the watcher as file_diff events
 * whose cause is {operator: {action: "cp", path, actor}} (capture.h's
 * sg_capture_set_operator), never a learner's exec or command. */
#ifndef SG_SV_CP_H
#define SG_SV_CP_H

#include "supervisor/sv_sup.h"

/* Its op's handler (sv_dispatch.c's table); fd_in is the caller's directory. */
void sv_cp_op(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

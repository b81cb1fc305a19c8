/* revive: starting a sandbox's supervisor, and taking a sandbox over when
 * its supervisor died: the one place every client (the CLI's commands,
 * MCP, serve's terminals, ls and gc) goes through. */
#ifndef SG_WIRE_REVIVE_H
#define SG_WIRE_REVIVE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* Path of sandglass-supervisor ($SANDGLASS_SUPERVISOR, else the same way
 * as sandglassd): the supervisor has its own binary without the store's
 * libraries (libpq alone costs ~4 ms per process start). */
int sg_revive_supervisor_path(char *buf, size_t len);

/* Starts the supervisor of sandbox id (detached: double fork, new
 * session), or with adopt a new one for a live sandbox whose supervisor
 * died, and waits until it is ready. */
int sg_revive_start_supervisor(const char *id, bool adopt, sg_err *err);

/* Makes sure a supervisor serves sandbox id: when none does (it died:
 * SIGKILL, a crash) and the sandbox's init lives, starts one that takes
 * the sandbox over — one client at a time (revive.lock): two clients at
 * once make one supervisor — and says so on stderr as "sandglass WHO: ..." (WHO may be NULL).
 * Returns 1 when it took the sandbox over, 0 when a supervisor served it
 * already, -1 with err: ESRCH the sandbox is gone (its init is dead),
 * ENOENT no such sandbox, else why no supervisor could take it over. */
int sg_revive_takeover(const char *id, const char *who, sg_err *err);

/* Connects to sandbox id's control socket, taking the sandbox over first
 * when its supervisor died (sg_revive_takeover). Returns the fd or -1. */
int sg_revive_connect(const char *id, const char *who, sg_err *err);

/* Whether a request sent on a connection that failed this way (the send's
 * or the first receive's -errno) was never read by a supervisor: it died
 * before, so the request can go again to the one that takes over. */
bool sg_revive_unread(int neg_errno);

#endif

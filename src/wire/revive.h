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
/* The same in two steps, so that the caller works while the supervisor
 * sets the sandbox up (sandglass fork fills the workspace meanwhile):
 * starts it, seed_fd (>= 0) handed to it as --seed-fd (supervisor.h), and
 * returns the read end of its ready pipe, or -1 with err;
 * sg_revive_wait_ready then waits for it and closes it. */
int sg_revive_spawn_supervisor(const char *id, int seed_fd, sg_err *err);
int sg_revive_wait_ready(int fd, sg_err *err);

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

/* The same connection without blocking, for a caller on an event loop:
 * a supervisor that does not accept (stopped, or busy) must not stop the
 * loop, and a takeover (which waits for a new supervisor) is the caller's
 * to run elsewhere. Returns a non-blocking fd with *state SG_REVIVE_CONNECTED,
 * or one still connecting (SG_REVIVE_IN_PROGRESS: poll it writable, then
 * sg_revive_connect_finish); -1 with *state SG_REVIVE_BUSY and EAGAIN (the
 * supervisor's listen backlog is full: try again later), or with
 * SG_REVIVE_DEAD and ECONNREFUSED/ENOENT (no supervisor listens: run
 * sg_revive_takeover off the loop, then connect again), or with
 * SG_REVIVE_FAILED and err. Never takes a sandbox over itself. */
typedef enum {
    SG_REVIVE_CONNECTED,
    SG_REVIVE_IN_PROGRESS,
    SG_REVIVE_BUSY,
    SG_REVIVE_DEAD,
    SG_REVIVE_FAILED,
} sg_revive_state;
int sg_revive_connect_nb(const char *id, sg_revive_state *state, sg_err *err);
/* The end of an SG_REVIVE_IN_PROGRESS connect once fd polled writable:
 * SG_REVIVE_CONNECTED, or a state and err as sg_revive_connect_nb's. */
sg_revive_state sg_revive_connect_finish(int fd, const char *id, sg_err *err);

/* Whether a request sent on a connection that failed this way (the send's
 * or the first receive's -errno) was never read by a supervisor: it died
 * before, so the request can go again to the one that takes over. */
bool sg_revive_unread(int neg_errno);

#endif

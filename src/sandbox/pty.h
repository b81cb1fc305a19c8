/* pty: an exec's terminal, made inside the sandbox. The CLI's terminal
 * never crosses into a sandbox (docs/SECURITY.md): for a tty exec the
 * supervisor hands the exec child one end of a socketpair as its stdin
 * instead of a pipe. The child (still sandglass code, before the user's
 * command) sees the socket, opens a PTY in the sandbox's own devpts
 * instance (rootfs.c mounts it with newinstance), sends the master back
 * on the socket, waits for the supervisor's go (it sets the window size
 * first, so the command never starts at 0x0), makes the slave its
 * controlling terminal and its stdin, stdout and stderr, closes the
 * socket and runs the command. The supervisor holds the master and relays
 * it (src/supervisor/tty.c).
 *
 * libc only: linked into sandglass-exec (musl) and sandglass-init. */
#ifndef SG_PTY_H
#define SG_PTY_H

#include <stdbool.h>

#define SG_PTY_MASTER 'M' /* child -> supervisor: one byte, the master fd (SCM_RIGHTS) */
#define SG_PTY_GO 'g'     /* supervisor -> child: the terminal is set up, go on */

/* Whether fd is the supervisor's request for a terminal (a socket; any
 * other stdin is a pipe or /dev/null). */
bool sg_pty_requested(int fd);

/* In the exec child, after setsid and the privilege drop: the steps above,
 * on the socket at fd 0. Returns 0, or -errno with what failed in *what. */
int sg_pty_child_setup(const char **what);

#endif

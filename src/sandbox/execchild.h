/* execchild: an exec child's last steps, from the message that carries its
 * command to the execve. Shared by init (src/init.c: the children it clones
 * on the spot, and its ready children when there is no sandglass-exec) and
 * sandglass-exec (src/cli/exec_main.c), the small program a ready child
 * becomes while it waits, so that its execve of the user's command has
 * almost no address space to tear down.
 *
 * libc only: sandglass-exec is linked with musl and nothing else. */
#ifndef SG_EXECCHILD_H
#define SG_EXECCHILD_H

#include <stddef.h>

/* Writes "sandglass: WHAT ARG: strerror(E)" to fd 2 and exits with code. */
__attribute__((noreturn)) void sg_execchild_fail(int code, const char *what, const char *arg, int e);

/* sg_spawn_decode (wire/spawn.h) of an EXEC message into argv and envp
 * arrays in static storage (one table, room for any message's strings),
 * pointing into msg, and cwd. Returns 0 if well formed. Not reentrant. */
int sg_execchild_split(char *msg, size_t len, char ***argv, char ***envp, char **cwd);

/* Makes fds[0..2] the stdin, stdout and stderr, and closes every other fd. */
void sg_execchild_stdio(const int *fds);

/* Makes the exec's terminal when stdin is the supervisor's socket (pty.h),
 * enters cwd (as the exec's user: a directory it cannot enter is refused)
 * and execs argv[0], searched in the PATH of envp. Exit codes as a shell's:
 * 127 not found, 126 found but not runnable. */
__attribute__((noreturn)) void sg_execchild_start(char **argv, char **envp, const char *cwd);

/* The ready child's wait: one exec message (a typed frame of type
 * SG_SPAWN_READY_TYPE, then the EXEC message, with exactly the three stdio fds) on sock,
 * answered "k" once taken, then run. EOF (init dropped it) exits 0. */
__attribute__((noreturn)) void sg_execchild_take(int sock);

/* Faults in the pages sg_execchild_take writes first, so that the exec
 * does not wait for them (the receive buffer's first pages, the string
 * table's first page). */
void sg_execchild_prefault(void);

#endif

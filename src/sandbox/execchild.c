/* execchild: an exec child's last steps. See execchild.h. */
#include "sandbox/execchild.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "sandbox/pty.h"
#include "wire/seqpacket.h"
#include "wire/spawn.h"

/* One exec's message, and its strings split out: at most one per byte. */
static char msg_buf[SG_SPAWN_MSG_MAX];
static char *strs[SG_SPAWN_MSG_MAX + 2];

void sg_execchild_fail(int code, const char *what, const char *arg, int e)
{
    dprintf(2, "sandglass: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(e));
    _exit(code);
}

int sg_execchild_split(char *msg, size_t len, char ***argv, char ***envp, char **cwd)
{
    return sg_spawn_decode(msg, len, strs, SG_ARRAY_LEN(strs), argv, envp, cwd);
}

void sg_execchild_stdio(const int *fds)
{
    if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0)
        _exit(126);
    /* the raw call: musl has no close_range() */
    syscall(SYS_close_range, 3, ~0U, 0);
}

/* execvpe that searches the PATH of the new environment, not ours. Each
 * directory is probed with faccessat, not execve: a failed execve sets up
 * and frees a whole new address space first (~5 us each, and a bare
 * "true" misses three directories of the default PATH). */
static void exec_search(char **argv, char **envp)
{
    const char *file = argv[0];
    if (strchr(file, '/')) {
        execve(file, argv, envp);
        sg_execchild_fail(errno == ENOENT ? 127 : 126, "cannot run", file, errno);
    }
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (char **e = envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            path = *e + 5;
    int saw_eacces = 0;
    char buf[4096];
    size_t fl = strlen(file);
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        if (dl + fl + 2 <= sizeof buf) {
            if (dl == 0) {
                memcpy(buf, file, fl + 1);
            } else {
                memcpy(buf, p, dl);
                buf[dl] = '/';
                memcpy(buf + dl + 1, file, fl + 1);
            }
            int e = faccessat(AT_FDCWD, buf, X_OK, AT_EACCESS) == 0 ? 0 : errno;
            if (e == 0 || e == ENOSYS || e == EINVAL) {
                execve(buf, argv, envp);
                e = errno;
            }
            if (e == EACCES)
                saw_eacces = 1;
            else if (e != ENOENT && e != ENOTDIR)
                sg_execchild_fail(126, "cannot run", file, e);
        }
        if (!colon)
            break;
        p = colon + 1;
    }
    if (saw_eacces)
        sg_execchild_fail(126, "cannot run", file, EACCES);
    dprintf(2, "sandglass: %s: command not found\n", file);
    _exit(127);
}

void sg_execchild_start(char **argv, char **envp, const char *cwd)
{
    /* A socket for stdin is the supervisor asking for a terminal (pty.h). */
    if (sg_pty_requested(0)) {
        const char *what = NULL;
        int r = sg_pty_child_setup(&what);
        if (r < 0)
            sg_execchild_fail(126, what, NULL, -r);
    }
    if (chdir(cwd) < 0)
        sg_execchild_fail(126, "cannot change directory to", cwd, errno);
    exec_search(argv, envp);
    _exit(127);
}

void sg_execchild_prefault(void)
{
    /* A message is a header and a few strings: two pages hold most. */
    memset(msg_buf, 0, 8192);
    strs[0] = NULL;
}

void sg_execchild_take(int sock)
{
    uint8_t type = 0;
    int fds[3];
    size_t nfds = 3;
    ssize_t n = sg_seqpacket_recv_typed(sock, &type, msg_buf, sizeof msg_buf, fds, &nfds);
    if (n <= 0)
        _exit(0); /* EOF: init dropped us (or a broken message) */
    char **argv, **envp, *cwd = NULL;
    if (type != SG_SPAWN_READY_TYPE || nfds != 3 || sg_execchild_split(msg_buf, (size_t)n, &argv, &envp, &cwd) < 0)
        _exit(126);
    /* Tell the supervisor we have the exec (it reads this at the exit). */
    if (send(sock, "k", 1, MSG_NOSIGNAL) != 1)
        _exit(126);
    sg_execchild_stdio(fds);
    sg_execchild_start(argv, envp, cwd);
}

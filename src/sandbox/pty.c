/* pty: an exec's terminal, made inside the sandbox. See pty.h. */
#include "sandbox/pty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire/seqpacket.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

bool sg_pty_requested(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

static int fail(const char **what, const char *w)
{
    int e = errno ? errno : EIO;
    *what = w;
    return -e;
}

int sg_pty_child_setup(const char **what)
{
    /* /dev/ptmx is the sandbox's devpts instance (a link to pts/ptmx). */
    int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return fail(what, "cannot open /dev/ptmx");
    int unlock = 0;
    if (ioctl(m, TIOCSPTLCK, &unlock) < 0)
        return fail(what, "cannot unlock the terminal");
    /* The peer by the master, not by a path: nothing can swap it. */
    int sl = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (sl < 0)
        return fail(what, "cannot open the terminal's slave");
    char b = SG_PTY_MASTER;
    if (sg_seqpacket_send(0, &b, 1, &m, 1) < 0)
        return fail(what, "cannot hand the terminal to the supervisor");
    close(m);
    ssize_t n;
    do
        n = recv(0, &b, 1, 0);
    while (n < 0 && errno == EINTR);
    if (n != 1 || b != SG_PTY_GO) {
        errno = n < 0 ? errno : EPIPE;
        return fail(what, "no go from the supervisor for the terminal");
    }
    /* We are a session leader (init.c: setsid): the slave becomes our
     * controlling terminal, and our process group its foreground one. */
    if (ioctl(sl, TIOCSCTTY, 0) < 0)
        return fail(what, "cannot make the terminal the controlling one");
    if (dup2(sl, 0) < 0 || dup2(sl, 1) < 0 || dup2(sl, 2) < 0)
        return fail(what, "cannot make the terminal the stdio");
    if (sl > 2)
        close(sl);
    return 0;
}

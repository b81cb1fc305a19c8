/* tty: the caller's terminal during a tty exec. See tty.h. */
#include "cli/tty.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static volatile sig_atomic_t is_raw;
static int winch_pipe[2] = {-1, -1};

sg_ctl_winsz sg_cli_tty_size(void)
{
    struct winsize w = {0};
    if (ioctl(0, TIOCGWINSZ, &w) < 0 && ioctl(1, TIOCGWINSZ, &w) < 0)
        return (sg_ctl_winsz){0, 0};
    return (sg_ctl_winsz){w.ws_row, w.ws_col};
}

int sg_cli_tty_raw(bool input_too)
{
    if (tcgetattr(0, &saved) < 0)
        return -errno;
    struct termios raw = saved;
    if (input_too)
        cfmakeraw(&raw);
    else
        raw.c_oflag &= ~(tcflag_t)OPOST; /* the sandbox's terminal did the output processing */
    /* Set before the change: a signal between the two restores too much,
     * never too little. */
    is_raw = 1;
    if (tcsetattr(0, TCSADRAIN, &raw) < 0) {
        is_raw = 0;
        return -errno;
    }
    return 0;
}

bool sg_cli_tty_restore(void)
{
    if (!is_raw)
        return false;
    is_raw = 0;
    int e = errno;
    tcsetattr(0, TCSANOW, &saved);
    errno = e;
    return true;
}

static void on_winch(int sig)
{
    (void)sig;
    int e = errno;
    if (winch_pipe[1] >= 0)
        (void)!write(winch_pipe[1], "w", 1);
    errno = e;
}

int sg_cli_tty_winch_fd(void)
{
    if (winch_pipe[0] < 0 && pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
    sigaction(SIGWINCH, &sa, NULL);
    return winch_pipe[0];
}

void sg_cli_tty_winch_clear(void)
{
    char b[64];
    while (winch_pipe[0] >= 0 && read(winch_pipe[0], b, sizeof b) > 0)
        ;
}

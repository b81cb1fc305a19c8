/* sgt_fork: fork() for unit tests. cmocka installs handlers for SIGSEGV,
 * SIGILL, SIGFPE, SIGBUS and SIGSYS while a test runs; a forked child
 * inherits them, so a signal the test expects to kill the child (a
 * seccomp SIGSYS, the SIGSEGV of `int $0x80` on a kernel without ia32
 * emulation) became cmocka's "Test failed with exception" and exit 1.
 * Every child of a unit test starts with the default disposition of every
 * signal and none blocked, as a freshly exec'd program would. */
#ifndef SGT_FORK_H
#define SGT_FORK_H

#include <signal.h>
#include <unistd.h>

static inline void sgt_default_signals(void)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL); /* EINVAL for the numbers libc keeps: fine */
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

static inline pid_t sgt_fork(void)
{
    pid_t pid = fork();
    if (pid == 0)
        sgt_default_signals();
    return pid;
}

#endif

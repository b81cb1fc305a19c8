/* execnotify and execargs against the real kernel: a forked child loads
 * the notify filter and hands its listener over; its own children's execve
 * calls are held, read and let go here. execargs is also pointed at this
 * process's own memory with hostile pointers (unmapped, unterminated,
 * huge, too many). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bounds.h"
#include "capture/execargs.h"
#include "sandbox/execnotify.h"
#include "wire/seqpacket.h"

static struct seccomp_data execve_data(const void *path, const void *argv)
{
    struct seccomp_data d = {.nr = __NR_execve};
    d.args[0] = (uint64_t)(uintptr_t)path;
    d.args[1] = (uint64_t)(uintptr_t)argv;
    return d;
}

static void test_args_plain(void **state)
{
    (void)state;
    char *argv[] = {"/bin/echo", "a b", "", "\xff", NULL};
    struct seccomp_data d = execve_data("/bin/echo", argv);
    sg_execargs a;
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_string_equal(a.path, "/bin/echo");
    assert_false(a.truncated);
    assert_int_equal(json_array_size(a.argv), 4);
    assert_string_equal(json_string_value(json_array_get(a.argv, 1)), "a b");
    assert_string_equal(json_string_value(json_array_get(a.argv, 2)), "");
    assert_non_null(json_string_value(json_array_get(a.argv, 3))); /* invalid UTF-8, sanitized */
    sg_execargs_clear(&a);
    /* execveat with AT_EMPTY_PATH and "": no path; a NULL argv: empty */
    struct seccomp_data at = {.nr = __NR_execveat};
    at.args[1] = (uint64_t)(uintptr_t)"";
    at.args[4] = AT_EMPTY_PATH;
    assert_int_equal(sg_execargs_read(getpid(), &at, &a), 0);
    assert_null(a.path);
    assert_int_equal(json_array_size(a.argv), 0);
    sg_execargs_clear(&a);
    struct seccomp_data other = {.nr = __NR_getpid};
    assert_int_equal(sg_execargs_read(getpid(), &other, &a), -1);
}

/* Two pages: the first mapped, the second not. */
static char *guarded(void)
{
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    munmap(m + 4096, 4096);
    return m;
}

static void test_args_hostile(void **state)
{
    (void)state;
    sg_execargs a;
    /* unmapped pointers: the path, the array */
    struct seccomp_data d = execve_data((void *)0x1000, (void *)0x2000);
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_null(a.path);
    assert_true(a.truncated);
    assert_int_equal(json_array_size(a.argv), 0);
    sg_execargs_clear(&a);
    /* an address that wraps around */
    d = execve_data((void *)UINTPTR_MAX, (void *)(UINTPTR_MAX - 3));
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_true(a.truncated);
    sg_execargs_clear(&a);
    /* a string that runs into unmapped memory, and an array with no NULL
     * before it does */
    char *m = guarded(), *m2 = guarded();
    memset(m, 'x', 4096);
    char **arr = (char **)(void *)(m2 + 4096 - 2 * sizeof(char *));
    arr[0] = m + 4000;
    arr[1] = m + 4000;
    d = execve_data(m + 4090, arr);
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_string_equal(a.path, "xxxxxx");
    assert_true(a.truncated);
    assert_int_equal(json_array_size(a.argv), 2);
    assert_int_equal(strlen(json_string_value(json_array_get(a.argv, 0))), 96);
    sg_execargs_clear(&a);
    munmap(m, 4096);
    munmap(m2, 4096);
}

static void test_args_bounds(void **state)
{
    (void)state;
    sg_execargs a;
    /* too many */
    char *many[SG_PROC_ARGS_MAX + 50];
    for (size_t i = 0; i < SG_PROC_ARGS_MAX + 49; i++)
        many[i] = "a";
    many[SG_PROC_ARGS_MAX + 49] = NULL;
    struct seccomp_data d = execve_data("/bin/true", many);
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_int_equal(json_array_size(a.argv), SG_PROC_ARGS_MAX);
    assert_true(a.truncated);
    sg_execargs_clear(&a);
    /* exactly the most: not cut */
    many[SG_PROC_ARGS_MAX] = NULL;
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_int_equal(json_array_size(a.argv), SG_PROC_ARGS_MAX);
    assert_false(a.truncated);
    sg_execargs_clear(&a);
    /* too long: 1 MiB strings */
    size_t big = 1 << 20;
    char *s = malloc(big + 1);
    assert_non_null(s);
    memset(s, 'y', big);
    s[big] = 0;
    char *huge[] = {s, s, NULL};
    d = execve_data(s, huge);
    assert_int_equal(sg_execargs_read(getpid(), &d, &a), 0);
    assert_true(a.truncated);
    assert_int_equal(json_array_size(a.argv), 1);
    assert_int_equal(strlen(json_string_value(json_array_get(a.argv, 0))), SG_PROC_ARGV_MAX);
    assert_int_equal(strlen(a.path), SG_PROC_PATH_MAX);
    sg_execargs_clear(&a);
    free(s);
}

/* A child that loads the filter, sends the listener on sock, then runs
 * nkids children that each execve /bin/true and exits 0 if all did. */
static pid_t holder(int sock, int nkids)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    int fd = sg_execnotify_install();
    if (fd < 0 || sg_seqpacket_send(sock, "L", 1, &fd, 1) < 0)
        _exit(90);
    close(fd);
    for (int i = 0; i < nkids; i++) {
        if (fork() == 0) {
            char *argv[] = {"/bin/true", "held", NULL}, *envp[] = {NULL};
            execve("/bin/true", argv, envp);
            _exit(91);
        }
    }
    int bad = 0, st;
    while (wait(&st) > 0)
        bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    _exit(bad ? 92 : 0);
}

static int take_listener(int sock)
{
    char b;
    int fd = -1;
    size_t nfds = 1;
    assert_int_equal(sg_seqpacket_recv(sock, &b, 1, 0, &fd, &nfds), 1);
    assert_int_equal(nfds, 1);
    return fd;
}

/* A holder of nkids execs, and its listener (*fd). */
static pid_t start_holder(int nkids, int *fd)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    pid_t h = holder(sv[1], nkids);
    close(sv[1]); /* a holder that fails ends the wait for its listener (EOF) */
    *fd = take_listener(sv[0]);
    close(sv[0]);
    return h;
}

static int wait_recv(int fd, struct seccomp_notif *n)
{
    for (int i = 0; i < 60000; i++) { /* up to a minute */
        int r = sg_execnotify_recv(fd, n);
        if (r != 0)
            return r;
        usleep(1000);
    }
    return 0;
}

static void test_hold(void **state)
{
    (void)state;
    if (!sg_execnotify_supported())
        skip();
    int fd = -1;
    pid_t h = start_holder(2, &fd);
    struct seccomp_notif n1, n2;
    assert_int_equal(wait_recv(fd, &n1), 1);
    /* read while held, then still valid: the reads were its */
    sg_execargs a;
    assert_int_equal(sg_execargs_read((pid_t)n1.pid, &n1.data, &a), 0);
    assert_string_equal(a.path, "/bin/true");
    assert_string_equal(json_string_value(json_array_get(a.argv, 1)), "held");
    sg_execargs_clear(&a);
    assert_true(sg_execnotify_valid(fd, n1.id));
    /* n1 is left unanswered, as by a reader that died: the next reader's
     * first notification finds it below its own id */
    assert_int_equal(wait_recv(fd, &n2), 1);
    assert_true(n2.id != n1.id);
    sg_execnotify_release_stuck(fd, n2.id > n1.id ? n2.id : n1.id + 1);
    assert_false(sg_execnotify_valid(fd, n1.id));
    if (n2.id > n1.id)
        assert_int_equal(sg_execnotify_continue(fd, n2.id), 0);
    int st;
    assert_int_equal(waitpid(h, &st, 0), h);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(fd);
}

static void test_killed_while_held(void **state)
{
    (void)state;
    if (!sg_execnotify_supported())
        skip();
    int fd = -1;
    pid_t h = start_holder(1, &fd);
    struct seccomp_notif n;
    assert_int_equal(wait_recv(fd, &n), 1);
    /* SIGKILL ends it without an answer; its id is then no longer valid
     * (a pid read before would not be trusted) and answering it fails */
    assert_int_equal(kill((pid_t)n.pid, SIGKILL), 0);
    for (int i = 0; i < 60000 && sg_execnotify_valid(fd, n.id); i++)
        usleep(1000);
    assert_false(sg_execnotify_valid(fd, n.id));
    assert_int_equal(sg_execnotify_continue(fd, n.id), -ENOENT);
    int st;
    assert_int_equal(waitpid(h, &st, 0), h);
    assert_int_equal(WEXITSTATUS(st), 92); /* its child was killed */
    /* every user of the filter gone: the listener says so, never blocks */
    struct seccomp_notif none;
    assert_true(sg_execnotify_recv(fd, &none) <= 0);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args_plain),
        cmocka_unit_test(test_args_hostile),
        cmocka_unit_test(test_args_bounds),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_killed_while_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

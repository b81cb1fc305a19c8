/* seccomp and privs: builds the real filter, applies it in forked children
 * (as an unprivileged uid and as root, whole or split as init and its exec
 * children load it) and checks what the kernel then answers to refused and
 * allowed calls. Privilege tests need root. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sgt_fork.h"

#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/privs.h"
#include "sandbox/seccomp.h"

#define NOBODY 65534

/* valgrind answers ENOSYS itself to syscalls it does not know (and checks
 * arguments of those it knows): such checks run only natively. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

static sg_seccomp_prog prog;      /* the whole filter */
static sg_seccomp_prog init_prog; /* init's part (sg_seccomp_build_init) */

static int setup(void **state)
{
    sg_err err = { 0 };
    int rc = sg_seccomp_build(&prog, &err);
    if (rc == 0)
        rc = sg_seccomp_build_init(&init_prog, &err);
    if (rc < 0)
        print_message("# sg_seccomp_build: %s\n", err.msg);
    return rc;
}

static int teardown(void **state)
{
    sg_seccomp_prog_free(&prog);
    sg_seccomp_prog_free(&init_prog);
    return 0;
}

#define NEED_ROOT()                                                                                \
    do {                                                                                           \
        if (geteuid() != 0)                                                                        \
            skip();                                                                                \
    } while (0)

/* Child side: failures are written to the pipe, one line each. */
static int report_fd = -1;

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        sg_write_all(report_fd, buf, strlen(buf));
    sg_write_all(report_fd, "\n", 1);
}

static void want_errno(const char *what, long rc, int want)
{
    if (rc != -1)
        bad("%s returned %ld, expected %s", what, rc, strerror(want));
    else if (errno != want)
        bad("%s: %s, expected %s", what, strerror(errno), strerror(want));
}

static void want_ok(const char *what, long rc)
{
    if (rc < 0)
        bad("%s failed: %s", what, strerror(errno));
}

/* Runs fn in a forked child; returns what it reported (empty = fine). */
static void run_child(void (*fn)(void), char *out, size_t size, int *status)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    fflush(NULL);
    pid_t pid = sgt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        report_fd = p[1];
        fn();
        _exit(0);
    }
    close(p[1]);
    size_t have = 0;
    ssize_t n;
    while (have < size - 1 && (n = read(p[0], out + have, size - 1 - have)) > 0)
        have += (size_t)n;
    out[have] = '\0';
    close(p[0]);
    assert_int_equal(waitpid(pid, status, 0), pid);
}

/* Runs fn in a forked child, which must report nothing and exit 0. */
static void run_clean(void (*fn)(void))
{
    char out[8192];
    int st;
    run_child(fn, out, sizeof out, &st);
    if (out[0])
        print_message("# %s", out);
    assert_string_equal(out, "");
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A fresh directory in a private mount namespace, where root may mount. */
static bool private_mount_dir(char *dir)
{
    if (!mkdtemp(dir)) {
        bad("mkdtemp: %s", strerror(errno));
        return false;
    }
    if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0) {
        bad("unshare: %s", strerror(errno));
        rmdir(dir);
        return false;
    }
    return true;
}

static void *thread_fn(void *arg)
{
    return arg;
}

/* Status of a grandchild that runs an x32 syscall. */
static int x32_status(void)
{
    pid_t pid = sgt_fork();
    if (pid == 0) {
#if defined(__x86_64__)
        syscall(0x40000000 | SYS_getpid);
#endif
        _exit(3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static void check_filtered_calls(void)
{
    want_errno("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER), EPERM);
    want_errno("unshare(CLONE_NEWNS)", unshare(CLONE_NEWNS), EPERM);
    want_errno("setns", setns(0, CLONE_NEWNET), EPERM);
    want_errno("keyctl", syscall(SYS_keyctl, 0, -3, 0), EPERM);
    want_errno("request_key", syscall(SYS_request_key, "user", "x", NULL, 0), EPERM);
    /* Valid-looking zeroed argument blocks, so valgrind passes the calls on. */
    static uint64_t zero[64];
    want_errno("io_uring_setup", syscall(SYS_io_uring_setup, 1, zero), EPERM);
    want_errno("bpf", syscall(SYS_bpf, 0, zero, 64), EPERM);
    want_errno("perf_event_open", syscall(SYS_perf_event_open, zero, 0, -1, -1, 0), EPERM);
    struct {
        unsigned bytes;
        int type;
        unsigned char h[128];
    } handle = { .bytes = 128 };
    int mount_id;
    want_errno("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &handle, &mount_id, 0), EPERM);
    if (!RUNNING_ON_VALGRIND) {
        want_errno("userfaultfd", syscall(SYS_userfaultfd, 1), EPERM);
        want_errno("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", 0), EPERM);
        want_errno("fsopen", syscall(SYS_fsopen, "tmpfs", 0), EPERM);
    }
    /* another process's fds and memory; vsock; the LDT; secret memory */
    if (!RUNNING_ON_VALGRIND) /* valgrind answers it with ENOSYS itself */
        want_errno("pidfd_getfd", syscall(438 /* SYS_pidfd_getfd */, 0, 0, 0), EPERM);
    want_errno("process_vm_readv", syscall(SYS_process_vm_readv, getppid(), zero, 1, zero, 1, 0), EPERM);
    want_errno("process_vm_writev", syscall(SYS_process_vm_writev, getppid(), zero, 1, zero, 1, 0), EPERM);
    want_errno("socket(AF_VSOCK)", socket(AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
    want_errno("socket(AF_VSOCK | 1<<32)", syscall(SYS_socket, (1L << 32) | AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
    int sv[2];
    want_errno("socketpair(AF_VSOCK)", socketpair(AF_VSOCK, SOCK_STREAM, 0, sv), EAFNOSUPPORT);
    want_ok("socket(AF_UNIX) still works", socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
#if defined(__x86_64__) || defined(__i386__)
    if (!RUNNING_ON_VALGRIND) /* valgrind answers it with ENOSYS itself */
        want_errno("modify_ldt", syscall(SYS_modify_ldt, 0, zero, sizeof zero), EPERM);
#endif
    if (!RUNNING_ON_VALGRIND)
        want_errno("memfd_secret", syscall(447 /* SYS_memfd_secret */, 0), EPERM);
    want_errno("clone3", syscall(SYS_clone3, NULL, 0), ENOSYS);
    want_errno("personality(PER_LINUX32)", personality(0x0008), EPERM);
    want_errno("personality(READ_IMPLIES_EXEC)", personality(0x0400000), EPERM);
    want_errno("personality(0x80000000)", personality(0x80000000), EPERM);
    want_errno("personality(0xfffffffe)", personality(0xfffffffe), EPERM);
    want_errno("personality(1<<32)", syscall(SYS_personality, 0x100000000L), EPERM);
    want_ok("personality(query)", personality(0xffffffff));
    want_ok("personality(PER_LINUX)", personality(0));

    static const unsigned long nsflags[] = { CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID,
                                             CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC,
                                             CLONE_NEWCGROUP };
    for (size_t i = 0; i < SG_ARRAY_LEN(nsflags); i++) {
        long rc = syscall(SYS_clone, (long)(nsflags[i] | SIGCHLD), 0L, 0L, 0L, 0L);
        if (rc == 0)
            _exit(0);
        if (rc > 0)
            waitpid((pid_t)rc, NULL, 0);
        if (rc != -1 || errno != EPERM)
            bad("clone(0x%lx) was not refused with EPERM (rc %ld, %s)", nsflags[i], rc, strerror(errno));
    }

    pid_t pid = sgt_fork();
    if (pid == 0)
        _exit(ptrace(PTRACE_TRACEME, 0, NULL, NULL) == -1 && errno == EPERM ? 0 : 1);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad("fork or ptrace(PTRACE_TRACEME) misbehaved (status 0x%x)", st);

    /* What must keep working: threads (glibc falls back from clone3), I/O. */
    pthread_t t;
    void *ret = NULL;
    if (pthread_create(&t, NULL, thread_fn, (void *)0x5) != 0 || pthread_join(t, &ret) != 0 || ret != (void *)0x5)
        bad("pthread_create failed under the filter");
    want_ok("getpid", getpid());
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    want_ok("open /dev/null", fd);
    want_ok("write /dev/null", write(fd, "x", 1));
    close(fd);

    st = x32_status();
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) && !(WIFEXITED(st) && WEXITSTATUS(st) == 3))
        bad("x32 syscall not killed (status 0x%x)", st);
}

static void child_unprivileged(void)
{
    int rc = sg_privs_drop(NOBODY, NOBODY);
    if (rc < 0) {
        bad("sg_privs_drop: %s", strerror(-rc));
        return;
    }
    /* Control: without the filter this unprivileged process may create a
     * user namespace, so the EPERM below comes from the filter. */
    pid_t pid = sgt_fork();
    if (pid == 0)
        _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad("control: unshare(CLONE_NEWUSER) fails even without the filter");
    rc = sg_seccomp_apply(&prog);
    if (rc < 0) {
        bad("sg_seccomp_apply: %s", strerror(-rc));
        return;
    }
    check_filtered_calls();
}

static void child_root(void)
{
    /* Control first: root can mount, in a private mount namespace. */
    char dir[] = "/tmp/sg-test-seccomp-XXXXXX";
    if (!private_mount_dir(dir))
        return;
    want_ok("mount before the filter", mount("tmpfs", dir, "tmpfs", 0, NULL));
    want_ok("umount before the filter", umount2(dir, 0));
    int rc = sg_seccomp_apply(&prog);
    if (rc < 0) {
        bad("sg_seccomp_apply: %s", strerror(-rc));
        rmdir(dir);
        return;
    }
    want_errno("mount", mount("tmpfs", dir, "tmpfs", 0, NULL), EPERM);
    want_errno("pivot_root", syscall(SYS_pivot_root, dir, dir), EPERM);
    want_errno("chroot", chroot(dir), EPERM);
    /* Arguments the kernel would refuse anyway, should the filter fail. */
    if (!RUNNING_ON_VALGRIND) {
        want_errno("reboot", syscall(SYS_reboot, 0, 0, 0, NULL), EPERM);
        want_errno("swapoff", syscall(SYS_swapoff, "/nonexistent"), EPERM);
        want_errno("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0x7fff0000UL), EPERM);
    }
    want_errno("acct", acct("/nonexistent/acct"), EPERM);
    want_errno("delete_module", syscall(SYS_delete_module, "sg_nonexistent", 0), EPERM);
    char img[4] = { 0 };
    want_errno("init_module", syscall(SYS_init_module, img, sizeof img, ""), EPERM);
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        bad("no_new_privs not set by sg_seccomp_apply");
    check_filtered_calls();
    rmdir(dir);
}

/* clone3 as init calls it (no flags): the new process's pid, 0 in it. */
static long plain_clone3(void)
{
    struct clone_args args = { .exit_signal = SIGCHLD };
    return syscall(SYS_clone3, &args, sizeof args);
}

static bool status_has(const char *line)
{
    sg_err err = { 0 };
    sg_autofree char *s = sg_read_file("/proc/self/status", 65536, NULL, &err);
    return s && strstr(s, line);
}

/* An exec child of the split filter, cloned by init under init's part:
 * drops privileges (under init's part), adds the child part and must then
 * be refused all the whole filter refuses. */
static void split_exec_child(void)
{
    int rc = sg_privs_drop(NOBODY, NOBODY);
    if (rc < 0) {
        bad("sg_privs_drop under init's part: %s", strerror(-rc));
        return;
    }
    /* sg_privs_drop's no_new_privs is what allows the load, as in init.c. */
    rc = sg_seccomp_load(sg_seccomp_child_prog());
    if (rc < 0) {
        bad("loading the child part: %s", strerror(-rc));
        return;
    }
    if (!status_has("\nSeccomp:\t2\n"))
        bad("status lacks Seccomp: 2");
    if (!status_has("\nSeccomp_filters:\t2\n") && status_has("\nSeccomp_filters:"))
        bad("status does not count 2 filters");
    want_ok("getpid", getpid());
    check_filtered_calls();
}

/* As init: as root in a private mount namespace, loads its part on itself
 * without no_new_privs, may still clone3, and its exec children load only
 * the child part. */
static void child_split(void)
{
    char dir[] = "/tmp/sg-test-seccomp-XXXXXX";
    if (!private_mount_dir(dir))
        return;
    int rc = sg_seccomp_load(&init_prog);
    if (rc < 0) {
        bad("loading init's part with CAP_SYS_ADMIN: %s", strerror(-rc));
        rmdir(dir);
        return;
    }
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 0)
        bad("sg_seccomp_load set no_new_privs");
    want_errno("mount under init's part", mount("tmpfs", dir, "tmpfs", 0, NULL), EPERM);
    want_errno("unshare(CLONE_NEWNS) under init's part", unshare(CLONE_NEWNS), EPERM);
    rmdir(dir);

    /* valgrind answers clone3 with ENOSYS itself: fork stands in there. */
    pid_t pid;
    if (RUNNING_ON_VALGRIND) {
        pid = sgt_fork();
    } else {
        want_errno("clone3 with a bad size under init's part", syscall(SYS_clone3, NULL, 0), EINVAL);
        pid = (pid_t)plain_clone3();
    }
    if (pid < 0) {
        bad("clone3 under init's part: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        split_exec_child();
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad("the exec child under the split filter ended with status 0x%x", st);
}

/* The child part alone: the arch check comes before the number. */
static void child_part_alone(void)
{
    int rc = sg_seccomp_apply(sg_seccomp_child_prog());
    if (rc < 0) {
        bad("sg_seccomp_apply(child part): %s", strerror(-rc));
        return;
    }
    want_errno("clone3", syscall(SYS_clone3, NULL, 0), ENOSYS);
    want_ok("getpid", getpid());
    want_ok("unshare(0) (init's part refuses it)", unshare(0));
#if defined(__x86_64__)
    if (RUNNING_ON_VALGRIND)
        return; /* it does not pass int 0x80 on to the kernel */
    pid_t pid = sgt_fork();
    if (pid == 0) {
        long ret;
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory"); /* i386 getpid */
        _exit(3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    /* SIGSEGV: a kernel without ia32 emulation. */
    if (!(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSYS || WTERMSIG(st) == SIGSEGV)))
        bad("i386 syscall not killed by the child part (status 0x%x)", st);
#endif
}

static void test_child_prog(void **state)
{
    const sg_seccomp_prog *c = sg_seccomp_child_prog();
#if defined(__x86_64__)
    assert_non_null(c);
#endif
    if (!c)
        skip();
    assert_true(c->len > 0 && c->len <= 16);
    assert_int_equal(BPF_CLASS(c->insns[c->len - 1].code), BPF_RET);
    /* Init's part is the whole filter less the clone3 rule. */
    assert_true(init_prog.len < prog.len);
    print_message("# init's part: %zu BPF instructions, the child part: %zu\n", init_prog.len, c->len);
}

static void test_filter_split(void **state)
{
    NEED_ROOT();
    if (!sg_seccomp_child_prog())
        skip();
    run_clean(child_split);
}

static void test_child_part_alone(void **state)
{
    if (!sg_seccomp_child_prog())
        skip();
    run_clean(child_part_alone);
}

static void test_build(void **state)
{
    assert_non_null(prog.insns);
    assert_true(prog.len > 10 && prog.len <= BPF_MAXINSNS);
    /* The program ends in return instructions and is deterministic. */
    assert_int_equal(BPF_CLASS(prog.insns[prog.len - 1].code), BPF_RET);
    sg_seccomp_prog again;
    sg_err err = { 0 };
    assert_int_equal(sg_seccomp_build(&again, &err), 0);
    assert_int_equal(again.len, prog.len);
    assert_memory_equal(again.insns, prog.insns, prog.len * sizeof *prog.insns);
    sg_seccomp_prog_free(&again);
    assert_null(again.insns);
    sg_seccomp_prog_free(&again); /* idempotent */
    print_message("# filter: %zu BPF instructions\n", prog.len);
}

static void test_apply_rejects_bad_prog(void **state)
{
    sg_seccomp_prog empty = { 0 };
    assert_int_equal(sg_seccomp_apply(&empty), -EINVAL);
    assert_int_equal(sg_seccomp_apply(NULL), -EINVAL);
    sg_seccomp_prog huge = { .insns = prog.insns, .len = BPF_MAXINSNS + 1 };
    assert_int_equal(sg_seccomp_apply(&huge), -EINVAL);
    assert_int_equal(sg_seccomp_load(&empty), -EINVAL);
    assert_int_equal(sg_seccomp_load(NULL), -EINVAL);
    assert_int_equal(sg_seccomp_load(&huge), -EINVAL);
}

static void test_filter_unprivileged(void **state)
{
    NEED_ROOT();
    run_clean(child_unprivileged);
}

static void test_filter_root(void **state)
{
    NEED_ROOT();
    run_clean(child_root);
}

/* Status fields of /proc/self/status after the drop. */
static void child_privs(void)
{
    int rc = sg_privs_drop(NOBODY, NOBODY);
    if (rc < 0) {
        bad("sg_privs_drop: %s", strerror(-rc));
        return;
    }
    sg_err err = { 0 };
    sg_autofree char *s = sg_read_file("/proc/self/status", 65536, NULL, &err);
    if (!s) {
        bad("%s", err.msg);
        return;
    }
    static const char *const want[] = {
        "\nCapInh:\t0000000000000000\n", "\nCapPrm:\t0000000000000000\n",
        "\nCapEff:\t0000000000000000\n", "\nCapBnd:\t0000000000000000\n",
        "\nCapAmb:\t0000000000000000\n", "\nNoNewPrivs:\t1\n",
        "\nUid:\t65534\t65534\t65534\t65534\n", "\nGid:\t65534\t65534\t65534\t65534\n",
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(want); i++)
        if (!strstr(s, want[i]))
            bad("status lacks %s", want[i] + 1);
    /* "Groups:" lists nothing (the kernel may print a trailing blank). */
    const char *g = strstr(s, "\nGroups:");
    if (!g)
        bad("status lacks Groups");
    else
        for (g += 9; *g && *g != '\n'; g++)
            if (*g != ' ' && *g != '\t') {
                bad("supplementary groups left");
                break;
            }
    want_errno("setuid(0)", setuid(0), EPERM);
    want_errno("setgroups", setgroups(0, NULL), EPERM);
    /* A second drop cannot work: the bounding set needs CAP_SETPCAP. */
    rc = sg_privs_drop(NOBODY, NOBODY);
    if (rc != -EPERM)
        bad("second sg_privs_drop returned %d, expected -EPERM", rc);
}

static void test_privs_drop(void **state)
{
    NEED_ROOT();
    run_clean(child_privs);
}

/* Dropping to uid 0 still leaves no capability: the bounding set is empty. */
static void child_privs_uid0(void)
{
    int rc = sg_privs_drop(0, 0);
    if (rc < 0) {
        bad("sg_privs_drop(0): %s", strerror(-rc));
        return;
    }
    want_errno("mount as capless root", mount("tmpfs", "/tmp", "tmpfs", 0, NULL), EPERM);
    want_errno("chown as capless root", chown("/proc/self/status", 1, 1), EPERM);
}

static void test_privs_uid0(void **state)
{
    NEED_ROOT();
    run_clean(child_privs_uid0);
}

/* The bounding set alone: what execve may grant goes, what we hold stays. */
static void child_bounding(void)
{
    int rc = sg_privs_drop_bounding();
    if (rc < 0) {
        bad("sg_privs_drop_bounding: %s", strerror(-rc));
        return;
    }
    sg_err err = { 0 };
    sg_autofree char *s = sg_read_file("/proc/self/status", 65536, NULL, &err);
    if (!s || !strstr(s, "\nCapBnd:\t0000000000000000\n"))
        bad("bounding set not empty");
    if (!s || strstr(s, "\nCapEff:\t0000000000000000\n"))
        bad("effective set was emptied too");
    /* Still privileged: may create a uts namespace and rename it. */
    want_ok("unshare(CLONE_NEWUTS)", unshare(CLONE_NEWUTS));
    want_ok("sethostname", sethostname("sg-bnd", 6));
    rc = sg_privs_drop(NOBODY, NOBODY);
    if (rc < 0)
        bad("sg_privs_drop after the bounding drop: %s", strerror(-rc));
}

static void test_privs_bounding(void **state)
{
    NEED_ROOT();
    run_clean(child_bounding);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build),
        cmocka_unit_test(test_apply_rejects_bad_prog),
        cmocka_unit_test(test_filter_unprivileged),
        cmocka_unit_test(test_filter_root),
        cmocka_unit_test(test_child_prog),
        cmocka_unit_test(test_filter_split),
        cmocka_unit_test(test_child_part_alone),
        cmocka_unit_test(test_privs_drop),
        cmocka_unit_test(test_privs_uid0),
        cmocka_unit_test(test_privs_bounding),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

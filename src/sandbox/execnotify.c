/* execnotify: execve held for the host (see execnotify.h). */
#include "sandbox/execnotify.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/cleanup.h"

#ifndef SECCOMP_USER_NOTIF_FLAG_CONTINUE
#define SECCOMP_USER_NOTIF_FLAG_CONTINUE (1UL << 0)
#endif

#if defined(__x86_64__) && !defined(__ILP32__)
#define NOTIFY_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__) && !defined(__AARCH64EB__)
#define NOTIFY_ARCH AUDIT_ARCH_AARCH64
#elif defined(__riscv) && __riscv_xlen == 64
#define NOTIFY_ARCH AUDIT_ARCH_RISCV64
#elif defined(__s390x__)
#define NOTIFY_ARCH AUDIT_ARCH_S390X
#endif

bool sg_execnotify_supported(void)
{
#if defined(NOTIFY_ARCH) && defined(SECCOMP_FILTER_FLAG_NEW_LISTENER) && defined(__NR_execveat)
    struct utsname u;
    if (uname(&u) < 0)
        return false;
    char *end;
    long major = strtol(u.release, &end, 10);
    long minor = *end == '.' ? strtol(end + 1, NULL, 10) : 0;
    return major > 5 || (major == 5 && minor >= 5);
#else
    return false;
#endif
}

int sg_execnotify_install(void)
{
#if defined(NOTIFY_ARCH) && defined(SECCOMP_FILTER_FLAG_NEW_LISTENER) && defined(__NR_execveat)
    if (!sg_execnotify_supported())
        return -ENOSYS;
    /* A syscall of another architecture is allowed here: the main filter
     * kills it (so are x32 numbers, which never equal these). */
    struct sock_filter insns[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NOTIFY_ARCH, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execve, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execveat, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog f = {.len = SG_ARRAY_LEN(insns), .filter = insns};
    long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &f);
    if (fd < 0)
        return -errno;
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return (int)fd;
#else
    return -ENOSYS;
#endif
}

int sg_execnotify_recv(int fd, struct seccomp_notif *n)
{
    /* RECV blocks until a notification comes: look first. POLLIN means one
     * waits unreceived; if its caller dies meanwhile the kernel returns
     * ENOENT rather than blocking. */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, 0);
    if (r < 0)
        return errno == EINTR ? 0 : -errno;
    if (r == 0)
        return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
        return (p.revents & POLLIN) ? 0 : -EPIPE;
    memset(n, 0, sizeof *n);
    if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, n) < 0)
        return errno == ENOENT || errno == EINTR ? 0 : -errno;
    return 1;
}

bool sg_execnotify_valid(int fd, uint64_t id)
{
    uint64_t v = id;
    return ioctl(fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &v) == 0;
}

int sg_execnotify_continue(int fd, uint64_t id)
{
    struct seccomp_notif_resp r = {.id = id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
    return ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &r) < 0 ? -errno : 0;
}

void sg_execnotify_release_stuck(int fd, uint64_t first_id)
{
    for (uint64_t back = 1; back <= SG_EXECNOTIFY_STUCK_SCAN; back++)
        if (sg_execnotify_valid(fd, first_id - back))
            sg_execnotify_continue(fd, first_id - back);
}

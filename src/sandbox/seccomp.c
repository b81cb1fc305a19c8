/* seccomp: the syscall denylist, built with libseccomp, exported as BPF.
 * See seccomp.h. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "sandbox/seccomp.h"
#include <seccomp.h> /* libseccomp's: ours is found only by -iquote */

/* Refused with EPERM whatever their arguments. Names libseccomp does not
 * know on this architecture (or at all, for an old libseccomp) are skipped:
 * a call the kernel lacks cannot be made anyway. */
static const char *const deny_eperm[] = {
    "mount", "umount", "umount2", "pivot_root", "chroot",
    "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
    "ptrace", "bpf", "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "unshare", "setns", "swapon", "swapoff", "reboot",
    "open_by_handle_at", "name_to_handle_at", "acct", "quotactl", "quotactl_fd",
    "lookup_dcookie",
    /* another process's descriptors or memory: the ptrace checks allow them
     * between processes of one uid, and every exec of a sandbox runs as the
     * same user (the per-exec Landlock domain, src/privs.c, is the second
     * wall where the kernel has Landlock) */
    "pidfd_getfd", "process_vm_readv", "process_vm_writev", "process_madvise",
    /* no use in a sandbox, a history of kernel bugs */
    "modify_ldt", "memfd_secret",
};

/* Socket families refused with EAFNOSUPPORT. vsock talks to the hypervisor
 * (and the host, on a VM with a virtio-vsock device), and no network
 * namespace isolates it. */
static const int deny_families[] = {
    AF_VSOCK,
};

/* clone() flags that create namespaces. CLONE_NEWTIME (0x80) is left out:
 * in clone() that bit belongs to the exit signal. */
static const unsigned long clone_ns_flags[] = {
    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

/* On s390 the flags are clone()'s second argument. */
#if defined(__s390__) || defined(__s390x__) || defined(__CRIS__)
#define CLONE_FLAGS_ARG 1
#else
#define CLONE_FLAGS_ARG 0
#endif

static void ctx_releasep(scmp_filter_ctx *c)
{
    if (*c)
        seccomp_release(*c);
}

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
                    const struct scmp_arg_cmp *cmp, sg_err *err)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc < 0)
        return sg_err_set(err, -rc, "seccomp rule for %s: %s", name, strerror(-rc));
    return 0;
}

/* The audit number of the architecture we are built for: what the kernel
 * puts in seccomp_data.arch for a native syscall. */
#if defined(__x86_64__) && !defined(__ILP32__)
#define SG_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__i386__)
#define SG_AUDIT_ARCH AUDIT_ARCH_I386
#elif defined(__aarch64__) && !defined(__AARCH64EB__)
#define SG_AUDIT_ARCH AUDIT_ARCH_AARCH64
#elif defined(__riscv) && __riscv_xlen == 64
#define SG_AUDIT_ARCH AUDIT_ARCH_RISCV64
#elif defined(__s390x__)
#define SG_AUDIT_ARCH AUDIT_ARCH_S390X
#endif

#if defined(SG_AUDIT_ARCH) && defined(__NR_clone3)
/* The clone3 rule of the whole filter, for each exec child (seccomp.h).
 * x32 numbers (x86_64's arch with bit 30 set) pass here: the filter init
 * loaded kills them. */
static struct sock_filter child_insns[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SG_AUDIT_ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};
static const sg_seccomp_prog child_prog = {child_insns, SG_ARRAY_LEN(child_insns)};

const sg_seccomp_prog *sg_seccomp_child_prog(void)
{
    return &child_prog;
}
#else
const sg_seccomp_prog *sg_seccomp_child_prog(void)
{
    return NULL;
}
#endif

int sg_seccomp_build(sg_seccomp_prog *out, sg_err *err)
{
    return sg_seccomp_build_layout(out, SG_SECCOMP_TREE, 0, err);
}

int sg_seccomp_build_init(sg_seccomp_prog *out, sg_err *err)
{
    unsigned flags = sg_seccomp_child_prog() ? SG_SECCOMP_NO_CLONE3 : 0;
    return sg_seccomp_build_layout(out, SG_SECCOMP_TREE, flags, err);
}

int sg_seccomp_build_layout(sg_seccomp_prog *out, sg_seccomp_layout layout, unsigned flags,
                            sg_err *err)
{
    memset(out, 0, sizeof *out);
    __attribute__((cleanup(ctx_releasep))) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return sg_err_set(err, ENOMEM, "seccomp_init failed");
    /* Only the native ABI: i386 (int 0x80) and x32 syscalls on x86_64 kill
     * the process; libseccomp's x86_64 filter treats x32 numbers as a
     * foreign architecture. */
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc < 0 && seccomp_api_get() < 3) {
        /* libseccomp probes the running kernel for KILL_PROCESS; the probe
         * fails under valgrind. We only export the program: a kernel
         * without KILL_PROCESS (< 4.14) refuses it at sg_seccomp_apply. */
        seccomp_api_set(3);
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    }
    if (rc < 0)
        return sg_err_set(err, -rc, "seccomp bad-arch action: %s", strerror(-rc));

    /* The tree loads in ~70 us instead of ~105 for the chain
     * (bench/bench_seccomp.c); once per sandbox, in init, or in each exec
     * child where sg_seccomp_child_prog() is NULL. A libseccomp that
     * refuses the attribute keeps the chain. */
    if (layout == SG_SECCOMP_TREE)
        (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

    for (size_t i = 0; i < SG_ARRAY_LEN(deny_eperm); i++)
        if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), deny_eperm[i], 0, NULL, err) < 0)
            return -1;

    for (size_t i = 0; i < SG_ARRAY_LEN(clone_ns_flags); i++) {
        struct scmp_arg_cmp c = SCMP_CMP(CLONE_FLAGS_ARG, SCMP_CMP_MASKED_EQ, clone_ns_flags[i],
                                         clone_ns_flags[i]);
        if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &c, err) < 0)
            return -1;
    }
    /* clone3 passes its flags in memory, out of the filter's reach. */
    if (!(flags & SG_SECCOMP_NO_CLONE3) &&
        add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err) < 0)
        return -1;

    /* personality: only PER_LINUX (0) and the query 0xffffffff. One
     * comparison per rule, so "low 32 bits neither all 0 nor all 1" is
     * written as "some bit i is 1 and bit i+1 (cyclic) is 0": 32 rules.
     * Values above 32 bits (the kernel truncates) are refused too. */
    for (unsigned i = 0; i < 32; i++) {
        uint64_t bit = 1ULL << i, next = 1ULL << ((i + 1) % 32);
        struct scmp_arg_cmp c = SCMP_CMP(0, SCMP_CMP_MASKED_EQ, bit | next, bit);
        if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &c, err) < 0)
            return -1;
    }
    struct scmp_arg_cmp high = SCMP_CMP(0, SCMP_CMP_GT, 0xffffffffULL, 0);
    if (add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &high, err) < 0)
        return -1;

    for (size_t i = 0; i < SG_ARRAY_LEN(deny_families); i++) {
        /* the family is an int: compare its low 32 bits only */
        struct scmp_arg_cmp c = SCMP_CMP(0, SCMP_CMP_MASKED_EQ, 0xffffffffULL,
                                         (uint64_t)(uint32_t)deny_families[i]);
        if (add_rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c, err) < 0 ||
            add_rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socketpair", 1, &c, err) < 0)
            return -1;
    }

    sg_autoclose int fd = memfd_create("sg-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "memfd_create");
    rc = seccomp_export_bpf(ctx, fd);
    if (rc < 0)
        return sg_err_set(err, -rc, "seccomp_export_bpf: %s", strerror(-rc));
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sg_err_sys(err, "fstat");
    size_t size = (size_t)st.st_size;
    if (size == 0 || size % sizeof(struct sock_filter) != 0 ||
        size / sizeof(struct sock_filter) > BPF_MAXINSNS)
        return sg_err_set(err, EINVAL, "seccomp: exported program has a bad size %zu", size);
    sg_autofree struct sock_filter *insns = malloc(size);
    if (!insns)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (size_t have = 0; have < size;) {
        ssize_t n = pread(fd, (char *)insns + have, size - have, (off_t)have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sg_err_sys(err, "cannot read the seccomp program");
        if (n == 0)
            return sg_err_set(err, EIO, "seccomp program truncated");
        have += (size_t)n;
    }
    out->insns = sg_steal_ptr(&insns);
    out->len = size / sizeof(struct sock_filter);
    return 0;
}

void sg_seccomp_prog_free(sg_seccomp_prog *p)
{
    if (!p)
        return;
    free(p->insns);
    p->insns = NULL;
    p->len = 0;
}

static bool prog_ok(const sg_seccomp_prog *p)
{
    return p && p->insns && p->len > 0 && p->len <= BPF_MAXINSNS;
}

int sg_seccomp_load(const sg_seccomp_prog *p)
{
    if (!prog_ok(p))
        return -EINVAL;
    struct sock_fprog f = { .len = (unsigned short)p->len, .filter = p->insns };
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &f, 0, 0) < 0)
        return -errno;
    return 0;
}

int sg_seccomp_apply(const sg_seccomp_prog *p)
{
    /* Checked before no_new_privs: a bad program changes nothing. */
    if (!prog_ok(p))
        return -EINVAL;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    return sg_seccomp_load(p);
}

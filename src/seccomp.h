/* seccomp: the syscall filter user code runs under, built with libseccomp
 * once per sandbox and exported as BPF so that the exec path only needs a
 * prctl() (no libseccomp call, no allocation) in the child.
 *
 * Refused with EPERM: mount/umount, pivot_root, ptrace, bpf, keyctl family,
 * kexec_*, init/finit/delete_module, perf_event_open, userfaultfd,
 * io_uring_*, unshare/setns, clone with namespace flags, swapon/off, reboot,
 * open_by_handle_at, name_to_handle_at, acct, quotactl, lookup_dcookie,
 * personality changes other than PER_LINUX; clone3 gets ENOSYS (glibc falls
 * back to clone, whose flags we can check). Syscalls of a foreign
 * architecture kill the process. */
#ifndef SG_SECCOMP_H
#define SG_SECCOMP_H

#include <linux/filter.h>
#include <stddef.h>

#include "err.h"


typedef struct sg_seccomp_prog {
    struct sock_filter *insns;
    size_t len;
} sg_seccomp_prog;

/* How the syscall numbers are tested. The kernel runs a new filter for
 * every syscall number when it is loaded (to cache the always-allowed
 * ones), so the load costs in proportion to the path a number takes. */
typedef enum sg_seccomp_layout {
    SG_SECCOMP_TREE,  /* a binary tree over the numbers (the default) */
    SG_SECCOMP_CHAIN, /* one test after another (bench/bench_seccomp.c) */
} sg_seccomp_layout;

/* The filter with SG_SECCOMP_TREE. */
int sg_seccomp_build(sg_seccomp_prog *out, sg_err *err);
int sg_seccomp_build_layout(sg_seccomp_prog *out, sg_seccomp_layout layout, sg_err *err);
void sg_seccomp_prog_free(sg_seccomp_prog *p);
/* Sets no_new_privs and loads the program. Async-signal-safe (no malloc):
 * may be called in a forked child. */
int sg_seccomp_apply(const sg_seccomp_prog *p);

#endif

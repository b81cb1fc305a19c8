/* seccomp: the syscall filter user code runs under, built with libseccomp
 * once per sandbox and exported as BPF so that loading it needs only a
 * prctl() (no libseccomp call, no allocation).
 *
 * It is loaded in two parts, because the sandbox's init clones every exec
 * child with clone3 and so cannot run under the clone3 rule: init loads the
 * filter without that rule (SG_SECCOMP_NO_CLONE3) once, on itself, and each
 * exec child inherits it and adds only sg_seccomp_child_prog(), a few
 * instructions that refuse clone3. Stacked filters all run and the most
 * restrictive answer wins, so user code gets exactly the whole filter, and
 * an exec no longer pays the whole filter's load (~100 us of CPU).
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

#include "base/err.h"


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

/* sg_seccomp_build_layout flags */
#define SG_SECCOMP_NO_CLONE3 1u /* leave the clone3 rule out (sg_seccomp_child_prog has it) */

/* The whole filter, with SG_SECCOMP_TREE. */
int sg_seccomp_build(sg_seccomp_prog *out, sg_err *err);
int sg_seccomp_build_layout(sg_seccomp_prog *out, sg_seccomp_layout layout, unsigned flags,
                            sg_err *err);
/* What the sandbox's init loads on itself: the filter without its clone3
 * rule where sg_seccomp_child_prog() exists, else the whole filter (which
 * init then leaves to each exec child). */
int sg_seccomp_build_init(sg_seccomp_prog *out, sg_err *err);
void sg_seccomp_prog_free(sg_seccomp_prog *p);

/* The clone3 rule alone, hand-written BPF: a syscall of another
 * architecture kills the process, clone3 gets ENOSYS, the rest is allowed.
 * Static, never freed. NULL where the build architecture's audit number or
 * clone3's syscall number is not known here. */
const sg_seccomp_prog *sg_seccomp_child_prog(void);

/* Sets no_new_privs and loads the program. Async-signal-safe (no malloc):
 * may be called in a forked child. */
int sg_seccomp_apply(const sg_seccomp_prog *p);
/* Loads the program only: the caller has no_new_privs set already or
 * CAP_SYS_ADMIN in its user namespace (the kernel's condition).
 * Async-signal-safe. */
int sg_seccomp_load(const sg_seccomp_prog *p);

#endif

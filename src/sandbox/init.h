/* init: the sandbox's pid 1. It is cloned by the supervisor into new pid,
 * mount, net, ipc and uts namespaces (and unshares a cgroup namespace once
 * it sits in the sandbox's cgroup), builds the file system view, and then
 * only does three things: spawn exec children on request, report their
 * exits, and reap every other zombie. It never runs user code itself.
 *
 * It listens on a SOCK_SEQPACKET socket (<state>/sb/<id>/init.sock, bound
 * before pivot_root so the host side can reach it) and serves one
 * supervisor connection at a time, so a restarted supervisor can take the
 * sandbox over. The messages are the protocol of wire/spawn.h.
 *
 * Init loads the seccomp filter on itself once, at the end of its set-up,
 * all but the clone3 rule (it clones every exec child with clone3): each
 * child inherits it and adds only that rule, a few instructions, instead
 * of having the kernel translate, JIT-compile and cache the whole filter
 * again (~100 us of CPU). See seccomp.h.
 *
 * The exec path's other fixed costs (clone, privilege drop) are paid ahead
 * of time: after each exec the supervisor asks for a "ready child"
 * (SG_SPAWN_PREPARE) in the next exec's cgroup leaf. It waits on a socket,
 * already unprivileged and filtered, and only gets the command, its stdio
 * and its cwd when the exec comes, from the supervisor itself: init is not
 * on that path, only on the exit's. It waits as sandglass-exec (exec_main.c)
 * when the supervisor gave init that program: the execve of the command
 * then replaces a few pages, not a copy of init (execchild.h). */
#ifndef SG_INIT_H
#define SG_INIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "sandbox/cgroup.h"
#include "sandbox/rootfs.h"
#include "sandbox/seccomp.h"
#include "wire/spawn.h"

typedef struct sg_init_config {
    sg_rootfs_opts rootfs;
    const sg_seccomp_prog *seccomp; /* sg_seccomp_build_init's: init loads it on itself */
    int listen_fd;      /* bound+listening init.sock */
    int ready_fd;       /* write end: "ok" or an error line, then closed */
    int go_fd;          /* read end: the supervisor writes a byte once init is in its cgroup */
    int exec_stub_fd;   /* sandglass-exec, execute-only (exec_main.c); -1: none */
    bool exec_notify;   /* hold every execve for the supervisor (execnotify.h) */
} sg_init_config;

/* Runs in the cloned child; never returns. */
__attribute__((noreturn)) void sg_init_main(const sg_init_config *cfg);

#endif

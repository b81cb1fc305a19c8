/* init: the sandbox's pid 1. It is cloned by the supervisor into new pid,
 * mount, net, ipc and uts namespaces (and unshares a cgroup namespace once
 * it sits in the sandbox's cgroup), builds the file system view, and then
 * only does three things: spawn exec children on request, report their
 * exits, and reap every other zombie. It never runs user code itself.
 *
 * It listens on a SOCK_SEQPACKET socket (<state>/sb/<id>/init.sock, bound
 * before pivot_root so the host side can reach it) and serves one
 * supervisor connection at a time, so a restarted supervisor can take the
 * sandbox over. Messages are the fixed structs below.
 *
 * Init loads the seccomp filter on itself once, at the end of its set-up,
 * all but the clone3 rule (it clones every exec child with clone3): each
 * child inherits it and adds only that rule, a few instructions, instead
 * of having the kernel translate, JIT-compile and cache the whole filter
 * again (~100 us of CPU). See seccomp.h.
 *
 * The exec path's other fixed costs (clone, privilege drop) are paid ahead
 * of time: after each exec the supervisor asks for a "ready child"
 * (SG_INIT_PREPARE) in the next exec's cgroup leaf. It waits on a socket,
 * already unprivileged and filtered, and only gets the command, its stdio
 * and its cwd when the exec comes, from the supervisor itself: init is not
 * on that path, only on the exit's. It waits as sandglass-exec (exec_main.c)
 * when the supervisor gave init that program: the execve of the command
 * then replaces a few pages, not a copy of init (execchild.h). */
#ifndef SG_INIT_H
#define SG_INIT_H

#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "sandbox/cgroup.h"
#include "sandbox/rootfs.h"
#include "sandbox/seccomp.h"

#define SG_INIT_MSG_MAX (64 * 1024)

enum sg_init_type {
    SG_INIT_SPAWN = 1,   /* sup -> init: sg_init_spawn + strings; fds: stdin, stdout, stderr, cgroup.procs... */
    SG_INIT_SPAWNED = 2, /* init -> sup: sg_init_reply (pid or error) */
    SG_INIT_EXITED = 3,  /* init -> sup: sg_init_reply (status, rusage) */
    SG_INIT_SIGNAL = 4,  /* sup -> init: sg_init_spawn header only: signal the exec's process group */
    SG_INIT_PREPARE = 5, /* sup -> init: sg_init_spawn header only (exec_id, uid, gid, rlimit_as);
                            fd: a v2 leaf directory. init readies a child in it for the exec
                            exec_id, the supervisor's next one. */
    SG_INIT_READY = 6,   /* init -> sup: sg_init_reply (exec_id, pid); fd: the ready child's
                            socket, where the supervisor sends it the exec (see below) */
};

/* sg_init_spawn.flags (PREPARE) */
#define SG_INIT_F_TAKEN 1u /* the supervisor handed the last ready child an exec: keep it */
/* The ready child takes an exec on its socket: the message of an
 * SG_INIT_SPAWN (sg_ctl framing, type SG_CTL_REQ) with the three stdio fds,
 * and answers "k" before it runs it. How long the supervisor waits for that
 * before it has the exec cloned instead (a stopped or dying ready child
 * never takes it): */
#define SG_INIT_READY_ACK_MS 1000

typedef struct sg_init_spawn {
    uint32_t type;
    uint32_t exec_id;
    uint32_t uid, gid;
    uint32_t argc, envc;   /* strings follow: argv..., env..., cwd, each NUL-terminated */
    uint32_t nfds_cg;      /* number of cgroup fds after the 3 stdio fds */
    int32_t sig;           /* SG_INIT_SIGNAL */
    uint32_t cg_into;      /* 1: the cgroup fd is a v2 leaf directory to clone3 into;
                              0: cgroup.procs fds the child writes "0" to */
    uint32_t flags;        /* SG_INIT_F_* */
    uint64_t rlimit_as;    /* rootless without cgroups: RLIMIT_AS per process, 0 = none */
} sg_init_spawn;

typedef struct sg_init_reply {
    uint32_t type;
    uint32_t exec_id;
    int32_t pid;           /* pid inside the sandbox */
    int32_t err;           /* errno when the spawn failed */
    int32_t status;        /* wait status (EXITED) */
    int32_t pad;
    int64_t maxrss_kb;
    int64_t utime_us, stime_us;
} sg_init_reply;

typedef struct sg_init_config {
    sg_rootfs_opts rootfs;
    const sg_seccomp_prog *seccomp; /* sg_seccomp_build_init's: init loads it on itself */
    int listen_fd;      /* bound+listening init.sock */
    int ready_fd;       /* write end: "ok" or an error line, then closed */
    int go_fd;          /* read end: the supervisor writes a byte once init is in its cgroup */
    int exec_stub_fd;   /* sandglass-exec, execute-only (exec_main.c); -1: none */
} sg_init_config;

/* Runs in the cloned child; never returns. */
__attribute__((noreturn)) void sg_init_main(const sg_init_config *cfg);

#endif

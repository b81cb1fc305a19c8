/* spawn: the protocol between the supervisor and the sandbox's init
 * (sandbox/init.h), and the exec a ready child takes.
 *
 * init.sock is a SOCK_SEQPACKET socket (<state>/sb/<id>/init.sock);
 * messages are seqpacket.h's plain frames: fixed structs, no type byte,
 * fds as SCM_RIGHTS. Both ends are ours and run the same build, but init
 * is inside the sandbox and its socket outlives a supervisor, so each end
 * checks what it reads (sizes, counts, string terminators).
 *
 *   supervisor -> init   an sg_spawn_hdr, for EXEC followed by the strings
 *                        (sg_spawn_encode); its type says what it is.
 *   init -> supervisor   one sg_spawn_reply (sg_spawn_reply_decode).
 *   supervisor -> ready child   the EXEC message as a typed frame
 *                        (SG_SPAWN_READY_TYPE) with the three stdio fds; the
 *                        child answers the byte "k" once it took it.
 *
 * libc only: sandglass-exec (musl) decodes its exec with this module. */
#ifndef SG_SPAWN_H
#define SG_SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The largest supervisor -> init message: header, argv, env and cwd. */
#define SG_SPAWN_MSG_MAX (64 * 1024)

enum sg_spawn_type {
    SG_SPAWN_EXEC = 1,    /* sup -> init: sg_spawn_hdr + strings; fds: stdin, stdout, stderr, cgroup fds... */
    SG_SPAWN_SPAWNED = 2, /* init -> sup: sg_spawn_reply (pid or error) */
    SG_SPAWN_EXITED = 3,  /* init -> sup: sg_spawn_reply (status, rusage) */
    SG_SPAWN_SIGNAL = 4,  /* sup -> init: sg_spawn_hdr only: signal the exec's process group */
    SG_SPAWN_PREPARE = 5, /* sup -> init: sg_spawn_hdr only (exec_id, uid, gid, rlimit_as);
                             fd: a v2 leaf directory. init readies a child in it for the exec
                             exec_id, the supervisor's next one. */
    SG_SPAWN_READY = 6,   /* init -> sup: sg_spawn_reply (exec_id, pid); fd: the ready child's
                             socket, where the supervisor sends it the exec (see above) */
    SG_SPAWN_NOTIFY = 7,  /* init -> sup, first on each connection when execs are held:
                             sg_spawn_reply (type only); fds: the execve listener
                             (sandbox/execnotify.h), then init's in-flight page
                             (sg_execnotify_inflight) when init has one */
};

/* sg_spawn_hdr.flags (PREPARE) */
#define SG_SPAWN_F_TAKEN 1u /* the supervisor handed the last ready child an exec: keep it */

/* The type byte of the exec a ready child takes on its socket (the value
 * the control protocol's REQ has: one receive path in sandglass-exec). */
#define SG_SPAWN_READY_TYPE 1
/* How long the supervisor waits for the ready child's "k" before it kills
 * a child that has not read the exec (a child stopped again after the
 * hand-off's SIGCONT, or wedged, never takes it; a dying one is reported by
 * init at once): then, and only once init reports that child's exit, the
 * exec is cloned (sv_handoff.c). Long, as only those cases wait it out: on
 * a loaded host a child that is merely late must not be killed as it
 * starts the command (it was 1 s). */
#define SG_SPAWN_READY_ACK_MS 5000

typedef struct sg_spawn_hdr {
    uint32_t type;
    uint32_t exec_id;
    uint32_t uid, gid;
    uint32_t argc, envc;   /* strings follow: argv..., env..., cwd, each NUL-terminated */
    uint32_t nfds_cg;      /* number of cgroup fds after the 3 stdio fds */
    int32_t sig;           /* SG_SPAWN_SIGNAL */
    uint32_t cg_into;      /* 1: the cgroup fd is a v2 leaf directory to clone3 into;
                              0: cgroup.procs fds the child writes "0" to */
    uint32_t flags;        /* SG_SPAWN_F_* */
    uint64_t rlimit_as;    /* rootless without cgroups: RLIMIT_AS per process, 0 = none */
} sg_spawn_hdr;

typedef struct sg_spawn_reply {
    uint32_t type;
    uint32_t exec_id;
    int32_t pid;           /* pid inside the sandbox */
    int32_t err;           /* errno when the spawn failed */
    int32_t status;        /* wait status (EXITED) */
    int32_t pad;
    int64_t maxrss_kb;
    int64_t utime_us, stime_us;
} sg_spawn_reply;

/* An EXEC message into buf (cap bytes): *h with argc and envc counted from
 * argv and envp (NULL-terminated), then argv..., envp..., cwd, each
 * NUL-terminated. Returns the length, or -E2BIG when it does not fit. */
ssize_t sg_spawn_encode(void *buf, size_t cap, const sg_spawn_hdr *h, char *const *argv,
                        char *const *envp, const char *cwd);

/* The header of a supervisor -> init message: 0 with *h filled when msg
 * holds one (EXEC messages have strings after it), else -1. */
int sg_spawn_hdr_decode(const void *msg, size_t len, sg_spawn_hdr *h);

/* Splits an EXEC message's strings into argv and envp (NULL-terminated
 * arrays in strs, nstrs entries at the most, pointing into msg) and cwd.
 * Returns 0 if they are well formed: argc >= 1 and exactly argc + envc + 1
 * strings, each NUL-terminated, filling the message to its end; else -1
 * (also when strs is too small for them). */
int sg_spawn_decode(char *msg, size_t len, char **strs, size_t nstrs, char ***argv, char ***envp,
                    char **cwd);

/* An init -> supervisor message: 0 with *r filled when msg is exactly one
 * reply of a type init sends (SPAWNED, EXITED, READY, NOTIFY), else -1. */
int sg_spawn_reply_decode(const void *msg, size_t len, sg_spawn_reply *r);

#endif

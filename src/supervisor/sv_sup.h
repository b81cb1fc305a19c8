/* sv_sup: one supervisor's state, `sv_sup`, which holds the sandbox's life
 * (its init, cgroup, record, capture) and its objects' state: the execs
 * (`sv_exec`, sv_exec.h), the control connections (`sv_client`,
 * sv_client.h), the leaves (sv_leaves.h), the kill switch (killswitch.h,
 * sv_killswitch.h) and the checkpoints (sv_checkpoint.h). Private to
 * src/supervisor/ (supervisor.h is the public interface). Each object's
 * functions are declared in its own header, not here. */
#ifndef SG_SV_SUP_H
#define SG_SV_SUP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "capture/capture.h"
#include "checkpoint/ckpt_client.h"
#include "checkpoint/fingerprint.h"
#include "sandbox/cgroup.h"
#include "sandbox/disk.h"
#include "sandbox/execnotify.h"
#include "sandbox/init.h"
#include "sandbox/seccomp.h"
#include "state/state.h"
#include "supervisor/caps.h"
#include "supervisor/killswitch.h"
#include "supervisor/labels.h"
#include "supervisor/leafset.h"
#include "supervisor/sv_lifecycle_state.h"
#include "supervisor/tty.h"
#include "wire/ctl.h"
#include "wire/spawn.h"

#define SV_CLIENT_QUEUE_MAX (4u * 1024 * 1024) /* output queued for a slow CLI before we stop reading the exec */
#define SV_MAX_CLIENTS 256
#define SV_READ_CHUNK (60 * 1024)
#define SV_PIDNS_MAX 65536 /* processes of the pid namespace listed at once (its pid_max) */

/* Emptied exec leaves kept for later execs. Two alternate in a steady
 * stream of execs: the running exec's and the ready child's. */
#define SV_SPARE_LEAVES 2

typedef struct sv_sup sv_sup;
typedef struct sv_client sv_client; /* sv_client.h */
typedef struct sv_exec sv_exec;

/* What a lower object asks of a higher one, without calling up to it:
 * supervisor.c, which holds them all, sets these before the loop runs
 * (sup_hooks_set). The calls of the house then run one way, down. */
typedef struct sv_sup_hooks {
    /* the sandbox's end (supervisor.c): sv_sup_destroy calls it */
    void (*destroy)(sv_sup *s, sv_client *c);
    /* the kill switch (sv_killswitch.c) for the execs' cap (sv_exec.c),
     * init's reports (sv_handoff.c) and a forced rollback (sv_checkpoint.c) */
    json_t *(*abort)(sv_sup *s, const char *by, const char *reason);
    bool (*check_wall)(sv_sup *s);
    void (*kill_all)(sv_sup *s, const char *cause, const char *detail, sg_ctl_kill_report *out);
    /* an exec's end (sv_exec.c) to its terminal (sv_tty.c) */
    void (*tty_end)(sv_exec *ex);
    /* a connection's events (sv_client.c): its request (sv_dispatch.c), and
     * for the exec it called (sv_exec.c): a message other than a request,
     * its caller gone, whether its input is held, its queue drained */
    void (*request)(sv_sup *s, sv_client *c, const char *buf, size_t len, int fd_in);
    void (*client_msg)(sv_client *c, uint8_t type, const char *buf, size_t n, int *fds, size_t nfds);
    void (*client_gone)(sv_client *c);
    bool (*client_holds)(sv_client *c);
    void (*client_drained)(sv_client *c);
    /* the session's activity (sv_lifecycle.c): an exec's start and end
     * (sv_exec*.c), typed input and an attach (sv_tty.c) */
    void (*activity)(sv_sup *s);
} sv_sup_hooks;

/* A fast exec leaf with the files the exec path reads kept open: the ready
 * child's, or a spare one (emptied, kept for a later exec). */
typedef struct sv_open_leaf {
    char name[24];
    int dirfd, cpufd, evfd; /* the directory, its cpu.stat, its cgroup.events */
    uint64_t cpu_base;      /* cpu.stat's usage when handed out: leaves are reused */
} sv_open_leaf;

struct sv_exec {
    sv_sup *s;
    sv_client *cl;          /* NULL once the caller went away */
    uint32_t id;         /* init's id for it (init.h); ready children's are reserved ahead */
    uint32_t num;        /* its number in the order execs came: labels, events, logs */
    char leaf[24];
    int out_fd, err_fd;
    uv_poll_t out_poll, err_poll;
    bool out_active, err_active;
    uv_timer_t timer;
    double timeout_s;
    uint64_t start_ns;
    pid_t pid;
    bool spawned, exited, timed_out, output_limit_hit, finished;
    bool code_only;      /* the caller wants the exit code alone (SG_CTL_EXIT) */
    int status;
    sg_spawn_reply exit_rep;
    uint64_t out_bytes;
    sg_cg_stats before;
    int cpu_fd;           /* the leaf's cpu.stat, opened ahead; -1: read by path */
    int events_fd;        /* the leaf's cgroup.events (fast leaves): is it empty at the end? */
    bool leaf_killed;     /* cgroup.kill was written to its leaf: never reuse it (sv_leaves_recycle) */
    /* Why we killed it, the first reason only (sv_exec_mark_killed): a short
     * cause ("timeout", "output_limit", "memory", "abort", "rollback") and a
     * sentence for the caller's stderr, --json and the run_result. */
    char kill_cause[16];
    char kill_detail[240];
    uint64_t cpu_base_ns; /* the leaf's usage before this exec: leaves are reused */
    /* Handed to a ready child directly (init.h) and not yet taken: its
     * socket, the exec's stdio fds, its leaf and message, kept until the
     * child answers "k", for a clone through init if it never does. */
    bool awaiting_ack;
    int ready_sock;
    pid_t ready_pid;
    int hold_fds[3];
    int leaf_fd;          /* the leaf's directory; kept to the end, for reuse */
    char *held_msg;
    size_t held_len;
    uv_timer_t ack_timer;
    int pending_closes;
    sg_capture_exec *cx;  /* NULL when the sandbox is not captured */
    sg_sup_tty *tty;      /* a tty exec's terminal (tty.h); its output is the exec's stdout */
    struct sv_shell *shell; /* with tty: its recording and its commands (sv_tty.c) */
    bool detachable;      /* tty: its caller leaving detaches it (sv_tty_detach), not kills */
};

/* sv_execnotify.c's state: init's execve listener (sandbox/execnotify.h). */
typedef struct sv_execnotify_state {
    int fd;                       /* the listener; -1: none */
    uv_poll_t poll;
    bool seen;                    /* a held execve came since we got it */
    sg_execnotify_inflight *page; /* init's in-flight page, mapped; NULL: none */
    uint64_t held;                /* held execve calls seen: a program ran (sv_tty's prompt checkpoints) */
} sv_execnotify_state;

/* sv_client.c's state: the connections and the buffer a request is read in. */
typedef struct sv_clients_state {
    size_t n;
    char *buf; /* SG_CTL_MSG_MAX bytes: the request being read (on_client) */
} sv_clients_state;

struct sv_sup {
    sv_sup_hooks hooks;     /* calls up, set by supervisor.c (see sv_sup_hooks) */
    uint64_t oom_seen;      /* the sandbox's OOM kill counter when last read (exec_find_kill_reason) */
    char *spawn_msg;        /* SG_SPAWN_MSG_MAX bytes: the exec message being sent (sv_exec_start) */
    pid_t *pidns_pids;      /* SV_PIDNS_MAX entries, once sv_killswitch_pidns_kill ran */
    uint64_t ckpt_idle_ms;  /* the worker's idle stop; 0 until read from the environment */
    uv_loop_t loop;
    sg_sandbox_meta meta;
    sg_cgroup *cg;
    sg_seccomp_prog prog;
    pid_t init_pid;
    int init_fd;
    uv_poll_t init_poll;
    sv_execnotify_state notify; /* the held execve calls (sv_execnotify.c's) */
    int ctl_fd;
    killswitch *ks;         /* kills beside the loop, takes what it leaves on ctl_fd; NULL: none */
    int lock_fd;            /* sb/<id>/supervisor.lock, held (fcntl) for our life */
    uv_poll_t ctl_poll;
    uv_signal_t sigchld, sigterm, sigint;
    uint32_t next_exec;     /* init's exec ids (sv_sup_exec_id_new) */
    uint32_t exec_num;      /* execs numbered as they come (sv_exec.num, sv_sup_exec_num_new) */
    uint32_t ids_until;     /* both stay below it: saved (execs.json) for a takeover */
    sv_exec **execs;     /* running execs, by slot */
    size_t nexecs, capexecs;
    sv_clients_state clients; /* the control connections (sv_client.c's) */
    bool destroying;
    bool init_dead;
    bool fast_leaves;
    bool rootless;          /* in a user namespace; cg may then be NULL */
    sg_capture *cap;        /* NULL: not captured (no task) */
    sg_ckpt_client *ckpt;         /* workspace checkpoints, by a worker outside the sandbox */
    uv_timer_t ckpt_idle;   /* stops that worker when idle */
    char last_ckpt[SG_CHECKPOINT_ID_LEN + 1]; /* the newest checkpoint taken */
    sg_checkpoint_stats last_stats;
    sg_fingerprint last_print;  /* the workspace when the last exec's checkpoint was taken */
    bool print_valid;
    sg_labels labels;       /* labels of execs found unchanged, not yet in the store */
    int destroy_fd;         /* the destroy request's caller, answered last */
    uint8_t destroy_type;
    json_t *destroy_res;
    int exit_code;
    /* kill switch: the first reason wins and is kept */
    bool aborted;
    char abort_by[16];      /* operator | signal | cap */
    char abort_reason[256];
    uint64_t start_ns;
    uint64_t execs_total, calls_total;
    uv_timer_t cap_timer;   /* wall and cpu caps */
    int gone_fd;            /* inotify on the directories our record is in; -1: none */
    int gone_wd[3];         /* watches of sb/, <state>/ and its parent */
    uv_poll_t gone_poll;
    bool orphaned;          /* our state directory was removed: the sandbox ends */
    uv_timer_t expire_timer; /* "expire": destroy when it fires (an ended MCP session's --keep) */
    bool expire_init;
    sv_life_state life;     /* the idle timeout and time to live (sv_lifecycle.c's) */
    sg_leafset leaves;      /* exec leaves that may still hold processes */
    uint32_t next_leaf;     /* leaves are x1, x2, ...; exec ids count apart */
    sv_open_leaf rl;           /* the leaf of init's ready child (init.h), if ready */
    uint32_t ready_exec_id; /* the exec id reserved for it */
    int ready_sock;         /* its socket (SG_SPAWN_READY); -1 until init sent it */
    pid_t ready_pid;
    int ready_pidfd;        /* a pidfd of it (host side), to SIGCONT it at the hand-off */
    bool ready;
    bool ready_taken;       /* the last one was handed an exec: the next PREPARE says so */
    /* Emptied fast leaves, open, for the next ready children: an exec then
     * makes and removes no cgroup (mkdir and rmdir in cgroupfs cost ~80 us
     * of CPU per exec, plus the kernel's deferred freeing). */
    sv_open_leaf spare[SV_SPARE_LEAVES];
    size_t nspare;
};

/* ---- sv_sup.c: what every object of the supervisor uses ------------- */

/* An event of the sandbox's record (none when it is not captured). */
void sv_sup_emit(sv_sup *s, sg_event_kind kind, json_t *payload);
/* The sandbox ends (s->hooks.destroy); c, the destroy request's caller,
 * is answered last. */
void sv_sup_destroy(sv_sup *s, sv_client *c);
/* A new exec id for init, and a new exec number: both unique across the
 * supervisors a sandbox has had (execs.json). */
uint32_t sv_sup_exec_id_new(sv_sup *s);
uint32_t sv_sup_exec_num_new(sv_sup *s);
/* s->expire_timer (made on first use) calls cb after_s seconds from now;
 * a negative after_s only stops it. */
void sv_sup_expire_in(sv_sup *s, double after_s, uv_timer_cb cb);

#endif

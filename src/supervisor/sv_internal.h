/* sv_internal: the supervisor's private interface, shared by the files of
 * src/supervisor/ and by nothing else (supervisor.h is the public one).
 * The state of one supervisor is `sup`, an exec's `exec_ctx`, a control
 * connection's `client`. Names are the ones they had in the one
 * supervisor.c, so that a branch made before the split finds them. */
#ifndef SG_SV_INTERNAL_H
#define SG_SV_INTERNAL_H

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
#include "supervisor/tty.h"
#include "wire/ctl.h"
#include "wire/spawn.h"

#define SUP_CLIENT_QUEUE_MAX (4u * 1024 * 1024) /* output queued for a slow CLI before we stop reading the exec */
#define SUP_MAX_CLIENTS 256
#define SUP_READ_CHUNK (60 * 1024)
#define SUP_PIDNS_MAX 65536 /* processes of the pid namespace listed at once (its pid_max) */

/* Emptied exec leaves kept for later execs. Two alternate in a steady
 * stream of execs: the running exec's and the ready child's. */
#define SUP_SPARE_LEAVES 2

typedef struct sup sup;
typedef struct client client;

/* A fast exec leaf with the files the exec path reads kept open: the ready
 * child's, or a spare one (emptied, kept for a later exec). */
typedef struct open_leaf {
    char name[24];
    int dirfd, cpufd, evfd; /* the directory, its cpu.stat, its cgroup.events */
    uint64_t cpu_base;      /* cpu.stat's usage when handed out: leaves are reused */
} open_leaf;

typedef struct outmsg {
    struct outmsg *next;
    uint8_t type;
    size_t len;
    char data[];
} outmsg;

typedef struct exec_ctx {
    sup *s;
    client *cl;          /* NULL once the caller went away */
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
    bool leaf_killed;     /* cgroup.kill was written to its leaf: never reuse it (leaf_recycle) */
    /* Why we killed it, the first reason only (exec_mark_killed): a short
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
} exec_ctx;

struct client {
    sup *s;
    int fd;
    uv_poll_t poll;
    outmsg *qhead, *qtail;
    size_t qbytes;
    exec_ctx *ex;
    bool requested; /* one request per connection: an exec's takes signals only */
    bool close_after_flush;
    bool closing;
};

struct sup {
    uint64_t oom_seen;      /* the sandbox's OOM kill counter when last read (exec_find_kill_reason) */
    char *spawn_msg;        /* SG_SPAWN_MSG_MAX bytes: the exec message being sent (exec_start) */
    char *ctl_buf;          /* SG_CTL_MSG_MAX bytes: the request being read (on_client) */
    pid_t *pidns_pids;      /* SUP_PIDNS_MAX entries, once pidns_kill ran */
    uint64_t ckpt_idle_ms;  /* the worker's idle stop; 0 until read from the environment */
    uv_loop_t loop;
    sg_sandbox_meta meta;
    sg_cgroup *cg;
    sg_seccomp_prog prog;
    pid_t init_pid;
    int init_fd;
    uv_poll_t init_poll;
    int notify_fd;          /* init's execve listener (sandbox/execnotify.h); -1: none */
    uv_poll_t notify_poll;
    bool notify_seen;       /* a held execve came since we got it */
    sg_execnotify_inflight *notify_page; /* init's in-flight page, mapped; NULL: none */
    uint64_t execs_held;    /* held execve calls seen: a program ran (sv_tty's prompt checkpoints) */
    int ctl_fd;
    killswitch *ks;         /* accepts on ctl_fd and kills beside the loop; NULL: the loop accepts */
    int lock_fd;            /* sb/<id>/supervisor.lock, held (fcntl) for our life */
    uv_poll_t ctl_poll;
    uv_signal_t sigchld, sigterm, sigint;
    uint32_t next_exec;     /* init's exec ids (exec_id_new) */
    uint32_t exec_num;      /* execs numbered as they come (exec_ctx.num, exec_num_new) */
    uint32_t ids_until;     /* both stay below it: saved (execs.json) for a takeover */
    exec_ctx **execs;     /* running execs, by slot */
    size_t nexecs, capexecs;
    size_t nclients;
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
    sg_leafset leaves;      /* exec leaves that may still hold processes */
    uint32_t next_leaf;     /* leaves are x1, x2, ...; exec ids count apart */
    open_leaf rl;           /* the leaf of init's ready child (init.h), if ready */
    uint32_t ready_exec_id; /* the exec id reserved for it */
    int ready_sock;         /* its socket (SG_SPAWN_READY); -1 until init sent it */
    pid_t ready_pid;
    int ready_pidfd;        /* a pidfd of it (host side), to SIGCONT it at the hand-off */
    bool ready;
    bool ready_taken;       /* the last one was handed an exec: the next PREPARE says so */
    /* Emptied fast leaves, open, for the next ready children: an exec then
     * makes and removes no cgroup (mkdir and rmdir in cgroupfs cost ~80 us
     * of CPU per exec, plus the kernel's deferred freeing). */
    open_leaf spare[SUP_SPARE_LEAVES];
    size_t nspare;
};

/* ---- supervisor.c ---------------------------------------------------------- */

void capture_emit(sup *s, const char *kind, json_t *payload);
int capture_start(sup *s, bool resumed, sg_err *err);
void sup_destroy(sup *s, client *c);

/* ---- sv_start.c ------------------------------------------------------------ */

void oom_baseline(sup *s);
int start_init(sup *s, sg_err *err);
int adopt_init(sup *s, sg_err *err);
/* Moves the supervisor into its own cgroup beside the sandbox's (cgroup.h),
 * with its limits (SG_SUPERVISOR_*). Best effort: a warning if it cannot. */
void join_own_cgroup(sup *s);
/* A new exec id for init, and a new exec number: both unique across the
 * supervisors a sandbox has had (execs.json). */
uint32_t exec_id_new(sup *s);
uint32_t exec_num_new(sup *s);
/* Takes the sandbox's supervisor lock (an adopt first waits, bounded, for
 * a dying predecessor to let it go). */
int hold_supervisor_lock(sup *s, const char *id, bool adopt, sg_err *err);

/* ---- sv_client.c ----------------------------------------------------------- */

void client_flush(client *c);
void client_send(client *c, uint8_t type, const void *buf, size_t len);
void client_send_json(client *c, uint8_t type, json_t *j);
void client_result(client *c, json_t *j);
void client_error(client *c, const char *msg);
void client_close(client *c);
void on_ctl_accept(uv_poll_t *p, int status, int events);
/* A connection accepted (by the kill switch or on_ctl_accept) becomes a client. */
void client_adopt(void *ud, int fd);

/* ---- sv_dispatch.c --------------------------------------------------------- */

void handle_request(sup *s, client *c, const char *buf, size_t len, int fd_in);

/* ---- sv_exec.c ------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) void exec_mark_killed(exec_ctx *ex, const char *cause,
                                                              const char *fmt, ...);
void exec_kill(exec_ctx *ex);
void on_close_pending(uv_handle_t *h);
void on_exec_output(uv_poll_t *p, int status, int events);
void exec_output(exec_ctx *ex, uint8_t type, const char *buf, size_t n);
/* exec_output without the send: the output limit and the capture's tail;
 * returns the bytes the caller may send. */
size_t exec_output_take(exec_ctx *ex, uint8_t type, const char *buf, size_t n);
void client_update_poll(client *c);
/* sv_tty.c: a tty exec's terminal, between tty.c and the exec's caller.
 * sv_tty_start makes the exec child's stdin the socket its terminal's
 * master comes back on (*stdin_fd is replaced). */
int sv_tty_start(sup *s, exec_ctx *ex, const sg_exec_req *req, int *stdin_fd, sg_err *err);
/* The exec ended: the terminal's rest, its last command, its recording. */
void sv_tty_end(exec_ctx *ex);
void client_tty_msg(client *c, uint8_t type, const char *buf, size_t n);
/* A detachable tty exec goes on without its caller (c->ex and ex->cl are
 * cut); answered with RESULT {"detached", "exec"} when c is still there. */
void sv_tty_detach(client *c, bool answer);
/* "attach": c becomes the caller of a detached tty exec. */
void sv_tty_attach(sup *s, client *c, json_t *req);
exec_ctx *exec_find(sup *s, uint32_t id);
void exec_finish(exec_ctx *ex);
void exec_fail(exec_ctx *ex, const char *msg);
void exec_start(sup *s, client *c, json_t *req_json, int stdin_fd);

/* ---- sv_handoff.c ---------------------------------------------------------- */

void handoff_release(exec_ctx *ex);
void exec_handoff_done(exec_ctx *ex);
void exec_handoff_failed(exec_ctx *ex);
void on_handoff_timeout(uv_timer_t *t);
void on_init_msg(uv_poll_t *p, int status, int events);
void execs_settle_killed(sup *s, int timeout_ms);

/* ---- sv_execnotify.c ------------------------------------------------------ */

/* Whether init should hold every execve for us (not rootless, a kernel that
 * can, SANDGLASS_EXEC_NOTIFY is not 0). */
bool execnotify_wanted(const sup *s);
/* init's SG_SPAWN_NOTIFY: fd (taken) is the listener to serve. */
void execnotify_attach(sup *s, int fd, int page_fd);
/* init's connection is gone: so is ours to the listener. */
void execnotify_stop(sup *s);
/* Unmaps init's in-flight page (execnotify_stop does too). */
void execnotify_unmap(sup *s);

/* ---- sv_leaves.c ----------------------------------------------------------- */

int leaf_kill(sup *s, const char *leaf, int timeout_ms, sg_err *err);
void leaf_track(sup *s, const char *leaf);
void leaf_untrack(sup *s, const char *leaf);
void leaves_sweep(sup *s);
void open_leaf_close(open_leaf *l);
void ready_next(sup *s);
bool leaf_recycle(sup *s, exec_ctx *ex);
void ready_close_fds(sup *s);
int ready_pidfd_open(int leaf_dirfd);
void ready_lost(sup *s);
void ready_retire(sup *s);

/* ---- sv_killswitch.c ------------------------------------------------------- */

size_t pidns_kill(sup *s, bool with_init, int timeout_ms);
json_t *caps_now(sup *s);
json_t *kill_all_user_processes(sup *s, const char *cause, const char *detail);
json_t *sup_abort(sup *s, const char *by, const char *reason);
void on_expire(uv_timer_t *t);
void on_cap_timer(uv_timer_t *t);
/* The caps' timer and the kill switch's --max-wall deadline, from s->start_ns. */
void caps_arm(sup *s);
/* The kill switch on the control socket (else the loop accepts, as a fallback). */
void killswitch_start(sup *s);

/* ---- sv_checkpoint.c ------------------------------------------------------- */

bool tool_is_read_only(const char *tool);
void ckpt_used(sup *s);
int sup_unified(void *ud, const char *path, const char *old, size_t old_len,
                const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);
void ckpt_flush_labels(sup *s);
void emit_checkpoint(sup *s, const char *id, const char *label, const sg_checkpoint_stats *st,
                     double ms, bool reused, json_t **info);
const char *sup_checkpoint_ex(sup *s, const char *label, bool reuse, json_t **info);
const char *sup_checkpoint(sup *s, const char *label, json_t **info);
void sup_checkpoint_exec(sup *s, const char *label);
/* The same at a shell's prompt; quiet_unchanged: an unchanged workspace
 * records nothing (no label, no event). */
void sup_checkpoint_prompt(sup *s, const char *label, bool quiet_unchanged);
void sup_rollback(sup *s, client *c, json_t *req);
int open_checkpoints(sup *s, sg_err *err);

#endif

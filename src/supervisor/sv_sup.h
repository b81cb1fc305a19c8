/* sv_sup: one supervisor's state, `sv_sup`, which holds the sandbox's life
 * (the loop, its record, init, cgroup, control socket, signals, the watch
 * on the record's directories, capture) and each object's state as one
 * member: the execs (`exec`, sv_exec_state.h), the leaves (`leaves`,
 * sv_leaves_state.h), the kill switch (`ks`, sv_killswitch_state.h), the
 * checkpoints (`ckpt`, sv_checkpoint_state.h), the held execve calls
 * (`notify`, sv_execnotify_state.h) and the control connections
 * (`clients`, sv_client_state.h), and the destroy request (`destroy`).
 * Private to src/supervisor/ (supervisor.h is the
 * public interface). Each object's functions are declared in its own
 * header (sv_exec.h, sv_leaves.h, ...), which includes this one: this one
 * includes the state headers only, never an object's interface. */
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
#include "supervisor/sv_checkpoint_state.h"
#include "supervisor/sv_client_state.h"
#include "supervisor/sv_cp_state.h"
#include "supervisor/sv_exec_state.h"
#include "supervisor/sv_execnotify_state.h"
#include "supervisor/sv_killswitch_state.h"
#include "supervisor/sv_leaves_state.h"
#include "supervisor/sv_lifecycle_state.h"
#include "supervisor/sv_metrics_state.h"
#include "supervisor/tty.h"
#include "wire/ctl.h"
#include "wire/spawn.h"

#define SV_CLIENT_QUEUE_MAX (4u * 1024 * 1024) /* output queued for a slow CLI before we stop reading the exec */
#define SV_MAX_CLIENTS 256
#define SV_READ_CHUNK (60 * 1024)

typedef struct sv_sup sv_sup;
typedef struct sv_client sv_client; /* sv_client.h */
typedef struct sv_exec sv_exec; /* sv_exec_state.h */

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

/* The destroy request, answered last (supervisor.c: the sandbox's end). */
typedef struct sv_destroy_req {
    int fd;       /* its caller's connection, dup'ed; -1: none */
    uint8_t type; /* the answer's frame type: SG_CTL_RESULT or SG_CTL_ERROR */
    json_t *res;  /* the answer */
} sv_destroy_req;

struct sv_sup {
    sv_sup_hooks hooks;     /* calls up, set by supervisor.c (see sv_sup_hooks) */
    /* the sandbox's life */
    uv_loop_t loop;
    sg_sandbox_meta meta;
    sg_cgroup *cg;
    sg_seccomp_prog prog;
    pid_t init_pid;
    int init_fd;
    uv_poll_t init_poll;
    int ctl_fd;
    int lock_fd;            /* sb/<id>/supervisor.lock, held (fcntl) for our life */
    uv_poll_t ctl_poll;
    uv_signal_t sigchld, sigterm, sigint;
    bool destroying;
    bool init_dead;
    bool rootless;          /* in a user namespace; cg may then be NULL */
    sg_capture *cap;        /* NULL: not captured (no task) */
    int exit_code;
    int gone_fd;            /* inotify on the directories our record is in; -1: none */
    int gone_wd[3];         /* watches of sb/, <state>/ and its parent */
    uv_poll_t gone_poll;
    bool orphaned;          /* our state directory was removed: the sandbox ends */
    uv_timer_t expire_timer; /* "expire": destroy when it fires (an ended MCP session's --keep) */
    bool expire_init;
    /* each object's state, written by that object */
    sv_exec_state exec;         /* the execs (sv_exec.h) */
    sv_leaves_state leaves;     /* the exec leaves (sv_leaves.h) */
    sv_killswitch_state ks;     /* the kill switch (sv_killswitch.h) */
    sv_checkpoint_state ckpt;   /* the checkpoints (sv_checkpoint.h) */
    sv_execnotify_state notify; /* the held execve calls (sv_execnotify.h) */
    sv_clients_state clients;   /* the control connections (sv_client.h) */
    sv_destroy_req destroy;     /* the destroy request (supervisor.c's) */
    sv_cp_state cp;             /* the cp running off the loop (sv_cp.c's) */
    sv_life_state life;         /* the idle timeout and time to live (sv_lifecycle.c's) */
    sv_metrics_state metrics;   /* the counters of the host's metrics (sv_metrics.h) */
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

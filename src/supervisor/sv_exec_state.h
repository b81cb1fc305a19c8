/* sv_exec_state: the state of the execs (sv_exec.h's object): one exec,
 * `sv_exec`, and the supervisor's record of them, `sv_sup.exec`: the
 * running ones, the ids and numbers given out, the counts the caps read,
 * the exec message being sent, the OOM kills seen. Apart from sv_exec.h so
 * that sv_sup.h, which holds it, includes no object's interface. */
#ifndef SG_SV_EXEC_STATE_H
#define SG_SV_EXEC_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "capture/capture.h"
#include "sandbox/cgroup.h"
#include "supervisor/tty.h"
#include "wire/ctl.h"
#include "wire/spawn.h"

typedef struct sv_sup sv_sup;       /* sv_sup.h */
typedef struct sv_client sv_client; /* sv_client.h */
typedef struct sv_exec sv_exec;

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
    char now[SG_CTL_NOW_MAX + 1]; /* its command line, cut (ls's NOW: sv_exec_now) */
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
    uint64_t kill_ns;     /* when the kill was decided (its time, for the metrics) */
    uint64_t cpu_base_ns; /* the leaf's usage before this exec: leaves are reused */
    /* Handed to a ready child directly (init.h) and not yet taken: its
     * socket, the exec's stdio fds, its leaf and message, kept until the
     * child answers "k", for a clone through init if it never does. */
    bool awaiting_ack;
    bool handoff_killed;  /* the wait for its "k" ended: the ready child was killed (sv_handoff.c) */
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

/* The "rid"s of the last execs started (wire/ctl.h): a copy of one of
 * them is refused, never run again. A ring: the oldest goes first. */
#define SV_EXEC_RIDS 64
typedef struct sv_exec_rid {
    char rid[SG_CTL_RID_MAX + 1];
    uint32_t num; /* the exec it started */
} sv_exec_rid;

typedef struct sv_exec_state {
    sv_exec **list;        /* running execs, by slot */
    size_t n, cap;
    uint32_t next_id;      /* init's exec ids (sv_sup_exec_id_new) */
    uint32_t num;          /* execs numbered as they come (sv_exec.num, sv_sup_exec_num_new) */
    uint32_t ids_until;    /* both stay below it: saved (execs.json) for a takeover */
    uint64_t total, calls; /* execs started, and of them agent tool calls: the caps count them */
    char *spawn_msg;       /* SG_SPAWN_MSG_MAX bytes: the exec message being sent (sv_exec_start) */
    uint64_t oom_seen;     /* the sandbox's OOM kill counter when last read (exec_find_kill_reason) */
    sv_exec_rid rids[SV_EXEC_RIDS];
    unsigned rid_next;     /* the slot the next one takes */
} sv_exec_state;

#endif

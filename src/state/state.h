/* state: where sandglass keeps its files, and each sandbox's record.
 *
 *   <state>/                    $SANDGLASS_STATE_DIR, else /var/lib/sandglass
 *                               (root) or $XDG_STATE_HOME/sandglass
 *   <state>/ingest/secret       HMAC key the local ingest made (0600)
 *   <state>/ingest/events.db    the local ingest's default SQLite store
 *   <state>/sb/<id>/meta.json   the sandbox's record (written by create)
 *   <state>/sb/<id>/ctl.sock    the supervisor's control socket
 *   <state>/sb/<id>/init.sock   the sandbox init's socket (supervisor only)
 *   <state>/sb/<id>/supervisor.lock  held (fcntl record lock) by the live
 *                               supervisor for its whole life
 *   <state>/sb/<id>/revive.lock one client at a time starts a supervisor
 *                               that takes the sandbox over (flock)
 *   <state>/sb/<id>/spool/      the capture spool (never in the workspace)
 *   <state>/sb/<id>/checkpoints.git
 *   <state>/sb/<id>/disk.img    the workspace's file system (sandbox/disk.h),
 *                               mounted at /run/sandglass-disk/<uid>
 *   <state>/sb/<id>/workspace/  made when create got no --workspace and
 *                               could make no file system
 */
#ifndef SG_STATE_H
#define SG_STATE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "base/idprefix.h"

#define SG_DEFAULT_INGEST_PORT 7433
#define SG_DEFAULT_INGEST_URL "ws://127.0.0.1:7433"

/* The ingest a captured sandbox streams to and `events` reads when no
 * --ingest is given: $SANDGLASS_INGEST if set (a test suite points it at
 * its own port, so an operator's ingest on the default is never met),
 * else SG_DEFAULT_INGEST_URL. */
const char *sg_state_default_ingest(void);

/* The state directory (created 0700 if missing). Static storage. */
const char *sg_state_dir(sg_err *err);
/* <state>/<rel>; caller frees. */
char *sg_state_path(const char *rel);
/* <state>/sb/<id>/<rel> (rel may be NULL for the directory); caller frees. */
char *sg_state_sandbox_path(const char *id, const char *rel);

typedef struct sg_sandbox_meta {
    char id[32];
    char *learner;
    char *task;        /* NULL: not captured (pure-shell path) */
    char *workspace;   /* host path */
    char *rootfs;      /* NULL: host system dirs */
    char *ingest_url;  /* NULL when not captured */
    char *secret_file;
    char *ingest_ca;   /* wss: the CAs the ingest is verified by (absolute,
                          resolved at create); NULL: the system's */
    bool own_workspace; /* we made the workspace: destroy removes it */
    /* The workspace is the operator's and root's: it is mounted idmapped
     * (root's files appear as the sandbox user's, and the sandbox user's
     * new files are root's on disk) instead of being chowned. */
    bool idmap_workspace;
    uint64_t memory;   /* bytes, 0 = none */
    uint64_t pids;
    double cpus;
    double timeout_s;  /* default wall time per exec */
    uint64_t output_limit;
    /* bytes of the workspace's own file system (sandbox/disk.h); 0: none
     * (the operator's --workspace, or create could not make one) */
    uint64_t disk;
    double max_wall_s; /* session caps (0 = none): an abort when reached */
    uint64_t max_execs;
    double max_cpu_s;
    uint64_t max_calls; /* agent tool calls (execs with a "tool") */
    /* per-minute budgets of the capture (capture/budget.h), 0 = none */
    uint64_t max_events_per_min, max_bytes_per_min, max_checkpoints_per_min;
    uint64_t capture_max_file; /* bytes of a file whose content is stored (capture/contents.h); 0: 1 MiB */
    bool manual_checkpoints; /* --checkpoints manual: only at create and on request */
    /* the capture's ignore list (capture/ignore.h); NULL: the default */
    char *capture_ignore;
    /* sandglass fork: {learner, task, sandbox, seq} of the moment it was
     * made from, as JSON text, put in its `sandbox` created event; NULL: none */
    char *forked_from;
    /* create --from: {kind: dir|tar|checkpoint, source, files, bytes} of
     * what the workspace was seeded with before its capture started, as
     * JSON text, kept in the record and put in its `sandbox` created
     * event; NULL: none */
    char *from;
    /* Who created the sandbox: the creating process's actor (sg_actor_json:
     * {user, uid, pid}, as the control socket's), as JSON text, put in its
     * `sandbox` created event and its seed file_diffs' operator cause;
     * NULL: none known (a record from before it) */
    char *creator;
    uint64_t max_file_events; /* file_diff events an exec; past it, `bulk` events */
    /* The session's lifecycle (0 = none): no activity (input, a command, a
     * file change) for idle_timeout_s, or ttl_s since it started, ends it
     * (abort, then destroy once the spool is delivered, or keep_s later
     * when keep_s > 0); the learner's terminals are warned warning_s
     * before (at most half the limit). Enforced by the supervisor
     * (sv_lifecycle.h); set by create --idle-timeout, --ttl,
     * --expiry-warning, --keep. */
    double idle_timeout_s, ttl_s, warning_s, keep_s;
    uid_t uid;         /* the sandbox user */
    gid_t gid;
    pid_t supervisor_pid;
    pid_t init_pid;    /* host pid of the sandbox's init */
    char created[40];  /* RFC 3339 */
} sg_sandbox_meta;

void sg_sandbox_meta_clear(sg_sandbox_meta *m);
/* An actor of the events (docs/EVENTS.md, "Who acted"): {user, uid, pid}
 * (user: uid's name on this host, or null when it has none), and "via"
 * when via is neither NULL nor empty. A new jansson json_t*; NULL when
 * out of memory. */
void *sg_actor_json(uid_t uid, pid_t pid, const char *via);
int sg_sandbox_meta_save(const sg_sandbox_meta *m, sg_err *err);
int sg_sandbox_meta_load(const char *id, sg_sandbox_meta *m, sg_err *err);
/* The record from its JSON object (a json_t*), with the given id. */
int sg_sandbox_meta_from_json(const void *obj, const char *id, sg_sandbox_meta *m, sg_err *err);
/* JSON object of the record, for --json output. Returns a jansson json_t*. */
void *sg_sandbox_meta_json(const sg_sandbox_meta *m);

/* Ids of every sandbox with a state directory; NULL-terminated, caller frees. */
char **sg_state_list(sg_err *err);
/* A sandbox id from what a user typed, by the one prefix rule
 * (base/idprefix.h) against this state directory's sandboxes. Fills out
 * (SG_ID_LEN + 1 bytes) or returns -1 with err ("no sandbox 'x'", too
 * short, or the ids an ambiguous prefix matches). */
int sg_state_resolve_id(const char *arg, char *out, sg_err *err);
/* True if a process with this pid exists and its cmdline is ours (best effort). */
bool sg_state_pid_alive(pid_t pid);
/* Whether a supervisor holds sandbox id's supervisor.lock: 1 (and its
 * pid in *pid when not NULL), 0 none does, -1 no record. Unlike the
 * supervisor's pid, the lock goes as the supervisor's files close: a
 * killed supervisor still exiting holds neither it nor its socket. Never
 * call it in the supervisor itself (closing a file drops its locks). */
int sg_state_supervisor_held(const char *id, pid_t *pid);
/* Waits up to timeout_ms for pid (not our child) to exit: to be a zombie
 * or gone, which a process is only once the kernel has let go of all its
 * files, locks and sockets. True once it has. */
bool sg_state_wait_exit(pid_t pid, int timeout_ms);

/* For the test harness: when SANDGLASS_LOG_ARCHIVE names a directory, the
 * sandbox's supervisor.log is copied there (as <id>.<pid>.log) before its
 * state directory is removed, so that a sanitizer report of the supervisor
 * or of init (whose stderr is that log) outlives the destroy. Best effort;
 * does nothing without the variable. */
void sg_state_archive_log(const char *id);

/* Each sandbox with a root-owned workspace runs as a uid of its own, so
 * that sandboxes share no per-user limit (RLIMIT_NPROC, inotify instances
 * and watches, the kernel's per-user keyrings and message queues) and no
 * file ownership: SG_UID_BASE + a slot, as isolate gives each box its own.
 * A slot is claimed host-wide, across state directories, by creating
 * SG_UID_DIR/<slot> (O_EXCL) naming the sandbox's state directory; a slot
 * whose sandbox directory is gone is stale and taken over. The range is
 * above the ones distributions, systemd's dynamic users and the usual
 * /etc/subuid ranges for containers use. */
#define SG_UID_BASE 0x70000000u
#define SG_UID_SLOTS 65536u
#define SG_UID_DIR "/run/sandglass-uids"
int sg_state_uid_claim(const char *id, uid_t *uid, sg_err *err);
/* Gives the slot of uid back if sandbox id holds it (any other uid: nothing). */
void sg_state_uid_release(uid_t uid, const char *id);
/* The sandbox directory that holds uid's slot, into owner: 1, or 0 when
 * uid is no slot's or its slot is free or unreadable. */
int sg_state_uid_owner(uid_t uid, char owner[PATH_MAX]);

/* A session's abort, kept in <state>/sb/<id>/abort.json while it holds:
 * `ls` shows it without asking the supervisor, and a supervisor that takes
 * the sandbox over keeps it (a cap's abort must outlive a crash). */
int sg_state_abort_save(const char *id, const char *by, const char *reason, sg_err *err);
/* 1 and by/reason filled when the sandbox is aborted, 0 when it is not. */
int sg_state_abort_load(const char *id, char *by, size_t by_size, char *reason, size_t reason_size);

/* The exec ids (init's and the exec numbers) a sandbox's supervisors may
 * have handed out are all below `until`, kept in <state>/sb/<id>/execs.json:
 * a supervisor that takes the sandbox over numbers past them, so that
 * init's reports of its predecessor's execs (an exec running at the
 * death, the ready child it left) never match one of its own. */
int sg_state_exec_ids_save(const char *id, uint32_t until, sg_err *err);
/* The saved bound, 0 without a record. */
uint32_t sg_state_exec_ids_load(const char *id);
void sg_state_abort_clear(const char *id);

/* How a captured sandbox's events last fared on their way to the ingest,
 * kept in <state>/sb/<id>/uplink.json by the capture at each change, so
 * that `ls` shows an ingest that cannot be reached or rejects the token
 * without asking anyone: state "connected", "unreachable", "rejected" or
 * "error", its reason, since (RFC 3339). */
#define SG_UPLINK_STATE_MAX 16
#define SG_UPLINK_REASON_MAX 256
typedef struct sg_state_uplink {
    char state[SG_UPLINK_STATE_MAX];
    char reason[SG_UPLINK_REASON_MAX];
    char since[40];    /* RFC 3339, as created */
} sg_state_uplink;
int sg_state_uplink_save(const char *id, const char *state, const char *reason, sg_err *err);
/* 1 and u filled when there is a record, 0 when not. */
int sg_state_uplink_load(const char *id, sg_state_uplink *u);

/* When the session ends by its lifecycle (sv_lifecycle.h), kept in
 * <state>/sb/<id>/expiry.json by the supervisor each time it arms its
 * timer, so that `ls` shows "expiring in" without asking it: `at` (unix
 * seconds) and why ("idle" or "ttl"). An idle deadline is the earliest
 * the session can end: activity since moves it later. */
int sg_state_expiry_save(const char *id, double at, const char *why, sg_err *err);
/* 1 and at/why filled when there is a record, 0 when not. */
int sg_state_expiry_load(const char *id, double *at, char *why, size_t why_size);

/* Whether dir names this state directory (after resolving symlinks): the
 * test of a cgroup's owner mark (cgroup.h) before any cleanup touches it. */
bool sg_state_is_ours(const char *dir);

#endif

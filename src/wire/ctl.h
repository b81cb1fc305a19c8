/* ctl: the control protocol between the sandglass CLI and a sandbox's
 * supervisor, over a SOCK_SEQPACKET unix socket (<state>/sb/<id>/ctl.sock,
 * mode 0600). One message = one type byte + payload; file descriptors
 * travel with SCM_RIGHTS (seqpacket.h's typed frames).
 *
 *   CLI -> supervisor   REQ (JSON object, "op" says what), with the caller's
 *                       stdin fd for "exec"; SIGNAL (1 byte: signal number)
 *   supervisor -> CLI   STDOUT / STDERR (raw bytes of the exec's output),
 *                       RESULT (JSON object) or ERROR (JSON {"error": msg})
 *                       ends the exchange; EXIT (the exit code alone, an
 *                       int32) instead of RESULT for an exec request with
 *                       "result": "code".
 *   CLI -> supervisor   for an exec with "tty" (a PTY made inside the
 *                       sandbox, execchild.h): STDIN (raw bytes for the
 *                       terminal) and WINSZ (sg_ctl_winsz: a resize); its
 *                       output comes as STDOUT (stdout and stderr are one).
 *                       With "detachable" also DETACH (no payload): the
 *                       supervisor answers RESULT {"detached": true,
 *                       "exec": N} and the command runs on without a
 *                       caller; a closed connection detaches it too.
 *   CLI -> supervisor   REQ "attach" {"exec": N (optional), "tty": {...},
 *                       "detachable", "result"}: the connection becomes
 *                       that detached tty exec's caller, as if it had
 *                       started it (its recent output is replayed first).
 *
 * Every op has a request struct (and the ops whose answer a client reads
 * field by field a reply struct) with an encoder and a strict decoder
 * below: the only place a request's JSON is written or read. Every request
 * carries the protocol version ("v": SG_CTL_VERSION); a request without it
 * comes from a CLI of the build before versions (0), which speaks the same
 * ops. The supervisor answers "ping" with its own version.
 */
#ifndef SG_CTL_H
#define SG_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "base/buf.h"
#include "base/err.h"
#include "wire/seqpacket.h"

enum sg_ctl_type {
    SG_CTL_REQ = 1,
    SG_CTL_STDOUT = 2,
    SG_CTL_STDERR = 3,
    SG_CTL_RESULT = 4,
    SG_CTL_ERROR = 5,
    SG_CTL_SIGNAL = 6,
    SG_CTL_RESULT_PART = 7, /* a large RESULT comes as PARTs, then the RESULT */
    SG_CTL_EXIT = 8,
    SG_CTL_STDIN = 9,
    SG_CTL_WINSZ = 10,
    SG_CTL_DETACH = 11,
};

/* SG_CTL_WINSZ's payload, and the size a tty exec starts with. */
typedef struct sg_ctl_winsz {
    uint16_t rows, cols;
} sg_ctl_winsz;

#define SG_CTL_CHUNK (60 * 1024)            /* payload of one PART */
#define SG_CTL_RESULT_MAX (64 * 1024 * 1024) /* an assembled RESULT */

/* Reassembles a RESULT that came in parts: the one buffer (base/buf.h). */
typedef sg_buf sg_ctl_asm;

/* Feeds one received message. Returns 1 when msg completes a RESULT or an
 * ERROR (the whole payload is then a->data, a->len, NUL-terminated), 0 when
 * it was a PART, -1 when the result grows past SG_CTL_RESULT_MAX. */
int sg_ctl_asm_feed(sg_ctl_asm *a, uint8_t type, const char *msg, size_t len, sg_err *err);
void sg_ctl_asm_free(sg_ctl_asm *a);

/* One exchange's answer, fed one received message at a time: the step a
 * libuv loop calls with what it receives (serve), and the blocking
 * sg_ctl_call_recv is a loop over it (CLI, MCP). */
typedef enum sg_ctl_call_end {
    SG_CTL_CALL_MORE = 0, /* not over: output, a PART, a type it does not know */
    SG_CTL_CALL_RESULT,   /* c->result holds the RESULT object */
    SG_CTL_CALL_EXIT,     /* c->exit_code holds EXIT's code */
    SG_CTL_CALL_ERROR,    /* c->error holds the supervisor's message */
    SG_CTL_CALL_BAD,      /* an answer that does not parse: c->error says why */
    SG_CTL_CALL_LOST,     /* (recv) the connection ended first: c->lost is -errno, 0 for EOF */
} sg_ctl_call_end;

typedef struct sg_ctl_call {
    /* STDOUT and STDERR messages as they come; NULL drops them. */
    void (*on_output)(void *ud, uint8_t type, const char *buf, size_t len);
    void *ud;
    bool answered;  /* a message came: a reset before that is a request never read */
    sg_ctl_asm answer;
    void *result;   /* json_t*, owned: take it with sg_steal_ptr */
    int exit_code;
    int lost;
    char error[SG_ERR_MSG_MAX];
} sg_ctl_call;

/* Feeds one message (type 0: the peer closed). Returns the end it makes,
 * or SG_CTL_CALL_MORE. */
sg_ctl_call_end sg_ctl_call_feed(sg_ctl_call *c, uint8_t type, const char *msg, size_t len);
/* Receives on a blocking connection until the exchange ends. */
sg_ctl_call_end sg_ctl_call_recv(int fd, sg_ctl_call *c);
void sg_ctl_call_free(sg_ctl_call *c);

/* A socket for sandbox id's control socket (SOCK_SEQPACKET, close-on-exec,
 * and flags: SOCK_NONBLOCK), not connected yet, and its address in sa. */
int sg_ctl_socket(const char *id, int flags, struct sockaddr_un *sa, sg_err *err);

/* Connects to the supervisor of sandbox id. ENOENT/ECONNREFUSED when it is
 * not running. */
int sg_ctl_connect(const char *id, sg_err *err);

/* A listening SOCK_SEQPACKET socket (non-blocking, close-on-exec, mode
 * 0600) at path, replacing whatever file is there: the caller owns it.
 * Returns the fd or -1 with err. */
int sg_ctl_listen(const char *path, int backlog, sg_err *err);

/* The control protocol's version: a request's "v", a ping's answer.
 * History: 0 (no "v"): the ops below; 1: "v" on every request. An op
 * added since (cp) is not a new version: a supervisor without it answers
 * "unknown request op", which the client turns into what to do. */
#define SG_CTL_VERSION 1

/* "via" (a request's optional field, not a new version either): whom the
 * caller acts for, recorded in the actor of what the request does (an
 * MCP client's name: "mcp: NAME"). A supervisor without it refuses the
 * field by name; the client sends the request again without it
 * (sg_ctl_is_via_refusal). Not on "exec". */
#define SG_CTL_VIA_MAX 128
#define SG_CTL_VIA_REFUSAL "unknown field \"via\" in "

/* A supervisor of version 0 refuses an exec or an attach that carries a
 * "v" with this error (its strict field check): the client then sends the
 * request again without it (sg_ctl_is_v0_refusal). */
#define SG_CTL_V0_REFUSAL "unknown field \"v\" in "

/* "rid" (an exec's optional field, not a new version either): the
 * request's id, random per command the client runs, the same in every
 * copy of the request it sends. A supervisor remembers the ids of the
 * execs it started (a bounded number of recent ones) and refuses a copy
 * of one with SG_CTL_RID_SEEN: a resent request never runs twice (the
 * client resends only what it believes unread: sg_revive_unread). One
 * without it refuses the field by name (SG_CTL_RID_REFUSAL); the client
 * sends the request again without it. 1-64 of [0-9A-Za-z_-]. */
#define SG_CTL_RID_MAX 64
#define SG_CTL_RID_REFUSAL "unknown field \"rid\" in "
#define SG_CTL_RID_SEEN "this request was started already"

typedef struct sg_exec_req {
    char **argv;       /* NULL-terminated */
    char **env;        /* NULL-terminated "K=V" extras */
    char *cwd;         /* NULL: /workspace */
    double timeout_s;  /* 0: the sandbox's default */
    char *tool_name;   /* an agent tool call ("tool":{"name",...}), else NULL */
    void *tool;        /* the "tool" object (json_t*, owned), else NULL */
    bool code_only;    /* "result": "code": answer with EXIT, not RESULT */
    bool tty;          /* "tty": {"rows", "cols"}: on a PTY made inside the sandbox */
    sg_ctl_winsz winsz;
    bool no_record_input; /* "record_input": false: a tty exec's keys are not kept (passwords) */
    bool detachable;   /* "detachable": true (with "tty"): its caller leaving detaches, not kills */
    char rid[SG_CTL_RID_MAX + 1]; /* "rid" (above); "": none */
} sg_exec_req;

/* Strict parse of an "exec" request object; every field checked and
 * bounded (SG_EXEC_MAX_ARGS, SG_EXEC_MAX_ENV, no NUL, env keys valid). */
int sg_exec_req_parse(const void *json_obj, sg_exec_req *out, sg_err *err);
void sg_exec_req_free(sg_exec_req *r);

/* The command line of an argv as the original recorded it: the script of
 * `sh -c SCRIPT`, else the words joined with shell quoting. Caller frees. */
char *sg_exec_cmdline(char *const *argv);

/* Whether fd may cross into a sandbox as an exec's stdin as it is: the
 * read end of an anonymous pipe, or /dev/null. Anything else a caller
 * holds — a terminal, a directory, a regular file, a socket, a named FIFO
 * (a host path) — is a capability the sandbox must not get: the CLI relays
 * it through a pipe of its own, and the supervisor refuses it. */
bool sg_ctl_stdin_ok(int fd);

/* Parses a REQ payload into a JSON object with a string "op". Returns a
 * json_t* (caller decrefs) or NULL with err. */
void *sg_ctl_parse_req(const char *buf, size_t len, const char **op, sg_err *err);

/* ---- the ops, typed (ctl_ops.c) ------------------------------------------ */

typedef enum sg_ctl_op {
    SG_OP_NONE = 0,
    SG_OP_EXEC,        /* sg_exec_req (stdin fd with it)  -> output, RESULT or EXIT */
    SG_OP_ATTACH,      /* sg_ctl_attach_req               -> as a tty exec */
    SG_OP_INFO,        /* -                               -> sg_ctl_info_reply */
    SG_OP_DESTROY,     /* -                               -> sg_ctl_destroy_reply */
    SG_OP_CHECKPOINT,  /* sg_ctl_checkpoint_req           -> sg_ctl_checkpoint_reply */
    SG_OP_CHECKPOINTS, /* -                               -> sg_ctl_checkpoints_reply */
    SG_OP_ROLLBACK,    /* sg_ctl_rollback_req             -> sg_ctl_rollback_reply */
    SG_OP_ABORT,       /* sg_ctl_abort_req                -> sg_ctl_abort_reply */
    SG_OP_CLAIM,       /* sg_ctl_claim_req                -> the sandbox's record */
    SG_OP_PING,        /* -                               -> sg_ctl_ping_reply */
    SG_OP_EXPIRE,      /* sg_ctl_expire_req               -> sg_ctl_expire_reply */
    SG_OP_RESUME,      /* -                               -> sg_ctl_resume_reply */
    SG_OP_CP,          /* sg_ctl_cp_req (a directory fd)  -> sg_ctl_cp_reply */
    SG_OP_COUNT,
} sg_ctl_op;

/* The op's name on the wire ("exec"), or NULL; SG_OP_NONE for an unknown name. */
const char *sg_ctl_op_name(sg_ctl_op op);
sg_ctl_op sg_ctl_op_from_name(const char *name);

typedef struct sg_ctl_attach_req {
    long long exec;      /* the detached exec to attach to; 0: the only one */
    sg_ctl_winsz winsz;  /* "tty": {"rows", "cols"} */
    bool detachable;     /* absent on the wire: true */
} sg_ctl_attach_req;

typedef struct sg_ctl_checkpoint_req {
    char *label; /* NULL: "on request" */
} sg_ctl_checkpoint_req;

typedef struct sg_ctl_rollback_req {
    char *to; /* a checkpoint id (or a prefix); NULL: the latest */
    bool dry_run, force;
} sg_ctl_rollback_req;

typedef struct sg_ctl_abort_req {
    char *reason; /* NULL: "abort requested" */
} sg_ctl_abort_req;

typedef struct sg_ctl_claim_req {
    void *meta; /* json_t*, owned: the sandbox record (state.h's sg_sandbox_meta_json) */
} sg_ctl_claim_req;

typedef struct sg_ctl_expire_req {
    double after_s; /* destroy in after_s seconds; negative: cancel */
} sg_ctl_expire_req;

/* sandglass cp: a copy into or out of the workspace, done by the
 * supervisor (sandbox/wscopy.h). The fd sent with the request is a
 * directory of the caller's: in, the one holding the source `name`; out,
 * the one the copy is made in, as `name` (absent: the workspace entry's
 * own name; "workspace" for the workspace itself). */
typedef struct sg_ctl_cp_req {
    bool out;   /* "dir": "in" (into the workspace) or "out" */
    char *path; /* the workspace path as the user gave it (wscopy.h's sg_wscopy_rel) */
    char *name; /* one file name (no '/', not "." or ".."); required in */
} sg_ctl_cp_req;

/* One request: op, the sender's version, and the op's fields. */
typedef struct sg_ctl_req {
    sg_ctl_op op;
    int v; /* the sender's protocol version: SG_CTL_VERSION when encoding */
    char *via; /* SG_CTL_VIA_MAX bytes at most; NULL: none (above) */
    union {
        sg_exec_req exec;
        sg_ctl_attach_req attach;
        sg_ctl_checkpoint_req checkpoint;
        sg_ctl_rollback_req rollback;
        sg_ctl_abort_req abort;
        sg_ctl_claim_req claim;
        sg_ctl_expire_req expire;
        sg_ctl_cp_req cp;
    } u;
} sg_ctl_req;

/* The request as a JSON object (json_t*, caller decrefs), "v" included when
 * r->v > 0. NULL when a string is not UTF-8 (or out of memory). */
void *sg_ctl_req_encode(const sg_ctl_req *r);
/* The same, dumped: the REQ payload. Caller frees; NULL as above. */
char *sg_ctl_req_dump(const sg_ctl_req *r);

/* Strict decode of a request object (sg_ctl_parse_req's): the op, the
 * version (absent: 0; newer than SG_CTL_VERSION: refused with what to do),
 * and each field's type and bounds; an unknown field is refused. err says
 * which field was wrong. out is zeroed first and holds nothing on failure. */
int sg_ctl_req_decode(const void *json_obj, sg_ctl_req *out, sg_err *err);
void sg_ctl_req_free(sg_ctl_req *r);

/* The same per op, for a handler that knows its op (fields only). */
int sg_ctl_decode_attach(const void *json_obj, sg_ctl_attach_req *out, sg_err *err);
int sg_ctl_decode_checkpoint(const void *json_obj, sg_ctl_checkpoint_req *out, sg_err *err);
int sg_ctl_decode_rollback(const void *json_obj, sg_ctl_rollback_req *out, sg_err *err);
int sg_ctl_decode_abort(const void *json_obj, sg_ctl_abort_req *out, sg_err *err);
int sg_ctl_decode_claim(const void *json_obj, sg_ctl_claim_req *out, sg_err *err);
int sg_ctl_decode_expire(const void *json_obj, sg_ctl_expire_req *out, sg_err *err);
int sg_ctl_decode_cp(const void *json_obj, sg_ctl_cp_req *out, sg_err *err);

/* Whether an ERROR's message is a version-0 supervisor refusing "v". */
bool sg_ctl_is_v0_refusal(const char *msg);
/* Whether it is a supervisor of the build before "via" refusing it. */
bool sg_ctl_is_via_refusal(const char *msg);
/* Whether it is one of the build before "rid" refusing it. */
bool sg_ctl_is_rid_refusal(const char *msg);
/* Whether it is a refusal of an exec whose "rid" was started already. */
bool sg_ctl_is_rid_seen(const char *msg);

/* ---- replies ---------------------------------------------------------------
 * A reply decoder reads the fields it names and ignores others (a newer
 * supervisor may add some); a field of the wrong type is refused. */

typedef struct sg_ctl_ping_reply {
    bool pong;
    int v; /* the supervisor's protocol version (absent: 0) */
} sg_ctl_ping_reply;

typedef struct sg_ctl_checkpoint_reply {
    char *id; /* the checkpoint's id */
} sg_ctl_checkpoint_reply;

/* The proof a kill of every process of the sandbox (an abort's, a forced
 * rollback's) left only its init. */
typedef struct sg_ctl_kill_proof {
    long long processes_left;
    bool cgroup_holds_only_init;
    long long init_pid;
    long long *left_pids; /* at most SG_CTL_KILL_LIST_MAX */
    size_t n_left_pids;
    double kill_ms;       /* how long the kill took */
    char *checked_by;     /* "cgroup" or "pid namespace" */
} sg_ctl_kill_proof;

/* What that kill did: "execs_killed" (their numbers), "processes_killed",
 * "proof". At the top level of an abort's answer; a forced rollback's
 * "killed" object. */
typedef struct sg_ctl_kill_report {
    long long *execs_killed; /* at most SG_CTL_KILL_LIST_MAX */
    size_t n_execs_killed;
    long long processes_killed;
    sg_ctl_kill_proof proof;
} sg_ctl_kill_report;

#define SG_CTL_KILL_LIST_MAX 100000

/* "rollback": the plan (dry_run: "running_execs", "changes", restored
 * false), nothing to do ("changed" 0, restored false), or what was done. */
typedef struct sg_ctl_rollback_reply {
    char *to;      /* the checkpoint rolled back to (its full id) */
    bool restored; /* false: a dry run, or nothing to restore */
    long long running_execs; /* < 0: absent (only a plan says it) */
    void *changes; /* json_t* array of {"path", "change"}, owned; NULL: none */
    long long changed;       /* files the restore changed; < 0: absent */
    double took_ms;          /* < 0: absent */
    char *safety_checkpoint; /* the checkpoint of the present taken first; NULL: none */
    bool killed;             /* "killed" is there: what --force killed */
    sg_ctl_kill_report kill;
    long long not_restored;  /* files left as they were; 0: absent */
    char *asked;             /* what the operator named, when not the full id; else NULL */
    void *actor;             /* json_t* object, owned; NULL: absent */
} sg_ctl_rollback_reply;

/* "abort": the abort record (also the session_abort event's payload). An
 * abort of an aborted session answers aborted, already, by, reason only. */
typedef struct sg_ctl_abort_reply {
    bool aborted, already;
    char *by, *reason;
    void *caps;         /* json_t* object, owned (caps.h's sg_caps_json); NULL: absent */
    bool killed;        /* the kill's report is there ("proof" present) */
    sg_ctl_kill_report kill;
    char *checkpoint;   /* with killed: the newest checkpoint's id, NULL: none (null) */
    void *actor;        /* json_t* object, owned; NULL: absent */
} sg_ctl_abort_reply;

typedef struct sg_ctl_resume_reply {
    bool resumed;
    char *was; /* the abort's reason */
} sg_ctl_resume_reply;

typedef struct sg_ctl_expire_reply {
    bool expires;
    double after_s;
} sg_ctl_expire_reply;

/* "cp": the workspace path it copied from or to ("/workspace/..."), what
 * it copied, and the special files of a tree it left out. */
typedef struct sg_ctl_cp_reply {
    char *path;
    long long files, dirs, links, bytes, skipped;
} sg_ctl_cp_reply;

/* An exec's RESULT, the fields a client acts on (the object has more:
 * --json prints it whole). */
typedef struct sg_ctl_exec_reply {
    int exit_code;   /* -1: none (null: killed before it ran, or by a signal) */
    int signal;      /* 0: none */
    bool timed_out, output_limit_hit;
    bool detached;   /* a detachable tty exec left running */
    long long exec;  /* with detached: its exec number */
} sg_ctl_exec_reply;

/* "info": the sandbox's record (state.h's sg_sandbox_meta_json, its fields
 * at the top level of the answer) and what the supervisor knows now. */
typedef struct sg_ctl_info_reply {
    void *record;          /* json_t* object, owned: the record's fields (the ones below taken out) */
    long long running_execs;
    char *cgroup_layout;   /* "v2", "v1", ... */
    char *state;           /* "running", "aborted", "broken" */
    char *abort_by, *abort_reason; /* with state "aborted" ("abort": {"by", "reason"}), else NULL */
    void *caps_now;        /* json_t* object, owned: the caps and their use; NULL: none */
    int v;                 /* the supervisor's protocol version (absent: 0) */
    long long attached;    /* terminals with a caller attached (absent: -1, not told) */
    char *now;             /* the command running now, SG_CTL_NOW_MAX bytes at most; NULL: none */
    long long unacked;     /* captured events the ingest has not acknowledged (absent: -1) */
} sg_ctl_info_reply;
#define SG_CTL_NOW_MAX 160

/* "destroy": the proof that nothing of the sandbox is left. It is also the
 * "proof" of the sandbox's "destroyed" event (without events_undelivered,
 * known only once the capture is delivered). */
typedef struct sg_ctl_destroy_reply {
    char *destroyed;       /* the sandbox's id */
    long long processes_left;
    bool cgroup_empty, cgroup_removed;
    double kill_ms;        /* < 0: not measured (absent) */
    long long events_undelivered; /* < 0: not known (absent) */
    bool supervisor_was_dead; /* the CLI cleaned up: no supervisor answered */
} sg_ctl_destroy_reply;

/* "checkpoints": the sandbox's checkpoints, oldest first. */
typedef struct sg_ctl_checkpoint_entry {
    char *id;              /* all 40 hex characters */
    char *label;           /* "" when none */
    long long time;        /* seconds since the epoch */
    long long files, bytes;
} sg_ctl_checkpoint_entry;

typedef struct sg_ctl_checkpoints_reply {
    sg_ctl_checkpoint_entry *v;
    size_t n;
} sg_ctl_checkpoints_reply;

#define SG_CTL_CHECKPOINTS_MAX 1000000 /* entries a client takes in one answer */

void *sg_ctl_encode_info_reply(const sg_ctl_info_reply *r);
int sg_ctl_decode_info_reply(const void *json_obj, sg_ctl_info_reply *out, sg_err *err);
void sg_ctl_info_reply_free(sg_ctl_info_reply *r);
void *sg_ctl_encode_destroy_reply(const sg_ctl_destroy_reply *r);
int sg_ctl_decode_destroy_reply(const void *json_obj, sg_ctl_destroy_reply *out, sg_err *err);
void sg_ctl_destroy_reply_free(sg_ctl_destroy_reply *r);
void *sg_ctl_encode_checkpoints_reply(const sg_ctl_checkpoints_reply *r);
int sg_ctl_decode_checkpoints_reply(const void *json_obj, sg_ctl_checkpoints_reply *out, sg_err *err);
void sg_ctl_checkpoints_reply_free(sg_ctl_checkpoints_reply *r);

void *sg_ctl_encode_ping_reply(const sg_ctl_ping_reply *r);
int sg_ctl_decode_ping_reply(const void *json_obj, sg_ctl_ping_reply *out, sg_err *err);
void *sg_ctl_encode_checkpoint_reply(const sg_ctl_checkpoint_reply *r);
int sg_ctl_decode_checkpoint_reply(const void *json_obj, sg_ctl_checkpoint_reply *out, sg_err *err);
void sg_ctl_checkpoint_reply_free(sg_ctl_checkpoint_reply *r);
void *sg_ctl_encode_rollback_reply(const sg_ctl_rollback_reply *r);
int sg_ctl_decode_rollback_reply(const void *json_obj, sg_ctl_rollback_reply *out, sg_err *err);
void sg_ctl_rollback_reply_free(sg_ctl_rollback_reply *r);
/* The kill's report: its fields set into the object j (-1: out of memory,
 * or a string not UTF-8); decoded from the object j strictly. */
int sg_ctl_encode_kill_report(void *j, const sg_ctl_kill_report *r);
int sg_ctl_decode_kill_report(const void *j, sg_ctl_kill_report *out, sg_err *err);
void sg_ctl_kill_report_free(sg_ctl_kill_report *r);
void *sg_ctl_encode_abort_reply(const sg_ctl_abort_reply *r);
int sg_ctl_decode_abort_reply(const void *json_obj, sg_ctl_abort_reply *out, sg_err *err);
void sg_ctl_abort_reply_free(sg_ctl_abort_reply *r);
void *sg_ctl_encode_resume_reply(const sg_ctl_resume_reply *r);
int sg_ctl_decode_resume_reply(const void *json_obj, sg_ctl_resume_reply *out, sg_err *err);
void sg_ctl_resume_reply_free(sg_ctl_resume_reply *r);
void *sg_ctl_encode_expire_reply(const sg_ctl_expire_reply *r);
int sg_ctl_decode_expire_reply(const void *json_obj, sg_ctl_expire_reply *out, sg_err *err);
void *sg_ctl_encode_cp_reply(const sg_ctl_cp_reply *r);
int sg_ctl_decode_cp_reply(const void *json_obj, sg_ctl_cp_reply *out, sg_err *err);
void sg_ctl_cp_reply_free(sg_ctl_cp_reply *r);
void *sg_ctl_encode_exec_reply(const sg_ctl_exec_reply *r);
int sg_ctl_decode_exec_reply(const void *json_obj, sg_ctl_exec_reply *out, sg_err *err);

#endif

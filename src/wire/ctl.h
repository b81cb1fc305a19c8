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
 */
#ifndef SG_CTL_H
#define SG_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

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

/* Reassembles a RESULT that came in parts. */
typedef struct sg_ctl_asm {
    char *buf;
    size_t len, cap;
} sg_ctl_asm;

/* Feeds one received message. Returns 1 when msg completes a RESULT or an
 * ERROR (the whole payload is then a->buf, a->len, NUL-terminated), 0 when
 * it was a PART, -1 when the result grows past SG_CTL_RESULT_MAX. */
int sg_ctl_asm_feed(sg_ctl_asm *a, uint8_t type, const char *msg, size_t len, sg_err *err);
void sg_ctl_asm_free(sg_ctl_asm *a);

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

#endif

/* mcp: the Model Context Protocol server side of `sandglass mcp`, without
 * any I/O. It parses one newline-delimited JSON-RPC 2.0 message at a time,
 * answers the protocol methods itself and turns every tools/call into a
 * control request for the sandbox's supervisor (an "exec" with a "tool"
 * object, or "checkpoint"/"rollback"), which the transport runs on its own
 * connection and reports back.
 *
 * Both protocol eras are spoken:
 *   legacy  (2025-11-25 and earlier): initialize / notifications/initialized,
 *           then tools/list, tools/call, ping.
 *   modern  (2026-07-28): stateless; every request carries
 *           _meta["io.modelcontextprotocol/protocolVersion"] and
 *           _meta["io.modelcontextprotocol/clientCapabilities"]; server/discover;
 *           every result has "resultType" and _meta serverInfo; list results
 *           carry ttlMs and cacheScope; unknown versions get -32022.
 * A request is served as modern when its _meta names a protocol version,
 * as legacy otherwise (then initialize must have come first).
 *
 * Concurrency: calls are kept in the order they came. A call that may
 * write the workspace (tools.h: run_bash, write_file, edit_file, rollback)
 * starts only when every call before it has ended; one that only reads
 * (read_file, checkpoint) when no call before it may write. So each write
 * gets its own checkpoint of exactly the state before it (the supervisor
 * takes one before every exec that may write), its file changes are
 * reported between its own command and result, and later calls see its
 * effects. The price: a long run_bash holds back the writes sent after it
 * (their progress notifications say what they wait for); clients that
 * want parallel work run it in the background inside one call. Writes by
 * other clients of the same sandbox (`sandglass exec`) are not ordered.
 */
#ifndef SG_MCP_H
#define SG_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/buf.h"
#include "wire/ctl.h"

#define SG_MCP_PROTOCOL_MODERN "2026-07-28"
#define SG_MCP_PROTOCOL_LEGACY "2025-11-25"

/* JSON-RPC and MCP error codes. */
#define SG_MCP_PARSE_ERROR (-32700)
#define SG_MCP_INVALID_REQUEST (-32600)
#define SG_MCP_METHOD_NOT_FOUND (-32601)
#define SG_MCP_INVALID_PARAMS (-32602)
#define SG_MCP_INTERNAL_ERROR (-32603)
#define SG_MCP_UNSUPPORTED_VERSION (-32022)

/* Output of a call kept for its result: the first cap bytes, and how many
 * came in total. */
typedef struct sg_mcp_buf {
    char *data;
    size_t len, cap;
    uint64_t total;
} sg_mcp_buf;

typedef struct sg_mcp_call {
    json_t *id;             /* the request's id (string or integer) */
    json_t *progress_token; /* NULL: the client asked for no progress */
    bool modern;            /* answer in the 2026-07-28 shape */
    const struct sg_mcp_tool *tool; /* its entry in sg_mcp_tools[] (tools.h) */
    bool running;           /* started (io->start); else waiting its turn */
    json_t *req;            /* control request for the supervisor */
    char *input;            /* bytes for the command's stdin, or NULL */
    size_t input_len;
    char *path;             /* file tools: the resolved path in the sandbox */
    size_t content_len;     /* write_file: bytes written */
    sg_mcp_buf out, err;
    /* A tool with a dialogue (tools.h's reply: edit_file): what it was
     * asked, and the bytes for the command's stdin once it has them. */
    char *edit;             /* old_string, then new_string */
    size_t edit_old, edit_new;
    bool edit_all;
    size_t edit_count;      /* replacements made (or found, when refused) */
    int edit_verdict;       /* the exit code it answered the command with; 0: wrote */
    bool replied;
    sg_buf reply;           /* for the transport to write on stdin (sg_mcp_call_output) */
    uint64_t start_ns, next_progress_ns;
    int fd;                 /* owned by the transport; -1 when none */
    int in_fd;              /* the transport's: the command's stdin for a dialogue, -1 */
    sg_ctl_call answer;     /* the supervisor's answer as it comes (the transport's) */
    bool v0;                /* the supervisor speaks control protocol 0: req goes without "v" */
    void *io_data;          /* free for the transport */
    struct sg_mcp_call *next;
} sg_mcp_call;

typedef struct sg_mcp_io {
    /* Writes one complete message; the transport adds the newline. */
    void (*send)(void *ud, const char *msg, size_t len);
    /* Starts a call (opens its connection, sends c->req) when its turn
     * has come. Returns 0, or -1 with err, which is answered as a failed
     * tool call. */
    int (*start)(void *ud, sg_mcp_call *c, sg_err *err);
    /* Kills a started call's processes and releases what start took. */
    void (*cancel)(void *ud, sg_mcp_call *c);
    /* Optional: a line for the log (stderr). */
    void (*log)(void *ud, const char *msg);
    void *ud;
} sg_mcp_io;

typedef struct sg_mcp sg_mcp;

/* workspace: the sandbox's workspace path as its commands see it
 * ("/workspace"); tool paths are resolved under it. */
sg_mcp *sg_mcp_new(const sg_mcp_io *io, const char *workspace);
/* Cancels (io->cancel) and frees every call still in flight. */
void sg_mcp_free(sg_mcp *m);
/* "mcp: " and the client's name (its initialize's clientInfo.name), for a
 * control request's "via"; NULL before it is told. */
const char *sg_mcp_via(const sg_mcp *m);

/* Handles one message (a line without its newline). Never fails: every
 * problem is answered with a JSON-RPC error and the session goes on. */
void sg_mcp_handle_line(sg_mcp *m, const char *buf, size_t len);
/* The client sent a line longer than SG_MCP_MSG_MAX (its bytes were
 * dropped): answers an error with id null. */
void sg_mcp_oversized(sg_mcp *m, uint64_t len);

/* Output of a running call, as the supervisor sends it. Returns 1 when the
 * call now has bytes for the command's stdin in c->reply (a tool with a
 * dialogue: the transport writes them, once, and resets c->reply), 0 when
 * not, -1 out of memory. */
int sg_mcp_call_output(sg_mcp_call *c, bool is_stderr, const char *buf, size_t len);
/* Completes a call with the supervisor's RESULT object, or its ERROR
 * message (or ours when the connection broke): answers the request,
 * unlinks and frees c. */
void sg_mcp_call_done(sg_mcp *m, sg_mcp_call *c, const json_t *result, const char *error);
/* Sends the progress notifications that are due. Returns the ms until the
 * next one, or -1 when no call wants progress. */
int sg_mcp_tick(sg_mcp *m, uint64_t now_ns);

/* The calls in flight, started or waiting (a list linked by ->next, in
 * the order they came). */
sg_mcp_call *sg_mcp_calls(sg_mcp *m);
size_t sg_mcp_ncalls(const sg_mcp *m);
/* True once a legacy initialize was answered. */
bool sg_mcp_initialized(const sg_mcp *m);

/* Resolves a tool path ("src/a.c", "/workspace/src/a.c") to a normalised
 * absolute path under workspace. Refuses paths that leave it. Caller frees. */
char *sg_mcp_resolve_path(const char *workspace, const char *path, sg_err *err);

#endif

/* common: helpers shared by the CLI's subcommands. */
#ifndef SG_CLI_COMMON_H
#define SG_CLI_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* Path of sandglassd: $SANDGLASSD if set, else next to /proc/self/exe,
 * else ../libexec/sandglassd relative to it. */
int sg_cli_daemon_path(char *buf, size_t len);
/* Path of sandglass-supervisor ($SANDGLASS_SUPERVISOR, else the same way):
 * the supervisor has its own binary without the store's libraries (libpq
 * alone costs ~4 ms per process start). */
int sg_cli_supervisor_path(char *buf, size_t len);

/* Sends one request and waits for its RESULT/ERROR. Returns the result
 * object (caller decrefs) or NULL with err (the supervisor's message). */
json_t *sg_cli_request(const char *id, json_t *req, sg_err *err);

/* The CLI's conventions (README, "Exit codes"): 0 done, 1 the operation
 * failed, 2 a usage error (unknown option, missing or malformed argument);
 * `exec` keeps the command's own status and uses 125 for its own errors.
 * Every message is one line, "sandglass CMD: what was wrong"; with --json
 * (sg_cli_json_errors) it is {"error": ..., "command": ...} on stderr. */
#define SG_CLI_FAILED 1
#define SG_CLI_USAGE 2

/* Prints the error; returns SG_CLI_FAILED. */
int sg_cli_fail(const char *cmd, const char *msg);
/* A usage error, naming what was wrong and pointing at --help; returns
 * SG_CLI_USAGE. */
int sg_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* After --json: errors are printed as JSON objects. */
void sg_cli_json_errors(bool on);

/* A sandbox id from what the user typed: the id itself or a unique prefix
 * of one in this state directory. Fills out (SG_ID_LEN + 1 bytes) or
 * returns -1 with err ("no sandbox 'x'", or the ids a short prefix
 * matches). */
int sg_cli_resolve_id(const char *arg, char *out, sg_err *err);

/* The version every command reports (--version, MCP's serverInfo). */
#define SG_VERSION "0.1.0"

/* Starts the supervisor of sandbox id (detached: double fork, new
 * session), or with adopt a new one for a live sandbox whose supervisor
 * died, and waits until it is ready. */
int sg_cli_start_supervisor(const char *id, bool adopt, sg_err *err);

/* Destroys sandbox id (the supervisor's proof, or the cleanup from here
 * when it cannot), saying on stderr what it found. Returns the result
 * object (caller decrefs) or NULL with err. */
json_t *sg_cli_destroy(const char *id, bool verbose, sg_err *err);

/* Cleans up a sandbox whose supervisor is gone: kills every process in its
 * cgroup, proves it empty, removes cgroups and state. */
int sg_cli_cleanup_dead(const char *id, bool verbose, sg_err *err);

#endif

/* common: helpers shared by the CLI's subcommands. */
#ifndef SG_CLI_COMMON_H
#define SG_CLI_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "cli/report.h"

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

/* common: helpers shared by the CLI's subcommands. */
#ifndef SG_CLI_COMMON_H
#define SG_CLI_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>

#include "base/err.h"
#include "cli/report.h"
#include "wire/ctl.h"
#include "wire/revive.h"

/* Path of sandglassd: $SANDGLASSD if set, else next to /proc/self/exe,
 * else ../libexec/sandglassd relative to it. */
int sg_cli_daemon_path(char *buf, size_t len);
/* Runs `sandglassd cmd argv[1..]` in this process's place (argv as the
 * command got it, argv[-1] the program's name): what the thin CLI hands
 * over (cast from the store, ls --all-hosts). Returns only on failure,
 * with the exit status. */
int sg_cli_handoff(const char *cmd, char **argv);
/* The `sandglass` program sandglassd's daemons run (the host's pool
 * refills, serve's actions): $SANDGLASS_CLI, else `sandglass` beside this
 * program, in its ../libexec's ../bin (installed), or beside it. 0, or -1. */
int sg_cli_find_cli(char *buf, size_t len);

/* The newest modification time of the regular files in
 * <state>/sb/<id>/<rel>/ (0: none): a sandbox's last activity is its
 * spool's (each captured event) or its casts' (each terminal write). */
time_t sg_cli_newest_mtime(const char *id, const char *rel);

/* Runs path with argv (stdin /dev/null; stderr /dev/null when quiet, else
 * ours) and parses its stdout, at most max bytes, as one JSON value; its
 * wait status into *status. NULL when it gave none (or could not run). */
json_t *sg_cli_run_json(const char *path, char *const argv[], size_t max, bool quiet, int *status);

/* Sends one request (req->v is set to SG_CTL_VERSION) and waits for its
 * RESULT/ERROR. A sandbox whose supervisor died is taken over first
 * (revive.h), and a request that the dying supervisor never read goes
 * again to the new one; a supervisor of protocol 0 gets it without "v".
 * Returns the result object (caller decrefs) or NULL with err (the
 * supervisor's message; EINVAL for a string that is not UTF-8). */
json_t *sg_cli_request(const char *id, const sg_ctl_req *req, sg_err *err);
/* The same with fd sent beside the request (SCM_RIGHTS; -1: none): the ops
 * whose handler takes one (exec's stdin, cp's directory). fd stays ours. */
json_t *sg_cli_request_fd(const char *id, const sg_ctl_req *req, int fd, sg_err *err);
/* The same (no fd) to a supervisor that serves the sandbox now, never
 * one that takes it over: a dead or dying supervisor (its socket refuses,
 * or resets the request unread) is an error, ECONNREFUSED/ENOENT or the
 * reset's. For a pool's spare, which is destroyed rather than revived. */
json_t *sg_cli_request_live(const char *id, const sg_ctl_req *req, sg_err *err);

/* Destroys sandbox id (the supervisor's proof, or the cleanup from here
 * when it cannot), saying on stderr what it found; via (NULL: none) is
 * recorded as whom it acts for (wire/ctl.h). Returns the result object
 * (caller decrefs) or NULL with err. */
/* abort's and destroy's --via: whom the action is for, recorded beside
 * the operator (serve passes "remote: USER@HOST" for another host's):
 * 1 to SG_CTL_VIA_MAX printable ASCII characters. */
#define SG_CLI_VIA_IS "--via is 1 to 128 printable ASCII characters" /* SG_CTL_VIA_MAX */
bool sg_cli_via_ok(const char *via);

json_t *sg_cli_destroy(const char *id, const char *via, bool verbose, sg_err *err);
/* abort's answer in words (cmd_abort.c): who, why, what was killed, the
 * proof; rb the rollback's answer after it, or NULL. */
void sg_cli_print_abort(const char *id, const sg_ctl_abort_reply *a, const sg_ctl_rollback_reply *rb);

/* Cleans up a sandbox whose supervisor is gone: kills every process in its
 * cgroup, proves it empty, removes cgroups and state. */
int sg_cli_cleanup_dead(const char *id, bool verbose, sg_err *err);

/* Asks "question [y/n]: " on out and reads stdin: y/yes or n/no, anything
 * else asks again; end of input is no. */
bool sg_cli_ask_yes(FILE *out, const char *question);

#endif

/* cmds: one entry point per subcommand, one file each (as crun does).
 * Each returns the process exit status. */
#ifndef SG_CMDS_H
#define SG_CMDS_H

#include <sys/types.h>

#include "base/err.h"

/* thin CLI (sandglass) */
int sg_cmd_create(int argc, char **argv);
/* Fills a new sandbox's own workspace (dirfd: empty) before its
 * supervisor starts, every entry made owned by m's uid:gid (m: the new
 * sandbox's record, saved: its id, its ingest): 0, or -1 with err. */
struct sg_sandbox_meta;
typedef int (*sg_create_seed_fn)(void *ud, int dirfd, const struct sg_sandbox_meta *m, sg_err *err);
/* create whose own workspace seed fills, its `sandbox` event saying
 * forked_from (JSON text): sandglass fork's (NULL, NULL, NULL: create). */
int sg_cmd_create_from(int argc, char **argv, sg_create_seed_fn seed, void *seed_ud, const char *forked_from);
int sg_cmd_exec(int argc, char **argv);
/* exec under another name in its messages (shell) */
int sg_cmd_exec_as(const char *name, int argc, char **argv);
/* exec's per-call signal state cleared, for a caller that runs several */
void sg_cmd_exec_reset(void);
/* shell --attach: this terminal becomes the caller of the sandbox's
 * detached shell (exec_num, or the only one when 0). */
int sg_cmd_exec_attach(const char *id, long exec_num, const char *detach_keys);
int sg_cmd_shell(int argc, char **argv);
/* shell --repl: each stdin line as `sh -c LINE` (one exec each), with the
 * exec options opts (--cwd, --env, --timeout and their values). */
int sg_cli_shell_repl(const char *id, char **opts, int nopts);
int sg_cmd_cast(int argc, char **argv);
int sg_cmd_ls(int argc, char **argv);
/* ls --all-hosts (sandglassd: it asks the ingest) */
int sg_cmd_ls_hosts(int argc, char **argv);
int sg_cmd_destroy(int argc, char **argv);
int sg_cmd_gc(int argc, char **argv);
int sg_cmd_mcp(int argc, char **argv);
int sg_cmd_abort(int argc, char **argv);
/* sandglassd's: abort and destroy of a sandbox on another host (cmd_remote.c). */
int sg_cmd_abort_remote(int argc, char **argv);
int sg_cmd_destroy_remote(int argc, char **argv);
int sg_cmd_resume(int argc, char **argv);
int sg_cmd_cp(int argc, char **argv);
int sg_cmd_checkpoint(int argc, char **argv);
int sg_cmd_checkpoints(int argc, char **argv);
int sg_cmd_rollback(int argc, char **argv);
int sg_cmd_pool(int argc, char **argv);

/* heavy commands (sandglassd, run by sandglass for them) */
int sg_cmd_supervisor(int argc, char **argv);
int sg_cmd_ingest(int argc, char **argv);
int sg_cmd_token(int argc, char **argv);
/* sandglass token revoke (cmd_token_revoke.c; sg_cmd_token hands it on). */
int sg_cmd_token_revoke(int argc, char **argv);
int sg_cmd_events(int argc, char **argv);
int sg_cmd_workspace(int argc, char **argv);
int sg_cmd_fork(int argc, char **argv);
int sg_cmd_cast_store(int argc, char **argv);
int sg_cmd_sessions(int argc, char **argv);
int sg_cmd_flush(int argc, char **argv);
int sg_cmd_serve(int argc, char **argv);
int sg_cmd_host(int argc, char **argv);
int sg_cmd_export(int argc, char **argv);
int sg_cmd_import(int argc, char **argv);
int sg_cmd_purge(int argc, char **argv);

#endif

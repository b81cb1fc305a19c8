/* config: the operator's defaults for the CLI, one lookup for every
 * command (docs/man/sandglass.conf.md, sandglass.conf(5)).
 *
 * A key's value is, first found: the command's flag (the command's own
 * business), the key's SANDGLASS_* environment variable, the user's file
 * ($XDG_CONFIG_HOME/sandglass/sandglass.conf, else
 * ~/.config/sandglass/sandglass.conf), the system's file
 * (/etc/sandglass/sandglass.conf), the built-in default. SANDGLASS_CONFIG=FILE
 * reads FILE instead of both files; SANDGLASS_CONFIG=none (or empty) reads
 * none. The files are INI, read by libinih: "[section]", "key = value",
 * comments from ';' or '#' at a line's start. An unknown section or key, a
 * key given twice in one file, a line inih cannot read and a value its
 * key's parser refuses are errors that name the file and line (or the
 * variable). */
#ifndef SG_CLI_CONFIG_H
#define SG_CLI_CONFIG_H

#include "base/err.h"

#define SG_CONFIG_SYSTEM_FILE "/etc/sandglass/sandglass.conf"

typedef enum {
    /* [sandglass] */
    SG_CONF_STATE_DIR,
    SG_CONF_LOG_LEVEL,
    SG_CONF_POOL_SIZE,
    SG_CONF_MAX_SANDBOXES,
    /* [ingest] */
    SG_CONF_INGEST,
    SG_CONF_SECRET,
    SG_CONF_INGEST_CA,
    /* [limits]: create's, per sandbox or per exec */
    SG_CONF_MEMORY,
    SG_CONF_PIDS,
    SG_CONF_CPUS,
    SG_CONF_TIMEOUT,
    SG_CONF_OUTPUT_LIMIT,
    SG_CONF_DISK,
    /* [caps]: create's caps and capture budgets */
    SG_CONF_MAX_WALL,
    SG_CONF_MAX_EXECS,
    SG_CONF_MAX_CPU,
    SG_CONF_MAX_CALLS,
    SG_CONF_CHECKPOINTS,
    SG_CONF_MAX_EVENTS_PER_MIN,
    SG_CONF_MAX_BYTES_PER_MIN,
    SG_CONF_MAX_CHECKPOINTS_PER_MIN,
    SG_CONF_MAX_FILE_EVENTS,
    SG_CONF_CAPTURE_IGNORE,
    SG_CONF_CAPTURE_MAX_FILE,
    /* [session]: create's lifecycle */
    SG_CONF_IDLE_TIMEOUT,
    SG_CONF_TTL,
    SG_CONF_EXPIRY_WARNING,
    SG_CONF_KEEP,
    SG_CONF__COUNT
} sg_conf_key;

/* Reads the files (once) and checks them and the keys' environment
 * variables: every value through its key's parser. err names the file
 * and line ("FILE:7: memory: invalid size '12Q': ...") or the variable.
 * Then exports the keys that other processes and the lower layers read
 * from the environment (state-dir as SANDGLASS_STATE_DIR, log-level as
 * SANDGLASS_LOG_LEVEL) when a file set them and the environment did not.
 * Each binary's main calls it once before it runs a command. */
int sg_config_load(sg_err *err);
/* A daemon's SIGHUP: the files and variables read again as
 * sg_config_load does, the new values in force only when all of them are
 * good (-1 with err: the old ones kept). What the first load exported to
 * the environment (state-dir, log-level) is the environment's from then
 * on: a reload does not move a daemon's state directory. */
int sg_config_reload(sg_err *err);

/* key's value: the environment's, else the user file's, else the system
 * file's; NULL for the built-in default (or before a successful load).
 * *origin (optional) says where it came from, for messages: "SANDGLASS_TTL"
 * or "FILE:LINE". */
const char *sg_config_get(sg_conf_key key, const char **origin);

/* "memory", "idle-timeout": a key's name, also the flag's (--memory). */
const char *sg_config_key_name(sg_conf_key key);

/* The ingest URL(s) a command uses without --ingest: the config's, else
 * ws://127.0.0.1:7433. */
const char *sg_config_ingest(void);
/* The ingest URL(s) the config or the environment gives; NULL when none
 * (no default: abort and destroy ask another host only when told where). */
const char *sg_config_ingest_given(void);

/* The secret file a command uses without --secret (caller frees): the
 * config's, else <state>/ingest/secret. */
char *sg_config_secret(void);

/* Forgets what was loaded (tests). */
void sg_config_reset(void);
/* Reads path instead of /etc/sandglass/sandglass.conf (tests; NULL: back
 * to it). */
void sg_config_set_system_file(const char *path);

#endif

/* report: how every subcommand of both binaries (`sandglass` and
 * `sandglassd`) reports an error: one line "PROG CMD: what was wrong",
 * where PROG is the program the user ran (sandglassd when run directly,
 * sandglass when sandglass ran it for them); with --json an object
 * {"error", "command"} on stderr instead. Exit codes (docs/CLI.md, "Exit
 * codes"): 0 done, 1 the operation failed, 2 a usage error (unknown option,
 * missing or malformed argument); `exec` keeps the command's own status and
 * uses 125 for its own errors. */
#ifndef SG_CLI_REPORT_H
#define SG_CLI_REPORT_H

#include <stdbool.h>

#define SG_CLI_FAILED 1
#define SG_CLI_USAGE 2

/* The program named in messages (default "sandglass"). */
void sg_cli_set_prog(const char *prog);
const char *sg_cli_prog(void);

/* Prints the error; returns SG_CLI_FAILED. */
int sg_cli_fail(const char *cmd, const char *msg);
/* The same with a format. */
int sg_cli_failf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One line of news or a warning, in the same shape ("PROG CMD: msg"). */
void sg_cli_sayf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A usage error, naming what was wrong and pointing at --help; returns
 * SG_CLI_USAGE. */
int sg_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error of an option getopt_long refused (run it with opterr =
 * 0): bad is argv[optind - 1]. */
int sg_cli_bad_option(const char *cmd, const char *bad);
/* After --json: errors are printed as JSON objects. */
void sg_cli_json_errors(bool on);

#endif

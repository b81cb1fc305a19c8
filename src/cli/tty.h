/* tty: the caller's terminal during a tty exec (`exec -t`, `shell`). Raw
 * mode (every byte, Ctrl-C included, goes to the sandbox's own terminal,
 * whose line discipline decides: so Ctrl-C reaches only its foreground
 * job), always restored: at the end, when the sandbox goes under it, and
 * from the signal handlers of SIGTERM, SIGHUP and SIGINT. SIGWINCH is
 * turned into a byte on a pipe the relay loop polls. */
#ifndef SG_CLI_TTY_H
#define SG_CLI_TTY_H

#include <stdbool.h>

#include "wire/ctl.h"

/* The caller's window size (stdin's, else stdout's; 0x0 when neither
 * knows). */
sg_ctl_winsz sg_cli_tty_size(void);

/* Puts the terminal on fd 0 in raw mode, remembering how it was; without
 * input_too, only its output side (the sandbox's terminal already turned
 * "\n" into "\r\n"): keys and Ctrl-C stay this terminal's. Returns 0 or
 * -errno. */
int sg_cli_tty_raw(bool input_too);

/* Restores the terminal if sg_cli_tty_raw changed it (async-signal-safe;
 * idempotent). Returns whether it was raw. */
bool sg_cli_tty_restore(void);

/* A pipe whose read end becomes readable at each SIGWINCH (installs the
 * handler). Returns the read end or -1. */
int sg_cli_tty_winch_fd(void);
/* Empties that pipe. */
void sg_cli_tty_winch_clear(void);

#endif

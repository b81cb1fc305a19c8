/* daemon_signals: the signals of the long-running commands (ingest, serve, host)
 * on their libuv loop. */
#ifndef SG_CLI_DAEMON_SIGNALS_H
#define SG_CLI_DAEMON_SIGNALS_H

#include <signal.h>
#include <uv.h>

/* A daemon's signals. sg_cli_signals_hold, before its start: SIGINT,
 * SIGTERM and SIGHUP held (blocked) from before its first line is printed,
 * so that a caller that signals it as soon as it reads that line is
 * answered by the handler, not killed by the default action (threads made
 * meanwhile keep them blocked). sg_cli_signals_start, once it runs: the
 * handlers on loop, then the signals let through. SIGINT and SIGTERM call
 * stop(ud, signum) and close the handlers (the loop may end); SIGHUP calls
 * hup(ud). */
typedef struct sg_cli_signals {
    uv_signal_t h[3];
    sigset_t held;
    void (*stop)(void *ud, int signum);
    void (*hup)(void *ud);
    void *ud;
} sg_cli_signals;
void sg_cli_signals_hold(sg_cli_signals *s);
void sg_cli_signals_start(uv_loop_t *loop, sg_cli_signals *s);

#endif

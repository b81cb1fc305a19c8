#include "cli/daemon_signals.h"

#include <pthread.h>
#include <stddef.h>

void sg_cli_signals_hold(sg_cli_signals *s)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, &s->held);
}

static void on_daemon_signal(uv_signal_t *h, int signum)
{
    sg_cli_signals *s = h->data;
    if (signum == SIGHUP) {
        s->hup(s->ud);
        return;
    }
    s->stop(s->ud, signum);
    for (size_t i = 0; i < 3; i++)
        uv_close((uv_handle_t *)&s->h[i], NULL);
}

void sg_cli_signals_start(uv_loop_t *loop, sg_cli_signals *s)
{
    static const int signums[3] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < 3; i++) {
        uv_signal_init(loop, &s->h[i]);
        s->h[i].data = s;
        uv_signal_start(&s->h[i], on_daemon_signal, signums[i]);
    }
    pthread_sigmask(SIG_SETMASK, &s->held, NULL);
}

/* sv_tty: a tty exec's terminal (tty.h) wired to the exec and its caller:
 * the terminal's output is the exec's stdout (output limit, capture,
 * caller), the caller's STDIN and WINSZ go to the terminal, and each side
 * holds the other back when it is slow. */
#include "supervisor/sv_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void on_tty_output(void *ud, const char *buf, size_t len)
{
    exec_ctx *ex = ud;
    exec_output(ex, SG_CTL_STDOUT, buf, len);
    if (ex->cl && ex->cl->qbytes > SUP_CLIENT_QUEUE_MAX)
        sg_sup_tty_pause(ex->tty, true); /* client_update_poll resumes it */
}

static void on_tty_input_room(void *ud)
{
    exec_ctx *ex = ud;
    if (ex->cl)
        client_update_poll(ex->cl);
}

static const sg_sup_tty_ops sv_tty_ops = {on_tty_output, on_tty_input_room};

/* The child's pipes still carry what fails before the terminal is there. */
int sv_tty_start(sup *s, exec_ctx *ex, sg_ctl_winsz ws, int *stdin_fd, sg_err *err)
{
    int tsv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, tsv) < 0)
        return sg_err_sys(err, "socketpair");
    ex->tty = sg_sup_tty_new(&s->loop, tsv[0], ws, &sv_tty_ops, ex);
    if (!ex->tty) {
        close(tsv[1]);
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    close(*stdin_fd);
    *stdin_fd = tsv[1];
    return 0;
}

/* Ignored once the exec ended (keys typed while it went). */
void client_tty_msg(client *c, uint8_t type, const char *buf, size_t n)
{
    exec_ctx *ex = c->ex;
    if (!ex || ex->finished || !ex->tty)
        return;
    if (type == SG_CTL_STDIN) {
        if (sg_sup_tty_input(ex->tty, buf, n) < 0)
            client_error(c, "typed input overflowed the terminal's queue");
    } else if (n == sizeof(sg_ctl_winsz)) {
        sg_ctl_winsz ws;
        memcpy(&ws, buf, sizeof ws);
        sg_sup_tty_resize(ex->tty, ws);
    }
}

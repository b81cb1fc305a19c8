/* tty: the supervisor's end of an exec's terminal. See tty.h. */
#include "supervisor/tty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "sandbox/pty.h"

#define TTY_READ_CHUNK (60 * 1024)
/* What sg_sup_tty_drain passes on at most: the rest of a flood is the
 * output limit's business, not a reason to hold the loop. */
#define TTY_DRAIN_MAX (4 * 1024 * 1024)

struct sg_sup_tty {
    const sg_sup_tty_ops *ops;
    void *ud;
    int sock, master;          /* -1 once done with / not yet come */
    uv_poll_t sock_poll, master_poll;
    bool sock_active, master_active;
    bool paused, freed;
    int pending_closes;
    sg_ctl_winsz ws;
    sg_buf in;                 /* typed bytes not yet written: those past in_off */
    size_t in_off;
    uint64_t written;          /* typed bytes the terminal took, in all */
    char rbuf[TTY_READ_CHUNK]; /* one read of the master */
};

static void tty_update(sg_sup_tty *t);

static void on_closed(uv_handle_t *h)
{
    sg_sup_tty *t = h->data;
    if (--t->pending_closes == 0 && t->freed) {
        sg_buf_free(&t->in);
        free(t);
    }
}

static void close_poll(sg_sup_tty *t, uv_poll_t *p, bool *active, int *fd)
{
    if (*active) {
        *active = false;
        uv_poll_stop(p);
        t->pending_closes++;
        uv_close((uv_handle_t *)p, on_closed);
    }
    sg_close_reset(fd);
}

static void set_winsz(sg_sup_tty *t)
{
    struct winsize w = {.ws_row = t->ws.rows, .ws_col = t->ws.cols};
    if (t->master >= 0)
        ioctl(t->master, TIOCSWINSZ, &w);
}

/* Reads what the terminal has; false once it is done (EIO: no slave is
 * open any more) or broken. */
static bool read_master(sg_sup_tty *t, size_t max)
{
    char *buf = t->rbuf;
    for (size_t got = 0; got < max;) {
        ssize_t n = read(t->master, buf, sizeof t->rbuf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        got += (size_t)n;
        t->ops->output(t->ud, buf, (size_t)n);
        if (t->paused || t->freed)
            return true;
    }
    return true;
}

static void write_input(sg_sup_tty *t)
{
    /* Before the writes: the caller was held back (sv_client's poll) only
     * if the queue was full when it last looked. */
    bool was_full = sg_sup_tty_input_full(t);
    while (t->in.len > t->in_off) {
        ssize_t n = write(t->master, t->in.data + t->in_off, t->in.len - t->in_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) { /* the terminal is gone: what was typed goes nowhere */
            t->in_off = t->in.len;
            break;
        }
        t->in_off += (size_t)n;
        t->written += (uint64_t)n;
    }
    if (t->in_off == t->in.len) {
        sg_buf_reset(&t->in);
        t->in_off = 0;
    }
    if (was_full && !sg_sup_tty_input_full(t) && t->ops->input_room)
        t->ops->input_room(t->ud);
}

static void on_master(uv_poll_t *p, int status, int events)
{
    sg_sup_tty *t = p->data;
    if (status < 0 || ((events & UV_READABLE) && !read_master(t, TTY_READ_CHUNK * 16))) {
        close_poll(t, &t->master_poll, &t->master_active, &t->master);
        return;
    }
    if (events & UV_WRITABLE)
        write_input(t);
    tty_update(t);
}

static void tty_update(sg_sup_tty *t)
{
    if (!t->master_active)
        return;
    int ev = (t->paused ? 0 : UV_READABLE) | (t->in.len > t->in_off ? UV_WRITABLE : 0);
    if (ev)
        uv_poll_start(&t->master_poll, ev, on_master);
    else
        uv_poll_stop(&t->master_poll);
}

/* The child's message on the socket: the master, once. Anything else, or
 * EOF (the child died first), ends the wait. */
static void take_master(sg_sup_tty *t, uv_loop_t *loop)
{
    char b = 0;
    int fd = -1;
    size_t nfds = 1;
    ssize_t n = sg_seqpacket_recv(t->sock, &b, 1, MSG_DONTWAIT, &fd, &nfds);
    if (n == -EAGAIN || n == -EINTR)
        return;
    if (n == 1 && b == SG_PTY_MASTER && nfds == 1 && fd >= 0) {
        t->master = fd;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        set_winsz(t);
        char go = SG_PTY_GO;
        send(t->sock, &go, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (loop && uv_poll_init(loop, &t->master_poll, fd) == 0) {
            t->master_poll.data = t;
            t->master_active = true;
            tty_update(t);
        }
    } else if (nfds == 1 && fd >= 0) {
        close(fd);
    }
    close_poll(t, &t->sock_poll, &t->sock_active, &t->sock);
}

static void on_sock(uv_poll_t *p, int status, int events)
{
    sg_sup_tty *t = p->data;
    take_master(t, p->loop);
}

sg_sup_tty *sg_sup_tty_new(uv_loop_t *loop, int sock, sg_ctl_winsz ws, const sg_sup_tty_ops *ops, void *ud)
{
    sg_sup_tty *t = calloc(1, sizeof *t);
    if (!t || uv_poll_init(loop, &t->sock_poll, sock) < 0) {
        free(t);
        close(sock);
        return NULL;
    }
    t->ops = ops;
    t->ud = ud;
    t->sock = sock;
    t->master = -1;
    t->ws = ws;
    t->sock_poll.data = t;
    t->sock_active = true;
    uv_poll_start(&t->sock_poll, UV_READABLE, on_sock);
    return t;
}

int sg_sup_tty_input(sg_sup_tty *t, const char *buf, size_t len)
{
    size_t queued = t->in.len - t->in_off;
    if (queued + len > SG_SUP_TTY_INPUT_MAX)
        return -1;
    if (t->in_off && t->in.len + len + 1 > t->in.cap) { /* room at the front first */
        sg_buf_consume(&t->in, t->in_off);
        t->in_off = 0;
    }
    if (sg_buf_append(&t->in, buf, len) < 0)
        return -1;
    if (t->master >= 0)
        write_input(t); /* most keystrokes go at once, without a loop trip */
    tty_update(t);
    return 0;
}

uint64_t sg_sup_tty_input_written(const sg_sup_tty *t)
{
    return t->written;
}

bool sg_sup_tty_input_full(const sg_sup_tty *t)
{
    return t->in.len - t->in_off >= SG_SUP_TTY_INPUT_MAX / 2;
}

void sg_sup_tty_resize(sg_sup_tty *t, sg_ctl_winsz ws)
{
    t->ws = ws;
    set_winsz(t);
}

void sg_sup_tty_pause(sg_sup_tty *t, bool paused)
{
    if (t->paused == paused)
        return;
    t->paused = paused;
    tty_update(t);
}

void sg_sup_tty_drain(sg_sup_tty *t)
{
    if (t->sock >= 0)
        take_master(t, NULL);
    t->paused = false;
    if (t->master >= 0 && !read_master(t, TTY_DRAIN_MAX))
        close_poll(t, &t->master_poll, &t->master_active, &t->master);
}

void sg_sup_tty_catch_up(sg_sup_tty *t)
{
    if (t->freed || t->paused || !t->master_active || t->master < 0)
        return;
    if (!read_master(t, TTY_READ_CHUNK * 16))
        close_poll(t, &t->master_poll, &t->master_active, &t->master);
    else
        tty_update(t);
}

void sg_sup_tty_free(sg_sup_tty *t)
{
    if (!t)
        return;
    t->freed = true;
    close_poll(t, &t->sock_poll, &t->sock_active, &t->sock);
    close_poll(t, &t->master_poll, &t->master_active, &t->master);
    if (t->pending_closes == 0) {
        sg_buf_free(&t->in);
        free(t);
    }
}

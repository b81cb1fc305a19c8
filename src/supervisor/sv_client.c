/* sv_client: client I/O: the control socket's connections, their output
 * queues (backpressure on a slow caller), and the read of each request. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/sv_client.h"

static void on_client(uv_poll_t *p, int status, int events);

/* Tests only (test_exec_once.py): when the file $SANDGLASS_TEST_DROP_EXEC
 * names exists, it is removed and the next request is read with MSG_PEEK,
 * left in the socket, and carried out, its caller sent nothing; at its
 * exec's end the connection closes with it unread, so the caller's first
 * receive is ECONNRESET before any answer: what a supervisor closing with
 * anything unread gives after it started a command. Returns whether it
 * took the request. Unset (always, outside tests): nothing. */
static bool test_drop_exec(sv_client *c)
{
    static const char *path;
    static bool read_env;
    if (!read_env) {
        read_env = true;
        path = getenv("SANDGLASS_TEST_DROP_EXEC");
    }
    if (!path || c->requested || unlink(path) != 0)
        return false;
    char *buf = c->s->clients.buf;
    int fds[1];
    size_t nfds = 1;
    ssize_t n = sg_seqpacket_recv(c->fd, buf, SG_CTL_MSG_MAX - 1, MSG_PEEK, fds, &nfds);
    if (n < 1 || (uint8_t)buf[0] != SG_CTL_REQ) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        return false;
    }
    c->test_drop = true;
    sv_client_update_poll(c);
    c->s->hooks.request(c->s, c, buf + 1, (size_t)n - 1, nfds ? fds[0] : -1);
    return true;
}

void sv_client_flush(sv_client *c)
{
    while (c->qhead) {
        sv_outmsg *m = c->qhead;
        int r = sg_seqpacket_send_typed(c->fd, m->type, m->data, m->len, NULL, 0);
        if (r == -EAGAIN)
            break;
        c->qhead = m->next;
        if (!c->qhead)
            c->qtail = NULL;
        c->qbytes -= m->len;
        free(m);
        if (r < 0) {
            sv_client_close(c);
            return;
        }
    }
    if (!c->qhead && c->close_after_flush) {
        sv_client_close(c);
        return;
    }
    sv_client_update_poll(c);
}

void sv_client_send(sv_client *c, uint8_t type, const void *buf, size_t len)
{
    if (!c || c->closing || c->test_drop) /* test_drop: no answer before the reset */
        return;
    if (!c->qhead) {
        int r = sg_seqpacket_send_typed(c->fd, type, buf, len, NULL, 0);
        if (r == 0)
            return;
        if (r != -EAGAIN) {
            sv_client_close(c);
            return;
        }
    }
    sv_outmsg *m = malloc(sizeof *m + len);
    if (!m) {
        sv_client_close(c);
        return;
    }
    m->next = NULL;
    m->type = type;
    m->len = len;
    memcpy(m->data, buf, len);
    if (c->qtail)
        c->qtail->next = m;
    else
        c->qhead = m;
    c->qtail = m;
    c->qbytes += len;
    sv_client_update_poll(c);
}

void sv_client_send_json(sv_client *c, uint8_t type, json_t *j)
{
    sg_autofree char *s = sg_json_dump(j);
    json_decref(j);
    if (!s)
        return;
    /* A large answer (a long checkpoint list, a rollback plan) goes in
     * parts: one seqpacket message is at most SG_CTL_MSG_MAX. */
    size_t len = strlen(s), off = 0;
    for (; len - off > SG_CTL_CHUNK; off += SG_CTL_CHUNK)
        sv_client_send(c, SG_CTL_RESULT_PART, s + off, SG_CTL_CHUNK);
    sv_client_send(c, type, s + off, len - off);
}

/* A request's answer: one RESULT (in parts when large); the connection
 * closes once it is sent. Takes j. */
void sv_client_result(sv_client *c, json_t *j)
{
    sv_client_send_json(c, SG_CTL_RESULT, j);
    c->close_after_flush = true;
    sv_client_flush(c);
}

void sv_client_error(sv_client *c, const char *msg)
{
    sv_client_send_json(c, SG_CTL_ERROR, json_pack("{s:s}", "error", msg));
    if (c)
        c->close_after_flush = true;
    if (c && !c->qhead)
        sv_client_close(c);
}

void sv_client_update_poll(sv_client *c)
{
    if (c->closing)
        return;
    sv_sup *s = c->s;
    /* A terminal that does not take what is typed: stop reading more. */
    bool hold = (c->ex && s->hooks.client_holds(c)) || c->test_drop;
    int ev = (hold ? 0 : UV_READABLE) | (c->qhead ? UV_WRITABLE : 0);
    if (ev)
        uv_poll_start(&c->poll, ev, on_client);
    else
        uv_poll_stop(&c->poll);
    if (c->ex && c->qbytes <= SV_CLIENT_QUEUE_MAX / 2)
        s->hooks.client_drained(c);
}

static void on_client_closed(uv_handle_t *h)
{
    sv_client *c = h->data;
    free(c);
}

void sv_client_close(sv_client *c)
{
    if (c->closing)
        return;
    c->closing = true;
    if (c->weak)
        *c->weak = NULL;
    sv_sup *s = c->s;
    s->clients.n--;
    while (c->qhead) {
        sv_outmsg *m = c->qhead;
        c->qhead = m->next;
        free(m);
    }
    if (c->ex)
        s->hooks.client_gone(c); /* the caller went away mid-exec */
    uv_poll_stop(&c->poll);
    close(c->fd);
    uv_close((uv_handle_t *)&c->poll, on_client_closed);
}

static void on_client(uv_poll_t *p, int status, int events)
{
    sv_client *c = p->data;
    if (status < 0) {
        sv_client_close(c);
        return;
    }
    if (events & UV_WRITABLE) {
        sv_client_flush(c);
        if (c->closing)
            return;
    }
    if (!(events & UV_READABLE) || c->test_drop || test_drop_exec(c))
        return;
    char *buf = c->s->clients.buf;
    uint8_t type;
    int fds[1];
    size_t nfds = 1;
    ssize_t n = sg_seqpacket_recv_typed(c->fd, &type, buf, SG_CTL_MSG_MAX - 1, fds, &nfds);
    if (n == -EAGAIN || n == -EINTR)
        return;
    if (n < 0 || type == 0) {
        if (n == -EMSGSIZE) {
            sv_client_error(c, "request too large");
            return;
        }
        sv_client_close(c);
        return;
    }
    if (type == SG_CTL_REQ)
        c->s->hooks.request(c->s, c, buf, (size_t)n, nfds ? fds[0] : -1);
    else
        c->s->hooks.client_msg(c, type, buf, (size_t)n, fds, nfds);
}

void sv_client_adopt(void *ud, int fd)
{
    sv_sup *s = ud;
    if (s->clients.n >= SV_MAX_CLIENTS) {
        close(fd);
        return;
    }
    sv_client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->s = s;
    c->fd = fd;
    s->clients.n++;
    uv_poll_init(&s->loop, &c->poll, fd);
    c->poll.data = c;
    uv_poll_start(&c->poll, UV_READABLE, on_client);
    /* A client sends its request right after connecting: it is usually
     * here already, and reading it now saves a trip through the loop
     * on the exec path (EAGAIN otherwise: the poll delivers it). */
    on_client(&c->poll, 0, UV_READABLE);
}

void sv_client_on_accept(uv_poll_t *p, int status, int events)
{
    sv_sup *s = p->data;
    for (;;) {
        int fd = accept4(s->ctl_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        sv_client_adopt(s, fd);
    }
}

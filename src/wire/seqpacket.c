/* seqpacket: one SOCK_SEQPACKET message a frame. See seqpacket.h. */
#include "wire/seqpacket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/cleanup.h"

/* One sendmsg of iov with fds as SCM_RIGHTS; retried on EINTR. */
static int send_iov(int fd, struct iovec *iov, size_t niov, const int *fds, size_t nfds)
{
    if (nfds > SG_SEQPACKET_MAX_FDS)
        return -EINVAL;
    union {
        char buf[CMSG_SPACE(sizeof(int) * SG_SEQPACKET_MAX_FDS)];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = niov};
    if (nfds) {
        memset(&cm, 0, sizeof cm);
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n >= 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

int sg_seqpacket_send_typed(int fd, uint8_t type, const void *buf, size_t len,
                            const int *fds, size_t nfds)
{
    struct iovec iov[2] = {
        {.iov_base = &type, .iov_len = 1},
        {.iov_base = (void *)buf, .iov_len = len},
    };
    return send_iov(fd, iov, len ? 2 : 1, fds, nfds);
}

int sg_seqpacket_send(int fd, const void *buf, size_t len, const int *fds, size_t nfds)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return send_iov(fd, &iov, 1, fds, nfds);
}

/* recvmsg with the fds it carries: up to *nfds of them to fds (the rest
 * closed), all closed on a truncated message (-EMSGSIZE). */
static ssize_t recv_iov(int fd, struct iovec *iov, size_t niov, int flags, int *fds, size_t *nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * SG_SEQPACKET_MAX_FDS)];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {
        .msg_iov = iov, .msg_iovlen = niov,
        .msg_control = cm.buf, .msg_controllen = sizeof cm.buf,
    };
    size_t want = nfds ? *nfds : 0;
    if (nfds)
        *nfds = 0;
    ssize_t n;
    do {
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | flags);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int got[SG_SEQPACKET_MAX_FDS];
        if (cnt > SG_ARRAY_LEN(got))
            cnt = SG_ARRAY_LEN(got);
        memcpy(got, CMSG_DATA(c), cnt * sizeof(int));
        for (size_t i = 0; i < cnt; i++) {
            if (nfds && *nfds < want)
                fds[(*nfds)++] = got[i];
            else
                close(got[i]);
        }
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        for (size_t i = 0; nfds && i < *nfds; i++)
            close(fds[i]);
        if (nfds)
            *nfds = 0;
        return -EMSGSIZE;
    }
    return n;
}

ssize_t sg_seqpacket_recv_typed(int fd, uint8_t *type, void *buf, size_t cap,
                                int *fds, size_t *nfds)
{
    struct iovec iov[2] = {
        {.iov_base = type, .iov_len = 1},
        {.iov_base = buf, .iov_len = cap},
    };
    *type = 0;
    ssize_t n = recv_iov(fd, iov, 2, 0, fds, nfds);
    return n <= 0 ? n : n - 1;
}

ssize_t sg_seqpacket_recv(int fd, void *buf, size_t cap, int flags, int *fds, size_t *nfds)
{
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    return recv_iov(fd, &iov, 1, flags, fds, nfds);
}

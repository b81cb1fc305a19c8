/* seqpacket: the transport every local protocol of sandglass rides on —
 * one SOCK_SEQPACKET message a frame, file descriptors as SCM_RIGHTS.
 *
 *   - plain frames (sg_seqpacket_send/recv): the supervisor and init
 *     (spawn.h), the supervisor and the uplink daemon (uplink_client.h);
 *   - typed frames, a type byte before the payload (the _typed calls): the
 *     control protocol (ctl.h) and the exec a ready child takes (spawn.h).
 *
 * Apart from ctl.c's JSON so that sandglass-exec (musl, libc only, no
 * jansson) reads its exec with the same code as everyone else: this module
 * uses nothing but libc. */
#ifndef SG_SEQPACKET_H
#define SG_SEQPACKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* File descriptors one message carries at the most (a spawn message: the
 * three stdio fds and one cgroup fd per hierarchy). */
#define SG_SEQPACKET_MAX_FDS 16

/* Sends one message (blocking, or -EAGAIN on a non-blocking socket),
 * retried on EINTR, never raising SIGPIPE. Returns 0 or -errno. */
int sg_seqpacket_send(int fd, const void *buf, size_t len, const int *fds, size_t nfds);

/* Receives one message into buf (cap bytes), with recvmsg flags
 * (MSG_DONTWAIT). Returns the length, 0 on EOF, or -errno. Received fds
 * (close-on-exec) go to fds, up to *nfds of them (extra ones are closed);
 * *nfds gets the count. A message larger than cap is refused whole, its
 * fds closed (-EMSGSIZE). fds and nfds may be NULL: every fd is closed. */
ssize_t sg_seqpacket_recv(int fd, void *buf, size_t cap, int flags, int *fds, size_t *nfds);

/* The same with a type byte before the payload. recv: *type = 0 on EOF;
 * the returned length is the payload's. */
int sg_seqpacket_send_typed(int fd, uint8_t type, const void *buf, size_t len,
                            const int *fds, size_t nfds);
ssize_t sg_seqpacket_recv_typed(int fd, uint8_t *type, void *buf, size_t cap,
                                int *fds, size_t *nfds);

#endif

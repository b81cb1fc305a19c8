/* ckpt_worker: the checkpoint worker's side of ckpt_proto (the sandglass-ckpt
 * binary). It owns the libgit2 store of one sandbox and answers its
 * supervisor's requests one at a time until the socket closes. */
#ifndef SG_CKPT_WORKER_H
#define SG_CKPT_WORKER_H

#include "base/err.h"

/* Serves requests on fd until EOF. The first request must be "open"
 * ({"repo", "workspace"}, both hex bytes). Returns 0 on a clean EOF, -1
 * with err when the connection fails (a bad request only gets an error
 * answer). */
int sg_ckpt_worker_serve(int fd, sg_err *err);

#endif

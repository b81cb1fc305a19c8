/* sv_tty: a tty exec's terminal, between tty.c and the exec's caller, and
 * its shell session's record (commands, prompts, the recording). */
#ifndef SG_SV_TTY_H
#define SG_SV_TTY_H

#include "supervisor/sv_sup.h"

/* Makes the exec child's stdin the socket its terminal's master comes back
 * on (*stdin_fd is replaced). */
int sv_tty_start(sv_sup *s, sv_exec *ex, const sg_exec_req *req, int *stdin_fd, sg_err *err);
/* The exec ended: the terminal's rest, its last command, its recording. */
void sv_tty_end(sv_exec *ex);
/* Every running terminal's pending output read now (the capture asks
 * before it emits settled workspace changes: sg_capture_set_before_changes). */
void sv_tty_catch_up(void *sup_);
void sv_tty_client_msg(sv_client *c, uint8_t type, const char *buf, size_t n);
/* A detachable tty exec goes on without its caller (c->ex and ex->cl are
 * cut); answered with RESULT {"detached", "exec"} when c is still there. */
void sv_tty_detach(sv_client *c, bool answer);
/* "attach": c becomes the caller of a detached tty exec. */
void sv_tty_attach(sv_sup *s, sv_client *c, const sg_ctl_attach_req *req);

/* What runs now in ex, for ls: a shell's command its marks announced (""
 * at its prompt), else the exec's own command line. */
const char *sv_tty_now(const sv_exec *ex);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_tty_op_attach(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

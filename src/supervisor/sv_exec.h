/* sv_exec: the execs (`sv_exec`): started through init or handed to a ready
 * child (sv_handoff.c), their output, their end; a tty exec's terminal
 * (sv_tty.c); the held execve calls (sv_execnotify.c). */
#ifndef SG_SV_EXEC_H
#define SG_SV_EXEC_H

#include "supervisor/sv_sup.h"

__attribute__((format(printf, 3, 4))) void sv_exec_mark_killed(sv_exec *ex, const char *cause,
                                                              const char *fmt, ...);
void sv_exec_kill(sv_exec *ex);
/* Marks each exec past its time limit as timed out (and kills it), as its
 * timer would: before init's reports are read, since the kill switch may
 * have killed it already (killswitch.h) and the loop's timer not fired. */
void sv_exec_deadlines(sv_sup *s);
void sv_exec_on_close_pending(uv_handle_t *h);
void sv_exec_on_output(uv_poll_t *p, int status, int events);
void sv_exec_output(sv_exec *ex, uint8_t type, const char *buf, size_t n);
/* sv_exec_output without the send: the output limit and the capture's tail;
 * returns the bytes the caller may send. */
size_t sv_exec_output_take(sv_exec *ex, uint8_t type, const char *buf, size_t n);
/* sv_tty.c: a tty exec's terminal, between tty.c and the exec's caller.
 * sv_tty_start makes the exec child's stdin the socket its terminal's
 * master comes back on (*stdin_fd is replaced). */
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
sv_exec *sv_exec_find(sv_sup *s, uint32_t id);
void sv_exec_finish(sv_exec *ex);
void sv_exec_fail(sv_exec *ex, const char *msg);
/* Takes over *in's fields (zeroing it) and stdin_fd, whatever happens. */
void sv_exec_start(sv_sup *s, sv_client *c, sg_exec_req *in, int stdin_fd);

void sv_handoff_release(sv_exec *ex);
void sv_handoff_done(sv_exec *ex);
void sv_handoff_failed(sv_exec *ex);
void sv_handoff_on_timeout(uv_timer_t *t);
void sv_handoff_on_init_msg(uv_poll_t *p, int status, int events);
void sv_handoff_settle_killed(sv_sup *s, int timeout_ms);

/* Whether init should hold every execve for us (not rootless, a kernel that
 * can, SANDGLASS_EXEC_NOTIFY is not 0). */
bool sv_execnotify_wanted(const sv_sup *s);
/* init's SG_SPAWN_NOTIFY: fd (taken) is the listener to serve. */
void sv_execnotify_attach(sv_sup *s, int fd, int page_fd);
/* init's connection is gone: so is ours to the listener. */
void sv_execnotify_stop(sv_sup *s);
/* Unmaps init's in-flight page (sv_execnotify_stop does too). */
void sv_execnotify_unmap(sv_sup *s);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_exec_op(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_tty_op_attach(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

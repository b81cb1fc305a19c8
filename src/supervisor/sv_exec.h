/* sv_exec: the execs (`exec_ctx`): started through init or handed to a ready
 * child (sv_handoff.c), their output, their end; a tty exec's terminal
 * (sv_tty.c); the held execve calls (sv_execnotify.c). */
#ifndef SG_SV_EXEC_H
#define SG_SV_EXEC_H

#include "supervisor/sv_sup.h"

__attribute__((format(printf, 3, 4))) void exec_mark_killed(exec_ctx *ex, const char *cause,
                                                              const char *fmt, ...);
void exec_kill(exec_ctx *ex);
/* Marks each exec past its time limit as timed out (and kills it), as its
 * timer would: before init's reports are read, since the kill switch may
 * have killed it already (killswitch.h) and the loop's timer not fired. */
void execs_deadlines(sup *s);
void on_close_pending(uv_handle_t *h);
void on_exec_output(uv_poll_t *p, int status, int events);
void exec_output(exec_ctx *ex, uint8_t type, const char *buf, size_t n);
/* exec_output without the send: the output limit and the capture's tail;
 * returns the bytes the caller may send. */
size_t exec_output_take(exec_ctx *ex, uint8_t type, const char *buf, size_t n);
/* sv_tty.c: a tty exec's terminal, between tty.c and the exec's caller.
 * sv_tty_start makes the exec child's stdin the socket its terminal's
 * master comes back on (*stdin_fd is replaced). */
int sv_tty_start(sup *s, exec_ctx *ex, const sg_exec_req *req, int *stdin_fd, sg_err *err);
/* The exec ended: the terminal's rest, its last command, its recording. */
void sv_tty_end(exec_ctx *ex);
/* Every running terminal's pending output read now (the capture asks
 * before it emits settled workspace changes: sg_capture_set_before_changes). */
void sv_tty_catch_up(void *sup_);
void client_tty_msg(client *c, uint8_t type, const char *buf, size_t n);
/* A detachable tty exec goes on without its caller (c->ex and ex->cl are
 * cut); answered with RESULT {"detached", "exec"} when c is still there. */
void sv_tty_detach(client *c, bool answer);
/* "attach": c becomes the caller of a detached tty exec. */
void sv_tty_attach(sup *s, client *c, const sg_ctl_attach_req *req);
exec_ctx *exec_find(sup *s, uint32_t id);
void exec_finish(exec_ctx *ex);
void exec_fail(exec_ctx *ex, const char *msg);
/* Takes over *in's fields (zeroing it) and stdin_fd, whatever happens. */
void exec_start(sup *s, client *c, sg_exec_req *in, int stdin_fd);

void handoff_release(exec_ctx *ex);
void exec_handoff_done(exec_ctx *ex);
void exec_handoff_failed(exec_ctx *ex);
void on_handoff_timeout(uv_timer_t *t);
void on_init_msg(uv_poll_t *p, int status, int events);
void execs_settle_killed(sup *s, int timeout_ms);

/* Whether init should hold every execve for us (not rootless, a kernel that
 * can, SANDGLASS_EXEC_NOTIFY is not 0). */
bool execnotify_wanted(const sup *s);
/* init's SG_SPAWN_NOTIFY: fd (taken) is the listener to serve. */
void execnotify_attach(sup *s, int fd, int page_fd);
/* init's connection is gone: so is ours to the listener. */
void execnotify_stop(sup *s);
/* Unmaps init's in-flight page (execnotify_stop does too). */
void execnotify_unmap(sup *s);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void op_exec(sup *s, client *c, sg_ctl_req *req, int fd_in);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void op_attach(sup *s, client *c, sg_ctl_req *req, int fd_in);

#endif

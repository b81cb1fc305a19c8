/* sv_exec: the execs (`sv_exec`, sv_sup.h): one running, its output, its
 * time limit, its kill, its end and result (sv_exec.c); one started, and
 * the exec's side of its caller's connection (sv_exec_start.c). Below
 * them: the hand-off to the ready child and init's replies (sv_handoff.h),
 * a tty exec's terminal (sv_tty.h). */
#ifndef SG_SV_EXEC_H
#define SG_SV_EXEC_H

#include "supervisor/sv_sup.h"

/* ---- sv_exec.c: a running exec ---------------------------------------- */

__attribute__((format(printf, 3, 4))) void sv_exec_mark_killed(sv_exec *ex, const char *cause,
                                                              const char *fmt, ...);
void sv_exec_kill(sv_exec *ex);
/* Marks each exec past its time limit as timed out (and kills it), as its
 * timer would: before init's reports are read, since the kill switch may
 * have killed it already (killswitch.h) and the loop's timer not fired. */
void sv_exec_deadlines(sv_sup *s);
void sv_exec_on_timeout(uv_timer_t *t);
void sv_exec_on_close_pending(uv_handle_t *h);
void sv_exec_on_output(uv_poll_t *p, int status, int events);
void sv_exec_output(sv_exec *ex, uint8_t type, const char *buf, size_t n);
/* sv_exec_output without the send: the output limit and the capture's tail;
 * returns the bytes the caller may send. */
size_t sv_exec_output_take(sv_exec *ex, uint8_t type, const char *buf, size_t n);
sv_exec *sv_exec_find(sv_sup *s, uint32_t id);
void sv_exec_handoff_release(sv_exec *ex);
/* The end: its result, its tty's end (s->hooks.tty_end), its leaf. */
void sv_exec_finish(sv_exec *ex);
void sv_exec_fail(sv_exec *ex, const char *msg);

/* ---- sv_exec_start.c: an exec started ---------------------------------- */

/* Takes over *in's fields (zeroing it) and stdin_fd, whatever happens. */
void sv_exec_start(sv_sup *s, sv_client *c, sg_exec_req *in, int stdin_fd);
/* The exec's side of its caller's connection (sv_sup_hooks' client_*:
 * sv_client.c tells, without calling up). */
void sv_exec_client_msg(sv_client *c, uint8_t type, const char *buf, size_t n, int *fds, size_t nfds);
void sv_exec_client_gone(sv_client *c);
bool sv_exec_client_holds(sv_client *c);
void sv_exec_client_drained(sv_client *c);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_exec_op(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

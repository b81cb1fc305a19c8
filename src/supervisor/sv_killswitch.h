/* sv_killswitch: the abort, the caps, the kill of every user process and
 * its proof; the thread that kills beside the loop is killswitch.h. */
#ifndef SG_SV_KILLSWITCH_H
#define SG_SV_KILLSWITCH_H

#include "supervisor/sv_sup.h"

size_t pidns_kill(sup *s, bool with_init, int timeout_ms);
json_t *caps_now(sup *s);
json_t *kill_all_user_processes(sup *s, const char *cause, const char *detail);
json_t *sup_abort(sup *s, const char *by, const char *reason);
void on_expire(uv_timer_t *t);
void on_cap_timer(uv_timer_t *t);
/* The --max-wall cap: when reached, the abort (true). Also checked before
 * init's reports are read: the kill switch kills at the wall itself. */
bool caps_check_wall(sup *s);
/* The caps' timer and the kill switch's --max-wall deadline, from s->start_ns. */
void caps_arm(sup *s);
/* The kill switch on the control socket (else the loop accepts, as a fallback). */
void killswitch_start(sup *s);
/* Tells the kill switch's thread the record it answers an abort from
 * (caps, counts, abort state): after each change of them. */
void killswitch_publish(sup *s);
/* An exec started in leaf (and the counts changed). */
void killswitch_exec(sup *s, const char *leaf, unsigned num);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void op_abort(sup *s, client *c, sg_ctl_req *req, int fd_in);
void op_resume(sup *s, client *c, sg_ctl_req *req, int fd_in);

#endif

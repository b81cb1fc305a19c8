/* sv_killswitch: the abort, the caps, the kill of every user process and
 * its proof; the thread that kills beside the loop is killswitch.h. */
#ifndef SG_SV_KILLSWITCH_H
#define SG_SV_KILLSWITCH_H

#include "supervisor/sv_sup.h"

size_t sv_killswitch_pidns_kill(sv_sup *s, bool with_init, int timeout_ms);
json_t *sv_killswitch_caps_now(sv_sup *s);
void sv_killswitch_kill_all(sv_sup *s, const char *cause, const char *detail, sg_ctl_kill_report *out);
json_t *sv_killswitch_abort(sv_sup *s, const char *by, const char *reason);
void sv_killswitch_on_expire(uv_timer_t *t);
void sv_killswitch_on_cap_timer(uv_timer_t *t);
/* The --max-wall cap: when reached, the abort (true). Also checked before
 * init's reports are read: the kill switch kills at the wall itself. */
bool sv_killswitch_check_wall(sv_sup *s);
/* The caps' timer and the kill switch's --max-wall deadline, from s->ks.start_ns. */
void sv_killswitch_caps_arm(sv_sup *s);
/* The caps' clock and timer (sv_killswitch_init), at the loop's start;
 * the clock again when a pooled sandbox is claimed (caps_restart). */
void sv_killswitch_init(sv_sup *s);
void sv_killswitch_caps_restart(sv_sup *s);
void sv_killswitch_caps_stop(sv_sup *s);
void sv_killswitch_abort_load(sv_sup *s);
void sv_killswitch_stop(sv_sup *s);
void sv_killswitch_free(sv_sup *s);
/* The kill switch on the control socket (else the loop accepts, as a fallback). */
void sv_killswitch_start(sv_sup *s);
/* Tells the kill switch's thread the record it answers an abort from
 * (caps, counts, abort state): after each change of them. */
void sv_killswitch_publish(sv_sup *s);
/* An exec started in leaf (and the counts changed). */
void sv_killswitch_exec(sv_sup *s, const char *leaf, unsigned num);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_killswitch_op_abort(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);
void sv_killswitch_op_resume(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

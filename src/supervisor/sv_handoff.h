/* sv_handoff: the init connection (wire/spawn.h): its replies (an exec's
 * start, its end), and the direct hand-off of an exec to the ready child. */
#ifndef SG_SV_HANDOFF_H
#define SG_SV_HANDOFF_H

#include "supervisor/sv_sup.h"

void sv_handoff_done(sv_exec *ex);
void sv_handoff_failed(sv_exec *ex);
void sv_handoff_on_timeout(uv_timer_t *t);
void sv_handoff_on_init_msg(uv_poll_t *p, int status, int events);
void sv_handoff_settle_killed(sv_sup *s, int timeout_ms);

#endif

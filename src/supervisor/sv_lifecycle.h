/* sv_lifecycle: the session's lifecycle (issue 26): --idle-timeout (no
 * typed input, no exec starting or ending, no attach, no file change, no
 * batch exec running, for that long) and --ttl (that long after the
 * session was created) end the session: a warning line on every attached
 * terminal --expiry-warning before, then a `sandbox` "expired" event, an
 * abort by: cap (the kill switch's), and the destroy (or the sandbox's
 * --keep later, on s->expire_timer). The limits are the sandbox record's
 * (state.h: idle_timeout_s, ttl_s, warning_s, keep_s; 0 = none).
 *
 * One timer, re-armed lazily: activity only notes the time (and rewrites
 * expiry.json at most once a second, for `ls`), the timer fires at the
 * warning or the deadline as last computed and, when activity moved the
 * deadline, arms itself again for the new one. */
#ifndef SG_SV_LIFECYCLE_H
#define SG_SV_LIFECYCLE_H

#include "supervisor/sv_sup.h"

/* The lifecycle from the sandbox record: at its start, after a takeover
 * (the idle clock resumes from expiry.json, the ttl counts from the
 * record's created time) and after a pool claim. Beside
 * sv_killswitch_caps_arm. */
void sv_life_arm(sv_sup *s);
/* Activity: the idle deadline moves to now + the idle timeout. */
void sv_life_activity(sv_sup *s);
/* The capture's hook for workspace changes (sg_capture_set_on_changes): a
 * file change is activity. (Not the programs started: the proc connector
 * wakes the capture for every fork on the host.) */
void sv_life_workspace_changed(void *sup_);

#endif

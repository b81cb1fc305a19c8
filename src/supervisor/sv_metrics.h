/* sv_metrics: the supervisor's counters for the host's metrics (the
 * daemon of `sandglass host`, docs/METRICS.md), kept in <state>/sb/<id>/
 * counters (state/counters.h).
 *
 * A change (an exec's end, a kill, an OOM, an abort, an expiry, a
 * checkpoint) is counted in memory and the file rewritten 100 ms later
 * (a timer), once for all the changes meanwhile: never on an exec's path
 * (its reply has long gone), and execs back to back cost one write per
 * 100 ms. The last write is made at the sandbox's end, before a destroy
 * folds the file into the host's (sv_metrics_stop). The spool's backlog (events not yet
 * acknowledged) is looked at 1 s after an event is spooled, and every
 * second while some are pending: an idle supervisor with a delivered spool
 * never wakes for it. */
#ifndef SG_SV_METRICS_H
#define SG_SV_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "state/counters.h"
#include "supervisor/sv_sup.h"

/* Loads what a predecessor counted (a takeover), sets the state from the
 * record, and writes the file. */
void sv_metrics_start(sv_sup *s);
/* An exec's end: outcome (exit status, or could not start), its time, its
 * kill (cause and time since the kill was decided), the limits it hit. */
void sv_metrics_exec_end(sv_sup *s, sg_ctr_exec outcome, uint64_t wall_ns, const char *kill_cause,
                         uint64_t kill_ns, const bool limits[SG_CTR_LIMIT_N]);
/* The sandbox's OOM kill counter, as just read (counts what it moved by). */
void sv_metrics_oom_seen(sv_sup *s, uint64_t oom_kills);
void sv_metrics_set_state(sv_sup *s, sg_ctr_state st);
void sv_metrics_limit(sv_sup *s, sg_ctr_limit l);
void sv_metrics_expiry(sv_sup *s, sg_ctr_expiry e);
void sv_metrics_checkpoint(sv_sup *s, double ms);
/* An event was spooled: the backlog is looked at within a second. */
void sv_metrics_spooled(sv_sup *s);
/* The last write, now (the loop is over): before the state goes. */
void sv_metrics_stop(sv_sup *s);

#endif

/* sv_metrics_state: the state of the supervisor's counters (sv_metrics.h's
 * object), `sv_sup.metrics`. Apart from sv_metrics.h so that sv_sup.h,
 * which holds it, includes no object's interface. */
#ifndef SG_SV_METRICS_STATE_H
#define SG_SV_METRICS_STATE_H

#include <stdbool.h>
#include <uv.h>

#include "state/counters.h"

typedef struct sv_metrics_state {
    sg_counters c;       /* as last changed */
    sg_counters written; /* as last written: an unchanged file is not rewritten */
    uv_timer_t timer;    /* the next write: 100 ms after a change, or the backlog's next look */
    bool timer_init;
    bool on;             /* sv_metrics_start ran: the file is ours to write */
    int fd;              /* sb/<id>/counters, written in place; -1: none */
} sv_metrics_state;

#endif

/* sv_life_state: the session lifecycle's state (sv_lifecycle.h), a member
 * of sv_sup (sv_sup.h). In a header of its own so that sv_sup.h, which
 * every object includes, does not tie them to sv_lifecycle's functions. */
#ifndef SG_SV_LIFECYCLE_STATE_H
#define SG_SV_LIFECYCLE_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* sv_lifecycle.c's state: sv_sup.life. */
typedef struct sv_life_state {
    uv_timer_t timer;
    bool timer_init;    /* the timer's handle is initialised */
    bool on;            /* a limit is set and the session has not expired */
    bool expired;
    bool due;           /* the deadline passed at the last fire: expires at the next unless moved */
    uint64_t last_ns;   /* the last activity (monotonic) */
    uint64_t ttl_ns;    /* the --ttl deadline (monotonic); 0: none */
    uint64_t warned_ns; /* the deadline the warning was given for; 0: none yet */
    double saved_at;    /* expiry.json's `at` as last written (unix seconds); 0: none */
} sv_life_state;

#endif

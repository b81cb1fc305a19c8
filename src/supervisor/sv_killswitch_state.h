/* sv_killswitch_state: the state of the kill switch (sv_killswitch.h's
 * object), `sv_sup.ks`: the abort (the first reason wins and is kept),
 * the caps' clock and timer, and the thread that kills beside the loop.
 * Apart from sv_killswitch.h so that sv_sup.h, which holds it, includes no
 * object's interface; the other objects read aborted and reason. */
#ifndef SG_SV_KILLSWITCH_STATE_H
#define SG_SV_KILLSWITCH_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "supervisor/killswitch.h"

#define SV_PIDNS_MAX 65536 /* processes of the pid namespace listed at once (its pid_max) */

typedef struct sv_killswitch_state {
    killswitch *thread;    /* kills beside the loop, takes what it leaves on ctl_fd; NULL: none */
    bool aborted;
    char by[16];           /* operator | signal | cap */
    char reason[256];
    uint64_t start_ns;     /* the sandbox's start: the wall cap counts from it */
    uv_timer_t cap_timer;  /* wall and cpu caps */
    pid_t *pidns_pids;     /* SV_PIDNS_MAX entries, once sv_killswitch_pidns_kill ran */
    /* 1 (atomic) from the moment an abort or a destroy comes, by the
     * loop or the thread, until a resume: host-side work that runs off
     * the loop (a cp, sv_cp.c) polls it and stops, so the kill switch
     * never waits for it */
    int stopping;
} sv_killswitch_state;

#endif

/* sv_cp_state: the state of `sandglass cp` on the supervisor's side
 * (sv_cp.h's object), `sv_sup.cp`: the copy running off the loop, on
 * libuv's thread pool. Apart from sv_cp.h so that sv_sup.h, which holds
 * it, includes no object's interface. */
#ifndef SG_SV_CP_STATE_H
#define SG_SV_CP_STATE_H

struct sv_cp_job;

typedef struct sv_cp_state {
    struct sv_cp_job *job; /* the copy running (one at a time); NULL: none */
} sv_cp_state;

#endif

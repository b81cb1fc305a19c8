/* sv_execnotify_state: the state of the held execve calls (sv_execnotify.h's
 * object), `sv_sup.notify`: init's execve listener (sandbox/execnotify.h).
 * Apart from sv_execnotify.h so that sv_sup.h, which holds it, includes no
 * object's interface. */
#ifndef SG_SV_EXECNOTIFY_STATE_H
#define SG_SV_EXECNOTIFY_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "sandbox/execnotify.h"

typedef struct sv_execnotify_state {
    int fd;                       /* the listener; -1: none */
    uv_poll_t poll;
    bool seen;                    /* a held execve came since we got it */
    sg_execnotify_inflight *page; /* init's in-flight page, mapped; NULL: none */
    uint64_t held;                /* held execve calls seen: a program ran (sv_tty's prompt checkpoints) */
} sv_execnotify_state;

#endif

/* sv_checkpoint_state: the state of the checkpoints (sv_checkpoint.h's
 * object), `sv_sup.ckpt`: the worker that takes them outside the sandbox,
 * the newest one, the workspace's fingerprint then, and the labels not yet
 * in the store. Apart from sv_checkpoint.h so that sv_sup.h, which holds
 * it, includes no object's interface. */
#ifndef SG_SV_CHECKPOINT_STATE_H
#define SG_SV_CHECKPOINT_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "checkpoint/ckpt_client.h"
#include "checkpoint/fingerprint.h"
#include "supervisor/labels.h"
#include "wire/ckpt_proto.h"

typedef struct sv_checkpoint_state {
    sg_ckpt_client *client;  /* workspace checkpoints, by a worker outside the sandbox */
    uv_timer_t idle;         /* stops that worker when idle */
    uint64_t idle_ms;        /* the worker's idle stop; 0 until read from the environment */
    char last[SG_CHECKPOINT_ID_LEN + 1]; /* the newest checkpoint taken */
    sg_checkpoint_stats last_stats;
    sg_fingerprint last_print; /* the workspace when the last exec's checkpoint was taken */
    bool print_valid;
    sg_labels labels;        /* labels of execs found unchanged, not yet in the store */
} sv_checkpoint_state;

#endif

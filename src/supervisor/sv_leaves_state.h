/* sv_leaves_state: the state of the exec leaves (sv_leaves.h's object),
 * `sv_sup.leaves`: the leaves that may still hold processes, init's ready
 * child and its leaf, and the spare leaves. Apart from sv_leaves.h so that
 * sv_sup.h, which holds it, includes no object's interface. */
#ifndef SG_SV_LEAVES_STATE_H
#define SG_SV_LEAVES_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/leafset.h"

/* Emptied exec leaves kept for later execs. Two alternate in a steady
 * stream of execs: the running exec's and the ready child's. */
#define SV_SPARE_LEAVES 2

/* A fast exec leaf with the files the exec path reads kept open: the ready
 * child's, or a spare one (emptied, kept for a later exec). */
typedef struct sv_open_leaf {
    char name[24];
    int dirfd, cpufd, evfd; /* the directory, its cpu.stat, its cgroup.events */
    uint64_t cpu_base;      /* cpu.stat's usage when handed out: leaves are reused */
} sv_open_leaf;

typedef struct sv_leaves_state {
    sg_leafset set;         /* exec leaves that may still hold processes */
    bool fast;              /* fast leaves (set at the start): made ahead, kept open, reused */
    uint32_t next_leaf;     /* leaves are x1, x2, ...; exec ids count apart */
    sv_open_leaf rl;        /* the leaf of init's ready child (init.h), if ready */
    uint32_t ready_exec_id; /* the exec id reserved for it */
    int ready_sock;         /* its socket (SG_SPAWN_READY); -1 until init sent it */
    pid_t ready_pid;
    int ready_pidfd;        /* a pidfd of it (host side), to SIGCONT it at the hand-off */
    bool ready;
    bool ready_taken;       /* the last one was handed an exec: the next PREPARE says so */
    /* Emptied fast leaves, open, for the next ready children: an exec then
     * makes and removes no cgroup (mkdir and rmdir in cgroupfs cost ~80 us
     * of CPU per exec, plus the kernel's deferred freeing). */
    sv_open_leaf spare[SV_SPARE_LEAVES];
    size_t nspare;
} sv_leaves_state;

#endif

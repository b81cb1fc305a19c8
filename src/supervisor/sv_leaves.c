/* sv_leaves: the exec leaves (cgroups) and the ready child waiting in one. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "supervisor/sv_leaves.h"

/* The state before the sandbox is started or adopted: no fd open. */
void sv_leaves_init(sv_sup *s)
{
    s->leaves.ready_sock = s->leaves.ready_pidfd = -1;
    s->leaves.rl.dirfd = s->leaves.rl.cpufd = s->leaves.rl.evfd = -1;
}

/* Fast leaves where the sandbox has a cgroup and they are not turned off
 * (SANDGLASS_NO_FAST_LEAVES): made ahead, kept open, reused. */
void sv_leaves_fast_set(sv_sup *s)
{
    s->leaves.fast = s->cg && getenv("SANDGLASS_NO_FAST_LEAVES") == NULL &&
                     sg_cgroup_set_fast_leaves(s->cg, true) == 0;
}

/* At the supervisor's end: the fds kept open, the names. */
void sv_leaves_free(sv_sup *s)
{
    for (size_t i = 0; i < s->leaves.nspare; i++)
        sv_open_leaf_close(&s->leaves.spare[i]);
    sv_leaves_ready_close_fds(s);
    sg_leafset_free(&s->leaves.set);
}

/* Kills what a leaf holds, and marks the execs in it: a leaf cgroup.kill
 * was written to is never reused (sv_leaves_recycle). */
int sv_leaves_kill(sv_sup *s, const char *leaf, int timeout_ms, sg_err *err)
{
    for (size_t k = 0; k < s->exec.n; k++)
        if (strcmp(s->exec.list[k]->leaf, leaf) == 0)
            s->exec.list[k]->leaf_killed = true;
    return sg_cgroup_kill(s->cg, leaf, timeout_ms, err);
}

void sv_leaves_track(sv_sup *s, const char *leaf)
{
    sg_leafset_add(&s->leaves.set, leaf);
}

void sv_leaves_untrack(sv_sup *s, const char *leaf)
{
    sg_leafset_remove(&s->leaves.set, leaf);
}

/* Removes the leaves that have emptied (background processes ended). */
void sv_leaves_sweep(sv_sup *s)
{
    sg_err err = {0};
    if (!s->cg)
        return;
    for (size_t i = s->leaves.set.n; i-- > 0;) {
        const char *leaf = s->leaves.set.names[i];
        bool running = false;
        for (size_t k = 0; k < s->exec.n; k++)
            if (strcmp(s->exec.list[k]->leaf, leaf) == 0)
                running = true;
        if (!running && sg_cgroup_populated(s->cg, leaf, &err) == 0 &&
            sg_cgroup_leaf_remove(s->cg, leaf, &err) == 0)
            sv_leaves_untrack(s, leaf);
    }
}

void sv_open_leaf_close(sv_open_leaf *l)
{
    sg_close_reset(&l->dirfd);
    sg_close_reset(&l->cpufd);
    sg_close_reset(&l->evfd);
}

/* Asks init for a ready child in a new leaf, so that the next exec only
 * has to hand it the command (init.h). Off the exec path: called once the
 * sandbox is up, once an exec has started, and after each result. */
void sv_leaves_ready_next(sv_sup *s)
{
    sg_err err = {0};
    if (s->leaves.ready || !s->leaves.fast || s->destroying || s->ks.aborted || s->init_dead ||
        s->init_fd < 0)
        return;
    sv_open_leaf l;
    if (s->leaves.nspare > 0) {
        l = s->leaves.spare[--s->leaves.nspare];
    } else {
        snprintf(l.name, sizeof l.name, "x%u", ++s->leaves.next_leaf);
        if (sg_cgroup_leaf_create(s->cg, l.name, &err) < 0)
            return;
        l.dirfd = sg_cgroup_leaf_dirfd(s->cg, l.name, &err);
        /* Kept open: the exec then opens nothing in cgroupfs on its way. */
        l.cpufd = l.dirfd < 0 ? -1 : sg_cgroup_cpu_stat_open(l.dirfd);
        l.evfd = l.dirfd < 0 ? -1 : sg_cgroup_events_open(l.dirfd);
    }
    /* A reused leaf's cpu.stat counts its earlier execs too. */
    l.cpu_base = 0;
    if (l.cpufd >= 0 && sg_cgroup_cpu_stat_read(l.cpufd, &l.cpu_base, &err) < 0)
        sg_close_reset(&l.cpufd);
    sg_spawn_hdr sp = {.type = SG_SPAWN_PREPARE, .exec_id = sv_sup_exec_id_new(s),
                        .uid = s->meta.uid, .gid = s->meta.gid, .nfds_cg = 1, .cg_into = 1,
                        .flags = s->leaves.ready_taken ? SG_SPAWN_F_TAKEN : 0};
    if (l.dirfd < 0 || sg_seqpacket_send(s->init_fd, &sp, sizeof sp, &l.dirfd, 1) < 0) {
        sv_open_leaf_close(&l);
        sg_cgroup_leaf_remove(s->cg, l.name, &err);
        return;
    }
    s->leaves.ready_taken = false;
    s->leaves.ready_exec_id = sp.exec_id;
    s->leaves.rl = l;
    s->leaves.ready = true;
}

/* An exec's fast leaf once the exec is over: kept for a later exec if it
 * is empty (no background process) and there is room, else removed.
 * Never one that was killed through cgroup.kill: the kernel (6.18 here)
 * then SIGKILLs at birth every child cloned into it with CLONE_INTO_CGROUP
 * from another cgroup (fork compares the leaf's kill count with the
 * parent cgroup's). Returns whether it is taken care of (kept or removed). */
bool sv_leaves_recycle(sv_sup *s, sv_exec *ex)
{
    sg_err err = {0};
    bool empty = ex->events_fd >= 0 && sg_cgroup_events_populated(ex->events_fd, &err) == 0;
    if (empty && !ex->leaf_killed && ex->leaf_fd >= 0 && ex->cpu_fd >= 0 && s->leaves.nspare < SV_SPARE_LEAVES &&
        !s->destroying && !s->ks.aborted) {
        sv_open_leaf *l = &s->leaves.spare[s->leaves.nspare++];
        snprintf(l->name, sizeof l->name, "%s", ex->leaf);
        l->dirfd = sg_steal_fd(&ex->leaf_fd);
        l->cpufd = sg_steal_fd(&ex->cpu_fd);
        l->evfd = sg_steal_fd(&ex->events_fd);
        return true;
    }
    return sg_cgroup_leaf_remove(s->cg, ex->leaf, &err) == 0;
}

void sv_leaves_ready_close_fds(sv_sup *s)
{
    sv_open_leaf_close(&s->leaves.rl);
    sg_close_reset(&s->leaves.ready_sock);
    sg_close_reset(&s->leaves.ready_pidfd);
}

/* The ready child's socket, sent by init (SG_SPAWN_READY) for exec_id:
 * taken (true) when it is the ready child we wait for and have no socket
 * of yet. */
bool sv_leaves_ready_socket(sv_sup *s, uint32_t exec_id, int fd, pid_t pid)
{
    if (!s->leaves.ready || exec_id != s->leaves.ready_exec_id || s->leaves.ready_sock >= 0)
        return false;
    s->leaves.ready_sock = fd;
    s->leaves.ready_pid = pid;
    sg_close_reset(&s->leaves.ready_pidfd);
    s->leaves.ready_pidfd = sv_leaves_ready_pidfd_open(s->leaves.rl.dirfd);
    return true;
}

/* The ready child and its leaf handed to ex (the exec it takes): the
 * leaf's fds, its socket; the next PREPARE says it was taken. */
void sv_leaves_ready_take(sv_sup *s, sv_exec *ex)
{
    memcpy(ex->leaf, s->leaves.rl.name, sizeof ex->leaf);
    ex->leaf_fd = sg_steal_fd(&s->leaves.rl.dirfd);
    ex->cpu_fd = sg_steal_fd(&s->leaves.rl.cpufd);
    ex->events_fd = sg_steal_fd(&s->leaves.rl.evfd);
    ex->cpu_base_ns = s->leaves.rl.cpu_base;
    ex->ready_sock = sg_steal_fd(&s->leaves.ready_sock);
    ex->ready_pid = s->leaves.ready_pid;
    s->leaves.ready = false;
    s->leaves.ready_taken = true;
}

/* SIGCONT to the ready child at its hand-off (the user's processes may have
 * stopped it), once. */
void sv_leaves_ready_wake(sv_sup *s)
{
    if (s->leaves.ready_pidfd >= 0) {
        syscall(SYS_pidfd_send_signal, s->leaves.ready_pidfd, SIGCONT, NULL, 0);
        sg_close_reset(&s->leaves.ready_pidfd);
    }
}

/* A pidfd of the ready child, found as the one process of its fresh leaf.
 * The user's processes may SIGSTOP it (same uid): the hand-off sends it a
 * SIGCONT first, so a stopped ready child costs nothing instead of the
 * hand-off's whole timeout on every later exec. -1 when not found. */
int sv_leaves_ready_pidfd_open(int leaf_dirfd)
{
    char buf[64];
    sg_autoclose int fd = openat(leaf_dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    if (pid <= 0 || *end != '\n' || end[1] != '\0') /* exactly one process */
        return -1;
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
}

/* The ready child died before an exec came (the OOM killer, a failed
 * set-up): its leaf is swept once empty; the next exec makes another. */
void sv_leaves_ready_lost(sv_sup *s)
{
    s->leaves.ready = false;
    sv_leaves_ready_close_fds(s);
    sv_leaves_track(s, s->leaves.rl.name);
}

/* Kills and removes the ready child's leaf (abort, kill-all). */
void sv_leaves_ready_retire(sv_sup *s)
{
    sg_err err = {0};
    if (!s->leaves.ready)
        return;
    s->leaves.ready = false;
    sv_leaves_ready_close_fds(s);
    if (sg_cgroup_kill(s->cg, s->leaves.rl.name, 2000, &err) < 0 ||
        sg_cgroup_leaf_remove(s->cg, s->leaves.rl.name, &err) < 0)
        sv_leaves_track(s, s->leaves.rl.name); /* swept later, or removed by destroy */
}

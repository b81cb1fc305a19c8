#include "supervisor/supervisor.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "capture/capture.h"
#include "checkpoint/ckpt_client.h"
#include "checkpoint/fingerprint.h"
#include "sandbox/cgroup.h"
#include "sandbox/init.h"
#include "wire/spawn.h"
#include "sandbox/seccomp.h"
#include "state/state.h"
#include "wire/ctl.h"

#define SUP_CLIENT_QUEUE_MAX (4u * 1024 * 1024) /* output queued for a slow CLI before we stop reading the exec */
#define SUP_MAX_CLIENTS 256
#define SUP_READ_CHUNK (60 * 1024)

#define SG_SUP_LABELS_MAX 256 /* labels queued before they go to the store */
/* Emptied exec leaves kept for later execs. Two alternate in a steady
 * stream of execs: the running exec's and the ready child's. */
#define SUP_SPARE_LEAVES 2

typedef struct sup sup;
typedef struct client client;

/* A fast exec leaf with the files the exec path reads kept open: the ready
 * child's, or a spare one (emptied, kept for a later exec). */
typedef struct open_leaf {
    char name[24];
    int dirfd, cpufd, evfd; /* the directory, its cpu.stat, its cgroup.events */
    uint64_t cpu_base;      /* cpu.stat's usage when handed out: leaves are reused */
} open_leaf;

typedef struct outmsg {
    struct outmsg *next;
    uint8_t type;
    size_t len;
    char data[];
} outmsg;

typedef struct exec_ctx {
    sup *s;
    client *cl;          /* NULL once the caller went away */
    uint32_t id;         /* init's id for it (init.h); ready children's are reserved ahead */
    uint32_t num;        /* its number in the order execs came: labels, events, logs */
    char leaf[24];
    int out_fd, err_fd;
    uv_poll_t out_poll, err_poll;
    bool out_active, err_active;
    uv_timer_t timer;
    double timeout_s;
    uint64_t start_ns;
    pid_t pid;
    bool spawned, exited, timed_out, output_limit_hit, finished;
    bool code_only;      /* the caller wants the exit code alone (SG_CTL_EXIT) */
    int status;
    sg_spawn_reply exit_rep;
    uint64_t out_bytes;
    sg_cg_stats before;
    int cpu_fd;           /* the leaf's cpu.stat, opened ahead; -1: read by path */
    int events_fd;        /* the leaf's cgroup.events (fast leaves): is it empty at the end? */
    bool leaf_killed;     /* cgroup.kill was written to its leaf: never reuse it (leaf_recycle) */
    /* Why we killed it, the first reason only (exec_mark_killed): a short
     * cause ("timeout", "output_limit", "memory", "abort", "rollback") and a
     * sentence for the caller's stderr, --json and the run_result. */
    char kill_cause[16];
    char kill_detail[240];
    uint64_t cpu_base_ns; /* the leaf's usage before this exec: leaves are reused */
    /* Handed to a ready child directly (init.h) and not yet taken: its
     * socket, the exec's stdio fds, its leaf and message, kept until the
     * child answers "k", for a clone through init if it never does. */
    bool awaiting_ack;
    int ready_sock;
    pid_t ready_pid;
    int hold_fds[3];
    int leaf_fd;          /* the leaf's directory; kept to the end, for reuse */
    char *held_msg;
    size_t held_len;
    uv_timer_t ack_timer;
    int pending_closes;
    sg_capture_exec *cx;  /* NULL when the sandbox is not captured */
} exec_ctx;

struct client {
    sup *s;
    int fd;
    uv_poll_t poll;
    outmsg *qhead, *qtail;
    size_t qbytes;
    exec_ctx *ex;
    bool requested; /* one request per connection: an exec's takes signals only */
    bool close_after_flush;
    bool closing;
};

struct sup {
    uint64_t oom_seen;      /* the sandbox's OOM kill counter when last read (exec_find_kill_reason) */
    uv_loop_t loop;
    sg_sandbox_meta meta;
    sg_cgroup *cg;
    sg_seccomp_prog prog;
    pid_t init_pid;
    int init_fd;
    uv_poll_t init_poll;
    int ctl_fd;
    uv_poll_t ctl_poll;
    uv_signal_t sigchld, sigterm, sigint;
    uint32_t next_exec;     /* init's exec ids */
    uint32_t exec_num;      /* execs numbered as they come (exec_ctx.num) */
    exec_ctx **execs;     /* running execs, by slot */
    size_t nexecs, capexecs;
    size_t nclients;
    bool destroying;
    bool init_dead;
    bool fast_leaves;
    bool rootless;          /* in a user namespace; cg may then be NULL */
    sg_capture *cap;        /* NULL: not captured (no task) */
    const sg_capture_api *capi; /* the capture's entry points, when cap */
    sg_ckpt_client *ckpt;         /* workspace checkpoints, by a worker outside the sandbox */
    uv_timer_t ckpt_idle;   /* stops that worker when idle */
    char last_ckpt[SG_CHECKPOINT_ID_LEN + 1]; /* the newest checkpoint taken */
    sg_checkpoint_stats last_stats;
    sg_fingerprint last_print;  /* the workspace when the last exec's checkpoint was taken */
    bool print_valid;
    char **labels;          /* labels of execs found unchanged, not yet in the store */
    int64_t *label_times;
    size_t nlabels;
    int destroy_fd;         /* the destroy request's caller, answered last */
    uint8_t destroy_type;
    json_t *destroy_res;
    int exit_code;
    /* kill switch: the first reason wins and is kept */
    bool aborted;
    char abort_by[16];      /* operator | signal | cap */
    char abort_reason[256];
    uint64_t start_ns;
    uint64_t execs_total, calls_total;
    uv_timer_t cap_timer;   /* wall and cpu caps */
    uv_timer_t expire_timer; /* "expire": destroy when it fires (an ended MCP session's --keep) */
    bool expire_init;
    char **leaves;          /* exec leaves that may still hold processes */
    size_t nleaves, capleaves;
    uint32_t next_leaf;     /* leaves are x1, x2, ...; exec ids count apart */
    open_leaf rl;           /* the leaf of init's ready child (init.h), if ready */
    uint32_t ready_exec_id; /* the exec id reserved for it */
    int ready_sock;         /* its socket (SG_SPAWN_READY); -1 until init sent it */
    pid_t ready_pid;
    int ready_pidfd;        /* a pidfd of it (host side), to SIGCONT it at the hand-off */
    bool ready;
    bool ready_taken;       /* the last one was handed an exec: the next PREPARE says so */
    /* Emptied fast leaves, open, for the next ready children: an exec then
     * makes and removes no cgroup (mkdir and rmdir in cgroupfs cost ~80 us
     * of CPU per exec, plus the kernel's deferred freeing). */
    open_leaf spare[SUP_SPARE_LEAVES];
    size_t nspare;
};

static void client_close(client *c);
static void exec_finish(exec_ctx *ex);
static void handoff_release(exec_ctx *ex);

/* ---- client output queue ------------------------------------------------ */

static void client_update_poll(client *c);
static void on_client(uv_poll_t *p, int status, int events);

static void client_flush(client *c)
{
    while (c->qhead) {
        outmsg *m = c->qhead;
        int r = sg_seqpacket_send_typed(c->fd, m->type, m->data, m->len, NULL, 0);
        if (r == -EAGAIN)
            break;
        c->qhead = m->next;
        if (!c->qhead)
            c->qtail = NULL;
        c->qbytes -= m->len;
        free(m);
        if (r < 0) {
            client_close(c);
            return;
        }
    }
    if (!c->qhead && c->close_after_flush) {
        client_close(c);
        return;
    }
    client_update_poll(c);
}

static void client_send(client *c, uint8_t type, const void *buf, size_t len)
{
    if (!c || c->closing)
        return;
    if (!c->qhead) {
        int r = sg_seqpacket_send_typed(c->fd, type, buf, len, NULL, 0);
        if (r == 0)
            return;
        if (r != -EAGAIN) {
            client_close(c);
            return;
        }
    }
    outmsg *m = malloc(sizeof *m + len);
    if (!m) {
        client_close(c);
        return;
    }
    m->next = NULL;
    m->type = type;
    m->len = len;
    memcpy(m->data, buf, len);
    if (c->qtail)
        c->qtail->next = m;
    else
        c->qhead = m;
    c->qtail = m;
    c->qbytes += len;
    client_update_poll(c);
}

static void client_send_json(client *c, uint8_t type, json_t *j)
{
    sg_autofree char *s = sg_json_dump(j);
    json_decref(j);
    if (!s)
        return;
    /* A large answer (a long checkpoint list, a rollback plan) goes in
     * parts: one seqpacket message is at most SG_CTL_MSG_MAX. */
    size_t len = strlen(s), off = 0;
    for (; len - off > SG_CTL_CHUNK; off += SG_CTL_CHUNK)
        client_send(c, SG_CTL_RESULT_PART, s + off, SG_CTL_CHUNK);
    client_send(c, type, s + off, len - off);
}

static void client_error(client *c, const char *msg)
{
    client_send_json(c, SG_CTL_ERROR, json_pack("{s:s}", "error", msg));
    if (c)
        c->close_after_flush = true;
    if (c && !c->qhead)
        client_close(c);
}

/* ---- exec output --------------------------------------------------------- */

/* Kills what a leaf holds, and marks the execs in it: a leaf cgroup.kill
 * was written to is never reused (leaf_recycle). */
static int leaf_kill(sup *s, const char *leaf, int timeout_ms, sg_err *err)
{
    for (size_t k = 0; k < s->nexecs; k++)
        if (strcmp(s->execs[k]->leaf, leaf) == 0)
            s->execs[k]->leaf_killed = true;
    return sg_cgroup_kill(s->cg, leaf, timeout_ms, err);
}

static __attribute__((format(printf, 3, 4))) void exec_mark_killed(exec_ctx *ex, const char *cause,
                                                                     const char *fmt, ...)
{
    if (ex->kill_cause[0])
        return;
    snprintf(ex->kill_cause, sizeof ex->kill_cause, "%s", cause);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ex->kill_detail, sizeof ex->kill_detail, fmt, ap);
    va_end(ap);
}

static void exec_kill(exec_ctx *ex)
{
    sg_err err = {0};
    if (!ex->s->cg) {
        /* No cgroup (rootless without delegation): the exec's session. */
        sg_spawn_hdr sp = {.type = SG_SPAWN_SIGNAL, .exec_id = ex->id, .sig = SIGKILL};
        if (send(ex->s->init_fd, &sp, sizeof sp, MSG_NOSIGNAL) < 0)
            fprintf(stderr, "supervisor: kill of exec %u: %s\n", ex->num, strerror(errno));
        return;
    }
    if (leaf_kill(ex->s, ex->leaf, 2000, &err) < 0)
        fprintf(stderr, "supervisor: kill of exec %u: %s\n", ex->num, err.msg);
}

/* Host pids of the processes in the sandbox's pid namespace (init
 * included), found through /proc: the kill path when there is no cgroup. */
static size_t pidns_members(sup *s, pid_t *out, size_t max)
{
    char want[64], path[64], got[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)s->init_pid);
    ssize_t wl = readlink(path, want, sizeof want - 1);
    if (wl <= 0)
        return 0;
    want[wl] = '\0';
    sg_autoclosedir DIR *d = opendir("/proc");
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
        ssize_t l = readlink(path, got, sizeof got - 1);
        if (l <= 0)
            continue;
        got[l] = '\0';
        if (strcmp(got, want) == 0 && sg_state_pid_alive((pid_t)pid))
            out[n++] = (pid_t)pid;
    }
    return n;
}

/* SIGKILLs every process of the pid namespace (but init unless with_init)
 * until none is left; returns how many remain. */
static size_t pidns_kill(sup *s, bool with_init, int timeout_ms)
{
    static pid_t pids[65536];
    uint64_t deadline = sg_now_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        size_t n = pidns_members(s, pids, SG_ARRAY_LEN(pids)), left = 0;
        for (size_t i = 0; i < n; i++) {
            if (pids[i] == s->init_pid && !with_init)
                continue;
            kill(pids[i], SIGKILL);
            left++;
        }
        if (!left || sg_now_mono_ns() > deadline)
            return left;
        usleep(1000);
    }
}

/* Reads what is available on one output pipe. Returns false at EOF/error. */
static bool exec_read(exec_ctx *ex, int fd, uint8_t type)
{
    char buf[SUP_READ_CHUNK];
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        uint64_t limit = ex->s->meta.output_limit;
        size_t give = (size_t)n;
        if (limit && ex->out_bytes + give > limit) {
            give = ex->out_bytes >= limit ? 0 : (size_t)(limit - ex->out_bytes);
            if (!ex->output_limit_hit) {
                ex->output_limit_hit = true;
                exec_mark_killed(ex, "output_limit", "its output reached the output limit of %llu bytes",
                                 (unsigned long long)limit);
                exec_kill(ex);
            }
        }
        ex->out_bytes += give;
        if (give && ex->cx)
            ex->s->capi->exec_output(ex->cx, type == SG_CTL_STDERR, buf, give);
        if (give && ex->cl)
            client_send(ex->cl, type, buf, give);
        if ((size_t)n < sizeof buf)
            return true;
    }
    return true;
}

static void on_close_pending(uv_handle_t *h)
{
    exec_ctx *ex = h->data;
    if (--ex->pending_closes == 0)
        free(ex);
}

static void exec_close_stream(exec_ctx *ex, bool out)
{
    uv_poll_t *p = out ? &ex->out_poll : &ex->err_poll;
    bool *active = out ? &ex->out_active : &ex->err_active;
    int *fd = out ? &ex->out_fd : &ex->err_fd;
    if (!*active)
        return;
    *active = false;
    uv_poll_stop(p);
    ex->pending_closes++;
    uv_close((uv_handle_t *)p, on_close_pending);
    close(*fd);
    *fd = -1;
}

static void on_exec_output(uv_poll_t *p, int status, int events)
{
    exec_ctx *ex = p->data;
    bool out = p == &ex->out_poll;
    if (!exec_read(ex, out ? ex->out_fd : ex->err_fd, out ? SG_CTL_STDOUT : SG_CTL_STDERR))
        exec_close_stream(ex, out);
    if (ex->cl && ex->cl->qbytes > SUP_CLIENT_QUEUE_MAX) {
        /* Backpressure: the caller is slow; let the exec block on its pipe. */
        if (ex->out_active)
            uv_poll_stop(&ex->out_poll);
        if (ex->err_active)
            uv_poll_stop(&ex->err_poll);
    }
}

static void client_update_poll(client *c)
{
    if (c->closing)
        return;
    int ev = UV_READABLE | (c->qhead ? UV_WRITABLE : 0);
    uv_poll_start(&c->poll, ev, on_client);
    exec_ctx *ex = c->ex;
    if (ex && c->qbytes <= SUP_CLIENT_QUEUE_MAX / 2) {
        if (ex->out_active)
            uv_poll_start(&ex->out_poll, UV_READABLE, on_exec_output);
        if (ex->err_active)
            uv_poll_start(&ex->err_poll, UV_READABLE, on_exec_output);
    }
}

/* ---- leaves and the kill switch ---------------------------------------------- */

static void leaf_track(sup *s, const char *leaf)
{
    if (s->nleaves == s->capleaves) {
        size_t ncap = s->capleaves ? s->capleaves * 2 : 16;
        char **n = realloc(s->leaves, ncap * sizeof *n);
        if (!n)
            return;
        s->leaves = n;
        s->capleaves = ncap;
    }
    s->leaves[s->nleaves++] = strdup(leaf);
}

static void leaf_untrack(sup *s, const char *leaf)
{
    for (size_t i = 0; i < s->nleaves; i++) {
        if (strcmp(s->leaves[i], leaf) == 0) {
            free(s->leaves[i]);
            s->leaves[i] = s->leaves[--s->nleaves];
            return;
        }
    }
}

/* Removes the leaves that have emptied (background processes ended). */
static void leaves_sweep(sup *s)
{
    sg_err err = {0};
    if (!s->cg)
        return;
    for (size_t i = s->nleaves; i-- > 0;) {
        bool running = false;
        for (size_t k = 0; k < s->nexecs; k++)
            if (strcmp(s->execs[k]->leaf, s->leaves[i]) == 0)
                running = true;
        if (!running && sg_cgroup_populated(s->cg, s->leaves[i], &err) == 0 &&
            sg_cgroup_leaf_remove(s->cg, s->leaves[i], &err) == 0)
            leaf_untrack(s, s->leaves[i]);
    }
}

static void open_leaf_close(open_leaf *l)
{
    sg_close_reset(&l->dirfd);
    sg_close_reset(&l->cpufd);
    sg_close_reset(&l->evfd);
}

/* Asks init for a ready child in a new leaf, so that the next exec only
 * has to hand it the command (init.h). Off the exec path: called once the
 * sandbox is up, once an exec has started, and after each result. */
static void ready_next(sup *s)
{
    sg_err err = {0};
    if (s->ready || !s->fast_leaves || s->destroying || s->aborted || s->init_dead ||
        s->init_fd < 0)
        return;
    open_leaf l;
    if (s->nspare > 0) {
        l = s->spare[--s->nspare];
    } else {
        snprintf(l.name, sizeof l.name, "x%u", ++s->next_leaf);
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
    sg_spawn_hdr sp = {.type = SG_SPAWN_PREPARE, .exec_id = ++s->next_exec,
                        .uid = s->meta.uid, .gid = s->meta.gid, .nfds_cg = 1, .cg_into = 1,
                        .flags = s->ready_taken ? SG_SPAWN_F_TAKEN : 0};
    if (l.dirfd < 0 || sg_seqpacket_send(s->init_fd, &sp, sizeof sp, &l.dirfd, 1) < 0) {
        open_leaf_close(&l);
        sg_cgroup_leaf_remove(s->cg, l.name, &err);
        return;
    }
    s->ready_taken = false;
    s->ready_exec_id = sp.exec_id;
    s->rl = l;
    s->ready = true;
}

/* An exec's fast leaf once the exec is over: kept for a later exec if it
 * is empty (no background process) and there is room, else removed.
 * Never one that was killed through cgroup.kill: the kernel (6.18 here)
 * then SIGKILLs at birth every child cloned into it with CLONE_INTO_CGROUP
 * from another cgroup (fork compares the leaf's kill count with the
 * parent cgroup's). Returns whether it is taken care of (kept or removed). */
static bool leaf_recycle(sup *s, exec_ctx *ex)
{
    sg_err err = {0};
    bool empty = ex->events_fd >= 0 && sg_cgroup_events_populated(ex->events_fd, &err) == 0;
    if (empty && !ex->leaf_killed && ex->leaf_fd >= 0 && ex->cpu_fd >= 0 && s->nspare < SUP_SPARE_LEAVES &&
        !s->destroying && !s->aborted) {
        open_leaf *l = &s->spare[s->nspare++];
        snprintf(l->name, sizeof l->name, "%s", ex->leaf);
        l->dirfd = sg_steal_fd(&ex->leaf_fd);
        l->cpufd = sg_steal_fd(&ex->cpu_fd);
        l->evfd = sg_steal_fd(&ex->events_fd);
        return true;
    }
    return sg_cgroup_leaf_remove(s->cg, ex->leaf, &err) == 0;
}

static void ready_close_fds(sup *s)
{
    open_leaf_close(&s->rl);
    sg_close_reset(&s->ready_sock);
    sg_close_reset(&s->ready_pidfd);
}

/* A pidfd of the ready child, found as the one process of its fresh leaf.
 * The user's processes may SIGSTOP it (same uid): the hand-off sends it a
 * SIGCONT first, so a stopped ready child costs nothing instead of the
 * hand-off's whole timeout on every later exec. -1 when not found. */
static int ready_pidfd_open(int leaf_dirfd)
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
static void ready_lost(sup *s)
{
    s->ready = false;
    ready_close_fds(s);
    leaf_track(s, s->rl.name);
}

/* Kills and removes the ready child's leaf (abort, kill-all). */
static void ready_retire(sup *s)
{
    sg_err err = {0};
    if (!s->ready)
        return;
    s->ready = false;
    ready_close_fds(s);
    if (sg_cgroup_kill(s->cg, s->rl.name, 2000, &err) < 0 ||
        sg_cgroup_leaf_remove(s->cg, s->rl.name, &err) < 0)
        leaf_track(s, s->rl.name); /* swept later, or removed by destroy */
}

static json_t *cap_json(double limit, double value)
{
    return json_pack("{s:o, s:f}", "limit", limit > 0 ? json_real(limit) : json_null(), "value", value);
}

static json_t *caps_now(sup *s)
{
    sg_err err = {0};
    sg_cg_stats st = {0};
    if (s->cg)
        sg_cgroup_stats(s->cg, NULL, &st, &err);
    double wall = (double)(sg_now_mono_ns() - s->start_ns) / 1e9;
    return json_pack("{s:o, s:o, s:o, s:o}",
        "max_wall_s", cap_json(s->meta.max_wall_s, wall),
        "max_execs", cap_json((double)s->meta.max_execs, (double)s->execs_total),
        "max_cpu_s", cap_json(s->meta.max_cpu_s, (double)st.cpu_ns / 1e9),
        "max_calls", cap_json((double)s->meta.max_calls, (double)s->calls_total));
}

/* Kills every process of the sandbox but its init, and proves it: the
 * sandbox's cgroup then holds exactly the init. */
static json_t *kill_all_user_processes(sup *s, const char *cause, const char *detail)
{
    sg_err err = {0};
    json_t *killed_execs = json_array();
    for (size_t i = 0; i < s->nexecs; i++) {
        if (!s->execs[i]->finished) {
            json_array_append_new(killed_execs, json_integer(s->execs[i]->num));
            exec_mark_killed(s->execs[i], cause, "%s", detail);
        }
    }
    pid_t *before = NULL;
    size_t nbefore = 0;
    uint64_t t0 = sg_now_mono_ns();
    bool ok = true;
    pid_t *after = NULL;
    size_t nafter = 0;
    size_t nready = 0; /* the ready child: not a user process, not counted */
    /* The checkpoint worker is work for the sandbox, in its cgroup: killed
     * too, never waited for (a new one comes for the next call). */
    if (s->ckpt)
        sg_ckpt_client_kill(s->ckpt);
    if (s->cg) {
        pid_t *ready = NULL;
        if (s->ready && sg_cgroup_pids(s->cg, s->rl.name, &ready, &nready, &err) < 0)
            nready = 0;
        free(ready);
        sg_cgroup_pids(s->cg, NULL, &before, &nbefore, &err);
        t0 = sg_now_mono_ns();
        for (size_t i = 0; i < s->nleaves; i++)
            if (leaf_kill(s, s->leaves[i], 5000, &err) < 0)
                ok = false;
        /* The idle ready child last: killed first, its exit would wait for
         * a CPU that a fork bomb holds, and the bomb's kill behind it. */
        ready_retire(s);
    } else {
        before = calloc(65536, sizeof *before);
        nbefore = before ? pidns_members(s, before, 65536) : 0;
        t0 = sg_now_mono_ns();
        ok = pidns_kill(s, false, 5000) == 0;
    }
    double kill_ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    if (s->cg) {
        sg_cgroup_pids(s->cg, NULL, &after, &nafter, &err);
    } else {
        after = calloc(65536, sizeof *after);
        nafter = after ? pidns_members(s, after, 65536) : 0;
    }
    json_t *left = json_array();
    for (size_t i = 0; i < nafter; i++)
        if (after[i] != s->init_pid)
            json_array_append_new(left, json_integer(after[i]));
    json_t *proof = json_pack("{s:i, s:b, s:I, s:o, s:f, s:s}",
        "processes_left", (int)json_array_size(left),
        "cgroup_holds_only_init", ok && json_array_size(left) == 0,
        "init_pid", (json_int_t)s->init_pid, "left_pids", left, "kill_ms", kill_ms,
        "checked_by", s->cg ? "cgroup" : "pid namespace");
    json_t *r = json_pack("{s:o, s:I, s:o}", "execs_killed", killed_execs,
        "processes_killed", (json_int_t)(nbefore > 1 + nready ? nbefore - 1 - nready : 0),
        "proof", proof);
    free(before);
    free(after);
    return r;
}

static void capture_emit(sup *s, const char *kind, json_t *payload)
{
    if (s->cap)
        s->capi->emit(s->cap, kind, payload);
    else
        json_decref(payload);
}

static int sup_unified(void *ud, const char *path, const char *old, size_t old_len,
                       const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);

/* Starts the capture of this sandbox. */
static int capture_start(sup *s, bool resumed, sg_err *err)
{
    s->capi = &sg_capture_api_v1;
    s->cap = s->capi->open(&s->loop, &s->meta, resumed, sup_unified, s, err);
    return s->cap ? 0 : -1;
}

/* The kill switch. Returns the abort record (new reference). */
static json_t *sup_abort(sup *s, const char *by, const char *reason)
{
    if (s->aborted)
        return json_pack("{s:b, s:b, s:s, s:s}", "aborted", 1, "already", 1,
                         "by", s->abort_by, "reason", s->abort_reason);
    s->aborted = true;
    snprintf(s->abort_by, sizeof s->abort_by, "%s", by);
    snprintf(s->abort_reason, sizeof s->abort_reason, "%s", reason);
    sg_err err = {0};
    if (sg_state_abort_save(s->meta.id, by, reason, &err) < 0)
        sg_log_line("supervisor", "%s", err.msg);
    json_t *caps = caps_now(s);
    char detail[300];
    snprintf(detail, sizeof detail, "the session was aborted (%s)", reason);
    json_t *k = kill_all_user_processes(s, "abort", detail);
    json_t *rec = json_pack("{s:b, s:b, s:s, s:s, s:o}", "aborted", 1, "already", 0,
                            "by", by, "reason", reason, "caps", caps);
    json_object_update(rec, k);
    json_decref(k);
    capture_emit(s, "session_abort", json_deep_copy(rec));
    return rec;
}

static void sup_destroy(sup *s, client *c);

/* The keep of an ended session is over: the sandbox goes, saying why. */
static void on_expire(uv_timer_t *t)
{
    sup *s = t->data;
    if (s->destroying)
        return;
    sg_log_line("supervisor", "the sandbox's keep after its session ended is over: destroying it");
    capture_emit(s, "sandbox", json_pack("{s:s, s:s}", "state", "expired", "reason",
                                         "its agent session ended and the keep (mcp --keep) passed"));
    sup_destroy(s, NULL);
}

static void on_cap_timer(uv_timer_t *t)
{
    sup *s = t->data;
    if (s->aborted || s->destroying)
        return;
    char why[128];
    double wall = (double)(sg_now_mono_ns() - s->start_ns) / 1e9;
    if (s->meta.max_wall_s > 0 && wall >= s->meta.max_wall_s) {
        snprintf(why, sizeof why, "cap max_wall_s=%g reached", s->meta.max_wall_s);
        json_decref(sup_abort(s, "cap", why));
        return;
    }
    if (s->meta.max_cpu_s > 0) {
        sg_err err = {0};
        sg_cg_stats st = {0};
        if (s->cg && sg_cgroup_stats(s->cg, NULL, &st, &err) == 0 && (double)st.cpu_ns / 1e9 >= s->meta.max_cpu_s) {
            snprintf(why, sizeof why, "cap max_cpu_s=%g reached", s->meta.max_cpu_s);
            json_decref(sup_abort(s, "cap", why));
        }
    }
}

/* ---- checkpoints -------------------------------------------------------------- */

static bool tool_is_read_only(const char *tool)
{
    return tool && strcmp(tool, "read_file") == 0;
}

/* The worker stops after SG_CKPT_CLIENT_IDLE_MS without a call (ckptc.h). */
static void ckpt_flush_labels(sup *s);

static void on_ckpt_idle(uv_timer_t *t)
{
    sup *s = t->data;
    ckpt_flush_labels(s);
    sg_ckpt_client_stop(s->ckpt);
    uv_timer_stop(t); /* the flush re-armed it */
}

/* $SANDGLASS_CKPT_IDLE_MS (1 ms to 1 h) overrides SG_CKPT_CLIENT_IDLE_MS: the
 * tests watch the worker go without waiting 10 s. */
static uint64_t ckpt_idle_ms(void)
{
    static uint64_t ms;
    if (!ms) {
        uint64_t v = 0;
        sg_err e = {0};
        const char *env = getenv("SANDGLASS_CKPT_IDLE_MS");
        ms = env && sg_parse_uint(env, 3600000, &v, &e) == 0 && v > 0 ? v : SG_CKPT_CLIENT_IDLE_MS;
    }
    return ms;
}

static void ckpt_used(sup *s)
{
    sg_err err = {0};
    if (sg_ckpt_client_owed_error(s->ckpt, &err))
        fprintf(stderr, "supervisor: checkpoint labels were not recorded: %s\n", err.msg);
    uv_timer_start(&s->ckpt_idle, on_ckpt_idle, ckpt_idle_ms(), 0);
}

/* The watcher's diffs, made by the checkpoint worker. */
static int sup_unified(void *ud, const char *path, const char *old, size_t old_len,
                       const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    sup *s = ud;
    int rc = sg_ckpt_client_unified(s->ckpt, path, old, old_len, new_, new_len, out, err);
    ckpt_used(s);
    return rc;
}

/* The labels of execs found unchanged go to the store before anything
 * else asks the worker (a list must show them, in order). */
static void ckpt_flush_labels(sup *s)
{
    if (!s->nlabels)
        return;
    sg_err err = {0};
    /* Not waited for: the worker's next answer settles it. */
    if (sg_ckpt_client_alias_nowait(s->ckpt, s->last_ckpt, s->labels, s->label_times, s->nlabels, &err) < 0)
        fprintf(stderr, "supervisor: cannot record %zu checkpoint label(s): %s\n", s->nlabels, err.msg);
    ckpt_used(s);
    for (size_t i = 0; i < s->nlabels; i++)
        free(s->labels[i]);
    s->nlabels = 0;
}

static void ckpt_queue_label(sup *s, const char *label)
{
    if (s->nlabels == SG_SUP_LABELS_MAX)
        ckpt_flush_labels(s);
    if (!s->labels) {
        s->labels = sg_xcalloc(SG_SUP_LABELS_MAX, sizeof *s->labels);
        s->label_times = sg_xcalloc(SG_SUP_LABELS_MAX, sizeof *s->label_times);
    }
    s->labels[s->nlabels] = sg_xstrdup(label);
    s->label_times[s->nlabels++] = (int64_t)time(NULL);
}

static void emit_checkpoint(sup *s, const char *id, const char *label, const sg_checkpoint_stats *st,
                            double ms, bool reused, json_t **info)
{
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "id", id, "label", label,
                          "files", (json_int_t)st->files, "bytes", (json_int_t)st->bytes,
                          "changed", (json_int_t)st->changed, "hashed", (json_int_t)st->hashed,
                          "took_ms", ms);
    if (reused)
        json_object_set_new(j, "unchanged", json_true());
    /* What the limits kept out (checkpoint.h: limits): never silent. */
    if (st->omitted || st->partial || st->store_full)
        json_object_set_new(j, "not_stored", json_pack("{s:I, s:I, s:b}",
            "files", (json_int_t)st->omitted, "dirs_not_walked", (json_int_t)st->partial,
            "store_full", st->store_full != 0));
    if (info)
        *info = json_deep_copy(j);
    capture_emit(s, "checkpoint", j);
}

/* A checkpoint that failed is an event too (a `checkpoint` event with
 * "error" and no id), not only a line in the log. */
static void emit_checkpoint_error(sup *s, const char *label, const sg_err *err, double ms)
{
    fprintf(stderr, "supervisor: checkpoint failed: %s\n", err->msg);
    capture_emit(s, "checkpoint", json_pack("{s:s, s:s, s:i, s:f}", "label", label ? label : "",
                                            "error", err->msg, "errno", err->code, "took_ms", ms));
}

/* Takes a checkpoint of the workspace (from outside the sandbox) and emits
 * a checkpoint event. Returns the id (static storage) or NULL. */
static const char *sup_checkpoint_ex(sup *s, const char *label, bool reuse, json_t **info)
{
    static char id[SG_CHECKPOINT_ID_LEN + 1];
    if (!s->ckpt)
        return NULL;
    sg_err err = {0};
    sg_checkpoint_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    bool reused = false;
    ckpt_flush_labels(s);
    int rc = sg_ckpt_client_take(s->ckpt, label, reuse, id, &st, &reused, &err);
    ckpt_used(s);
    if (rc < 0) {
        emit_checkpoint_error(s, label, &err, (double)(sg_now_mono_ns() - t0) / 1e6);
        return NULL;
    }
    memcpy(s->last_ckpt, id, sizeof id);
    s->last_stats = st;
    emit_checkpoint(s, id, label, &st, (double)(sg_now_mono_ns() - t0) / 1e6, reused, info);
    return id;
}

static const char *sup_checkpoint(sup *s, const char *label, json_t **info)
{
    return sup_checkpoint_ex(s, label, false, info);
}

/* The checkpoint before an exec. When the workspace's fingerprint equals
 * the one taken with the last such checkpoint, nothing changed: that
 * checkpoint is the answer, as the worker would find, without the trip to
 * it; the label is queued for the store. */
static void sup_checkpoint_exec(sup *s, const char *label)
{
    if (!s->ckpt)
        return;
    sg_fingerprint now;
    sg_err err = {0};
    uint64_t t0 = sg_now_mono_ns();
    bool usable = sg_fingerprint_take(s->meta.workspace, &now, &err) == 0 && sg_fingerprint_usable(&now);
    if (usable && s->print_valid && s->last_ckpt[0] && sg_fingerprint_equal(&now, &s->last_print)) {
        sg_checkpoint_stats st = s->last_stats;
        st.changed = st.hashed = 0;
        ckpt_queue_label(s, label);
        emit_checkpoint(s, s->last_ckpt, label, &st, (double)(sg_now_mono_ns() - t0) / 1e6, true, NULL);
        return;
    }
    s->print_valid = false;
    if (sup_checkpoint_ex(s, label, true, NULL) && usable) {
        s->last_print = now;
        s->print_valid = true;
    }
}


static json_t *changes_json(sg_checkpoint_change *ch, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        /* A file name need not be UTF-8, and json_pack drops what is not:
         * show such a path with U+FFFD rather than hide it from the plan. */
        sg_autofree char *path = sg_utf8_sanitize(ch[i].path, strlen(ch[i].path), NULL);
        json_array_append_new(arr, json_pack("{s:s, s:s}", "path", path ? path : "?",
                                             "change", sg_checkpoint_change_kind_name(ch[i].kind)));
    }
    return arr;
}

#define SUP_SAFETY_LABEL "before rollback"

/* The newest checkpoint whose label is `label` (same) or is not (!same):
 * 1 and its id in out, 0 when there is none, -1 with err. */
static int newest_checkpoint(sup *s, const char *label, bool same, char out[SG_CHECKPOINT_ID_LEN + 1],
                             sg_err *err)
{
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    ckpt_flush_labels(s);
    int rc = sg_ckpt_client_list(s->ckpt, &v, &n, err);
    ckpt_used(s);
    if (rc < 0)
        return -1;
    int found = 0;
    for (size_t i = n; i-- > 0 && !found;) {
        if ((v[i].label && strcmp(v[i].label, label) == 0) == same) {
            memcpy(out, v[i].id, SG_CHECKPOINT_ID_LEN + 1);
            found = 1;
        }
    }
    if (!found && !same && n > 0) { /* only safety copies: the newest */
        memcpy(out, v[n - 1].id, SG_CHECKPOINT_ID_LEN + 1);
        found = 1;
    }
    sg_checkpoint_infos_free(v, n);
    return found;
}

/* The default rollback target: the newest checkpoint that is not the safety
 * copy a rollback keeps, or rolling back twice would undo the first
 * rollback (that copy stays reachable with --to). */
static int default_target(sup *s, char out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    int rc = newest_checkpoint(s, SUP_SAFETY_LABEL, false, out, err);
    return rc == 0 ? sg_err_set(err, ENOENT, "this sandbox has no checkpoint") : rc < 0 ? -1 : 0;
}

/* Whether a --to names a checkpoint by (a prefix of) its id. */
static bool is_hex_prefix(const char *s)
{
    size_t n = strlen(s);
    if (n < 4 || n > SG_CHECKPOINT_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* The newest checkpoint labelled exactly label. */
static int label_target(sup *s, const char *label, char out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    int rc = newest_checkpoint(s, label, true, out, err);
    return rc == 0 ? sg_err_set(err, ENOENT, "no checkpoint with the id or label '%.100s' (see 'sandglass "
                                "checkpoints')", label) : rc < 0 ? -1 : 0;
}

static void sup_rollback(sup *s, client *c, json_t *req)
{
    sg_err err = {0};
    if (!s->ckpt) {
        client_error(c, "this sandbox has no checkpoint store");
        return;
    }
    const char *to = json_string_value(json_object_get(req, "to"));
    bool dry = json_is_true(json_object_get(req, "dry_run"));
    bool force = json_is_true(json_object_get(req, "force"));
    char latest[SG_CHECKPOINT_ID_LEN + 1];
    if (!to) {
        if (default_target(s, latest, &err) < 0) {
            client_error(c, err.msg);
            return;
        }
        to = latest;
    } else if (!is_hex_prefix(to)) {
        /* Not an id: the newest checkpoint with that label. */
        if (label_target(s, to, latest, &err) < 0) {
            client_error(c, err.msg);
            return;
        }
        to = latest;
    }
    size_t running = 0;
    for (size_t i = 0; i < s->nexecs; i++)
        running += !s->execs[i]->finished;
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    /* The workspace is about to change (or be judged): fingerprint again. */
    s->print_valid = false;
    ckpt_flush_labels(s);
    int drc = sg_ckpt_client_diff(s->ckpt, to, &ch, &n, &err);
    ckpt_used(s);
    if (drc < 0) {
        client_error(c, err.msg);
        return;
    }
    json_t *changes = changes_json(ch, n);
    sg_checkpoint_changes_free(ch, n);
    if (dry) {
        client_send_json(c, SG_CTL_RESULT, json_pack("{s:s, s:o, s:I, s:b}", "to", to, "changes", changes,
                                                     "running_execs", (json_int_t)running, "restored", 0));
        c->close_after_flush = true;
        client_flush(c);
        return;
    }
    if (n == 0 && !running) {
        /* Nothing to restore: no safety checkpoint, no kill. */
        client_send_json(c, SG_CTL_RESULT, json_pack("{s:s, s:o, s:I, s:b}", "to", to, "changes", changes,
                                                     "changed", (json_int_t)0, "restored", 0));
        c->close_after_flush = true;
        client_flush(c);
        return;
    }
    if (running && !force) {
        json_decref(changes);
        char m[160];
        snprintf(m, sizeof m, "%zu exec(s) running: refusing to roll back under them (--force kills them first)", running);
        client_error(c, m);
        return;
    }
    /* Background processes left by earlier execs would race the restore
     * (a writer loop would undo it): they go too. */
    json_t *killed = NULL;
    leaves_sweep(s);
    if (running || s->nleaves)
        killed = kill_all_user_processes(s, "rollback", "rollback --force killed it to restore the workspace");
    /* Keep the present too, so that a rollback can itself be undone. */
    json_t *safety = NULL;
    sup_checkpoint(s, SUP_SAFETY_LABEL, &safety);
    char target[SG_CHECKPOINT_ID_LEN + 1];
    snprintf(target, sizeof target, "%s", to);
    sg_checkpoint_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    int rrc = sg_ckpt_client_restore(s->ckpt, target, &st, &err);
    ckpt_used(s);
    if (rrc < 0) {
        json_decref(changes);
        json_decref(killed);
        json_decref(safety);
        client_error(c, err.msg);
        return;
    }
    double ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    json_t *rec = json_pack("{s:s, s:o, s:I, s:f, s:b, s:o, s:o}", "to", target, "changes", changes,
                            "changed", (json_int_t)st.changed, "took_ms", ms, "restored", 1,
                            "safety_checkpoint", safety ? json_incref(json_object_get(safety, "id")) : json_null(),
                            "killed", killed ? killed : json_null());
    /* Files recorded by size only and directories not walked (checkpoint.h:
     * limits) were left as they are: say so, never silently. */
    if (st.unrestorable)
        json_object_set_new(rec, "not_restored", json_integer((json_int_t)st.unrestorable));
    json_decref(safety);
    capture_emit(s, "rollback", json_deep_copy(rec));
    client_send_json(c, SG_CTL_RESULT, rec);
    c->close_after_flush = true;
    client_flush(c);
}

/* A spare of the pool (cli/pool.c) becomes a learner's sandbox: it takes
 * the creator's learner, task, limits, caps and capture, and its session
 * clocks start now. Only a spare that never ran anything can be claimed. */
static void sup_claim(sup *s, client *c, json_t *req)
{
    sg_err err = {0};
    if (strcmp(s->meta.learner, SG_POOL_LEARNER) != 0 || s->execs_total || s->cap || s->aborted) {
        client_error(c, "this sandbox is not an unused spare of the pool");
        return;
    }
    sg_sandbox_meta want;
    if (sg_sandbox_meta_from_json(json_object_get(req, "meta"), s->meta.id, &want, &err) < 0) {
        sg_err_prefix(&err, "claim: bad sandbox record");
        client_error(c, err.msg);
        return;
    }
    /* Only what differs from the spare's limits is written (usually none). */
    sg_cg_limits lim = {.memory_bytes = want.memory != s->meta.memory ? want.memory : 0,
                        .pids = want.pids != s->meta.pids ? want.pids : 0,
                        .cpus = want.cpus != s->meta.cpus ? want.cpus : 0};
    if (s->cg && sg_cgroup_set_limits(s->cg, &lim, &err) < 0) {
        sg_sandbox_meta_clear(&want);
        client_error(c, err.msg);
        return;
    }
    sg_sandbox_meta *m = &s->meta;
    SG_SWAP_PTR(m->learner, want.learner);
    SG_SWAP_PTR(m->task, want.task);
    SG_SWAP_PTR(m->ingest_url, want.ingest_url);
    SG_SWAP_PTR(m->secret_file, want.secret_file);
    m->memory = want.memory;
    m->pids = want.pids;
    m->cpus = want.cpus;
    m->timeout_s = want.timeout_s;
    m->output_limit = want.output_limit;
    m->max_wall_s = want.max_wall_s;
    m->max_execs = want.max_execs;
    m->max_cpu_s = want.max_cpu_s;
    m->max_calls = want.max_calls;
    m->manual_checkpoints = want.manual_checkpoints;
    memcpy(m->created, want.created, sizeof m->created);
    sg_sandbox_meta_clear(&want);
    if (sg_sandbox_meta_save(m, &err) < 0) {
        client_error(c, err.msg);
        return;
    }
    if (m->task && capture_start(s, false, &err) < 0) {
        client_error(c, err.msg);
        return;
    }
    s->start_ns = sg_now_mono_ns();
    if (m->max_wall_s > 0 || m->max_cpu_s > 0)
        uv_timer_start(&s->cap_timer, on_cap_timer, 100, 100);
    client_send_json(c, SG_CTL_RESULT, sg_sandbox_meta_json(m));
    c->close_after_flush = true;
    client_flush(c);
    /* The workspace is the spare's empty one, which nothing has run in
     * since its checkpoint: the capture (if any) hears of that checkpoint,
     * and the worker (stopped when idle) is not woken for it. */
    if (s->last_ckpt[0])
        emit_checkpoint(s, s->last_ckpt, "create", &s->last_stats, 0, true, NULL);
    else
        sup_checkpoint_ex(s, "create", true, NULL);
}

/* ---- exec lifecycle -------------------------------------------------------- */

static void exec_slot_remove(sup *s, exec_ctx *ex)
{
    for (size_t i = 0; i < s->nexecs; i++) {
        if (s->execs[i] == ex) {
            s->execs[i] = s->execs[--s->nexecs];
            return;
        }
    }
}

static exec_ctx *exec_find(sup *s, uint32_t id)
{
    for (size_t i = 0; i < s->nexecs; i++)
        if (s->execs[i]->id == id)
            return s->execs[i];
    return NULL;
}

static void on_exec_timeout(uv_timer_t *t)
{
    exec_ctx *ex = t->data;
    if (ex->finished)
        return;
    ex->timed_out = true;
    exec_mark_killed(ex, "timeout", "it ran into its time limit of %g s", ex->timeout_s);
    exec_kill(ex);
}

/* The command's exit status as a shell gives it: 128+N for signal N. */
static int exec_exit_code(const exec_ctx *ex)
{
    return WIFEXITED(ex->status) ? WEXITSTATUS(ex->status) : 128 + WTERMSIG(ex->status);
}

static void exec_send_code(exec_ctx *ex)
{
    int32_t code = exec_exit_code(ex);
    client_send(ex->cl, SG_CTL_EXIT, &code, sizeof code);
}

static json_t *exec_result_json(exec_ctx *ex, const sg_cg_stats *after)
{
    double wall = (double)(sg_now_mono_ns() - ex->start_ns) / 1e9;
    int st = ex->status;
    json_t *exit_code = json_integer(exec_exit_code(ex));
    json_t *sig = WIFEXITED(st) ? json_null() : json_integer(WTERMSIG(st));
    uint64_t cpu_ns = after->cpu_ns >= ex->before.cpu_ns ? after->cpu_ns - ex->before.cpu_ns : 0;
    uint64_t rusage_ns = (uint64_t)(ex->exit_rep.utime_us + ex->exit_rep.stime_us) * 1000;
    if (cpu_ns < rusage_ns)
        cpu_ns = rusage_ns;
    uint64_t peak = after->memory_peak;
    if (!peak)
        peak = (uint64_t)ex->exit_rep.maxrss_kb * 1024;
    bool oom = after->oom_kills > ex->before.oom_kills;
    bool pids = after->pids_max_hits > ex->before.pids_max_hits;
    return json_pack("{s:o, s:o, s:f, s:f, s:I, s:b, s:b, s:b, s:I, s:b}",
        "exit_code", exit_code, "signal", sig,
        "wall_s", wall, "cpu_s", (double)cpu_ns / 1e9,
        "memory_peak", (json_int_t)peak,
        "oom_killed", oom, "pids_limit_hit", pids, "timed_out", ex->timed_out,
        "output_bytes", (json_int_t)ex->out_bytes,
        "output_limit_hit", ex->output_limit_hit);
}

/* The cgroup counters after the exec, for its result. */
static void exec_stats_after(exec_ctx *ex, sg_cg_stats *after)
{
    sup *s = ex->s;
    sg_err err = {0};
    memset(after, 0, sizeof *after);
    if (s->fast_leaves)
        /* cpu comes from the leaf; memory from the exec's rusage (the
         * sandbox's figure is its all-time peak) */
        sg_cgroup_counters(s->cg, &after->oom_kills, &after->pids_max_hits, &err);
    else if (s->cg)
        sg_cgroup_stats(s->cg, NULL, after, &err);
    if (after->oom_kills > s->oom_seen)
        s->oom_seen = after->oom_kills;
    sg_cg_stats leaf = {0};
    int lr = ex->cpu_fd >= 0 ? sg_cgroup_cpu_stat_read(ex->cpu_fd, &leaf.cpu_ns, &err)
           : s->cg ? sg_cgroup_stats(s->cg, ex->leaf, &leaf, &err) : -1;
    if (lr == 0) {
        leaf.cpu_ns = leaf.cpu_ns >= ex->cpu_base_ns ? leaf.cpu_ns - ex->cpu_base_ns : 0;
        after->cpu_ns = leaf.cpu_ns + ex->before.cpu_ns;
        if (leaf.memory_peak)
            after->memory_peak = leaf.memory_peak;
    }
}

/* The OOM counter as the supervisor starts: kills before it are not an
 * exec's. */
static void oom_baseline(sup *s)
{
    uint64_t pids = 0;
    sg_err err = {0};
    if (s->cg)
        sg_cgroup_counters(s->cg, &s->oom_seen, &pids, &err);
}

/* Why a command that died of SIGKILL died, when we know it: our own kill
 * (exec_mark_killed), or the OOM killer (the sandbox's OOM counter moved
 * since the exec began, or since it was last read when the exec read no
 * counters). Read only on that path, never for a command that exited. */
static bool exec_find_kill_reason(exec_ctx *ex)
{
    sup *s = ex->s;
    if (!WIFSIGNALED(ex->status) || WTERMSIG(ex->status) != SIGKILL)
        return false;
    if (!ex->kill_cause[0] && s->cg) {
        uint64_t oom = 0, pids = 0;
        sg_err err = {0};
        if (sg_cgroup_counters(s->cg, &oom, &pids, &err) == 0) {
            uint64_t base = (!ex->code_only || ex->cx) ? ex->before.oom_kills : s->oom_seen;
            if (oom > base)
                exec_mark_killed(ex, "memory", "the sandbox reached its memory limit of %llu MiB "
                                 "(the kernel's OOM killer)", (unsigned long long)(s->meta.memory >> 20));
            s->oom_seen = oom;
        }
    }
    return ex->kill_cause[0] != '\0';
}

static void exec_finish(exec_ctx *ex)
{
    sup *s = ex->s;
    if (ex->finished)
        return;
    ex->finished = true;
    handoff_release(ex);
    /* Everything the command wrote before it exited is in the pipes now. */
    if (ex->out_active && !exec_read(ex, ex->out_fd, SG_CTL_STDOUT))
        exec_close_stream(ex, true);
    if (ex->err_active && !exec_read(ex, ex->err_fd, SG_CTL_STDERR))
        exec_close_stream(ex, false);
    exec_close_stream(ex, true);
    exec_close_stream(ex, false);
    uv_timer_stop(&ex->timer);

    sg_err err = {0};
    /* A caller that wants the exit code alone gets it first, with no JSON
     * made and no counter read for it; with a capture the code waits until
     * the exec_end event is spooled, as a full result does. */
    bool code_first = ex->spawned && ex->cl && ex->code_only && !ex->cx;
    /* A command we (or the OOM killer) killed does not end in silence: one
     * line on the caller's stderr says why, before its exit code. */
    bool killed = ex->spawned && exec_find_kill_reason(ex);
    if (killed && ex->cl) {
        char line[300];
        int n = snprintf(line, sizeof line, "sandglass: killed: %s\n", ex->kill_detail);
        client_send(ex->cl, SG_CTL_STDERR, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    if (code_first)
        exec_send_code(ex);
    if (ex->spawned && !code_first) {
        sg_cg_stats after;
        exec_stats_after(ex, &after);
        json_t *res = exec_result_json(ex, &after);
        if (killed)
            json_object_set_new(res, "killed_by", json_pack("{s:s, s:s}", "cause", ex->kill_cause,
                                                            "detail", ex->kill_detail));
        if (s->aborted)
            json_object_set_new(res, "aborted", json_string(s->abort_reason));
        if (ex->cx)
            s->capi->exec_end(ex->cx, res);
        ex->cx = NULL;
        if (ex->cl && !ex->code_only) {
            client_send_json(ex->cl, SG_CTL_RESULT, res);
        } else {
            json_decref(res);
            if (ex->cl)
                exec_send_code(ex);
        }
    }
    /* A leaf with background processes stays until they end or destroy.
     * A fast leaf that emptied is kept for a later exec; leaves on v1
     * hierarchies are checked first. */
    if (!s->cg || (s->fast_leaves ? leaf_recycle(s, ex)
                   : sg_cgroup_populated(s->cg, ex->leaf, &err) == 0 &&
                     sg_cgroup_leaf_remove(s->cg, ex->leaf, &err) == 0))
        leaf_untrack(s, ex->leaf);
    sg_close_reset(&ex->cpu_fd);
    sg_close_reset(&ex->events_fd);
    sg_close_reset(&ex->leaf_fd);
    if (ex->cl) {
        ex->cl->ex = NULL;
        ex->cl->close_after_flush = true;
        client_flush(ex->cl);
    }
    exec_slot_remove(s, ex);
    /* Drops the reference the exec held since exec_start. */
    uv_close((uv_handle_t *)&ex->timer, on_close_pending);
    ready_next(s);
}

static void exec_fail(exec_ctx *ex, const char *msg)
{
    if (ex->cx) {
        sg_autojson json_t *res = json_pack("{s:n, s:f, s:b, s:s}", "exit_code", "wall_s", 0.0,
                                            "timed_out", 0, "error", msg);
        ex->s->capi->exec_end(ex->cx, res);
        ex->cx = NULL;
    }
    if (ex->cl)
        client_error(ex->cl, msg);
    ex->cl = NULL;
    ex->spawned = false;
    exec_finish(ex);
}

/* ---- direct hand-off to the ready child (init.h) ---------------------------- */

static void handoff_release(exec_ctx *ex)
{
    if (ex->awaiting_ack) {
        ex->awaiting_ack = false;
        if (ex->ack_timer.data) {
            uv_timer_stop(&ex->ack_timer);
            uv_close((uv_handle_t *)&ex->ack_timer, on_close_pending);
        }
        for (int i = 0; i < 3; i++)
            sg_close_reset(&ex->hold_fds[i]);
    }
    sg_close_reset(&ex->ready_sock);
    free(ex->held_msg);
    ex->held_msg = NULL;
}

/* 1: the child took the exec ("k"); 0: not yet; -1: it never will (its
 * socket closed: it died). The "k" is sent before the command runs, so it
 * is there by the time init reports the child's exit. */
static int handoff_ack(exec_ctx *ex)
{
    char k = 0;
    ssize_t n = recv(ex->ready_sock, &k, 1, MSG_DONTWAIT);
    if (n == 1 && k == 'k')
        return 1;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    return -1;
}

static void exec_handoff_done(exec_ctx *ex)
{
    ex->spawned = true;
    ex->pid = ex->ready_pid;
    handoff_release(ex);
}

/* The ready child did not take the exec (killed or stopped just before):
 * it is killed, and init clones the exec into the same leaf under a new id
 * (the dead child's exit report keeps the old one). */
static void exec_handoff_failed(exec_ctx *ex)
{
    sup *s = ex->s;
    sg_spawn_hdr kill_it = {.type = SG_SPAWN_SIGNAL, .exec_id = ex->id, .sig = SIGKILL};
    send(s->init_fd, &kill_it, sizeof kill_it, MSG_NOSIGNAL);
    if (s->aborted || s->destroying || s->init_dead || ex->timed_out || ex->leaf_fd < 0) {
        handoff_release(ex);
        exec_fail(ex, s->aborted ? "session aborted" : ex->timed_out ? "timed out before it started"
                                 : "the sandbox's init is gone");
        return;
    }
    ex->id = ++s->next_exec;
    sg_spawn_hdr sp;
    memcpy(&sp, ex->held_msg, sizeof sp);
    sp.exec_id = ex->id;
    sp.nfds_cg = 1;
    sp.cg_into = 1;
    memcpy(ex->held_msg, &sp, sizeof sp);
    int fds[4] = {ex->hold_fds[0], ex->hold_fds[1], ex->hold_fds[2], ex->leaf_fd};
    int r = sg_seqpacket_send(s->init_fd, ex->held_msg, ex->held_len, fds, 4);
    handoff_release(ex);
    if (r < 0)
        exec_fail(ex, "cannot reach the sandbox's init");
}

/* Settles the hand-off if the child answered, or if it never will: it
 * died, or (last) the wait is over. */
static void handoff_check(exec_ctx *ex, bool last)
{
    if (!ex->awaiting_ack)
        return;
    int a = handoff_ack(ex);
    if (a > 0)
        exec_handoff_done(ex);
    else if (a < 0 || last)
        exec_handoff_failed(ex);
}

static void on_handoff_timeout(uv_timer_t *t)
{
    handoff_check(t->data, true);
}

static char **build_env(const sg_exec_req *req, const char *cwd)
{
    static const char *defaults[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/workspace", "USER=sandbox", "LOGNAME=sandbox", "SHELL=/bin/sh",
        "LANG=C.UTF-8",
    };
    size_t nextra = 0;
    while (req->env && req->env[nextra])
        nextra++;
    size_t cap = SG_ARRAY_LEN(defaults) + nextra + 2;
    char **env = calloc(cap, sizeof *env);
    if (!env)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < SG_ARRAY_LEN(defaults); i++) {
        const char *d = defaults[i];
        size_t kl = (size_t)(strchr(d, '=') - d) + 1;
        bool overridden = false;
        for (size_t k = 0; k < nextra; k++)
            if (strncmp(req->env[k], d, kl) == 0)
                overridden = true;
        if (!overridden)
            env[n++] = strdup(d);
    }
    env[n++] = sg_strdup_printf("PWD=%s", cwd);
    for (size_t k = 0; k < nextra; k++)
        env[n++] = strdup(req->env[k]);
    env[n] = NULL;
    return env;
}

static void exec_start(sup *s, client *c, json_t *req_json, int stdin_fd)
{
    sg_err err = {0};
    sg_exec_req req;
    if (sg_exec_req_parse(req_json, &req, &err) < 0) {
        close(stdin_fd);
        client_error(c, err.msg);
        return;
    }
    if (!s->aborted) {
        char why[128] = "";
        if (s->meta.max_execs && s->execs_total >= s->meta.max_execs)
            snprintf(why, sizeof why, "cap max_execs=%llu reached", (unsigned long long)s->meta.max_execs);
        else if (req.tool_name && s->meta.max_calls && s->calls_total >= s->meta.max_calls)
            snprintf(why, sizeof why, "cap max_calls=%llu reached", (unsigned long long)s->meta.max_calls);
        if (why[0])
            json_decref(sup_abort(s, "cap", why));
    }
    if (s->aborted) {
        char m[400];
        snprintf(m, sizeof m, "session aborted: %s", s->abort_reason);
        close(stdin_fd);
        sg_exec_req_free(&req);
        client_error(c, m);
        return;
    }
    if (s->destroying || s->init_dead || s->init_fd < 0) {
        close(stdin_fd);
        sg_exec_req_free(&req);
        client_error(c, s->init_dead ? "the sandbox's init is gone; destroy it"
                                     : "the sandbox is being destroyed");
        return;
    }
    if (s->nexecs == s->capexecs) {
        size_t ncap = s->capexecs ? s->capexecs * 2 : 16;
        exec_ctx **n = realloc(s->execs, ncap * sizeof *n);
        if (!n) {
            close(stdin_fd);
            sg_exec_req_free(&req);
            client_error(c, "out of memory");
            return;
        }
        s->execs = n;
        s->capexecs = ncap;
    }
    s->execs_total++;
    if (req.tool_name)
        s->calls_total++;
    leaves_sweep(s);
    exec_ctx *ex = calloc(1, sizeof *ex);
    ex->s = s;
    ex->cl = c;
    /* A ready child whose socket init has sent takes the exec directly,
     * under the id reserved for it; else init clones a child. */
    bool direct = s->ready && s->cg && s->ready_sock >= 0;
    ex->id = direct ? s->ready_exec_id : ++s->next_exec;
    ex->num = ++s->exec_num;
    ex->out_fd = ex->err_fd = ex->cpu_fd = ex->ready_sock = ex->leaf_fd = -1;
    ex->events_fd = -1;
    ex->hold_fds[0] = ex->hold_fds[1] = ex->hold_fds[2] = -1;
    ex->pending_closes = 1; /* released when exec_finish closes the timer */
    ex->timeout_s = req.timeout_s > 0 ? req.timeout_s : s->meta.timeout_s;
    ex->code_only = req.code_only;
    uv_timer_init(&s->loop, &ex->timer);
    ex->timer.data = ex;
    s->execs[s->nexecs++] = ex;
    c->ex = ex;

    const char *cwd = req.cwd ? req.cwd : "/workspace";
    if (!tool_is_read_only(req.tool_name) && !s->meta.manual_checkpoints) {
        char label[160];
        sg_autofree char *line = sg_exec_cmdline(req.argv);
        snprintf(label, sizeof label, "before exec %u: %.120s", ex->num, line ? line : "");
        /* An unchanged workspace reuses the newest checkpoint: the exec
         * path then writes no object and no ref. */
        sup_checkpoint_exec(s, label);
    }
    ex->cx = s->cap ? s->capi->exec_begin(s->cap, ex->num, req.argv, cwd, req.tool) : NULL;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int cgfds[SG_CG_MAX_FDS];
    int ncg = -1;
    sg_autostrv char **env = build_env(&req, cwd);
    /* The ready child's leaf, where it sits already; else a new leaf. */
    if (direct) {
        memcpy(ex->leaf, s->rl.name, sizeof ex->leaf);
        ex->leaf_fd = sg_steal_fd(&s->rl.dirfd);
        ex->cpu_fd = sg_steal_fd(&s->rl.cpufd);
        ex->events_fd = sg_steal_fd(&s->rl.evfd);
        ex->cpu_base_ns = s->rl.cpu_base;
        ex->ready_sock = sg_steal_fd(&s->ready_sock);
        ex->ready_pid = s->ready_pid;
        s->ready = false;
        s->ready_taken = true;
        ncg = 0;
    } else {
        snprintf(ex->leaf, sizeof ex->leaf, "x%u", ++s->next_leaf);
    }
    leaf_track(s, ex->leaf);
    if (direct) {
        /* nothing to clone into */
    } else if (!s->cg) {
        ncg = 0; /* rootless without cgroups */
    } else if (sg_cgroup_leaf_create(s->cg, ex->leaf, &err) == 0) {
        if (s->fast_leaves) {
            /* one v2 leaf directory: init clones straight into it */
            cgfds[0] = sg_cgroup_leaf_dirfd(s->cg, ex->leaf, &err);
            ncg = cgfds[0] < 0 ? -1 : 1;
        } else {
            ncg = sg_cgroup_procs_fds(s->cg, ex->leaf, cgfds, &err);
        }
    }
    if (ncg < 0) {
        sg_err_prefix(&err, "cannot create the exec's cgroup");
        close(stdin_fd);
        sg_exec_req_free(&req);
        exec_fail(ex, err.msg);
        return;
    }
    if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || !env) {
        sg_err_sys(&err, "cannot create output pipes");
        for (int i = 0; i < 2; i++) {
            if (outp[i] >= 0)
                close(outp[i]);
            if (errp[i] >= 0)
                close(errp[i]);
        }
        for (int i = 0; i < ncg; i++)
            close(cgfds[i]);
        close(stdin_fd);
        sg_exec_req_free(&req);
        exec_fail(ex, err.msg);
        return;
    }
    /* Message: header, argv..., env..., cwd (NUL-separated). */
    static char msg[SG_SPAWN_MSG_MAX];
    sg_spawn_hdr sp = {.type = SG_SPAWN_EXEC, .exec_id = ex->id,
                       .uid = s->meta.uid, .gid = s->meta.gid,
                       .nfds_cg = (uint32_t)ncg, .cg_into = s->fast_leaves,
                       .rlimit_as = s->cg ? 0 : s->meta.memory};
    ssize_t enc = sg_spawn_encode(msg, sizeof msg, &sp, req.argv, env, cwd);
    size_t off = enc < 0 ? 0 : (size_t)enc;
    sg_exec_req_free(&req);

    int fds[3 + SG_CG_MAX_FDS] = {stdin_fd, outp[1], errp[1]};
    for (int i = 0; i < ncg; i++)
        fds[3 + i] = cgfds[i];
    int r = enc < 0 ? (int)enc : 0;
    bool handoff_lost = false;
    if (r == 0 && direct) {
        /* Kept until the child takes it (exec_handoff_done) or never does
         * (exec_handoff_failed). */
        ex->held_msg = malloc(off);
        if (ex->held_msg) {
            memcpy(ex->held_msg, msg, off);
            ex->held_len = off;
            memcpy(ex->hold_fds, fds, sizeof ex->hold_fds);
            ex->awaiting_ack = true;
            if (s->ready_pidfd >= 0) {
                syscall(SYS_pidfd_send_signal, s->ready_pidfd, SIGCONT, NULL, 0);
                sg_close_reset(&s->ready_pidfd);
            }
            handoff_lost = sg_seqpacket_send_typed(ex->ready_sock, SG_SPAWN_READY_TYPE, msg, off, fds, 3) < 0;
        } else {
            r = -ENOMEM;
        }
    } else if (r == 0) {
        r = sg_seqpacket_send(s->init_fd, msg, off, fds, (size_t)(3 + ncg));
    }
    for (int i = 0; i < 3 + ncg && !ex->awaiting_ack; i++)
        if (i != 0 || fds[i] >= 0)
            close(fds[i]);
    ex->out_fd = outp[0];
    ex->err_fd = errp[0];
    fcntl(ex->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(ex->err_fd, F_SETFL, O_NONBLOCK);
    uv_poll_init(&s->loop, &ex->out_poll, ex->out_fd);
    uv_poll_init(&s->loop, &ex->err_poll, ex->err_fd);
    ex->out_poll.data = ex->err_poll.data = ex;
    ex->out_active = ex->err_active = true;
    if (r < 0) {
        exec_fail(ex, r == -E2BIG ? "command line and environment are too long (at most 64 KiB)"
                      : r == -ENOMEM ? "out of memory" : "cannot reach the sandbox's init");
        return;
    }
    ex->start_ns = sg_now_mono_ns();
    /* Counters before the exec, read while the child starts; a caller
     * that wants the exit code alone, uncaptured, gets none of them. */
    bool want_stats = !ex->code_only || ex->cx;
    if (want_stats && s->fast_leaves)
        sg_cgroup_counters(s->cg, &ex->before.oom_kills, &ex->before.pids_max_hits, &err);
    else if (want_stats && s->cg)
        sg_cgroup_stats(s->cg, NULL, &ex->before, &err);
    uv_poll_start(&ex->out_poll, UV_READABLE, on_exec_output);
    uv_poll_start(&ex->err_poll, UV_READABLE, on_exec_output);
    uv_timer_start(&ex->timer, on_exec_timeout, (uint64_t)(ex->timeout_s * 1000.0), 0);
    if (ex->awaiting_ack) {
        if (handoff_lost) {
            exec_handoff_failed(ex);
        } else {
            /* The "k" is not polled for: it is read when init reports
             * the exit, or when this timer fires (a child stopped before
             * it took the exec), so an exec wakes the supervisor once less. */
            uv_timer_init(&s->loop, &ex->ack_timer);
            ex->ack_timer.data = ex;
            ex->pending_closes++;
            uv_timer_start(&ex->ack_timer, on_handoff_timeout, SG_SPAWN_READY_ACK_MS, 0);
        }
    }
    /* The next exec's ready child is made while this one runs: the caller
     * is waiting then, and a command runs on one CPU, so this work rarely
     * delays anyone (after the result it would meet the next exec). */
    ready_next(s);
}

/* ---- init connection -------------------------------------------------------- */

static void on_init_msg(uv_poll_t *p, int status, int events)
{
    sup *s = p->data;
    for (;;) {
        char buf[sizeof(sg_spawn_reply)];
        sg_spawn_reply rep;
        int fd = -1;
        size_t nfds = 1;
        ssize_t n = sg_seqpacket_recv(s->init_fd, buf, sizeof buf, MSG_DONTWAIT, &fd, &nfds);
        if (n == -EAGAIN || n == -EINTR)
            return;
        if (n <= 0 && n != -EMSGSIZE) {
            /* init is gone: the whole pid namespace died with it. */
            uv_poll_stop(p);
            s->init_dead = true;
            for (size_t i = s->nexecs; i-- > 0;)
                exec_fail(s->execs[i], "the sandbox's init died");
            return;
        }
        bool ok = n > 0 && sg_spawn_reply_decode(buf, (size_t)n, &rep) == 0;
        if (ok && rep.type == SG_SPAWN_READY && nfds == 1 && s->ready &&
            rep.exec_id == s->ready_exec_id && s->ready_sock < 0) {
            s->ready_sock = fd;
            s->ready_pid = rep.pid;
            sg_close_reset(&s->ready_pidfd);
            s->ready_pidfd = ready_pidfd_open(s->rl.dirfd);
            continue;
        }
        if (nfds == 1)
            close(fd);
        if (!ok)
            continue;
        exec_ctx *ex = exec_find(s, rep.exec_id);
        if (!ex) {
            if (rep.type == SG_SPAWN_EXITED && s->ready && rep.exec_id == s->ready_exec_id)
                ready_lost(s);
            continue;
        }
        if (rep.type == SG_SPAWN_SPAWNED) {
            if (rep.err) {
                char m[160];
                snprintf(m, sizeof m, "cannot start the command: %s", strerror(rep.err));
                exec_fail(ex, m);
            } else {
                ex->spawned = true;
                ex->pid = rep.pid;
            }
        } else if (rep.type == SG_SPAWN_EXITED) {
            if (ex->awaiting_ack) {
                handoff_check(ex, true);
                if (!ex->spawned)
                    continue; /* the ready child died before it took the exec */
            }
            ex->exited = true;
            ex->status = rep.status;
            ex->exit_rep = rep;
            exec_finish(ex);
        }
    }
}

/* ---- control socket ------------------------------------------------------------ */

static void on_client_closed(uv_handle_t *h)
{
    client *c = h->data;
    free(c);
}

static void client_close(client *c)
{
    if (c->closing)
        return;
    c->closing = true;
    sup *s = c->s;
    s->nclients--;
    while (c->qhead) {
        outmsg *m = c->qhead;
        c->qhead = m->next;
        free(m);
    }
    if (c->ex) {
        /* The caller went away mid-exec: stop the command, as a terminal
         * hangup would. */
        exec_ctx *ex = c->ex;
        ex->cl = NULL;
        c->ex = NULL;
        if (!ex->finished)
            exec_kill(ex);
    }
    uv_poll_stop(&c->poll);
    close(c->fd);
    uv_close((uv_handle_t *)&c->poll, on_client_closed);
}

static void sup_destroy(sup *s, client *c);

static void handle_request(sup *s, client *c, const char *buf, size_t len, int fd_in)
{
    sg_err err = {0};
    const char *op = NULL;
    sg_autojson json_t *req = sg_ctl_parse_req(buf, len, &op, &err);
    if (!req) {
        if (fd_in >= 0)
            close(fd_in);
        client_error(c, err.msg);
        return;
    }
    /* One request per connection. An exec's connection is the command's
     * own channel: after the request it carries signals only, so whatever
     * got hold of it could not destroy, abort or checkpoint with it. */
    if (c->requested) {
        if (fd_in >= 0)
            close(fd_in);
        client_error(c, c->ex ? "an exec's connection takes signals only, not another request"
                              : "one request per connection");
        return;
    }
    c->requested = true;
    if (strcmp(op, "exec") == 0) {
        if (fd_in >= 0 && !sg_ctl_stdin_ok(fd_in)) {
            close(fd_in);
            client_error(c, "an exec's stdin must be a pipe or /dev/null (sandglass exec relays "
                            "anything else): refused");
            return;
        }
        if (fd_in < 0)
            fd_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        exec_start(s, c, req, fd_in);
        return;
    }
    if (fd_in >= 0)
        close(fd_in);
    if (strcmp(op, "info") == 0) {
        json_t *j = sg_sandbox_meta_json(&s->meta);
        json_object_set_new(j, "running_execs", json_integer((json_int_t)s->nexecs));
        json_object_set_new(j, "cgroup_layout", json_string(sg_cgroup_layout_name(sg_cgroup_layout())));
        json_object_set_new(j, "state", json_string(s->init_dead ? "broken" : s->aborted ? "aborted" : "running"));
        if (s->aborted)
            json_object_set_new(j, "abort", json_pack("{s:s, s:s}", "by", s->abort_by, "reason", s->abort_reason));
        json_object_set_new(j, "caps_now", caps_now(s));
        client_send_json(c, SG_CTL_RESULT, j);
        c->close_after_flush = true;
        client_flush(c);
    } else if (strcmp(op, "destroy") == 0) {
        sup_destroy(s, c);
    } else if (strcmp(op, "checkpoint") == 0) {
        const char *label = json_string_value(json_object_get(req, "label"));
        char l[200];
        snprintf(l, sizeof l, "%.190s", label && *label ? label : "on request");
        json_t *info = NULL;
        if (!sup_checkpoint(s, l, &info)) {
            client_error(c, "cannot take a checkpoint (see the supervisor log)");
        } else {
            client_send_json(c, SG_CTL_RESULT, info);
            c->close_after_flush = true;
            client_flush(c);
        }
    } else if (strcmp(op, "checkpoints") == 0) {
        sg_checkpoint_info *v = NULL;
        size_t n = 0;
        if (s->ckpt)
            ckpt_flush_labels(s);
        int lrc = s->ckpt ? sg_ckpt_client_list(s->ckpt, &v, &n, &err) : -1;
        if (s->ckpt)
            ckpt_used(s);
        if (lrc < 0) {
            client_error(c, s->ckpt ? err.msg : "this sandbox has no checkpoint store");
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:I, s:I}", "id", v[i].id,
                    "label", v[i].label ? v[i].label : "", "time", (json_int_t)v[i].time,
                    "files", (json_int_t)v[i].files, "bytes", (json_int_t)v[i].bytes));
            sg_checkpoint_infos_free(v, n);
            client_send_json(c, SG_CTL_RESULT, json_pack("{s:o}", "checkpoints", arr));
            c->close_after_flush = true;
            client_flush(c);
        }
    } else if (strcmp(op, "rollback") == 0) {
        sup_rollback(s, c, req);
    } else if (strcmp(op, "abort") == 0) {
        const char *reason = json_string_value(json_object_get(req, "reason"));
        char r[256];
        snprintf(r, sizeof r, "operator: %s", reason && *reason ? reason : "abort requested");
        client_send_json(c, SG_CTL_RESULT, sup_abort(s, "operator", r));
        c->close_after_flush = true;
        client_flush(c);
    } else if (strcmp(op, "claim") == 0) {
        sup_claim(s, c, req);
    } else if (strcmp(op, "ping") == 0) {
        /* Answered once the loop serves: after the first checkpoint. */
        client_send_json(c, SG_CTL_RESULT, json_pack("{s:b}", "pong", 1));
        c->close_after_flush = true;
        client_flush(c);
    } else if (strcmp(op, "expire") == 0) {
        /* Destroy in after_s seconds (a negative value cancels): an agent
         * session that ended keeps its sandbox for rollback this long. */
        json_t *v = json_object_get(req, "after_s");
        double after = json_is_number(v) ? json_number_value(v) : -1;
        if (!s->expire_init) {
            uv_timer_init(&s->loop, &s->expire_timer);
            s->expire_timer.data = s;
            s->expire_init = true;
        }
        uv_timer_stop(&s->expire_timer);
        if (after >= 0 && after <= 365.0 * 24 * 3600)
            uv_timer_start(&s->expire_timer, on_expire, (uint64_t)(after * 1000.0), 0);
        client_send_json(c, SG_CTL_RESULT, json_pack("{s:b, s:f}", "expires", after >= 0, "after_s", after));
        c->close_after_flush = true;
        client_flush(c);
    } else if (strcmp(op, "resume") == 0) {
        if (!s->aborted) {
            client_error(c, "the session is not aborted");
        } else if (strcmp(s->abort_by, "cap") == 0) {
            char m[400];
            snprintf(m, sizeof m, "an abort by a cap stays: %s", s->abort_reason);
            client_error(c, m);
        } else {
            json_t *r = json_pack("{s:b, s:s}", "resumed", 1, "was", s->abort_reason);
            s->aborted = false;
            s->abort_reason[0] = s->abort_by[0] = '\0';
            sg_state_abort_clear(s->meta.id);
            if (s->expire_init)
                uv_timer_stop(&s->expire_timer); /* in use again: no expiry */
            capture_emit(s, "activity", json_pack("{s:s}", "state", "resumed"));
            ready_next(s);
            client_send_json(c, SG_CTL_RESULT, r);
            c->close_after_flush = true;
            client_flush(c);
        }
    } else {
        char m[200];
        snprintf(m, sizeof m, "unknown request op '%.100s'", op);
        client_error(c, m);
    }
}

static void on_client(uv_poll_t *p, int status, int events)
{
    client *c = p->data;
    if (status < 0) {
        client_close(c);
        return;
    }
    if (events & UV_WRITABLE) {
        client_flush(c);
        if (c->closing)
            return;
    }
    if (!(events & UV_READABLE))
        return;
    static char buf[SG_CTL_MSG_MAX];
    uint8_t type;
    int fds[1];
    size_t nfds = 1;
    ssize_t n = sg_seqpacket_recv_typed(c->fd, &type, buf, sizeof buf - 1, fds, &nfds);
    if (n == -EAGAIN || n == -EINTR)
        return;
    if (n < 0 || type == 0) {
        if (n == -EMSGSIZE) {
            client_error(c, "request too large");
            return;
        }
        client_close(c);
        return;
    }
    if (type == SG_CTL_REQ) {
        handle_request(c->s, c, buf, (size_t)n, nfds ? fds[0] : -1);
    } else if (type == SG_CTL_SIGNAL && n == 1 && c->ex && !c->ex->finished) {
        sg_spawn_hdr sp = {.type = SG_SPAWN_SIGNAL, .exec_id = c->ex->id, .sig = (unsigned char)buf[0]};
        if (send(c->s->init_fd, &sp, sizeof sp, MSG_NOSIGNAL) < 0)
            exec_kill(c->ex);
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
    } else {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        client_error(c, "unexpected message type");
    }
}

static void on_ctl_accept(uv_poll_t *p, int status, int events)
{
    sup *s = p->data;
    for (;;) {
        int fd = accept4(s->ctl_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        if (s->nclients >= SUP_MAX_CLIENTS) {
            close(fd);
            continue;
        }
        client *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->s = s;
        c->fd = fd;
        s->nclients++;
        uv_poll_init(&s->loop, &c->poll, fd);
        c->poll.data = c;
        uv_poll_start(&c->poll, UV_READABLE, on_client);
        /* A client sends its request right after connecting: it is usually
         * here already, and reading it now saves a trip through the loop
         * on the exec path (EAGAIN otherwise: the poll delivers it). */
        on_client(&c->poll, 0, UV_READABLE);
    }
}

/* ---- sandbox start and destroy ---------------------------------------------------- */

/* Connects to the sandbox init's socket (init serves one supervisor). */
static int connect_init(sup *s, sg_err *err)
{
    sg_autofree char *path = sg_state_sandbox_path(s->meta.id, "init.sock");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    sg_autoclose int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return sg_err_sys(err, "cannot connect to the sandbox's init");
    s->init_fd = sg_steal_fd(&fd);
    return 0;
}

/* sandglass-exec (next to this binary; $SANDGLASS_EXEC overrides) copied
 * into a sealed memfd that only allows execution: init's ready children
 * exec it from any mount namespace, and, as the sandbox user cannot read
 * it, the kernel makes them not dumpable (exec_main.c). -1 without it: the
 * children then wait as copies of init. */
static int exec_stub_memfd(void)
{
    char path[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_EXEC", "sandglass-exec", path, sizeof path) < 0)
        return -1;
    sg_autoclose int in = open(path, O_RDONLY | O_CLOEXEC);
    sg_autoclose int fd = memfd_create("sandglass-exec", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (in < 0 || fd < 0)
        return -1;
    char buf[16384];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (sg_write_all(fd, buf, (size_t)n) < 0)
            return -1;
    if (n < 0 || fchmod(fd, 0111) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return -1;
    return sg_steal_fd(&fd);
}

/* The seccomp program in a memfd, for sandglass-init's fd 6 (init loads
 * it on itself, see sg_seccomp_build_init). */
static int bpf_memfd(const sg_seccomp_prog *p)
{
    int fd = memfd_create("sg-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = p->len * sizeof *p->insns;
    if (sg_write_all(fd, p->insns, len) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* In the cloned child: fds to 3..6, then exec sandglass-init. Returns only
 * if the exec failed (the caller then runs init in this fork). */
static void exec_init_binary(const char *path, const sg_init_config *cfg, int bpf)
{
    int src[5] = {cfg->listen_fd, cfg->ready_fd, cfg->go_fd, bpf, cfg->exec_stub_fd};
    int n = cfg->exec_stub_fd >= 0 ? 5 : 4;
    int hi[5];
    for (int i = 0; i < n; i++)
        if ((hi[i] = fcntl(src[i], F_DUPFD, 100)) < 0)
            return;
    for (int i = 0; i < n; i++)
        if (dup2(hi[i], 3 + i) < 0)
            return;
    char uid[16], gid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)cfg->rootfs.uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)cfg->rootfs.gid);
    char *argv[] = {"sandglass-init", (char *)cfg->rootfs.workspace,
                    (char *)(cfg->rootfs.rootfs ? cfg->rootfs.rootfs : ""),
                    (char *)cfg->rootfs.hostname, uid, gid, cfg->rootfs.idmap ? "idmap" : "", NULL};
    char *envp[] = {NULL};
    close_range(3 + (unsigned)n, ~0U, 0);
    execve(path, argv, envp);
    /* fds 3..6 are ours now: put the originals back for the fallback */
    dup2(3, cfg->listen_fd);
    dup2(4, cfg->ready_fd);
    dup2(5, cfg->go_fd);
}

static int open_checkpoints(sup *s, sg_err *err);

static int start_init(sup *s, sg_err *err)
{
    sg_autofree char *init_sock = sg_state_sandbox_path(s->meta.id, "init.sock");
    sg_autoclose int lfd = sg_ctl_listen(init_sock, 4, err);
    if (lfd < 0)
        return -1;
    /* init blocks in accept via poll; keep its listening fd blocking-safe */
    int ready[2] = {-1, -1}, go[2] = {-1, -1};
    if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
        return sg_err_sys(err, "pipe");
    sg_autoclose int ready_r = ready[0];
    sg_autoclose int ready_w = ready[1];
    sg_autoclose int go_r = go[0];
    sg_autoclose int go_w = go[1];

    sg_init_config cfg = {
        .rootfs = {
            .workspace = s->meta.workspace, .rootfs = s->meta.rootfs,
            .hostname = "sandglass", .uid = s->meta.uid, .gid = s->meta.gid,
            .idmap = s->meta.idmap_workspace,
        },
        .seccomp = &s->prog, .listen_fd = lfd, .ready_fd = ready_w, .go_fd = go_r,
    };
    sg_autoclose int stub = exec_stub_memfd();
    cfg.exec_stub_fd = stub;
    /* The init runs as its own small binary when it is there. Not rootless:
     * there the init's uid is not 0 in its user namespace, and an execve
     * would drop the capabilities it needs to build the sandbox. */
    char init_bin[PATH_MAX];
    sg_autoclose int bpf = !s->rootless && sg_sibling_exe("SANDGLASS_INIT", "sandglass-init", init_bin, sizeof init_bin) == 0
                               ? bpf_memfd(&s->prog) : -1;
    /* Rootless: the namespaces belong to a new user namespace that maps
     * only the caller's uid and gid (no newuidmap needed). */
    unsigned long flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                          (s->rootless ? CLONE_NEWUSER : 0) | SIGCHLD;
    long pid = syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid < 0)
        return sg_err_sys(err, s->rootless ? "cannot create the sandbox's namespaces in a user namespace "
                                             "(are unprivileged user namespaces allowed?)"
                                           : "cannot create the sandbox's namespaces");
    if (pid == 0) {
        if (bpf >= 0)
            exec_init_binary(init_bin, &cfg, bpf);
        sg_init_main(&cfg); /* no sandglass-init binary: run it in this fork */
    }
    s->init_pid = (pid_t)pid;
    /* The checkpoint worker loads libgit2 and opens the store while init
     * builds its root and its move into the cgroup waits for an RCU grace
     * period. */
    if (open_checkpoints(s, err) < 0)
        return -1;
    /* The OOM killer must pick the user's processes, never the init that
     * holds the sandbox: init asks for -1000 (needs CAP_SYS_RESOURCE, which
     * some hosts withhold even from root) and exec children raise theirs
     * to SG_EXEC_OOM_SCORE_ADJ, which needs no privilege. */
    char adj[64];
    snprintf(adj, sizeof adj, "/proc/%d/oom_score_adj", s->init_pid);
    sg_write_knob_at(AT_FDCWD, adj, "-1000", NULL);
    close(sg_steal_fd(&ready_w));
    close(sg_steal_fd(&go_r));
    if (s->rootless) {
        char p[64], map[64];
        snprintf(p, sizeof p, "/proc/%d/setgroups", s->init_pid);
        if (sg_write_knob_at(AT_FDCWD, p, "deny", err) < 0)
            return -1;
        snprintf(p, sizeof p, "/proc/%d/uid_map", s->init_pid);
        snprintf(map, sizeof map, "%u %u 1", (unsigned)s->meta.uid, (unsigned)getuid());
        if (sg_write_knob_at(AT_FDCWD, p, map, err) < 0)
            return -1;
        snprintf(p, sizeof p, "/proc/%d/gid_map", s->init_pid);
        snprintf(map, sizeof map, "%u %u 1", (unsigned)s->meta.gid, (unsigned)getgid());
        if (sg_write_knob_at(AT_FDCWD, p, map, err) < 0)
            return -1;
    }
    if (write(go_w, "m", 1) != 1)
        return sg_err_sys(err, "cannot start the sandbox's init");
    if (s->cg && sg_cgroup_attach(s->cg, NULL, s->init_pid, err) < 0) {
        sg_err_prefix(err, "cannot place the sandbox's init in its cgroup");
        return -1;
    }
    if (write(go_w, "g", 1) != 1)
        return sg_err_sys(err, "cannot start the sandbox's init");
    char line[SG_ERR_MSG_MAX + 16];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(ready_r, line + have, sizeof line - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        if (have == sizeof line - 1)
            break;
    }
    line[have] = '\0';
    if (strncmp(line, "ok", 2) != 0) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        return sg_err_set(err, EIO, "%s", have ? (strncmp(line, "error: ", 7) == 0 ? line + 7 : line)
                                              : "the sandbox's init died during setup");
    }
    /* Connect like any (re)started supervisor would. */
    return connect_init(s, err);
}

static void stop_loop_handles(sup *s)
{
    uv_poll_stop(&s->ctl_poll);
    uv_signal_stop(&s->sigterm);
    uv_signal_stop(&s->sigint);
    uv_signal_stop(&s->sigchld);
    uv_timer_stop(&s->cap_timer);
    if (s->expire_init)
        uv_timer_stop(&s->expire_timer);
    uv_stop(&s->loop);
}

static void sup_destroy(sup *s, client *c)
{
    sg_err err = {0};
    s->destroying = true;
    /* The checkpoint worker is killed with the sandbox, never waited for
     * (it comes back only for a last diff of the capture). */
    if (s->ckpt)
        sg_ckpt_client_kill(s->ckpt);
    for (size_t i = s->nexecs; i-- > 0;) {
        exec_ctx *ex = s->execs[i];
        if (ex->cl) {
            /* Detached first: client_error may close the client at once,
             * and client_close would reach back into the exec. */
            client *cl = ex->cl;
            cl->ex = NULL;
            ex->cl = NULL;
            client_error(cl, "the sandbox was destroyed");
        }
    }
    uint64_t t0 = sg_now_mono_ns();
    int killed, populated;
    sg_err oerr = {0};
    sg_cgroup *still = s->cg ? sg_cgroup_open(s->meta.id, &oerr) : NULL;
    sg_cgroup_free(still);
    if (s->cg && !still && oerr.code == ENOENT) {
        /* The cgroup is gone (removed by hand, or by an earlier destroy
         * that did not finish): nothing can be in it. Destroy stays
         * idempotent: init, if it lives, goes the way of the rootless
         * kill, and the rest of the teardown goes on. */
        size_t left = pidns_kill(s, true, 10000);
        killed = left ? sg_err_set(&err, ETIMEDOUT, "%zu process(es) survived SIGKILL", left) : 0;
        populated = left != 0;
        sg_cgroup_free(s->cg);
        s->cg = NULL;
    } else if (s->cg) {
        killed = sg_cgroup_kill(s->cg, NULL, 10000, &err);
        populated = sg_cgroup_populated(s->cg, NULL, &err);
    } else {
        /* Killing pid 1 of a pid namespace kills all of it; then prove it. */
        size_t left = pidns_kill(s, true, 10000);
        killed = left ? sg_err_set(&err, ETIMEDOUT, "%zu process(es) survived SIGKILL", left) : 0;
        populated = left != 0;
    }
    double kill_ms = (double)(sg_now_mono_ns() - t0) / 1e6;
    if (s->init_pid > 0) {
        int st;
        if (waitpid(s->init_pid, &st, 0) == s->init_pid)
            s->init_pid = 0;
    }
    if (killed < 0 || populated != 0) {
        s->destroy_type = SG_CTL_ERROR;
        s->destroy_res = json_pack("{s:s}", "error", killed < 0 ? err.msg : "the sandbox's cgroup still holds processes");
        s->exit_code = 1;
    } else {
        int removed = s->cg ? sg_cgroup_remove(s->cg, &err) : 0;
        s->destroy_type = SG_CTL_RESULT;
        s->destroy_res = json_pack("{s:s, s:i, s:b, s:b, s:f}", "destroyed", s->meta.id,
                                   "processes_left", 0, "cgroup_empty", 1, "cgroup_removed", removed == 0,
                                   "kill_ms", kill_ms);
        s->exit_code = removed == 0 ? 0 : 1;
        capture_emit(s, "sandbox", json_pack("{s:s, s:O}", "state", "destroyed", "proof", s->destroy_res));
    }
    if (c) {
        /* Answered after the capture is delivered (sg_supervisor_run). */
        s->destroy_fd = dup(c->fd);
        if (s->destroy_fd >= 0) {
            int flags = fcntl(s->destroy_fd, F_GETFL);
            fcntl(s->destroy_fd, F_SETFL, flags & ~O_NONBLOCK);
        }
        /* The dup answers; close the client now so its struct is freed
         * (the shutdown walk closes leftover handles without freeing). */
        client_close(c);
    }
    stop_loop_handles(s);
}

static void on_signal(uv_signal_t *h, int signum)
{
    sup *s = h->data;
    if (signum == SIGCHLD) {
        int st;
        if (s->init_pid > 0 && waitpid(s->init_pid, &st, WNOHANG) == s->init_pid) {
            s->init_pid = 0;
            s->init_dead = true;
        }
        if (s->ckpt)
            sg_ckpt_client_reap(s->ckpt);
        return;
    }
    /* SIGINT/SIGTERM to a session is an abort, not a teardown: the
     * operator may still roll back or destroy. */
    if (!s->destroying)
        json_decref(sup_abort(s, "signal", signum == SIGINT ? "received SIGINT" : "received SIGTERM"));
}

static void close_walk(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Connects to the init of a sandbox whose supervisor died, and takes over
 * the leaves its execs left (background processes). */
static int adopt_init(sup *s, sg_err *err)
{
    s->cg = sg_cgroup_open(s->meta.id, err);
    if (!s->cg && !(s->rootless && err->code == ENOENT))
        return -1;
    oom_baseline(s);
    s->fast_leaves = s->cg && getenv("SANDGLASS_NO_FAST_LEAVES") == NULL &&
                     sg_cgroup_set_fast_leaves(s->cg, true) == 0;
    if (!sg_state_pid_alive(s->meta.init_pid))
        return sg_err_set(err, ESRCH, "the sandbox's init (pid %d) is gone", (int)s->meta.init_pid);
    s->init_pid = s->meta.init_pid;
    if (connect_init(s, err) < 0)
        return -1;
    sg_autostrv char **leaves = s->cg ? sg_cgroup_leaves(s->cg, err) : NULL;
    for (char **l = leaves; l && *l; l++) {
        leaf_track(s, *l);
        unsigned n;
        if (sscanf(*l, "x%u", &n) == 1 && n > s->next_exec)
            s->next_exec = n;
        if (sscanf(*l, "x%u", &n) == 1 && n > s->next_leaf)
            s->next_leaf = n;
    }
    s->exec_num = s->next_exec; /* numbers go on increasing past the old ones */
    /* An abort outlives the supervisor that made it. */
    s->aborted = sg_state_abort_load(s->meta.id, s->abort_by, sizeof s->abort_by, s->abort_reason,
                                     sizeof s->abort_reason) == 1;
    return 0;
}

/* The checkpoint worker runs in the sandbox's cgroup (ckptc.h), in its
 * own leaf SG_CKPT_CLIENT_LEAF: charged to the sandbox's limits, and killed
 * with it (kill_all_user_processes kills it before its proof; destroy's
 * recursive kill takes the leaf too). */
static int ckpt_join(void *ud, int fds[SG_CKPT_CLIENT_MAX_JOIN], sg_err *err)
{
    sup *s = ud;
    if (!s->cg || s->destroying)
        return 0; /* destroyed: its cgroup is going (a last diff only) */
    if (sg_cgroup_leaf_create(s->cg, SG_CKPT_CLIENT_LEAF, err) < 0)
        return -1;
    return sg_cgroup_join_fds(s->cg, SG_CKPT_CLIENT_LEAF, fds, err);
}

/* sandglass-ckpt next to this binary ($SANDGLASS_CKPT overrides). */
static int open_checkpoints(sup *s, sg_err *err)
{
    if (s->ckpt)
        return 0;
    char exe[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_CKPT", "sandglass-ckpt", exe, sizeof exe) < 0)
        return sg_err_set(err, ENOENT, "the checkpoint worker sandglass-ckpt is not next to the supervisor");
    sg_autofree char *repo = sg_state_sandbox_path(s->meta.id, "checkpoints.git");
    s->ckpt = sg_ckpt_client_new(exe, repo, s->meta.workspace);
    sg_ckpt_client_set_join(s->ckpt, ckpt_join, s);
    return sg_ckpt_client_start(s->ckpt, err);
}

/* After the loop: deliver the capture, answer destroy, remove the state. */
static int sup_shutdown(sup *s)
{
    sg_err err = {0};
    json_int_t undelivered = 0;
    if (s->cap) {
        if (s->capi->finish(s->cap, SG_CAPTURE_DRAIN_MS, &err) < 0) {
            undelivered = (json_int_t)s->capi->pending(s->cap);
            fprintf(stderr, "supervisor: %s\n", err.msg);
        }
        /* The capture closes its own handles (lws owns some of them)
         * before we close whatever else is left. */
        s->capi->close(s->cap);
        s->capi->free(s->cap);
        s->cap = NULL;
    }
    /* Execs still running when the sandbox went (a destroy, a signal):
     * a reference of the shutdown's own keeps each until its handles are
     * closed with the loop's, then what it holds is freed here. */
    for (size_t i = 0; i < s->nexecs; i++)
        s->execs[i]->pending_closes++;
    uv_walk(&s->loop, close_walk, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    for (size_t i = 0; i < s->nexecs; i++) {
        exec_ctx *ex = s->execs[i];
        if (ex->awaiting_ack) /* its handles are closed: only the memory and fds */
            for (int k = 0; k < 3; k++)
                sg_close_reset(&ex->hold_fds[k]);
        sg_close_reset(&ex->ready_sock);
        free(ex->held_msg);
        free(ex);
    }
    s->nexecs = 0;
    if (s->destroy_res && s->destroy_type == SG_CTL_RESULT)
        json_object_set_new(s->destroy_res, "events_undelivered", json_integer(undelivered));
    int code = s->exit_code;
    sg_autofree char *dir = sg_state_sandbox_path(s->meta.id, NULL);
    if (code == 0 && undelivered) {
        /* Never lose capture: the spool stays, under undelivered/, for
         * `sandglass flush`. */
        sg_autofree char *udir = sg_state_path("undelivered");
        sg_autofree char *dst = sg_strdup_printf("%s/%s", udir, s->meta.id);
        sg_autofree char *spool = sg_state_sandbox_path(s->meta.id, "spool");
        sg_autofree char *meta = sg_state_sandbox_path(s->meta.id, "meta.json");
        sg_autofree char *dmeta = sg_strdup_printf("%s/meta.json", dst);
        sg_autofree char *dspool = sg_strdup_printf("%s/spool", dst);
        if (sg_mkdir_p(dst, 0700, &err) < 0 || rename(meta, dmeta) < 0 || rename(spool, dspool) < 0) {
            fprintf(stderr, "supervisor: cannot keep the undelivered spool: %s\n", strerror(errno));
            code = 1;
        }
    }
    if (code == 0) {
        if (s->meta.own_workspace)
            sg_rm_rf(s->meta.workspace, &err);
        sg_state_archive_log(s->meta.id);
        sg_state_uid_release(s->meta.uid, s->meta.id);
        sg_rm_rf(dir, &err);
    }
    if (s->destroy_fd >= 0) {
        sg_autofree char *body = s->destroy_res ? sg_json_dump(s->destroy_res) : NULL;
        if (body)
            sg_seqpacket_send_typed(s->destroy_fd, s->destroy_type, body, strlen(body), NULL, 0);
        close(s->destroy_fd);
    }
    json_decref(s->destroy_res);
    return code;
}

int sg_supervisor_run(const char *id, int ready_fd, bool adopt)
{
    sg_err err = {0};
    sup *s = calloc(1, sizeof *s);
    if (!s)
        return 1;
    s->init_fd = s->ctl_fd = s->destroy_fd = s->ready_sock = s->ready_pidfd = -1;
    s->rl.dirfd = s->rl.cpufd = s->rl.evfd = -1;
    prctl(PR_SET_NAME, "sg-supervisor");
    signal(SIGPIPE, SIG_IGN);
    s->rootless = geteuid() != 0;
    uv_loop_init(&s->loop);
    int code = 1;
    if (!sg_state_dir(&err) || sg_sandbox_meta_load(id, &s->meta, &err) < 0)
        goto fail;
    if (adopt) {
        if (adopt_init(s, &err) < 0) {
            sg_err_prefix(&err, "cannot take over sandbox %s", id);
            goto fail;
        }
    } else {
        if (sg_seccomp_build_init(&s->prog, &err) < 0) {
            sg_err_prefix(&err, "cannot build the syscall filter");
            goto fail;
        }
        sg_cg_limits lim = {.memory_bytes = s->meta.memory, .pids = s->meta.pids, .cpus = s->meta.cpus};
        s->cg = sg_cgroup_create(id, &lim, &err);
        if (!s->cg && s->rootless) {
            /* No delegated cgroup: run without cgroup limits (README). */
            fprintf(stderr, "supervisor: rootless without a cgroup (%s): memory is an RLIMIT_AS per process, "
                            "no pids or cpu limit, kills by pid namespace\n", err.msg);
        } else if (!s->cg) {
            sg_err_prefix(&err, "cannot create the sandbox's cgroup");
            goto fail;
        }
        if (s->cg) {
            /* gc of another state directory must leave this cgroup alone */
            sg_err oerr = {0};
            const char *state = sg_state_dir(&oerr);
            if (!state || sg_cgroup_set_owner(s->cg, state, &oerr) < 0)
                sg_log_line("supervisor", "no owner mark on the cgroup (gc --orphan-cgroups will leave it "
                            "alone): %s", oerr.msg);
        }
        oom_baseline(s);
        s->fast_leaves = s->cg && getenv("SANDGLASS_NO_FAST_LEAVES") == NULL &&
                         sg_cgroup_set_fast_leaves(s->cg, true) == 0;
        if (start_init(s, &err) < 0)
            goto fail_cg;
    }
    s->meta.supervisor_pid = getpid();
    s->meta.init_pid = s->init_pid;
    if (sg_sandbox_meta_save(&s->meta, &err) < 0)
        goto fail_cg;
    if (s->meta.task) {
        if (capture_start(s, adopt, &err) < 0)
            goto fail_cg;
    }
    /* The first checkpoint is taken right after "ready", before the loop
     * serves any request: create does not wait for it. */
    if (open_checkpoints(s, &err) < 0)
        goto fail_cg;
    {
        sg_autofree char *ctl = sg_state_sandbox_path(id, "ctl.sock");
        s->ctl_fd = sg_ctl_listen(ctl, 128, &err);
        if (s->ctl_fd < 0)
            goto fail_cg;
    }
    uv_poll_init(&s->loop, &s->init_poll, s->init_fd);
    s->init_poll.data = s;
    uv_poll_start(&s->init_poll, UV_READABLE, on_init_msg);
    uv_poll_init(&s->loop, &s->ctl_poll, s->ctl_fd);
    s->ctl_poll.data = s;
    uv_poll_start(&s->ctl_poll, UV_READABLE, on_ctl_accept);
    s->start_ns = sg_now_mono_ns();
    uv_timer_init(&s->loop, &s->cap_timer);
    s->cap_timer.data = s;
    uv_timer_init(&s->loop, &s->ckpt_idle);
    s->ckpt_idle.data = s;
    if (s->meta.max_wall_s > 0 || s->meta.max_cpu_s > 0)
        uv_timer_start(&s->cap_timer, on_cap_timer, 100, 100);
    uv_signal_init(&s->loop, &s->sigchld);
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    s->sigchld.data = s->sigterm.data = s->sigint.data = s;
    uv_signal_start(&s->sigchld, on_signal, SIGCHLD);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);

    if (ready_fd >= 0) {
        sg_write_all(ready_fd, "ok\n", 3);
        close(ready_fd);
        ready_fd = -1;
    }
    if (!adopt && !sup_checkpoint(s, "create", NULL))
        fprintf(stderr, "supervisor: the first checkpoint of the workspace failed\n");
    ready_next(s);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    close(s->ctl_fd);
    s->ctl_fd = -1;
    code = sup_shutdown(s);
    goto out;

fail_cg:
    if (!adopt && s->init_pid > 0) {
        sg_err e2 = {0};
        if (s->cg)
            sg_cgroup_kill(s->cg, NULL, 5000, &e2);
        kill(s->init_pid, SIGKILL);
        waitpid(s->init_pid, NULL, 0);
    }
    if (!adopt && s->cg) {
        sg_err e2 = {0};
        sg_cgroup_remove(s->cg, &e2);
    }
fail:
    if (ready_fd >= 0) {
        dprintf(ready_fd, "error: %s\n", err.msg);
        close(ready_fd);
    } else {
        fprintf(stderr, "sandglass supervisor: %s\n", err.msg);
    }
    if (s->cap) {
        s->capi->close(s->cap);
        s->capi->free(s->cap);
    }
    uv_walk(&s->loop, close_walk, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
out:
    if (s->ctl_fd >= 0)
        close(s->ctl_fd);
    if (s->init_fd >= 0)
        close(s->init_fd);
    sg_ckpt_client_free(s->ckpt);
    for (size_t i = 0; i < s->nlabels; i++)
        free(s->labels[i]);
    free(s->labels);
    free(s->label_times);
    for (size_t i = 0; i < s->nspare; i++)
        open_leaf_close(&s->spare[i]);
    ready_close_fds(s);
    sg_cgroup_free(s->cg);
    sg_seccomp_prog_free(&s->prog);
    sg_sandbox_meta_clear(&s->meta);
    free(s->execs);
    for (size_t i = 0; i < s->nleaves; i++)
        free(s->leaves[i]);
    free(s->leaves);
    free(s);
    return code;
}

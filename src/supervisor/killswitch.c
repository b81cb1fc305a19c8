/* killswitch: the kill path beside the loop (killswitch.h). */
#include "supervisor/killswitch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "base/log.h"
#include "state/state.h"
#include "supervisor/caps.h"
#include "wire/ctl.h"

#define KS_DEADLINES 256 /* execs at once (SV_MAX_CLIENTS), and the wall */
#define KS_PENDING 32    /* connections whose first message is not here yet */
#define KS_QUEUE 256     /* accepted, not yet taken by the loop (SV_MAX_CLIENTS) */
#define KS_PEEK 4096     /* an abort or destroy request is far shorter */
#define KS_WAIT_MS 200   /* how long a silent connection is held before the loop gets it */
#define KS_LEAF_MAX 24
#define KS_EMPTY_MS 5000 /* how long an abort waits for its leaves to empty (the loop's too) */
#define KS_LEAF_PIDS 4096 /* bytes of one leaf's cgroup.procs read at once */
/* A connection the loop leaves waiting this long is the thread's: the loop
 * is busy. An idle loop accepts at once, in one hop (the exec path). */
#define KS_STEAL_NS (5 * 1000000ull)

/* A leaf's slot: its exec (running) and its time limit (at); free when
 * neither. Leaf "": the session's --max-wall. */
typedef struct ks_deadline {
    char leaf[KS_LEAF_MAX]; /* "": every leaf */
    uint64_t at;            /* 0: no deadline */
    unsigned num;           /* the exec's number, when running */
    bool running;
} ks_deadline;

typedef struct ks_pending {
    int fd;
    uint64_t until;
} ks_pending;

struct killswitch {
    pthread_t th;
    uv_async_t async;
    ks_conn_fn on_conn;
    ks_abort_fn on_abort;
    struct ucred abort_who;  /* the answered abort's requester (mu) */
    bool abort_who_known;
    char abort_who_via[SG_CTL_VIA_MAX + 1]; /* and whom it acted for (mu) */
    void *ud;
    int ctl_fd, wake_fd, cg_fd; /* cg_fd: the sandbox's v2 cgroup with cgroup.kill; -1: none */
    char *quota_path;           /* the sandbox's CPU quota (sg_cgroup_cpu_quota_path), or NULL */
    char *sandbox_id;           /* whose abort record an answered abort writes, or NULL */
    bool killed;                /* a request's kill is done, its connection queued (atomic) */
    pthread_mutex_t kill_mu;    /* held while the thread's abort kills (ks_kill_barrier) */
    pthread_mutex_t mu;         /* guards what follows */
    bool stop;
    ks_deadline dl[KS_DEADLINES];
    int queue[KS_QUEUE];
    size_t nqueue;
    ks_state st;       /* the loop's record, as it last said it (ks_publish) */
    ks_deadline snap[KS_DEADLINES]; /* the thread's copy of dl while it answers */
    bool abort_queued; /* the thread answered an abort the loop has not recorded */
    char abort_reason[SG_KS_REASON_MAX];
    char abort_via[SG_CTL_VIA_MAX + 1]; /* the peeked abort's "via" ("": none) */
    int *stop_flag; /* set to 1 when an abort or destroy comes (ks_set_stop_flag) */
    /* the thread's own */
    ks_pending pend[KS_PENDING];
    size_t npend;
    char peek[KS_PEEK];
};

/* ---- the kill --------------------------------------------------------- */

static void kill_leaf(int cg_fd, const char *leaf)
{
    char path[KS_LEAF_MAX + 16];
    snprintf(path, sizeof path, "%s/cgroup.kill", leaf);
    int fd = openat(cg_fd, path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return; /* gone already */
    if (write(fd, "1", 1) < 0) {
        /* a leaf removed under us: nothing left in it to kill */
    }
    close(fd);
}

/* Calls fn on every leaf: init lives in the sandbox's cgroup, each exec
 * (and the ready child) in a leaf below it. */
static void each_leaf(int cg_fd, void (*fn)(void *ctx, int cg_fd, const char *leaf), void *ctx)
{
    int dfd = openat(cg_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_type == DT_DIR && e->d_name[0] != '.' && strlen(e->d_name) < KS_LEAF_MAX)
            fn(ctx, cg_fd, e->d_name);
    closedir(d);
}

static void kill_one(void *ctx, int cg_fd, const char *leaf)
{
    (void)ctx;
    kill_leaf(cg_fd, leaf);
}

/* Every leaf but init's cgroup itself. */
static void kill_all(int cg_fd)
{
    each_leaf(cg_fd, kill_one, NULL);
}

static void kill_now(killswitch *k, const char *leaf)
{
    if (k->cg_fd < 0)
        return;
    if (leaf && *leaf)
        kill_leaf(k->cg_fd, leaf);
    else
        kill_all(k->cg_fd);
}

/* ---- the thread's own answer to an abort -------------------------------- */

#define KS_LEFT_MAX 64 /* pids a proof lists */

/* The pids in dir's cgroup.procs ("." the sandbox's own) but skip: how
 * many; the first in *first, up to max of them in out[*nout...]. */
static size_t procs_scan(int cg_fd, const char *dir, pid_t skip, pid_t *first, pid_t *out, size_t *nout,
                         size_t max)
{
    char path[KS_LEAF_MAX + 16], buf[KS_LEAF_PIDS];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    sg_autoclose int fd = openat(cg_fd, path, O_RDONLY | O_CLOEXEC);
    size_t count = 0;
    long v = -1;
    ssize_t r;
    while (fd >= 0 && (r = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] >= '0' && buf[i] <= '9' && v < 100000000) {
                v = (v < 0 ? 0 : v * 10) + (buf[i] - '0');
                continue;
            }
            if (v > 0 && (pid_t)v != skip) {
                if (!count && first)
                    *first = (pid_t)v;
                if (out && *nout < max)
                    out[(*nout)++] = (pid_t)v;
                count++;
            }
            v = -1;
        }
    }
    return count;
}

/* A process's parent and name, from /proc (false when it is gone). */
static bool proc_parent_comm(pid_t pid, pid_t *ppid, char *comm, size_t n)
{
    char path[32], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t r = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (r <= 0)
        return false;
    buf[r] = '\0';
    char *open_p = strchr(buf, '('), *close_p = strrchr(buf, ')');
    if (!open_p || !close_p || close_p < open_p || sscanf(close_p + 1, " %*c %d", ppid) != 1)
        return false;
    snprintf(comm, n, "%.*s", (int)(close_p - open_p - 1), open_p + 1);
    return true;
}

/* init's fork waiting for the next exec: a child of init that still has
 * init's name. Not a learner's process; not counted as killed. */
static bool is_ready_child(pid_t pid, pid_t init)
{
    char c1[32], c2[32];
    pid_t pp = 0, ip = 0;
    return proc_parent_comm(pid, &pp, c1, sizeof c1) && pp == init && proc_parent_comm(init, &ip, c2, sizeof c2) &&
           strcmp(c1, c2) == 0;
}

static bool snap_running(const killswitch *k, const char *leaf)
{
    for (size_t i = 0; i < KS_DEADLINES; i++)
        if (k->snap[i].running && strcmp(k->snap[i].leaf, leaf) == 0)
            return true;
    return false;
}

typedef struct ks_tally {
    const killswitch *k;
    size_t n, nlist;
    pid_t list[KS_LEFT_MAX];
} ks_tally;

/* Before the kill: the learner's processes in a leaf. */
static void tally_before(void *ctx, int cg_fd, const char *leaf)
{
    ks_tally *t = ctx;
    pid_t one = 0;
    size_t n = procs_scan(cg_fd, leaf, 0, &one, NULL, NULL, 0);
    if (n == 1 && !snap_running(t->k, leaf) && is_ready_child(one, t->k->st.init_pid))
        n = 0;
    t->n += n;
}

/* After it: what is still there. */
static void tally_after(void *ctx, int cg_fd, const char *leaf)
{
    ks_tally *t = ctx;
    t->n += procs_scan(cg_fd, leaf, 0, NULL, t->list, &t->nlist, KS_LEFT_MAX);
}

/* Waits (KS_EMPTY_MS at most) until no leaf holds a process and the
 * sandbox's own cgroup only init: the proof's figures in t. */
static void wait_empty(killswitch *k, ks_tally *t, pid_t init)
{
    uint64_t end = sg_now_mono_ns() + (uint64_t)KS_EMPTY_MS * 1000000u;
    for (unsigned round = 0;; round++) {
        *t = (ks_tally){.k = k};
        each_leaf(k->cg_fd, tally_after, t);
        t->n += procs_scan(k->cg_fd, ".", init, NULL, t->list, &t->nlist, KS_LEFT_MAX);
        if (!t->n || sg_now_mono_ns() > end)
            return;
        if (round % 64 == 63) /* a leaf made after the first pass */
            kill_all(k->cg_fd);
        poll(NULL, 0, 1);
    }
}

static double cgroup_cpu_s(int cg_fd)
{
    char buf[512];
    sg_autoclose int fd = openat(cg_fd, "cpu.stat", O_RDONLY | O_CLOEXEC);
    ssize_t r = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (r <= 0)
        return 0;
    buf[r] = '\0';
    unsigned long long us = 0;
    const char *p = strstr(buf, "usage_usec ");
    return p && sscanf(p + 11, "%llu", &us) == 1 ? (double)us / 1e6 : 0;
}

/* The abort record, as the loop's sv_killswitch_abort makes it (wire/ctl.h's
 * sg_ctl_abort_reply; cmd_abort prints it). */
static json_t *abort_record(killswitch *k, const ks_state *st, size_t killed, const ks_tally *left,
                            double kill_ms)
{
    sg_sandbox_meta m = {.max_wall_s = st->max_wall_s, .max_execs = st->max_execs,
                         .max_cpu_s = st->max_cpu_s, .max_calls = st->max_calls};
    sg_caps_usage u = {.wall_s = (double)(sg_now_mono_ns() - st->start_ns) / 1e9,
                       .cpu_s = cgroup_cpu_s(k->cg_fd), .execs = st->execs, .calls = st->calls};
    long long execs[KS_DEADLINES], pids[KS_LEFT_MAX];
    size_t nexecs = 0;
    for (size_t i = 0; i < KS_DEADLINES; i++)
        if (k->snap[i].running)
            execs[nexecs++] = k->snap[i].num;
    for (size_t i = 0; i < left->nlist; i++)
        pids[i] = left->list[i];
    sg_autojson json_t *caps = sg_caps_json(&m, &u);
    sg_ctl_abort_reply r = {
        .aborted = true, .by = "operator", .reason = k->abort_reason, .caps = caps, .killed = true,
        .kill = {.execs_killed = execs, .n_execs_killed = nexecs, .processes_killed = (long long)killed,
                 .proof = {.processes_left = (long long)left->n, .cgroup_holds_only_init = left->n == 0,
                           .init_pid = st->init_pid, .left_pids = pids, .n_left_pids = left->nlist,
                           .kill_ms = kill_ms, .checked_by = "cgroup"}},
    };
    return sg_ctl_encode_abort_reply(&r);
}

/* The sandbox's CPU quota lifted while an abort kills, as sg_cgroup_kill
 * does: a killed task must run to exit, and a cgroup at its quota waits
 * for the next period first (the attacks run at their quota). saved: the
 * quota to put back, "" for none. */
static void quota_lift(const killswitch *k, char *saved, size_t n)
{
    saved[0] = '\0';
    char cur[64];
    sg_autoclose int fd = k->quota_path ? open(k->quota_path, O_RDONLY | O_CLOEXEC) : -1;
    ssize_t r = fd < 0 ? -1 : read(fd, cur, sizeof cur - 1);
    if (r <= 0)
        return;
    cur[r] = '\0';
    cur[strcspn(cur, "\n")] = '\0';
    bool v2 = strstr(k->quota_path, "cpu.max") != NULL;
    if ((v2 && strncmp(cur, "max", 3) == 0) || (!v2 && strcmp(cur, "-1") == 0))
        return; /* no limit */
    const char *none = v2 ? "max" : "-1";
    sg_autoclose int wfd = open(k->quota_path, O_WRONLY | O_CLOEXEC);
    if (wfd >= 0 && write(wfd, none, strlen(none)) == (ssize_t)strlen(none))
        snprintf(saved, n, "%s", cur);
}

static void quota_restore(const killswitch *k, const char *saved)
{
    if (!saved[0])
        return;
    sg_autoclose int fd = open(k->quota_path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0 && write(fd, saved, strlen(saved)) < 0) {
        /* best effort, as sg_cgroup_kill's */
    }
}

static void send_result(int fd, json_t *rec)
{
    sg_autofree char *txt = rec ? sg_json_dump(rec) : NULL;
    json_decref(rec);
    size_t len = txt ? strlen(txt) : 0;
    if (!txt || len > SG_CTL_CHUNK)
        return; /* bounded lists: never */
    for (int tries = 0; tries < 50; tries++) {
        if (sg_seqpacket_send_typed(fd, SG_CTL_RESULT, txt, len, NULL, 0) == 0 || errno != EAGAIN)
            return;
        poll(&(struct pollfd){.fd = fd, .events = POLLOUT}, 1, 100);
    }
}

/* An operator's abort, answered here: killed, proved, answered from the
 * thread's record; the loop records it (ks_take_killed, on_abort). An
 * abort of an aborted session answers "already", as the loop does. */
static void answer_abort(killswitch *k, int fd)
{
    if (recv(fd, k->peek, sizeof k->peek, MSG_DONTWAIT) < 0) {
        /* peeked already: it is there */
    }
    /* who asked: the loop's record names them as it does for its own aborts */
    struct ucred who;
    socklen_t wlen = sizeof who;
    bool known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &who, &wlen) == 0;
    pthread_mutex_lock(&k->mu);
    ks_state st = k->st;
    char reason[sizeof k->st.reason] = "";
    if (!st.aborted) {
        k->abort_who = who;
        k->abort_who_known = known;
        memcpy(k->abort_who_via, k->abort_via, sizeof k->abort_who_via);
        k->st.aborted = true;
        snprintf(k->st.by, sizeof k->st.by, "operator");
        snprintf(k->st.reason, sizeof k->st.reason, "%s", k->abort_reason);
        memcpy(reason, k->st.reason, sizeof reason);
        k->abort_queued = true;
        memcpy(k->snap, k->dl, sizeof k->snap);
    }
    pthread_mutex_unlock(&k->mu);
    if (st.aborted) {
        send_result(fd, sg_ctl_encode_abort_reply(&(sg_ctl_abort_reply){
                            .aborted = true, .already = true, .by = st.by, .reason = st.reason}));
        close(fd);
        return;
    }
    /* The record before the answer (and before the loop's, which writes the
     * same after the wake-up below): a supervisor killed right after
     * answering leaves the session aborted for the one that takes over. */
    sg_err serr = {0};
    if (k->sandbox_id && sg_state_abort_save(k->sandbox_id, "operator", reason, &serr) < 0)
        sg_log(SG_LOG_ERROR, "%s", serr.msg);
    pthread_mutex_lock(&k->kill_mu);
    __atomic_store_n(&k->killed, true, __ATOMIC_RELEASE);
    ks_tally t = {.k = k};
    each_leaf(k->cg_fd, tally_before, &t);
    size_t killed = t.n;
    uint64_t t0 = sg_now_mono_ns();
    kill_all(k->cg_fd);
    /* after the kill (writing the quota may take a while): the killed run to exit */
    char quota[64];
    quota_lift(k, quota, sizeof quota);
    uv_async_send(&k->async); /* the loop records it, before init's reports of the deaths */
    wait_empty(k, &t, st.init_pid);
    quota_restore(k, quota);
    pthread_mutex_unlock(&k->kill_mu);
    send_result(fd, abort_record(k, &st, killed, &t, (double)(sg_now_mono_ns() - t0) / 1e6));
    close(fd);
}

/* ---- connections ------------------------------------------------------- */

/* Queues fd for the loop; with kill, marks the queue as holding a killing
 * request (ks_take_killed) and kills, in that order: init's reports of
 * the deaths can only come after the loop can see the mark. */
static void hand_over(killswitch *k, int fd, bool kill)
{
    pthread_mutex_lock(&k->mu);
    bool room = k->nqueue < KS_QUEUE;
    if (room)
        k->queue[k->nqueue++] = fd;
    pthread_mutex_unlock(&k->mu);
    if (!room)
        close(fd); /* as the loop did past its client limit */
    if (kill) {
        __atomic_store_n(&k->killed, room, __ATOMIC_RELEASE);
        kill_now(k, NULL);
    }
    if (room)
        uv_async_send(&k->async);
}

/* 2: the first message is an abort request (its reason in abort_reason),
 * 1: a destroy request, 0: anything else (or the peer went); -EAGAIN:
 * nothing yet. The message stays queued. */
static int peek_kill(killswitch *k, int fd)
{
    ssize_t n = recv(fd, k->peek, sizeof k->peek, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : 0;
    if (n < 2 || (size_t)n >= sizeof k->peek || (uint8_t)k->peek[0] != SG_CTL_REQ)
        return 0;
    /* an exec's request (the hot path) names neither */
    if (!memmem(k->peek, (size_t)n, "\"abort\"", 7) && !memmem(k->peek, (size_t)n, "\"destroy\"", 9))
        return 0;
    /* decoded as the loop will: only a request it carries out kills first
     * (not one of a newer version, or with a bad field) */
    sg_err err = {0};
    const char *op = NULL;
    json_t *req = sg_ctl_parse_req(k->peek + 1, (size_t)n - 1, &op, &err);
    sg_ctl_req r = {0};
    int kill = 0;
    if (req && sg_ctl_req_decode(req, &r, &err) == 0) {
        kill = r.op == SG_OP_DESTROY ? 1 : r.op == SG_OP_ABORT ? 2 : 0;
        if (kill == 2) { /* as sv_killswitch_op_abort words it */
            snprintf(k->abort_reason, sizeof k->abort_reason, "operator: %s",
                     r.u.abort.reason && *r.u.abort.reason ? r.u.abort.reason : "abort requested");
            snprintf(k->abort_via, sizeof k->abort_via, "%s", r.via ? r.via : "");
        }
    }
    sg_ctl_req_free(&r); /* nothing after a failed decode */
    json_decref(req);
    return kill;
}

/* A connection whose first message is here (or will not come): an abort
 * answered here, a destroy killed for first, then the loop's. */
static void settle_conn(killswitch *k, int fd, bool force)
{
    int r = peek_kill(k, fd);
    if (r == -EAGAIN && !force && k->npend < KS_PENDING) {
        k->pend[k->npend++] = (ks_pending){fd, sg_now_mono_ns() + (uint64_t)KS_WAIT_MS * 1000000u};
        return;
    }
    if (r > 0 && k->stop_flag) /* a cp off the loop stops at once */
        __atomic_store_n(k->stop_flag, 1, __ATOMIC_RELEASE);
    if (r == 2 && k->cg_fd >= 0 && k->on_abort)
        answer_abort(k, fd);
    else
        hand_over(k, fd, r > 0);
}

static void accept_all(killswitch *k)
{
    for (;;) {
        int fd = accept4(k->ctl_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        settle_conn(k, fd, false);
    }
}

/* ---- the thread -------------------------------------------------------- */

/* Kills for each deadline passed (and frees it); the next one, or 0. */
static uint64_t deadlines_due(killswitch *k, uint64_t now)
{
    uint64_t next = 0;
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < KS_DEADLINES; i++) {
        ks_deadline *d = &k->dl[i];
        if (!d->at)
            continue;
        if (d->at <= now) {
            /* under the lock: a ks_disarm that returned never sees a kill after it */
            kill_now(k, d->leaf);
            d->at = 0;
        } else if (!next || d->at < next) {
            next = d->at;
        }
    }
    pthread_mutex_unlock(&k->mu);
    return next;
}

static int poll_timeout(const killswitch *k, uint64_t next, uint64_t now)
{
    for (size_t i = 0; i < k->npend; i++)
        if (!next || k->pend[i].until < next)
            next = k->pend[i].until;
    if (!next)
        return -1;
    return next <= now ? 0 : (int)((next - now) / 1000000u) + 1;
}

/* The pending connections after a poll: each with its message (or its
 * time up) settled, the rest kept. */
static void pending_turn(killswitch *k, const struct pollfd *pfd, uint64_t now)
{
    size_t n = k->npend;
    ks_pending cur[KS_PENDING];
    memcpy(cur, k->pend, n * sizeof *cur);
    k->npend = 0;
    for (size_t i = 0; i < n; i++) {
        if (pfd[i].revents || cur[i].until <= now)
            settle_conn(k, cur[i].fd, cur[i].until <= now);
        else
            k->pend[k->npend++] = cur[i];
    }
}

/* Takes what waits on the control socket, if anything still does. */
static void steal(killswitch *k)
{
    struct pollfd c = {.fd = k->ctl_fd, .events = POLLIN};
    if (poll(&c, 1, 0) == 1 && (c.revents & POLLIN))
        accept_all(k);
}

static void *ks_main(void *arg)
{
    killswitch *k = arg;
    struct pollfd pfd[2 + KS_PENDING];
    uint64_t seen = 0; /* when a connection was seen waiting (0: none) */
    for (;;) {
        uint64_t now = sg_now_mono_ns();
        if (seen && now >= seen + KS_STEAL_NS) {
            seen = 0;
            steal(k);
        }
        uint64_t next = deadlines_due(k, now);
        if (seen && (!next || seen + KS_STEAL_NS < next))
            next = seen + KS_STEAL_NS;
        pfd[0] = (struct pollfd){.fd = k->wake_fd, .events = POLLIN};
        /* not watched again until the loop has had KS_STEAL_NS for it */
        pfd[1] = (struct pollfd){.fd = seen ? -1 : k->ctl_fd, .events = POLLIN};
        for (size_t i = 0; i < k->npend; i++)
            pfd[2 + i] = (struct pollfd){.fd = k->pend[i].fd, .events = POLLIN};
        size_t npend = k->npend;
        if (poll(pfd, 2 + npend, poll_timeout(k, next, now)) < 0 && errno != EINTR)
            continue;
        if (pfd[0].revents) {
            uint64_t v;
            if (read(k->wake_fd, &v, sizeof v) < 0) {
                /* counted wake-ups only: nothing to lose */
            }
            pthread_mutex_lock(&k->mu);
            bool stop = k->stop;
            pthread_mutex_unlock(&k->mu);
            if (stop)
                return NULL;
        }
        now = sg_now_mono_ns();
        pending_turn(k, pfd + 2, now);
        if (!seen && (pfd[1].revents & POLLIN))
            seen = now;
    }
}

static void wake(killswitch *k)
{
    uint64_t one = 1;
    if (write(k->wake_fd, &one, sizeof one) < 0) {
        /* the counter is full: the thread is awake already */
    }
}

/* ---- the loop's side --------------------------------------------------- */

static void take_queue(killswitch *k)
{
    int fds[KS_QUEUE];
    char reason[SG_KS_REASON_MAX];
    pthread_mutex_lock(&k->mu);
    size_t n = k->nqueue;
    memcpy(fds, k->queue, n * sizeof *fds);
    k->nqueue = 0;
    bool ab = k->abort_queued;
    k->abort_queued = false;
    struct ucred who = k->abort_who;
    bool known = k->abort_who_known;
    char via[SG_CTL_VIA_MAX + 1];
    memcpy(via, k->abort_who_via, sizeof via);
    if (ab)
        memcpy(reason, k->st.reason, sizeof reason);
    pthread_mutex_unlock(&k->mu);
    if (ab) /* before what came after it */
        k->on_abort(k->ud, reason, known ? &who : NULL, via);
    for (size_t i = 0; i < n; i++)
        k->on_conn(k->ud, fds[i]);
}

static void on_async(uv_async_t *a)
{
    killswitch *k = a->data;
    __atomic_store_n(&k->killed, false, __ATOMIC_RELAXED);
    take_queue(k);
}

void ks_set_stop_flag(killswitch *k, int *flag)
{
    if (k)
        k->stop_flag = flag; /* before the thread can see a request: set once, at start */
}

void ks_kill_barrier(killswitch *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->kill_mu);
    pthread_mutex_unlock(&k->kill_mu);
}

bool ks_kill_waiting(const killswitch *k)
{
    return k && __atomic_load_n(&k->killed, __ATOMIC_ACQUIRE);
}

bool ks_take_killed(killswitch *k)
{
    if (!k || !__atomic_exchange_n(&k->killed, false, __ATOMIC_ACQUIRE))
        return false;
    take_queue(k);
    return true;
}

static void on_async_closed(uv_handle_t *h)
{
    killswitch *k = h->data;
    free(k->quota_path);
    free(k->sandbox_id);
    free(k);
}

killswitch *ks_start(uv_loop_t *loop, int ctl_fd, const char *cg_dir, const char *quota_path,
                     const char *sandbox_id, ks_conn_fn on_conn, ks_abort_fn on_abort, void *ud, sg_err *err)
{
    killswitch *k = calloc(1, sizeof *k);
    if (!k) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    k->ctl_fd = ctl_fd;
    k->on_conn = on_conn;
    k->on_abort = on_abort;
    k->ud = ud;
    k->cg_fd = -1;
    k->quota_path = quota_path ? sg_xstrdup(quota_path) : NULL;
    k->sandbox_id = sandbox_id ? sg_xstrdup(sandbox_id) : NULL;
    if (cg_dir && faccessat(AT_FDCWD, cg_dir, F_OK, 0) == 0) {
        int fd = open(cg_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0 && faccessat(fd, "cgroup.kill", W_OK, 0) == 0)
            k->cg_fd = fd;
        else if (fd >= 0)
            close(fd);
    }
    k->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (k->wake_fd < 0) {
        sg_err_sys(err, "eventfd");
        goto fail;
    }
    if (uv_async_init(loop, &k->async, on_async) < 0) {
        sg_err_set(err, EIO, "cannot make the kill switch's wake-up");
        goto fail;
    }
    k->async.data = k;
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->kill_mu, NULL);
    int r = pthread_create(&k->th, NULL, ks_main, k);
    if (r != 0) {
        sg_err_set(err, r, "cannot start the kill switch's thread: %s", strerror(r));
        pthread_mutex_destroy(&k->mu);
        pthread_mutex_destroy(&k->kill_mu);
        sg_close_reset(&k->wake_fd);
        sg_close_reset(&k->cg_fd);
        uv_close((uv_handle_t *)&k->async, on_async_closed); /* frees k */
        return NULL;
    }
    return k;
fail:
    sg_close_reset(&k->wake_fd);
    sg_close_reset(&k->cg_fd);
    free(k->quota_path);
    free(k->sandbox_id);
    free(k);
    return NULL;
}

static size_t slot_of(killswitch *k, const char *leaf)
{
    size_t free_slot = KS_DEADLINES;
    for (size_t i = 0; i < KS_DEADLINES; i++) {
        bool used = k->dl[i].at || k->dl[i].running;
        if (used && strcmp(k->dl[i].leaf, leaf) == 0)
            return i;
        if (!used && free_slot == KS_DEADLINES)
            free_slot = i;
    }
    return free_slot;
}

void ks_arm(killswitch *k, const char *leaf, uint64_t deadline_ns)
{
    if (!k || !deadline_ns)
        return;
    leaf = leaf ? leaf : "";
    if (strlen(leaf) >= KS_LEAF_MAX)
        return;
    pthread_mutex_lock(&k->mu);
    size_t i = slot_of(k, leaf);
    if (i < KS_DEADLINES) { /* else: the loop's own timer still fires */
        snprintf(k->dl[i].leaf, sizeof k->dl[i].leaf, "%s", leaf);
        k->dl[i].at = deadline_ns;
    }
    pthread_mutex_unlock(&k->mu);
    wake(k);
}

void ks_exec_begin(killswitch *k, const char *leaf, unsigned num)
{
    if (!k || !leaf || !*leaf || strlen(leaf) >= KS_LEAF_MAX)
        return;
    pthread_mutex_lock(&k->mu);
    size_t i = slot_of(k, leaf);
    if (i < KS_DEADLINES) { /* else: an abort answered here does not name it (the event does) */
        snprintf(k->dl[i].leaf, sizeof k->dl[i].leaf, "%s", leaf);
        k->dl[i].num = num;
        k->dl[i].running = true;
    }
    pthread_mutex_unlock(&k->mu);
}

void ks_disarm(killswitch *k, const char *leaf)
{
    if (!k)
        return;
    leaf = leaf ? leaf : "";
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < KS_DEADLINES; i++)
        if ((k->dl[i].at || k->dl[i].running) && strcmp(k->dl[i].leaf, leaf) == 0)
            k->dl[i].at = 0, k->dl[i].running = false;
    pthread_mutex_unlock(&k->mu);
}

void ks_publish(killswitch *k, const ks_state *st)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->st = *st;
    pthread_mutex_unlock(&k->mu);
}

void ks_stop(killswitch *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_mutex_unlock(&k->mu);
    wake(k);
    pthread_join(k->th, NULL);
    for (size_t i = 0; i < k->npend; i++)
        close(k->pend[i].fd);
    for (size_t i = 0; i < k->nqueue; i++)
        close(k->queue[i]);
    k->npend = k->nqueue = 0;
    sg_close_reset(&k->wake_fd);
    sg_close_reset(&k->cg_fd);
    pthread_mutex_destroy(&k->mu);
    pthread_mutex_destroy(&k->kill_mu);
    uv_close((uv_handle_t *)&k->async, on_async_closed);
}

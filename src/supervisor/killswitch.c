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
#include "base/util.h"
#include "wire/ctl.h"

#define KS_DEADLINES 64  /* armed at once: execs with a time limit, and the wall */
#define KS_PENDING 32    /* connections whose first message is not here yet */
#define KS_QUEUE 256     /* accepted, not yet taken by the loop (SV_MAX_CLIENTS) */
#define KS_PEEK 4096     /* an abort or destroy request is far shorter */
#define KS_WAIT_MS 200   /* how long a silent connection is held before the loop gets it */
#define KS_LEAF_MAX 24
/* A connection the loop leaves waiting this long is the thread's: the loop
 * is busy. An idle loop accepts at once, in one hop (the exec path). */
#define KS_STEAL_NS (5 * 1000000ull)

typedef struct ks_deadline {
    char leaf[KS_LEAF_MAX]; /* "": every leaf */
    uint64_t at;            /* 0: free */
} ks_deadline;

typedef struct ks_pending {
    int fd;
    uint64_t until;
} ks_pending;

struct killswitch {
    pthread_t th;
    uv_async_t async;
    ks_conn_fn on_conn;
    void *ud;
    int ctl_fd, wake_fd, cg_fd; /* cg_fd: the sandbox's v2 cgroup with cgroup.kill; -1: none */
    bool killed;                /* a request's kill is done, its connection queued (atomic) */
    pthread_mutex_t mu;         /* guards what follows */
    bool stop;
    ks_deadline dl[KS_DEADLINES];
    int queue[KS_QUEUE];
    size_t nqueue;
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

/* Every leaf but init's cgroup itself: init lives in the sandbox's
 * cgroup, each exec (and the ready child, the checkpoint worker) in a
 * leaf below it. */
static void kill_all(int cg_fd)
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
            kill_leaf(cg_fd, e->d_name);
    closedir(d);
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

/* 1: the first message is an abort or a destroy request; 0: anything else
 * (or the peer went); -EAGAIN: nothing yet. The message stays queued. */
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
    int kill = req && sg_ctl_req_decode(req, &r, &err) == 0 && (r.op == SG_OP_ABORT || r.op == SG_OP_DESTROY);
    sg_ctl_req_free(&r); /* nothing after a failed decode */
    json_decref(req);
    return kill;
}

/* A connection whose first message is here (or will not come): killed
 * for first if it asks to, then the loop's. */
static void settle_conn(killswitch *k, int fd, bool force)
{
    int r = peek_kill(k, fd);
    if (r == -EAGAIN && !force && k->npend < KS_PENDING) {
        k->pend[k->npend++] = (ks_pending){fd, sg_now_mono_ns() + (uint64_t)KS_WAIT_MS * 1000000u};
        return;
    }
    hand_over(k, fd, r == 1);
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
    pthread_mutex_lock(&k->mu);
    size_t n = k->nqueue;
    memcpy(fds, k->queue, n * sizeof *fds);
    k->nqueue = 0;
    pthread_mutex_unlock(&k->mu);
    for (size_t i = 0; i < n; i++)
        k->on_conn(k->ud, fds[i]);
}

static void on_async(uv_async_t *a)
{
    killswitch *k = a->data;
    __atomic_store_n(&k->killed, false, __ATOMIC_RELAXED);
    take_queue(k);
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
    free(h->data);
}

killswitch *ks_start(uv_loop_t *loop, int ctl_fd, const char *cg_dir, ks_conn_fn on_conn, void *ud, sg_err *err)
{
    killswitch *k = calloc(1, sizeof *k);
    if (!k) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    k->ctl_fd = ctl_fd;
    k->on_conn = on_conn;
    k->ud = ud;
    k->cg_fd = -1;
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
    int r = pthread_create(&k->th, NULL, ks_main, k);
    if (r != 0) {
        sg_err_set(err, r, "cannot start the kill switch's thread: %s", strerror(r));
        pthread_mutex_destroy(&k->mu);
        sg_close_reset(&k->wake_fd);
        sg_close_reset(&k->cg_fd);
        uv_close((uv_handle_t *)&k->async, on_async_closed); /* frees k */
        return NULL;
    }
    return k;
fail:
    sg_close_reset(&k->wake_fd);
    sg_close_reset(&k->cg_fd);
    free(k);
    return NULL;
}

static size_t slot_of(killswitch *k, const char *leaf)
{
    size_t free_slot = KS_DEADLINES;
    for (size_t i = 0; i < KS_DEADLINES; i++) {
        if (k->dl[i].at && strcmp(k->dl[i].leaf, leaf) == 0)
            return i;
        if (!k->dl[i].at && free_slot == KS_DEADLINES)
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

void ks_disarm(killswitch *k, const char *leaf)
{
    if (!k)
        return;
    leaf = leaf ? leaf : "";
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < KS_DEADLINES; i++)
        if (k->dl[i].at && strcmp(k->dl[i].leaf, leaf) == 0)
            k->dl[i].at = 0;
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
    uv_close((uv_handle_t *)&k->async, on_async_closed);
}

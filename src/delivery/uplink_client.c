/* uplink_client: the supervisor's side of the uplink daemon. See delivery/uplink_client.h. */
#include "delivery/uplink_client.h"


#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "sandbox/cgroup.h"
#include "state/state.h"
#include "wire/seqpacket.h"
#include "wire/uplinkd.h"

/* The replies' event names are the uplink's event types. */
_Static_assert(SG_UPLINKD_EV_CONNECTED == (int)SG_UPLINK_CONNECTED && SG_UPLINKD_EV_DISCONNECTED == (int)SG_UPLINK_DISCONNECTED &&
                   SG_UPLINKD_EV_REFUSED == (int)SG_UPLINK_REFUSED && SG_UPLINKD_EV_ERROR == (int)SG_UPLINK_ERROR,
               "wire/uplinkd.h follows delivery/uplink.h");

struct sg_uplink_client {
    uv_loop_t *loop;
    sg_spool *spool;
    sg_uplinkd_msg hello;    /* its json owns the strings; seq set at each connect */
    char *sock_path;
    int fd;                  /* -1: not connected */
    uv_poll_t poll;
    bool polling;            /* poll initialised on fd, not yet closed */
    bool poll_closing;       /* its close is pending: not reusable yet */
    uv_timer_t retry, drain_timer, resend;
    uint32_t retry_ms;
    uint64_t spawned_ns;     /* when we last started a daemon */
    int64_t sent_synced;     /* the last synced seq the daemon was told */
    char rbuf[SG_UPLINKD_MSG_MAX]; /* one message from the daemon */
    bool closing, drain_timed_out;
    bool refused;            /* the daemon refused the hello: retry slowly */
    bool reached, failed;    /* the ingest was connected / an attempt failed, ever */
    int open_handles;
    sg_uplink_event_fn ev_fn;
    void *ev_ud;
};

static void on_handle_closed(uv_handle_t *h)
{
    sg_uplink_client *u = h->data;
    if (h == (uv_handle_t *)&u->poll)
        u->poll_closing = false;
    u->open_handles--;
}

static void emit(sg_uplink_client *u, sg_uplink_event_type type, int code, const char *reason,
                 uint32_t retry_ms)
{
    if (!u->ev_fn)
        return;
    sg_uplink_event ev = {.type = type, .code = code, .reason = reason ? reason : "",
                          .retry_ms = retry_ms};
    u->ev_fn(u->ev_ud, &ev);
}

static void schedule_retry(sg_uplink_client *u);
static void on_readable(uv_poll_t *p, int status, int events);

static void disconnect(sg_uplink_client *u)
{
    if (u->fd < 0)
        return;
    if (u->polling) {
        uv_poll_stop(&u->poll);
        u->open_handles++;
        u->poll_closing = true;
        uv_close((uv_handle_t *)&u->poll, on_handle_closed);
        u->polling = false;
    }
    close(u->fd);
    u->fd = -1;
}

/* Starts sandglass-uplink detached (its own session, not our child: it
 * serves every supervisor of this state directory and outlives us). */
static int spawn_daemon(sg_uplink_client *u, sg_err *err)
{
    char exe[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_UPLINK", "sandglass-uplink", exe, sizeof exe) < 0)
        return sg_err_set(err, ENOENT, "the uplink daemon sandglass-uplink is not next to the supervisor");
    sg_autofree char *log_path = sg_state_path("uplink.log");
    pid_t mid = fork();
    if (mid < 0)
        return sg_err_sys(err, "fork");
    if (mid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid();
        if (fork() != 0)
            _exit(0);
        /* It serves every sandbox: not charged to ours, and never holding
         * our supervisor's cgroup busy. */
        sg_cgroup_supervisor_leave();
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int log = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (null < 0 || log < 0 || dup2(null, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
            _exit(126);
        close_range(3, ~0U, 0);
        /* It outlives us: hold no directory busy (our cwd may be a mount
         * that goes away). */
        if (chdir("/") < 0)
            _exit(126);
        execl(exe, "sandglass-uplink", (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR)
        ;
    u->spawned_ns = sg_now_mono_ns();
    return 0;
}

static int send_msg(sg_uplink_client *u, const sg_uplinkd_msg *m)
{
    sg_autofree char *text = sg_uplinkd_msg_encode(m);
    if (!text)
        return -ENOMEM;
    return sg_seqpacket_send(u->fd, text, strlen(text), NULL, 0);
}

/* One attempt: connect and say hello, else start a daemon if none runs. */
static void try_connect(sg_uplink_client *u)
{
    if (u->closing || u->fd >= 0)
        return;
    if (u->poll_closing) {
        schedule_retry(u); /* the last connection's handle is still closing */
        return;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", u->sock_path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        u->fd = fd;
        int64_t synced = sg_spool_synced_seq(u->spool);
        u->hello.seq = synced;
        if (send_msg(u, &u->hello) < 0) {
            disconnect(u);
            schedule_retry(u);
            return;
        }
        u->sent_synced = synced;
        u->retry_ms = 0;
        uv_poll_init(u->loop, &u->poll, fd);
        u->poll.data = u;
        u->polling = true;
        uv_poll_start(&u->poll, UV_READABLE | UV_DISCONNECT, on_readable);
        return;
    }
    int e = errno;
    if (fd >= 0)
        close(fd);
    /* No daemon (no socket, or a dead one's): start one, at most once a
     * second; it takes a few ms to listen. */
    if ((e == ENOENT || e == ECONNREFUSED) &&
        (!u->spawned_ns || sg_now_mono_ns() - u->spawned_ns > 1000000000ull)) {
        sg_err err = {0};
        if (spawn_daemon(u, &err) < 0)
            emit(u, SG_UPLINK_ERROR, 0, err.msg, SG_UPLINK_CLIENT_RETRY_MAX_MS);
    }
    schedule_retry(u);
}

static void on_retry(uv_timer_t *t)
{
    try_connect(t->data);
}

static void schedule_retry(sg_uplink_client *u)
{
    if (u->closing)
        return;
    u->retry_ms = u->retry_ms ? u->retry_ms * 2 : SG_UPLINK_CLIENT_RETRY_MIN_MS;
    if (u->retry_ms > SG_UPLINK_CLIENT_RETRY_MAX_MS)
        u->retry_ms = SG_UPLINK_CLIENT_RETRY_MAX_MS;
    uv_timer_start(&u->retry, on_retry, u->retry_ms, 0);
}

static void lost(sg_uplink_client *u, const char *why)
{
    disconnect(u);
    /* A daemon that died is replaced at once; one that refused our hello
     * (a secret it cannot read, a spool it cannot open) is asked again
     * every SG_UPLINK_CLIENT_RETRY_MAX_MS, each refusal logged. */
    u->retry_ms = u->refused ? SG_UPLINK_CLIENT_RETRY_MAX_MS : 0;
    u->refused = false;
    emit(u, SG_UPLINK_DISCONNECTED, 0, why,
         u->retry_ms ? SG_UPLINK_CLIENT_RETRY_MAX_MS : SG_UPLINK_CLIENT_RETRY_MIN_MS);
    schedule_retry(u);
}

static void handle_message(sg_uplink_client *u, const char *buf, size_t len)
{
    sg_err err = {0};
    sg_uplinkd_reply r;
    if (sg_uplinkd_reply_parse(buf, len, &r, &err) < 0) {
        emit(u, SG_UPLINK_ERROR, 0, err.msg, 0);
        return;
    }
    if (r.kind == SG_UPLINKD_ACK) {
        /* Persisted and trimmed here: the daemon only reads the spool. */
        if (sg_spool_ack(u->spool, r.ack, &err) < 0)
            emit(u, SG_UPLINK_ERROR, 0, err.msg, 0);
    } else if (r.kind == SG_UPLINKD_EVENT) {
        if (r.event == SG_UPLINKD_EV_CONNECTED)
            u->reached = true;
        else if (r.event == SG_UPLINKD_EV_DISCONNECTED || r.event == SG_UPLINKD_EV_REFUSED)
            u->failed = true;
        emit(u, (sg_uplink_event_type)r.event, r.code, r.reason, r.retry_ms);
    } else {
        u->refused = true;
        char m[600];
        snprintf(m, sizeof m, "the uplink daemon refused this sandbox: %.500s", r.reason);
        emit(u, SG_UPLINK_ERROR, 0, m, 0);
    }
    sg_uplinkd_reply_clear(&r);
}

static void on_readable(uv_poll_t *p, int status, int events)
{
    sg_uplink_client *u = p->data;
    if (status < 0) {
        lost(u, "the uplink daemon's connection failed");
        return;
    }
    char *buf = u->rbuf;
    while (u->fd >= 0) {
        ssize_t n = sg_seqpacket_recv(u->fd, buf, sizeof u->rbuf - 1, MSG_DONTWAIT, NULL, NULL);
        if (n == -EAGAIN || n == -EINTR)
            return;
        if (n <= 0) {
            lost(u, n == 0 ? "the uplink daemon went away" : "cannot read from the uplink daemon");
            return;
        }
        handle_message(u, buf, (size_t)n);
    }
}

/* The hello, its strings copied into its json (NULL: one is not UTF-8). */
static int hello_init(sg_uplinkd_msg *h, const sg_uplink_client_config *cfg)
{
    *h = (sg_uplinkd_msg){.op = SG_UPLINKD_HELLO, .secret_create = cfg->secret_create};
    h->json = json_pack("[s, s, s, s, s, s, s*]", cfg->sandbox, cfg->url, cfg->spool_dir, cfg->secret_file,
                        cfg->learner, cfg->task, cfg->ca_file);
    if (!h->json)
        return -1;
    const char **f[] = {&h->sandbox, &h->url, &h->spool, &h->secret_file, &h->learner, &h->task, &h->ca_file};
    for (size_t i = 0; i < SG_ARRAY_LEN(f); i++)
        *f[i] = json_string_value(json_array_get(h->json, i)); /* ca_file: NULL for null */
    return 0;
}

sg_uplink_client *sg_uplink_client_new(uv_loop_t *loop, const sg_uplink_client_config *cfg, sg_spool *spool,
                           sg_err *err)
{
    if (!cfg->sandbox || !cfg->url || !cfg->learner || !cfg->task || !cfg->spool_dir ||
        !cfg->secret_file) {
        sg_err_set(err, EINVAL, "uplink: sandbox, url, learner, task, spool and secret are required");
        return NULL;
    }
    if (!sg_state_dir(err))
        return NULL;
    sg_uplink_client *u = calloc(1, sizeof *u);
    if (!u) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    u->loop = loop;
    u->spool = spool;
    u->fd = -1;
    u->sent_synced = -1;
    u->sock_path = sg_state_path("uplink.sock");
    if (hello_init(&u->hello, cfg) < 0 || strlen(u->sock_path) >= sizeof((struct sockaddr_un *)0)->sun_path) {
        sg_err_set(err, u->hello.json ? ENAMETOOLONG : EINVAL,
                   u->hello.json ? "uplink: the state directory's path is too long for a socket"
                                 : "uplink: sandbox, url, learner and task must be UTF-8");
        sg_uplinkd_msg_clear(&u->hello);
        free(u->sock_path);
        free(u);
        return NULL;
    }
    uv_timer_init(loop, &u->retry);
    uv_timer_init(loop, &u->drain_timer);
    uv_timer_init(loop, &u->resend);
    u->retry.data = u->drain_timer.data = u->resend.data = u;
    u->open_handles = 3;
    try_connect(u);
    return u;
}

void sg_uplink_client_set_event_cb(sg_uplink_client *u, sg_uplink_event_fn fn, void *ud)
{
    u->ev_fn = fn;
    u->ev_ud = ud;
}

static void on_resend(uv_timer_t *t);

void sg_uplink_client_notify(sg_uplink_client *u)
{
    if (!u || u->fd < 0 || u->closing)
        return;
    int64_t synced = sg_spool_synced_seq(u->spool);
    if (synced <= u->sent_synced)
        return;
    int r = send_msg(u, &(sg_uplinkd_msg){.op = SG_UPLINKD_SYNCED, .seq = synced});
    if (r == 0)
        u->sent_synced = synced;
    else if (r == -EAGAIN)
        uv_timer_start(&u->resend, on_resend, 10, 0); /* the daemon is behind: soon */
}

static void on_resend(uv_timer_t *t)
{
    sg_uplink_client_notify(t->data);
}

static void on_drain_timeout(uv_timer_t *t)
{
    sg_uplink_client *u = t->data;
    u->drain_timed_out = true;
}

static bool drained(const sg_uplink_client *u)
{
    return sg_spool_acked_seq(u->spool) >= sg_spool_synced_seq(u->spool);
}

int sg_uplink_client_drain(sg_uplink_client *u, uint64_t timeout_ms, sg_err *err)
{
    if (drained(u))
        return 0;
    if (u->closing)
        return sg_err_set(err, ESHUTDOWN, "uplink is closed");
    if (u->fd < 0) {
        u->retry_ms = 0;
        try_connect(u); /* cut a pending wait short */
    }
    sg_uplink_client_notify(u);
    /* An ingest never reached in this supervisor's life (every attempt
     * failed) is not waited for long: the spool is kept for `flush`, and a
     * destroy with the ingest down took the whole timeout. */
    bool unreached = !u->reached && u->failed;
    if (unreached && timeout_ms > SG_UPLINK_CLIENT_UNREACHED_DRAIN_MS)
        timeout_ms = SG_UPLINK_CLIENT_UNREACHED_DRAIN_MS;
    u->drain_timed_out = false;
    uv_timer_start(&u->drain_timer, on_drain_timeout, timeout_ms, 0);
    while (!drained(u) && !u->drain_timed_out)
        uv_run(u->loop, UV_RUN_ONCE);
    uv_timer_stop(&u->drain_timer);
    if (drained(u))
        return 0;
    return sg_err_set(err, ETIMEDOUT,
                      "uplink: %" PRIu64 " events not acknowledged by the ingest after %" PRIu64 " ms%s",
                      sg_spool_pending(u->spool), timeout_ms,
                      unreached ? " (it was never reached: every attempt failed)" : "");
}

void sg_uplink_client_close(sg_uplink_client *u)
{
    if (!u || u->closing)
        return;
    u->closing = true;
    disconnect(u);
    uv_timer_stop(&u->retry);
    uv_timer_stop(&u->drain_timer);
    uv_timer_stop(&u->resend);
    uv_close((uv_handle_t *)&u->retry, on_handle_closed);
    uv_close((uv_handle_t *)&u->drain_timer, on_handle_closed);
    uv_close((uv_handle_t *)&u->resend, on_handle_closed);
}

void sg_uplink_client_free(sg_uplink_client *u)
{
    if (!u)
        return;
    sg_uplink_client_close(u);
    for (int i = 0; i < 1000 && u->open_handles > 0; i++)
        uv_run(u->loop, UV_RUN_NOWAIT);
    sg_uplinkd_msg_clear(&u->hello);
    free(u->sock_path);
    free(u);
}

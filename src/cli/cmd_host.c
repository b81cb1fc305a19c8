/* sandglass host: the sandbox host's daemon (docs/man/sandglass-host.md).
 *
 * One libuv loop, for as long as the host serves sandboxes (a systemd
 * unit's main process, sandglass-host.service): it makes the host's part
 * of the cgroups at start (sandglass/ and sandglass/:host, cgroup.h), keeps
 * the pool at its size, and answers GET /metrics with the host's figures.
 *
 * It holds no sandbox: each is its supervisor's, a process of its own
 * that outlives the daemon (as a container runtime's shims do). Stopping
 * or restarting it (SIGTERM, SIGINT) leaves every sandbox running; a host
 * that should end them too runs `sandglass destroy --all --yes` (a unit's
 * ExecStopPost=). The metrics are read at each scrape from the files the
 * supervisors keep (state/counters.h), never by asking a supervisor.
 *
 * With an ingest configured (--ingest, or the config's), it registers the
 * host in the ingest's store at start and then every --heartbeat seconds
 * (cli/hostreg.h, wire/hostreg.h): its name, serve's URL, capacity,
 * version and sandboxes. Each registration runs on libuv's thread pool
 * (its HTTP exchange blocks for up to the client's timeouts), one at a
 * time: a beat that finds the last one still running is skipped. A
 * sandbox made or destroyed (<state>/sb changes; root only, as the pool)
 * brings the next registration to within a second, so that the store
 * knows a new sandbox's host before the next heartbeat.
 *
 * SIGHUP reads the config, the secret and the metrics token again
 * (on_hup); new registration settings take over between two
 * registrations, never under a running one. */
#include <errno.h>
#include <openssl/crypto.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <uv.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"
#include "cli/daemon_signals.h"
#include "cli/hostreg.h"
#include "cli/pool.h"
#include "ingest/ingest.h"
#include "ingest/prom.h"
#include "sandbox/cgroup.h"
#include "state/counters.h"
#include "state/state.h"
#include "wire/hostreg.h"

#define HOST_METRICS_DEFAULT "127.0.0.1:9464"
#define REG_SOON_MS 1000 /* a registration this soon after a sandbox is made or gone */
#define REG_SOON_TRIES 30 /* ... and again while a sandbox's record is not whole, this many times */
#define POOL_LOOK_MS 10000 /* the pool is looked at this often, besides on each change of its directory */

static const char usage[] =
    "usage: sandglass host [--metrics-listen HOST:PORT] [--metrics-token FILE]\n"
    "                      [--ingest URL[,URL...]] [--ingest-ca FILE] [--secret FILE]\n"
    "                      [--name NAME] [--serve-url URL] [--heartbeat SECONDS] [--no-register]\n"
    "\n"
    "The sandbox host's daemon: makes the host's sandglass cgroups, keeps the pool\n"
    "(sandglass pool N) at its size, serves the host's metrics (Prometheus) at\n"
    "GET /metrics, and registers the host in its ingest's store (with an ingest\n"
    "configured). SIGTERM stops it and leaves every sandbox running; SIGHUP reads\n"
    "the config, the secret and the metrics token again.\n"
    "\n"
    "  --ingest URL   the ingest(s) the host registers with (default the config's;\n"
    "                 none configured: no registration)\n"
    "  --ingest-ca FILE  the CA file (PEM) an https ingest's certificate is verified by\n"
    "  --secret FILE  the ingest's key its host tokens are made from (default the\n"
    "                 config's secret, else <state>/ingest/secret)\n"
    "  --name NAME    the host's name in the store (default the system's host name)\n"
    "  --serve-url URL  where this host's `sandglass serve` answers (http:// or https://)\n"
    "  --heartbeat SECONDS  registers again this often (default 30; 1..3600); a host\n"
    "                 not seen for more than 3 heartbeats is listed as stale\n"
    "  --no-register  no registration, even with an ingest configured\n"
    "  --metrics-listen HOST:PORT  where /metrics answers (default " HOST_METRICS_DEFAULT ";\n"
    "                 port 0 = any free port); an address other than loopback needs\n"
    "                 --metrics-token\n"
    "  --metrics-token FILE  a scrape must send this file's token (Authorization:\n"
    "                 Bearer); the file must not be readable by every user\n";

/* What a registration is sent with: from the flags and the config, read
 * again on SIGHUP. */
typedef struct reg_cfg {
    bool on;
    sg_cli_target target;
    uint8_t secret[SG_TOKEN_SECRET_LEN];
} reg_cfg;

typedef struct host_opts {
    const char *listen, *token;
    const char *ingest, *ingest_ca, *secret, *name, *serve_url;
    int heartbeat_s;
    bool no_register;
} host_opts;

typedef struct host_ctx {
    uv_loop_t loop;
    sg_cli_signals sigs;
    const host_opts *opts;
    sg_prom_server *prom;
    /* the pool */
    uv_fs_event_t pool_watch, sb_watch; /* <state>/pool (a claim, a new size), <state>/sb (a spare destroyed) */
    uv_timer_t pool_timer;
    uv_process_t *refill; /* the `pool --refill` running, or NULL (each its own handle: one closes as the next starts) */
    char cli[PATH_MAX];
    sg_counters_cache *cache; /* the last scrape's reads (state/counters.h) */
    bool pool_on;         /* pool_start ran: its handles exist (root only) */
    /* the registration (none when reg.on is false) */
    bool reg_busy, reg_ok, reg_tried, reg_timer_on;
    bool reg_wanted; /* a sandbox made or gone since the last registration started */
    size_t reg_unready; /* the last registration's sandboxes left out, their records not whole */
    unsigned reg_retries; /* registrations in a row that found some */
    uv_timer_t reg_timer;
    uv_work_t reg_work;
    reg_cfg reg;       /* in force (read by reg_run off the loop: replaced only while none runs) */
    reg_cfg reg_next;  /* a reload's, waiting for the running registration's end */
    bool reg_next_set;
    const char *name, *serve_url;
    int heartbeat_s;
    sg_err reg_err;
    uint64_t refills, refill_failures;
    double start_time;
} host_ctx;

/* ---------------------------------------------------------------- the metrics */

static int render_counts(sg_buf *b, const sg_host_counters *h)
{
    const sg_counters *c = &h->total;
    return sg_prom_labeled(b, "sandglass_host_sandboxes", "gauge",
                           "Sandboxes of this host by state (dead: no supervisor holds it).", "state",
                           sg_ctr_state_names, h->states, SG_CTR_STATE_N) < 0 ||
                   sg_prom_labeled(b, "sandglass_host_execs_total", "counter",
                                   "Execs ended, by outcome (ok: exit 0; failed: another status; killed: a "
                                   "signal; error: could not start).",
                                   "outcome", sg_ctr_exec_names, c->execs, SG_CTR_EXEC_N) < 0 ||
                   sg_prom_labeled(b, "sandglass_host_kills_total", "counter",
                                   "Execs killed by sandglass or the OOM killer, by cause.", "cause",
                                   sg_ctr_kill_names, c->kills, SG_CTR_KILL_N) < 0 ||
                   sg_prom_counter(b, "sandglass_host_ooms_total", "OOM kills in the sandboxes (the kernel's).",
                                   c->ooms) < 0 ||
                   sg_prom_labeled(b, "sandglass_host_limit_hits_total", "counter",
                                   "Limits execs and sessions ran into (memory, pids, output, time, a session cap).",
                                   "limit", sg_ctr_limit_names, c->limits, SG_CTR_LIMIT_N) < 0 ||
                   sg_prom_labeled(b, "sandglass_host_expiries_total", "counter",
                                   "Sessions that expired, by limit (--idle-timeout, --ttl).", "reason",
                                   sg_ctr_expiry_names, c->expiries, SG_CTR_EXPIRY_N) < 0
               ? -1
               : 0;
}

static int hist(sg_buf *b, const char *name, const char *help, const sg_ctr_hist *h)
{
    return sg_prom_histogram(b, name, help, sg_counters_bounds, SG_COUNTERS_BUCKETS, h->le, h->count,
                             (double)h->sum_ns / 1e9);
}

static int render_times(sg_buf *b, const sg_host_counters *h)
{
    const sg_counters *c = &h->total;
    return hist(b, "sandglass_host_exec_duration_seconds", "An exec's wall time, from its start to its end.",
                &c->exec_time) < 0 ||
                   hist(b, "sandglass_host_kill_duration_seconds",
                        "From sandglass's decision to kill an exec to the exec reaped.", &c->kill_time) < 0 ||
                   hist(b, "sandglass_host_checkpoint_duration_seconds", "A checkpoint's time.", &c->ckpt_time) < 0
               ? -1
               : 0;
}

static int render_host(host_ctx *hc, sg_buf *b, const sg_host_counters *h, double scan_s)
{
    return sg_prom_gauge(b, "sandglass_host_spool_backlog_events",
                         "Events the sandboxes spooled and the ingest has not acknowledged yet.",
                         (double)h->total.spool_events) < 0 ||
                   sg_prom_gauge(b, "sandglass_host_spool_backlog_bytes",
                                 "Bytes of the spool segments that hold those events.",
                                 (double)h->total.spool_bytes) < 0 ||
                   sg_prom_gauge(b, "sandglass_host_undelivered_spools",
                                 "Spools of destroyed sandboxes kept for sandglass flush.",
                                 (double)h->undelivered) < 0 ||
                   sg_prom_gauge(b, "sandglass_host_skipped_files",
                                 "Sandboxes' counters files this scrape skipped (too long or malformed).",
                                 (double)h->bad_files) < 0 ||
                   sg_prom_gauge(b, "sandglass_host_pool_size", "Spare sandboxes the pool is to hold.",
                                 (double)sg_pool_size()) < 0 ||
                   sg_prom_gauge(b, "sandglass_host_pool_ready", "Spare sandboxes ready.",
                                 (double)sg_pool_ready()) < 0 ||
                   sg_prom_counter(b, "sandglass_host_pool_refills_total", "Refills of the pool this daemon ran.",
                                   hc->refills) < 0 ||
                   sg_prom_counter(b, "sandglass_host_pool_refill_failures_total",
                                   "Refills of the pool that failed (sandglass create could not make a spare).",
                                   hc->refill_failures) < 0 ||
                   sg_prom_counter(b, "sandglass_host_metrics_refusals_total",
                                   "Scrapes refused (no token, a wrong one).", sg_prom_server_refusals(hc->prom)) < 0 ||
                   sg_prom_gauge(b, "sandglass_host_scan_duration_seconds",
                                 "Time this scrape took to read the sandboxes' counters.", scan_s) < 0 ||
                   sg_prom_gauge(b, "process_start_time_seconds",
                                 "Start time of the process since unix epoch in seconds.", hc->start_time) < 0
               ? -1
               : 0;
}

static int render(void *ud, sg_buf *b)
{
    host_ctx *hc = ud;
    sg_host_counters h;
    sg_err err = {0};
    uint64_t t0 = sg_now_mono_ns();
    if (sg_counters_scan(hc->cache, &h, &err) < 0) {
        sg_log(SG_LOG_ERROR, "a scrape could not read the counters: %s", err.msg);
        return -1;
    }
    double scan_s = (double)(sg_now_mono_ns() - t0) / 1e9;
    return render_counts(b, &h) < 0 || render_times(b, &h) < 0 || render_host(hc, b, &h, scan_s) < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- the pool */

static void pool_look(host_ctx *hc);

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void on_refill_exit(uv_process_t *p, int64_t status, int sig)
{
    host_ctx *hc = p->data;
    hc->refills++;
    bool ok = status == 0 && sig == 0;
    if (!ok) {
        hc->refill_failures++;
        sg_log(SG_LOG_WARN, "refilling the pool failed (exit %lld, signal %d); again in %d s", (long long)status,
               sig, POOL_LOOK_MS / 1000);
    }
    uv_close((uv_handle_t *)p, free_handle);
    hc->refill = NULL;
    if (ok)
        pool_look(hc);
}

/* `sandglass pool --refill` (cli/pool.c: one filler at a time, by a lock)
 * when spares are missing and none is running. */
static void pool_look(host_ctx *hc)
{
    if (hc->refill || !hc->pool_on)
        return;
    unsigned size = sg_pool_size();
    if (size == 0 || sg_pool_ready() >= size)
        return;
    char *argv[] = {(char *)"sandglass", (char *)"pool", (char *)"--refill", NULL};
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE}, {.flags = UV_IGNORE}, {.flags = UV_INHERIT_FD, .data.fd = 2}};
    uv_process_options_t o = {.exit_cb = on_refill_exit, .file = hc->cli, .args = argv,
                              .stdio_count = 3, .stdio = stdio};
    uv_process_t *p = sg_xcalloc(1, sizeof *p);
    p->data = hc;
    int r = uv_spawn(&hc->loop, p, &o);
    if (r < 0) {
        hc->refill_failures++;
        sg_log(SG_LOG_WARN, "cannot run %s pool --refill: %s", hc->cli, uv_strerror(r));
        uv_close((uv_handle_t *)p, free_handle);
        return;
    }
    hc->refill = p;
}

static void reg_soon(host_ctx *hc);

static void on_pool_change(uv_fs_event_t *h, const char *name, int events, int status)
{
    host_ctx *hc = h->data;
    pool_look(hc);
    if (h == &hc->sb_watch) /* a sandbox made or gone: the store learns it soon, not at the next beat */
        reg_soon(hc);
}

static void on_pool_timer(uv_timer_t *t)
{
    pool_look(t->data);
}

static int watch(host_ctx *hc, uv_fs_event_t *h, const char *rel, sg_err *err)
{
    sg_autofree char *dir = sg_state_path(rel);
    if (sg_mkdir_p(dir, 0700, err) < 0)
        return -1;
    int r = uv_fs_event_start(h, on_pool_change, dir, 0);
    return r < 0 ? sg_err_set(err, -r, "cannot watch %s: %s", dir, uv_strerror(r)) : 0;
}

static int pool_start(host_ctx *hc, sg_err *err)
{
    if (sg_cli_find_cli(hc->cli, sizeof hc->cli) < 0)
        return sg_err_set(err, ENOENT, "cannot find the sandglass program the pool's refills run (set SANDGLASS_CLI)");
    uv_fs_event_init(&hc->loop, &hc->pool_watch);
    uv_fs_event_init(&hc->loop, &hc->sb_watch);
    uv_timer_init(&hc->loop, &hc->pool_timer);
    hc->pool_watch.data = hc->sb_watch.data = hc->pool_timer.data = hc;
    hc->pool_on = true; /* pool_stop closes them, whatever comes next */
    if (watch(hc, &hc->pool_watch, "pool", err) < 0 || watch(hc, &hc->sb_watch, "sb", err) < 0)
        return -1;
    uv_timer_start(&hc->pool_timer, on_pool_timer, 0, POOL_LOOK_MS);
    return 0;
}

static void pool_stop(host_ctx *hc)
{
    if (!hc->pool_on)
        return;
    hc->pool_on = false;
    uv_close((uv_handle_t *)&hc->pool_watch, NULL);
    uv_close((uv_handle_t *)&hc->sb_watch, NULL);
    uv_close((uv_handle_t *)&hc->pool_timer, NULL);
    if (hc->refill) /* its `pool --refill` goes on alone: a spare half made is not lost */
        uv_close((uv_handle_t *)hc->refill, free_handle);
    hc->refill = NULL;
}

/* ---------------------------------------------------------------- the registration */

static void reg_apply(host_ctx *hc, const reg_cfg *c);

static void reg_run(uv_work_t *w)
{
    host_ctx *hc = w->data;
    hc->reg_err = (sg_err){0};
    sg_autojson json_t *reg =
        sg_cli_host_registration(hc->name, hc->serve_url, hc->heartbeat_s, &hc->reg_unready, &hc->reg_err);
    if (reg && sg_cli_host_register(&hc->reg.target, hc->reg.secret, reg, &hc->reg_err) == 0)
        hc->reg_err.code = 0, hc->reg_err.msg[0] = '\0';
    else if (hc->reg_err.msg[0] == '\0')
        sg_err_set(&hc->reg_err, EIO, "registration failed");
}

/* Logged when it changes: the first result, a failure after a success, a
 * success after a failure. */
static void reg_done(uv_work_t *w, int status)
{
    host_ctx *hc = w->data;
    hc->reg_busy = false;
    bool ok = status == 0 && hc->reg_err.msg[0] == '\0';
    if (ok && (!hc->reg_tried || !hc->reg_ok))
        sg_log(SG_LOG_INFO, "registered as %s with the ingest at %s:%s (again every %d s)", hc->name,
               hc->reg.target.host, hc->reg.target.port, hc->heartbeat_s);
    else if (!ok && (!hc->reg_tried || hc->reg_ok))
        sg_log(SG_LOG_WARN, "cannot register as %s with the ingest at %s:%s: %s (trying again every %d s)", hc->name,
               hc->reg.target.host, hc->reg.target.port, status == 0 ? hc->reg_err.msg : uv_strerror(status),
               hc->heartbeat_s);
    hc->reg_tried = true;
    hc->reg_ok = ok;
    /* a sandbox made or gone while it ran, or one still being made (its
     * record not whole: looked at again, REG_SOON_TRIES times at most) */
    hc->reg_retries = hc->reg_unready ? hc->reg_retries + 1 : 0;
    if (hc->reg_wanted || (hc->reg_unready && hc->reg_retries <= REG_SOON_TRIES))
        reg_soon(hc);
    if (hc->reg_next_set) { /* a reload came meanwhile */
        hc->reg_next_set = false;
        reg_apply(hc, &hc->reg_next);
        OPENSSL_cleanse(hc->reg_next.secret, sizeof hc->reg_next.secret);
    }
}

static void on_reg_timer(uv_timer_t *t)
{
    host_ctx *hc = t->data;
    if (hc->reg_busy)
        return; /* a change's (reg_wanted) goes after it: reg_done */
    hc->reg_work.data = hc;
    if (uv_queue_work(&hc->loop, &hc->reg_work, reg_run, reg_done) == 0) {
        hc->reg_busy = true;
        hc->reg_wanted = false; /* this one reads the state directory as it is now */
    }
}

static void reg_start(host_ctx *hc)
{
    uv_timer_init(&hc->loop, &hc->reg_timer);
    hc->reg_timer.data = hc;
    hc->reg_timer_on = true;
    if (hc->reg.on)
        uv_timer_start(&hc->reg_timer, on_reg_timer, 0, (uint64_t)hc->heartbeat_s * 1000);
}

static void reg_stop(host_ctx *hc)
{
    if (hc->reg_timer_on)
        uv_close((uv_handle_t *)&hc->reg_timer, NULL); /* a registration running ends on its own */
    hc->reg_timer_on = false;
    hc->reg.on = false;
}

/* A registration within REG_SOON_MS (a burst of changes is one), unless
 * one is due sooner anyway. */
static void reg_soon(host_ctx *hc)
{
    hc->reg_wanted = true;
    if (!hc->reg.on || !hc->reg_timer_on || uv_timer_get_due_in(&hc->reg_timer) <= REG_SOON_MS)
        return;
    uv_timer_start(&hc->reg_timer, on_reg_timer, REG_SOON_MS, (uint64_t)hc->heartbeat_s * 1000);
}

/* c in force (none running: reg_run reads it), and a registration now
 * when it is on: a reload's result shows at once. */
static void reg_apply(host_ctx *hc, const reg_cfg *c)
{
    hc->reg = *c;
    hc->reg_tried = false; /* the next result is logged */
    if (!hc->reg_timer_on)
        return;
    if (c->on)
        uv_timer_start(&hc->reg_timer, on_reg_timer, 0, (uint64_t)hc->heartbeat_s * 1000);
    else
        uv_timer_stop(&hc->reg_timer);
}

/* ---------------------------------------------------------------- the daemon */

static void on_signal(void *ud, int signum)
{
    host_ctx *hc = ud;
    sg_log(SG_LOG_INFO, "stopping on %s; the sandboxes stay running", signum == SIGINT ? "SIGINT" : "SIGTERM");
    pool_stop(hc);
    reg_stop(hc);
    sg_prom_server_stop(hc->prom);
}

/* <state>/host/daemon.lock: one daemon a state directory. The fd is kept
 * (the lock lives as long as the daemon). */
static int lock_host(sg_err *err)
{
    sg_autofree char *dir = sg_state_path("host");
    if (sg_mkdir_p(dir, 0700, err) < 0)
        return -1;
    sg_autofree char *p = sg_state_path(SG_POOL_DAEMON_LOCK);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", p);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return sg_err_set(err, EBUSY, "another sandglass host runs on the state directory %s", sg_state_dir(NULL));
    }
    return fd;
}

/* Where /metrics listens, checked: loopback, or a token. */
static int parse_listen(const char *listen, const char *token, char *host, size_t hlen, int *port)
{
    sg_err err = {0};
    if (sg_ingest_parse_listen(listen, host, hlen, port, &err) < 0)
        return sg_cli_usage("host", "--metrics-listen: %s", err.msg);
    bool loopback = strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0;
    if (!loopback && !token)
        return sg_cli_usage("host", "--metrics-listen %s: an address other than loopback needs --metrics-token FILE",
                            listen);
    return 0;
}

static int run(host_ctx *hc, const char *host, int port, const sg_prom_access *acc)
{
    sg_err err = {0};
    if (geteuid() != 0)
        sg_log(SG_LOG_WARN, "not root: the host's cgroups are not made, and the pool is not kept");
    else if (sg_cgroup_host_setup(&err) < 0)
        return sg_cli_failf("host", "the host's cgroups: %s", err.msg);
    if (geteuid() == 0 && pool_start(hc, &err) < 0) {
        pool_stop(hc);
        uv_run(&hc->loop, UV_RUN_DEFAULT);
        return sg_cli_failf("host", "the pool: %s", err.msg);
    }
    hc->prom = sg_prom_server_start(&hc->loop, host, port, acc, render, hc, &err);
    if (!hc->prom) {
        hc->reg.on = false;
        pool_stop(hc);
        uv_run(&hc->loop, UV_RUN_DEFAULT);
        return sg_cli_failf("host", "--metrics-listen: %s", err.msg);
    }
    /* held since the start (sg_cmd_host): a caller may signal it as soon
     * as the line says it runs */
    sg_cli_signals_start(&hc->loop, &hc->sigs);
    bool v6 = strchr(host, ':') != NULL;
    printf("metrics on http://%s%s%s:%d/metrics\n", v6 ? "[" : "", host, v6 ? "]" : "",
           sg_prom_server_port(hc->prom));
    fflush(stdout);
    sg_log(SG_LOG_INFO, "serving the host's metrics on port %d", sg_prom_server_port(hc->prom));
    reg_start(hc);
    uv_run(&hc->loop, UV_RUN_DEFAULT);
    sg_prom_server_free(hc->prom);
    uv_run(&hc->loop, UV_RUN_DEFAULT); /* handles lws closed in its second destroy */
    return 0;
}

/* One option into o: 0, or the usage error's exit status. */
static int host_opt(int c, host_opts *o, char **argv)
{
    char *end = NULL;
    long v;
    switch (c) {
    case 'M': o->listen = optarg; return 0;
    case 'T':
        if (!optarg[0])
            return sg_cli_usage("host", "--metrics-token: a file name (the file holds the token)");
        o->token = optarg;
        return 0;
    case 'i': o->ingest = optarg; return 0;
    case 'C': o->ingest_ca = optarg; return 0;
    case 'S': o->secret = optarg; return 0;
    case 'n': o->name = optarg; return 0;
    case 'u': o->serve_url = optarg; return 0;
    case 'N': o->no_register = true; return 0;
    case 'b':
        v = strtol(optarg, &end, 10);
        if (end == optarg || *end || v < 1 || v > SG_HOSTREG_HEARTBEAT_MAX)
            return sg_cli_usage("host", "--heartbeat: seconds, 1..%d (not '%.32s')", SG_HOSTREG_HEARTBEAT_MAX, optarg);
        o->heartbeat_s = (int)v;
        return 0;
    default: return sg_cli_bad_option("host", argv[optind - 1]);
    }
}

static int host_parse(int argc, char **argv, host_opts *o)
{
    static const struct option longopts[] = {
        {"metrics-listen", required_argument, NULL, 'M'}, {"metrics-token", required_argument, NULL, 'T'},
        {"ingest", required_argument, NULL, 'i'},         {"ingest-ca", required_argument, NULL, 'C'},
        {"secret", required_argument, NULL, 'S'},         {"name", required_argument, NULL, 'n'},
        {"serve-url", required_argument, NULL, 'u'},      {"heartbeat", required_argument, NULL, 'b'},
        {"no-register", no_argument, NULL, 'N'},          {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (host_opts){.listen = HOST_METRICS_DEFAULT, .heartbeat_s = SG_HOST_HEARTBEAT_DEFAULT_S};
    int c, r;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if ((r = host_opt(c, o, argv)) != 0)
            return r;
    }
    if (optind < argc)
        return sg_cli_usage("host", "unexpected argument '%.64s' (host takes only options)", argv[optind]);
    return -1;
}

/* The registration's settings the flags and the config give now, into
 * out: 0 (out->on false: no ingest, --no-register, or the config's ingest
 * without its secret, which note says), or -1 with err (*flag_fault: a flag's
 * fault). */
static int reg_settings(const host_ctx *hc, const host_opts *o, reg_cfg *out, char *note, size_t nlen, bool *flag_fault,
                        sg_err *err)
{
    memset(out, 0, sizeof *out);
    note[0] = '\0';
    *flag_fault = false;
    const char *ingest = o->ingest ? o->ingest : sg_config_get(SG_CONF_INGEST, NULL);
    if (o->no_register || !ingest)
        return 0;
    if (!hc->name) {
        *flag_fault = true;
        return sg_err_set(err, EINVAL, "the system's host name is not a valid host name for the store: give --name");
    }
    if (sg_cli_target_parse(ingest, o->ingest_ca, &out->target, err) < 0) {
        *flag_fault = true;
        sg_err_prefix(err, "--ingest");
        return -1;
    }
    const char *secret = o->secret ? o->secret : sg_config_get(SG_CONF_SECRET, NULL);
    sg_autofree char *def = secret ? NULL : sg_config_secret();
    if (sg_token_secret_load(secret ? secret : def, out->secret, err) < 0) {
        /* asked for on the command line: an error; the config's ingest
         * without its secret (this host's creates may not capture): the
         * host runs unregistered, and says so */
        if (o->ingest || o->secret) {
            sg_err_prefix(err, "registering with the ingest needs its secret");
            return -1;
        }
        snprintf(note, nlen, "not registering with the ingest %.200s: no secret (%.250s)", ingest, err->msg);
        return 0;
    }
    out->on = true;
    return 0;
}

/* The name and the serve URL (flags: never reloaded), checked at start
 * when there is an ingest to register with (a bad one is the operator's
 * to fix now, not a warning every heartbeat): 0, or the exit status. */
static int reg_setup(host_ctx *hc, const host_opts *o)
{
    const char *ingest = o->ingest ? o->ingest : sg_config_get(SG_CONF_INGEST, NULL);
    hc->heartbeat_s = o->heartbeat_s;
    static char hostname[256];
    if (!o->name && gethostname(hostname, sizeof hostname - 1) < 0)
        hostname[0] = '\0';
    const char *name = o->name ? o->name : hostname;
    hc->name = sg_valid_name(name) ? name : NULL;
    hc->serve_url = o->serve_url;
    if (o->no_register || !ingest)
        return 0;
    char vb[300];
    if (!hc->name)
        return sg_cli_usage("host", "%s '%s' is not a valid host name for the store (letters, digits, '.', '_', "
                            "'-', '@'; %d at most): give --name", o->name ? "--name" : "the system's host name",
                            sg_vis(name, strlen(name), vb, sizeof vb), SG_NAME_MAX);
    if (o->serve_url && ((strncmp(o->serve_url, "http://", 7) != 0 && strncmp(o->serve_url, "https://", 8) != 0) ||
                         strlen(o->serve_url) > SG_HOSTREG_URL_MAX || strpbrk(o->serve_url, " \t\r\n")))
        return sg_cli_usage("host", "--serve-url '%s': an http:// or https:// URL (%d bytes at most)",
                            sg_vis(o->serve_url, strlen(o->serve_url), vb, sizeof vb), SG_HOSTREG_URL_MAX);
    sg_err err = {0};
    char note[512];
    bool flag_fault = false;
    if (reg_settings(hc, o, &hc->reg, note, sizeof note, &flag_fault, &err) < 0)
        return flag_fault ? sg_cli_usage("host", "%s", err.msg) : sg_cli_failf("host", "%s (or --no-register)", err.msg);
    if (note[0])
        sg_cli_sayf("host", "%s", note);
    return 0;
}

/* SIGHUP: the config's files, the secret's file and the metrics token's
 * read again; what cannot be read keeps what was in force (logged). */
static void on_hup(void *ud)
{
    host_ctx *hc = ud;
    sg_err err = {0};
    sg_log(SG_LOG_INFO, "SIGHUP: reading the configuration, the secret and the metrics token again");
    if (sg_config_reload(&err) < 0) {
        sg_log(SG_LOG_ERROR, "reload: %s (nothing changed)", err.msg);
        return;
    }
    reg_cfg c;
    char note[512];
    bool flag_fault;
    if (reg_settings(hc, hc->opts, &c, note, sizeof note, &flag_fault, &err) < 0) {
        sg_log(SG_LOG_ERROR, "reload: %s (the registration goes on as it was)", err.msg);
    } else {
        if (note[0])
            sg_log(SG_LOG_WARN, "reload: %s", note);
        else if (c.on)
            sg_log(SG_LOG_INFO, "reload: registering as %s with the ingest at %s:%s", hc->name, c.target.host,
                   c.target.port);
        else
            sg_log(SG_LOG_INFO, "reload: no ingest to register with");
        if (hc->reg_busy) { /* reg_run reads hc->reg: in force at its end */
            hc->reg_next = c;
            hc->reg_next_set = true;
        } else {
            reg_apply(hc, &c);
        }
    }
    OPENSSL_cleanse(c.secret, sizeof c.secret);
    if (hc->opts->token && hc->prom) {
        sg_prom_access acc = {.own = true};
        if (sg_prom_token_load(&acc, hc->opts->token, &err) < 0)
            sg_log(SG_LOG_ERROR, "reload: %s (the old metrics token is kept)", err.msg);
        else
            sg_prom_server_set_access(hc->prom, &acc);
        OPENSSL_cleanse(&acc, sizeof acc);
    }
}

int sg_cmd_host(int argc, char **argv)
{
    host_opts o;
    int r = host_parse(argc, argv, &o);
    if (r >= 0)
        return r;
    char host[256];
    int port = 0;
    r = parse_listen(o.listen, o.token, host, sizeof host, &port);
    if (r != 0)
        return r;
    sg_err err = {0};
    sg_prom_access acc = {.own = true};
    if (o.token && sg_prom_token_load(&acc, o.token, &err) < 0)
        return sg_cli_failf("host", "%s", err.msg);
    if (!sg_state_dir(&err))
        return sg_cli_failf("host", "state directory: %s", err.msg);
    host_ctx hc = {.start_time = sg_now_wall(), .cache = sg_counters_cache_new(), .opts = &o};
    /* held from here: a caller that signals at the first line gets the
     * handlers (daemon_signals.h) */
    hc.sigs = (sg_cli_signals){.stop = on_signal, .hup = on_hup, .ud = &hc};
    sg_cli_signals_hold(&hc.sigs);
    if ((r = reg_setup(&hc, &o)) != 0) {
        sg_counters_cache_free(hc.cache);
        return r;
    }
    signal(SIGPIPE, SIG_IGN);
    sg_log_init("host");
    sg_autoclose int lock = lock_host(&err);
    if (lock < 0) {
        sg_counters_cache_free(hc.cache);
        return sg_cli_failf("host", "%s", err.msg);
    }
    uv_loop_init(&hc.loop);
    r = run(&hc, host, port, &acc);
    if (uv_loop_close(&hc.loop) != 0)
        sg_log(SG_LOG_WARN, "event loop not fully closed");
    sg_counters_cache_free(hc.cache);
    OPENSSL_cleanse(hc.reg.secret, sizeof hc.reg.secret);
    return r;
}

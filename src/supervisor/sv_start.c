/* sv_start: the sandbox's start: init cloned into new namespaces, or a
 * running init adopted after a supervisor died. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_execnotify.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_leaves.h"
#include "supervisor/sv_lifecycle.h"
#include "supervisor/sv_metrics.h"
#include "supervisor/sv_start.h"
#include "supervisor/sv_tty.h"
#include "base/log.h"
#include "capture/watch.h"

/* Tasks in the supervisor's own cgroup: its two threads, and what it forks
 * before the child moves on (the checkpoint worker, the uplink daemon) —
 * a bound, far above that, on what a bug could fork there. */
#define SUP_PIDS_MAX 64

/* How long an adopting supervisor waits for its predecessor to let go of
 * the lock and to exit: a SIGKILLed one lets go as its exit closes its
 * files (within milliseconds, longer for a large ASan process); a
 * destroyed one after its capture is delivered (SG_CAPTURE_DRAIN_MS). */
#define ADOPT_LOCK_WAIT_S 20

/* The OOM counter as the supervisor starts: kills before it are not an
 * exec's. */
void sv_start_oom_baseline(sv_sup *s)
{
    uint64_t pids = 0;
    sg_err err = {0};
    if (s->cg)
        sg_cgroup_counters(s->cg, &s->exec.oom_seen, &pids, &err);
}

/* Connects to the sandbox init's socket (init serves one supervisor). */
static int connect_init(sv_sup *s, sg_err *err)
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

/* The sanitizer options a sanitized init needs (init.c:
 * init_sanitizer_reports), and only those: never the caller's other
 * variables. A log_path is dropped (a host path, not visible in the
 * sandbox's mount namespace: init reports on its fd 2, the supervisor's
 * log). Fills envp (NULL-terminated) from buf, no allocation (we are a
 * clone of a process with threads). */
#define SAN_VARS 3
static void sanitizer_env(char buf[SAN_VARS][1024], char *envp[SAN_VARS + 1])
{
    static const char *const vars[SAN_VARS] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    size_t n = 0;
    for (size_t i = 0; i < SAN_VARS; i++) {
        const char *v = getenv(vars[i]);
        if (!v)
            continue;
        size_t len = (size_t)snprintf(buf[n], sizeof buf[n], "%s=", vars[i]);
        for (const char *o = v; *o && len < sizeof buf[n] - 1;) {
            size_t olen = strcspn(o, ":");
            if (olen && strncmp(o, "log_path=", 9) != 0 && len + olen + 1 < sizeof buf[n])
                len += (size_t)snprintf(buf[n] + len, sizeof buf[n] - len, "%s%.*s",
                                        buf[n][len - 1] == '=' ? "" : ":", (int)olen, o);
            o += olen + (o[olen] == ':');
        }
        envp[n] = buf[n];
        n++;
    }
    envp[n] = NULL;
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
                    (char *)cfg->rootfs.hostname, uid, gid, cfg->rootfs.idmap ? "idmap" : "",
                    cfg->exec_notify ? "notify" : "", (char *)(cfg->rootfs.lxcfs ? cfg->rootfs.lxcfs : ""), NULL};
    char san[SAN_VARS][1024], *envp[SAN_VARS + 1];
    sanitizer_env(san, envp);
    close_range(3 + (unsigned)n, ~0U, 0);
    execve(path, argv, envp);
    /* fds 3..6 are ours now: put the originals back for the fallback */
    dup2(3, cfg->listen_fd);
    dup2(4, cfg->ready_fd);
    dup2(5, cfg->go_fd);
}

/* A running LXCFS for the sandbox's /proc (rootfs.h), or NULL: what
 * shows there is then the kernel's, the host's totals. */
static const char *lxcfs_dir(void)
{
    const char *d = getenv("SANDGLASS_LXCFS");
    if (!d || !*d)
        d = SG_ROOTFS_LXCFS_DEFAULT;
    if (strcmp(d, "off") == 0 || !sg_rootfs_lxcfs(d))
        return NULL;
    sg_log(SG_LOG_INFO, "LXCFS at %s: the sandbox's /proc shows its own memory, CPUs, uptime and load", d);
    return d;
}

/* Rootless: init's user namespace maps the sandbox's uid and gid to the
 * caller's (no newuidmap needed). */
static int init_map_ids(sv_sup *s, sg_err *err)
{
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
    return sg_write_knob_at(AT_FDCWD, p, map, err) < 0 ? -1 : 0;
}

/* init's "ok" on its ready pipe, or its one-line error (EOF: it died). */
static int init_wait_ready(int ready_r, sg_err *err)
{
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
    return 0;
}

int sv_start_init(sv_sup *s, sg_err *err)
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
            .idmap = s->meta.idmap_workspace, .lxcfs = lxcfs_dir(),
        },
        .seccomp = &s->prog, .listen_fd = lfd, .ready_fd = ready_w, .go_fd = go_r,
        .exec_notify = sv_execnotify_wanted(s),
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
    if (sv_ckpt_open(s, err) < 0)
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
    if (s->rootless && init_map_ids(s, err) < 0)
        return -1;
    if (write(go_w, "m", 1) != 1)
        return sg_err_sys(err, "cannot start the sandbox's init");
    if (s->cg && sg_cgroup_attach(s->cg, NULL, s->init_pid, err) < 0) {
        sg_err_prefix(err, "cannot place the sandbox's init in its cgroup");
        return -1;
    }
    if (write(go_w, "g", 1) != 1)
        return sg_err_sys(err, "cannot start the sandbox's init");
    if (init_wait_ready(ready_r, err) < 0)
        return -1;
    /* Connect like any (re)started supervisor would. */
    return connect_init(s, err);
}

/* Whether pid is a supervisor (by its name): a pid reused since is not
 * waited for. */
static bool is_supervisor(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    sg_autofree char *c = sg_read_file(path, 64, NULL, NULL);
    return c && strncmp(c, "sg-supervisor", 13) == 0;
}

/* Connects to the init of a sandbox whose supervisor died, and takes over
 * the leaves its execs left (background processes). */
int sv_start_adopt(sv_sup *s, sg_err *err)
{
    /* Our predecessor let go of the supervisor lock as its exit closed its
     * files; the spool's lock and its sockets may go a moment later: a
     * process has let go of everything only once it is a zombie. */
    pid_t old = s->meta.supervisor_pid;
    if (old > 0 && old != getpid() && is_supervisor(old) && !sg_state_wait_exit(old, ADOPT_LOCK_WAIT_S * 1000))
        return sg_err_set(err, EBUSY, "its old supervisor (pid %d) has not exited in %d s", (int)old,
                          ADOPT_LOCK_WAIT_S);
    s->cg = sg_cgroup_open(s->meta.id, err);
    if (!s->cg && !(s->rootless && err->code == ENOENT))
        return -1;
    sv_start_oom_baseline(s);
    sv_leaves_fast_set(s);
    if (!sg_state_pid_alive(s->meta.init_pid))
        return sg_err_set(err, ESRCH, "the sandbox's init (pid %d) is gone", (int)s->meta.init_pid);
    s->init_pid = s->meta.init_pid;
    if (connect_init(s, err) < 0)
        return -1;
    sg_autostrv char **leaves = s->cg ? sg_cgroup_leaves(s->cg, err) : NULL;
    for (char **l = leaves; l && *l; l++)
        sv_leaves_track(s, *l);
    /* Leaves, exec ids and exec numbers go on past the old ones: init
     * still reports the old execs by their ids (sg_state_exec_ids_save). */
    uint32_t highest = sg_leafset_highest(leaves);
    if (highest > s->leaves.next_leaf)
        s->leaves.next_leaf = highest;
    uint32_t used = sg_state_exec_ids_load(s->meta.id);
    s->exec.next_id = s->exec.num = used > highest ? used : highest;
    /* An abort outlives the supervisor that made it. */
    sv_killswitch_abort_load(s);
    return 0;
}

/* Sanitized builds keep far more memory (shadow, quarantine). */
#if defined(__SANITIZE_ADDRESS__)
#define SUP_MEMORY_SCALE 8
#else
#define SUP_MEMORY_SCALE 1
#endif

void sv_start_join_own_cgroup(sv_sup *s)
{
    if (!s->cg)
        return; /* rootless without a delegated cgroup */
    sg_cg_limits lim = {.memory_bytes = SG_SUPERVISOR_MEMORY * SUP_MEMORY_SCALE, .cpus = SG_SUPERVISOR_CPUS,
                        .pids = SUP_PIDS_MAX};
    const char *env = getenv("SANDGLASS_SUPERVISOR_MEMORY");
    if (env && sg_parse_size(env, &lim.memory_bytes, NULL) < 0)
        sg_log(SG_LOG_WARN, "SANDGLASS_SUPERVISOR_MEMORY=%s is not a size: ignored", env);
    sg_err err = {0}, oerr = {0};
    const char *owner = sg_state_dir(&oerr);
    if (sg_cgroup_supervisor_join(s->meta.id, &lim, owner, &err) < 0)
        sg_log(SG_LOG_WARN, "the supervisor's work is not charged to the sandbox: %s", err.msg);
}

/* The watcher's turn gives way to a request the kill switch took. */
static bool kill_waits(void *ud)
{
    sv_sup *s = ud;
    return ks_kill_waiting(s->ks.thread);
}

int sv_start_capture(sv_sup *s, bool resumed, sg_err *err)
{
    s->cap = sg_capture_new(&s->loop, &s->meta, resumed, sv_ckpt_unified, s, err);
    if (s->cap)
        sg_watch_set_yield(sg_capture_watch(s->cap), kill_waits, s);
    /* a shell's command mark is read before the change the command made */
    sg_capture_set_before_changes(s->cap, sv_tty_catch_up, s);
    sg_capture_set_on_changes(s->cap, sv_life_workspace_changed, s);
    return s->cap ? 0 : -1;
}

static void on_lock_alarm(int sig)
{
    (void)sig; /* only interrupts the wait */
}

/* A record lock (fcntl, not flock): it is the process's, so the init and
 * the workers we fork never hold it, and the kernel lets it go when we
 * exit, as it closes our control socket. A client that finds the socket
 * refusing therefore knows that a supervisor still exiting (alive by its
 * pid, already deaf) is told apart from a live one by this lock alone. */
int sv_start_hold_lock(sv_sup *s, const char *id, bool adopt, sg_err *err)
{
    sg_autofree char *path = sg_state_sandbox_path(id, "supervisor.lock");
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0)
        return sg_err_sys(err, "cannot open %s", path);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(s->lock_fd, F_SETLK, &fl) == 0)
        return 0;
    if (!adopt || (errno != EAGAIN && errno != EACCES))
        return sg_err_sys(err, "cannot lock %s", path);
    struct sigaction sa = {.sa_handler = on_lock_alarm}, old; /* no SA_RESTART */
    sigaction(SIGALRM, &sa, &old);
    alarm(ADOPT_LOCK_WAIT_S);
    int r = fcntl(s->lock_fd, F_SETLKW, &fl);
    int e = errno;
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    if (r == 0)
        return 0;
    struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    fcntl(s->lock_fd, F_GETLK, &who);
    errno = e;
    if (e == EINTR && who.l_type != F_UNLCK)
        return sg_err_set(err, EBUSY, "its supervisor (pid %d) lives but has not answered for %d s "
                          "(its control socket removed?)", (int)who.l_pid, ADOPT_LOCK_WAIT_S);
    return sg_err_sys(err, "cannot lock %s", path);
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

/* A spare of the pool (cli/pool.c) becomes a learner's sandbox: it takes
 * the creator's learner, task, limits, caps and capture, and its session
 * clocks start now. Only a spare that never ran anything can be claimed. */
static void sup_claim(sv_sup *s, sv_client *c, const sg_ctl_claim_req *req)
{
    sg_err err = {0};
    if (strcmp(s->meta.learner, SG_POOL_LEARNER) != 0 || s->exec.total || s->cap || s->ks.aborted) {
        sv_client_error(c, "this sandbox is not an unused spare of the pool");
        return;
    }
    sg_sandbox_meta want;
    if (sg_sandbox_meta_from_json(req->meta, s->meta.id, &want, &err) < 0) {
        sg_err_prefix(&err, "claim: bad sandbox record");
        sv_client_error(c, err.msg);
        return;
    }
    /* The workspace's file system was sized when the spare was made. */
    if (want.disk != s->meta.disk) {
        char m[160];
        snprintf(m, sizeof m, "this spare's disk is %llu bytes, the create asks for %llu",
                 (unsigned long long)s->meta.disk, (unsigned long long)want.disk);
        sg_sandbox_meta_clear(&want);
        sv_client_error(c, m);
        return;
    }
    /* Only what differs from the spare's limits is written (usually none). */
    sg_cg_limits lim = {.memory_bytes = want.memory != s->meta.memory ? want.memory : 0,
                        .pids = want.pids != s->meta.pids ? want.pids : 0,
                        .cpus = want.cpus != s->meta.cpus ? want.cpus : 0};
    if (s->cg && sg_cgroup_set_limits(s->cg, &lim, &err) < 0) {
        sg_sandbox_meta_clear(&want);
        sv_client_error(c, err.msg);
        return;
    }
    sg_sandbox_meta *m = &s->meta;
    SG_SWAP_PTR(m->learner, want.learner);
    SG_SWAP_PTR(m->task, want.task);
    SG_SWAP_PTR(m->ingest_url, want.ingest_url);
    SG_SWAP_PTR(m->secret_file, want.secret_file);
    SG_SWAP_PTR(m->ingest_ca, want.ingest_ca);
    SG_SWAP_PTR(m->capture_ignore, want.capture_ignore);
    m->max_file_events = want.max_file_events;
    m->memory = want.memory;
    m->pids = want.pids;
    m->cpus = want.cpus;
    m->timeout_s = want.timeout_s;
    m->output_limit = want.output_limit;
    m->max_wall_s = want.max_wall_s;
    m->max_execs = want.max_execs;
    m->max_cpu_s = want.max_cpu_s;
    m->max_calls = want.max_calls;
    m->max_events_per_min = want.max_events_per_min;
    m->max_bytes_per_min = want.max_bytes_per_min;
    m->max_checkpoints_per_min = want.max_checkpoints_per_min;
    m->capture_max_file = want.capture_max_file;
    m->manual_checkpoints = want.manual_checkpoints;
    m->idle_timeout_s = want.idle_timeout_s;
    m->ttl_s = want.ttl_s;
    m->warning_s = want.warning_s;
    m->keep_s = want.keep_s;
    memcpy(m->created, want.created, sizeof m->created);
    sg_sandbox_meta_clear(&want);
    /* The sandbox's creator is its claimer (from the kernel, as any
     * operator's actor), not the pool's filler that made the spare. */
    sg_autojson json_t *creator = sv_actor(c, NULL, NULL);
    free(m->creator);
    m->creator = creator ? json_dumps(creator, JSON_COMPACT) : NULL;
    if (sg_sandbox_meta_save(m, &err) < 0) {
        sv_client_error(c, err.msg);
        return;
    }
    if (m->task && sv_start_capture(s, false, &err) < 0) {
        sv_client_error(c, err.msg);
        return;
    }
    sv_killswitch_caps_restart(s);
    sv_life_arm(s);
    sv_metrics_set_state(s, SG_CTR_STATE_RUNNING);
    sv_client_result(c, sg_sandbox_meta_json(m));
    /* The workspace is the spare's empty one, which nothing has run in
     * since its checkpoint: the capture (if any) hears of that checkpoint,
     * and the worker (stopped when idle) is not woken for it. */
    if (s->ckpt.last[0])
        sv_ckpt_emit(s, s->ckpt.last, "create", &s->ckpt.last_stats, 0, true, NULL);
    else
        sv_ckpt_take_ex(s, "create", true, NULL);
}

void sv_start_op_claim(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sup_claim(s, c, &req->u.claim);
}

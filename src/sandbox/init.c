#include "sandbox/init.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <linux/sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/execchild.h"
#include "sandbox/execnotify.h"
#include "sandbox/privs.h"
#include "wire/seqpacket.h"

#define INIT_MAX_EXECS 4096 /* execs running at once in one sandbox */
#define INIT_MAX_FDS (3 + SG_CG_MAX_FDS)
/* Exec children are preferred OOM victims over init (see start_init in
 * supervisor/sv_start.c). */
#define SG_EXEC_OOM_SCORE_ADJ "500"

typedef struct running {
    uint32_t exec_id;
    pid_t pid;
} running;

static running table[INIT_MAX_EXECS];
static size_t ntable;
static int conn_fd = -1;
/* What each exec child loads on top of init's own filter: the clone3 rule
 * alone, or the whole filter where init could not load it on itself. */
static const sg_seccomp_prog *exec_filter;
/* sandglass-exec (an execute-only memfd), which ready children become while
 * they wait; -1: they wait as copies of init. */
static int exec_stub = -1;
/* The execve listener (execnotify.h): a copy goes to each supervisor that
 * connects; while none is, init answers it. -1: execs are not held. */
static int notify_fd = -1;
/* Set when the supervisor went: the first notification init then gets
 * marks where the ones the dead supervisor held end. */
static bool notify_orphaned;
/* The page where the connected supervisor writes the id it is answering
 * (execnotify.h), and its memfd (sent beside the listener); NULL/-1: none. */
static sg_execnotify_inflight *inflight;
static int inflight_fd = -1;
/* Ids after the recorded one looked at when the supervisor goes: the one it
 * took after its last record is at most as many ids on as execs were held
 * in between (one per process). */
#define INIT_INFLIGHT_SCAN INIT_MAX_EXECS

/* The in-flight page (execnotify.h). Without it a dead supervisor's held
 * call waits for the next execve, as before it existed. */
static void inflight_open(void)
{
    int fd = memfd_create("sandglass-notify", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return;
    long pg = sysconf(_SC_PAGESIZE);
    void *m = MAP_FAILED;
    if (ftruncate(fd, pg) == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        m = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return;
    }
    inflight = m;
    inflight_fd = fd;
}

/* The supervisor's connection closed: it is gone (a takeover closes it
 * from our side, not here). Answers what it took and left held. */
static void inflight_release(void)
{
    if (!inflight || notify_fd < 0 || !__atomic_load_n(&inflight->set, __ATOMIC_ACQUIRE))
        return;
    uint64_t id = __atomic_load_n(&inflight->id, __ATOMIC_RELAXED);
    /* Only received, unanswered ids are valid, and no one but the dead
     * supervisor received any: each valid one is its. */
    for (uint64_t k = 0; k < INIT_INFLIGHT_SCAN; k++)
        if (sg_execnotify_valid(notify_fd, id + k))
            sg_execnotify_continue(notify_fd, id + k);
    __atomic_store_n(&inflight->set, 0, __ATOMIC_RELAXED);
}

static __attribute__((noreturn)) void setup_failed(int ready_fd, const sg_err *err)
{
    dprintf(ready_fd, "error: %s\n", err->msg);
    _exit(1);
}

/* Set by a sanitizer runtime (weak: NULL in a build without one). */
extern void __sanitizer_set_report_path(const char *path) __attribute__((weak));

/* In a sanitized init with the supervisor's sanitizer options (ASan,
 * UBSan, LSan; sv_start.c passes only those), reports go to fd 2, which
 * init then keeps on the supervisor's log instead of /dev/null: no host
 * path of a log_path is visible in the sandbox's mount namespace, and fd 2
 * is never reopened by path in the exec and ready children init forks
 * (their instrumented code reports there too, until an exec's stdio
 * replaces it; the user's command never has it). */
static bool init_sanitizer_reports(void)
{
    if (!__sanitizer_set_report_path ||
        !(getenv("ASAN_OPTIONS") || getenv("UBSAN_OPTIONS") || getenv("LSAN_OPTIONS")))
        return false;
    __sanitizer_set_report_path("stderr");
    return true;
}

static void send_reply(const sg_spawn_reply *r)
{
    if (conn_fd < 0)
        return; /* no supervisor right now: it reads the cgroup on takeover */
    if (send(conn_fd, r, sizeof *r, MSG_NOSIGNAL) < 0) {
        close(conn_fd);
        conn_fd = -1;
    }
}

/* What every exec child does before its command is known: its own
 * session, default signals, the OOM preference, limits, no privileges, the
 * filter's clone3 rule (init's own filter has the rest). Errors go to fd 2. */
static void child_prepare(const sg_spawn_hdr *sp)
{
    setsid();
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGALRM, SIG_DFL); /* init's own (notify_answer) */
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj < 0 || write(adj, SG_EXEC_OOM_SCORE_ADJ, strlen(SG_EXEC_OOM_SCORE_ADJ)) < 0)
        sg_execchild_fail(126, "cannot reset oom_score_adj", NULL, errno);
    close(adj);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    if (sp->rlimit_as) {
        struct rlimit as = {sp->rlimit_as, sp->rlimit_as};
        setrlimit(RLIMIT_AS, &as);
    }
    int r = sg_privs_drop(sp->uid, sp->gid);
    if (r < 0)
        sg_execchild_fail(126, "cannot drop privileges", NULL, -r);
    /* A Landlock domain per exec (privs.h): out of reach of the processes
     * of other execs. Where the kernel has no Landlock, the filter below
     * still refuses pidfd_getfd (docs/SECURITY.md says what is left). */
    r = sg_privs_own_domain();
    if (r < 0 && r != -ENOSYS && r != -EOPNOTSUPP)
        sg_execchild_fail(126, "cannot enter the exec's own Landlock domain", NULL, -r);
    /* sg_privs_drop set no_new_privs, as the kernel wants of a process
     * without CAP_SYS_ADMIN that loads a filter. */
    if (exec_filter && (r = sg_seccomp_load(exec_filter)) < 0)
        sg_execchild_fail(126, "cannot load the syscall filter", NULL, -r);
}

static __attribute__((noreturn)) void run_child(const sg_spawn_hdr *sp, char **argv, char **envp,
                                               const char *cwd, const int *fds, size_t nfds)
{
    /* Join the exec's cgroup leaf first, so everything it forks is in it
     * (unless clone3 already put us there). */
    for (size_t i = 3; i < nfds && !sp->cg_into; i++) {
        if (write(fds[i], "0", 1) != 1) {
            int e = errno;
            dprintf(fds[2], "sandglass: cannot join the exec's cgroup: %s\n", strerror(e));
            _exit(126);
        }
    }
    sg_execchild_stdio(fds);
    child_prepare(sp);
    sg_execchild_start(argv, envp, cwd);
}

/* clone3 straight into a v2 cgroup: no migration (see init.h). */
static long clone_into(int cgfd)
{
    struct clone_args args = {
        .flags = CLONE_INTO_CGROUP,
        .exit_signal = SIGCHLD,
        .cgroup = (uint64_t)cgfd,
    };
    return syscall(SYS_clone3, &args, sizeof args);
}

/* The ready child (init.h): its pid and init's end of its socket. */
static pid_t ready_pid;
static int ready_sock = -1;

static void ready_forget(bool kill_it)
{
    if (ready_pid > 0 && kill_it)
        kill(ready_pid, SIGKILL);
    if (ready_sock >= 0)
        close(ready_sock);
    ready_pid = 0;
    ready_sock = -1;
}

/* In the ready child: prepared ahead, it waits for one spawn message
 * (header and strings, with the exec's three stdio fds) and runs it. EOF
 * means init dropped it. It waits as sandglass-exec when init has it
 * (exec_stub), else as this copy of init. */
static __attribute__((noreturn)) void ready_child(const sg_spawn_hdr *sp, int sock)
{
    if (dup2(sock, 3) < 0 || (exec_stub >= 0 && dup3(exec_stub, 4, O_CLOEXEC) < 0))
        _exit(126);
    close_range(exec_stub >= 0 ? 5 : 4, ~0U, 0);
    child_prepare(sp);
    /* Not dumpable: another process of the same user cannot write into
     * our memory through /proc/PID/mem while we wait for the command.
     * (sandglass-exec is not readable by that user: the kernel keeps it
     * not dumpable from its first instruction.) */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (exec_stub >= 0) {
        char *argv[] = {"sandglass-exec", NULL}, *envp[] = {NULL};
        syscall(SYS_execveat, 4, "", argv, envp, AT_EMPTY_PATH);
        close(4); /* cannot: wait here instead */
    }
    sg_execchild_prefault();
    sg_execchild_take(3);
}

/* Whether the ready child is still waiting for its exec: its end of the
 * socket closes when it execs a command (close-on-exec) or dies. */
static bool ready_waiting(void)
{
    struct pollfd p = {.fd = ready_sock, .events = POLLIN};
    return ready_sock >= 0 && poll(&p, 1, 0) == 0;
}

/* SG_SPAWN_PREPARE: a new ready child in the leaf fds[0], registered as
 * exec sp.exec_id (the supervisor reserves the id of the exec that will
 * use it). Its socket goes to the supervisor (SG_SPAWN_READY), which hands
 * it the exec directly. The previous one is killed unless the supervisor
 * says it took it (SG_SPAWN_F_TAKEN) or it took an exec already: a new
 * supervisor after a takeover does not know. */
static void handle_prepare(const sg_spawn_hdr *hdr, const int *fds, size_t nfds)
{
    sg_spawn_hdr sp = *hdr;
    ready_forget(!(sp.flags & SG_SPAWN_F_TAKEN) && ready_waiting());
    if (nfds != 1 || !sp.cg_into || ntable >= INIT_MAX_EXECS)
        return;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return;
    long pid = clone_into(fds[0]);
    if (pid == 0) {
        close(sv[0]);
        ready_child(&sp, sv[1]);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return;
    }
    ready_pid = (pid_t)pid;
    ready_sock = sv[0];
    table[ntable++] = (running){sp.exec_id, ready_pid};
    sg_spawn_reply rep = {.type = SG_SPAWN_READY, .exec_id = sp.exec_id, .pid = ready_pid};
    if (conn_fd >= 0 && sg_seqpacket_send(conn_fd, &rep, sizeof rep, &ready_sock, 1) < 0) {
        close(conn_fd);
        conn_fd = -1;
    }
}

/* fork(), or clone3 straight into the exec's cgroup leaf: no migration on
 * the exec path (see sg_cgroup_set_fast_leaves). Falls back to fork plus a
 * write to the leaf's cgroup.procs where clone3 cannot do it. */
static pid_t spawn_into(sg_spawn_hdr *sp, const int *fds, size_t nfds)
{
    if (!sp->cg_into || nfds != 4)
        return fork();
    long pid = clone_into(fds[3]);
    if (pid >= 0 || (errno != ENOSYS && errno != EINVAL && errno != E2BIG))
        return (pid_t)pid;
    pid = fork();
    if (pid == 0) {
        int pfd = openat(fds[3], "cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (pfd < 0 || write(pfd, "0", 1) != 1) {
            dprintf(fds[2], "sandglass: cannot join the exec's cgroup: %s\n", strerror(errno));
            _exit(126);
        }
        close(pfd);
    }
    return (pid_t)pid;
}

static void handle_spawn(const sg_spawn_hdr *hdr, char *msg, size_t len, int *fds, size_t nfds)
{
    sg_spawn_hdr sp = *hdr;
    sg_spawn_reply rep = {.type = SG_SPAWN_SPAWNED, .exec_id = sp.exec_id};
    if (sp.argc == 0 || sp.argc > 65536 || sp.envc > 65536 || nfds != 3 + sp.nfds_cg ||
        ntable >= INIT_MAX_EXECS) {
        rep.err = ntable >= INIT_MAX_EXECS ? EAGAIN : EINVAL;
        send_reply(&rep);
        return;
    }
    char **argv, **envp, *cwd = NULL;
    if (sg_execchild_split(msg, len, &argv, &envp, &cwd) < 0) {
        rep.err = EINVAL;
    } else {
        pid_t pid = spawn_into(&sp, fds, nfds);
        if (pid == 0)
            run_child(&sp, argv, envp, cwd, fds, nfds);
        if (pid < 0) {
            rep.err = errno;
        } else {
            rep.pid = pid;
            table[ntable++] = (running){sp.exec_id, pid};
        }
    }
    send_reply(&rep);
}

static void handle_signal(const sg_spawn_hdr *sp)
{
    for (size_t i = 0; i < ntable; i++)
        if (table[i].exec_id == sp->exec_id && sp->sig > 0 && sp->sig < 65)
            kill(-table[i].pid, sp->sig);
}

static void handle_conn(void)
{
    static char msg[SG_SPAWN_MSG_MAX];
    int fds[INIT_MAX_FDS];
    size_t nfds = INIT_MAX_FDS;
    sg_spawn_hdr sp;
    ssize_t n = sg_seqpacket_recv(conn_fd, msg, sizeof msg, MSG_DONTWAIT, fds, &nfds);
    if (n == -EAGAIN || n == -EINTR || n == -EMSGSIZE)
        return; /* an oversized message is dropped with its fds */
    if (n <= 0) {
        close(conn_fd);
        conn_fd = -1;
        inflight_release();
    } else if (sg_spawn_hdr_decode(msg, (size_t)n, &sp) == 0) {
        if (sp.type == SG_SPAWN_EXEC)
            handle_spawn(&sp, msg, (size_t)n, fds, nfds);
        else if (sp.type == SG_SPAWN_PREPARE)
            handle_prepare(&sp, fds, nfds);
        else if (sp.type == SG_SPAWN_SIGNAL)
            handle_signal(&sp);
    }
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
}

static void reap(void)
{
    for (;;) {
        int st = 0;
        struct rusage ru;
        pid_t pid = wait4(-1, &st, WNOHANG, &ru);
        if (pid <= 0)
            return;
        if (pid == ready_pid)
            ready_forget(false); /* killed before it had an exec */
        for (size_t i = 0; i < ntable; i++) {
            if (table[i].pid != pid)
                continue;
            sg_spawn_reply rep = {
                .type = SG_SPAWN_EXITED, .exec_id = table[i].exec_id, .pid = pid,
                .status = st, .maxrss_kb = ru.ru_maxrss,
                .utime_us = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
                .stime_us = (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
            };
            table[i] = table[--ntable];
            send_reply(&rep);
            break;
        }
    }
}

/* Keeps only what init needs: the supervisor's other fds (its loop, its
 * clients) must not leak into the sandbox. */
static void init_close_fds(const sg_init_config *cfg)
{
    int keep[4] = {cfg->listen_fd, cfg->ready_fd, cfg->go_fd, cfg->exec_stub_fd};
    for (int fd = 3; fd < 1024; fd++) {
        if (fd != keep[0] && fd != keep[1] && fd != keep[2] && fd != keep[3])
            close(fd);
    }
    exec_stub = cfg->exec_stub_fd;
    if (exec_stub >= 0)
        fcntl(exec_stub, F_SETFD, FD_CLOEXEC);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        close(devnull);
    }
}

/* Builds the sandbox around init: host name, loopback, file system, its
 * cgroup namespace, an empty bounding set. Does not return on failure. */
static void init_setup_sandbox(const sg_init_config *cfg)
{
    sg_err err = {0};
    int ready = cfg->ready_fd;
    /* Two steps from the supervisor: 'm' once our ids are mapped (rootless),
     * then 'g' once we sit in the sandbox's cgroup. Moving a process between
     * cgroups waits for an RCU grace period (~10 ms): the file system is
     * built meanwhile. */
    char go;
    if (read(cfg->go_fd, &go, 1) != 1 || go != 'm') {
        sg_err_set(&err, EIO, "the supervisor did not start init");
        setup_failed(ready, &err);
    }
    const char *host = cfg->rootfs.hostname ? cfg->rootfs.hostname : "sandglass";
    if (sethostname(host, strlen(host)) < 0) {
        sg_err_sys(&err, "sethostname");
        setup_failed(ready, &err);
    }
    if (sg_net_lo_up(&err) < 0)
        setup_failed(ready, &err);
    if (sg_rootfs_setup(&cfg->rootfs, &err) < 0)
        setup_failed(ready, &err);
    if (read(cfg->go_fd, &go, 1) != 1 || go != 'g') {
        sg_err_set(&err, EIO, "the supervisor did not place init in its cgroup");
        setup_failed(ready, &err);
    }
    close(cfg->go_fd);
    if (unshare(CLONE_NEWCGROUP) < 0) {
        sg_err_sys(&err, "cannot create the cgroup namespace");
        setup_failed(ready, &err);
    }
    setsid();
    prctl(PR_SET_NAME, "sandglass-init");
    /* The bounding set only limits what an execve could grant, and init
     * never execs: emptied once here, every exec child inherits it empty
     * and skips ~40 drops (about 50 us in all) in sg_privs_drop. */
    int br = sg_privs_drop_bounding();
    if (br < 0) {
        sg_err_set(&err, -br, "cannot empty the capability bounding set: %s", strerror(-br));
        setup_failed(ready, &err);
    }
    int devnull = init_sanitizer_reports() ? -1 : open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, 2);
        close(devnull);
    }
}

/* SIGCHLD as an fd for the loop. Does not return on failure. */
static int init_signalfd(int ready)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        sg_err err = {0};
        sg_err_sys(&err, "signalfd");
        setup_failed(ready, &err);
    }
    return sfd;
}

static void on_alarm(int sig)
{
    (void)sig; /* interrupts a RECV another reader raced us to */
}

/* The filter, once, on init itself, last (the set-up above mounts and
 * unshares): every exec child inherits it and adds only the clone3
 * rule, which init must not have (clone_into). Init holds CAP_SYS_ADMIN
 * in its user namespace (the host's as root, its own rootless), so the
 * kernel takes the filter without no_new_privs; init never execs. */
static void init_load_filter(const sg_init_config *cfg)
{
    exec_filter = cfg->seccomp;
    if (cfg->exec_notify)
        inflight_open();
    if (cfg->seccomp && sg_seccomp_child_prog()) {
        int sr = sg_seccomp_load(cfg->seccomp);
        if (sr < 0) {
            sg_err err = {0};
            sg_err_set(&err, -sr, "cannot load the syscall filter in init: %s", strerror(-sr));
            setup_failed(cfg->ready_fd, &err);
        }
        exec_filter = sg_seccomp_child_prog();
    }
    /* Last: init itself never execs, so it is never held. */
    if (cfg->exec_notify) {
        notify_fd = sg_execnotify_install();
        struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
        sigaction(SIGALRM, &sa, NULL);
    }
}

/* The listener to a new supervisor (execnotify.h), first on its
 * connection. */
static void notify_send(void)
{
    sg_spawn_reply rep = {.type = SG_SPAWN_NOTIFY};
    int fds[2] = {notify_fd, inflight_fd};
    if (inflight)
        __atomic_store_n(&inflight->set, 0, __ATOMIC_RELAXED); /* the new one's records only */
    if (notify_fd >= 0 && conn_fd >= 0 &&
        sg_seqpacket_send(conn_fd, &rep, sizeof rep, fds, inflight_fd >= 0 ? 2 : 1) < 0) {
        close(conn_fd);
        conn_fd = -1;
    }
}

/* No supervisor: held execs go on, unread (no capture runs now). A
 * bounded batch, so reaping and a new supervisor wait for no storm. */
static void notify_answer(void)
{
    for (int i = 0; i < 64; i++) {
        struct seccomp_notif n;
        alarm(1); /* a dead supervisor's fd may linger in its exiting process */
        int r = sg_execnotify_recv(notify_fd, &n);
        alarm(0);
        if (r <= 0)
            return;
        if (notify_orphaned) {
            notify_orphaned = false;
            sg_execnotify_release_stuck(notify_fd, n.id);
        }
        sg_execnotify_continue(notify_fd, n.id);
    }
}

/* Reaps, takes a new supervisor's connection, serves the current one. */
static __attribute__((noreturn)) void init_loop(int listen_fd, int sfd)
{
    for (;;) {
        /* the listener is init's to answer only while no supervisor is */
        bool answer = conn_fd < 0 && notify_fd >= 0;
        struct pollfd pfd[3] = {
            {.fd = listen_fd, .events = POLLIN},
            {.fd = sfd, .events = POLLIN},
            {.fd = answer ? notify_fd : conn_fd, .events = POLLIN},
        };
        if (poll(pfd, conn_fd >= 0 || answer ? 3 : 2, -1) < 0)
            continue;
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si)
                ;
            reap();
        }
        if (pfd[0].revents & POLLIN) {
            int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                /* A new supervisor takes over; the old one is gone or going. */
                if (conn_fd >= 0)
                    close(conn_fd);
                conn_fd = c;
                notify_send();
            }
        }
        if (answer && conn_fd < 0 && (pfd[2].revents & POLLIN))
            notify_answer();
        else if (!answer && conn_fd >= 0 && pfd[2].revents)
            handle_conn();
        if (conn_fd < 0 && !answer && notify_fd >= 0)
            notify_orphaned = true; /* the supervisor went just now */
    }
}

void sg_init_main(const sg_init_config *cfg)
{
    int ready = cfg->ready_fd;
    init_close_fds(cfg);
    init_setup_sandbox(cfg);
    int sfd = init_signalfd(ready);
    init_load_filter(cfg);
    if (write(ready, "ok\n", 3) != 3)
        _exit(1);
    close(ready);
    init_loop(cfg->listen_fd, sfd);
}

/* revive, the control protocol's client side: starting a supervisor,
 * and taking over a sandbox whose supervisor died (one place for every
 * client: the CLI's commands, MCP, serve's terminals). */
#include "wire/revive.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "state/state.h"
#include "wire/ctl.h"

#define CREATE_READY_TIMEOUT_MS 30000
#define REVIVE_EXIT_WAIT_MS 5000 /* a killed supervisor's last thread exits within this */

int sg_revive_supervisor_path(char *buf, size_t len)
{
    return sg_sibling_exe("SANDGLASS_SUPERVISOR", "sandglass-supervisor", buf, len);
}

/* Starts the supervisor detached from us (double fork, new session) and
 * returns the read end of its ready pipe. */
static int spawn_supervisor(const char *id, bool adopt, int seed_fd, sg_err *err)
{
    char daemon[PATH_MAX];
    if (sg_revive_supervisor_path(daemon, sizeof daemon) < 0)
        return sg_err_set(err, ENOENT, "cannot find sandglass-supervisor next to the sandglass binary");
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sg_err_sys(err, "pipe");
    sg_autofree char *log = sg_state_sandbox_path(id, "supervisor.log");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return sg_err_sys(err, "fork");
    }
    if (pid == 0) {
        setsid();
        if (fork() != 0)
            _exit(0);
        int null = open("/dev/null", O_RDONLY);
        int lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (null >= 0)
            dup2(null, 0);
        if (lf >= 0) {
            dup2(lf, 1);
            dup2(lf, 2);
        }
        int rfd = fcntl(p[1], F_DUPFD, 3); /* without O_CLOEXEC */
        char fdarg[16];
        snprintf(fdarg, sizeof fdarg, "%d", rfd);
        char seedarg[16];
        int sfd = seed_fd >= 0 ? fcntl(seed_fd, F_DUPFD, 3) : -1; /* without O_CLOEXEC */
        snprintf(seedarg, sizeof seedarg, "%d", sfd);
        if (sfd >= 0)
            execl(daemon, "sandglass-supervisor", "supervisor", id, "--ready-fd", fdarg, "--seed-fd", seedarg,
                  (char *)NULL);
        else
            execl(daemon, "sandglass-supervisor", "supervisor", id, "--ready-fd", fdarg,
                  adopt ? "--adopt" : (char *)NULL, (char *)NULL);
        dprintf(rfd, "error: cannot run %s: %s\n", daemon, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    waitpid(pid, NULL, 0);
    return p[0];
}

static int wait_ready(int fd, sg_err *err)
{
    char buf[SG_ERR_MSG_MAX + 16];
    size_t have = 0;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, CREATE_READY_TIMEOUT_MS);
        if (r == 0)
            return sg_err_set(err, ETIMEDOUT, "the supervisor did not become ready in %d s",
                              CREATE_READY_TIMEOUT_MS / 1000);
        if (r < 0 && errno == EINTR)
            continue;
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (have += (size_t)n) == sizeof buf - 1)
            break;
        if (memchr(buf, '\n', have))
            break;
    }
    buf[have] = '\0';
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    if (strcmp(buf, "ok") == 0)
        return 0;
    if (strncmp(buf, "error: ", 7) == 0)
        return sg_err_set(err, EIO, "%s", buf + 7);
    return sg_err_set(err, EIO, "the supervisor exited during setup (see its log)");
}

int sg_revive_start_supervisor(const char *id, bool adopt, sg_err *err)
{
    int rfd = spawn_supervisor(id, adopt, -1, err);
    return rfd < 0 ? -1 : sg_revive_wait_ready(rfd, err);
}

int sg_revive_spawn_supervisor(const char *id, int seed_fd, sg_err *err)
{
    return spawn_supervisor(id, false, seed_fd, err);
}

int sg_revive_wait_ready(int fd, sg_err *err)
{
    int r = wait_ready(fd, err);
    close(fd);
    return r;
}

/* Under the revive lock: a supervisor answers (0), or one is started
 * that takes the sandbox over (1). */
static int takeover_locked(const char *id, const char *who, sg_err *err)
{
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, err) < 0)
        return -1;
    pid_t init = m.init_pid, sup = m.supervisor_pid;
    sg_sandbox_meta_clear(&m);
    sg_err cerr = {0};
    int fd = sg_ctl_connect(id, &cerr);
    if (fd >= 0 && sup > 0 && !sg_state_pid_alive(sup)) {
        /* A SIGKILLed supervisor's main thread is a zombie before its
         * kill switch's thread has exited, and its socket takes
         * connections until the last one has: wait for the whole of it
         * (a pidfd is readable only then). */
        close(fd);
        sg_state_wait_exit(sup, REVIVE_EXIT_WAIT_MS);
        cerr = (sg_err){0};
        fd = sg_ctl_connect(id, &cerr);
    }
    if (fd >= 0) { /* another client took it over while we waited */
        close(fd);
        return 0;
    }
    if (cerr.code != ECONNREFUSED && cerr.code != ENOENT) {
        *err = cerr;
        return -1;
    }
    if (!sg_state_pid_alive(init))
        return sg_err_set(err, ESRCH, "sandbox %s is gone: its supervisor and its init (pid %d) are dead "
                          "(run 'sandglass destroy %s')", id, (int)init, id);
    /* A predecessor still exiting holds its lock: the new one waits for it. */
    if (sg_revive_start_supervisor(id, true, err) < 0) {
        sg_err_prefix(err, "the supervisor of sandbox %s is not running and none could take it over", id);
        return -1;
    }
    char prefix[80];
    snprintf(prefix, sizeof prefix, "sandglass%s%.40s: ", who ? " " : "", who ? who : "");
    sg_print_vis(2, prefix, "the supervisor of sandbox %s had died; a new one took over", id);
    return 1;
}

int sg_revive_takeover(const char *id, const char *who, sg_err *err)
{
    if (!sg_state_dir(err))
        return -1;
    sg_autofree char *path = sg_state_sandbox_path(id, "revive.lock");
    sg_autoclose int lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lk < 0) {
        if (errno == ENOENT)
            return sg_err_set(err, ENOENT, "no sandbox %s", id);
        return sg_err_sys(err, "cannot open %s", path);
    }
    /* flock: held until we close it (or die); a takeover is bounded by
     * the new supervisor's ready timeout. */
    while (flock(lk, LOCK_EX) < 0)
        if (errno != EINTR)
            return sg_err_sys(err, "cannot lock %s", path);
    return takeover_locked(id, who, err);
}

int sg_revive_connect(const char *id, const char *who, sg_err *err)
{
    int fd = sg_ctl_connect(id, err);
    if (fd >= 0 || (err->code != ECONNREFUSED && err->code != ENOENT))
        return fd;
    /* No socket and no record: not a sandbox (the connect's own error). */
    sg_autofree char *meta = sg_state_sandbox_path(id, "meta.json");
    if (access(meta, F_OK) < 0)
        return -1;
    sg_err terr = {0};
    if (sg_revive_takeover(id, who, &terr) < 0) {
        *err = terr;
        return -1;
    }
    return sg_ctl_connect(id, err);
}

/* What a non-blocking connect's errno means for its caller. */
static sg_revive_state connect_state(int e, const char *id, sg_err *err)
{
    errno = e;
    sg_err_sys(err, "cannot reach the supervisor of sandbox %s", id);
    if (e == EAGAIN)
        return SG_REVIVE_BUSY;
    if (e == ECONNREFUSED || e == ENOENT)
        return SG_REVIVE_DEAD;
    return SG_REVIVE_FAILED;
}

int sg_revive_connect_nb(const char *id, sg_revive_state *state, sg_err *err)
{
    *state = SG_REVIVE_FAILED;
    struct sockaddr_un sa;
    sg_autoclose int fd = sg_ctl_socket(id, SOCK_NONBLOCK, &sa, err);
    if (fd < 0)
        return -1;
    /* A Unix socket never waits for accept(): with room in the backlog it
     * connects at once, without it EAGAIN (retry; nothing is pending). */
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        *state = SG_REVIVE_CONNECTED;
    else if (errno == EINPROGRESS || errno == EINTR) /* EINTR: it goes on in the background */
        *state = SG_REVIVE_IN_PROGRESS;
    else {
        *state = connect_state(errno, id, err);
        return -1;
    }
    return sg_steal_fd(&fd);
}

sg_revive_state sg_revive_connect_finish(int fd, const char *id, sg_err *err)
{
    int e = 0;
    socklen_t l = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
        e = errno;
    return e ? connect_state(e, id, err) : SG_REVIVE_CONNECTED;
}

bool sg_revive_unread(int neg_errno)
{
    /* The kernel resets a connection whose peer closed with our data
     * unread, or that was never accepted; a send finds the peer gone. A
     * plain EOF (0) means the request was read: it may have run. */
    return neg_errno == -ECONNRESET || neg_errno == -EPIPE || neg_errno == -ENOTCONN ||
           neg_errno == -ECONNREFUSED;
}

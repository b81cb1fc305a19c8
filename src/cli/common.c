#include "cli/common.h"

#include <errno.h>
#include <sys/wait.h>
#include <poll.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "sandbox/cgroup.h"
#include "sandbox/disk.h"
#include "state/state.h"
#include "wire/ctl.h"

#define CREATE_READY_TIMEOUT_MS 30000

int sg_cli_daemon_path(char *buf, size_t len)
{
    return sg_sibling_exe("SANDGLASSD", "sandglassd", buf, len);
}

int sg_cli_supervisor_path(char *buf, size_t len)
{
    return sg_sibling_exe("SANDGLASS_SUPERVISOR", "sandglass-supervisor", buf, len);
}

json_t *sg_cli_request(const char *id, json_t *req, sg_err *err)
{
    sg_autoclose int fd = sg_ctl_connect(id, err);
    if (fd < 0)
        return NULL;
    sg_autofree char *s = sg_json_dump(req);
    int r = sg_seqpacket_send_typed(fd, SG_CTL_REQ, s, strlen(s), NULL, 0);
    if (r < 0) {
        errno = -r;
        sg_err_sys(err, "cannot send the request");
        return NULL;
    }
    static char buf[SG_CTL_MSG_MAX];
    __attribute__((cleanup(sg_ctl_asm_free))) sg_ctl_asm a = {0};
    for (;;) {
        uint8_t type;
        ssize_t n = sg_seqpacket_recv_typed(fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n < 0) {
            errno = (int)-n;
            sg_err_sys(err, "lost the supervisor");
            return NULL;
        }
        if (type == 0) {
            sg_err_set(err, EPIPE, "the supervisor closed the connection without an answer");
            return NULL;
        }
        if (type != SG_CTL_RESULT && type != SG_CTL_ERROR && type != SG_CTL_RESULT_PART)
            continue;
        int done = sg_ctl_asm_feed(&a, type, buf, (size_t)n, err);
        if (done < 0)
            return NULL;
        if (!done)
            continue;
        json_t *j = sg_json_parse(a.buf, a.len, err);
        if (!j)
            return NULL;
        if (type == SG_CTL_ERROR) {
            const char *m = json_string_value(json_object_get(j, "error"));
            sg_err_set(err, EIO, "%s", m ? m : "unknown error");
            json_decref(j);
            return NULL;
        }
        return j;
    }
}

/* Moves a sandbox's spool and record to <state>/undelivered/<id>/, as the
 * supervisor does at a destroy that could not deliver everything. Nothing
 * to do without a spool. */
static int keep_spool(const char *id, sg_err *err)
{
    sg_autofree char *spool = sg_state_sandbox_path(id, "spool");
    struct stat st;
    if (lstat(spool, &st) < 0)
        return 0;
    sg_autofree char *udir = sg_state_path("undelivered");
    sg_autofree char *dst = sg_strdup_printf("%s/%s", udir, id);
    sg_autofree char *meta = sg_state_sandbox_path(id, "meta.json");
    sg_autofree char *dmeta = sg_strdup_printf("%s/meta.json", dst);
    sg_autofree char *dspool = sg_strdup_printf("%s/spool", dst);
    if (sg_mkdir_p(dst, 0700, err) < 0)
        return -1;
    if (rename(spool, dspool) < 0 || rename(meta, dmeta) < 0)
        return sg_err_sys(err, "cannot keep the spool of sandbox %s in %s", id, dst);
    fprintf(stderr, "sandglass: sandbox %s: its spool is kept in %s: deliver what the ingest has not "
            "acknowledged with 'sandglass flush %s'\n", id, dst, id);
    return 0;
}

int sg_cli_cleanup_dead(const char *id, bool verbose, sg_err *err)
{
    sg_sandbox_meta m;
    bool have_meta = sg_sandbox_meta_load(id, &m, NULL) == 0;
    if (verbose && !have_meta)
        printf("%s: no record (meta.json): removing what is left\n", id);
    if (have_meta && sg_state_pid_alive(m.supervisor_pid)) {
        /* A live supervisor that does not answer: stop it first. */
        kill(m.supervisor_pid, SIGKILL);
        for (int i = 0; i < 200 && sg_state_pid_alive(m.supervisor_pid); i++)
            usleep(5000);
        if (verbose)
            printf("%s: its supervisor (pid %d) did not answer: killed\n", id, (int)m.supervisor_pid);
    }
    char mark[SG_CG_OWNER_MAX];
    if (sg_cgroup_owner(id, mark, sizeof mark, NULL) == 1 && !sg_state_is_ours(mark)) {
        if (have_meta)
            sg_sandbox_meta_clear(&m);
        return sg_err_set(err, EPERM, "the cgroup of sandbox %s belongs to the state directory %s: "
                          "left alone", id, mark);
    }
    sg_cgroup *cg = sg_cgroup_open(id, err);
    if (cg) {
        if (sg_cgroup_kill(cg, NULL, 10000, err) < 0 || sg_cgroup_populated(cg, NULL, err) != 0) {
            sg_cgroup_free(cg);
            if (have_meta)
                sg_sandbox_meta_clear(&m);
            sg_err_prefix(err, "cannot empty the cgroup of sandbox %s", id);
            return -1;
        }
        if (sg_cgroup_remove(cg, err) < 0) {
            sg_cgroup_free(cg);
            if (have_meta)
                sg_sandbox_meta_clear(&m);
            return -1;
        }
        sg_cgroup_free(cg);
        if (verbose)
            printf("%s: its processes killed, its cgroup empty and removed\n", id);
    } else if (err->code != ENOENT) {
        if (have_meta)
            sg_sandbox_meta_clear(&m);
        return -1;
    } else if (verbose) {
        printf("%s: its cgroup was gone already\n", id);
    }
    if (have_meta && m.init_pid > 0 && sg_state_pid_alive(m.init_pid)) {
        /* Without a cgroup (should not happen) the init is killed directly:
         * killing pid 1 of a pid namespace kills the whole namespace. */
        kill(m.init_pid, SIGKILL);
    }
    if (have_meta)
        sg_disk_remove_workspace(&m);
    else
        sg_disk_remove_of(id); /* its mount lives outside the state directory */
    if (have_meta)
        sg_state_uid_release(m.uid, id);
    /* A captured sandbox's spool may hold events the ingest has not
     * acknowledged: it is kept for `sandglass flush` (the ingest stores
     * each seq once, so a resend of delivered ones is harmless). */
    if (have_meta && m.task && keep_spool(id, err) < 0) {
        sg_sandbox_meta_clear(&m);
        return -1;
    }
    if (have_meta)
        sg_sandbox_meta_clear(&m);
    sg_autofree char *dir = sg_state_sandbox_path(id, NULL);
    sg_state_archive_log(id);
    if (sg_rm_rf(dir, err) < 0)
        return -1;
    if (verbose)
        printf("removed %s\n", id);
    return 0;
}

/* Starts the supervisor detached from us (double fork, new session) and
 * returns the read end of its ready pipe. */
static int spawn_supervisor(const char *id, bool adopt, sg_err *err)
{
    char daemon[PATH_MAX];
    if (sg_cli_supervisor_path(daemon, sizeof daemon) < 0)
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
        execl(daemon, "sandglass-supervisor", "supervisor", id, "--ready-fd", fdarg, adopt ? "--adopt" : (char *)NULL,
              (char *)NULL);
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

int sg_cli_start_supervisor(const char *id, bool adopt, sg_err *err)
{
    int rfd = spawn_supervisor(id, adopt, err);
    if (rfd < 0)
        return -1;
    int r = wait_ready(rfd, err);
    close(rfd);
    return r;
}

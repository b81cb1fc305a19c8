#include "cli/common.h"

#include <dirent.h>
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
#include <strings.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "sandbox/cgroup.h"
#include "sandbox/disk.h"
#include "state/counters.h"
#include "state/state.h"
#include "wire/ctl.h"

int sg_cli_daemon_path(char *buf, size_t len)
{
    return sg_sibling_exe("SANDGLASSD", "sandglassd", buf, len);
}

json_t *sg_cli_run_json(const char *path, char *const argv[], size_t max, bool quiet, int *status)
{
    *status = -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return NULL;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return NULL;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(p[1], 1) < 0 || (quiet && dup2(null, 2) < 0))
            _exit(127);
        execv(path, argv);
        _exit(127);
    }
    close(p[1]);
    sg_autofree char *out = sg_xrealloc(NULL, max);
    size_t have = 0;
    for (;;) {
        ssize_t n = read(p[0], out + have, max - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (have += (size_t)n) == max)
            break;
    }
    close(p[0]);
    while (waitpid(pid, status, 0) < 0 && errno == EINTR)
        ;
    return json_loadb(out, have, JSON_REJECT_DUPLICATES, NULL);
}

/* One try of a request: -1 with err, and *unread when the supervisor
 * died before reading it (sg_revive_unread). revive: a sandbox whose
 * supervisor died is taken over first; else only a live one gets it. */
static json_t *request_once(const char *id, const char *body, int with_fd, bool revive, bool *unread, sg_err *err)
{
    sg_autoclose int fd = revive ? sg_revive_connect(id, NULL, err) : sg_ctl_connect(id, err);
    if (fd < 0)
        return NULL;
    int r = sg_seqpacket_send_typed(fd, SG_CTL_REQ, body, strlen(body), with_fd >= 0 ? &with_fd : NULL,
                                    with_fd >= 0 ? 1 : 0);
    if (r < 0) {
        *unread = sg_revive_unread(r);
        errno = -r;
        sg_err_sys(err, "cannot send the request");
        return NULL;
    }
    __attribute__((cleanup(sg_ctl_call_free))) sg_ctl_call c = {0};
    switch (sg_ctl_call_recv(fd, &c)) {
    case SG_CTL_CALL_RESULT:
        return sg_steal_ptr(&c.result);
    case SG_CTL_CALL_LOST:
        *unread = !c.answered && c.lost < 0 && sg_revive_unread(c.lost);
        sg_err_set(err, c.lost < 0 ? -c.lost : EPIPE, "%s", c.error);
        return NULL;
    case SG_CTL_CALL_EXIT:
        sg_err_set(err, EPROTO, "bad answer from the supervisor: an exit code, not a result");
        return NULL;
    default:
        sg_err_set(err, EIO, "%s", c.error);
        return NULL;
    }
}

static json_t *request(const char *id, const sg_ctl_req *req, int fd, bool revive, sg_err *err)
{
    sg_ctl_req r = *req;
    r.v = SG_CTL_VERSION;
    sg_autofree char *body = sg_ctl_req_dump(&r);
    /* The encoder refuses a string that is not UTF-8. */
    if (!body) {
        sg_err_set(err, EINVAL, "an argument is not valid UTF-8");
        return NULL;
    }
    bool unread = false;
    json_t *j = request_once(id, body, fd, revive, &unread, err);
    /* Sent to a supervisor that died before reading it (SIGKILLed as we
     * connected): the one that takes over gets it, once. */
    if (!j && unread && revive)
        j = request_once(id, body, fd, revive, &unread, err);
    /* A supervisor of the build before versions (a sandbox that lived
     * through an upgrade) refuses "v" in the ops it checks strictly: its
     * protocol is this one without "v". */
    if (!j && sg_ctl_is_v0_refusal(err->msg)) {
        r.v = 0;
        sg_autofree char *v0 = sg_ctl_req_dump(&r);
        j = v0 ? request_once(id, v0, fd, revive, &unread, err) : NULL;
    }
    /* One of the build before "via": the request without it (its actor is
     * then the caller's credentials alone). */
    if (!j && r.via && sg_ctl_is_via_refusal(err->msg)) {
        r.via = NULL;
        sg_autofree char *plain = sg_ctl_req_dump(&r);
        j = plain ? request_once(id, plain, fd, revive, &unread, err) : NULL;
    }
    return j;
}

json_t *sg_cli_request(const char *id, const sg_ctl_req *req, sg_err *err)
{
    return request(id, req, -1, true, err);
}

json_t *sg_cli_request_fd(const char *id, const sg_ctl_req *req, int fd, sg_err *err)
{
    return request(id, req, fd, true, err);
}

json_t *sg_cli_request_live(const char *id, const sg_ctl_req *req, sg_err *err)
{
    return request(id, req, -1, false, err);
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
    sg_cli_sayf("",
                "sandbox %s: its spool is kept in %s: deliver what the ingest has not "
                "acknowledged with 'sandglass flush %s'",
                id, dst, id);
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
    /* Its supervisor's own cgroup, beside the sandbox's (cgroup.h): the
     * supervisor is dead by now. */
    sg_err serr = {0};
    if (sg_cgroup_supervisor_remove(id, &serr) < 0)
        sg_cli_sayf("", "%s: %s", id, serr.msg);
    if (have_meta && m.init_pid > 0 && sg_state_pid_alive(m.init_pid)) {
        /* Without a cgroup (should not happen) the init is killed directly:
         * killing pid 1 of a pid namespace kills the whole namespace. */
        kill(m.init_pid, SIGKILL);
    }
    /* in the background (disk.h): its reclaimer gives the uid slot back */
    if (have_meta && !sg_disk_release_workspace(&m))
        sg_state_uid_release(m.uid, id);
    else if (!have_meta)
        sg_disk_remove_of(id); /* its mount lives outside the state directory */
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
    sg_err cerr = {0};
    if (sg_counters_retire(id, &cerr) < 0) /* the host's counters keep what it counted */
        sg_cli_sayf("", "%s: %s", id, cerr.msg);
    sg_state_archive_log(id);
    if (sg_rm_rf(dir, err) < 0)
        return -1;
    if (verbose)
        printf("removed %s\n", id);
    return 0;
}

bool sg_cli_ask_yes(FILE *out, const char *question)
{
    for (;;) {
        fprintf(out, "%s [y/n]: ", question);
        fflush(out);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return false;
        line[strcspn(line, "\r\n")] = '\0';
        if (!strcasecmp(line, "y") || !strcasecmp(line, "yes"))
            return true;
        if (!strcasecmp(line, "n") || !strcasecmp(line, "no"))
            return false;
        fprintf(out, "please answer y or n\n");
    }
}

time_t sg_cli_newest_mtime(const char *id, const char *rel)
{
    sg_autofree char *dir = sg_state_sandbox_path(id, rel);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    time_t newest = 0;
    struct stat st;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.' && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode) && st.st_mtime > newest)
            newest = st.st_mtime;
    closedir(d);
    return newest;
}

int sg_cli_handoff(const char *cmd, char **argv)
{
    char path[PATH_MAX];
    if (sg_cli_daemon_path(path, sizeof path) < 0)
        return sg_cli_fail(cmd, "cannot find sandglassd next to this binary");
    argv[0] = (char *)cmd;
    char **args = argv - 1; /* argv[-1] is the program's name: "sandglass" */
    args[0] = "sandglass";
    execv(path, args);
    return sg_cli_failf(cmd, "cannot run %s: %s", path, strerror(errno));
}

int sg_cli_find_cli(char *buf, size_t len)
{
    if (sg_sibling_exe("SANDGLASS_CLI", "sandglass", buf, len) == 0)
        return 0;
    char self[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0)
        return -1;
    self[l] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int n = snprintf(buf, len, "%.*s/../bin/sandglass", PATH_MAX - 32, self);
    return n > 0 && (size_t)n < len ? access(buf, X_OK) : -1;
}

bool sg_cli_via_ok(const char *via)
{
    size_t n = strlen(via);
    if (n == 0 || n > SG_CTL_VIA_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (via[i] < 0x20 || via[i] > 0x7e)
            return false;
    return true;
}

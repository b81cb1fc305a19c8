#include "common.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"
#include "ctl.h"
#include "jsonutil.h"
#include "limits.h"
#include "state.h"
#include "util.h"

int sg_cli_daemon_path(char *buf, size_t len)
{
    const char *env = getenv("SANDGLASSD");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return -1;
    self[n] = '\0';
    char *dir = dirname(self);
    snprintf(buf, len, "%s/sandglassd", dir);
    if (access(buf, X_OK) == 0)
        return 0;
    snprintf(buf, len, "%s/../libexec/sandglassd", dir);
    return access(buf, X_OK) == 0 ? 0 : -1;
}

int sg_cli_fail(const char *cmd, const char *msg)
{
    fprintf(stderr, "sandglass %s: %s\n", cmd, msg);
    return 1;
}

json_t *sg_cli_request(const char *id, json_t *req, sg_err *err)
{
    sg_autoclose int fd = sg_ctl_connect(id, err);
    if (fd < 0)
        return NULL;
    sg_autofree char *s = sg_json_dump(req);
    int r = sg_ctl_send(fd, SG_CTL_REQ, s, strlen(s), NULL, 0);
    if (r < 0) {
        errno = -r;
        sg_err_sys(err, "cannot send the request");
        return NULL;
    }
    static char buf[SG_CTL_MSG_MAX];
    for (;;) {
        uint8_t type;
        ssize_t n = sg_ctl_recv(fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n < 0) {
            errno = (int)-n;
            sg_err_sys(err, "lost the supervisor");
            return NULL;
        }
        if (type == 0) {
            sg_err_set(err, EPIPE, "the supervisor closed the connection without an answer");
            return NULL;
        }
        if (type != SG_CTL_RESULT && type != SG_CTL_ERROR)
            continue;
        json_t *j = sg_json_parse(buf, (size_t)n, err);
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

int sg_cli_cleanup_dead(const char *id, bool verbose, sg_err *err)
{
    sg_sandbox_meta m;
    bool have_meta = sg_sandbox_meta_load(id, &m, NULL) == 0;
    if (have_meta && sg_state_pid_alive(m.supervisor_pid)) {
        /* A live supervisor that does not answer: stop it first. */
        kill(m.supervisor_pid, SIGKILL);
        for (int i = 0; i < 200 && sg_state_pid_alive(m.supervisor_pid); i++)
            usleep(5000);
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
    } else if (err->code != ENOENT) {
        if (have_meta)
            sg_sandbox_meta_clear(&m);
        return -1;
    }
    if (have_meta && m.init_pid > 0 && sg_state_pid_alive(m.init_pid)) {
        /* Without a cgroup (should not happen) the init is killed directly:
         * killing pid 1 of a pid namespace kills the whole namespace. */
        kill(m.init_pid, SIGKILL);
    }
    if (have_meta && m.own_workspace)
        sg_rm_rf(m.workspace, NULL);
    if (have_meta)
        sg_sandbox_meta_clear(&m);
    sg_autofree char *dir = sg_state_sandbox_path(id, NULL);
    if (sg_rm_rf(dir, err) < 0)
        return -1;
    if (verbose)
        printf("removed %s\n", id);
    return 0;
}

/* ckpt_client: a supervisor's client of its checkpoint worker (see checkpoint/ckpt_client.h). */
#include "checkpoint/ckpt_client.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "sandbox/cgroup.h"
#include "state/state.h"

extern char **environ;

struct sg_ckpt_client {
    char *exe, *repo, *workspace;
    int fd;        /* -1: no worker */
    pid_t pid;     /* the running worker, 0 when none */
    pid_t zombie;  /* a stopped worker not yet reaped */
    bool open_pending; /* "open" was sent, its answer not read yet */
    unsigned owed;     /* answers to requests sent without waiting */
    bool owed_failed;  /* one of those was an error: owed_err */
    sg_err owed_err;
    sg_ckpt_client_join_fn join;
    void *join_ud;
};

void sg_ckpt_client_set_join(sg_ckpt_client *c, sg_ckpt_client_join_fn fn, void *ud)
{
    c->join = fn;
    c->join_ud = ud;
}

sg_ckpt_client *sg_ckpt_client_new(const char *worker_exe, const char *repo_dir, const char *workspace)
{
    sg_ckpt_client *c = sg_xcalloc(1, sizeof *c);
    c->exe = sg_xstrdup(worker_exe);
    c->repo = sg_xstrdup(repo_dir);
    c->workspace = sg_xstrdup(workspace);
    c->fd = -1;
    return c;
}

pid_t sg_ckpt_client_pid(const sg_ckpt_client *c)
{
    return c->pid;
}

void sg_ckpt_client_reap(sg_ckpt_client *c)
{
    if (c->zombie > 0 && waitpid(c->zombie, NULL, WNOHANG) != 0)
        c->zombie = 0;
}

void sg_ckpt_client_stop(sg_ckpt_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->open_pending = false;
    c->owed = 0; /* their answers go with the socket; the requests were sent */
    if (c->pid > 0) {
        /* One stopped earlier and still unreaped: wait for it now rather
         * than lose track of it (it exits at its socket's EOF). */
        if (c->zombie > 0)
            waitpid(c->zombie, NULL, 0);
        c->zombie = c->pid;
        c->pid = 0;
        sg_ckpt_client_reap(c);
    }
}

#define KILLED_FLAG "sg-killed" /* in the store: the kill was an abort's */

/* Consumes the flag sg_ckpt_client_kill_sandbox_worker leaves before its kill. */
static bool kill_flag_take(const char *repo)
{
    sg_autofree char *p = sg_strdup_printf("%s/" KILLED_FLAG, repo);
    return unlink(p) == 0;
}

/* The worker's socket closed under a call: collect it now (it has exited
 * or is exiting). True when it was killed on purpose by an abort or a
 * destroy (SIGKILL, and their flag): the call is then not retried. Any
 * other death (a crash, the sandbox's OOM killer, a stray kill) gets one
 * retry on a fresh worker. */
static bool collect_gone(sg_ckpt_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->open_pending = false;
    c->owed = 0;
    pid_t p = c->pid;
    c->pid = 0;
    int st = 0;
    if (c->zombie > 0) { /* one stopped earlier: it exits at its EOF */
        waitpid(c->zombie, NULL, 0);
        c->zombie = 0;
    }
    if (p <= 0)
        return false;
    pid_t r;
    while ((r = waitpid(p, &st, 0)) < 0 && errno == EINTR)
        ;
    bool killed = r == p && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    return kill_flag_take(c->repo) && killed;
}

void sg_ckpt_client_kill(sg_ckpt_client *c)
{
    if (!c)
        return;
    if (c->pid > 0)
        kill(c->pid, SIGKILL);
    (void)collect_gone(c);
    (void)kill_flag_take(c->repo);
    if (c->zombie > 0) {
        kill(c->zombie, SIGKILL);
        waitpid(c->zombie, NULL, 0);
        c->zombie = 0;
    }
}

int sg_ckpt_client_kill_sandbox_worker(const char *id, sg_err *err)
{
    sg_err e = {0};
    /* The flag first: the supervisor reads it when it sees the worker die
     * under a call, and then does not retry that call. */
    sg_autofree char *repo = sg_state_sandbox_path(id, "checkpoints.git");
    sg_autofree char *flag = sg_strdup_printf("%s/" KILLED_FLAG, repo);
    sg_autoclose int ffd = open(flag, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    (void)ffd; /* only made, closed at return (clang: unused otherwise) */
    sg_cgroup *cg = sg_cgroup_open(id, &e);
    if (!cg)
        return e.code == ENOENT ? 0 : (*err = e, -1);
    /* With a v2 hierarchy the leaf is there (fast leaves), else on v1. */
    (void)sg_cgroup_set_fast_leaves(cg, true);
    int rc = 0;
    /* Killed, not waited for (where cgroup.kill is): the abort or destroy
     * that asks never waits on it (the kill switch's thread answers an
     * abort whatever the loop does; a loop inside a call to the worker
     * is freed by its death, whenever it comes). Waiting for the leaf to
     * empty took up to 85 ms on a loaded host while the worker wrote
     * 130,000 files' checkpoint, before the request was even sent. */
    if (sg_cgroup_helper_kill(cg, SG_CKPT_CLIENT_LEAF, -1, &e) < 0) {
        *err = e;
        rc = -1;
    }
    sg_cgroup_free(cg);
    return rc;
}

void sg_ckpt_client_free(sg_ckpt_client *c)
{
    if (!c)
        return;
    sg_ckpt_client_stop(c);
    if (c->zombie > 0)
        waitpid(c->zombie, NULL, 0);
    free(c->exe);
    free(c->repo);
    free(c->workspace);
    free(c);
}

/* The answer to the request in flight. Returns the "ok" object (caller
 * decrefs) or NULL with err; *gone says the worker died (EOF or a broken
 * socket) rather than refused. */
static json_t *answer(sg_ckpt_client *c, bool *gone, sg_err *err)
{
    *gone = false;
    json_t *ans = NULL;
    int r = sg_ckpt_proto_recv(c->fd, &ans, err);
    if (r <= 0) {
        *gone = true;
        if (r == 0)
            sg_err_set(err, EPIPE, "the checkpoint worker exited");
        return NULL;
    }
    json_t *ok = json_object_get(ans, "ok");
    if (json_is_object(ok)) {
        json_incref(ok);
        json_decref(ans);
        return ok;
    }
    const char *msg = json_string_value(json_object_get(ans, "error"));
    json_t *code = json_object_get(ans, "errno");
    sg_err_set(err, json_is_integer(code) ? (int)json_integer_value(code) : EPROTO, "%s",
               msg ? msg : "checkpoint worker: a malformed answer");
    json_decref(ans);
    return NULL;
}

static json_t *exchange(sg_ckpt_client *c, const json_t *req, bool *gone, sg_err *err)
{
    if (sg_ckpt_proto_send(c->fd, req, err) < 0) {
        *gone = true;
        return NULL;
    }
    return answer(c, gone, err);
}

static int spawn_worker(sg_ckpt_client *c, sg_err *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sg_err_sys(err, "checkpoint worker: socketpair");
    int jfd[SG_CKPT_CLIENT_MAX_JOIN];
    int nj = c->join ? c->join(c->join_ud, jfd, err) : 0;
    if (nj < 0) {
        close(sv[0]);
        close(sv[1]);
        sg_err_prefix(err, "checkpoint worker: its cgroup");
        return -1;
    }
    char parent[24], njoin[16];
    snprintf(parent, sizeof parent, "%d", (int)getpid());
    snprintf(njoin, sizeof njoin, "%d", nj);
    char *argv[] = {"sandglass-ckpt", parent, njoin, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* dup2 onto 3 clears close-on-exec for the child's copy. The cgroup
     * fds go on 4.. (the worker joins them first thing). Sources are
     * first moved above the targets so no dup2 overwrites one. */
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    for (int i = 0; i < nj; i++) {
        if (jfd[i] < 4 + SG_CKPT_CLIENT_MAX_JOIN) {
            int hi = fcntl(jfd[i], F_DUPFD_CLOEXEC, 4 + SG_CKPT_CLIENT_MAX_JOIN);
            close(jfd[i]);
            jfd[i] = hi;
        }
    }
    for (int i = 0; i < nj; i++)
        if (jfd[i] >= 0)
            posix_spawn_file_actions_adddup2(&fa, jfd[i], 4 + i);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, c->exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    for (int i = 0; i < nj; i++)
        if (jfd[i] >= 0)
            close(jfd[i]);
    if (rc != 0) {
        close(sv[0]);
        return sg_err_set(err, rc, "cannot start the checkpoint worker %s: %s", c->exe, strerror(rc));
    }
    c->fd = sv[0];
    c->pid = pid;
    return 0;
}

int sg_ckpt_client_start(sg_ckpt_client *c, sg_err *err)
{
    if (c->fd >= 0)
        return 0;
    if (spawn_worker(c, err) < 0)
        return -1;
    /* The answer is read by the first call: the worker loads libgit2 and
     * opens the store while the supervisor goes on. */
    json_t *req = json_pack("{s:s, s:o, s:o}", "op", "open",
                            "repo", sg_ckpt_proto_bytes(c->repo, strlen(c->repo)),
                            "workspace", sg_ckpt_proto_bytes(c->workspace, strlen(c->workspace)));
    int rc = sg_ckpt_proto_send(c->fd, req, err);
    json_decref(req);
    if (rc < 0) {
        sg_ckpt_client_stop(c);
        return -1;
    }
    c->open_pending = true;
    return 0;
}

/* Reads the answer to a pending "open". */
static int read_open(sg_ckpt_client *c, bool *gone, sg_err *err)
{
    *gone = false;
    if (!c->open_pending)
        return 0;
    c->open_pending = false;
    json_t *opened = answer(c, gone, err);
    if (!opened) {
        sg_err_prefix(err, "cannot open the checkpoint store");
        sg_ckpt_client_stop(c);
        return -1;
    }
    json_decref(opened);
    return 0;
}

int sg_ckpt_client_opened(sg_ckpt_client *c, sg_err *err)
{
    bool gone;
    return read_open(c, &gone, err);
}

/* Reads the answers owed to requests sent without waiting; an error among
 * them is kept for sg_ckpt_client_owed_error. -1 when the worker is gone. */
static int settle(sg_ckpt_client *c, bool *gone)
{
    while (c->owed) {
        c->owed--;
        sg_err e = {0};
        json_t *ok = answer(c, gone, &e);
        json_decref(ok);
        if (!ok && !c->owed_failed) {
            c->owed_failed = true;
            c->owed_err = e;
        }
        if (*gone)
            return -1;
    }
    return 0;
}

bool sg_ckpt_client_owed_error(sg_ckpt_client *c, sg_err *out)
{
    if (!c->owed_failed)
        return false;
    *out = c->owed_err;
    c->owed_failed = false;
    return true;
}

/* A running worker owed no answer, ready for a request: 0; 1 when it was
 * found gone (try again: a fresh one is spawned); -1 with err. The answer
 * to "open" is read first when one is owed after it, or always (open_first). */
static int make_ready(sg_ckpt_client *c, bool open_first, sg_err *err)
{
    bool gone = false;
    if (sg_ckpt_client_start(c, err) < 0)
        return -1;
    if ((open_first || c->owed) && read_open(c, &gone, err) < 0)
        return gone ? 1 : -1;
    if (settle(c, &gone) < 0) {
        sg_ckpt_client_stop(c);
        return 1;
    }
    return 0;
}

/* req (consumed) on a running worker; a worker found dead is replaced and
 * the request sent once more. */
static json_t *call(sg_ckpt_client *c, json_t *req, sg_err *err)
{
    json_t *ok = NULL;
    for (int attempt = 0; attempt < 2 && !ok; attempt++) {
        sg_err_clear(err);
        bool gone = false;
        int ready = make_ready(c, true, err);
        if (ready < 0)
            break;
        if (ready > 0)
            continue;
        ok = exchange(c, req, &gone, err);
        if (!gone)
            break;
        if (collect_gone(c)) {
            sg_err_set(err, ECANCELED, "the checkpoint worker was killed (an abort, a destroy, or the "
                                       "sandbox's memory limit)");
            break;
        }
    }
    json_decref(req);
    return ok;
}

static int copy_id(json_t *ok, char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    const char *id = json_string_value(json_object_get(ok, "id"));
    if (!id || strlen(id) != SG_CHECKPOINT_ID_LEN)
        return sg_err_set(err, EPROTO, "checkpoint worker: an answer without an id");
    memcpy(id_out, id, SG_CHECKPOINT_ID_LEN + 1);
    return 0;
}

int sg_ckpt_client_take(sg_ckpt_client *c, const char *label, bool reuse_unchanged,
                  char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stats,
                  bool *reused, sg_err *err)
{
    const char *l = label ? label : "";
    json_t *ok = call(c, json_pack("{s:s, s:o, s:b}", "op", "take", "label", sg_ckpt_proto_bytes(l, strlen(l)),
                                   "reuse", reuse_unchanged), err);
    if (!ok)
        return -1;
    sg_checkpoint_stats st = {0};
    int rc = copy_id(ok, id_out, err);
    if (rc == 0)
        rc = sg_ckpt_proto_unstats(json_object_get(ok, "stats"), &st, err);
    if (rc == 0 && stats)
        *stats = st;
    if (reused)
        *reused = json_is_true(json_object_get(ok, "reused"));
    json_decref(ok);
    return rc;
}

static json_t *alias_request(const char *id, char *const *labels, const int64_t *times, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:o, s:I}", "label",
                                             sg_ckpt_proto_bytes(labels[i], strlen(labels[i])),
                                             "time", (json_int_t)times[i]));
    return json_pack("{s:s, s:s, s:o}", "op", "alias", "id", id, "labels", arr);
}

int sg_ckpt_client_alias_nowait(sg_ckpt_client *c, const char *id, char *const *labels, const int64_t *times,
                          size_t n, sg_err *err)
{
    json_t *req = alias_request(id, labels, times, n);
    int rc = -1;
    for (int attempt = 0; attempt < 2 && rc < 0; attempt++) {
        sg_err_clear(err);
        /* The answers owed so far first: left unread they fill the socket,
         * the worker blocks writing one and stops reading, and our next
         * send blocks on it: both wait for the other. One owed at most. */
        int ready = make_ready(c, false, err);
        if (ready < 0)
            break;
        if (ready > 0)
            continue;
        rc = sg_ckpt_proto_send(c->fd, req, err);
        if (rc < 0)
            sg_ckpt_client_stop(c);
        else
            c->owed++;
    }
    json_decref(req);
    return rc;
}

int sg_ckpt_client_list(sg_ckpt_client *c, sg_checkpoint_info **out, size_t *n, sg_err *err)
{
    *out = NULL;
    *n = 0;
    json_t *ok = call(c, json_pack("{s:s}", "op", "list"), err);
    if (!ok)
        return -1;
    int rc = sg_ckpt_proto_uninfos(json_object_get(ok, "checkpoints"), out, n, err);
    json_decref(ok);
    return rc;
}

int sg_ckpt_client_diff(sg_ckpt_client *c, const char *id, sg_checkpoint_change **out, size_t *n, sg_err *err)
{
    *out = NULL;
    *n = 0;
    json_t *jid = json_string(id);
    if (!jid)
        return sg_err_set(err, EINVAL, "not a checkpoint id: a name that is not UTF-8");
    json_t *ok = call(c, json_pack("{s:s, s:o}", "op", "diff", "id", jid), err);
    if (!ok)
        return -1;
    int rc = sg_ckpt_proto_unchanges(json_object_get(ok, "changes"), out, n, err);
    json_decref(ok);
    return rc;
}

int sg_ckpt_client_restore(sg_ckpt_client *c, const char *id, sg_checkpoint_stats *stats, sg_err *err)
{
    json_t *jid = json_string(id);
    if (!jid)
        return sg_err_set(err, EINVAL, "not a checkpoint id: a name that is not UTF-8");
    json_t *ok = call(c, json_pack("{s:s, s:o}", "op", "restore", "id", jid), err);
    if (!ok)
        return -1;
    sg_checkpoint_stats st = {0};
    int rc = sg_ckpt_proto_unstats(json_object_get(ok, "stats"), &st, err);
    if (rc == 0 && stats)
        *stats = st;
    json_decref(ok);
    return rc;
}

int sg_ckpt_client_unified(void *client, const char *path, const char *old, size_t old_len,
                     const char *new_, size_t new_len, sg_diff_result *out, sg_err *err)
{
    sg_ckpt_client *c = client;
    memset(out, 0, sizeof *out);
    json_t *req = json_pack("{s:s, s:o}", "op", "unified", "path", sg_ckpt_proto_bytes(path, strlen(path)));
    if (old)
        json_object_set_new(req, "old", sg_ckpt_proto_bytes(old, old_len));
    if (new_)
        json_object_set_new(req, "new", sg_ckpt_proto_bytes(new_, new_len));
    json_t *ok = call(c, req, err);
    if (!ok)
        return -1;
    json_t *a = json_object_get(ok, "added"), *r = json_object_get(ok, "removed");
    out->text = sg_ckpt_proto_unbytes(json_object_get(ok, "text"), false, &out->len, err);
    int rc = out->text ? 0 : -1;
    if (rc == 0 && (!json_is_integer(a) || !json_is_integer(r) || json_integer_value(a) < 0 ||
                    json_integer_value(r) < 0))
        rc = sg_err_set(err, EPROTO, "checkpoint worker: a malformed diff");
    if (rc < 0) {
        sg_diff_result_clear(out);
    } else {
        out->added = (size_t)json_integer_value(a);
        out->removed = (size_t)json_integer_value(r);
    }
    json_decref(ok);
    return rc;
}

/* pool: spare sandboxes kept ready (see pool.h). */
#include "cli/pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/common.h"
#include "cli/config.h"

static char *pool_path(const char *name)
{
    sg_autofree char *dir = sg_state_path("pool");
    return name ? sg_strdup_printf("%s/%s", dir, name) : sg_steal_ptr(&dir);
}

/* Ids listed in the pool whose sandbox still has its state; a listing
 * whose sandbox is gone (gc, a crash) is dropped on the way. */
static char **spares(void)
{
    sg_autofree char *dir = pool_path(NULL);
    size_t n = 0;
    char **v = sg_xcalloc(SG_POOL_MAX + 1, sizeof *v);
    sg_autoclosedir DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) && n < SG_POOL_MAX) {
        /* "size" and its "size.tmp.<pid>" while `pool N` writes it (the
         * daemon looks at the pool as that happens) */
        if (de->d_name[0] == '.' || strncmp(de->d_name, "size", 4) == 0 || !sg_valid_name(de->d_name))
            continue;
        sg_autofree char *sb = sg_state_sandbox_path(de->d_name, "meta.json");
        if (access(sb, F_OK) < 0) {
            sg_autofree char *p = pool_path(de->d_name);
            unlink(p);
            continue;
        }
        v[n++] = sg_xstrdup(de->d_name);
    }
    return v;
}

unsigned sg_pool_ready(void)
{
    sg_autostrv char **v = spares();
    unsigned n = 0;
    while (v[n])
        n++;
    return n;
}

unsigned sg_pool_size(void)
{
    sg_autofree char *p = pool_path("size");
    sg_autofree char *buf = sg_read_file(p, 64, NULL, NULL);
    /* Never set by `sandglass pool N` here: the config's pool-size. */
    const char *conf = buf ? NULL : sg_config_get(SG_CONF_POOL_SIZE, NULL);
    unsigned long n = buf ? strtoul(buf, NULL, 10) : conf ? strtoul(conf, NULL, 10) : 0;
    return n > SG_POOL_MAX ? SG_POOL_MAX : (unsigned)n;
}

int sg_pool_add(const char *id, sg_err *err)
{
    sg_autofree char *dir = pool_path(NULL);
    if (sg_mkdir_p(dir, 0700, err) < 0)
        return -1;
    sg_autofree char *p = pool_path(id);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return sg_err_sys(err, "cannot list spare %s in the pool", id);
    close(fd);
    return 0;
}

/* Runs this binary with argv, output to /dev/null; its exit status. */
static int run_self(const char *const argv[])
{
    char self[4096];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0)
        return -1;
    self[l] = '\0';
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
        }
        execv(self, (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void destroy_spare(const char *id)
{
    const char *argv[] = {"sandglass", "destroy", id, NULL};
    run_self(argv);
}

int sg_pool_claim(const sg_sandbox_meta *want, char id_out[32])
{
    sg_autostrv char **ids = spares();
    for (char **id = ids; *id; id++) {
        sg_autofree char *p = pool_path(*id);
        if (unlink(p) < 0)
            continue; /* another create took it */
        sg_autojson json_t *meta = sg_sandbox_meta_json(want);
        sg_ctl_req req = {.op = SG_OP_CLAIM, .u.claim.meta = meta};
        sg_err e = {0};
        /* A spare whose supervisor died is not taken over (that costs more
         * than a new sandbox, and it is no one's work): it goes. The lock
         * is only a first look: a SIGKILLed supervisor holds it (and its
         * socket takes connections) until its last thread has exited, so
         * the request goes only to a live one, never reviving it. */
        if (sg_state_supervisor_held(*id, NULL) != 1)
            sg_err_set(&e, ESRCH, "its supervisor died");
        sg_autojson json_t *res = meta && !e.code ? sg_cli_request_live(*id, &req, &e) : NULL;
        if (res) {
            snprintf(id_out, 32, "%s", *id);
            return 1;
        }
        /* A spare that cannot be claimed is of no use: it goes. */
        sg_cli_sayf("create", "spare %s could not be claimed (%s); destroying it", *id, e.msg);
        destroy_spare(*id);
    }
    return 0;
}

bool sg_pool_daemon_running(void)
{
    sg_autofree char *p = sg_state_path(SG_POOL_DAEMON_LOCK);
    sg_autoclose int fd = open(p, O_RDONLY | O_CLOEXEC);
    return fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
}

void sg_pool_refill_async(void)
{
    if (sg_pool_size() == 0 || sg_pool_daemon_running())
        return;
    char self[4096];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0)
        return;
    self[l] = '\0';
    /* posix_spawn (a vfork) in a new session: we wait for neither its
     * exec nor its end. Its exit is reaped by whoever adopts it. */
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    posix_spawn_file_actions_init(&fa);
    for (int fd = 0; fd < 3; fd++)
        posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
    char *const argv[] = {(char *)"sandglass", (char *)"pool", (char *)"--refill", NULL};
    pid_t pid;
    posix_spawn(&pid, self, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
}

int sg_pool_resize(unsigned size, bool set, sg_err *err)
{
    sg_autofree char *dir = pool_path(NULL);
    if (sg_mkdir_p(dir, 0700, err) < 0)
        return -1;
    sg_autofree char *lockp = pool_path(".lock");
    sg_autoclose int lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0)
        return sg_err_sys(err, "cannot open %s", lockp);
    /* One filler at a time; a background refill that finds one running
     * leaves the work to it. */
    if (flock(lock, set ? LOCK_EX : LOCK_EX | LOCK_NB) < 0)
        return set ? sg_err_sys(err, "cannot lock the pool") : 0;
    if (set) {
        char buf[16];
        int n = snprintf(buf, sizeof buf, "%u\n", size);
        sg_autofree char *sp = pool_path("size");
        if (sg_write_file_atomic(sp, buf, (size_t)n, 0600, err) < 0)
            return -1;
    }
    /* Bounded: creates that claim as fast as we fill do not keep us here. */
    for (unsigned round = 0; round < 2 * SG_POOL_MAX && sg_pool_ready() < size; round++) {
        const char *argv[] = {"sandglass", "create", "--learner", SG_POOL_LEARNER, "--spare", NULL};
        if (run_self(argv) != 0)
            return sg_err_set(err, EIO, "cannot create a spare sandbox (try 'sandglass create' to see why)");
    }
    sg_autostrv char **ids = spares();
    unsigned have = sg_pool_ready();
    for (char **id = ids; *id && have > size; id++) {
        sg_autofree char *p = pool_path(*id);
        if (unlink(p) == 0) {
            destroy_spare(*id);
            have--;
        }
    }
    return 0;
}

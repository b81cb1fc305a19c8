#include "state/state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

static char state_dir[PATH_MAX];

const char *sg_state_dir(sg_err *err)
{
    if (state_dir[0])
        return state_dir;
    const char *env = getenv("SANDGLASS_STATE_DIR");
    char buf[PATH_MAX];
    if (env && *env) {
        snprintf(buf, sizeof buf, "%s", env);
    } else if (geteuid() == 0) {
        snprintf(buf, sizeof buf, "/var/lib/sandglass");
    } else {
        const char *xdg = getenv("XDG_STATE_HOME");
        const char *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(buf, sizeof buf, "%s/sandglass", xdg);
        else if (home && *home)
            snprintf(buf, sizeof buf, "%s/.local/state/sandglass", home);
        else {
            sg_err_set(err, EINVAL, "cannot find a state directory: set SANDGLASS_STATE_DIR");
            return NULL;
        }
    }
    if (buf[0] != '/') {
        sg_err_set(err, EINVAL, "state directory '%s' must be an absolute path", buf);
        return NULL;
    }
    /* unix socket paths are limited to 107 bytes: leave room for sb/<id>/ctl.sock */
    if (strlen(buf) > 80) {
        sg_err_set(err, ENAMETOOLONG, "state directory '%s' is too long (at most 80 bytes, for its unix sockets)", buf);
        return NULL;
    }
    if (sg_mkdir_p(buf, 0700, err) < 0)
        return NULL;
    snprintf(state_dir, sizeof state_dir, "%s", buf);
    return state_dir;
}

const char *sg_state_default_ingest(void)
{
    const char *env = getenv("SANDGLASS_INGEST");
    return env && *env ? env : SG_DEFAULT_INGEST_URL;
}

char *sg_state_path(const char *rel)
{
    return sg_strdup_printf("%s/%s", state_dir[0] ? state_dir : sg_state_dir(NULL), rel);
}

char *sg_state_sandbox_path(const char *id, const char *rel)
{
    const char *d = state_dir[0] ? state_dir : sg_state_dir(NULL);
    if (rel)
        return sg_strdup_printf("%s/sb/%s/%s", d, id, rel);
    return sg_strdup_printf("%s/sb/%s", d, id);
}

void sg_sandbox_meta_clear(sg_sandbox_meta *m)
{
    free(m->learner);
    free(m->task);
    free(m->workspace);
    free(m->rootfs);
    free(m->ingest_url);
    free(m->secret_file);
    free(m->ingest_ca);
    free(m->capture_ignore);
    free(m->forked_from);
    free(m->from);
    free(m->creator);
    memset(m, 0, sizeof *m);
}

void *sg_actor_json(uid_t uid, pid_t pid, const char *via)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    json_t *user = getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res ? json_string(pw.pw_name) : NULL;
    json_t *a = json_pack("{s:o, s:I, s:I}", "user", user ? user : json_null(), "uid", (json_int_t)uid,
                          "pid", (json_int_t)pid);
    if (a && via && *via)
        json_object_set_new(a, "via", json_string(via));
    return a;
}

void *sg_sandbox_meta_json(const sg_sandbox_meta *m)
{
    json_t *limits = json_pack("{s:I, s:I, s:f, s:f, s:I, s:o}",
        "memory", (json_int_t)m->memory, "pids", (json_int_t)m->pids,
        "cpus", m->cpus, "timeout_s", m->timeout_s,
        "output", (json_int_t)m->output_limit,
        "disk", m->disk ? json_integer((json_int_t)m->disk) : json_null());
    json_t *caps = json_pack("{s:f, s:I, s:f, s:I, s:s}", "max_wall_s", m->max_wall_s,
        "max_execs", (json_int_t)m->max_execs, "max_cpu_s", m->max_cpu_s,
        "max_calls", (json_int_t)m->max_calls,
        "checkpoints", m->manual_checkpoints ? "manual" : "exec");
    json_object_set_new(caps, "max_events_per_min", json_integer((json_int_t)m->max_events_per_min));
    json_object_set_new(caps, "max_bytes_per_min", json_integer((json_int_t)m->max_bytes_per_min));
    json_object_set_new(caps, "max_checkpoints_per_min", json_integer((json_int_t)m->max_checkpoints_per_min));
    json_object_set_new(caps, "max_file_events", json_integer((json_int_t)m->max_file_events));
    if (m->capture_ignore)
        json_object_set_new(caps, "capture_ignore", json_string(m->capture_ignore));
    if (m->capture_max_file)
        json_object_set_new(caps, "capture_max_file", json_integer((json_int_t)m->capture_max_file));
    json_t *life = json_pack("{s:f, s:f, s:f, s:f}", "idle_timeout_s", m->idle_timeout_s, "ttl_s", m->ttl_s,
                             "warning_s", m->warning_s, "keep_s", m->keep_s);
    json_t *j = json_pack("{s:s, s:s, s:s?, s:s, s:s?, s:b, s:o, s:o, s:I, s:I, s:I, s:I, s:s, s:s?, s:s?}",
        "id", m->id, "learner", m->learner, "task", m->task,
        "workspace", m->workspace, "rootfs", m->rootfs,
        "own_workspace", m->own_workspace, "limits", limits, "caps", caps,
        "uid", (json_int_t)m->uid, "gid", (json_int_t)m->gid,
        "supervisor_pid", (json_int_t)m->supervisor_pid,
        "init_pid", (json_int_t)m->init_pid, "created", m->created,
        "ingest", m->ingest_url, "secret_file", m->secret_file);
    if (j && m->idmap_workspace)
        json_object_set_new(j, "idmap_workspace", json_true());
    if (j && m->ingest_ca)
        json_object_set_new(j, "ingest_ca", json_string(m->ingest_ca));
    if (j)
        json_object_set_new(j, "lifecycle", life);
    else
        json_decref(life);
    json_t *from = m->forked_from ? json_loads(m->forked_from, 0, NULL) : NULL;
    if (j && from)
        json_object_set_new(j, "forked_from", from);
    else
        json_decref(from);
    json_t *seed = m->from ? json_loads(m->from, 0, NULL) : NULL;
    if (j && seed)
        json_object_set_new(j, "from", seed);
    else
        json_decref(seed);
    json_t *creator = m->creator ? json_loads(m->creator, 0, NULL) : NULL;
    if (j && creator)
        json_object_set_new(j, "creator", creator);
    else
        json_decref(creator);
    return j;
}

int sg_sandbox_meta_save(const sg_sandbox_meta *m, sg_err *err)
{
    sg_autojson json_t *j = sg_sandbox_meta_json(m);
    if (!j)
        return sg_err_set(err, ENOMEM, "cannot encode sandbox record");
    sg_autofree char *s = json_dumps(j, JSON_INDENT(2));
    sg_autofree char *path = sg_state_sandbox_path(m->id, "meta.json");
    if (!s)
        return sg_err_set(err, ENOMEM, "out of memory");
    return sg_write_file_atomic(path, s, strlen(s), 0600, err);
}

static char *dup_opt(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? strdup(s) : NULL;
}

int sg_sandbox_meta_load(const char *id, sg_sandbox_meta *m, sg_err *err)
{
    memset(m, 0, sizeof *m);
    if (!sg_valid_name(id) || strlen(id) >= sizeof m->id)
        return sg_err_set(err, EINVAL, "invalid sandbox id '%s'", id);
    sg_autofree char *path = sg_state_sandbox_path(id, "meta.json");
    size_t len = 0;
    sg_autofree char *buf = sg_read_file(path, 1 << 20, &len, err);
    if (!buf) {
        if (err && err->code == ENOENT)
            return sg_err_set(err, ENOENT, "no sandbox with id '%s'", id);
        return -1;
    }
    sg_autojson json_t *j = sg_json_parse(buf, len, err);
    if (!j || !json_is_object(j)) {
        sg_err_prefix(err, "corrupt sandbox record %s", path);
        return -1;
    }
    if (sg_sandbox_meta_from_json(j, id, m, err) < 0) {
        sg_err_prefix(err, "corrupt sandbox record %s", path);
        return -1;
    }
    return 0;
}

/* A record from before the budgets (or a claim without them) has the
 * defaults; 0 is none. */
static uint64_t budget_of(json_t *caps, const char *key, uint64_t dflt)
{
    json_t *v = json_object_get(caps, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v) : dflt;
}

int sg_sandbox_meta_from_json(const void *obj, const char *id, sg_sandbox_meta *m, sg_err *err)
{
    json_t *j = (json_t *)obj;
    memset(m, 0, sizeof *m);
    if (!json_is_object(j))
        return sg_err_set(err, EINVAL, "a sandbox record is a JSON object");
    snprintf(m->id, sizeof m->id, "%s", id);
    m->learner = dup_opt(j, "learner");
    m->task = dup_opt(j, "task");
    m->workspace = dup_opt(j, "workspace");
    m->rootfs = dup_opt(j, "rootfs");
    m->ingest_url = dup_opt(j, "ingest");
    m->secret_file = dup_opt(j, "secret_file");
    m->ingest_ca = dup_opt(j, "ingest_ca");
    m->own_workspace = json_is_true(json_object_get(j, "own_workspace"));
    m->idmap_workspace = json_is_true(json_object_get(j, "idmap_workspace"));
    json_t *l = json_object_get(j, "limits");
    m->memory = (uint64_t)json_integer_value(json_object_get(l, "memory"));
    m->pids = (uint64_t)json_integer_value(json_object_get(l, "pids"));
    m->cpus = json_number_value(json_object_get(l, "cpus"));
    m->timeout_s = json_number_value(json_object_get(l, "timeout_s"));
    m->output_limit = (uint64_t)json_integer_value(json_object_get(l, "output"));
    m->disk = (uint64_t)json_integer_value(json_object_get(l, "disk"));
    json_t *caps = json_object_get(j, "caps");
    m->max_wall_s = json_number_value(json_object_get(caps, "max_wall_s"));
    m->max_execs = (uint64_t)json_integer_value(json_object_get(caps, "max_execs"));
    m->max_cpu_s = json_number_value(json_object_get(caps, "max_cpu_s"));
    m->max_calls = (uint64_t)json_integer_value(json_object_get(caps, "max_calls"));
    m->max_events_per_min = budget_of(caps, "max_events_per_min", SG_BUDGET_EVENTS_DEFAULT);
    m->max_bytes_per_min = budget_of(caps, "max_bytes_per_min", SG_BUDGET_BYTES_DEFAULT);
    m->max_checkpoints_per_min = budget_of(caps, "max_checkpoints_per_min", SG_BUDGET_CHECKPOINTS_DEFAULT);
    m->max_file_events = budget_of(caps, "max_file_events", SG_FILE_EVENTS_DEFAULT);
    m->capture_ignore = dup_opt(caps, "capture_ignore");
    json_t *from = json_object_get(j, "forked_from");
    m->forked_from = json_is_object(from) ? json_dumps(from, JSON_COMPACT) : NULL;
    json_t *seed = json_object_get(j, "from");
    m->from = json_is_object(seed) ? json_dumps(seed, JSON_COMPACT) : NULL;
    json_t *creator = json_object_get(j, "creator"); /* none in a record from before it */
    m->creator = json_is_object(creator) ? json_dumps(creator, JSON_COMPACT) : NULL;
    m->capture_max_file = (uint64_t)json_integer_value(json_object_get(caps, "capture_max_file"));
    /* A record from before the lifecycle has none: no limits, destroy on expiry. */
    json_t *life = json_object_get(j, "lifecycle");
    m->idle_timeout_s = json_number_value(json_object_get(life, "idle_timeout_s"));
    m->ttl_s = json_number_value(json_object_get(life, "ttl_s"));
    m->warning_s = json_number_value(json_object_get(life, "warning_s"));
    m->keep_s = json_number_value(json_object_get(life, "keep_s"));
    const char *cp = json_string_value(json_object_get(caps, "checkpoints"));
    m->manual_checkpoints = cp && strcmp(cp, "manual") == 0;
    m->uid = (uid_t)json_integer_value(json_object_get(j, "uid"));
    m->gid = (gid_t)json_integer_value(json_object_get(j, "gid"));
    m->supervisor_pid = (pid_t)json_integer_value(json_object_get(j, "supervisor_pid"));
    m->init_pid = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    const char *c = json_string_value(json_object_get(j, "created"));
    snprintf(m->created, sizeof m->created, "%s", c ? c : "");
    if (!m->learner || !m->workspace) {
        sg_sandbox_meta_clear(m);
        return sg_err_set(err, EINVAL, "missing learner or workspace");
    }
    return 0;
}

int sg_state_resolve_id(const char *arg, char *out, sg_err *err)
{
    static const char where[] = " (see 'sandglass ls')";
    size_t len = strlen(arg);
    /* not a name (no path is made of it), or too short to be a prefix:
     * no directory to read */
    if (!sg_valid_name(arg) || len > SG_ID_LEN) {
        char vis[80];
        return sg_err_set(err, ENOENT, "no sandbox '%s'%s", sg_vis(arg, len, vis, sizeof vis), where);
    }
    if (len < SG_ID_MIN_PREFIX)
        return sg_id_resolve(arg, NULL, 0, where, out, SG_ID_LEN + 1, err);
    sg_autofree char *dir = sg_state_sandbox_path(arg, NULL);
    struct stat st;
    if (len == SG_ID_LEN && stat(dir, &st) == 0) {
        memcpy(out, arg, SG_ID_LEN + 1);
        return 0;
    }
    sg_autostrv char **ids = sg_state_list(err);
    if (!ids)
        return -1;
    size_t n = 0;
    for (; ids[n]; n++)
        if (strlen(ids[n]) != SG_ID_LEN)
            ids[n][0] = '\0'; /* not a sandbox's directory: matches nothing */
    return sg_id_resolve(arg, (const char *const *)ids, n, where, out, SG_ID_LEN + 1, err);
}

char **sg_state_list(sg_err *err)
{
    sg_autofree char *dir = sg_state_path("sb");
    size_t n = 0, cap = 16;
    sg_autostrv char **v = calloc(cap + 1, sizeof *v);
    if (!v) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    sg_autoclosedir DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return sg_steal_ptr(&v);
        sg_err_sys(err, "cannot read %s", dir);
        return NULL;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !sg_valid_name(de->d_name))
            continue;
        if (sg_strv_push(&v, &n, &cap, de->d_name) < 0) {
            sg_err_set(err, ENOMEM, "out of memory");
            return NULL;
        }
    }
    return sg_steal_ptr(&v);
}

bool sg_state_pid_alive(pid_t pid)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return false;
    /* A zombie is not alive for our purposes. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    sg_autofree char *st = sg_read_file(path, 4096, NULL, NULL);
    if (!st)
        return false;
    const char *rp = strrchr(st, ')');
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

int sg_state_supervisor_held(const char *id, pid_t *pid)
{
    sg_autofree char *path = sg_state_sandbox_path(id, "supervisor.lock");
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* No lock file and a record: a supervisor that never got so far. */
        sg_autofree char *meta = sg_state_sandbox_path(id, "meta.json");
        return access(meta, F_OK) == 0 ? 0 : -1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_GETLK, &fl) < 0 || fl.l_type == F_UNLCK)
        return 0;
    if (pid)
        *pid = fl.l_pid;
    return 1;
}

bool sg_state_wait_exit(pid_t pid, int timeout_ms)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        /* Readable once it has exited (a zombie too). */
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        while (poll(&p, 1, timeout_ms) < 0 && errno == EINTR)
            ;
        close(pfd);
    } else {
        /* Linux < 5.3: no pidfd; look every 5 ms. */
        for (int i = 0; i < timeout_ms / 5 && sg_state_pid_alive(pid); i++)
            usleep(5000);
    }
    return !sg_state_pid_alive(pid);
}

void sg_state_archive_log(const char *id)
{
    const char *dir = getenv("SANDGLASS_LOG_ARCHIVE");
    if (!dir || !*dir)
        return;
    sg_autofree char *src = sg_state_sandbox_path(id, "supervisor.log");
    sg_autofree char *dst = sg_strdup_printf("%s/%s.%ld.log", dir, id, (long)getpid());
    sg_autoclose int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return;
    sg_autoclose int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0)
        return;
    char buf[16384];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (sg_write_all(out, buf, (size_t)n) < 0)
            return;
}

bool sg_state_is_ours(const char *dir)
{
    const char *state = sg_state_dir(NULL);
    if (!state)
        return false;
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(dir, a) && realpath(state, b))
        return strcmp(a, b) == 0;
    return strcmp(dir, state) == 0;
}

static void uid_slot_path(char *buf, size_t size, unsigned slot)
{
    snprintf(buf, size, SG_UID_DIR "/%u", slot);
}

/* The sandbox directory a slot file names, into owner. Returns 1, 0 when
 * the file is empty, -1 with errno when it cannot be read. */
static int uid_slot_owner(const char *path, char owner[PATH_MAX])
{
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd < 0 ? -1 : read(fd, owner, PATH_MAX - 1);
    if (n < 0)
        return -1;
    owner[n] = '\0';
    owner[strcspn(owner, "\n")] = '\0';
    return n > 0;
}

/* Whether the slot file at path names a sandbox directory that still
 * exists (its owner is alive or at least not cleaned up); an unreadable
 * slot counts as live: never take over what cannot be checked. */
static bool uid_slot_live(const char *path)
{
    char owner[PATH_MAX];
    int rc = uid_slot_owner(path, owner);
    if (rc <= 0)
        return rc < 0 && errno != ENOENT;
    struct stat st;
    return owner[0] == '/' && stat(owner, &st) == 0;
}

int sg_state_uid_claim(const char *id, uid_t *uid, sg_err *err)
{
    if (sg_mkdir_p(SG_UID_DIR, 0700, err) < 0)
        return -1;
    sg_autofree char *owner = sg_state_sandbox_path(id, NULL);
    uint32_t h = 2166136261u; /* FNV-1a of the id: where the probe starts */
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    for (unsigned i = 0; i < SG_UID_SLOTS; i++) {
        unsigned slot = (h + i) % SG_UID_SLOTS;
        char path[64];
        uid_slot_path(path, sizeof path, slot);
        for (int attempt = 0; attempt < 2; attempt++) {
            sg_autoclose int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
            if (fd >= 0) {
                if (dprintf(fd, "%s\n", owner) < 0) {
                    unlink(path);
                    return sg_err_sys(err, "cannot write %s", path);
                }
                *uid = (uid_t)(SG_UID_BASE + slot);
                return 0;
            }
            if (errno != EEXIST)
                return sg_err_sys(err, "cannot claim a sandbox uid (%s)", path);
            if (attempt > 0 || uid_slot_live(path))
                break;
            unlink(path); /* stale: its sandbox is gone */
        }
    }
    return sg_err_set(err, EAGAIN, "no free sandbox uid (all %u slots of " SG_UID_DIR " are taken)",
                      SG_UID_SLOTS);
}

void sg_state_uid_release(uid_t uid, const char *id)
{
    if (uid < SG_UID_BASE || uid - SG_UID_BASE >= SG_UID_SLOTS)
        return;
    char path[64], owner[PATH_MAX];
    uid_slot_path(path, sizeof path, (unsigned)(uid - SG_UID_BASE));
    sg_autofree char *mine = sg_state_sandbox_path(id, NULL);
    if (uid_slot_owner(path, owner) == 1 && strcmp(owner, mine) == 0)
        unlink(path);
}

int sg_state_uid_owner(uid_t uid, char owner[PATH_MAX])
{
    if (uid < SG_UID_BASE || uid - SG_UID_BASE >= SG_UID_SLOTS)
        return 0;
    char path[64];
    uid_slot_path(path, sizeof path, (unsigned)(uid - SG_UID_BASE));
    return uid_slot_owner(path, owner) == 1 ? 1 : 0;
}

/* A small record of a sandbox, <state>/sb/<id>/<name>, replaced whole
 * (rename): a reader sees the old one or the new one. j is stolen. */
static int record_save(const char *id, const char *name, json_t *j, const char *what, sg_err *err)
{
    sg_autojson json_t *jj = j;
    sg_autofree char *body = jj ? json_dumps(jj, JSON_COMPACT) : NULL;
    sg_autofree char *path = sg_state_sandbox_path(id, name);
    sg_autofree char *tmp = sg_strdup_printf("%s.tmp", path);
    if (!body)
        return sg_err_set(err, ENOMEM, "out of memory");
    sg_autoclose int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || sg_write_all(fd, body, strlen(body)) < 0 || rename(tmp, path) < 0)
        return sg_err_sys(err, "cannot record %s in %s", what, path);
    return 0;
}

/* 0 when there is no record, 1 when there is one: *out is its JSON, or
 * NULL when it does not parse (a corrupt record is still a record). */
static int record_load(const char *id, const char *name, json_t **out)
{
    sg_autofree char *path = sg_state_sandbox_path(id, name);
    size_t len = 0;
    sg_autofree char *body = sg_read_file(path, 16384, &len, NULL);
    *out = body ? sg_json_parse(body, len, NULL) : NULL;
    return body != NULL;
}

int sg_state_abort_save(const char *id, const char *by, const char *reason, sg_err *err)
{
    return record_save(id, "abort.json", json_pack("{s:s, s:s}", "by", by, "reason", reason), "the abort", err);
}

int sg_state_exec_ids_save(const char *id, uint32_t until, sg_err *err)
{
    return record_save(id, "execs.json", json_pack("{s:I}", "until", (json_int_t)until), "the exec ids", err);
}

uint32_t sg_state_exec_ids_load(const char *id)
{
    sg_autojson json_t *j = NULL;
    record_load(id, "execs.json", &j);
    json_int_t v = json_integer_value(json_object_get(j, "until"));
    return v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
}

int sg_state_uplink_save(const char *id, const char *state, const char *reason, sg_err *err)
{
    char now[40];
    sg_now_iso8601(now, sizeof now);
    return record_save(id, "uplink.json", json_pack("{s:s, s:s, s:s}", "state", state, "reason", reason,
                                                    "since", now), "the uplink's state", err);
}

int sg_state_uplink_load(const char *id, sg_state_uplink *u)
{
    sg_autojson json_t *j = NULL;
    record_load(id, "uplink.json", &j);
    const char *st = json_string_value(json_object_get(j, "state"));
    if (!st)
        return 0;
    const char *r = json_string_value(json_object_get(j, "reason"));
    const char *since = json_string_value(json_object_get(j, "since"));
    snprintf(u->state, sizeof u->state, "%s", st);
    snprintf(u->reason, sizeof u->reason, "%s", r ? r : "");
    snprintf(u->since, sizeof u->since, "%s", since ? since : "");
    return 1;
}

int sg_state_expiry_save(const char *id, double at, const char *why, sg_err *err)
{
    return record_save(id, "expiry.json", json_pack("{s:f, s:s}", "at", at, "why", why), "the session's expiry",
                       err);
}

int sg_state_expiry_load(const char *id, double *at, char *why, size_t why_size)
{
    sg_autojson json_t *j = NULL;
    record_load(id, "expiry.json", &j);
    json_t *a = json_object_get(j, "at");
    const char *w = json_string_value(json_object_get(j, "why"));
    if (!json_is_number(a) || !w)
        return 0;
    *at = json_number_value(a);
    snprintf(why, why_size, "%s", w);
    return 1;
}

int sg_state_abort_load(const char *id, char *by, size_t by_size, char *reason, size_t reason_size)
{
    sg_autojson json_t *j = NULL;
    if (!record_load(id, "abort.json", &j))
        return 0;
    const char *b = json_string_value(json_object_get(j, "by"));
    const char *r = json_string_value(json_object_get(j, "reason"));
    snprintf(by, by_size, "%s", b ? b : "unknown");
    snprintf(reason, reason_size, "%s", r ? r : "unknown");
    return 1;
}

void sg_state_abort_clear(const char *id)
{
    sg_autofree char *path = sg_state_sandbox_path(id, "abort.json");
    unlink(path);
}

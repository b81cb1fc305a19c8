/* cgroup_knob: the cgroup module's knob files, names and recursive walks
 * (see cgroup.h; cgroup_internal.h for the files). */
#include "sandbox/cgroup_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"

/* ---------- small helpers ---------- */

int cg_check_name(const char *what, const char *s, sg_err *err)
{
    if (!sg_valid_name(s))
        return sg_err_set(err, EINVAL, "invalid cgroup %s '%s': use 1..%d of [A-Za-z0-9._@-], not '.' or '..'", what,
                          s ? s : "(null)", SG_NAME_MAX);
    return 0;
}

int cg_check_leaf(const char *leaf, sg_err *err)
{
    return leaf ? cg_check_name("leaf name", leaf, err) : 0;
}

/* <mount>/sandglass/<id>[/<leaf>] */
char *cg_dir(const sg_cgroup *cg, size_t i, const char *leaf)
{
    return sg_strdup_printf("%s/" SG_CG_ROOT_NAME "/%s%s%s", cg->s.h[i]->path, cg->id, leaf ? "/" : "",
                            leaf ? leaf : "");
}

/* The hierarchy whose cgroup.procs we list: every process is in all of them;
 * prefer the one a freeze applies to. */
size_t cg_primary(const sg_cgroup *cg)
{
    if (cg->s.v2 >= 0)
        return (size_t)cg->s.v2;
    if (cg->s.at[C_FREEZER] >= 0)
        return (size_t)cg->s.at[C_FREEZER];
    if (cg->s.at[C_PIDS] >= 0)
        return (size_t)cg->s.at[C_PIDS];
    return 0;
}

int cg_knob_write(const char *dir, const char *knob, const char *val, sg_err *err)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
    sg_autoclose int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", p);
    if (sg_write_all(fd, val, strlen(val)) < 0)
        return sg_err_sys(err, "cannot write '%s' to %s", val, p);
    return 0;
}

bool cg_knob_exists(const char *dir, const char *knob)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
    return access(p, F_OK) == 0;
}

/* Missing knob: *out = 0 and success when optional (older kernels, or a v2
 * leaf without the controller enabled). */
char *cg_knob_read(const char *dir, const char *knob, bool optional, bool *missing, sg_err *err)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
    sg_err e = {0};
    char *s = sg_read_file(p, CG_KNOB_MAX, NULL, &e);
    *missing = false;
    if (!s) {
        if (optional && e.code == ENOENT) {
            *missing = true;
            return NULL;
        }
        if (err)
            *err = e;
    }
    return s;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (strncmp(s, "max", 3) == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return -1;
    *out = v;
    return 0;
}

int cg_read_u64(const char *dir, const char *knob, bool optional, uint64_t *out, sg_err *err)
{
    bool missing;
    *out = 0;
    sg_autofree char *s = cg_knob_read(dir, knob, optional, &missing, err);
    if (!s)
        return missing ? 0 : -1;
    if (parse_u64(s, out) < 0)
        return sg_err_set(err, EINVAL, "%s/%s: unexpected content '%.40s'", dir, knob, s);
    return 0;
}

/* A "key value" line of a flat-keyed file (cgroup.events, memory.events, ...).
 * A missing key reads as 0. */
/* The value of "key N" in a knob's text s (0 when the key is absent). */
int cg_find_key(const char *s, const char *dir, const char *knob, const char *key, uint64_t *out,
                    sg_err *err)
{
    size_t kl = strlen(key);
    *out = 0;
    for (const char *l = s; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, key, kl) == 0 && l[kl] == ' ') {
            if (parse_u64(l + kl + 1, out) < 0)
                return sg_err_set(err, EINVAL, "%s/%s: unexpected value for '%s'", dir, knob, key);
            return 0;
        }
    }
    return 0;
}

int cg_read_key(const char *dir, const char *knob, const char *key, bool optional, uint64_t *out, sg_err *err)
{
    bool missing;
    *out = 0;
    sg_autofree char *s = cg_knob_read(dir, knob, optional, &missing, err);
    if (!s)
        return missing ? 0 : -1;
    return cg_find_key(s, dir, knob, key, out, err);
}

/* read_key through an fd kept open in slot: the supervisor reads these
 * counters after every exec, and the path lookup and open in cgroupfs cost
 * more than the read (a read at offset 0 shows the knob anew). */
int cg_read_key_kept(sg_cgroup *cg, int slot, const char *dir, const char *knob, const char *key,
                         uint64_t *out, sg_err *err)
{
    if (cg->counter_fd[slot] < 0) {
        sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
        cg->counter_fd[slot] = open(p, O_RDONLY | O_CLOEXEC);
        if (cg->counter_fd[slot] < 0)
            return cg_read_key(dir, knob, key, true, out, err);
    }
    char buf[CG_COUNTER_TEXT_MAX];
    ssize_t n = pread(cg->counter_fd[slot], buf, sizeof buf - 1, 0);
    if (n < 0 || (size_t)n == sizeof buf - 1) {
        close(cg->counter_fd[slot]);
        cg->counter_fd[slot] = -1;
        return cg_read_key(dir, knob, key, true, out, err);
    }
    buf[n] = '\0';
    return cg_find_key(buf, dir, knob, key, out, err);
}

/* Sleeps *us, then doubles it up to max_us. */
void cg_nap(unsigned *us, unsigned max_us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)*us * 1000};
    nanosleep(&ts, NULL);
    *us = *us * 2 > max_us ? max_us : *us * 2;
}

uint64_t cg_deadline_after(int ms)
{
    return sg_now_mono_ns() + (uint64_t)ms * 1000000ull;
}

/* ---------- recursive walk ---------- */

int cg_walk(const char *dir, int depth, bool post, walk_fn fn, void *ud, sg_err *err)
{
    int r;
    if (!post && (r = fn(dir, ud, err)) != 0)
        return r;
    sg_autoclosedir DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT && depth > 0)
            return 0; /* removed meanwhile */
        return sg_err_sys(err, "cannot open cgroup %s", dir);
    }
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e)
            break;
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        if (depth >= SG_CG_MAX_DEPTH)
            return sg_err_set(err, ELOOP, "cgroup %s: nested deeper than %d levels", dir, SG_CG_MAX_DEPTH);
        sg_autofree char *sub = sg_strdup_printf("%s/%s", dir, e->d_name);
        if ((r = cg_walk(sub, depth + 1, post, fn, ud, err)) != 0)
            return r;
    }
    if (errno)
        return sg_err_sys(err, "cannot list cgroup %s", dir);
    if (post && (r = fn(dir, ud, err)) != 0)
        return r;
    return 0;
}

static int collect_procs(const char *dir, void *ud, sg_err *err)
{
    pid_list *l = ud;
    sg_autofree char *p = sg_strdup_printf("%s/cgroup.procs", dir);
    sg_autofclose FILE *f = fopen(p, "re");
    if (!f) {
        if (errno == ENOENT)
            return 0; /* a leaf removed meanwhile; the top is checked by walk */
        return sg_err_sys(err, "cannot open %s", p);
    }
    int pid;
    while (fscanf(f, "%d", &pid) == 1) {
        if (l->any_only) {
            l->n++;
            return 1;
        }
        if (sg_grow(&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
            return sg_err_set(err, ENOMEM, "out of memory listing %s", p);
        l->v[l->n++] = pid;
    }
    if (ferror(f))
        return sg_err_sys(err, "cannot read %s", p);
    return 0;
}

int cg_list_procs(const char *dir, pid_list *l, sg_err *err)
{
    int r = cg_walk(dir, 0, false, collect_procs, l, err);
    return r < 0 ? -1 : 0;
}

typedef struct key_sum {
    const char *knob, *key;
    uint64_t sum;
} key_sum;

static int sum_key(const char *dir, void *ud, sg_err *err)
{
    key_sum *k = ud;
    uint64_t v;
    if (cg_read_key(dir, k->knob, k->key, true, &v, err) < 0)
        return -1;
    k->sum += v;
    return 0;
}

/* v1 counts oom kills and pids.max hits only in the cgroup of the victim or
 * forker, not its ancestors: sum the subtree. */
int cg_read_key_subtree(const char *dir, const char *knob, const char *key, uint64_t *out, sg_err *err)
{
    key_sum k = {.knob = knob, .key = key};
    if (cg_walk(dir, 0, false, sum_key, &k, err) < 0)
        return -1;
    *out = k.sum;
    return 0;
}

static int rmdir_one(const char *dir, void *ud, sg_err *err)
{
    if (rmdir(dir) == 0 || errno == ENOENT)
        return 0;
    if (errno == EBUSY)
        return sg_err_sys(err, "cannot remove cgroup %s (processes still in it)", dir);
    return sg_err_sys(err, "cannot remove cgroup %s", dir);
}

int cg_rmdir_tree(const char *dir, sg_err *err)
{
    struct stat st;
    if (stat(dir, &st) < 0 && errno == ENOENT)
        return 0;
    return cg_walk(dir, 0, true, rmdir_one, NULL, err) < 0 ? -1 : 0;
}


#include "sandbox/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"

/* Controllers we use. cpuacct and freezer exist only on v1 (v2 has them
 * built in: cpu.stat and cgroup.freeze). */
enum { C_MEMORY, C_PIDS, C_CPU, C_CPUACCT, C_FREEZER, C_N };
static const char *const ctrl_name[C_N] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

#define CG_CPU_PERIOD_US 100000
#define CG_CPU_MIN_QUOTA_US 1000 /* the kernel refuses less */
#define CG_CPUS_MAX 4096.0
#define CG_KNOB_MAX 4096         /* the knob files we parse are one page at most */
#define CG_COUNTER_TEXT_MAX 512  /* memory.oom_control, memory.events, pids.events, cpu.stat */
#define CG_FREEZE_TIMEOUT_MS 5000
#define CG_NAP_MAX_US 5000       /* longest sleep between polls of a knob */
#define CG_KILL_NAP_MAX_US 1000  /* ... while waiting for killed tasks: they take ~0.5 ms */
#define CG_KILL_SETTLE_MS 20     /* v1: wait this long for SIGKILLed tasks before another round */

typedef struct cg_mount {
    char path[PATH_MAX];
    char dev[32];     /* major:minor, to skip bind mounts of one hierarchy */
    unsigned ctrls;   /* bit per C_*: bound here (v1) or in cgroup.controllers (v2) */
    bool v2;
    bool cpuset;      /* v1 hierarchy co-mounted with cpuset: children need cpus/mems */
} cg_mount;

/* The cgroup mounts of this process, parsed once. */
static struct {
    bool done;
    size_t n;
    cg_mount m[SG_CG_MAX_FDS];
} g_mounts;

/* The hierarchies one sandbox uses; index 0 is the v2 one when there is one. */
typedef struct cg_set {
    sg_cg_layout layout;
    size_t n;
    const cg_mount *h[SG_CG_MAX_FDS];
    int at[C_N]; /* index into h per controller, -1 if unavailable */
    int v2;      /* index of the v2 hierarchy, -1 if none */
} cg_set;

struct sg_cgroup {
    char *id;
    cg_set s;
    bool fast_leaves; /* leaves only on the v2 hierarchy (sg_cgroup_set_fast_leaves) */
    int counter_fd[2]; /* the OOM and pids counters, kept open (sg_cgroup_counters) */
};

/* Whether hierarchy i holds <id>/<leaf>: with fast leaves, a leaf exists
 * only on the v2 hierarchy. */
static bool has_leaf(const sg_cgroup *cg, size_t i, const char *leaf)
{
    return !leaf || !cg->fast_leaves || (int)i == cg->s.v2;
}

/* ---------- mountinfo ---------- */

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
            r[3] <= '7') {
            *w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

static unsigned parse_ctrl_list(const char *list, const char *seps, bool *cpuset)
{
    unsigned bits = 0;
    sg_autofree char *copy = strdup(list);
    if (!copy)
        return 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, seps, &save); t; t = strtok_r(NULL, seps, &save)) {
        for (int c = 0; c < C_N; c++)
            if (strcmp(t, ctrl_name[c]) == 0)
                bits |= 1u << c;
        if (cpuset && strcmp(t, "cpuset") == 0)
            *cpuset = true;
    }
    return bits;
}

static void add_mount(const char *dev, const char *mnt, const char *fstype, const char *superopts)
{
    bool v2 = strcmp(fstype, "cgroup2") == 0;
    if (!v2 && strcmp(fstype, "cgroup") != 0)
        return;
    for (size_t i = 0; i < g_mounts.n; i++)
        if (strcmp(g_mounts.m[i].dev, dev) == 0 || (v2 && g_mounts.m[i].v2))
            return; /* first mount of a hierarchy wins */
    cg_mount m = {.v2 = v2};
    if (strlen(mnt) >= sizeof m.path || strlen(dev) >= sizeof m.dev)
        return;
    strcpy(m.path, mnt);
    strcpy(m.dev, dev);
    if (v2) {
        sg_autofree char *p = sg_strdup_printf("%s/cgroup.controllers", mnt);
        sg_autofree char *ctl = sg_read_file(p, CG_KNOB_MAX, NULL, NULL);
        if (ctl)
            m.ctrls = parse_ctrl_list(ctl, " \n", NULL) & ((1u << C_MEMORY) | (1u << C_PIDS) | (1u << C_CPU));
    } else {
        m.ctrls = parse_ctrl_list(superopts, ",", &m.cpuset);
        if (!m.ctrls)
            return; /* e.g. name=systemd, devices: not ours */
    }
    if (g_mounts.n < SG_ARRAY_LEN(g_mounts.m))
        g_mounts.m[g_mounts.n++] = m;
}

static void parse_mountinfo(void)
{
    if (g_mounts.done)
        return;
    g_mounts.done = true;
    sg_autofclose FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    sg_autofree char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        /* id parent major:minor root mountpoint opts [optional...] - fstype source superopts */
        char *sep = strstr(line, " - ");
        if (!sep)
            continue;
        *sep = '\0';
        char *save = NULL;
        char *fld[5] = {0};
        char *t = strtok_r(line, " ", &save);
        for (int i = 0; i < 5 && t; i++, t = strtok_r(NULL, " ", &save))
            fld[i] = t;
        char *save2 = NULL;
        char *fstype = strtok_r(sep + 3, " ", &save2);
        char *source = strtok_r(NULL, " ", &save2);
        char *superopts = strtok_r(NULL, " \n", &save2);
        if (!fld[4] || !fstype || !source || !superopts)
            continue;
        unescape_octal(fld[4]);
        add_mount(fld[2], fld[4], fstype, superopts);
    }
}

static void select_set(cg_set *s)
{
    parse_mountinfo();
    memset(s, 0, sizeof *s);
    s->v2 = -1;
    for (int c = 0; c < C_N; c++)
        s->at[c] = -1;
    const char *force = getenv("SANDGLASS_CGROUP_LAYOUT");
    bool use_v1 = true, use_v2 = true;
    if (force && strcmp(force, "none") == 0)
        use_v1 = use_v2 = false;
    else if (force && strcmp(force, "v1") == 0)
        use_v2 = false;
    else if (force && strcmp(force, "v2") == 0)
        use_v1 = false;
    bool have_v1 = false;
    for (size_t i = 0; i < g_mounts.n && use_v2; i++) {
        if (!g_mounts.m[i].v2)
            continue;
        s->v2 = (int)s->n;
        s->h[s->n++] = &g_mounts.m[i];
    }
    for (size_t i = 0; i < g_mounts.n && use_v1; i++) {
        const cg_mount *m = &g_mounts.m[i];
        if (m->v2)
            continue;
        for (int c = 0; c < C_N; c++)
            if (m->ctrls & (1u << c))
                s->at[c] = (int)s->n;
        s->h[s->n++] = m;
        have_v1 = true;
    }
    if (s->v2 >= 0)
        for (int c = 0; c < C_N; c++)
            if (s->at[c] < 0 && (s->h[s->v2]->ctrls & (1u << c)))
                s->at[c] = s->v2;
    if (s->n == 0)
        s->layout = SG_CG_NONE;
    else if (s->v2 < 0)
        s->layout = SG_CG_V1;
    else
        s->layout = have_v1 ? SG_CG_SPLIT : SG_CG_V2;
}

sg_cg_layout sg_cgroup_layout(void)
{
    cg_set s;
    select_set(&s);
    return s.layout;
}

const char *sg_cgroup_layout_name(sg_cg_layout l)
{
    switch (l) {
    case SG_CG_NONE: return "none";
    case SG_CG_V2: return "v2";
    case SG_CG_V1: return "v1";
    case SG_CG_SPLIT: return "split";
    }
    return "unknown";
}

sg_cg_layout sg_cgroup_get_layout(const sg_cgroup *cg)
{
    return cg->s.layout;
}

/* ---------- small helpers ---------- */

static int check_name(const char *what, const char *s, sg_err *err)
{
    if (!sg_valid_name(s))
        return sg_err_set(err, EINVAL, "invalid cgroup %s '%s': use 1..%d of [A-Za-z0-9._@-], not '.' or '..'", what,
                          s ? s : "(null)", SG_NAME_MAX);
    return 0;
}

static int check_leaf(const char *leaf, sg_err *err)
{
    return leaf ? check_name("leaf name", leaf, err) : 0;
}

/* <mount>/sandglass/<id>[/<leaf>] */
static char *cg_dir(const sg_cgroup *cg, size_t i, const char *leaf)
{
    return sg_strdup_printf("%s/" SG_CG_ROOT_NAME "/%s%s%s", cg->s.h[i]->path, cg->id, leaf ? "/" : "",
                            leaf ? leaf : "");
}

/* The hierarchy whose cgroup.procs we list: every process is in all of them;
 * prefer the one a freeze applies to. */
static size_t primary(const sg_cgroup *cg)
{
    if (cg->s.v2 >= 0)
        return (size_t)cg->s.v2;
    if (cg->s.at[C_FREEZER] >= 0)
        return (size_t)cg->s.at[C_FREEZER];
    if (cg->s.at[C_PIDS] >= 0)
        return (size_t)cg->s.at[C_PIDS];
    return 0;
}

static int knob_write(const char *dir, const char *knob, const char *val, sg_err *err)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
    sg_autoclose int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", p);
    if (sg_write_all(fd, val, strlen(val)) < 0)
        return sg_err_sys(err, "cannot write '%s' to %s", val, p);
    return 0;
}

static bool knob_exists(const char *dir, const char *knob)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
    return access(p, F_OK) == 0;
}

/* Missing knob: *out = 0 and success when optional (older kernels, or a v2
 * leaf without the controller enabled). */
static char *knob_read(const char *dir, const char *knob, bool optional, bool *missing, sg_err *err)
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

static int read_u64(const char *dir, const char *knob, bool optional, uint64_t *out, sg_err *err)
{
    bool missing;
    *out = 0;
    sg_autofree char *s = knob_read(dir, knob, optional, &missing, err);
    if (!s)
        return missing ? 0 : -1;
    if (parse_u64(s, out) < 0)
        return sg_err_set(err, EINVAL, "%s/%s: unexpected content '%.40s'", dir, knob, s);
    return 0;
}

/* A "key value" line of a flat-keyed file (cgroup.events, memory.events, ...).
 * A missing key reads as 0. */
/* The value of "key N" in a knob's text s (0 when the key is absent). */
static int find_key(const char *s, const char *dir, const char *knob, const char *key, uint64_t *out,
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

static int read_key(const char *dir, const char *knob, const char *key, bool optional, uint64_t *out, sg_err *err)
{
    bool missing;
    *out = 0;
    sg_autofree char *s = knob_read(dir, knob, optional, &missing, err);
    if (!s)
        return missing ? 0 : -1;
    return find_key(s, dir, knob, key, out, err);
}

/* read_key through an fd kept open in slot: the supervisor reads these
 * counters after every exec, and the path lookup and open in cgroupfs cost
 * more than the read (a read at offset 0 shows the knob anew). */
static int read_key_kept(sg_cgroup *cg, int slot, const char *dir, const char *knob, const char *key,
                         uint64_t *out, sg_err *err)
{
    if (cg->counter_fd[slot] < 0) {
        sg_autofree char *p = sg_strdup_printf("%s/%s", dir, knob);
        cg->counter_fd[slot] = open(p, O_RDONLY | O_CLOEXEC);
        if (cg->counter_fd[slot] < 0)
            return read_key(dir, knob, key, true, out, err);
    }
    char buf[CG_COUNTER_TEXT_MAX];
    ssize_t n = pread(cg->counter_fd[slot], buf, sizeof buf - 1, 0);
    if (n < 0 || (size_t)n == sizeof buf - 1) {
        close(cg->counter_fd[slot]);
        cg->counter_fd[slot] = -1;
        return read_key(dir, knob, key, true, out, err);
    }
    buf[n] = '\0';
    return find_key(buf, dir, knob, key, out, err);
}

/* Sleeps *us, then doubles it up to max_us. */
static void nap(unsigned *us, unsigned max_us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)*us * 1000};
    nanosleep(&ts, NULL);
    *us = *us * 2 > max_us ? max_us : *us * 2;
}

static uint64_t deadline_after(int ms)
{
    return sg_now_mono_ns() + (uint64_t)ms * 1000000ull;
}

/* ---------- recursive walk ---------- */

/* fn returns < 0 on error, > 0 to stop the walk early (returned as is). */
typedef int (*walk_fn)(const char *dir, void *ud, sg_err *err);

static int walk(const char *dir, int depth, bool post, walk_fn fn, void *ud, sg_err *err)
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
        if ((r = walk(sub, depth + 1, post, fn, ud, err)) != 0)
            return r;
    }
    if (errno)
        return sg_err_sys(err, "cannot list cgroup %s", dir);
    if (post && (r = fn(dir, ud, err)) != 0)
        return r;
    return 0;
}

typedef struct pid_list {
    pid_t *v;
    size_t n, cap;
    bool any_only; /* stop at the first pid (populated check) */
} pid_list;

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

static int list_procs(const char *dir, pid_list *l, sg_err *err)
{
    int r = walk(dir, 0, false, collect_procs, l, err);
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
    if (read_key(dir, k->knob, k->key, true, &v, err) < 0)
        return -1;
    k->sum += v;
    return 0;
}

/* v1 counts oom kills and pids.max hits only in the cgroup of the victim or
 * forker, not its ancestors: sum the subtree. */
static int read_key_subtree(const char *dir, const char *knob, const char *key, uint64_t *out, sg_err *err)
{
    key_sum k = {.knob = knob, .key = key};
    if (walk(dir, 0, false, sum_key, &k, err) < 0)
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

static int rmdir_tree(const char *dir, sg_err *err)
{
    struct stat st;
    if (stat(dir, &st) < 0 && errno == ENOENT)
        return 0;
    return walk(dir, 0, true, rmdir_one, NULL, err) < 0 ? -1 : 0;
}

/* ---------- create / open ---------- */

void sg_cgroup_free(sg_cgroup *cg)
{
    if (!cg)
        return;
    for (size_t i = 0; i < 2; i++)
        if (cg->counter_fd[i] >= 0)
            close(cg->counter_fd[i]);
    free(cg->id);
    free(cg);
}

static void cgroup_freep(sg_cgroup **cg)
{
    sg_cgroup_free(*cg);
}

static sg_cgroup *cg_new(const char *id, sg_err *err)
{
    if (check_name("id", id, err) < 0)
        return NULL;
    sg_cgroup *cg = calloc(1, sizeof *cg);
    if (cg)
        cg->counter_fd[0] = cg->counter_fd[1] = -1;
    if (!cg || !(cg->id = strdup(id))) {
        free(cg);
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    select_set(&cg->s);
    if (cg->s.layout == SG_CG_NONE) {
        sg_cgroup_free(cg);
        sg_err_set(err, ENOTSUP,
                   "no usable cgroup hierarchy: /proc/self/mountinfo has no cgroup2 mount and no cgroup v1 mount of "
                   "memory, pids, cpu, cpuacct or freezer");
        return NULL;
    }
    return cg;
}

/* v1 cpuset co-mounted with one of ours: a new cgroup starts with empty
 * cpus/mems and refuses tasks until they are copied from the parent. */
static int cpuset_inherit(const char *parent, const char *child, sg_err *err)
{
    static const char *const knobs[] = {"cpuset.cpus", "cpuset.mems"};
    for (size_t k = 0; k < SG_ARRAY_LEN(knobs); k++) {
        bool missing;
        sg_autofree char *v = knob_read(parent, knobs[k], false, &missing, err);
        if (!v || knob_write(child, knobs[k], v, err) < 0)
            return -1;
    }
    return 0;
}

/* mkdir; *made tells whether we created it (EEXIST is fine when allowed). */
static int cg_mkdir(const cg_mount *m, const char *parent, const char *dir, bool allow_exist, bool *made,
                    sg_err *err)
{
    *made = false;
    if (mkdir(dir, 0755) < 0) {
        if (errno == EEXIST && allow_exist)
            return 0;
        if (errno == EEXIST)
            return sg_err_sys(err, "cannot create cgroup %s (left over from an earlier run? destroy or gc it)", dir);
        return sg_err_sys(err, "cannot create cgroup %s", dir);
    }
    *made = true;
    if (!m->v2 && m->cpuset && cpuset_inherit(parent, dir, err) < 0)
        return -1;
    return 0;
}

/* v2: controllers must be enabled in the root's and sandglass/'s
 * subtree_control for <id> to get memory.max etc.; never in <id>'s, so the
 * sandbox's init may live in <id> beside its leaves. */
static int v2_enable(const char *dir, unsigned want, sg_err *err)
{
    bool missing;
    sg_autofree char *have = knob_read(dir, "cgroup.subtree_control", false, &missing, err);
    if (!have)
        return -1;
    unsigned enabled = parse_ctrl_list(have, " \n", NULL);
    for (int c = 0; c < C_N; c++) {
        if (!(want & (1u << c)) || (enabled & (1u << c)))
            continue;
        sg_autofree char *v = sg_strdup_printf("+%s", ctrl_name[c]);
        if (knob_write(dir, "cgroup.subtree_control", v, err) < 0) {
            if (err && err->code == EBUSY)
                sg_err_prefix(err, "cannot enable the %s controller: processes live in %s itself (no-internal-process "
                                   "rule; e.g. a container's cgroup namespace root) — move them into a child cgroup",
                              ctrl_name[c], dir);
            else
                sg_err_prefix(err, "cannot enable the %s controller", ctrl_name[c]);
            return -1;
        }
    }
    return 0;
}

static int make_roots(sg_cgroup *cg, sg_err *err)
{
    unsigned v2_want = 0;
    if (cg->s.v2 >= 0)
        for (int c = 0; c < C_N; c++)
            if (cg->s.at[c] == cg->s.v2)
                v2_want |= 1u << c;
    for (size_t i = 0; i < cg->s.n; i++) {
        const cg_mount *m = cg->s.h[i];
        if (m->v2 && v2_want && v2_enable(m->path, v2_want, err) < 0)
            return -1;
        sg_autofree char *root = sg_strdup_printf("%s/" SG_CG_ROOT_NAME, m->path);
        bool made;
        if (cg_mkdir(m, m->path, root, true, &made, err) < 0)
            return -1;
        if (m->v2 && v2_want && v2_enable(root, v2_want, err) < 0)
            return -1;
    }
    return 0;
}

int sg_cgroup_set_limits(sg_cgroup *cg, const sg_cg_limits *lim, sg_err *err)
{
    char buf[64];
    const char *layout = sg_cgroup_layout_name(cg->s.layout);
    if (lim->memory_bytes) {
        int i = cg->s.at[C_MEMORY];
        if (i < 0)
            return sg_err_set(err, ENOTSUP, "memory limit requested but no memory controller is available (cgroup layout %s)", layout);
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        snprintf(buf, sizeof buf, "%" PRIu64, lim->memory_bytes);
        if (cg->s.h[i]->v2) {
            if (knob_write(dir, "memory.max", buf, err) < 0)
                return -1;
            /* no swap: the limit is the limit */
            if (knob_exists(dir, "memory.swap.max") && knob_write(dir, "memory.swap.max", "0", err) < 0)
                return -1;
        } else {
            if (knob_write(dir, "memory.limit_in_bytes", buf, err) < 0)
                return -1;
            /* memsw (memory + swap) exists only with swap accounting */
            if (knob_exists(dir, "memory.memsw.limit_in_bytes") &&
                knob_write(dir, "memory.memsw.limit_in_bytes", buf, err) < 0)
                return -1;
        }
    }
    if (lim->pids) {
        int i = cg->s.at[C_PIDS];
        if (i < 0)
            return sg_err_set(err, ENOTSUP, "pids limit requested but no pids controller is available (cgroup layout %s)", layout);
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        snprintf(buf, sizeof buf, "%" PRIu64, lim->pids);
        if (knob_write(dir, "pids.max", buf, err) < 0)
            return -1;
    }
    if (lim->cpus != 0) {
        if (!(lim->cpus > 0) || !isfinite(lim->cpus) || lim->cpus > CG_CPUS_MAX)
            return sg_err_set(err, EINVAL, "invalid cpu limit %g: must be in (0, %g]", lim->cpus, CG_CPUS_MAX);
        int i = cg->s.at[C_CPU];
        if (i < 0)
            return sg_err_set(err, ENOTSUP, "cpu limit requested but no cpu controller is available (cgroup layout %s)", layout);
        /* rounded without libm: the supervisor does not map it for this */
        long long quota = (long long)(lim->cpus * CG_CPU_PERIOD_US + 0.5);
        if (quota < CG_CPU_MIN_QUOTA_US)
            quota = CG_CPU_MIN_QUOTA_US;
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        if (cg->s.h[i]->v2) {
            snprintf(buf, sizeof buf, "%lld %d", quota, CG_CPU_PERIOD_US);
            if (knob_write(dir, "cpu.max", buf, err) < 0)
                return -1;
        } else {
            snprintf(buf, sizeof buf, "%d", CG_CPU_PERIOD_US);
            if (knob_write(dir, "cpu.cfs_period_us", buf, err) < 0)
                return -1;
            snprintf(buf, sizeof buf, "%lld", quota);
            if (knob_write(dir, "cpu.cfs_quota_us", buf, err) < 0)
                return -1;
        }
    }
    return 0;
}

sg_cgroup *sg_cgroup_create(const char *id, const sg_cg_limits *lim, sg_err *err)
{
    __attribute__((cleanup(cgroup_freep))) sg_cgroup *cg = cg_new(id, err);
    if (!cg)
        return NULL;
    static const sg_cg_limits none = {0};
    if (!lim)
        lim = &none;
    if (make_roots(cg, err) < 0) {
        sg_err_prefix(err, "cgroup for sandbox %s", id);
        return NULL;
    }
    bool made[SG_CG_MAX_FDS] = {0};
    int rc = 0;
    for (size_t i = 0; i < cg->s.n && rc == 0; i++) {
        sg_autofree char *parent = sg_strdup_printf("%s/" SG_CG_ROOT_NAME, cg->s.h[i]->path);
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        rc = cg_mkdir(cg->s.h[i], parent, dir, false, &made[i], err);
    }
    if (rc == 0)
        rc = sg_cgroup_set_limits(cg, lim, err);
    if (rc < 0) {
        for (size_t i = 0; i < cg->s.n; i++) {
            if (!made[i])
                continue;
            sg_autofree char *dir = cg_dir(cg, i, NULL);
            rmdir(dir);
        }
        sg_err_prefix(err, "cgroup for sandbox %s", id);
        return NULL;
    }
    return sg_steal_ptr(&cg);
}

sg_cgroup *sg_cgroup_open(const char *id, sg_err *err)
{
    __attribute__((cleanup(cgroup_freep))) sg_cgroup *cg = cg_new(id, err);
    if (!cg)
        return NULL;
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
            return sg_steal_ptr(&cg);
    }
    sg_autofree char *dir = cg_dir(cg, 0, NULL);
    sg_err_set(err, ENOENT, "no cgroup for sandbox %s (%s and the other hierarchies do not exist)", id, dir);
    return NULL;
}

/* ---------- leaves, joining ---------- */

int sg_cgroup_leaf_create(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (!leaf)
        return 0;
    if (check_leaf(leaf, err) < 0)
        return -1;
    bool made[SG_CG_MAX_FDS] = {0};
    for (size_t i = 0; i < cg->s.n; i++) {
        if (!has_leaf(cg, i, leaf))
            continue;
        sg_autofree char *parent = cg_dir(cg, i, NULL);
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        if (cg_mkdir(cg->s.h[i], parent, dir, true, &made[i], err) < 0) {
            for (size_t j = 0; j <= i; j++) {
                if (!made[j])
                    continue;
                sg_autofree char *d = cg_dir(cg, j, leaf);
                rmdir(d);
            }
            return -1;
        }
    }
    return 0;
}

int sg_cgroup_procs_fds(sg_cgroup *cg, const char *leaf, int fds[SG_CG_MAX_FDS], sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < cg->s.n; i++) {
        if (!has_leaf(cg, i, leaf))
            continue;
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        sg_autofree char *p = sg_strdup_printf("%s/cgroup.procs", dir);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            sg_err_sys(err, "cannot open %s", p);
            for (size_t j = 0; j < n; j++) {
                close(fds[j]);
                fds[j] = -1;
            }
            return -1;
        }
        fds[n++] = fd;
    }
    return (int)n;
}

int sg_cgroup_join_fds(sg_cgroup *cg, const char *leaf, int fds[SG_CG_MAX_FDS], sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < cg->s.n && n < SG_CG_MAX_FDS; i++) {
        sg_autofree char *dir = cg_dir(cg, i, has_leaf(cg, i, leaf) ? leaf : NULL);
        sg_autofree char *p = sg_strdup_printf("%s/cgroup.procs", dir);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            sg_err_sys(err, "cannot open %s", p);
            for (size_t j = 0; j < n; j++) {
                close(fds[j]);
                fds[j] = -1;
            }
            return -1;
        }
        fds[n++] = fd;
    }
    return (int)n;
}

int sg_cgroup_attach(sg_cgroup *cg, const char *leaf, pid_t pid, sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    char buf[32];
    snprintf(buf, sizeof buf, "%d", (int)pid);
    for (size_t i = 0; i < cg->s.n; i++) {
        if (!has_leaf(cg, i, leaf))
            continue;
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        if (knob_write(dir, "cgroup.procs", buf, err) < 0) {
            sg_err_prefix(err, "cannot move pid %d into the cgroup", (int)pid);
            return -1;
        }
    }
    return 0;
}

/* ---------- freeze, populated, kill ---------- */

static bool v2_has(const sg_cgroup *cg, const char *leaf, const char *knob)
{
    if (cg->s.v2 < 0)
        return false;
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
    return knob_exists(dir, knob);
}

static int freeze_until(sg_cgroup *cg, const char *leaf, bool frozen, uint64_t deadline, sg_err *err)
{
    unsigned us = 50;
    if (v2_has(cg, leaf, "cgroup.freeze")) {
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        if (knob_write(dir, "cgroup.freeze", frozen ? "1" : "0", err) < 0)
            return -1;
        for (;;) {
            uint64_t v;
            if (read_key(dir, "cgroup.events", "frozen", false, &v, err) < 0)
                return -1;
            if ((v != 0) == frozen)
                return 0;
            if (sg_now_mono_ns() >= deadline)
                return sg_err_set(err, ETIMEDOUT, "%s: still %s", dir, frozen ? "not frozen" : "frozen");
            nap(&us, CG_NAP_MAX_US);
        }
    }
    if (cg->s.at[C_FREEZER] < 0)
        return sg_err_set(err, ENOTSUP, "cannot freeze: no v2 cgroup.freeze and no v1 freezer controller (cgroup layout %s)",
                          sg_cgroup_layout_name(cg->s.layout));
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.at[C_FREEZER], leaf);
    const char *want = frozen ? "FROZEN" : "THAWED";
    if (knob_write(dir, "freezer.state", want, err) < 0)
        return -1;
    for (;;) {
        bool missing;
        sg_autofree char *st = knob_read(dir, "freezer.state", false, &missing, err);
        if (!st)
            return -1;
        if (strncmp(st, want, strlen(want)) == 0)
            return 0;
        if (sg_now_mono_ns() >= deadline)
            return sg_err_set(err, ETIMEDOUT, "%s: freezer.state still %.20s", dir, st);
        nap(&us, CG_NAP_MAX_US);
    }
}

typedef struct thaw_ctx {
    const char *knob, *value;
} thaw_ctx;

static int thaw_one(const char *dir, void *ud, sg_err *err)
{
    thaw_ctx *c = ud;
    sg_err e = {0};
    if (knob_write(dir, c->knob, c->value, &e) < 0 && e.code != ENOENT) {
        *err = e;
        return -1;
    }
    return 0;
}

/* A cgroup frozen on its own stays frozen when its parent thaws (v1
 * self_freezing, v2 cgroup.freeze): thaw every descendant too, or SIGKILLed
 * tasks in it never die. */
static int thaw_tree(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    bool v2 = v2_has(cg, leaf, "cgroup.freeze");
    int i = v2 ? cg->s.v2 : cg->s.at[C_FREEZER];
    if (i < 0)
        return 0;
    sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
    thaw_ctx c = {v2 ? "cgroup.freeze" : "freezer.state", v2 ? "0" : "THAWED"};
    if (walk(dir, 0, false, thaw_one, &c, err) < 0)
        return -1;
    return freeze_until(cg, leaf, false, deadline_after(CG_FREEZE_TIMEOUT_MS), err);
}

int sg_cgroup_freeze(sg_cgroup *cg, const char *leaf, bool frozen, sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    if (!frozen)
        return thaw_tree(cg, leaf, err);
    return freeze_until(cg, leaf, frozen, deadline_after(CG_FREEZE_TIMEOUT_MS), err);
}

int sg_cgroup_populated(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    if (cg->s.v2 >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        uint64_t v;
        if (read_key(dir, "cgroup.events", "populated", false, &v, err) < 0)
            return -1;
        return v != 0;
    }
    sg_autofree char *dir = cg_dir(cg, primary(cg), leaf);
    pid_list l = {.any_only = true};
    if (list_procs(dir, &l, err) < 0)
        return -1;
    return l.n != 0;
}

int sg_cgroup_pids(sg_cgroup *cg, const char *leaf, pid_t **pids, size_t *n, sg_err *err)
{
    *pids = NULL;
    *n = 0;
    if (check_leaf(leaf, err) < 0)
        return -1;
    sg_autofree char *dir = cg_dir(cg, primary(cg), leaf);
    pid_list l = {0};
    if (list_procs(dir, &l, err) < 0) {
        free(l.v);
        return -1;
    }
    *pids = l.v;
    *n = l.n;
    return 0;
}

static int timed_out(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err)
{
    pid_t *pids = NULL;
    size_t n = 0;
    sg_err e = {0};
    sg_cgroup_pids(cg, leaf, &pids, &n, &e);
    sg_autofree char *dir = cg_dir(cg, primary(cg), leaf);
    sg_err_set(err, ETIMEDOUT, "%s: %zu process(es) still there %d ms after SIGKILL (first pid %d)", dir, n,
               timeout_ms, n ? (int)pids[0] : 0);
    free(pids);
    return -1;
}

/* v2: the kernel kills the whole subtree, forks in flight included; then
 * wait for cgroup.events to say "populated 0". A short sleep loop, not
 * inotify: closing an inotify fd waits for an RCU grace period (~15 ms
 * here), longer than the tasks take to die (~0.5 ms), and the kernel
 * rate-limits cgroup.events notifications anyway. */
static int kill_v2(sg_cgroup *cg, const char *leaf, int timeout_ms, uint64_t deadline, sg_err *err)
{
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
    if (knob_write(dir, "cgroup.kill", "1", err) < 0)
        return -1;
    unsigned us = 50;
    for (;;) {
        uint64_t pop;
        if (read_key(dir, "cgroup.events", "populated", false, &pop, err) < 0)
            return -1;
        if (!pop)
            return 0;
        if (sg_now_mono_ns() >= deadline)
            return timed_out(cg, leaf, timeout_ms, err);
        nap(&us, CG_KILL_NAP_MAX_US);
    }
}

/* v1 (or v2 without cgroup.kill): freeze so nothing forks, SIGKILL every
 * listed pid, thaw so the signals are delivered, repeat until a frozen
 * listing is empty. A frozen task cannot exit and be reaped by a parent
 * inside, so its pid is not reused under us. */
static int kill_loop(sg_cgroup *cg, const char *leaf, int timeout_ms, uint64_t deadline, sg_err *err)
{
    bool can_freeze = v2_has(cg, leaf, "cgroup.freeze") || cg->s.at[C_FREEZER] >= 0;
    sg_autofree char *dir = cg_dir(cg, primary(cg), leaf);
    for (;;) {
        if (can_freeze) {
            sg_err fe = {0};
            /* a task in uninterruptible sleep can hold FREEZING: kill anyway */
            uint64_t until = deadline_after(100);
            if (freeze_until(cg, leaf, true, until < deadline ? until : deadline, &fe) < 0 && fe.code != ETIMEDOUT) {
                *err = fe;
                return -1;
            }
        }
        pid_list l = {0};
        if (list_procs(dir, &l, err) < 0) {
            free(l.v);
            return -1;
        }
        for (size_t i = 0; i < l.n; i++)
            kill(l.v[i], SIGKILL);
        free(l.v);
        if (can_freeze && thaw_tree(cg, leaf, err) < 0)
            return -1;
        if (l.n == 0)
            return 0;
        /* give the killed tasks a moment to exit before the next round */
        uint64_t settle = deadline_after(CG_KILL_SETTLE_MS);
        unsigned us = 50;
        for (;;) {
            int pop = sg_cgroup_populated(cg, leaf, err);
            if (pop < 0)
                return -1;
            if (pop == 0)
                return 0;
            uint64_t now = sg_now_mono_ns();
            if (now >= deadline)
                return timed_out(cg, leaf, timeout_ms, err);
            if (now >= settle)
                break;
            nap(&us, CG_KILL_NAP_MAX_US);
        }
    }
}

/* A cgroup at its CPU quota is throttled until the next period, and a
 * killed task must run to exit: an abort of 50 busy processes under
 * --cpus 0.1 took 0.8-1.1 s here, 44-72 ms without a limit. So the quota
 * (which sits on the sandbox's cgroup) is lifted for the kill and put back
 * after it: the sandbox's other leaves run unthrottled for those
 * milliseconds. The limit as it was goes into saved ("" when there is
 * none, or nothing could be read); best effort: a kill never fails for it. */
static void cpu_unthrottle(sg_cgroup *cg, char *saved, size_t size)
{
    saved[0] = '\0';
    int i = cg->s.at[C_CPU];
    if (i < 0)
        return;
    bool v2 = cg->s.h[i]->v2;
    const char *knob = v2 ? "cpu.max" : "cpu.cfs_quota_us";
    sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
    sg_autofree char *path = sg_strdup_printf("%s/%s", dir, knob);
    size_t len = 0;
    sg_autofree char *cur = sg_read_file(path, 64, &len, NULL);
    if (!cur)
        return;
    cur[strcspn(cur, "\n")] = '\0';
    if ((v2 && strncmp(cur, "max", 3) == 0) || (!v2 && strcmp(cur, "-1") == 0))
        return; /* no limit */
    if (knob_write(dir, knob, v2 ? "max" : "-1", NULL) == 0)
        snprintf(saved, size, "%s", cur);
}

static void cpu_restore(sg_cgroup *cg, const char *saved)
{
    if (!saved[0])
        return;
    int i = cg->s.at[C_CPU];
    sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
    knob_write(dir, cg->s.h[i]->v2 ? "cpu.max" : "cpu.cfs_quota_us", saved, NULL);
}

int sg_cgroup_kill(sg_cgroup *cg, const char *leaf, int timeout_ms, sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    if (timeout_ms <= 0)
        timeout_ms = SG_CG_KILL_DEFAULT_MS;
    uint64_t deadline = deadline_after(timeout_ms);
    char cpu_saved[64];
    cpu_unthrottle(cg, cpu_saved, sizeof cpu_saved);
    int r = v2_has(cg, leaf, "cgroup.kill") ? kill_v2(cg, leaf, timeout_ms, deadline, err)
                                             : kill_loop(cg, leaf, timeout_ms, deadline, err);
    cpu_restore(cg, cpu_saved);
    if (r < 0)
        sg_err_prefix(err, "cannot kill the processes of sandbox %s%s%s", cg->id, leaf ? " exec " : "",
                      leaf ? leaf : "");
    return r;
}

/* ---------- stats ---------- */

int sg_cgroup_stats(sg_cgroup *cg, const char *leaf, sg_cg_stats *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (check_leaf(leaf, err) < 0)
        return -1;
    int i;
    if (leaf && cg->fast_leaves) {
        /* A v2-only leaf: cpu time from its cpu.stat; memory and pids are
         * the sandbox's (ask with leaf NULL). */
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        uint64_t us = 0;
        if (read_key(dir, "cpu.stat", "usage_usec", true, &us, err) < 0)
            return -1;
        out->cpu_ns = us * 1000;
        return 0;
    }
    if ((i = cg->s.at[C_CPUACCT]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
        if (read_u64(dir, "cpuacct.usage", false, &out->cpu_ns, err) < 0)
            return -1;
    } else if (cg->s.v2 >= 0) {
        /* cpu.stat's usage_usec is there even without the cpu controller */
        sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
        uint64_t us;
        if (read_key(dir, "cpu.stat", "usage_usec", true, &us, err) < 0)
            return -1;
        out->cpu_ns = us * 1000;
    }
    if ((i = cg->s.at[C_MEMORY]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
        if (cg->s.h[i]->v2) {
            if (read_u64(dir, "memory.peak", true, &out->memory_peak, err) < 0 ||
                read_key(dir, "memory.events", "oom_kill", true, &out->oom_kills, err) < 0)
                return -1;
        } else {
            if (read_u64(dir, "memory.max_usage_in_bytes", false, &out->memory_peak, err) < 0 ||
                read_key_subtree(dir, "memory.oom_control", "oom_kill", &out->oom_kills, err) < 0)
                return -1;
        }
    }
    if ((i = cg->s.at[C_PIDS]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, leaf);
        if (cg->s.h[i]->v2) {
            if (read_key(dir, "pids.events", "max", true, &out->pids_max_hits, err) < 0)
                return -1;
        } else if (read_key_subtree(dir, "pids.events", "max", &out->pids_max_hits, err) < 0) {
            return -1;
        }
    }
    pid_t *pids = NULL;
    size_t n = 0;
    if (sg_cgroup_pids(cg, leaf, &pids, &n, err) < 0)
        return -1;
    free(pids);
    out->nprocs = n;
    return 0;
}

int sg_cgroup_set_fast_leaves(sg_cgroup *cg, bool on)
{
    if (on && cg->s.v2 < 0)
        return -1;
    cg->fast_leaves = on;
    return 0;
}

int sg_cgroup_leaf_dirfd(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (check_leaf(leaf, err) < 0)
        return -1;
    if (cg->s.v2 < 0)
        return sg_err_set(err, ENOTSUP, "no cgroup v2 hierarchy: cannot clone into a cgroup");
    sg_autofree char *dir = cg_dir(cg, (size_t)cg->s.v2, leaf);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", dir);
    return fd;
}

int sg_cgroup_cpu_stat_open(int dirfd)
{
    return openat(dirfd, "cpu.stat", O_RDONLY | O_CLOEXEC);
}

int sg_cgroup_cpu_stat_read(int fd, uint64_t *cpu_ns, sg_err *err)
{
    char buf[CG_COUNTER_TEXT_MAX];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return sg_err_sys(err, "cannot read a leaf's cpu.stat");
    buf[n] = '\0';
    uint64_t us = 0;
    if (find_key(buf, "leaf", "cpu.stat", "usage_usec", &us, err) < 0)
        return -1;
    *cpu_ns = us * 1000;
    return 0;
}

int sg_cgroup_events_open(int dirfd)
{
    return openat(dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
}

int sg_cgroup_events_populated(int fd, sg_err *err)
{
    char buf[CG_COUNTER_TEXT_MAX];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return sg_err_sys(err, "cannot read a leaf's cgroup.events");
    buf[n] = '\0';
    /* A missing key must not read as "empty": the leaf would be reused. */
    const char *p = strstr(buf, "populated ");
    if (!p || (p != buf && p[-1] != '\n') || (p[10] != '0' && p[10] != '1'))
        return sg_err_set(err, EINVAL, "a leaf's cgroup.events has no populated key");
    return p[10] == '1';
}

int sg_cgroup_counters(sg_cgroup *cg, uint64_t *oom_kills, uint64_t *pids_max_hits, sg_err *err)
{
    *oom_kills = *pids_max_hits = 0;
    int i;
    if ((i = cg->s.at[C_MEMORY]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        /* v1 counts per cgroup: sum the leaves, unless they live on v2 */
        int r = cg->s.h[i]->v2 ? read_key_kept(cg, 0, dir, "memory.events", "oom_kill", oom_kills, err)
                : cg->fast_leaves ? read_key_kept(cg, 0, dir, "memory.oom_control", "oom_kill", oom_kills, err)
                                  : read_key_subtree(dir, "memory.oom_control", "oom_kill", oom_kills, err);
        if (r < 0)
            return -1;
    }
    if ((i = cg->s.at[C_PIDS]) >= 0) {
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        int r = cg->s.h[i]->v2 ? read_key_kept(cg, 1, dir, "pids.events", "max", pids_max_hits, err)
                : cg->fast_leaves ? read_key_kept(cg, 1, dir, "pids.events", "max", pids_max_hits, err)
                                  : read_key_subtree(dir, "pids.events", "max", pids_max_hits, err);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* ---------- removal, listing ---------- */

char **sg_cgroup_leaves(sg_cgroup *cg, sg_err *err)
{
    sg_autofree char *dir = cg_dir(cg, primary(cg), NULL);
    sg_autoclosedir DIR *d = opendir(dir);
    if (!d) {
        sg_err_sys(err, "cannot open cgroup %s", dir);
        return NULL;
    }
    size_t n = 0, cap = 8;
    char **v = calloc(cap + 1, sizeof *v);
    if (!v) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        if (sg_strv_push(&v, &n, &cap, e->d_name) < 0) {
            sg_strvfreep(&v);
            sg_err_set(err, ENOMEM, "out of memory");
            return NULL;
        }
    }
    return v;
}

int sg_cgroup_leaf_remove(sg_cgroup *cg, const char *leaf, sg_err *err)
{
    if (!leaf)
        return sg_err_set(err, EINVAL, "no leaf name given (use sg_cgroup_remove for the sandbox cgroup)");
    if (check_leaf(leaf, err) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, leaf);
        /* An empty leaf without sub-cgroups, or none on this hierarchy:
         * one call (this runs after every exec). */
        if (rmdir(dir) == 0 || errno == ENOENT)
            continue;
        sg_err e = {0};
        if (rmdir_tree(dir, &e) < 0 && rc == 0) {
            *err = e;
            rc = -1;
        }
    }
    return rc;
}

int sg_cgroup_remove(sg_cgroup *cg, sg_err *err)
{
    int rc = 0;
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        sg_err e = {0};
        if (rmdir_tree(dir, &e) < 0 && rc == 0) {
            *err = e;
            rc = -1;
        }
    }
    return rc;
}

char **sg_cgroup_list(sg_err *err)
{
    cg_set s;
    select_set(&s);
    size_t n = 0, cap = 16;
    sg_autostrv char **v = calloc(cap + 1, sizeof *v);
    if (!v) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < s.n; i++) {
        sg_autofree char *root = sg_strdup_printf("%s/" SG_CG_ROOT_NAME, s.h[i]->path);
        sg_autoclosedir DIR *d = opendir(root);
        if (!d) {
            if (errno == ENOENT)
                continue;
            sg_err_sys(err, "cannot list %s", root);
            return NULL;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_type != DT_DIR || !sg_valid_name(e->d_name))
                continue;
            bool dup = false;
            for (size_t k = 0; k < n && !dup; k++)
                dup = strcmp(v[k], e->d_name) == 0;
            if (dup)
                continue;
            if (sg_strv_push(&v, &n, &cap, e->d_name) < 0) {
                sg_err_set(err, ENOMEM, "out of memory");
                return NULL;
            }
        }
    }
    return sg_steal_ptr(&v);
}

char *sg_cgroup_path(sg_cgroup *cg, const char *leaf)
{
    return cg_dir(cg, 0, leaf); /* the v2 hierarchy is always first */
}

/* ---------- ownership ---------- */

int sg_cgroup_set_owner(sg_cgroup *cg, const char *owner, sg_err *err)
{
    size_t len = strlen(owner);
    if (len >= SG_CG_OWNER_MAX)
        return sg_err_set(err, ENAMETOOLONG, "owner mark too long");
    for (size_t i = 0; i < cg->s.n; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        if (setxattr(dir, SG_CG_OWNER_XATTR, owner, len, 0) < 0)
            return sg_err_sys(err, "cannot mark the owner of %s", dir);
    }
    return 0;
}

int sg_cgroup_owner(const char *id, char *buf, size_t size, sg_err *err)
{
    __attribute__((cleanup(cgroup_freep))) sg_cgroup *cg = sg_cgroup_open(id, err);
    if (!cg)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < cg->s.n && rc == 0; i++) {
        sg_autofree char *dir = cg_dir(cg, i, NULL);
        ssize_t n = getxattr(dir, SG_CG_OWNER_XATTR, buf, size - 1);
        if (n >= 0) {
            buf[n] = '\0';
            rc = 1;
        } else if (errno != ENODATA && errno != ENOENT && errno != ENOTSUP) {
            return sg_err_sys(err, "cannot read the owner of %s", dir);
        }
    }
    return rc;
}

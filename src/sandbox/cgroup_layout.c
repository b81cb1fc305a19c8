/* cgroup_layout: the cgroup mounts of this process, the layout they make,
 * and a sandbox's cgroups created or opened with their limits (see
 * cgroup.h; cgroup_internal.h for the files). */
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

/* The controllers' names, by C_*. */
static const char *const ctrl_name[C_N] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

/* The cgroup mounts of this process, parsed once. */
static struct {
    bool done;
    size_t n;
    cg_mount m[SG_CG_MAX_FDS];
} g_mounts;

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

unsigned cg_parse_ctrls(const char *list, const char *seps, bool *cpuset)
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
            m.ctrls = cg_parse_ctrls(ctl, " \n", NULL) & ((1u << C_MEMORY) | (1u << C_PIDS) | (1u << C_CPU));
    } else {
        m.ctrls = cg_parse_ctrls(superopts, ",", &m.cpuset);
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

void cg_select_set(cg_set *s)
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
    cg_select_set(&s);
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

void cg_freep(sg_cgroup **cg)
{
    sg_cgroup_free(*cg);
}

/* name: the cgroup's directory under sandglass/, checked by the caller
 * (a sandbox's id, or its supervisor's cgroup, cgroup_supervisor.c). */
sg_cgroup *cg_new(const char *id, sg_err *err)
{
    sg_cgroup *cg = calloc(1, sizeof *cg);
    if (cg)
        cg->counter_fd[0] = cg->counter_fd[1] = -1;
    if (!cg || !(cg->id = strdup(id))) {
        free(cg);
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    cg_select_set(&cg->s);
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
        sg_autofree char *v = cg_knob_read(parent, knobs[k], false, &missing, err);
        if (!v || cg_knob_write(child, knobs[k], v, err) < 0)
            return -1;
    }
    return 0;
}

/* mkdir; *made tells whether we created it (EEXIST is fine when allowed). */
int cg_mkdir(const cg_mount *m, const char *parent, const char *dir, bool allow_exist, bool *made,
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
    sg_autofree char *have = cg_knob_read(dir, "cgroup.subtree_control", false, &missing, err);
    if (!have)
        return -1;
    unsigned enabled = cg_parse_ctrls(have, " \n", NULL);
    for (int c = 0; c < C_N; c++) {
        if (!(want & (1u << c)) || (enabled & (1u << c)))
            continue;
        sg_autofree char *v = sg_strdup_printf("+%s", ctrl_name[c]);
        if (cg_knob_write(dir, "cgroup.subtree_control", v, err) < 0) {
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

int cg_make_roots(sg_cgroup *cg, sg_err *err)
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
            if (cg_knob_write(dir, "memory.max", buf, err) < 0)
                return -1;
            /* no swap: the limit is the limit */
            if (cg_knob_exists(dir, "memory.swap.max") && cg_knob_write(dir, "memory.swap.max", "0", err) < 0)
                return -1;
        } else {
            if (cg_knob_write(dir, "memory.limit_in_bytes", buf, err) < 0)
                return -1;
            /* memsw (memory + swap) exists only with swap accounting */
            if (cg_knob_exists(dir, "memory.memsw.limit_in_bytes") &&
                cg_knob_write(dir, "memory.memsw.limit_in_bytes", buf, err) < 0)
                return -1;
        }
    }
    if (lim->pids) {
        int i = cg->s.at[C_PIDS];
        if (i < 0)
            return sg_err_set(err, ENOTSUP, "pids limit requested but no pids controller is available (cgroup layout %s)", layout);
        sg_autofree char *dir = cg_dir(cg, (size_t)i, NULL);
        snprintf(buf, sizeof buf, "%" PRIu64, lim->pids);
        if (cg_knob_write(dir, "pids.max", buf, err) < 0)
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
            if (cg_knob_write(dir, "cpu.max", buf, err) < 0)
                return -1;
        } else {
            snprintf(buf, sizeof buf, "%d", CG_CPU_PERIOD_US);
            if (cg_knob_write(dir, "cpu.cfs_period_us", buf, err) < 0)
                return -1;
            snprintf(buf, sizeof buf, "%lld", quota);
            if (cg_knob_write(dir, "cpu.cfs_quota_us", buf, err) < 0)
                return -1;
        }
    }
    return 0;
}

sg_cgroup *sg_cgroup_create(const char *id, const sg_cg_limits *lim, sg_err *err)
{
    if (cg_check_name("id", id, err) < 0)
        return NULL;
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = cg_new(id, err);
    if (!cg)
        return NULL;
    static const sg_cg_limits none = {0};
    if (!lim)
        lim = &none;
    if (cg_make_roots(cg, err) < 0) {
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
    if (cg_check_name("id", id, err) < 0)
        return NULL;
    __attribute__((cleanup(cg_freep))) sg_cgroup *cg = cg_new(id, err);
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


/* cgroup: real cgroups on this host (root). Each test uses fresh random
 * sandbox ids; the teardown kills and removes them even after a failed
 * assertion. Runs twice: with the detected layout, and forced to v1
 * (SANDGLASS_CGROUP_LAYOUT=v1), which on a split host exercises the
 * freezer-based kill. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <mntent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/cgroup.h"

#define MAX_IDS 4
#define MB (1024ull * 1024)

typedef struct tstate {
    char ids[MAX_IDS][24];
    size_t nids;
    sg_cgroup *cgs[MAX_IDS];
} tstate;

/* ---------- fixture ---------- */

static void reap_all(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static void rmdir_glob(const char *pattern)
{
    glob_t g;
    if (glob(pattern, GLOB_ONLYDIR | GLOB_NOSORT, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++)
        rmdir(g.gl_pathv[i]);
    globfree(&g);
}

static int t_setup(void **state)
{
    tstate *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    *state = t;
    return 0;
}

static int t_teardown(void **state)
{
    tstate *t = *state;
    for (size_t i = 0; i < t->nids; i++) {
        sg_err err = {0};
        sg_cgroup *cg = t->cgs[i];
        if (!cg)
            cg = sg_cgroup_open(t->ids[i], &err);
        if (cg) {
            sg_cgroup_freeze(cg, NULL, false, &err);
            sg_cgroup_kill(cg, NULL, 3000, &err);
            sg_cgroup_remove(cg, &err);
            sg_cgroup_free(cg);
        }
        /* whatever the forced layout left on the other hierarchies */
        char pat[128];
        snprintf(pat, sizeof pat, "/sys/fs/cgroup/*/sandglass/%s/*/", t->ids[i]);
        rmdir_glob(pat);
        snprintf(pat, sizeof pat, "/sys/fs/cgroup/*/sandglass/%s/", t->ids[i]);
        rmdir_glob(pat);
    }
    reap_all();
    free(t);
    return 0;
}

static void need_cgroups(void)
{
    if (geteuid() != 0 || sg_cgroup_layout() == SG_CG_NONE)
        skip();
}

static const char *new_id(tstate *t)
{
    assert_true(t->nids < MAX_IDS);
    char hex[11];
    assert_int_equal(sg_rand_hex(hex, 10, NULL), 0);
    snprintf(t->ids[t->nids], sizeof t->ids[0], "t%s", hex);
    return t->ids[t->nids++];
}

static sg_cgroup *new_cg(tstate *t, const sg_cg_limits *lim)
{
    const char *id = new_id(t);
    sg_err err = {0};
    sg_cgroup *cg = sg_cgroup_create(id, lim, &err);
    if (!cg)
        fail_msg("create %s: %s", id, err.msg);
    t->cgs[t->nids - 1] = cg;
    return cg;
}

/* Forks a child that joins <leaf> through sg_cgroup_procs_fds (as an exec
 * does from inside the sandbox), runs fn, and reports ready by writing to
 * the pipe; the parent reads nbytes of it into out. */
typedef void (*child_fn)(int wfd);

static pid_t spawn_in(sg_cgroup *cg, const char *leaf, child_fn fn, void *out, size_t nbytes)
{
    int fds[SG_CG_MAX_FDS];
    sg_err err = {0};
    int n = sg_cgroup_procs_fds(cg, leaf, fds, &err);
    if (n <= 0)
        fail_msg("procs_fds: %s", err.msg);
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = sgt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < n; i++)
            if (write(fds[i], "0", 1) != 1)
                _exit(90);
        close(p[0]);
        fn(p[1]);
        _exit(0);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    close(p[1]);
    char tmp[8];
    void *buf = out ? out : tmp;
    size_t want = out ? nbytes : 1;
    ssize_t got = read(p[0], buf, want);
    close(p[0]);
    if (got != (ssize_t)want)
        fail_msg("child %d did not get ready (read %zd)", (int)pid, got);
    return pid;
}

static void ready(int wfd)
{
    if (write(wfd, "r", 1) != 1)
        _exit(91);
}

static void child_pause(int wfd)
{
    ready(wfd);
    for (;;)
        pause();
}

static void child_burn(int wfd)
{
    /* 150 ms of our own cpu time, however loaded the machine is */
    volatile uint64_t x = 0;
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        if (ts.tv_sec > 0 || ts.tv_nsec >= 150 * 1000000L)
            break;
        x++;
    }
    /* touch some memory so the peak is visibly above zero */
    char *m = mmap(NULL, 4 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED)
        memset(m, 1, 4 * MB);
    ready(wfd);
    for (;;)
        pause();
}

/* A setsid'ed double-forked escaper (sends its pid when ready) and a fork
 * bomb that only pids.max bounds. */
static void child_escaper_bomb(int wfd)
{
    pid_t mid = sgt_fork();
    if (mid == 0) {
        setsid();
        pid_t g = sgt_fork();
        if (g == 0) {
            pid_t me = getpid();
            if (write(wfd, &me, sizeof me) != sizeof me)
                _exit(92);
            for (;;)
                pause();
        }
        _exit(0);
    }
    waitpid(mid, NULL, 0);
    for (;;) {
        if (sgt_fork() < 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Busy processes (16 of them) that keep a CPU quota spent. Only the first
 * says ready: the others would write to a pipe already closed. */
static void child_busy(int wfd)
{
    bool first = true;
    for (int i = 0; i < 15 && first; i++)
        if (sgt_fork() == 0)
            first = false;
    if (first)
        ready(wfd);
    for (volatile uint64_t x = 0;; x++)
        ;
}

static void child_oom(int wfd)
{
    ready(wfd);
    size_t len = 256 * MB;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        _exit(93);
    for (size_t i = 0; i < len; i += 4096)
        m[i] = 1;
    _exit(0); /* not reached when the limit works */
}

static void child_many(int wfd, int kids)
{
    int fails = 0;
    for (int i = 0; i < kids; i++) {
        pid_t p = sgt_fork();
        if (p == 0) {
            for (;;)
                pause();
        }
        if (p < 0)
            fails++;
    }
    if (write(wfd, &fails, sizeof fails) != sizeof fails)
        _exit(94);
    for (;;)
        pause();
}

static void child_20(int wfd)
{
    child_many(wfd, 20);
}

static void child_99(int wfd)
{
    child_many(wfd, 99);
}

static volatile uint64_t *g_counter;

static void child_count(int wfd)
{
    (*g_counter)++;
    ready(wfd);
    for (;;)
        (*g_counter)++;
}

static int wait_signal(pid_t pid)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st);
}

/* ---------- helpers reading the host, independent of the module ---------- */

/* Mount point of the v1 hierarchy holding ctrl, or of cgroup2 (ctrl NULL). */
static bool find_mount(const char *ctrl, char *out, size_t len)
{
    sg_autofclose FILE *f = setmntent("/proc/self/mounts", "re");
    if (!f)
        return false;
    struct mntent *m;
    while ((m = getmntent(f))) {
        bool hit = ctrl ? (strcmp(m->mnt_type, "cgroup") == 0 && hasmntopt(m, ctrl))
                        : strcmp(m->mnt_type, "cgroup2") == 0;
        if (hit) {
            snprintf(out, len, "%s", m->mnt_dir);
            return true;
        }
    }
    return false;
}

static bool forced_v1(void)
{
    const char *e = getenv("SANDGLASS_CGROUP_LAYOUT");
    return e && strcmp(e, "v1") == 0;
}

/* The directory of <id>[/leaf] in the hierarchy of ctrl as this layout uses it. */
static bool knob_dir(const char *ctrl, const char *id, const char *leaf, char *out, size_t len)
{
    char mnt[256];
    if (find_mount(ctrl, mnt, sizeof mnt)) {
        snprintf(out, len, "%s/sandglass/%s%s%s", mnt, id, leaf ? "/" : "", leaf ? leaf : "");
        return true;
    }
    if (!forced_v1() && find_mount(NULL, mnt, sizeof mnt)) {
        snprintf(out, len, "%s/sandglass/%s%s%s", mnt, id, leaf ? "/" : "", leaf ? leaf : "");
        return true;
    }
    return false;
}

static char *read_knob(const char *dir, const char *knob)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, knob);
    sg_err err = {0};
    char *s = sg_read_file(p, 65536, NULL, &err);
    if (!s)
        fail_msg("%s", err.msg);
    return s;
}

static size_t count_dirs(const char *id)
{
    char pat[128];
    size_t n = 0;
    for (size_t k = 0; k < 2; k++) {
        snprintf(pat, sizeof pat, "/sys/fs/cgroup/%ssandglass/%s", k ? "" : "*/", id);
        glob_t g;
        if (glob(pat, GLOB_NOSORT, NULL, &g) == 0) {
            n += g.gl_pathc;
            globfree(&g);
        }
    }
    return n;
}

static double ms_since(uint64_t t0)
{
    return (double)(sg_now_mono_ns() - t0) / 1e6;
}

/* ---------- tests ---------- */

static void test_layout(void **state)
{
    (void)state;
    need_cgroups();
    char v2[256], mem[256];
    bool has_v2 = find_mount(NULL, v2, sizeof v2);
    bool has_v1 = find_mount("memory", mem, sizeof mem) || find_mount("pids", mem, sizeof mem);
    sg_cg_layout want = forced_v1() ? SG_CG_V1 : (has_v2 && has_v1) ? SG_CG_SPLIT : has_v2 ? SG_CG_V2 : SG_CG_V1;
    assert_int_equal(sg_cgroup_layout(), want);
    print_message("# cgroup layout: %s\n", sg_cgroup_layout_name(sg_cgroup_layout()));
    assert_string_equal(sg_cgroup_layout_name(SG_CG_SPLIT), "split");
    assert_string_equal(sg_cgroup_layout_name(SG_CG_V1), "v1");

    const char *saved = getenv("SANDGLASS_CGROUP_LAYOUT");
    sg_autofree char *copy = saved ? strdup(saved) : NULL;
    setenv("SANDGLASS_CGROUP_LAYOUT", "none", 1);
    assert_int_equal(sg_cgroup_layout(), SG_CG_NONE);
    sg_err err = {0};
    assert_null(sg_cgroup_create("tnone", NULL, &err));
    assert_int_equal(err.code, ENOTSUP);
    assert_non_null(strstr(err.msg, "mountinfo"));
    if (copy)
        setenv("SANDGLASS_CGROUP_LAYOUT", copy, 1);
    else
        unsetenv("SANDGLASS_CGROUP_LAYOUT");
}

static void test_invalid_names(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_err err = {0};
    const char *bad[] = {"", ".", "..", "a/b", "../x", "a b"};
    for (size_t i = 0; i < SG_ARRAY_LEN(bad); i++) {
        assert_null(sg_cgroup_create(bad[i], NULL, &err));
        assert_int_equal(err.code, EINVAL);
        assert_non_null(strstr(err.msg, "invalid cgroup id"));
    }
    assert_null(sg_cgroup_create(NULL, NULL, &err));
    sg_cgroup *cg = new_cg(t, NULL);
    assert_int_equal(sg_cgroup_leaf_create(cg, "../escape", &err), -1);
    assert_non_null(strstr(err.msg, "../escape"));
    assert_int_equal(sg_cgroup_leaf_create(cg, "x/y", &err), -1);
    assert_int_equal(sg_cgroup_kill(cg, "..", 100, &err), -1);
    assert_int_equal(err.code, EINVAL);

    /* the same id twice: refused, and the first one is left intact */
    assert_null(sg_cgroup_create(t->ids[0], NULL, &err));
    assert_int_equal(err.code, EEXIST);
    assert_non_null(strstr(err.msg, t->ids[0]));
    assert_int_equal(sg_cgroup_populated(cg, NULL, &err), 0);

    /* open of an absent id */
    assert_null(sg_cgroup_open("tdoesnotexist0", &err));
    assert_int_equal(err.code, ENOENT);
    sg_cgroup *o = sg_cgroup_open(t->ids[0], &err);
    assert_non_null(o);
    assert_int_equal(sg_cgroup_get_layout(o), sg_cgroup_get_layout(cg));
    sg_cgroup_free(o);
}

static void test_create_limits(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cg_limits lim = {.memory_bytes = 64 * MB, .pids = 32, .cpus = 0.5};
    sg_cgroup *cg = new_cg(t, &lim);
    const char *id = t->ids[0];
    char dir[512];

    char mnt[256];
    assert_true(knob_dir("memory", id, NULL, dir, sizeof dir));
    if (find_mount("memory", mnt, sizeof mnt)) {
        sg_autofree char *m = read_knob(dir, "memory.limit_in_bytes");
        assert_string_equal(m, "67108864\n");
        struct stat st;
        char p[600];
        snprintf(p, sizeof p, "%s/memory.memsw.limit_in_bytes", dir);
        if (stat(p, &st) == 0) {
            sg_autofree char *s = read_knob(dir, "memory.memsw.limit_in_bytes");
            assert_string_equal(s, "67108864\n");
        }
    } else {
        sg_autofree char *m = read_knob(dir, "memory.max");
        assert_string_equal(m, "67108864\n");
    }
    assert_true(knob_dir("pids", id, NULL, dir, sizeof dir));
    sg_autofree char *p = read_knob(dir, "pids.max");
    assert_string_equal(p, "32\n");
    if (find_mount("cpu", mnt, sizeof mnt)) {
        knob_dir("cpu", id, NULL, dir, sizeof dir);
        sg_autofree char *q = read_knob(dir, "cpu.cfs_quota_us");
        sg_autofree char *per = read_knob(dir, "cpu.cfs_period_us");
        assert_string_equal(q, "50000\n");
        assert_string_equal(per, "100000\n");
    } else {
        knob_dir(NULL, id, NULL, dir, sizeof dir);
        sg_autofree char *c = read_knob(dir, "cpu.max");
        assert_string_equal(c, "50000 100000\n");
    }
    /* one directory per hierarchy in use: 5 v1 + cgroup2 when split */
    size_t want = sg_cgroup_get_layout(cg) == SG_CG_SPLIT ? 6 : sg_cgroup_get_layout(cg) == SG_CG_V1 ? 5 : 1;
    if (find_mount("cpu", mnt, sizeof mnt) && find_mount("cpuacct", dir, sizeof dir) && strcmp(mnt, dir) == 0)
        want--; /* cpu,cpuacct co-mounted */
    assert_int_equal(count_dirs(id), want);

    sg_autofree char *path = sg_cgroup_path(cg, "leaf");
    assert_non_null(strstr(path, "/sandglass/"));
    assert_non_null(strstr(path, "/leaf"));

    /* a bad limit is refused and nothing is left behind */
    sg_err err = {0};
    const char *id2 = new_id(t);
    sg_cg_limits bad = {.cpus = -1};
    assert_null(sg_cgroup_create(id2, &bad, &err));
    assert_int_equal(err.code, EINVAL);
    assert_non_null(strstr(err.msg, id2));
    assert_int_equal(count_dirs(id2), 0);
}

static void test_attach_stats(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cg_limits lim = {.pids = 64};
    sg_cgroup *cg = new_cg(t, &lim);
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(cg, "exec1", &err), 0);
    assert_int_equal(sg_cgroup_leaf_create(cg, "exec2", &err), 0);
    assert_int_equal(sg_cgroup_leaf_create(cg, NULL, &err), 0);

    pid_t burner = spawn_in(cg, "exec1", child_burn, NULL, 0);

    /* a plain host child moved in by pid */
    pid_t plain = sgt_fork();
    assert_true(plain >= 0);
    if (plain == 0) {
        for (;;)
            pause();
    }
    if (sg_cgroup_attach(cg, "exec2", plain, &err) < 0)
        fail_msg("attach: %s", err.msg);
    assert_int_equal(sg_cgroup_attach(cg, "nope", plain, &err), -1);
    assert_non_null(strstr(err.msg, "nope"));

    /* /proc/<pid>/cgroup shows the leaf in the hierarchies */
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/cgroup", (int)burner);
    sg_autofree char *cgf = sg_read_file(p, 65536, NULL, &err);
    assert_non_null(cgf);
    char want[96];
    snprintf(want, sizeof want, ":memory:/sandglass/%s/exec1\n", t->ids[0]);
    char mnt[256];
    if (find_mount("memory", mnt, sizeof mnt))
        assert_non_null(strstr(cgf, want));
    snprintf(want, sizeof want, "0::/sandglass/%s/exec1\n", t->ids[0]);
    if (!forced_v1() && find_mount(NULL, mnt, sizeof mnt))
        assert_non_null(strstr(cgf, want));

    pid_t *pids = NULL;
    size_t n = 0;
    assert_int_equal(sg_cgroup_pids(cg, "exec1", &pids, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(pids[0], burner);
    free(pids);
    assert_int_equal(sg_cgroup_pids(cg, NULL, &pids, &n, &err), 0);
    assert_int_equal(n, 2);
    free(pids);

    assert_int_equal(sg_cgroup_populated(cg, "exec1", &err), 1);
    assert_int_equal(sg_cgroup_populated(cg, NULL, &err), 1);
    assert_int_equal(sg_cgroup_leaf_create(cg, "empty", &err), 0);
    assert_int_equal(sg_cgroup_populated(cg, "empty", &err), 0);
    assert_int_equal(sg_cgroup_populated(cg, "missing", &err), -1);
    assert_int_equal(err.code, ENOENT);

    sg_cg_stats st;
    assert_int_equal(sg_cgroup_stats(cg, "exec1", &st, &err), 0);
    assert_int_equal(st.nprocs, 1);
    assert_true(st.cpu_ns >= 100 * 1000000ull);
    if (find_mount("memory", mnt, sizeof mnt))
        assert_true(st.memory_peak >= 4 * MB);
    assert_int_equal(st.oom_kills, 0);
    assert_int_equal(st.pids_max_hits, 0);
    sg_cg_stats all;
    assert_int_equal(sg_cgroup_stats(cg, NULL, &all, &err), 0);
    assert_int_equal(all.nprocs, 2);
    assert_true(all.cpu_ns >= st.cpu_ns);
    print_message("# stats: cpu %.1f ms, memory peak %.1f MB\n", (double)st.cpu_ns / 1e6,
                  (double)st.memory_peak / MB);

    /* rmdir of a populated leaf fails with EBUSY and says so */
    assert_int_equal(sg_cgroup_leaf_remove(cg, "exec1", &err), -1);
    assert_int_equal(err.code, EBUSY);
    assert_non_null(strstr(err.msg, "exec1"));

    /* killing one leaf leaves the other alone */
    if (sg_cgroup_kill(cg, "exec1", 2000, &err) < 0)
        fail_msg("kill: %s", err.msg);
    assert_int_equal(sg_cgroup_populated(cg, "exec1", &err), 0);
    assert_int_equal(sg_cgroup_populated(cg, "exec2", &err), 1);
    assert_int_equal(wait_signal(burner), SIGKILL);
    assert_int_equal(sg_cgroup_leaf_remove(cg, "exec1", &err), 0);
    assert_int_equal(sg_cgroup_leaf_remove(cg, "exec1", &err), 0); /* already gone: fine */
    assert_int_equal(sg_cgroup_leaf_remove(cg, NULL, &err), -1);

    if (sg_cgroup_kill(cg, NULL, 2000, &err) < 0)
        fail_msg("kill: %s", err.msg);
    assert_int_equal(wait_signal(plain), SIGKILL);
    assert_int_equal(sg_cgroup_populated(cg, NULL, &err), 0);
}

static void test_kill_escapers(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cg_limits lim = {.pids = 32, .memory_bytes = 256 * MB};
    sg_cgroup *cg = new_cg(t, &lim);
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(cg, "bomb", &err), 0);
    pid_t escaper = 0;
    pid_t child = spawn_in(cg, "bomb", child_escaper_bomb, &escaper, sizeof escaper);
    assert_true(escaper > 0);

    /* wait until the bomb has filled the pids limit */
    sg_cg_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    while (ms_since(t0) < 5000) {
        assert_int_equal(sg_cgroup_stats(cg, "bomb", &st, &err), 0);
        if (st.nprocs >= 20 && st.pids_max_hits > 0)
            break;
        usleep(2000);
    }
    assert_true(st.nprocs >= 20);
    assert_true(st.pids_max_hits > 0);

    /* the escaper is in another session, yet still in the leaf */
    assert_true(getsid(escaper) != getsid(0));
    pid_t *pids = NULL;
    size_t n = 0;
    assert_int_equal(sg_cgroup_pids(cg, "bomb", &pids, &n, &err), 0);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= pids[i] == escaper;
    free(pids);
    assert_true(found);

    uint64_t k0 = sg_now_mono_ns();
    if (sg_cgroup_kill(cg, "bomb", 5000, &err) < 0)
        fail_msg("kill: %s", err.msg);
    print_message("# kill of a fork bomb (%llu procs): %.2f ms\n", (unsigned long long)st.nprocs, ms_since(k0));
    assert_int_equal(sg_cgroup_populated(cg, "bomb", &err), 0);
    assert_int_equal(sg_cgroup_pids(cg, NULL, &pids, &n, &err), 0);
    free(pids);
    assert_int_equal(n, 0);
    assert_int_equal(wait_signal(child), SIGKILL);
    /* we are the subreaper: the orphaned escaper comes back to us, killed */
    assert_int_equal(wait_signal(escaper), SIGKILL);
    reap_all();
    assert_int_equal(sg_cgroup_leaf_remove(cg, "bomb", &err), 0);
}

/* A kill of a cgroup held at its CPU quota: the quota is lifted for the
 * kill (killed tasks must run to exit) and is back afterwards. */
static void test_kill_throttled(void **state)
{
    tstate *t = *state;
    need_cgroups();
    /* The quota is set once the processes run: forking them under it
     * would crawl on a loaded machine. */
    sg_cg_limits lim = {.pids = 64};
    sg_cgroup *cg = new_cg(t, &lim);
    const char *id = t->ids[t->nids - 1];
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(cg, "busy", &err), 0);
    pid_t child = spawn_in(cg, "busy", child_busy, NULL, 0);
    sg_cg_stats st = {0};
    uint64_t t0 = sg_now_mono_ns();
    while (ms_since(t0) < 10000) {
        assert_int_equal(sg_cgroup_stats(cg, "busy", &st, &err), 0);
        if (st.nprocs >= 16)
            break;
        usleep(2000);
    }
    assert_true(st.nprocs >= 16);
    sg_cg_limits quota = {.cpus = 0.05};
    assert_int_equal(sg_cgroup_set_limits(cg, &quota, &err), 0);
    char dir[512], mnt[256];
    bool v1 = find_mount("cpu", mnt, sizeof mnt);
    assert_true(knob_dir(v1 ? "cpu" : NULL, id, NULL, dir, sizeof dir));
    const char *knob = v1 ? "cpu.cfs_quota_us" : "cpu.max";
    sg_autofree char *before = read_knob(dir, knob);
    assert_string_equal(before, v1 ? "5000\n" : "5000 100000\n");
    uint64_t k0 = sg_now_mono_ns();
    if (sg_cgroup_kill(cg, "busy", 10000, &err) < 0)
        fail_msg("kill: %s", err.msg);
    print_message("# kill of 16 busy processes at a 0.05 cpu quota: %.2f ms\n", ms_since(k0));
    assert_int_equal(sg_cgroup_populated(cg, "busy", &err), 0);
    sg_autofree char *after = read_knob(dir, knob);
    assert_string_equal(after, before);
    assert_int_equal(wait_signal(child), SIGKILL);
    reap_all();
    assert_int_equal(sg_cgroup_leaf_remove(cg, "busy", &err), 0);
}

static void test_oom(void **state)
{
    tstate *t = *state;
    need_cgroups();
    char mnt[256];
    if (!find_mount("memory", mnt, sizeof mnt) && sg_cgroup_layout() != SG_CG_V2)
        skip();
    sg_cg_limits lim = {.memory_bytes = 32 * MB, .pids = 16};
    sg_cgroup *cg = new_cg(t, &lim);
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(cg, "hog", &err), 0);
    pid_t hog = spawn_in(cg, "hog", child_oom, NULL, 0);
    assert_int_equal(wait_signal(hog), SIGKILL);
    sg_cg_stats st;
    assert_int_equal(sg_cgroup_stats(cg, NULL, &st, &err), 0);
    assert_true(st.oom_kills >= 1);
    assert_true(st.memory_peak > 16 * MB);
    assert_true(st.memory_peak <= 32 * MB);
    if (sg_cgroup_get_layout(cg) != SG_CG_V2) { /* v2 leaves have no memory controller */
        sg_cg_stats leaf;
        assert_int_equal(sg_cgroup_stats(cg, "hog", &leaf, &err), 0);
        assert_true(leaf.oom_kills >= 1);
    }
}

static void test_pids_limit(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cg_limits lim = {.pids = 8};
    sg_cgroup *cg = new_cg(t, &lim);
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(cg, "forker", &err), 0);
    int fails = -1;
    spawn_in(cg, "forker", child_20, &fails, sizeof fails);
    assert_int_equal(fails, 13); /* itself + 7 children = 8 */
    sg_cg_stats st;
    assert_int_equal(sg_cgroup_stats(cg, NULL, &st, &err), 0);
    assert_int_equal(st.pids_max_hits, 13);
    assert_int_equal(st.nprocs, 8);
    if (sg_cgroup_kill(cg, NULL, 2000, &err) < 0)
        fail_msg("kill: %s", err.msg);
    assert_int_equal(sg_cgroup_populated(cg, NULL, &err), 0);
}

static void test_freeze(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cgroup *cg = new_cg(t, NULL);
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(cg, "spin", &err), 0);
    g_counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g_counter != MAP_FAILED);
    spawn_in(cg, "spin", child_count, NULL, 0);

    if (sg_cgroup_freeze(cg, NULL, true, &err) < 0)
        fail_msg("freeze: %s", err.msg);
    uint64_t a = *g_counter;
    usleep(50000);
    uint64_t b = *g_counter;
    assert_int_equal(a, b);
    assert_int_equal(sg_cgroup_populated(cg, NULL, &err), 1);
    if (sg_cgroup_freeze(cg, NULL, false, &err) < 0)
        fail_msg("thaw: %s", err.msg);
    /* thawed, it counts again: waited for (up to 30 s), not a fixed
     * 50 ms a loaded host or valgrind may not give it */
    for (int i = 0; i < 30000 && *g_counter == b; i++)
        usleep(1000);
    assert_true(*g_counter > b);

    /* a leaf frozen on its own is still killed through its parent */
    assert_int_equal(sg_cgroup_freeze(cg, "spin", true, &err), 0);
    if (sg_cgroup_kill(cg, NULL, 2000, &err) < 0)
        fail_msg("kill frozen: %s", err.msg);
    assert_int_equal(sg_cgroup_populated(cg, NULL, &err), 0);
    munmap((void *)g_counter, 4096);
}

static void test_remove_list(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cg_limits lim = {.pids = 16, .memory_bytes = 64 * MB};
    sg_cgroup *a = new_cg(t, &lim);
    new_cg(t, NULL);
    sg_err err = {0};
    assert_int_equal(sg_cgroup_leaf_create(a, "l1", &err), 0);
    assert_int_equal(sg_cgroup_leaf_create(a, "l2", &err), 0);
    spawn_in(a, NULL, child_pause, NULL, 0); /* init lives in <id> itself */
    spawn_in(a, "l1", child_pause, NULL, 0);

    char **ids = sg_cgroup_list(&err);
    assert_non_null(ids);
    int seen[2] = {0, 0};
    for (char **p = ids; *p; p++)
        for (int k = 0; k < 2; k++)
            seen[k] += strcmp(*p, t->ids[k]) == 0;
    sg_strvfreep(&ids);
    assert_int_equal(seen[0], 1); /* once, though it is in every hierarchy */
    assert_int_equal(seen[1], 1);

    assert_int_equal(sg_cgroup_remove(a, &err), -1);
    assert_int_equal(err.code, EBUSY);
    if (sg_cgroup_kill(a, NULL, 2000, &err) < 0)
        fail_msg("kill: %s", err.msg);
    if (sg_cgroup_remove(a, &err) < 0)
        fail_msg("remove: %s", err.msg);
    assert_int_equal(count_dirs(t->ids[0]), 0);
    assert_int_equal(sg_cgroup_remove(a, &err), 0); /* twice: nothing to do */
    assert_null(sg_cgroup_open(t->ids[0], &err));
    assert_int_equal(err.code, ENOENT);
    reap_all();
}

static void test_measure(void **state)
{
    tstate *t = *state;
    need_cgroups();
    sg_cg_limits lim = {.pids = 256, .memory_bytes = 512 * MB};
    sg_cgroup *cg = new_cg(t, &lim);
    sg_err err = {0};
    const int rounds = 100;
    uint64_t t0 = sg_now_mono_ns();
    for (int i = 0; i < rounds; i++) {
        if (sg_cgroup_leaf_create(cg, "m", &err) < 0 || sg_cgroup_leaf_remove(cg, "m", &err) < 0)
            fail_msg("%s", err.msg);
    }
    double leaf_us = ms_since(t0) * 1000 / rounds;

    t0 = sg_now_mono_ns();
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s-%d", t->ids[0], i);
        sg_cgroup *c = sg_cgroup_create(id, &lim, &err);
        if (!c)
            fail_msg("%s", err.msg);
        int r = sg_cgroup_remove(c, &err);
        sg_cgroup_free(c);
        if (r < 0)
            fail_msg("%s", err.msg);
    }
    double sandbox_us = ms_since(t0) * 1000 / 20;

    double kill1 = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sg_cgroup_leaf_create(cg, "k", &err), 0);
        pid_t p = spawn_in(cg, "k", child_pause, NULL, 0);
        t0 = sg_now_mono_ns();
        if (sg_cgroup_kill(cg, "k", 2000, &err) < 0)
            fail_msg("%s", err.msg);
        kill1 += ms_since(t0) / 5;
        assert_int_equal(wait_signal(p), SIGKILL);
        assert_int_equal(sg_cgroup_leaf_remove(cg, "k", &err), 0);
    }

    assert_int_equal(sg_cgroup_leaf_create(cg, "k100", &err), 0);
    int fails = -1;
    pid_t p = spawn_in(cg, "k100", child_99, &fails, sizeof fails);
    assert_int_equal(fails, 0);
    sg_cg_stats st;
    assert_int_equal(sg_cgroup_stats(cg, "k100", &st, &err), 0);
    assert_int_equal(st.nprocs, 100);
    t0 = sg_now_mono_ns();
    if (sg_cgroup_kill(cg, "k100", 5000, &err) < 0)
        fail_msg("%s", err.msg);
    double kill100 = ms_since(t0);
    assert_int_equal(wait_signal(p), SIGKILL);
    reap_all();
    print_message("# measure [%s]: leaf create+remove %.0f us, sandbox create(limits)+remove %.0f us, "
                  "kill leaf with 1 proc %.2f ms, with 100 procs %.2f ms\n",
                  sg_cgroup_layout_name(sg_cgroup_get_layout(cg)), leaf_us, sandbox_us, kill1, kill100);
}

static int t_setup_v1(void **state)
{
    if (setenv("SANDGLASS_CGROUP_LAYOUT", "v1", 1) < 0)
        return -1;
    return t_setup(state);
}

static int t_teardown_v1(void **state)
{
    int r = t_teardown(state);
    unsetenv("SANDGLASS_CGROUP_LAYOUT");
    return r;
}

/* Every test twice in one group (one TAP plan): detected layout, then v1. */
#define T(f) {#f, f, t_setup, t_teardown, NULL}, {"v1_" #f, f, t_setup_v1, t_teardown_v1, NULL}

int main(void)
{
    /* orphans (double-forked escapers) come back to us to be reaped */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    unsetenv("SANDGLASS_CGROUP_LAYOUT");
    const struct CMUnitTest tests[] = {
        T(test_layout),        T(test_invalid_names), T(test_create_limits), T(test_attach_stats),
        T(test_kill_escapers), T(test_kill_throttled), T(test_oom),           T(test_pids_limit),    T(test_freeze),
        T(test_remove_list),   T(test_measure),
    };
    return cmocka_run_group_tests_name("cgroup", tests, NULL, NULL);
}

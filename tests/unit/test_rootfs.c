/* rootfs (with privs and seccomp): builds real sandboxes in fresh
 * namespaces, as the sandbox init does, and checks the view from inside
 * with the sg-probe binary (env SG_PROBE_BIN) and real programs. Root only. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sgt_fork.h"

#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/privs.h"
#include "sandbox/rootfs.h"
#include "sandbox/seccomp.h"

#define TEST_UID 4242
#define TEST_GID 4243
#define HOSTNAME "sg-test"
#define INIT_COMM "sandglass-init"

static sg_seccomp_prog prog;

typedef struct {
    const char *ws;
    const char *rootfs;    /* NULL: host view */
    const char *bind_usr;  /* bind the host's /usr at <this>/usr first (for --rootfs tests) */
    bool drop;             /* drop privileges and apply seccomp before exec */
    bool init_bounding;    /* pid 1 empties the bounding set after setup */
    char *const *argv;     /* run inside; argv[0] is a path inside the sandbox */
} sbx_cfg;

typedef struct {
    int status; /* exit code of the program inside, 120 = setup failed, 128+sig */
    char out[32768];
    long setup_us, drop_us;
} sbx_res;

static long us_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000000L + (t1.tv_nsec - t0->tv_nsec) / 1000;
}

static int wait_code(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return 127;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        sg_write_all(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* pid 1 of the new pid namespace: the part the sandbox init does. */
static int sandbox_init(const sbx_cfg *c, int outfd, int timefd)
{
    prctl(PR_SET_NAME, INIT_COMM, 0, 0, 0);
    sg_err err = { 0 };
    if (sethostname(HOSTNAME, strlen(HOSTNAME)) < 0) {
        say(outfd, "sethostname: %s\n", strerror(errno));
        return 120;
    }
    if (sg_net_lo_up(&err) < 0) {
        say(outfd, "lo: %s\n", err.msg);
        return 120;
    }
    sg_rootfs_opts o = {
        .workspace = c->ws, .rootfs = c->rootfs, .hostname = HOSTNAME,
        .uid = TEST_UID, .gid = TEST_GID, .tmp_size = 0,
    };
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (sg_rootfs_setup(&o, &err) < 0) {
        say(outfd, "setup: %s\n", err.msg);
        return 120;
    }
    long setup = us_since(&t0);
    if (write(timefd, &setup, sizeof setup) != sizeof setup)
        return 121;
    if (c->init_bounding && sg_privs_drop_bounding() < 0)
        return 121;

    pid_t pid = sgt_fork();
    if (pid < 0)
        return 122;
    if (pid == 0) {
        if (c->drop) {
            struct timespec t1;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            int rc = sg_privs_drop(TEST_UID, TEST_GID);
            if (rc < 0) {
                say(outfd, "privs: %s\n", strerror(-rc));
                _exit(123);
            }
            rc = sg_seccomp_apply(&prog);
            if (rc < 0) {
                say(outfd, "seccomp: %s\n", strerror(-rc));
                _exit(124);
            }
            long d = us_since(&t1);
            if (write(timefd, &d, sizeof d) != sizeof d)
                _exit(125);
        }
        dup2(outfd, 1);
        dup2(outfd, 2);
        char *envp[] = { "PATH=/usr/bin:/bin", "ASAN_OPTIONS=detect_leaks=0", NULL };
        execve(c->argv[0], c->argv, envp);
        say(2, "exec %s: %s\n", c->argv[0], strerror(errno));
        _exit(126);
    }
    return wait_code(pid);
}

static void run_sandbox(const sbx_cfg *c, sbx_res *r)
{
    memset(r, 0, sizeof *r);
    r->setup_us = r->drop_us = -1;
    int out[2], tp[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(tp, O_CLOEXEC), 0);
    fflush(NULL);
    pid_t a = sgt_fork();
    assert_true(a >= 0);
    if (a == 0) {
        close(out[0]);
        close(tp[0]);
        if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC) < 0) {
            say(out[1], "unshare: %s\n", strerror(errno));
            _exit(120);
        }
        if (c->bind_usr) {
            char dst[512];
            snprintf(dst, sizeof dst, "%s/usr", c->bind_usr);
            if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
                mount("/usr", dst, "none", MS_BIND | MS_REC, NULL) < 0) {
                say(out[1], "bind /usr: %s\n", strerror(errno));
                _exit(120);
            }
        }
        pid_t b = sgt_fork();
        if (b < 0)
            _exit(120);
        if (b == 0)
            _exit(sandbox_init(c, out[1], tp[1]));
        _exit(wait_code(b));
    }
    close(out[1]);
    close(tp[1]);
    size_t have = 0;
    for (;;) {
        ssize_t n = read(out[0], r->out + have, sizeof r->out - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        if (have == sizeof r->out - 1)
            break;
    }
    r->out[have] = '\0';
    long t;
    if (read(tp[0], &t, sizeof t) == sizeof t)
        r->setup_us = t;
    if (read(tp[0], &t, sizeof t) == sizeof t)
        r->drop_us = t;
    close(out[0]);
    close(tp[0]);
    r->status = wait_code(a);
}

/* A workspace owned by the sandbox user, holding a copy of the probe. */
static char *make_workspace(void)
{
    char tmpl[] = "/tmp/sg-test-ws-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char *ws = strdup(tmpl);
    assert_non_null(ws);
    const char *probe = getenv("SG_PROBE_BIN");
    assert_non_null(probe);
    sg_err err = { 0 };
    size_t len = 0;
    sg_autofree char *bin = sg_read_file(probe, 64 * 1024 * 1024, &len, &err);
    assert_non_null(bin);
    sg_autofree char *dst = sg_strdup_printf("%s/sg-probe", ws);
    sg_autoclose int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, bin, len), 0);
    assert_int_equal(chown(ws, TEST_UID, TEST_GID), 0);
    return ws;
}

static void drop_workspace(char *ws)
{
    sg_err err = { 0 };
    assert_int_equal(sg_rm_rf(ws, &err), 0);
    free(ws);
}

static int setup(void **state)
{
    if (geteuid() != 0)
        return 0;
    sg_err err = { 0 };
    int rc = sg_seccomp_build(&prog, &err);
    if (rc < 0)
        print_message("# sg_seccomp_build: %s\n", err.msg);
    return rc;
}

static int teardown(void **state)
{
    sg_seccomp_prog_free(&prog);
    return 0;
}

#define NEED_ROOT()                                                                                \
    do {                                                                                           \
        if (geteuid() != 0)                                                                        \
            skip();                                                                                \
    } while (0)

/* Line by line: print_message truncates long messages. */
static void dump(const sbx_res *r)
{
    print_message("# status %d, output:\n", r->status);
    const char *p = r->out;
    while (*p) {
        size_t n = strcspn(p, "\n");
        print_message("#   %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/* Host namespace inode as "type=ino" for the probe's --host-ns. */
static char *host_ns(const char *type)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/self/ns/%s", type);
    assert_int_equal(stat(path, &st), 0);
    return sg_strdup_printf("%s=%llu", type, (unsigned long long)st.st_ino);
}

static void test_probe_all(void **state)
{
    NEED_ROOT();
    char *ws = make_workspace();
    /* An abstract socket in the host's network namespace. */
    char name[64];
    snprintf(name, sizeof name, "sg-test-abstract-%d", (int)getpid());
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    memcpy(un.sun_path + 1, name, strlen(name));
    socklen_t ulen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    assert_int_equal(bind(l, (struct sockaddr *)&un, ulen), 0);
    assert_int_equal(listen(l, 1), 0);

    sg_autofree char *mnt = host_ns("mnt"), *pid = host_ns("pid"), *net = host_ns("net"),
                     *uts = host_ns("uts"), *ipc = host_ns("ipc");
    char uid[16], gid[16];
    snprintf(uid, sizeof uid, "%d", TEST_UID);
    snprintf(gid, sizeof gid, "%d", TEST_GID);
    char *argv[] = { "/workspace/sg-probe", "--abstract", name, "--hostname", HOSTNAME,
                     "--init-comm", INIT_COMM, "--uid", uid, "--gid", gid,
                     "--host-ns", mnt, "--host-ns", pid, "--host-ns", net, "--host-ns", uts,
                     "--host-ns", ipc, "all", NULL };
    sbx_cfg c = { .ws = ws, .drop = true, .argv = argv };
    sbx_res r;
    run_sandbox(&c, &r);
    close(l);
    if (r.status != 0 || strstr(r.out, "FAIL") || getenv("SG_TEST_VERBOSE"))
        dump(&r);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "FAIL"));
    static const char *const names[] = { "pid1", "ns", "uid", "caps", "nnp", "seccomp", "net", "fs", "dev" };
    for (size_t i = 0; i < SG_ARRAY_LEN(names); i++) {
        char line[32];
        snprintf(line, sizeof line, "ok %s\n", names[i]);
        assert_non_null(strstr(r.out, line));
    }
    print_message("# rootfs setup %ld us, privs+seccomp %ld us\n", r.setup_us, r.drop_us);
    drop_workspace(ws);
}

/* The probe is not vacuous: as root without privs/seccomp it reports it,
 * while the mount-enforced checks still hold for root. */
static void test_probe_detects_root(void **state)
{
    NEED_ROOT();
    char *ws = make_workspace();
    char *argv[] = { "/workspace/sg-probe", "uid", "caps", "nnp", "seccomp", NULL };
    sbx_cfg c = { .ws = ws, .drop = false, .argv = argv };
    sbx_res r;
    run_sandbox(&c, &r);
    if (r.status != 1 || getenv("SG_TEST_VERBOSE"))
        dump(&r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "FAIL uid: "));
    assert_non_null(strstr(r.out, "FAIL caps: "));
    assert_non_null(strstr(r.out, "FAIL nnp: "));
    assert_non_null(strstr(r.out, "FAIL seccomp: "));

    char *argv2[] = { "/workspace/sg-probe", "--init-comm", INIT_COMM, "pid1", "fs", "dev", "net", NULL };
    c.argv = argv2;
    run_sandbox(&c, &r);
    if (r.status != 0)
        dump(&r);
    assert_int_equal(r.status, 0);
    drop_workspace(ws);
}

/* Real programs run inside: the shell and coreutils find their libraries,
 * start in /workspace, and what they write lands in the host workspace. */
static void test_programs_run(void **state)
{
    NEED_ROOT();
    char *ws = make_workspace();
    sg_autofree char *in = sg_strdup_printf("%s/in.txt", ws);
    sg_err err = { 0 };
    assert_int_equal(sg_write_file_atomic(in, "from-host\n", 10, 0644, &err), 0);
    char *argv[] = { "/bin/sh", "-c",
                     "cat in.txt && pwd && id -un && hostname && ls / | tr '\\n' ' ' && echo && "
                     "echo made > made.txt && ls /nonexistent-dir 2>/dev/null; "
                     "touch /usr/x 2>/dev/null && echo usr-writable; "
                     "cd /home/sandbox && pwd && echo h > .hist && stat -c '%U %a' . && stat -f -c %T . && "
                     "(touch /home/x 2>/dev/null && echo home-writable); "
                     "grep -c '^sandbox:.*:/home/sandbox:' /etc/passwd; "
                     "ls /etc/sandglass | tr '\\n' ' '; echo; exit 7",
                     NULL };
    sbx_cfg c = { .ws = ws, .drop = true, .argv = argv };
    sbx_res r;
    run_sandbox(&c, &r);
    if (r.status != 7 || getenv("SG_TEST_VERBOSE"))
        dump(&r);
    assert_int_equal(r.status, 7);
    assert_non_null(strstr(r.out, "from-host\n/workspace\nsandbox\n" HOSTNAME "\n"));
    /* lib32, lib64... depend on the host. */
    assert_non_null(strstr(r.out, "bin dev etc home lib"));
    assert_non_null(strstr(r.out, "proc sbin tmp usr var workspace \n"));
    assert_null(strstr(r.out, "usr-writable"));
    /* HOME: the sandbox user's own tmpfs, outside the workspace; /home
     * itself read-only; the shell integration under /etc/sandglass. */
    assert_non_null(strstr(r.out, "\n/home/sandbox\nsandbox 700\ntmpfs\n1\nbashrc shell shrc \n"));
    assert_null(strstr(r.out, "home-writable"));
    sg_autofree char *hist = sg_strdup_printf("%s/.hist", ws);
    assert_int_equal(access(hist, F_OK), -1);
    sg_autofree char *made = sg_strdup_printf("%s/made.txt", ws);
    struct stat st;
    assert_int_equal(stat(made, &st), 0);
    assert_int_equal(st.st_uid, TEST_UID);
    assert_int_equal(st.st_gid, TEST_GID);
    drop_workspace(ws);
}

/* --rootfs: a directory without any mount points of its own. */
static void test_custom_rootfs(void **state)
{
    NEED_ROOT();
    char *ws = make_workspace();
    char tmpl[] = "/tmp/sg-test-root-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    sg_err err = { 0 };
    static const char *const links[][2] = {
        { "bin", "usr/bin" }, { "sbin", "usr/sbin" }, { "lib", "usr/lib" }, { "lib64", "usr/lib64" },
    };
    for (size_t i = 0; i < SG_ARRAY_LEN(links); i++) {
        sg_autofree char *p = sg_strdup_printf("%s/%s", tmpl, links[i][0]);
        assert_int_equal(symlink(links[i][1], p), 0);
    }
    static const char *const dirs[] = { "usr", "etc", "home", "home/learner" };
    for (size_t i = 0; i < SG_ARRAY_LEN(dirs); i++) {
        sg_autofree char *p = sg_strdup_printf("%s/%s", tmpl, dirs[i]);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    sg_autofree char *marker = sg_strdup_printf("%s/etc/marker", tmpl);
    assert_int_equal(sg_write_file_atomic(marker, "rootfs-etc\n", 11, 0644, &err), 0);
    sg_autofree char *pw = sg_strdup_printf("%s/etc/passwd", tmpl);
    assert_int_equal(sg_write_file_atomic(pw, "evil:x:0:0::/:/bin/sh\n", 22, 0644, &err), 0);
    sg_autofree char *hm = sg_strdup_printf("%s/home/learner/notes", tmpl);
    assert_int_equal(sg_write_file_atomic(hm, "rootfs-home\n", 12, 0644, &err), 0);

    char *argv[] = { "/bin/sh", "-c",
                     "cat /etc/marker /home/learner/notes && id -un && grep -c evil /etc/passwd; "
                     "ls / | tr '\\n' ' '; echo; touch /home/x 2>/dev/null && echo home-writable; "
                     "/workspace/sg-probe uid caps nnp seccomp dev net",
                     NULL };
    sbx_cfg c = { .ws = ws, .rootfs = tmpl, .bind_usr = tmpl, .drop = true, .argv = argv };
    sbx_res r;
    run_sandbox(&c, &r);
    if (r.status != 0 || getenv("SG_TEST_VERBOSE"))
        dump(&r);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rootfs-etc\nrootfs-home\nsandbox\n0\n"));
    assert_non_null(strstr(r.out, "bin dev etc home lib lib64 proc sbin tmp usr var workspace"));
    /* the rootfs's own /home entries stay, beside the private HOME */
    assert_null(strstr(r.out, "home-writable"));
    assert_null(strstr(r.out, "FAIL"));
    /* The rootfs directory was not written to. */
    sg_autofree char *proc = sg_strdup_printf("%s/proc", tmpl);
    assert_int_equal(access(proc, F_OK), -1);
    assert_int_equal(sg_rm_rf(tmpl, &err), 0);
    drop_workspace(ws);
}

static void test_setup_errors(void **state)
{
    NEED_ROOT();
    sg_err err = { 0 };
    sg_rootfs_opts o = { .workspace = "/tmp", .hostname = "bad\nname" };
    assert_int_equal(sg_rootfs_setup(&o, &err), -1);
    assert_int_equal(err.code, EINVAL);
    o.workspace = NULL;
    assert_int_equal(sg_rootfs_setup(&o, &err), -1);

    /* A missing workspace fails cleanly (in a private mount namespace). */
    char *argv[] = { "/bin/true", NULL };
    sbx_cfg c = { .ws = "/nonexistent/sg-ws", .drop = false, .argv = argv };
    sbx_res r;
    run_sandbox(&c, &r);
    assert_int_equal(r.status, 120);
    assert_non_null(strstr(r.out, "cannot open workspace /nonexistent/sg-ws"));
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Measures sg_rootfs_setup and sg_privs_drop + sg_seccomp_apply. */
static void test_timing(void **state)
{
    NEED_ROOT();
    enum { N = 15 };
    char *ws = make_workspace();
    char *argv[] = { "/bin/true", NULL };
    sbx_cfg c = { .ws = ws, .drop = true, .argv = argv };
    long setup[N], drop[N], drop2[N];
    for (int i = 0; i < 2 * N; i++) {
        c.init_bounding = i >= N;
        sbx_res r;
        run_sandbox(&c, &r);
        if (r.status != 0)
            dump(&r);
        assert_int_equal(r.status, 0);
        assert_true(r.setup_us > 0 && r.drop_us >= 0);
        if (i < N) {
            setup[i] = r.setup_us;
            drop[i] = r.drop_us;
        } else {
            drop2[i - N] = r.drop_us;
        }
    }
    qsort(setup, N, sizeof setup[0], cmp_long);
    qsort(drop, N, sizeof drop[0], cmp_long);
    qsort(drop2, N, sizeof drop2[0], cmp_long);
    print_message("# sg_rootfs_setup: min %ld us, median %ld us, max %ld us (n=%d)\n", setup[0],
                  setup[N / 2], setup[N - 1], N);
    print_message("# sg_privs_drop+sg_seccomp_apply: min %ld us, median %ld us, max %ld us; "
                  "filter %zu BPF instructions\n",
                  drop[0], drop[N / 2], drop[N - 1], prog.len);
    print_message("# same, bounding set emptied by init beforehand: min %ld us, median %ld us\n",
                  drop2[0], drop2[N / 2]);
    drop_workspace(ws);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_all),
        cmocka_unit_test(test_probe_detects_root),
        cmocka_unit_test(test_programs_run),
        cmocka_unit_test(test_custom_rootfs),
        cmocka_unit_test(test_setup_errors),
        cmocka_unit_test(test_timing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

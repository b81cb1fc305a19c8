/* sg-probe: runs INSIDE a sandbox and checks what the sandbox hides.
 *
 *   sg-probe [OPTIONS] CHECK...      CHECK: pid1 ns uid caps nnp seccomp net fs dev, or all
 *   sg-probe --syscalls [--as-nobody] NAME...
 *                      makes each named syscall once with harmless arguments and
 *                      prints one JSON object: {"NAME": {"nr": N, "ret": R,
 *                      "errno": E}, ...}; "nr": null for a name with no number
 *                      on this architecture, "known": false for a name this probe
 *                      has no arguments for. --as-nobody (as root) first becomes
 *                      uid/gid 65534 with no groups: the host's answer without
 *                      the sandbox's filter, for comparison.
 *
 * Options:
 *   --abstract NAME    an abstract unix socket listening on the host: connecting must fail
 *   --hostname NAME    the expected hostname
 *   --init-comm NAME   the expected /proc/1/comm
 *   --uid N --gid N    the expected ids
 *   --host-ns TYPE=INO a host namespace inode ours must differ from (repeatable; TYPE:
 *                      pid mnt net ipc uts cgroup user); ns fails without any and
 *                      prints "# ns compared: TYPE..." for the caller to check
 *
 * Prints `ok CHECK` or `FAIL CHECK: why` per check (a check may print several
 * FAIL lines); exits 1 if any check failed, 2 on usage errors. libc only. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <grp.h>
#include <poll.h>
#include <unistd.h>

static const char *opt_abstract, *opt_hostname, *opt_init_comm;
static long opt_uid = -1, opt_gid = -1;
static const char *opt_host_ns[16];
static int n_host_ns;

static const char *cur_check;
static int cur_failed;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", cur_check);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    cur_failed = 1;
}

/* Reads a small file into buf; returns length or -1 (errno set). */
static ssize_t slurp(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t have = 0;
    while (have + 1 < size) {
        ssize_t n = read(fd, buf + have, size - 1 - have);
        if (n < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (n == 0)
            break;
        have += (size_t)n;
    }
    close(fd);
    buf[have] = '\0';
    return (ssize_t)have;
}

/* Value of "Key:" in /proc/self/status, trimmed, into out. */
static int status_field(const char *key, char *out, size_t size)
{
    char buf[8192];
    if (slurp("/proc/self/status", buf, sizeof buf) < 0)
        return -1;
    size_t klen = strlen(key);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            const char *v = line + klen + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            snprintf(out, size, "%s", v);
            return 0;
        }
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

/* ---- pid1 ---- */
static void check_pid1(void)
{
    if (getpid() <= 1)
        fail("we are pid %d", (int)getpid());
    char comm[64];
    if (slurp("/proc/1/comm", comm, sizeof comm) < 0) {
        fail("cannot read /proc/1/comm: %s", strerror(errno));
    } else {
        comm[strcspn(comm, "\n")] = '\0';
        if (opt_init_comm && strcmp(comm, opt_init_comm) != 0)
            fail("pid 1 is '%s', expected '%s'", comm, opt_init_comm);
    }
    /* The pid namespace hides every host process: only a handful here. */
    DIR *d = opendir("/proc");
    if (!d) {
        fail("cannot list /proc: %s", strerror(errno));
        return;
    }
    int procs = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
            procs++;
    closedir(d);
    if (procs > 16)
        fail("/proc shows %d processes", procs);
}

/* ---- ns ---- */
/* Our namespaces must differ from the host's, whose inodes come with
 * --host-ns: without one the check fails (it would compare nothing), and it
 * prints which types it compared ("# ns compared: ...") so that a caller can
 * check that every namespace it expects was compared. */
static void check_ns(void)
{
    static const char *const types[] = { "pid", "mnt", "net", "ipc", "uts", "cgroup", "user" };
    char compared[128] = "";
    if (n_host_ns == 0)
        fail("no --host-ns TYPE=INO: nothing to compare our namespaces with");
    for (int j = 0; j < n_host_ns; j++) {
        bool known = false;
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            size_t tl = strlen(types[i]);
            known |= strncmp(opt_host_ns[j], types[i], tl) == 0 && opt_host_ns[j][tl] == '=';
        }
        if (!known)
            fail("--host-ns %s: not TYPE=INO for a known namespace", opt_host_ns[j]);
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof path, "/proc/self/ns/%s", types[i]);
        if (stat(path, &st) < 0) {
            fail("%s: %s", path, strerror(errno));
            continue;
        }
        bool given = false;
        for (int j = 0; j < n_host_ns; j++) {
            size_t tl = strlen(types[i]);
            if (strncmp(opt_host_ns[j], types[i], tl) != 0 || opt_host_ns[j][tl] != '=')
                continue;
            given = true;
            char *end;
            unsigned long long host = strtoull(opt_host_ns[j] + tl + 1, &end, 10);
            if (*end || end == opt_host_ns[j] + tl + 1)
                fail("--host-ns %s: not a number", opt_host_ns[j]);
            else if (host == (unsigned long long)st.st_ino)
                fail("%s namespace is the host's (%llu)", types[i], host);
        }
        if (given) {
            size_t l = strlen(compared);
            snprintf(compared + l, sizeof compared - l, " %s", types[i]);
        }
    }
    printf("# ns compared:%s\n", compared);
    if (opt_hostname) {
        char h[256];
        if (gethostname(h, sizeof h) < 0)
            fail("gethostname: %s", strerror(errno));
        else if (strcmp(h, opt_hostname) != 0)
            fail("hostname is '%s', expected '%s'", h, opt_hostname);
    }
}

/* ---- uid ---- */
static void check_uid(void)
{
    uid_t r, e, s;
    gid_t rg, eg, sg;
    getresuid(&r, &e, &s);
    getresgid(&rg, &eg, &sg);
    if (r == 0 || e == 0 || s == 0)
        fail("uid is root (%u/%u/%u)", r, e, s);
    if (rg == 0 || eg == 0 || sg == 0)
        fail("gid is root (%u/%u/%u)", rg, eg, sg);
    if (opt_uid >= 0 && (long)r != opt_uid)
        fail("uid %u, expected %ld", r, opt_uid);
    if (opt_gid >= 0 && (long)rg != opt_gid)
        fail("gid %u, expected %ld", rg, opt_gid);
    int n = getgroups(0, NULL);
    if (n != 0)
        fail("%d supplementary groups", n);
    if (setuid(0) == 0)
        fail("setuid(0) succeeded");
}

/* ---- caps ---- */
static void check_caps(void)
{
    static const char *const sets[] = { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char v[64];
        if (status_field(sets[i], v, sizeof v) < 0) {
            fail("no %s in /proc/self/status", sets[i]);
            continue;
        }
        if (strtoull(v, NULL, 16) != 0)
            fail("%s is %s", sets[i], v);
    }
}

/* ---- nnp ---- */
static void check_nnp(void)
{
    char v[64];
    if (status_field("NoNewPrivs", v, sizeof v) < 0 || strcmp(v, "1") != 0)
        fail("NoNewPrivs is not 1");
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        fail("PR_GET_NO_NEW_PRIVS is not 1");
}

/* ---- seccomp ---- */
static void expect_errno(const char *what, long rc, int want)
{
    if (rc != -1)
        fail("%s succeeded (returned %ld), expected %s", what, rc, strerror(want));
    else if (errno != want)
        fail("%s: %s, expected %s", what, strerror(errno), strerror(want));
}

/* Runs fn in a child; returns its wait status. */
static int in_child(void (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return st;
}

static void child_traceme(void)
{
    long rc = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
    _exit(rc == -1 && errno == EPERM ? 0 : 1);
}

static void child_unshare_user(void)
{
    _exit(unshare(CLONE_NEWUSER) == -1 && errno == EPERM ? 0 : 1);
}

#if defined(__x86_64__)
static void child_x32(void)
{
    syscall(0x40000000 | SYS_getpid);
    _exit(3); /* x32 disabled in the kernel: ENOSYS, also fine */
}

static void child_i386(void)
{
    long ret;
    /* getpid via the i386 entry */
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
    _exit(ret > 0 ? 4 : 3);
}
#endif

static void check_seccomp(void)
{
    char v[64];
    if (status_field("Seccomp", v, sizeof v) < 0 || strcmp(v, "2") != 0)
        fail("Seccomp mode is not 2 (filter)");
    /* Paths that do not exist: without the filter these fail with ENOENT
     * (or, as root, would do nothing), so the probe never changes anything. */
    expect_errno("mount", mount("none", "/nonexistent-sg-probe", "tmpfs", 0, NULL), EPERM);
    expect_errno("umount2", umount2("/nonexistent-sg-probe", MNT_DETACH), EPERM);
    int st = in_child(child_unshare_user);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        fail("unshare(CLONE_NEWUSER) was not refused with EPERM");
    expect_errno("setns", setns(0, 0), EPERM);
    expect_errno("bpf", syscall(SYS_bpf, 0, NULL, 0), EPERM);
    expect_errno("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL), EPERM);
    expect_errno("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0), EPERM);
    expect_errno("keyctl", syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0), EPERM);
    expect_errno("userfaultfd", syscall(SYS_userfaultfd, 1 /* UFFD_USER_MODE_ONLY */), EPERM);
    expect_errno("pivot_root", syscall(SYS_pivot_root, "/nonexistent-sg-probe", "/nonexistent-sg-probe"), EPERM);
    expect_errno("personality(PER_LINUX32)", personality(0x0008), EPERM);
    expect_errno("personality(ADDR_NO_RANDOMIZE)", personality(0x0040000), EPERM);
    if (personality(0xffffffff) < 0)
        fail("personality query: %s", strerror(errno));
    if (personality(0) < 0)
        fail("personality(PER_LINUX): %s", strerror(errno));
    expect_errno("clone3", syscall(SYS_clone3, NULL, 0), ENOSYS);

    /* clone with a namespace flag; if it works anyway the child leaves. */
    long rc = syscall(SYS_clone, (long)(CLONE_NEWUSER | SIGCHLD), 0L, 0L, 0L, 0L);
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    expect_errno("clone(CLONE_NEWUSER)", rc, EPERM);
    rc = syscall(SYS_clone, (long)(CLONE_NEWNET | SIGCHLD), 0L, 0L, 0L, 0L);
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    expect_errno("clone(CLONE_NEWNET)", rc, EPERM);

    st = in_child(child_traceme);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        fail("ptrace(PTRACE_TRACEME) was not refused with EPERM");
    /* fork itself (clone without namespace flags) must work: in_child did. */
#if defined(__x86_64__)
    st = in_child(child_x32);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) && !(WIFEXITED(st) && WEXITSTATUS(st) == 3))
        fail("x32 syscall was not killed (status 0x%x)", st);
    st = in_child(child_i386);
    /* SIGSEGV: no ia32 emulation in this kernel, also fine. */
    if (!(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSYS || WTERMSIG(st) == SIGSEGV)) &&
        !(WIFEXITED(st) && WEXITSTATUS(st) == 3))
        fail("i386 syscall was not killed (status 0x%x)", st);
#endif
}

/* ---- net ---- */
static void connect_expect(int family, const char *addr, int port, int want)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        if (family == AF_INET6 && errno == EAFNOSUPPORT)
            return;
        fail("socket: %s", strerror(errno));
        return;
    }
    struct sockaddr_storage ss = { 0 };
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &a->sin_addr);
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &a->sin6_addr);
        len = sizeof *a;
    }
    int rc = connect(fd, (struct sockaddr *)&ss, len);
    if (rc == 0)
        fail("connect to %s:%d succeeded", addr, port);
    else if (errno == EINPROGRESS)
        fail("connect to %s:%d is in progress (a route exists)", addr, port);
    else if (errno != want)
        fail("connect to %s:%d: %s, expected %s", addr, port, strerror(errno), strerror(want));
    close(fd);
}

static void check_net(void)
{
    struct if_nameindex *ifs = if_nameindex();
    if (!ifs) {
        fail("if_nameindex: %s", strerror(errno));
    } else {
        int n = 0;
        for (struct if_nameindex *i = ifs; i->if_index; i++, n++)
            if (strcmp(i->if_name, "lo") != 0)
                fail("interface %s is visible", i->if_name);
        if (n != 1)
            fail("%d interfaces, expected only lo", n);
        if_freenameindex(ifs);
    }
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = { 0 };
    strcpy(ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        fail("SIOCGIFFLAGS lo: %s", strerror(errno));
    else if (!(ifr.ifr_flags & IFF_UP))
        fail("lo is down");
    if (s >= 0)
        close(s);

    /* Loopback TCP works end to end. */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0) {
        fail("listen on 127.0.0.1: %s", strerror(errno));
    } else {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0) {
            fail("connect to 127.0.0.1:%d: %s", ntohs(a.sin_port), strerror(errno));
        } else {
            int acc = accept(l, NULL, NULL);
            char b = 0;
            if (acc < 0 || write(c, "x", 1) != 1 || read(acc, &b, 1) != 1 || b != 'x')
                fail("loopback TCP round trip failed: %s", strerror(errno));
            if (acc >= 0)
                close(acc);
        }
        if (c >= 0)
            close(c);
    }
    if (l >= 0)
        close(l);

    /* No route anywhere else: refused at once, nothing leaves. */
    connect_expect(AF_INET, "10.0.0.1", 80, ENETUNREACH);
    connect_expect(AF_INET, "1.1.1.1", 53, ENETUNREACH);
    connect_expect(AF_INET6, "2606:4700:4700::1111", 53, ENETUNREACH);

    /* Abstract unix sockets belong to the network namespace. */
    if (opt_abstract) {
        int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un un = { .sun_family = AF_UNIX };
        size_t nl = strlen(opt_abstract);
        if (nl > sizeof un.sun_path - 1)
            nl = sizeof un.sun_path - 1;
        memcpy(un.sun_path + 1, opt_abstract, nl);
        if (u >= 0 && connect(u, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl)) == 0)
            fail("connected to the host's abstract socket @%s", opt_abstract);
        if (u >= 0)
            close(u);
    }
}

/* ---- fs ---- */
static void expect_write_fails(const char *path, int want)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(path);
        fail("could create %s", path);
    } else if (errno != want) {
        fail("create %s: %s, expected %s", path, strerror(errno), strerror(want));
    }
}

static void expect_writable(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/.sg-probe-%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fail("cannot create %s: %s", path, strerror(errno));
        return;
    }
    if (write(fd, "x", 1) != 1)
        fail("cannot write %s: %s", path, strerror(errno));
    close(fd);
    unlink(path);
}

/* Absent, or an empty directory. */
/* Whether name is what the sandbox itself puts in dir: /home holds the
 * sandbox user's private HOME, a tmpfs of its own. */
static bool ours(const char *dir, const char *name)
{
    return strcmp(dir, "/home") == 0 && strcmp(name, "sandbox") == 0;
}

static void expect_hidden(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        if (errno != ENOENT && errno != ENOTDIR)
            fail("%s: %s", path, strerror(errno));
        struct stat st;
        if (errno == ENOTDIR && lstat(path, &st) == 0)
            fail("%s exists", path);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !ours(path, de->d_name)) {
            fail("%s is visible (holds %s)", path, de->d_name);
            break;
        }
    closedir(d);
}

static void check_fs(void)
{
    expect_write_fails("/x", EROFS);
    expect_write_fails("/usr/x", EROFS);
    expect_write_fails("/etc/x", EROFS);
    expect_write_fails("/usr/bin/x", EROFS);
    struct statvfs sv;
    if (statvfs("/usr", &sv) < 0 || !(sv.f_flag & ST_RDONLY) || !(sv.f_flag & ST_NOSUID))
        fail("/usr is not read-only and nosuid");
    if (statvfs("/proc/sys", &sv) < 0 || !(sv.f_flag & ST_RDONLY))
        fail("/proc/sys is not read-only");
    expect_writable("/workspace");
    expect_writable("/tmp");
    struct stat st;
    if (stat("/tmp", &st) < 0 || (st.st_mode & 07777) != 01777)
        fail("/tmp mode is not 1777");
    char cwd[256];
    if (!getcwd(cwd, sizeof cwd) || strcmp(cwd, "/workspace") != 0)
        fail("cwd is not /workspace");

    static const char *const hidden[] = {
        "/root", "/home", "/work", "/run", "/var/lib", "/var/log", "/sys", "/sys/fs/cgroup",
        "/mnt", "/opt", "/srv", "/boot", "/media", "/old_root", "/etc/ssh", "/etc/shadow",
        "/etc/gshadow", "/etc/machine-id", "/etc/resolv.conf", "/etc/sudoers", "/etc/pam.d",
        "/etc/cron.d", "/lost+found",
    };
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
        expect_hidden(hidden[i]);

    /* Programs work: the loader and its cache, a shell. */
    if (access("/bin/sh", X_OK) < 0)
        fail("/bin/sh: %s", strerror(errno));
    if (access("/etc/ld.so.cache", R_OK) < 0)
        fail("/etc/ld.so.cache: %s", strerror(errno));
    char pw[4096];
    if (slurp("/etc/passwd", pw, sizeof pw) < 0) {
        fail("/etc/passwd: %s", strerror(errno));
    } else {
        char want[64];
        snprintf(want, sizeof want, ":x:%u:%u:", (unsigned)getuid(), (unsigned)getgid());
        if (!strstr(pw, want))
            fail("/etc/passwd has no entry for uid %u", (unsigned)getuid());
        /* the sandbox user's HOME is /home/sandbox; no other is ours */
        for (const char *h = pw; (h = strstr(h, ":/home/")); h++)
            if (strncmp(h, ":/home/sandbox:", 15) != 0)
                fail("/etc/passwd is the host's");
    }

    /* /proc/kcore and friends are masked. */
    char b[16];
    ssize_t n = slurp("/proc/kcore", b, sizeof b);
    if (n > 0)
        fail("/proc/kcore is readable");
    if (stat("/proc/kcore", &st) == 0 && !(S_ISCHR(st.st_mode)))
        fail("/proc/kcore is not masked");
    if (stat("/proc/sysrq-trigger", &st) == 0 && !(S_ISCHR(st.st_mode)))
        fail("/proc/sysrq-trigger is not masked");

    /* /dev holds exactly the minimal set. */
    static const char *const dev[] = {
        "null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
        "stderr", "ptmx", "pts", "shm",
    };
    DIR *d = opendir("/dev");
    if (!d) {
        fail("/dev: %s", strerror(errno));
        return;
    }
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        bool known = false;
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
            if (!strcmp(de->d_name, dev[i]))
                known = true;
        if (known)
            found++;
        else
            fail("unexpected /dev/%s", de->d_name);
    }
    closedir(d);
    if (found != (int)(sizeof dev / sizeof dev[0]))
        fail("/dev has %d of the %zu expected entries", found, sizeof dev / sizeof dev[0]);
    expect_write_fails("/dev/x", EROFS);
}

/* ---- dev ---- */
static void check_dev(void)
{
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "x", 1) != 1)
        fail("write /dev/null: %s", strerror(errno));
    if (fd >= 0)
        close(fd);
    unsigned char b[16];
    memset(b, 0xff, sizeof b);
    fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, sizeof b) != (ssize_t)sizeof b)
        fail("read /dev/zero: %s", strerror(errno));
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i]) {
            fail("/dev/zero gave a non-zero byte");
            break;
        }
    if (fd >= 0)
        close(fd);
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, sizeof b) != (ssize_t)sizeof b)
        fail("read /dev/urandom: %s", strerror(errno));
    if (fd >= 0)
        close(fd);
    fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        fail("open /dev/full: %s", strerror(errno));
    else if (write(fd, "x", 1) != -1 || errno != ENOSPC)
        fail("write /dev/full did not fail with ENOSPC");
    if (fd >= 0)
        close(fd);
    fd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 || grantpt(fd) < 0 || unlockpt(fd) < 0 || !ptsname(fd))
        fail("no pty: %s", strerror(errno));
    else {
        int slave = open(ptsname(fd), O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (slave < 0)
            fail("open %s: %s", ptsname(fd), strerror(errno));
        else
            close(slave);
    }
    if (fd >= 0)
        close(fd);
    expect_writable("/dev/shm");
}

/* ---- rootfs: run from a --rootfs DIR that holds only this binary and a
 * file named "marker": the host's system directories must be absent. ---- */
static void check_rootfs(void)
{
    struct stat st;
    if (stat("/marker", &st) < 0)
        fail("/marker of the rootfs is missing: %s", strerror(errno));
    if (stat("/usr/bin", &st) == 0)
        fail("/usr/bin exists: the host's /usr leaked into a --rootfs sandbox");
    if (stat("/proc/self/status", &st) < 0)
        fail("/proc is not mounted");
    expect_writable("/workspace");
    expect_writable("/tmp");
}

/* ---- syscalls: each call of the seccomp denylist (src/sandbox/seccomp.c)
 * with arguments the kernel rejects before it does anything, even as
 * root: bad pointers (address 1), flag bits no call defines, fd -1. So
 * without the filter a call fails with EFAULT, EINVAL, EBADF, ESRCH,
 * ENOSYS, or EPERM where the kernel checks a capability first; with it,
 * with the filter's errno. ---- */
#define BADP 1L             /* an unmapped address: EFAULT */
#define BADF 0x40000000L    /* a flag bit none of these calls defines */
struct sysc {
    const char *name;
    long nr; /* -1: none on this architecture */
    long a[6];
};
#define SC(n, ...) { #n, SYS_##n, { __VA_ARGS__ } }
#define SC_NONE(n) { #n, -1, { 0 } }
static const struct sysc syscalls[] = {
    SC(mount, BADP, BADP, BADP, 0, BADP),
#ifdef SYS_umount
    SC(umount, BADP),
#else
    SC_NONE(umount),
#endif
    SC(umount2, BADP, 0x80000000L),
    SC(pivot_root, BADP, BADP),
    SC(chroot, BADP),
    SC(fsopen, BADP, BADF),
    SC(fsconfig, -1, 0x7fff, 0, 0, 0),
    SC(fsmount, -1, BADF, BADF),
    SC(fspick, -1, BADP, BADF),
    SC(open_tree, -1, BADP, BADF),
    SC(move_mount, -1, BADP, -1, BADP, BADF),
    SC(mount_setattr, -1, BADP, BADF, BADP, 0),
    SC(ptrace, 0x7fff, 0, 0, 0), /* an unknown request to pid 0: ESRCH */
    SC(bpf, 0x7fff, BADP, 0),
    SC(keyctl, 0x7fff, 0, 0, 0, 0),
    SC(add_key, BADP, BADP, 0, 0, 0),
    SC(request_key, BADP, BADP, 0, 0),
    SC(kexec_load, 0, 0x10000, BADP, BADF),
#ifdef SYS_kexec_file_load
    SC(kexec_file_load, -1, -1, 0, BADP, BADF),
#else
    SC_NONE(kexec_file_load),
#endif
    SC(init_module, BADP, 0, BADP), /* length 0: ENOEXEC before any copy */
    SC(finit_module, -1, BADP, BADF),
    SC(delete_module, BADP, 0),
    SC(perf_event_open, BADP, 0, -1, -1, 0),
    SC(userfaultfd, BADF | 1 /* UFFD_USER_MODE_ONLY */),
    SC(io_uring_setup, 0, BADP),
    SC(io_uring_enter, -1, 0, 0, BADF, 0, 0),
    SC(io_uring_register, -1, 0x7fff, 0, 0),
    SC(unshare, 0x2000 /* CLONE_PTRACE: not an unshare flag */),
    SC(setns, -1, 0),
    SC(swapon, BADP, BADF),
    SC(swapoff, BADP),
    SC(reboot, 0, 0, 0, 0), /* no magic: EINVAL past the capability */
    SC(open_by_handle_at, -1, BADP, 0),
    SC(name_to_handle_at, -1, BADP, BADP, BADP, BADF),
    SC(acct, BADP),
    SC(quotactl, 0xff /* quota type 255 */, 0, 0, 0),
#ifdef SYS_quotactl_fd
    SC(quotactl_fd, -1, 0xff, 0, 0),
#else
    SC_NONE(quotactl_fd),
#endif
#ifdef SYS_lookup_dcookie
    SC(lookup_dcookie, 0, BADP, 0),
#else
    SC_NONE(lookup_dcookie),
#endif
    SC(pidfd_getfd, -1, -1, BADF),
    SC(process_vm_readv, 0, BADP, 1, BADP, 1, BADF),
    SC(process_vm_writev, 0, BADP, 1, BADP, 1, BADF),
    SC(process_madvise, -1, BADP, 1, 0, BADF),
#ifdef SYS_modify_ldt
    SC(modify_ldt, 0x7f, BADP, 0),
#else
    SC_NONE(modify_ldt),
#endif
#ifdef SYS_memfd_secret
    SC(memfd_secret, BADF),
#else
    SC_NONE(memfd_secret),
#endif
};
#define N_SYSCALLS (sizeof syscalls / sizeof syscalls[0])

static int become_nobody(void)
{
    if (getuid() != 0)
        return 0;
    if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
        setresuid(65534, 65534, 65534) < 0) {
        fprintf(stderr, "sg-probe: cannot become nobody: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int probe_syscalls(char **names, int n, bool as_nobody)
{
    if (as_nobody && become_nobody() < 0)
        return 1;
    printf("{");
    for (int i = 0; i < n; i++) {
        const struct sysc *c = NULL;
        for (size_t k = 0; k < N_SYSCALLS; k++)
            if (!strcmp(syscalls[k].name, names[i]))
                c = &syscalls[k];
        printf("%s\"%s\": ", i ? ", " : "", names[i]); /* names come from argv: [a-z0-9_] */
        if (!c) {
            printf("{\"known\": false}");
            continue;
        }
        if (c->nr < 0) {
            printf("{\"nr\": null}");
            continue;
        }
        errno = 0;
        long r = syscall(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
        printf("{\"nr\": %ld, \"ret\": %ld, \"errno\": %d}", c->nr, r, r < 0 ? errno : 0);
    }
    printf("}\n");
    return 0;
}

struct check {
    const char *name;
    void (*fn)(void);
};
static const struct check checks[] = {
    { "pid1", check_pid1 }, { "ns", check_ns },   { "uid", check_uid },
    { "caps", check_caps }, { "nnp", check_nnp }, { "seccomp", check_seccomp },
    { "net", check_net },   { "fs", check_fs },   { "dev", check_dev },
    { "rootfs", check_rootfs },
};
#define N_CHECKS (sizeof checks / sizeof checks[0])

static int usage(void)
{
    fprintf(stderr, "usage: sg-probe [--abstract NAME] [--hostname NAME] [--init-comm NAME] "
                    "[--uid N] [--gid N] [--host-ns TYPE=INO] CHECK...|all\n"
                    "       sg-probe --syscalls [--as-nobody] NAME...\n");
    return 2;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "--syscalls")) {
        bool nobody = argc > 2 && !strcmp(argv[2], "--as-nobody");
        for (int i = nobody ? 3 : 2; i < argc; i++)
            if (strspn(argv[i], "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(argv[i]))
                return usage();
        return probe_syscalls(argv + (nobody ? 3 : 2), argc - (nobody ? 3 : 2), nobody);
    }
    const char *want[N_CHECKS + 1];
    int nwant = 0;
    bool all = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        if (!strcmp(a, "--abstract"))
            slot = &opt_abstract;
        else if (!strcmp(a, "--hostname"))
            slot = &opt_hostname;
        else if (!strcmp(a, "--init-comm"))
            slot = &opt_init_comm;
        if (slot || !strcmp(a, "--uid") || !strcmp(a, "--gid") || !strcmp(a, "--host-ns")) {
            if (i + 1 >= argc)
                return usage();
            const char *v = argv[++i];
            if (slot)
                *slot = v;
            else if (!strcmp(a, "--uid"))
                opt_uid = strtol(v, NULL, 10);
            else if (!strcmp(a, "--gid"))
                opt_gid = strtol(v, NULL, 10);
            else if (n_host_ns < (int)(sizeof opt_host_ns / sizeof opt_host_ns[0]))
                opt_host_ns[n_host_ns++] = v;
            continue;
        }
        if (!strcmp(a, "all")) {
            all = true;
            continue;
        }
        bool known = false;
        for (size_t c = 0; c < N_CHECKS; c++)
            if (!strcmp(a, checks[c].name))
                known = true;
        if (!known || nwant >= (int)N_CHECKS) {
            fprintf(stderr, "sg-probe: unknown check '%s'\n", a);
            return usage();
        }
        want[nwant++] = a;
    }
    if (!all && nwant == 0)
        return usage();

    int failed = 0;
    for (size_t c = 0; c < N_CHECKS; c++) {
        bool run = all && strcmp(checks[c].name, "rootfs") != 0; /* rootfs only on request */
        for (int w = 0; w < nwant; w++)
            if (!strcmp(want[w], checks[c].name))
                run = true;
        if (!run)
            continue;
        cur_check = checks[c].name;
        cur_failed = 0;
        checks[c].fn();
        if (!cur_failed)
            printf("ok %s\n", cur_check);
        failed |= cur_failed;
    }
    return failed ? 1 : 0;
}

/* rootfs: the sandbox's file system view. See rootfs.h.
 *
 * The new root is a small tmpfs assembled at STAGE ("/tmp") of the
 * sandbox's own mount namespace: every mount is made private first, so
 * nothing done here is visible on the host and no directory is ever created
 * on a host file system. User-given paths (workspace, --rootfs) are opened
 * before /tmp is covered, and mounted through /proc/self/fd/N, so they may
 * live under the host's /tmp.
 *
 * --rootfs DIR: the same tmpfs skeleton is used, holding read-only binds of
 * every top-level entry of DIR (except proc, dev, sys, tmp, workspace and
 * etc, which we provide) and a generated /etc that mirrors DIR/etc except
 * for the account and host files. So DIR needs no mount points of its own
 * and is never written to.
 *
 * Read-only binds are made read-only recursively with mount_setattr(2)
 * (Linux >= 5.12); where that is missing (older kernels, valgrind) only the
 * top mount of each bind is remounted read-only. */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/rootfs.h"
#include "sandbox/shellrc.h"

#define STAGE "/tmp"
/* Bind, remount and propagation changes ignore source and type; "none"
 * rather than NULL keeps valgrind's syscall checker quiet. */
#define RO_FLAGS (MS_RDONLY | MS_NOSUID | MS_NODEV)

/* Host /etc entries a sandbox gets (fnmatch patterns). Everything else of
 * /etc (shadow, ssh keys, machine-id, resolv.conf, pam, cron, ...) stays
 * hidden; passwd, group, hosts, hostname and mtab are generated. */
static const char *const host_etc[] = {
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf",
    "gai.conf", "localtime", "timezone", "alternatives", "ssl",
    "ca-certificates", "ca-certificates.conf", "profile", "profile.d",
    "bash.bashrc", "inputrc", "environment", "mime.types", "os-release",
    "lsb-release", "debian_version", "shells", "login.defs", "protocols",
    "services", "rpc", "networks", "magic", "magic.mime", "locale.alias",
    "locale.conf", "python3*", "perl", "terminfo", "vim",
    "nanorc", "fonts", "java-*", "fpc*.cfg", "gnucobol", "R", "manpath.config",
    "groff", "xml", "sgml",
};

/* Entries of a --rootfs DIR and its etc/ that we never take from it. */
static const char *const rootfs_skip_top[] = {
    "proc", "dev", "sys", "tmp", "workspace", "etc", "home",
};
static const char *const rootfs_skip_etc[] = {
    "passwd", "passwd-", "group", "group-", "shadow", "shadow-", "gshadow",
    "gshadow-", "hosts", "hostname", "mtab",
};

/* Host directories forming the system view without --rootfs. On merged-usr
 * systems all but usr are symlinks, reproduced as symlinks. */
static const char *const host_top[] = {
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
};

/* Files under /proc hidden behind /dev/null, dirs behind an empty read-only
 * tmpfs, and subtrees made read-only: the OCI defaults crun and runc use,
 * and config.gz (the host kernel's whole build configuration: a map of
 * what to attack). */
static const char *const proc_mask_files[] = {
    "kcore", "keys", "latency_stats", "timer_list", "timer_stats",
    "sched_debug", "sysrq-trigger", "config.gz",
};
static const char *const proc_mask_dirs[] = { "acpi", "asound", "scsi" };
static const char *const proc_ro[] = { "bus", "fs", "irq", "sys" };

static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
static const char *const dev_links[][2] = {
    { "fd", "/proc/self/fd" },      { "stdin", "/proc/self/fd/0" },
    { "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
    { "ptmx", "pts/ptmx" },
};

static bool in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}

static bool match_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i][0] == name[0] && fnmatch(list[i], name, 0) == 0)
            return true;
    return false;
}

/* STAGE-relative path -> absolute path in buf. */
static int stage_path(char *buf, size_t size, const char *rel, sg_err *err)
{
    int n = snprintf(buf, size, STAGE "/%s", rel);
    if (n < 0 || (size_t)n >= size)
        return sg_err_set(err, ENAMETOOLONG, "path too long: %s", rel);
    return 0;
}

/* Sets per-mount flags (MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC) on the
 * mount at path, and on every mount below it when recursive. */
static int restrict_mount(const char *path, unsigned long flags, bool recursive, sg_err *err)
{
    struct mount_attr a = { 0 };
    if (flags & MS_RDONLY)
        a.attr_set |= MOUNT_ATTR_RDONLY;
    if (flags & MS_NOSUID)
        a.attr_set |= MOUNT_ATTR_NOSUID;
    if (flags & MS_NODEV)
        a.attr_set |= MOUNT_ATTR_NODEV;
    if (flags & MS_NOEXEC)
        a.attr_set |= MOUNT_ATTR_NOEXEC;
    if (mount_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &a, sizeof a) == 0)
        return 0;
    if (errno != ENOSYS)
        return sg_err_sys(err, "cannot restrict mount %s", path);
    if (mount("none", path, "none", MS_REMOUNT | MS_BIND | flags, NULL) < 0)
        return sg_err_sys(err, "cannot remount %s", path);
    return 0;
}

static int bind_mount(const char *src, const char *dst, unsigned long flags, sg_err *err)
{
    if (mount(src, dst, "none", MS_BIND | MS_REC, NULL) < 0)
        return sg_err_sys(err, "cannot bind %s on %s", src, dst);
    return flags ? restrict_mount(dst, flags, true, err) : 0;
}

static int write_file(const char *path, const char *data, sg_err *err)
{
    sg_autoclose int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return sg_err_sys(err, "cannot create %s", path);
    if (sg_write_all(fd, data, strlen(data)) < 0)
        return sg_err_sys(err, "cannot write %s", path);
    return 0;
}

static int copy_file(int srcfd, const char *name, const char *dst, mode_t mode, sg_err *err)
{
    sg_autoclose int in = openat(srcfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return sg_err_sys(err, "cannot open %s", name);
    sg_autoclose int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (out < 0)
        return sg_err_sys(err, "cannot create %s", dst);
    char buf[16384];
    size_t total = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sg_err_sys(err, "cannot read %s", name);
        if (n == 0)
            break;
        total += (size_t)n;
        if (total > SG_ROOTFS_COPY_MAX) /* grew since fstat */
            return sg_err_set(err, EFBIG, "%s grew past %d bytes", name, SG_ROOTFS_COPY_MAX);
        if (sg_write_all(out, buf, (size_t)n) < 0)
            return sg_err_sys(err, "cannot write %s", dst);
    }
    /* The umask may have cut the mode. */
    if (fchmod(out, mode) < 0)
        return sg_err_sys(err, "cannot chmod %s", dst);
    return 0;
}

/* Reproduces entry `name` of the directory srcfd (reachable as srcpath) at
 * dst: directories are bound read-only, symlinks recreated, small regular
 * files copied while *budget lasts, others bound read-only. Missing entries
 * and other file types are skipped. */
static int mirror_entry(int srcfd, const char *srcpath, const char *name, const char *dst,
                        size_t *budget, sg_err *err)
{
    struct stat st;
    if (fstatat(srcfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return 0;
        return sg_err_sys(err, "cannot stat %s/%s", srcpath, name);
    }
    char src[PATH_MAX];
    int n = snprintf(src, sizeof src, "%s/%s", srcpath, name);
    if (n < 0 || (size_t)n >= sizeof src)
        return sg_err_set(err, ENAMETOOLONG, "path too long: %s/%s", srcpath, name);

    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t len = readlinkat(srcfd, name, target, sizeof target - 1);
        if (len < 0)
            return sg_err_sys(err, "cannot read link %s", src);
        target[len] = '\0';
        if (symlink(target, dst) < 0)
            return sg_err_sys(err, "cannot create symlink %s", dst);
        return 0;
    }
    if (S_ISREG(st.st_mode) && st.st_size <= SG_ROOTFS_COPY_MAX && (size_t)st.st_size <= *budget) {
        *budget -= (size_t)st.st_size;
        return copy_file(srcfd, name, dst, st.st_mode & 07777, err);
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return 0;

    /* Bind what was checked, not whatever the name points to by now. */
    sg_autoclose int fd = openat(srcfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", src);
    struct stat now;
    if (fstat(fd, &now) < 0)
        return sg_err_sys(err, "cannot stat %s", src);
    if ((now.st_mode & S_IFMT) != (st.st_mode & S_IFMT))
        return sg_err_set(err, EAGAIN, "%s changed while the root was built", src);
    if (S_ISDIR(st.st_mode)) {
        if (mkdir(dst, st.st_mode & 07777) < 0)
            return sg_err_sys(err, "cannot create %s", dst);
    } else {
        sg_autoclose int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (out < 0)
            return sg_err_sys(err, "cannot create %s", dst);
    }
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
    if (bind_mount(fdpath, dst, RO_FLAGS, err) < 0) {
        sg_err_prefix(err, "%s", src);
        return -1;
    }
    return 0;
}

typedef bool (*entry_filter)(const char *name);

static bool keep_host_etc(const char *name)
{
    return match_list(name, host_etc, SG_ARRAY_LEN(host_etc));
}

static bool keep_any(const char *name)
{
    (void)name;
    return true;
}

static bool keep_rootfs_top(const char *name)
{
    return !in_list(name, rootfs_skip_top, SG_ARRAY_LEN(rootfs_skip_top));
}

static bool keep_rootfs_etc(const char *name)
{
    return !in_list(name, rootfs_skip_etc, SG_ARRAY_LEN(rootfs_skip_etc));
}

/* Mirrors the entries of srcfd the filter keeps into STAGE/dstrel. */
static int mirror_dir(int srcfd, const char *srcpath, const char *dstrel, entry_filter keep,
                      size_t *budget, sg_err *err)
{
    int dfd = openat(srcfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sg_err_sys(err, "cannot open %s", srcpath);
    sg_autoclosedir DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return sg_err_sys(err, "cannot open %s", srcpath);
    }
    unsigned count = 0;
    struct dirent *de;
    while ((errno = 0, de = readdir(d))) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || !keep(name))
            continue;
        if (++count > SG_ROOTFS_MAX_ENTRIES)
            return sg_err_set(err, E2BIG, "%s has more than %d entries", srcpath, SG_ROOTFS_MAX_ENTRIES);
        char rel[PATH_MAX], dst[PATH_MAX];
        int n = snprintf(rel, sizeof rel, "%s/%s", dstrel, name);
        if (n < 0 || (size_t)n >= sizeof rel)
            return sg_err_set(err, ENAMETOOLONG, "path too long: %s/%s", dstrel, name);
        if (stage_path(dst, sizeof dst, rel, err) < 0)
            return -1;
        if (mirror_entry(srcfd, srcpath, name, dst, budget, err) < 0)
            return -1;
    }
    if (errno != 0)
        return sg_err_sys(err, "cannot read %s", srcpath);
    return 0;
}

static bool valid_hostname(const char *h)
{
    size_t len = strlen(h);
    if (len == 0 || len > 64)
        return false;
    for (const char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '.'))
            return false;
    return true;
}

static int write_accounts(const sg_rootfs_opts *o, const char *hostname, sg_err *err)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "root:x:0:0:root:/root:/bin/sh\n");
    if (o->uid != 0 && o->uid != 65534)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "sandbox:x:%u:%u:sandbox:" SG_ROOTFS_HOME ":/bin/sh\n", (unsigned)o->uid, (unsigned)o->gid);
    snprintf(buf + n, sizeof buf - (size_t)n, "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    if (write_file(STAGE "/etc/passwd", buf, err) < 0)
        return -1;

    n = snprintf(buf, sizeof buf, "root:x:0:\n");
    if (o->gid != 0 && o->gid != 65534)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "sandbox:x:%u:\n", (unsigned)o->gid);
    snprintf(buf + n, sizeof buf - (size_t)n, "nogroup:x:65534:\n");
    if (write_file(STAGE "/etc/group", buf, err) < 0)
        return -1;

    snprintf(buf, sizeof buf,
             "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", hostname);
    if (write_file(STAGE "/etc/hosts", buf, err) < 0)
        return -1;
    snprintf(buf, sizeof buf, "%s\n", hostname);
    if (write_file(STAGE "/etc/hostname", buf, err) < 0)
        return -1;
    if (symlink("../proc/self/mounts", STAGE "/etc/mtab") < 0)
        return sg_err_sys(err, "cannot create /etc/mtab");
    return 0;
}

static int mkdir_stage(const char *rel, mode_t mode, sg_err *err)
{
    char p[PATH_MAX];
    if (stage_path(p, sizeof p, rel, err) < 0)
        return -1;
    if (mkdir(p, mode) < 0)
        return sg_err_sys(err, "cannot create %s", p);
    /* Not subject to the umask. */
    if (chmod(p, mode) < 0)
        return sg_err_sys(err, "cannot chmod %s", p);
    return 0;
}

/* LXCFS's proc files (opened as lxfd before STAGE covered /tmp, where a
 * test's mount lives) bound read-only over the new /proc's. */
static int bind_lxcfs(int lxfd, sg_err *err)
{
    static const char *const files[] = {SG_ROOTFS_LXCFS_FILES};
    char src[PATH_MAX], dst[PATH_MAX];
    for (size_t i = 0; i < SG_ARRAY_LEN(files); i++) {
        snprintf(src, sizeof src, "/proc/self/fd/%d/proc/%s", lxfd, files[i]);
        snprintf(dst, sizeof dst, STAGE "/proc/%s", files[i]);
        if (access(src, R_OK) < 0 || access(dst, F_OK) < 0)
            continue; /* an older LXCFS without it: the kernel's */
        if (mount(src, dst, "none", MS_BIND, NULL) < 0)
            return sg_err_sys(err, "cannot bind LXCFS's %s over /proc's", files[i]);
        if (restrict_mount(dst, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, false, err) < 0)
            return -1;
    }
    return 0;
}

bool sg_rootfs_lxcfs(const char *dir)
{
    struct statfs sf;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/proc/meminfo", dir);
    return statfs(dir, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC && access(p, R_OK) == 0;
}

static int setup_proc(int lxfd, sg_err *err)
{
    if (mkdir_stage("proc", 0555, err) < 0)
        return -1;
    if (mount("proc", STAGE "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return sg_err_sys(err, "cannot mount proc");
    char p[PATH_MAX];
    for (size_t i = 0; i < SG_ARRAY_LEN(proc_mask_files); i++) {
        snprintf(p, sizeof p, STAGE "/proc/%s", proc_mask_files[i]);
        if (access(p, F_OK) < 0)
            continue;
        if (mount("/dev/null", p, "none", MS_BIND, NULL) < 0)
            return sg_err_sys(err, "cannot mask %s", p);
    }
    for (size_t i = 0; i < SG_ARRAY_LEN(proc_mask_dirs); i++) {
        snprintf(p, sizeof p, STAGE "/proc/%s", proc_mask_dirs[i]);
        if (access(p, F_OK) < 0)
            continue;
        if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k") < 0)
            return sg_err_sys(err, "cannot mask %s", p);
    }
    for (size_t i = 0; i < SG_ARRAY_LEN(proc_ro); i++) {
        snprintf(p, sizeof p, STAGE "/proc/%s", proc_ro[i]);
        if (access(p, F_OK) < 0)
            continue;
        if (bind_mount(p, p, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, err) < 0)
            return -1;
    }
    return lxfd >= 0 ? bind_lxcfs(lxfd, err) : 0;
}

static int setup_dev(sg_err *err)
{
    if (mkdir_stage("dev", 0755, err) < 0)
        return -1;
    if (mount("tmpfs", STAGE "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
        return sg_err_sys(err, "cannot mount /dev");
    char src[64], dst[PATH_MAX];
    for (size_t i = 0; i < SG_ARRAY_LEN(dev_nodes); i++) {
        snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
        snprintf(dst, sizeof dst, STAGE "/dev/%s", dev_nodes[i]);
        sg_autoclose int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0)
            return sg_err_sys(err, "cannot create %s", dst);
        if (mount(src, dst, "none", MS_BIND, NULL) < 0)
            return sg_err_sys(err, "cannot bind %s", src);
    }
    for (size_t i = 0; i < SG_ARRAY_LEN(dev_links); i++) {
        snprintf(dst, sizeof dst, STAGE "/dev/%s", dev_links[i][0]);
        if (symlink(dev_links[i][1], dst) < 0)
            return sg_err_sys(err, "cannot create %s", dst);
    }
    if (mkdir_stage("dev/pts", 0755, err) < 0)
        return -1;
    if (mount("devpts", STAGE "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620") < 0)
        return sg_err_sys(err, "cannot mount /dev/pts");
    if (mkdir_stage("dev/shm", 01777, err) < 0)
        return -1;
    char opts[64];
    snprintf(opts, sizeof opts, "mode=1777,size=%llu", (unsigned long long)SG_ROOTFS_SHM_SIZE);
    if (mount("tmpfs", STAGE "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return sg_err_sys(err, "cannot mount /dev/shm");
    /* Nothing may be added to /dev once it is populated. */
    if (restrict_mount(STAGE "/dev", MS_RDONLY | MS_NOSUID | MS_NOEXEC, false, err) < 0)
        return -1;
    return 0;
}

/* The sandbox user's HOME (SG_ROOTFS_HOME): a tmpfs of its own, outside
 * the workspace, so shell history and tool caches are neither captured
 * nor checkpointed (rollback does not cover it; it goes with the sandbox).
 * /home is a directory of the skeleton: a --rootfs's own /home entries
 * are bound into it read-only, as its other top directories are. */
static int setup_home(const sg_rootfs_opts *o, int rootfd, const char *rootpath, size_t *budget, sg_err *err)
{
    if (mkdir_stage("home", 0755, err) < 0)
        return -1;
    sg_autoclose int homefd = o->rootfs ? openat(rootfd, "home", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (homefd >= 0) {
        char homepath[PATH_MAX];
        snprintf(homepath, sizeof homepath, "%s/home", rootpath);
        if (mirror_dir(homefd, homepath, "home", keep_any, budget, err) < 0)
            return -1;
    }
    /* A --rootfs's own home/sandbox is hidden under ours. */
    if (mkdir(STAGE SG_ROOTFS_HOME, 0700) < 0 && errno != EEXIST)
        return sg_err_sys(err, "cannot create %s", SG_ROOTFS_HOME);
    char opts[128];
    snprintf(opts, sizeof opts, "mode=0700,uid=%u,gid=%u,size=%llu,nr_inodes=65536", (unsigned)o->uid,
             (unsigned)o->gid, (unsigned long long)SG_ROOTFS_HOME_SIZE);
    if (mount("tmpfs", STAGE SG_ROOTFS_HOME, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return sg_err_sys(err, "cannot mount %s", SG_ROOTFS_HOME);
    return 0;
}

/* The system directories and /etc, from the host or from --rootfs. */
static int setup_system(const sg_rootfs_opts *o, int rootfd, const char *rootpath, const char *hostname,
                        sg_err *err)
{
    /* Copies go to the root tmpfs; keep well inside its size. */
    size_t budget = SG_ROOTFS_ROOT_SIZE / 2;
    if (!o->rootfs) {
        char dst[PATH_MAX];
        for (size_t i = 0; i < SG_ARRAY_LEN(host_top); i++) {
            if (stage_path(dst, sizeof dst, host_top[i], err) < 0)
                return -1;
            if (mirror_entry(rootfd, "", host_top[i], dst, &budget, err) < 0)
                return -1;
        }
    } else if (mirror_dir(rootfd, rootpath, "", keep_rootfs_top, &budget, err) < 0) {
        return -1;
    }

    if (mkdir_stage("etc", 0755, err) < 0)
        return -1;
    /* No symlink: an absolute one would resolve on the host. */
    sg_autoclose int etcfd = openat(rootfd, "etc", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (etcfd >= 0) {
        char etcpath[PATH_MAX];
        snprintf(etcpath, sizeof etcpath, "%s/etc", rootpath);
        if (mirror_dir(etcfd, etcpath, "etc", o->rootfs ? keep_rootfs_etc : keep_host_etc, &budget, err) < 0)
            return -1;
    } else if (errno != ENOENT) {
        return sg_err_sys(err, "cannot open %s/etc", rootpath);
    }
    if (write_accounts(o, hostname, err) < 0)
        return -1;
    if (sg_shellrc_write(STAGE SG_SHELLRC_DIR, err) < 0)
        return -1;
    if (setup_home(o, rootfd, rootpath, &budget, err) < 0)
        return -1;

    /* /var/tmp is where some tools expect scratch space. */
    if (o->rootfs == NULL || faccessat(rootfd, "var", F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
        if (mkdir_stage("var", 0755, err) < 0)
            return -1;
        if (symlink("../tmp", STAGE "/var/tmp") < 0)
            return sg_err_sys(err, "cannot create /var/tmp");
    }
    return 0;
}

static int pivot(sg_err *err)
{
    sg_autoclose int oldroot = open("/", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (oldroot < 0)
        return sg_err_sys(err, "cannot open /");
    if (chdir(STAGE) < 0)
        return sg_err_sys(err, "cannot chdir to the new root");
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return sg_err_sys(err, "pivot_root");
    /* The old root is now stacked on the new one; detach it (as runc). */
    if (fchdir(oldroot) < 0)
        return sg_err_sys(err, "cannot chdir to the old root");
    if (umount2(".", MNT_DETACH) < 0)
        return sg_err_sys(err, "cannot detach the old root");
    if (chdir("/") < 0)
        return sg_err_sys(err, "cannot chdir to /");
    return 0;
}

/* A user namespace that maps uid/gid 0 to uid/gid: as a mount's idmap,
 * on-disk root appears as the sandbox user and the sandbox user's new
 * files are root's on disk. Made by a child that unshares it and waits;
 * we (root) write its maps through the new /proc at STAGE/proc, whose pids
 * are our pid namespace's. Returns an fd of the namespace, or -1. */
static int idmap_userns(uid_t uid, gid_t gid, sg_err *err)
{
    int ready[2], done[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return sg_err_sys(err, "pipe");
    if (pipe2(done, O_CLOEXEC) < 0) {
        close(ready[0]);
        close(ready[1]);
        return sg_err_sys(err, "pipe");
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(done[1]);
        char c = unshare(CLONE_NEWUSER) == 0 ? 'k' : 'e';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        (void)read(done[0], &c, 1); /* until we are done with it */
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    sg_autoclose int rfd = ready[0], dfd = done[1];
    if (pid < 0)
        return sg_err_sys(err, "fork");
    int fd = -1;
    char c = 'e', path[96], map[64];
    if (read(rfd, &c, 1) == 1 && c == 'k') {
        int n = snprintf(map, sizeof map, "0 %u 1\n", (unsigned)uid);
        snprintf(path, sizeof path, STAGE "/proc/%d/uid_map", (int)pid);
        sg_autoclose int u = open(path, O_WRONLY | O_CLOEXEC);
        bool ok = u >= 0 && write(u, map, (size_t)n) == n;
        n = snprintf(map, sizeof map, "0 %u 1\n", (unsigned)gid);
        snprintf(path, sizeof path, STAGE "/proc/%d/gid_map", (int)pid);
        sg_autoclose int g = open(path, O_WRONLY | O_CLOEXEC);
        ok = ok && g >= 0 && write(g, map, (size_t)n) == n;
        snprintf(path, sizeof path, STAGE "/proc/%d/ns/user", (int)pid);
        if (ok)
            fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            sg_err_sys(err, "cannot make the workspace's id mapping (%s)", path);
    } else {
        sg_err_set(err, EPERM, "cannot make a user namespace for the workspace's id mapping");
    }
    sg_close_reset(&dfd);
    waitpid(pid, NULL, 0);
    return fd;
}

/* The workspace at STAGE/workspace, idmapped (rootfs.h: idmap). */
static int bind_idmapped(int wsfd, uid_t uid, gid_t gid, sg_err *err)
{
    sg_autoclose int userns = idmap_userns(uid, gid, err);
    if (userns < 0)
        return -1;
    sg_autoclose int tree = open_tree(wsfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    if (tree < 0)
        return sg_err_sys(err, "cannot clone the workspace's mount");
    struct mount_attr attr = {
        .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        .userns_fd = (uint64_t)userns,
    };
    if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
        return sg_err_sys(err, "the workspace's file system cannot map ownership (an idmapped mount); "
                          "sandglass does not change the owner of your files: give the workspace to the "
                          "user the sandbox should run as (chown -R USER DIR), or let create make one");
    if (move_mount(tree, "", AT_FDCWD, STAGE "/workspace", MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return sg_err_sys(err, "cannot mount the workspace");
    return 0;
}

int sg_rootfs_setup(const sg_rootfs_opts *o, sg_err *err)
{
    if (!o || !o->workspace)
        return sg_err_set(err, EINVAL, "rootfs: no workspace");
    const char *hostname = o->hostname ? o->hostname : "sandglass";
    if (!valid_hostname(hostname))
        return sg_err_set(err, EINVAL, "rootfs: invalid hostname '%s'", hostname);

    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
        return sg_err_sys(err, "cannot make / private");

    /* Opened before STAGE covers the host's /tmp, where these may live. */
    sg_autoclose int wsfd = open(o->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (wsfd < 0)
        return sg_err_sys(err, "cannot open workspace %s", o->workspace);
    sg_autoclose int rootfd = open(o->rootfs ? o->rootfs : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return sg_err_sys(err, "cannot open rootfs %s", o->rootfs);
    sg_autoclose int lxfd = o->lxcfs ? open(o->lxcfs, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    if (o->lxcfs && lxfd < 0)
        return sg_err_sys(err, "cannot open the LXCFS mount %s", o->lxcfs);
    char wspath[64], rootpath[64];
    snprintf(wspath, sizeof wspath, "/proc/self/fd/%d", wsfd);
    if (o->rootfs)
        snprintf(rootpath, sizeof rootpath, "/proc/self/fd/%d", rootfd);
    else
        rootpath[0] = '\0'; /* entries are then "/usr", "/etc/..." */

    char opts[64];
    snprintf(opts, sizeof opts, "mode=0755,size=%llu", (unsigned long long)SG_ROOTFS_ROOT_SIZE);
    if (mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return sg_err_sys(err, "cannot mount the new root");

    if (setup_system(o, rootfd, rootpath, hostname, err) < 0)
        return -1;
    if (setup_proc(lxfd, err) < 0 || setup_dev(err) < 0)
        return -1;

    if (mkdir_stage("tmp", 01777, err) < 0)
        return -1;
    snprintf(opts, sizeof opts, "mode=1777,size=%llu",
             o->tmp_size ? o->tmp_size : (unsigned long long)SG_ROOTFS_DEFAULT_TMP_SIZE);
    if (mount("tmpfs", STAGE "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return sg_err_sys(err, "cannot mount /tmp");

    if (mkdir_stage("workspace", 0755, err) < 0)
        return -1;
    if (o->idmap ? bind_idmapped(wsfd, o->uid, o->gid, err) < 0
                 : bind_mount(wspath, STAGE "/workspace", MS_NOSUID | MS_NODEV, err) < 0)
        return -1;

    if (restrict_mount(STAGE, RO_FLAGS, false, err) < 0)
        return -1;
    if (pivot(err) < 0)
        return -1;
    if (chdir("/workspace") < 0)
        return sg_err_sys(err, "cannot chdir to /workspace");
    return 0;
}

int sg_net_lo_up(sg_err *err)
{
    sg_autoclose int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sg_err_sys(err, "cannot create a socket");
    struct ifreq ifr = { 0 };
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
        return sg_err_sys(err, "cannot get the flags of lo");
    if (ifr.ifr_flags & IFF_UP)
        return 0;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
        return sg_err_sys(err, "cannot bring lo up");
    return 0;
}

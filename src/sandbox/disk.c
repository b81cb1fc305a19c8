/* disk: the workspace's own ext4 file system on a loop device (disk.h). */
#include "sandbox/disk.h"

#include <dirent.h>
#include <signal.h>
#include <time.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "sandbox/cgroup.h"

extern char **environ;

int sg_disk_parse(const char *s, uint64_t *bytes, sg_err *err)
{
    uint64_t v;
    if (sg_parse_size(s, &v, err) < 0)
        return -1;
    if (v < SG_DISK_MIN || v > SG_DISK_MAX)
        return sg_err_set(err, ERANGE, "invalid size '%s': from 16M to 14T", s);
    *bytes = v;
    return 0;
}

/* Runs mkfs.ext4 on image; its first line of stderr goes into err. The
 * learner's bytes are total minus root's reserve (-m, as a percentage of
 * total). */
static int run_mkfs(const char *image, uint64_t total, uint64_t reserve, sg_err *err)
{
    char pct[32];
    snprintf(pct, sizeof pct, "%.4f", 100.0 * (double)reserve / (double)total);
    /* No journal: no jbd2 thread per sandbox, and a workspace does not
     * outlive a reboot anyway. nodiscard: the image is sparse already. */
    /* One inode per 8 KiB (ext4's default is 16): a project's many small
     * files (node_modules) run out of bytes before they run out of inodes. */
    char *argv[] = {(char *)"mkfs.ext4", (char *)"-q", (char *)"-F", (char *)"-O", (char *)"^has_journal",
                    (char *)"-i", (char *)"8192", (char *)"-m", pct, (char *)"-E", (char *)"nodiscard,lazy_itable_init=1",
                    (char *)"-L", (char *)"sandglass", (char *)image, NULL};
    static const char *const where[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "/usr/local/sbin/mkfs.ext4"};
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return sg_err_sys(err, "pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    pid_t pid = -1;
    int rc = ENOENT;
    for (size_t i = 0; i < SG_ARRAY_LEN(where) && rc == ENOENT; i++)
        rc = posix_spawn(&pid, where[i], &fa, NULL, argv, environ);
    if (rc == ENOENT)
        rc = posix_spawnp(&pid, "mkfs.ext4", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        errno = rc;
        return sg_err_sys(err, "cannot run mkfs.ext4 (e2fsprogs)");
    }
    char out[512];
    size_t have = 0;
    ssize_t n;
    while ((n = read(pfd[0], out + have, sizeof out - 1 - have)) > 0 || (n < 0 && errno == EINTR))
        have += n > 0 ? (size_t)n : 0;
    close(pfd[0]);
    out[have] = '\0';
    out[strcspn(out, "\n")] = '\0';
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return sg_err_sys(err, "waitpid mkfs.ext4");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return sg_err_set(err, EIO, "mkfs.ext4 failed (status %d): %.300s", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                          out);
    return 0;
}

/* A free loop device backed by fd, set to detach itself at its last close
 * (so the mount alone keeps it), into dev. Returns the device's fd. */
static int loop_attach(int fd, char dev[32], sg_err *err)
{
    sg_autoclose int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return sg_err_sys(err, "cannot open /dev/loop-control");
    /* Buffered, not direct I/O: the metadata just copied is read back
     * from the page cache at the mount and the first checkpoint; with
     * direct I/O every first read of it went to the disk (create took
     * about twice as long). */
    uint32_t flags = LO_FLAGS_AUTOCLEAR;
    for (int attempt = 0; attempt < 32; attempt++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return sg_err_sys(err, "no free loop device");
        snprintf(dev, 32, "/dev/loop%d", n);
        int lfd = open(dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0)
            return sg_err_sys(err, "cannot open %s", dev);
        struct loop_config cfg = {.fd = (uint32_t)fd};
        cfg.info.lo_flags = flags;
        if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
            return lfd;
        int e = errno;
        close(lfd);
        if (e != EBUSY) { /* EBUSY: another process took that device first */
            errno = e;
            return sg_err_sys(err, "cannot set up %s", dev);
        }
    }
    return sg_err_set(err, EBUSY, "no loop device could be claimed (32 tries)");
}

/* ---------- the loop device's writes, bounded (disk.h, sg_disk_io_limit) ---------- */

/* A sysfs or cgroup file written; ENOENT (no such knob here) is 0. */
static int knob_write(const char *path, const char *val, sg_err *err)
{
    sg_autoclose int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0 || write(fd, val, strlen(val)) < 0)
        return sg_err_sys(err, "cannot write '%s' to %s", val, path);
    return 0;
}

/* The mount point of cgroup v2 ("" when absent), from this process's
 * mountinfo. */
static void cgroup2_mount(char v2[PATH_MAX])
{
    v2[0] = '\0';
    sg_autofclose FILE *f = fopen("/proc/self/mountinfo", "re");
    sg_autofree char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0 && !v2[0]) {
        char mnt[PATH_MAX], fstype[32];
        char *sep = strstr(line, " - ");
        /* id parent maj:min root mountpoint ... - fstype ...; our
         * cgroup mount point has no spaces to unescape */
        if (sep && sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && sscanf(sep + 3, "%31s", fstype) == 1 &&
            strcmp(fstype, "cgroup2") == 0)
            snprintf(v2, PATH_MAX, "%s", mnt);
    }
}

/* v2 with the io controller: io.max for the device in sandglass/, the
 * parent of every sandbox's cgroup (v2 is hierarchical, and the device
 * is this sandbox's alone), the controller enabled for it. Cgroup
 * writeback charges the flusher's writeback of the learner's pages to the
 * learner's cgroup, so the rate binds them too. */
static int v2_io_max(const char *v2, const char *devno, uint64_t bps, sg_err *err)
{
    sg_autofree char *ctl = sg_strdup_printf("%s/cgroup.controllers", v2);
    sg_autofree char *have = sg_read_file(ctl, 4096, NULL, NULL);
    bool io = false;
    for (char *save = NULL, *t = have ? strtok_r(have, " \n", &save) : NULL; t; t = strtok_r(NULL, " \n", &save))
        io |= strcmp(t, "io") == 0;
    if (!io)
        return 0; /* no io controller on this host: the bdi's bound alone */
    sg_autofree char *sub = sg_strdup_printf("%s/cgroup.subtree_control", v2);
    sg_autofree char *dir = sg_strdup_printf("%s/sandglass", v2);
    sg_autofree char *max = sg_strdup_printf("%s/sandglass/io.max", v2);
    char val[96];
    if (bps)
        snprintf(val, sizeof val, "%s wbps=%llu", devno, (unsigned long long)bps);
    else
        snprintf(val, sizeof val, "%s wbps=max", devno);
    if (!bps && access(max, F_OK) < 0)
        return 0;
    if (bps && knob_write(sub, "+io", err) < 0)
        return -1;
    if (bps && mkdir(dir, 0755) < 0 && errno != EEXIST)
        return sg_err_sys(err, "cannot create %s", dir);
    return knob_write(max, val, err);
}

int sg_disk_io_limit(dev_t dev, uint64_t dirty, uint64_t bps, sg_err *err)
{
    char devno[32], path[PATH_MAX + 64], val[64];
    snprintf(devno, sizeof devno, "%u:%u", major(dev), minor(dev));
    /* strict_limit: the bdi's own dirty bound holds even while the host's
     * dirty memory is under its freerun threshold (gigabytes here). Off:
     * max_ratio 100 puts max_bytes back to the kernel's default. */
    snprintf(path, sizeof path, "/sys/class/bdi/%s/max_bytes", devno);
    snprintf(val, sizeof val, "%llu", (unsigned long long)dirty);
    int rc = dirty ? knob_write(path, val, err) : 0;
    snprintf(path, sizeof path, "/sys/class/bdi/%s/strict_limit", devno);
    if (rc == 0)
        rc = knob_write(path, dirty ? "1" : "0", err);
    snprintf(path, sizeof path, "/sys/class/bdi/%s/max_ratio", devno);
    if (rc == 0 && !dirty)
        rc = knob_write(path, "100", err);
    /* cgroup v1 (blkio) gets no rate: v1 charges the flusher's and the
     * loop worker's writes to the blkio root, and sandglass touches no
     * cgroup outside its own subtree; the loop device's direct I/O and
     * short queue bound it there (sg_disk_loop_queue). */
    char v2[PATH_MAX];
    cgroup2_mount(v2);
    if (rc == 0 && v2[0])
        rc = v2_io_max(v2, devno, bps, err);
    return rc;
}

/* The loop device's queue (/sys/dev/block/MAJ:MIN/queue/knob) set to val. */
static int queue_knob(dev_t dev, const char *knob, unsigned val, sg_err *err)
{
    char path[96], v[16];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/queue/%s", major(dev), minor(dev), knob);
    snprintf(v, sizeof v, "%u", val);
    return knob_write(path, v, err);
}

int sg_disk_loop_queue(int lfd, dev_t dev, bool on, sg_err *err)
{
    if (!on) {
        /* the loop driver's own depth (its hw_queue_depth parameter) and
         * the default transfer size (0) back for the device's next user */
        sg_autofree char *d = sg_read_file("/sys/module/loop/parameters/hw_queue_depth", 64, NULL, NULL);
        unsigned depth = d ? (unsigned)strtoul(d, NULL, 10) : 0;
        if (queue_knob(dev, "max_sectors_kb", 0, err) < 0)
            return -1;
        return queue_knob(dev, "nr_requests", depth ? depth : 128, err);
    }
    /* Direct I/O: the learner's writes go to the image's blocks on the
     * host's disk as they leave the loop device, not into a second round
     * of dirty pages (the image's) that the host's flusher would send in
     * bursts ahead of the host's fsyncs; and the short queue keeps at most
     * nr_requests x max_sectors_kb of them in flight there. */
    if (lfd >= 0 && ioctl(lfd, LOOP_SET_DIRECT_IO, 1UL) < 0)
        return sg_err_sys(err, "cannot set direct I/O on the loop device");
    if (queue_knob(dev, "max_sectors_kb", SG_DISK_QUEUE_KIB, err) < 0)
        return -1;
    return queue_knob(dev, "nr_requests", SG_DISK_QUEUE_REQS, err);
}

/* sg_disk_loop_queue(on) in a detached grandchild, so create does not wait
 * for its three queue freezes (an RCU grace period each: 10-40 ms on a
 * loaded host). It holds the flock taken here on the loop device's open
 * file (flock follows the open file description it inherits), which
 * destroy's reset takes first (disk_queue_off): the reset never runs
 * before the setting. Its other fds are closed (a caller reading create's
 * output would wait for it); it reports nothing (the knobs are visible in
 * sysfs). On a failed fork the setting is done here. */
static void loop_queue_detached(int lfd, dev_t dev)
{
    sg_err err = {0};
    pid_t pid = flock(lfd, LOCK_EX) == 0 ? fork() : -1;
    if (pid == 0) {
        pid_t g = fork();
        if (g != 0)
            _exit(g < 0); /* no grandchild: the caller does it */
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 || dup2(lfd, 3) < 0)
            _exit(1);
        syscall(SYS_close_range, 4, ~0U, 0);
        _exit(sg_disk_loop_queue(3, dev, true, &err) < 0);
    }
    if (pid > 0) {
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            return;
    }
    if (sg_disk_loop_queue(lfd, dev, true, &err) < 0)
        sg_log(SG_LOG_WARN, "its loop device's queue is not bounded (%s)", err.msg);
}

/* Destroy's reset of the queue, after the setting create left running
 * (its flock). */
static int disk_queue_off(dev_t dev, sg_err *err)
{
    char path[32];
    snprintf(path, sizeof path, "/dev/loop%u", minor(dev));
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_rdev == dev)
        while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
            ;
    return sg_disk_loop_queue(-1, dev, false, err);
}

/* A number of MiB from the environment variable name, def without it. */
static uint64_t env_mib(const char *name, uint64_t def)
{
    const char *env = getenv(name);
    char *end;
    unsigned long long mib = env ? strtoull(env, &end, 10) : 0;
    if (!env || *env == '\0' || *end || mib > (1ull << 24))
        return def;
    return mib << 20;
}

uint64_t sg_disk_write_bps(void)
{
    return env_mib("SANDGLASS_DISK_WRITE_MIBS", SG_DISK_WRITE_BPS);
}

bool sg_disk_queue_on(void)
{
    const char *env = getenv("SANDGLASS_DISK_DIRECT");
    return !env || strcmp(env, "0") != 0;
}

uint64_t sg_disk_dirty_max(void)
{
    return env_mib("SANDGLASS_DISK_DIRTY_MIB", SG_DISK_DIRTY_MAX);
}

/* The mount point, free: a mount left there by a sandbox whose state
 * directory is gone (its uid slot was stale) is detached first. */
static int mount_point(const char *mnt, sg_err *err)
{
    if (sg_mkdir_p(SG_DISK_DIR, 0700, err) < 0)
        return -1;
    if (mkdir(mnt, 0700) == 0)
        return 0;
    if (errno != EEXIST)
        return sg_err_sys(err, "cannot create %s", mnt);
    while (umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
        ;
    struct stat st;
    if (lstat(mnt, &st) < 0 || !S_ISDIR(st.st_mode))
        return sg_err_set(err, ENOTDIR, "%s is not a directory", mnt);
    return 0;
}

/* The formatted image of total bytes (root's reserve of them), open for
 * reading: made once per size by mkfs.ext4 and kept in SG_DISK_DIR, so a
 * create copies ~1 MiB of metadata instead of running mkfs, whose four
 * fsyncs made it wait on a busy disk (15-30 ms against 6). Concurrent
 * creates make it once (flock). */
static int template_fd(uint64_t total, uint64_t reserve, sg_err *err)
{
    sg_autofree char *path = sg_strdup_printf(SG_DISK_DIR "/.template-v%d-%llu", SG_DISK_TEMPLATE_VERSION,
                                              (unsigned long long)total);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0)
        return fd;
    sg_autoclose int lock = open(SG_DISK_DIR "/.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return sg_err_sys(err, "cannot lock " SG_DISK_DIR "/.lock");
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0)
        return fd;
    sg_autofree char *tmp = sg_strdup_printf("%s.%d", path, (int)getpid());
    sg_autoclose int w = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w < 0)
        return sg_err_sys(err, "cannot create %s", tmp);
    if (ftruncate(w, (off_t)total) < 0 || run_mkfs(tmp, total, reserve, err) < 0 || rename(tmp, path) < 0) {
        if (err->msg[0] == '\0')
            sg_err_sys(err, "cannot make %s", path);
        unlink(tmp);
        return -1;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    return fd >= 0 ? fd : sg_err_sys(err, "cannot open %s", path);
}

static int pwrite_all(int fd, const char *buf, size_t len, off_t off)
{
    while (len) {
        ssize_t n = pwrite(fd, buf, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

/* A sparse copy of from (size bytes) into to: its data segments only. */
static int copy_sparse(int from, int to, uint64_t size, sg_err *err)
{
    static char buf[64 * 1024];
    off_t pos = 0;
    while ((uint64_t)pos < size) {
        off_t data = lseek(from, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break; /* only a hole left */
        off_t hole = data < 0 ? -1 : lseek(from, data, SEEK_HOLE);
        if (hole < 0)
            return sg_err_sys(err, "cannot read the disk template's extents");
        for (pos = data; pos < hole;) {
            size_t want = (size_t)(hole - pos) < sizeof buf ? (size_t)(hole - pos) : sizeof buf;
            ssize_t n = pread(from, buf, want, pos);
            if (n <= 0 || pwrite_all(to, buf, (size_t)n, pos) < 0)
                return sg_err_sys(err, "cannot copy the disk template");
            pos += n;
        }
    }
    if (ftruncate(to, (off_t)size) < 0)
        return sg_err_sys(err, "cannot size the disk image");
    return 0;
}

/* The image at fd made from the template, mounted at path and handed to
 * uid:gid; closing the loop device's fd on any failure detaches it
 * (autoclear). */
static int format_and_mount(int fd, uint64_t total, uint64_t reserve, uid_t uid, gid_t gid, const char *path,
                            sg_err *err)
{
    sg_autoclose int tfd = template_fd(total, reserve, err);
    if (tfd < 0 || copy_sparse(tfd, fd, total, err) < 0)
        return -1;
    char dev[32];
    sg_autoclose int lfd = loop_attach(fd, dev, err);
    if (lfd < 0)
        return -1;
    if (mount(dev, path, "ext4", MS_NOSUID | MS_NODEV, "discard,noinit_itable") < 0)
        return sg_err_sys(err, "cannot mount %s (ext4) at %s", dev, path);
    if (chown(path, uid, gid) < 0) {
        sg_err_sys(err, "cannot hand %s to the sandbox user", path);
        umount2(path, MNT_DETACH);
        return -1;
    }
    /* empty: only fsck uses it, and the learner should not see it; before
     * the queue's freezes below, which its blocks' I/O would wait for */
    sg_autofree char *lf = sg_strdup_printf("%s/lost+found", path);
    rmdir(lf);
    struct stat lst;
    sg_err lerr = {0};
    if (fstat(lfd, &lst) < 0 || sg_disk_io_limit(lst.st_rdev, sg_disk_dirty_max(), sg_disk_write_bps(), &lerr) < 0)
        sg_log(SG_LOG_WARN, "%s: its writes are not bounded (%s)", dev, lerr.msg[0] ? lerr.msg : "fstat failed");
    else if (sg_disk_queue_on())
        loop_queue_detached(lfd, lst.st_rdev);
    return 0;
}

/* The image's size for a learner's bytes: ext4's inode tables and bitmaps
 * take ~5% of it (one inode per 8 KiB), added so the learner gets about the
 * bytes asked for; then root's reserve (*reserve) on top. */
static uint64_t image_total(uint64_t bytes, uint64_t *reserve)
{
    *reserve = (bytes / 16 + 4095) & ~4095ull;
    return ((bytes + bytes / 20 + 4095) & ~4095ull) + *reserve;
}

/* What the images in the state directory's sb/ may still grow by: each
 * one's size less what it holds. */
static uint64_t images_growth(const char *sb)
{
    uint64_t grow = 0;
    sg_autoclosedir DIR *d = opendir(sb);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char rel[NAME_MAX + sizeof "/" SG_DISK_IMAGE + 1];
        snprintf(rel, sizeof rel, "%s/%s", de->d_name, SG_DISK_IMAGE);
        struct stat st;
        if (de->d_name[0] != '.' && fstatat(dirfd(d), rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            (uint64_t)st.st_size > (uint64_t)st.st_blocks * 512)
            grow += (uint64_t)st.st_size - (uint64_t)st.st_blocks * 512;
    }
    return grow;
}

int sg_disk_room(uint64_t bytes, sg_err *err)
{
    uint64_t reserve, total = image_total(bytes, &reserve);
    sg_autofree char *sb = sg_state_path("sb");
    struct statvfs vfs;
    if (statvfs(sb, &vfs) < 0)
        return sg_err_sys(err, "cannot read the free space of %s", sb);
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize, grow = images_growth(sb);
    if (total + grow <= avail)
        return 0;
    return sg_err_set(err, ENOSPC,
                      "its image may grow to %llu MiB, and the state directory's file system "
                      "has %llu MiB free, %llu MiB of it promised to the images of the other sandboxes "
                      "(--overcommit makes it anyway)",
                      (unsigned long long)(total >> 20), (unsigned long long)(avail >> 20),
                      (unsigned long long)(grow >> 20));
}

int sg_disk_make(const char *image, uint64_t bytes, uid_t uid, gid_t gid, char **mnt, sg_err *err)
{
    if (geteuid() != 0)
        return sg_err_set(err, EPERM, "only root can set up a loop device");
    uint64_t reserve, total = image_total(bytes, &reserve);
    sg_autofree char *path = sg_strdup_printf(SG_DISK_DIR "/%u", (unsigned)uid);
    if (mount_point(path, err) < 0)
        return -1;
    sg_autoclose int fd = open(image, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || format_and_mount(fd, total, reserve, uid, gid, path, err) < 0) {
        if (fd < 0)
            sg_err_sys(err, "cannot create %s", image);
        else
            unlink(image);
        rmdir(path);
        return -1;
    }
    *mnt = path;
    path = NULL;
    return 0;
}

void sg_disk_remove(const char *mnt, const char *image)
{
    /* Only ever one of ours, whatever a record says. */
    if (mnt && strncmp(mnt, SG_DISK_DIR "/", sizeof SG_DISK_DIR) == 0 && !strstr(mnt, "..")) {
        /* The loop device's bounds off first (it is reused by the next
         * sandbox or anyone else; the last flush goes at full speed). */
        struct stat st, up;
        sg_err lerr = {0};
        if (stat(mnt, &st) == 0 && stat(SG_DISK_DIR, &up) == 0 && st.st_dev != up.st_dev &&
            major(st.st_dev) == SG_DISK_LOOP_MAJOR &&
            (sg_disk_io_limit(st.st_dev, 0, 0, &lerr) < 0 || disk_queue_off(st.st_dev, &lerr) < 0))
            sg_log(SG_LOG_WARN, "%s: %s", mnt, lerr.msg);
        while (umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
            ;
        rmdir(mnt);
    }
    if (image)
        unlink(image);
}

void sg_disk_remove_workspace(const sg_sandbox_meta *m)
{
    if (!m->own_workspace || !m->workspace)
        return;
    if (m->disk == 0) {
        sg_rm_rf(m->workspace, NULL);
        return;
    }
    sg_autofree char *image = sg_state_sandbox_path(m->id, SG_DISK_IMAGE);
    sg_disk_remove(m->workspace, image);
}

/* Detaches the disks in SG_DISK_DIR whose uid's slot names a sandbox of
 * this state directory: id's, or (id NULL) each one whose sandbox
 * directory is gone; gives their slots back. Returns how many. */
static int detach_where(const char *id)
{
    int n = 0;
    sg_autoclosedir DIR *d = opendir(SG_DISK_DIR);
    sg_autofree char *mine = sg_state_path("sb/");
    size_t ml = strlen(mine);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *end;
        unsigned long uid = strtoul(de->d_name, &end, 10);
        char owner[PATH_MAX];
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || uid > UINT32_MAX ||
            sg_state_uid_owner((uid_t)uid, owner) != 1 || strncmp(owner, mine, ml) != 0 ||
            strchr(owner + ml, '/'))
            continue;
        struct stat st;
        if (id ? strcmp(owner + ml, id) != 0 : (stat(owner, &st) == 0 || errno != ENOENT))
            continue;
        sg_autofree char *mnt = sg_strdup_printf(SG_DISK_DIR "/%lu", uid);
        sg_disk_remove(mnt, NULL);
        sg_state_uid_release((uid_t)uid, owner + ml);
        n++;
    }
    return n;
}

int sg_disk_sweep(void)
{
    return detach_where(NULL);
}

int sg_disk_remove_of(const char *id)
{
    return detach_where(id);
}

/* ---------- destroy's release, in the background (disk.h) ---------- */

/* An entry of the reclaim directory: a sandbox id (SG_ID_LEN hex). */
static bool reclaim_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n == SG_ID_LEN && strspn(name, "0123456789abcdef") == n;
}

/* Starts the reclaimer detached (its own session, not our child: destroy
 * does not wait for it), in sandglass/:host: the intermediate child leaves
 * a supervisor's cgroup first, so its grandchild never holds that cgroup
 * busy, and the reclaimer joins :host itself too (a CLI has no fd of it
 * open). Returns -1 when it cannot be started. */
static int reclaimer_spawn(const char *state)
{
    char exe[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_SUPERVISOR", "sandglass-supervisor", exe, sizeof exe) < 0)
        return -1;
    sg_autofree char *log = sg_state_path(SG_DISK_RECLAIM ".log");
    pid_t mid = fork();
    if (mid < 0)
        return -1;
    if (mid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid();
        sg_cgroup_supervisor_leave();
        pid_t g = fork();
        if (g != 0)
            _exit(g < 0);
        /* none of the caller's fds: a caller reading destroy's output to
         * its end would wait for the reclaimer */
        int null = open("/dev/null", O_RDWR);
        int lf = open(log, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0600);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(lf >= 0 ? lf : null, 2) < 0)
            _exit(126);
        syscall(SYS_close_range, 3, ~0U, 0);
        if (chdir("/") < 0) /* it holds no directory busy */
            _exit(126);
        execl(exe, "sandglass-supervisor", "reclaim", state, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(mid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

bool sg_disk_release_workspace(const sg_sandbox_meta *m)
{
    if (!m->own_workspace || !m->workspace || m->disk == 0) {
        sg_disk_remove_workspace(m);
        return false;
    }
    sg_err err = {0};
    const char *state = sg_state_dir(&err);
    sg_autofree char *image = sg_state_sandbox_path(m->id, SG_DISK_IMAGE);
    sg_autofree char *dir = sg_state_path(SG_DISK_RECLAIM);
    sg_autofree char *entry = sg_strdup_printf("%s/%s", dir, m->id);
    if (!state || !reclaim_name_ok(m->id) || (mkdir(dir, 0700) < 0 && errno != EEXIST) ||
        (rename(image, entry) < 0 && errno != ENOENT)) {
        sg_disk_remove_workspace(m); /* here, then: it waits, but nothing is left */
        return false;
    }
    /* An entry with no image (gone already) still names the mount and
     * the slot: a file of its own, empty. */
    if (access(entry, F_OK) < 0) {
        int fd = open(entry, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0)
            close(fd);
    }
    if (reclaimer_spawn(state) < 0) {
        sg_log(SG_LOG_WARN, "cannot start the disk's reclaimer: its disk is released here");
        sg_disk_reclaim(0);
    }
    return true;
}

/* The test hook (disk.h): waits while the file SANDGLASS_TEST_RECLAIM_HOLD
 * exists, RECLAIM_HOLD_MAX_S at most (a test that died never leaves a
 * reclaimer behind for long). */
#define RECLAIM_HOLD_MAX_S 120
static void reclaim_hold(void)
{
    const char *path = getenv("SANDGLASS_TEST_RECLAIM_HOLD");
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000000};
    for (int i = 0; path && *path && i < RECLAIM_HOLD_MAX_S * 100 && access(path, F_OK) == 0; i++)
        nanosleep(&ts, NULL);
}

/* Takes the flock of entry name in the reclaim directory d, waiting up to
 * wait_ms for a reclaimer that holds it. Returns its fd, -1 when it is
 * held still or gone (another one reclaimed it meanwhile). */
static int reclaim_lock(int d, const char *name, int wait_ms)
{
    int fd = openat(d, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    uint64_t deadline = sg_now_mono_ns() + (uint64_t)wait_ms * 1000000u;
    unsigned us = 1000;
    while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || sg_now_mono_ns() >= deadline) {
            close(fd);
            return -1;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
        nanosleep(&ts, NULL);
        us = us < 64000 ? us * 2 : us;
    }
    /* the entry we locked is the one still there, not one reclaimed and
     * gone while we waited */
    struct stat a, b;
    if (fstat(fd, &a) < 0 || fstatat(d, name, &b, AT_SYMLINK_NOFOLLOW) < 0 || a.st_ino != b.st_ino ||
        a.st_dev != b.st_dev) {
        close(fd);
        return -1;
    }
    return fd;
}

static int reclaim_all(int wait_ms, bool hold)
{
    sg_autofree char *dir = sg_state_path(SG_DISK_RECLAIM);
    sg_autoclosedir DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!reclaim_name_ok(de->d_name))
            continue;
        sg_autoclose int fd = reclaim_lock(dirfd(d), de->d_name, wait_ms);
        if (fd < 0)
            continue;
        if (hold)
            reclaim_hold();
        /* the mount and the slot first: the image is the loop device's
         * backing file until the file system lets it go */
        sg_disk_remove_of(de->d_name);
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            n++;
    }
    return n;
}

int sg_disk_reclaim(int wait_ms)
{
    return reclaim_all(wait_ms, false);
}

int sg_disk_reclaim_main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] != '/')
        return 2;
    if (setenv("SANDGLASS_STATE_DIR", argv[1], 1) < 0)
        return 1;
    sg_log_init("reclaim");
    sg_err err = {0};
    if (sg_cgroup_host_join(&err) < 0 && err.code != ENOENT)
        sg_log(SG_LOG_DEBUG, "the reclaimer stays in its cgroup: %s", err.msg);
    /* entries a reclaimer started before us holds are that one's */
    reclaim_all(0, true);
    return 0;
}

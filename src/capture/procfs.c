/* procfs: a sandbox process read from /proc (see procfs.h). */
#include "capture/procfs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

ssize_t sg_procfs_read_at(int dirfd, const char *name, char *buf, size_t len)
{
    sg_autoclose int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -1 : sg_read_all(fd, buf, len);
}

/* The innermost pid of /proc/<dirfd>/status's NSpid (the sandbox's, for a
 * process of the sandbox), and its PPid (host); 0 when unreadable. */
/* status into buf, NUL-terminated; false when unreadable. */
static bool read_status(int dirfd, char *buf, size_t len)
{
    ssize_t n = sg_procfs_read_at(dirfd, "status", buf, len - 1);
    if (n <= 0)
        return false;
    buf[n] = 0;
    return true;
}

pid_t sg_procfs_nspid(int dirfd, pid_t *ppid)
{
    char buf[2048];
    if (!read_status(dirfd, buf, sizeof buf))
        return 0;
    char *l = strstr(buf, "\nPPid:");
    if (l && ppid)
        *ppid = (pid_t)strtol(l + 6, NULL, 10);
    l = strstr(buf, "\nNSpid:");
    if (!l)
        return 0;
    char *end = strchr(l + 1, '\n');
    if (end)
        *end = 0;
    char *last = strrchr(l, '\t');
    return last ? (pid_t)strtol(last + 1, NULL, 10) : 0;
}

int sg_procfs_open(pid_t pid)
{
    char path[32];
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

json_t *sg_procfs_argv(int dirfd)
{
    char *buf = malloc(SG_PROC_ARGV_MAX + 1);
    if (!buf)
        return NULL;
    ssize_t n = sg_procfs_read_at(dirfd, "cmdline", buf, SG_PROC_ARGV_MAX + 1);
    if (n < 0) {
        free(buf);
        return NULL;
    }
    bool cut = n > SG_PROC_ARGV_MAX;
    if (cut)
        n = SG_PROC_ARGV_MAX;
    json_t *av = json_array();
    for (ssize_t i = 0; av && i < n;) {
        size_t len = strnlen(buf + i, (size_t)(n - i));
        size_t clen = 0;
        sg_autofree char *s = sg_utf8_sanitize(buf + i, len, &clen);
        json_array_append_new(av, json_stringn(s ? s : "", s ? clen : 0));
        i += (ssize_t)len + 1;
    }
    free(buf);
    return cut ? json_pack("{s:o, s:b}", "argv", av, "cut", true) : av;
}

/* init's ready child runs sandglass-exec (a memfd) before the exec's own
 * program replaces it: that stub is not the learner's. */
bool sg_procfs_is_exec_stub(int dirfd)
{
    char exe[64];
    ssize_t n = readlinkat(dirfd, "exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = 0;
    return strncmp(exe, "/memfd:sandglass-exec", 21) == 0;
}

/* Whether the process behind dirfd runs the same executable as pid: init's
 * fresh clone, which has not exec'd its stub yet. */
bool sg_procfs_same_exe(int dirfd, pid_t pid)
{
    struct stat a, b;
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    return fstatat(dirfd, "exe", &a, 0) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* The thread group of tid (a thread of ours may call execve), from its
 * status: 0 when unreadable. */
pid_t sg_procfs_tgid(int dirfd)
{
    char buf[512]; /* Tgid is its fourth line */
    char *l = read_status(dirfd, buf, sizeof buf) ? strstr(buf, "\nTgid:") : NULL;
    return l ? (pid_t)strtol(l + 6, NULL, 10) : 0;
}

/* privs: root -> the unprivileged sandbox user. See privs.h.
 * Only raw syscalls and prctl: safe in a forked child (no malloc). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/privs.h"

#define CAP_PROBE_MAX 64 /* caps are 64-bit sets; the kernel's last is lower */

int sg_privs_drop_bounding(void)
{
    /* PR_CAPBSET_READ fails with EINVAL past the kernel's last cap. Each
     * drop costs about a microsecond (new creds), so only set ones. */
    for (int cap = 0; cap < CAP_PROBE_MAX; cap++) {
        int r = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (r < 0) {
            if (errno == EINVAL)
                break;
            return -errno;
        }
        if (r > 0 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
            return -errno;
    }
    return 0;
}

/* In a user namespace made by an unprivileged user, setgroups is denied
 * (and the supplementary groups are the creator's, unmapped). */
static bool setgroups_denied(void)
{
    char buf[8] = "";
    int fd = open("/proc/self/setgroups", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n >= 4 && strncmp(buf, "deny", 4) == 0;
}

int sg_privs_drop(uid_t uid, gid_t gid)
{
    /* Bounding set first: dropping needs CAP_SETPCAP, gone after setuid. */
    int rc = sg_privs_drop_bounding();
    if (rc < 0)
        return rc;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;
    if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0)
        return -errno;

    if (setgroups(0, NULL) < 0 && !(errno == EPERM && setgroups_denied()))
        return -errno;
    if (setresgid(gid, gid, gid) < 0)
        return -errno;
    if (setresuid(uid, uid, uid) < 0)
        return -errno;

    /* Leaving uid 0 clears permitted and effective already; this also
     * covers uid 0 and the inheritable set. */
    struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { { 0, 0, 0 } };
    if (syscall(SYS_capset, &hdr, data) < 0)
        return -errno;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;

    /* Verify: no capability left in any set, ids really changed. */
    if (syscall(SYS_capget, &hdr, data) < 0)
        return -errno;
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        if (data[i].effective || data[i].permitted || data[i].inheritable)
            return -EPERM;
    for (int cap = 0; cap < CAP_PROBE_MAX; cap++) {
        int r = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (r < 0)
            break;
        if (r > 0)
            return -EPERM;
    }
    uid_t ru, eu, su;
    gid_t rg, eg, sgid;
    if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sgid) < 0)
        return -errno;
    if (ru != uid || eu != uid || su != uid || rg != gid || eg != gid || sgid != gid)
        return -EPERM;
    /* Where setgroups is denied, the creator's own groups stay (unmapped):
     * nothing beyond what the unprivileged operator already has. */
    if (getgroups(0, NULL) != 0 && !setgroups_denied())
        return -EPERM;
    return 0;
}

int sg_privs_own_domain(void)
{
#if defined(SYS_landlock_create_ruleset) && defined(SYS_landlock_restrict_self)
    struct landlock_ruleset_attr attr = {.handled_access_fs = LANDLOCK_ACCESS_FS_MAKE_BLOCK};
    int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (fd < 0)
        return -errno;
    int rc = (int)syscall(SYS_landlock_restrict_self, fd, 0);
    int e = errno;
    close(fd);
    return rc < 0 ? -e : 0;
#else
    return -ENOSYS;
#endif
}

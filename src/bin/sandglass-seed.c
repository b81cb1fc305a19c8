/* sandglass-seed: fills a new sandbox's workspace before its supervisor
 * starts (create --from, checkpoint/seed.h): the one process that maps
 * libarchive, so that neither the thin CLI nor any supervisor does.
 *
 *   sandglass-seed tar FILE WORKSPACE UID GID
 *   sandglass-seed checkpoint STORE ID WORKSPACE SCRATCH UID GID
 *
 * Answers one JSON object on stdout: {files, dirs, links, bytes, skipped},
 * or {error: MESSAGE} with exit status 1. A tarball is opened as the
 * caller, then extracted as UID/GID with no capability left. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "checkpoint/seed.h"

static int answer(int rc, const sg_wscopy_stats *st, const sg_err *err)
{
    json_t *j = rc < 0
        ? json_pack("{s:s}", "error", err->msg)
        : json_pack("{s:I, s:I, s:I, s:I, s:I}", "files", (json_int_t)st->files, "dirs", (json_int_t)st->dirs, "links",
                    (json_int_t)st->links, "bytes", (json_int_t)st->bytes, "skipped", (json_int_t)st->skipped);
    if (!j) /* an error message that is not UTF-8 */
        j = json_pack("{s:s}", "error", "the seed failed (its message is not printable)");
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
    return rc < 0 ? 1 : 0;
}

static int parse_id(const char *s, unsigned long *out)
{
    char *end = NULL;
    errno = 0;
    *out = strtoul(s, &end, 10);
    return errno || !end || *end || !*s || *out > 0xffffffffUL ? -1 : 0;
}

/* Root given up for the sandbox user's uid: what the kernel makes then is
 * the user's, and no write can go where the user could not write. */
static int become(uid_t uid, gid_t gid, sg_err *err)
{
    if (geteuid() != 0 || uid == 0)
        return 0;
    if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
        return sg_err_sys(err, "cannot become the sandbox user %u", (unsigned)uid);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sg_err_sys(err, "no_new_privs");
    return 0;
}

static int seed_tar(char **argv, sg_wscopy_stats *st, sg_err *err)
{
    unsigned long uid, gid;
    if (parse_id(argv[3], &uid) < 0 || parse_id(argv[4], &gid) < 0)
        return sg_err_set(err, EINVAL, "bad uid or gid");
    sg_autoclose int tar = open(argv[1], O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (tar < 0)
        return sg_err_sys(err, "cannot open it");
    sg_autoclose int ws = open(argv[2], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ws < 0)
        return sg_err_sys(err, "the workspace %s", argv[2]);
    /* reads block from here on: it is a regular file (sg_seed_tar checks) */
    int fl = fcntl(tar, F_GETFL);
    if (fl < 0 || fcntl(tar, F_SETFL, fl & ~O_NONBLOCK) < 0)
        return sg_err_sys(err, "fcntl");
    if (become((uid_t)uid, (gid_t)gid, err) < 0)
        return -1;
    umask(022);
    return sg_seed_tar(tar, ws, st, err);
}

int main(int argc, char **argv)
{
    sg_log_init("sandglass-seed");
    sg_wscopy_stats st = {0};
    sg_err err = {0};
    prctl(PR_SET_NAME, "sandglass-seed");
    if (argc == 6 && strcmp(argv[1], "tar") == 0)
        return answer(seed_tar(argv + 1, &st, &err), &st, &err);
    if (argc == 8 && strcmp(argv[1], "checkpoint") == 0) {
        unsigned long uid, gid;
        if (parse_id(argv[6], &uid) < 0 || parse_id(argv[7], &gid) < 0)
            return answer(sg_err_set(&err, EINVAL, "bad uid or gid"), &st, &err);
        return answer(sg_seed_checkpoint(argv[2], argv[3], argv[4], argv[5], (uid_t)uid, (gid_t)gid, &st, &err), &st,
                      &err);
    }
    sg_log(SG_LOG_ERROR, "bad arguments (it is run by sandglass create --from)");
    return 2;
}

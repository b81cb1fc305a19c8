/* disk: --disk parsing, and (root) a real workspace file system: the
 * sandbox user runs out of space at about its size, root still has its
 * reserve, a stale mount for the same uid is detached, and removal leaves
 * no mount, image or mount point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/disk.h"

/* Outside the sandbox uid range (state.h): never a live sandbox's mount. */
#define TEST_UID 0x6ffffff0u
#define MB (1024ull * 1024)

static void test_parse(void **state)
{
    (void)state;
    sg_err err = {0};
    uint64_t v = 0;
    assert_int_equal(sg_disk_parse("1G", &v, &err), 0);
    assert_int_equal(v, 1ull << 30);
    assert_int_equal(sg_disk_parse("16M", &v, &err), 0);
    assert_int_equal(v, SG_DISK_MIN);
    assert_int_equal(sg_disk_parse("14T", &v, &err), 0);
    assert_int_equal(v, SG_DISK_MAX);
    assert_int_equal(sg_disk_parse("512MiB", &v, &err), 0);
    assert_int_equal(v, 512 * MB);
    const char *bad[] = {"15M", "15T", "16T", "17T", "0", "", "abc", "1Q", "-1G", "1G2", "99999999999999999999"};
    for (size_t i = 0; i < SG_ARRAY_LEN(bad); i++) {
        v = 7;
        memset(&err, 0, sizeof err);
        assert_int_equal(sg_disk_parse(bad[i], &v, &err), -1);
        assert_int_equal(v, 7);
        assert_true(err.msg[0] != '\0');
        assert_null(strchr(err.msg, '\n'));
    }
    assert_int_equal(sg_disk_parse("15M", &v, &err), -1);
    assert_non_null(strstr(err.msg, "16M"));
}

static bool mounted(const char *path)
{
    sg_autofree char *mi = sg_read_file("/proc/self/mounts", 1 << 24, NULL, NULL);
    char needle[256];
    snprintf(needle, sizeof needle, " %s ", path);
    return mi && strstr(mi, needle);
}

/* Bytes the user uid can write into dir/name before the write fails;
 * the failing errno into *e. In a child, so the test keeps root. */
static uint64_t fill_as(uid_t uid, const char *dir, const char *name, int *e)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint64_t done = 0;
        int err = 0;
        /* Opened as root: SG_DISK_DIR is 0700 (a sandbox reaches its
         * workspace through its bind mount, not this path). */
        int dfd = open(dir, O_PATH | O_DIRECTORY);
        if (uid != 0 && (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
            _exit(2);
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        static char buf[1 << 20];
        memset(buf, 'x', sizeof buf);
        for (;;) {
            ssize_t n = fd < 0 ? -1 : write(fd, buf, sizeof buf);
            if (n <= 0) {
                err = n < 0 ? errno : ENOSPC;
                break;
            }
            done += (uint64_t)n;
        }
        uint64_t r[2] = {done, (uint64_t)err}; /* no padding to send */
        if (write(p[1], r, sizeof r) != sizeof r)
            _exit(3);
        _exit(0);
    }
    close(p[1]);
    uint64_t r[2] = {0, 0};
    assert_int_equal(read(p[0], r, sizeof r), (ssize_t)sizeof r);
    close(p[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    *e = (int)r[1];
    return r[0];
}

static void test_make_fill_remove(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char tmp[] = "/tmp/sg-disk-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    sg_autofree char *image = sg_strdup_printf("%s/" SG_DISK_IMAGE, tmp);
    sg_err err = {0};
    char *mnt = NULL;
    if (sg_disk_make(image, 32 * MB, TEST_UID, TEST_UID, &mnt, &err) < 0) {
        /* A host without loop devices or mkfs.ext4: create falls back and
         * says so (the integration tests check that path's warning). */
        print_message("# no workspace file system here: %s\n", err.msg);
        rmdir(tmp);
        skip();
    }
    assert_true(mounted(mnt));
    /* Made from a template of that size, kept for the next create. */
    glob_t g;
    assert_int_equal(glob(SG_DISK_DIR "/.template-v*", 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 1);
    globfree(&g);
    struct stat st;
    assert_int_equal(stat(mnt, &st), 0);
    assert_int_equal(st.st_uid, TEST_UID);
    sg_autofree char *lf = sg_strdup_printf("%s/lost+found", mnt);
    assert_int_equal(access(lf, F_OK), -1);

    int e = 0;
    uint64_t got = fill_as(TEST_UID, mnt, "fill", &e);
    assert_int_equal(e, ENOSPC);
    /* About the size asked for: the learner's bytes, not the image's. */
    assert_true(got >= 28 * MB && got <= 34 * MB);
    /* The image holds what was written, never more than its size. */
    struct stat ist;
    assert_int_equal(stat(image, &ist), 0);
    assert_true((uint64_t)ist.st_blocks * 512 <= (uint64_t)ist.st_size);
    assert_true((uint64_t)ist.st_size <= 32 * MB + 32 * MB / 8);
    /* Root (a rollback) still has its reserve. */
    uint64_t root = fill_as(0, mnt, "root", &e);
    assert_true(root >= 1 * MB);

    /* The same uid again (its slot was stale): the old mount is detached. */
    char *mnt2 = NULL;
    sg_autofree char *image2 = sg_strdup_printf("%s/second.img", tmp);
    assert_int_equal(sg_disk_make(image2, 16 * MB, TEST_UID, TEST_UID, &mnt2, &err), 0);
    assert_string_equal(mnt, mnt2);
    sg_autofree char *old = sg_strdup_printf("%s/fill", mnt2);
    assert_int_equal(access(old, F_OK), -1);
    sg_disk_remove(mnt2, image2);
    free(mnt2);
    assert_false(mounted(mnt));
    assert_int_equal(access(mnt, F_OK), -1);
    assert_int_equal(access(image2, F_OK), -1);
    sg_disk_remove(mnt, image); /* idempotent */
    assert_int_equal(access(image, F_OK), -1);

    /* An image that exists already: refused, nothing left behind. */
    sg_autofree char *taken = sg_strdup_printf("%s/taken.img", tmp);
    int fd = open(taken, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
    char *mnt3 = NULL;
    assert_int_equal(sg_disk_make(taken, 16 * MB, TEST_UID, TEST_UID, &mnt3, &err), -1);
    assert_null(mnt3);
    assert_false(mounted(mnt));
    assert_int_equal(access(mnt, F_OK), -1);
    unlink(taken);
    free(mnt);
    assert_int_equal(rmdir(tmp), 0);
}

/* A forged record cannot make destroy unmount anything but ours. */
static void test_remove_only_ours(void **state)
{
    (void)state;
    char tmp[] = "/tmp/sg-disk-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    sg_disk_remove(tmp, NULL);
    sg_disk_remove(SG_DISK_DIR "/../../tmp", NULL);
    struct stat st;
    assert_int_equal(stat(tmp, &st), 0);
    assert_int_equal(rmdir(tmp), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_make_fill_remove),
        cmocka_unit_test(test_remove_only_ours),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

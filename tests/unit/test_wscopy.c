/* wscopy: workspace paths made relative (and refused when they climb out),
 * and the copy itself between two directories: a tree with its modes, a
 * symlink as a link, a FIFO never opened, a destination symlink never
 * written through, the bounds on bytes and entries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "sandbox/wscopy.h"

static void rel_is(const char *arg, const char *want)
{
    char out[PATH_MAX];
    sg_err err = {0};
    assert_int_equal(sg_wscopy_rel(arg, out, sizeof out, &err), 0);
    assert_string_equal(out, want);
}

static void rel_refused(const char *arg, int code)
{
    char out[PATH_MAX];
    sg_err err = {0};
    assert_int_equal(sg_wscopy_rel(arg, out, sizeof out, &err), -1);
    assert_int_equal(err.code, code);
    assert_true(err.msg[0] != '\0');
}

static void test_rel(void **state)
{
    (void)state;
    rel_is("", ".");
    rel_is("/workspace", ".");
    rel_is("/workspace/", ".");
    rel_is("/workspace//a/./b/", "a/b");
    rel_is("a/b/../c", "a/c");
    rel_is("./a", "a");
    rel_is("a/..", ".");
    rel_refused("..", EXDEV);
    rel_refused("a/../../b", EXDEV);
    rel_refused("/workspace/../etc", EXDEV);
    rel_refused("/etc/passwd", EXDEV);
    rel_refused("/workspacex/a", EXDEV);
    char longname[NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    rel_refused(longname, ENAMETOOLONG);
    char dir[PATH_MAX];
    const char *base;
    sg_wscopy_split("a/b/c", dir, sizeof dir, &base);
    assert_string_equal(dir, "a/b");
    assert_string_equal(base, "c");
    sg_wscopy_split("c", dir, sizeof dir, &base);
    assert_string_equal(dir, ".");
    assert_string_equal(base, "c");
}

typedef struct fixture {
    char root[64];
    int src, dst;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->root, sizeof f->root, "/tmp/sg-wscopy-XXXXXX");
    if (!f || !mkdtemp(f->root))
        return -1;
    char p[128];
    snprintf(p, sizeof p, "%s/src", f->root);
    mkdir(p, 0755);
    f->src = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(p, sizeof p, "%s/dst", f->root);
    mkdir(p, 0755);
    f->dst = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    *state = f;
    return f->src < 0 || f->dst < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    close(f->src);
    close(f->dst);
    sg_rm_rf(f->root, NULL);
    free(f);
    return 0;
}

static void put(int dir, const char *name, const char *data, mode_t mode)
{
    int fd = openat(dir, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, data, strlen(data)), 0);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void test_tree(void **state)
{
    fixture *f = *state;
    assert_int_equal(mkdirat(f->src, "t", 0750), 0);
    assert_int_equal(mkdirat(f->src, "t/d", 0700), 0);
    put(f->src, "t/a", "alpha", 04755); /* setuid: not copied */
    put(f->src, "t/d/b", "beta", 0600);
    assert_int_equal(symlinkat("/etc/passwd", f->src, "t/l"), 0);
    assert_int_equal(mkfifoat(f->src, "t/fifo", 0600), 0);
    sg_wscopy_opts o = {.uid = 4242, .gid = 4343};
    sg_wscopy_stats st;
    sg_err err = {0};
    assert_int_equal(sg_wscopy(f->src, "t", f->dst, "copy", &o, &st, &err), 0);
    assert_int_equal(st.files, 2);
    assert_int_equal(st.dirs, 2);
    assert_int_equal(st.links, 1);
    assert_int_equal(st.bytes, 9);
    assert_int_equal(st.skipped, 1);
    struct stat s;
    assert_int_equal(fstatat(f->dst, "copy/a", &s, AT_SYMLINK_NOFOLLOW), 0);
    assert_int_equal(s.st_mode & 07777, 0755);
    assert_int_equal(s.st_uid, 4242);
    assert_int_equal(s.st_gid, 4343);
    assert_int_equal(fstatat(f->dst, "copy/d", &s, AT_SYMLINK_NOFOLLOW), 0);
    assert_int_equal(s.st_mode & 07777, 0700);
    assert_int_equal(s.st_uid, 4242);
    char t[64] = {0};
    assert_int_equal(readlinkat(f->dst, "copy/l", t, sizeof t - 1), 11);
    assert_string_equal(t, "/etc/passwd");
    assert_int_equal(fstatat(f->dst, "copy/fifo", &s, AT_SYMLINK_NOFOLLOW), -1);
    /* a FIFO named is refused, not opened */
    assert_int_equal(sg_wscopy(f->src, "t/fifo", f->dst, "fifo", &o, &st, &err), -1);
    assert_non_null(strstr(err.msg, "FIFO"));
}

static void test_no_write_through(void **state)
{
    fixture *f = *state;
    put(f->src, "x", "new", 0644);
    char target[128];
    snprintf(target, sizeof target, "%s/victim", f->root);
    put(AT_FDCWD, target, "old", 0644);
    assert_int_equal(symlinkat(target, f->dst, "x"), 0);
    sg_wscopy_opts o = {.uid = 0, .gid = 0};
    sg_wscopy_stats st;
    sg_err err = {0};
    assert_int_equal(sg_wscopy(f->src, "x", f->dst, "x", &o, &st, &err), -1);
    assert_non_null(strstr(err.msg, "symlink"));
    char buf[8] = {0};
    int fd = open(target, O_RDONLY | O_CLOEXEC);
    assert_int_equal(read(fd, buf, sizeof buf), 3);
    close(fd);
    assert_string_equal(buf, "old");
    /* a file with another hard link is not written either */
    put(f->dst, "h", "old", 0644);
    assert_int_equal(linkat(f->dst, "h", f->dst, "h2", 0), 0);
    assert_int_equal(sg_wscopy(f->src, "x", f->dst, "h", &o, &st, &err), -1);
    assert_int_equal(err.code, EMLINK);
}

static void test_bounds(void **state)
{
    fixture *f = *state;
    put(f->src, "big", "0123456789", 0644);
    sg_wscopy_opts o = {.max_bytes = 9};
    sg_wscopy_stats st;
    sg_err err = {0};
    assert_int_equal(sg_wscopy(f->src, "big", f->dst, "big", &o, &st, &err), -1);
    assert_int_equal(err.code, EFBIG);
    assert_int_equal(st.bytes, 0); /* refused by its size, before a read */
    assert_int_equal(mkdirat(f->src, "many", 0755), 0);
    put(f->src, "many/1", "a", 0644);
    put(f->src, "many/2", "b", 0644);
    sg_wscopy_opts o2 = {.max_entries = 2};
    assert_int_equal(sg_wscopy(f->src, "many", f->dst, "many", &o2, &st, &err), -1);
    assert_int_equal(err.code, EFBIG);
}

/* A copy whose stop flag is set (an abort, a destroy: sv_cp.c) ends with
 * ECANCELED before the next entry, and copies nothing after; one whose
 * flag is clear copies all. */
static void test_cancel(void **state)
{
    fixture *f = *state;
    assert_int_equal(mkdirat(f->src, "t", 0755), 0);
    put(f->src, "t/a", "a", 0644);
    int stop = 1;
    sg_wscopy_opts o = {.cancel = &stop};
    sg_wscopy_stats st;
    sg_err err = {0};
    assert_int_equal(sg_wscopy(f->src, "t", f->dst, "t", &o, &st, &err), -1);
    assert_int_equal(err.code, ECANCELED);
    assert_non_null(strstr(err.msg, "cancelled"));
    assert_int_equal(st.files + st.dirs, 0);
    stop = 0;
    assert_int_equal(sg_wscopy(f->src, "t", f->dst, "t", &o, &st, &err), 0);
    assert_int_equal(st.files, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rel),
        cmocka_unit_test_setup_teardown(test_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_write_through, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

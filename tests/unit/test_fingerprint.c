/* Unit tests for fingerprint: real directory trees under /tmp, real timestamps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/fingerprint.h"

typedef struct fx {
    char root[64];
    char ws[128];
    char outside[128];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    strcpy(f->root, "/tmp/sg-fingerprint-test-XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->ws, sizeof f->ws, "%s/ws", f->root);
    snprintf(f->outside, sizeof f->outside, "%s/outside", f->root);
    if (mkdir(f->ws, 0755) < 0 || mkdir(f->outside, 0755) < 0)
        return -1;
    *state = f;
    return 0;
}

/* Removes name under dfd with *at calls: unlike nftw, it reaches below
 * PATH_MAX (test_long_path's tree, left behind when that test fails). */
static void rm_at(int dfd, const char *name)
{
    if (unlinkat(dfd, name, 0) == 0 || (errno != EISDIR && errno != EPERM))
        return;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    sg_autoclosedir DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rm_at(dirfd(d), e->d_name);
    unlinkat(dfd, name, AT_REMOVEDIR);
}

static int teardown(void **state)
{
    fx *f = *state;
    rm_at(AT_FDCWD, f->root);
    struct stat st;
    if (lstat(f->root, &st) == 0)
        fprintf(stderr, "teardown: %s left behind\n", f->root);
    free(f);
    return 0;
}

static char *pj(const fx *f, const char *rel)
{
    return sg_strdup_printf("%s/%s", f->ws, rel);
}

static void wpath(const char *p, const char *content)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, content, strlen(content)), 0);
    close(fd);
}

static void wfile(const fx *f, const char *rel, const char *content)
{
    sg_autofree char *p = pj(f, rel);
    wpath(p, content);
}

static void mkd(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static void lnk(const fx *f, const char *target, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    assert_int_equal(symlink(target, p), 0);
}

static void rm(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    assert_int_equal(unlink(p), 0);
}

static struct stat lst(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    return st;
}

/* Longer than SG_CKPT_RACY_NS (50 ms): every change before it is old. */
static void settle(void)
{
    struct timespec t = {.tv_sec = 0, .tv_nsec = 120 * 1000 * 1000};
    while (nanosleep(&t, &t) < 0 && errno == EINTR)
        ;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t ctime_ns(const fx *f, const char *rel)
{
    sg_autofree char *p = rel ? pj(f, rel) : sg_strdup_printf("%s", f->ws);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    return (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

static int backdate_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    struct timespec ts[2] = {{.tv_sec = time(NULL) - 3600, .tv_nsec = 0},
                             {.tv_sec = time(NULL) - 3600, .tv_nsec = 0}};
    return utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
}

/* Sets every entry's atime and mtime (the root's too) an hour back: only
 * the ctime is left recent, and it alone must make the tree racy. */
static void backdate(const fx *f)
{
    assert_int_equal(nftw(f->ws, backdate_one, 32, FTW_PHYS), 0);
}

static sg_fingerprint take_at(const char *root)
{
    sg_fingerprint p;
    sg_err err = {0};
    if (sg_fingerprint_take(root, &p, &err) < 0)
        fail_msg("take: %s", err.msg);
    return p;
}

static sg_fingerprint take(const fx *f)
{
    return take_at(f->ws);
}

/* Takes right after a change to rel (NULL: the root). True when the take
 * surely began less than SG_CKPT_RACY_NS after that ctime, so it must be
 * racy: the walk's clock read came before `after`. False when this
 * machine was too slow for that (the caller tries again). */
static bool take_soon_after(const fx *f, const char *rel, sg_fingerprint *out)
{
    *out = take(f);
    int64_t after = now_ns();
    return ctime_ns(f, rel) >= after - SG_CKPT_RACY_NS;
}

#define SOON_TRIES 10

/* After settle(): a usable fingerprint, and a second take agrees. */
static sg_fingerprint take_stable(const fx *f)
{
    settle();
    sg_fingerprint p = take(f);
    assert_false(p.racy);
    assert_false(p.too_big);
    assert_true(sg_fingerprint_usable(&p));
    sg_fingerprint q = take(f);
    assert_true(sg_fingerprint_usable(&q));
    assert_true(sg_fingerprint_equal(&p, &q));
    return p;
}

/* The tree changed since prev: the new (usable) fingerprint differs. */
static void assert_changed(const fx *f, sg_fingerprint *prev, const char *what)
{
    sg_fingerprint now = take_stable(f);
    if (sg_fingerprint_equal(&now, prev))
        fail_msg("fingerprint unchanged after: %s", what);
    *prev = now;
}

/* A tree of 7 entries: 2 files, a directory with a file, an empty
 * directory, a symlink to a file and a dangling one. */
static void make_tree(const fx *f)
{
    wfile(f, "a.txt", "alpha\n");
    wfile(f, "b.txt", "beta\n");
    mkd(f, "dir");
    wfile(f, "dir/c.txt", "gamma\n");
    mkd(f, "empty");
    lnk(f, "a.txt", "to-a");
    lnk(f, "nowhere", "dangling");
}

static void test_unchanged_equal(void **state)
{
    fx *f = *state;
    make_tree(f);
    /* Old mtimes, but ctimes just set (utimensat sets them, and they
     * cannot be backdated): racy. */
    sg_fingerprint p0;
    int tries = 0;
    do {
        backdate(f);
        assert_true(++tries <= SOON_TRIES);
    } while (!take_soon_after(f, "dir/c.txt", &p0));
    assert_true(p0.racy);
    assert_false(p0.too_big);
    assert_false(sg_fingerprint_usable(&p0));
    assert_int_equal(p0.entries, 7);

    settle();
    sg_fingerprint p1 = take(f);
    sg_fingerprint p2 = take(f);
    assert_false(p1.racy);
    assert_false(p1.too_big);
    assert_true(sg_fingerprint_usable(&p1));
    assert_true(sg_fingerprint_usable(&p2));
    assert_int_equal(p1.entries, 7);
    assert_true(sg_fingerprint_equal(&p1, &p2));
    /* The racy take saw the same metadata: the same value. */
    assert_true(sg_fingerprint_equal(&p0, &p1));

    /* Reading files and listing directories (atime) changes nothing. */
    sg_autofree char *a = pj(f, "dir/c.txt");
    sg_err err = {0};
    sg_autofree char *content = sg_read_file(a, 1 << 20, NULL, &err);
    assert_non_null(content);
    sg_fingerprint p3 = take(f);
    assert_true(sg_fingerprint_usable(&p3));
    assert_true(sg_fingerprint_equal(&p1, &p3));

    /* An empty root. */
    sg_fingerprint e1 = take_at(f->outside);
    assert_int_equal(e1.entries, 0);
    settle();
    sg_fingerprint e2 = take_at(f->outside);
    assert_true(sg_fingerprint_usable(&e2));
    assert_true(sg_fingerprint_equal(&e1, &e2));
    assert_false(sg_fingerprint_equal(&e2, &p1));
}

static void test_racy(void **state)
{
    fx *f = *state;
    make_tree(f);
    sg_fingerprint base = take_stable(f);

    /* A file created right before the take. */
    sg_fingerprint p;
    int tries = 0;
    for (;;) {
        wfile(f, "new.txt", "n");
        if (take_soon_after(f, "new.txt", &p))
            break;
        rm(f, "new.txt");
        assert_true(++tries < SOON_TRIES);
    }
    assert_true(p.racy);
    assert_false(sg_fingerprint_usable(&p));
    assert_false(sg_fingerprint_equal(&p, &base));
    base = take_stable(f);

    /* A file deep in the tree rewritten in place, its mtime restored: the
     * ctime alone is recent. */
    struct stat before = lst(f, "dir/c.txt");
    sg_autofree char *c = pj(f, "dir/c.txt");
    struct timespec ts[2] = {before.st_atim, before.st_mtim};
    tries = 0;
    do {
        wfile(f, "dir/c.txt", "GAMMA\n");
        assert_int_equal(utimensat(AT_FDCWD, c, ts, 0), 0);
        assert_true(++tries <= SOON_TRIES);
    } while (!take_soon_after(f, "dir/c.txt", &p));
    assert_true(p.racy);
    assert_false(sg_fingerprint_usable(&p));

    /* Once old enough, the same tree is usable. */
    p = take_stable(f);
    assert_false(sg_fingerprint_equal(&p, &base));
}

static void test_changes(void **state)
{
    fx *f = *state;
    make_tree(f);
    backdate(f);
    sg_fingerprint prev = take_stable(f);

    /* Same size, mtime restored: only the ctime tells. */
    struct stat before = lst(f, "a.txt");
    wfile(f, "a.txt", "ALPHA\n");
    sg_autofree char *a = pj(f, "a.txt");
    struct timespec ts[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, a, ts, 0), 0);
    struct stat after = lst(f, "a.txt");
    assert_int_equal(after.st_size, before.st_size);
    assert_int_equal(after.st_ino, before.st_ino);
    assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
    assert_changed(f, &prev, "same-size rewrite, mtime restored");

    /* The same in a subdirectory (its own metadata unchanged). */
    struct stat dbefore = lst(f, "dir");
    before = lst(f, "dir/c.txt");
    wfile(f, "dir/c.txt", "GAMMA\n");
    sg_autofree char *c = pj(f, "dir/c.txt");
    struct timespec ts2[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, c, ts2, 0), 0);
    struct stat dafter = lst(f, "dir");
    assert_int_equal(dafter.st_ctim.tv_sec, dbefore.st_ctim.tv_sec);
    assert_int_equal(dafter.st_ctim.tv_nsec, dbefore.st_ctim.tv_nsec);
    assert_changed(f, &prev, "same-size rewrite in a subdirectory, mtime restored");

    assert_int_equal(chmod(a, 0600), 0);
    assert_changed(f, &prev, "chmod");

    sg_autofree char *b = pj(f, "b.txt");
    sg_autofree char *b2 = pj(f, "b2.txt");
    assert_int_equal(rename(b, b2), 0);
    assert_changed(f, &prev, "rename");
    assert_int_equal(prev.entries, 7);

    wfile(f, "empty.txt", "");
    assert_changed(f, &prev, "create an empty file");
    assert_int_equal(prev.entries, 8);

    rm(f, "empty.txt");
    assert_changed(f, &prev, "delete a file");
    assert_int_equal(prev.entries, 7);

    mkd(f, "dir/newdir");
    assert_changed(f, &prev, "create an empty directory");
    assert_int_equal(prev.entries, 8);

    /* b2.txt ("beta\n", 5 bytes) becomes a symlink of the same size. */
    rm(f, "b2.txt");
    lnk(f, "a.txt", "b2.txt");
    assert_true(S_ISLNK(lst(f, "b2.txt").st_mode));
    assert_changed(f, &prev, "file replaced by a symlink");
    assert_int_equal(prev.entries, 8);

    /* A target of the same length (the new link may reuse the inode). */
    rm(f, "to-a");
    lnk(f, "empty", "to-a");
    assert_changed(f, &prev, "symlink target changed");
    assert_int_equal(prev.entries, 8);
}

static void test_symlink_dir_not_followed(void **state)
{
    fx *f = *state;
    sg_autofree char *o1 = sg_strdup_printf("%s/one", f->outside);
    sg_autofree char *osub = sg_strdup_printf("%s/sub", f->outside);
    sg_autofree char *o2 = sg_strdup_printf("%s/sub/two", f->outside);
    wpath(o1, "one\n");
    assert_int_equal(mkdir(osub, 0755), 0);
    wpath(o2, "two\n");
    wfile(f, "a.txt", "alpha\n");
    lnk(f, f->outside, "out");
    sg_fingerprint p = take_stable(f);
    assert_int_equal(p.entries, 2);

    wpath(o1, "one, longer\n");
    wpath(o2, "TWO\n");
    sg_autofree char *o3 = sg_strdup_printf("%s/three", f->outside);
    wpath(o3, "3");
    sg_fingerprint q = take(f);
    assert_false(q.racy); /* nothing inside the tree is recent */
    settle();
    q = take(f);
    assert_true(sg_fingerprint_usable(&q));
    assert_int_equal(q.entries, 2);
    assert_true(sg_fingerprint_equal(&p, &q));
}

static void test_too_big(void **state)
{
    fx *f = *state;
    char name[32];
    for (int i = 0; i < SG_FINGERPRINT_MAX_ENTRIES; i++) {
        snprintf(name, sizeof name, "f%05d", i);
        wfile(f, name, "");
    }
    /* Exactly the limit: still fingerprinted. */
    sg_fingerprint p = take_stable(f);
    assert_int_equal(p.entries, SG_FINGERPRINT_MAX_ENTRIES);

    for (int i = SG_FINGERPRINT_MAX_ENTRIES; i < SG_FINGERPRINT_MAX_ENTRIES + 10; i++) {
        snprintf(name, sizeof name, "f%05d", i);
        wfile(f, name, "");
    }
    settle();
    p = take(f);
    assert_true(p.too_big);
    assert_false(p.racy);
    assert_false(sg_fingerprint_usable(&p));

    /* Over the limit through a subdirectory: the walk stops there too. */
    for (int i = SG_FINGERPRINT_MAX_ENTRIES; i < SG_FINGERPRINT_MAX_ENTRIES + 10; i++) {
        snprintf(name, sizeof name, "f%05d", i);
        rm(f, name);
    }
    mkd(f, "sub");
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "sub/g%d", i);
        wfile(f, name, "");
    }
    settle();
    p = take(f);
    assert_true(p.too_big);
    assert_false(sg_fingerprint_usable(&p));
}

#define LONG_DEPTH 17

/* A path longer than the walk can hold (17 names of 250 bytes: > 4096),
 * built and removed with *at calls (nftw cannot reach its bottom). */
static void test_long_path(void **state)
{
    fx *f = *state;
    char name[251];
    memset(name, 'n', 250);
    name[250] = '\0';
    int fds[LONG_DEPTH + 1];
    fds[0] = open(f->ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fds[0] >= 0);
    for (int i = 0; i < LONG_DEPTH; i++) {
        assert_int_equal(mkdirat(fds[i], name, 0755), 0);
        fds[i + 1] = openat(fds[i], name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fds[i + 1] >= 0);
    }
    settle();
    sg_fingerprint p = take(f);
    assert_true(p.too_big);
    assert_false(sg_fingerprint_usable(&p));
    for (int i = LONG_DEPTH; i > 0; i--) {
        close(fds[i]);
        assert_int_equal(unlinkat(fds[i - 1], name, AT_REMOVEDIR), 0);
    }
    close(fds[0]);
    p = take_stable(f);
    assert_int_equal(p.entries, 0);
}

static void test_errors(void **state)
{
    fx *f = *state;
    sg_autofree char *missing = pj(f, "no/such/dir");
    sg_fingerprint p;
    memset(&p, 0x5a, sizeof p);
    sg_err err = {0};
    assert_int_equal(sg_fingerprint_take(missing, &p, &err), -1);
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.msg, missing));
    /* cleared, never garbage */
    assert_int_equal(p.entries, 0);
    assert_true(p.h[0] == 0 && p.h[1] == 0);

    /* A regular file is no root. */
    wfile(f, "file", "x");
    sg_autofree char *file = pj(f, "file");
    sg_err_clear(&err);
    assert_int_equal(sg_fingerprint_take(file, &p, &err), -1);
    assert_int_equal(err.code, ENOTDIR);
    assert_non_null(strstr(err.msg, file));
}

static void test_equal_compares_entries(void **state)
{
    (void)state;
    sg_fingerprint a = {.h = {1, 2}, .entries = 3};
    sg_fingerprint b = a;
    assert_true(sg_fingerprint_equal(&a, &b));
    assert_true(sg_fingerprint_usable(&a));
    b.entries = 4;
    assert_false(sg_fingerprint_equal(&a, &b));
    b = a;
    b.h[0] ^= 1;
    assert_false(sg_fingerprint_equal(&a, &b));
    b = a;
    b.h[1] ^= 1;
    assert_false(sg_fingerprint_equal(&a, &b));
    /* The flags are not the value: usable() judges them. */
    b = a;
    b.racy = true;
    assert_true(sg_fingerprint_equal(&a, &b));
    assert_false(sg_fingerprint_usable(&b));
    b = a;
    b.too_big = true;
    assert_false(sg_fingerprint_usable(&b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unchanged_equal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_racy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_dir_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_big, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test(test_equal_compares_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

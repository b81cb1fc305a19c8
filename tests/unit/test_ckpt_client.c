/* Unit tests for ckpt_client: the supervisor's client of its checkpoint worker,
 * against the real sandglass-ckpt binary (SG_CKPT_BIN), real directories and
 * a real store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "checkpoint/ckpt_client.h"

typedef struct fx {
    const char *bin; /* the worker; NULL: every test skips */
    char root[64];
    char ws[128];
    char repo[160];
    sg_ckpt_client *c;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    *state = f;
    f->bin = getenv("SG_CKPT_BIN");
    if (!f->bin || !*f->bin) {
        f->bin = NULL;
        return 0;
    }
    strcpy(f->root, "/tmp/sg-ckpt_client-test-XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->ws, sizeof f->ws, "%s/ws", f->root);
    snprintf(f->repo, sizeof f->repo, "%s/state/sb/x/checkpoints.git", f->root);
    if (mkdir(f->ws, 0755) < 0)
        return -1;
    f->c = sg_ckpt_client_new(f->bin, f->repo, f->ws);
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sg_ckpt_client_free(f->c);
    if (f->root[0]) {
        sg_err err = {0};
        sg_rm_rf(f->root, &err);
    }
    free(f);
    /* sg_ckpt_client_free waited for every worker it started */
    errno = 0;
    if (waitpid(-1, NULL, WNOHANG) != -1 || errno != ECHILD) {
        fprintf(stderr, "a child is left after sg_ckpt_client_free\n");
        return -1;
    }
    return 0;
}

/* The fixture, or a skip without the worker binary. */
static fx *fixture(void **state)
{
    fx *f = *state;
    if (!f->bin) {
        print_message("SG_CKPT_BIN is not set: skipped\n");
        skip();
    }
    return f;
}

static char *pj(const fx *f, const char *rel)
{
    return sg_strdup_printf("%s/%s", f->ws, rel);
}

static void wfile(const fx *f, const char *rel, const char *content)
{
    sg_autofree char *p = pj(f, rel);
    unlink(p);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, content, strlen(content)), 0);
    assert_int_equal(fchmod(fd, 0644), 0); /* whatever the umask */
    close(fd);
}

static void mkd(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static void rm(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    assert_int_equal(unlink(p), 0);
}

static bool lexists(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void assert_file(const fx *f, const char *rel, const char *content)
{
    sg_autofree char *p = pj(f, rel);
    sg_err err = {0};
    sg_autofree char *got = sg_read_file(p, 1 << 20, NULL, &err);
    if (!got)
        fail_msg("%s: %s", rel, err.msg);
    assert_string_equal(got, content);
}

static void take(fx *f, const char *label, bool reuse, char id[SG_CHECKPOINT_ID_LEN + 1],
                 sg_checkpoint_stats *stt, bool *reused)
{
    sg_err err = {0};
    if (sg_ckpt_client_take(f->c, label, reuse, id, stt, reused, &err) < 0)
        fail_msg("take: %s", err.msg);
    assert_int_equal(strlen(id), SG_CHECKPOINT_ID_LEN);
    assert_int_equal(strspn(id, "0123456789abcdef"), SG_CHECKPOINT_ID_LEN);
}

static size_t nlist(fx *f)
{
    sg_err err = {0};
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    if (sg_ckpt_client_list(f->c, &v, &n, &err) < 0)
        fail_msg("list: %s", err.msg);
    sg_checkpoint_infos_free(v, n);
    return n;
}

__attribute__((returns_nonnull)) static const sg_checkpoint_change *find_change(const sg_checkpoint_change *ch, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ch[i].path, path) == 0)
            return &ch[i];
    fail_msg("no change for %s", path);
    abort();
}

/* No child of ours is left, running or a zombie. */
static void assert_no_child(void)
{
    errno = 0;
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* A pid is no longer a process of ours (exited and reaped). */
static void assert_gone(pid_t pid)
{
    for (int i = 0; i < 500; i++) {
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("worker %d is still there", (int)pid);
}

static void test_take_stats(void **state)
{
    fx *f = fixture(state);
    assert_int_equal(sg_ckpt_client_pid(f->c), 0); /* nothing spawned yet */
    wfile(f, "a.txt", "alpha\n");
    mkd(f, "dir");
    wfile(f, "dir/b.txt", "beta\n");
    char id[41];
    sg_checkpoint_stats stt;
    memset(&stt, 0xab, sizeof stt);
    bool reused = true;
    take(f, "first", false, id, &stt, &reused);
    assert_false(reused);
    assert_int_equal(stt.files, 2);
    assert_int_equal(stt.dirs, 2);
    assert_int_equal(stt.bytes, 11);
    assert_int_equal(stt.changed, 4); /* root, a.txt, dir, dir/b.txt */
    assert_int_equal(stt.skipped, 0);
    pid_t pid = sg_ckpt_client_pid(f->c);
    assert_true(pid > 0);
    /* the worker stays for the next call */
    char id2[41];
    wfile(f, "a.txt", "alpha 2\n");
    take(f, NULL, false, id2, &stt, NULL);
    assert_string_not_equal(id, id2);
    assert_int_equal(stt.changed, 1);
    assert_int_equal(stt.bytes, 13);
    assert_int_equal(sg_ckpt_client_pid(f->c), pid);
    /* stats and reused are optional */
    take(f, "x", true, id2, NULL, NULL);
}

static void test_reuse_unchanged(void **state)
{
    fx *f = fixture(state);
    wfile(f, "x", "1");
    char a[41], b[41], c[41];
    bool reused = true;
    sg_checkpoint_stats stt = {0};
    take(f, "first", true, a, &stt, &reused);
    assert_false(reused); /* no checkpoint yet */
    take(f, "again", true, b, &stt, &reused);
    assert_true(reused);
    assert_string_equal(a, b);
    assert_int_equal(stt.files, 1);
    assert_int_equal(stt.changed, 0);
    /* without reuse a new checkpoint is made of the same tree */
    take(f, "forced", false, c, NULL, &reused);
    assert_false(reused);
    wfile(f, "x", "22");
    take(f, "changed", true, c, NULL, &reused);
    assert_false(reused);
    assert_string_not_equal(a, c);
    assert_int_equal(nlist(f), 4);
}

static void test_list_labels(void **state)
{
    fx *f = fixture(state);
    const char *labels[] = {"one", "two \xff\xfe not utf-8 \xc3", "three \xe2\x9c\x93"};
    char ids[3][41];
    for (int i = 0; i < 3; i++) {
        char content[8];
        snprintf(content, sizeof content, "%.*s", i + 1, "abc");
        wfile(f, "x", content);
        take(f, labels[i], false, ids[i], NULL, NULL);
    }
    /* a reused checkpoint's label is listed after its commit */
    char r[41];
    bool reused = false;
    take(f, "reused \x80", true, r, NULL, &reused);
    assert_true(reused);
    assert_string_equal(r, ids[2]);

    sg_err err = {0};
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    assert_int_equal(sg_ckpt_client_list(f->c, &v, &n, &err), 0);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(v[i].id, ids[i]);
        assert_string_equal(v[i].label, labels[i]);
        assert_int_equal(v[i].files, 1);
        assert_int_equal(v[i].dirs, 1);
        assert_int_equal(v[i].bytes, i + 1);
        assert_true(v[i].time > 0);
    }
    assert_string_equal(v[3].id, ids[2]);
    assert_string_equal(v[3].label, "reused \x80");
    sg_checkpoint_infos_free(v, n);
}

static void test_list_empty(void **state)
{
    fx *f = fixture(state);
    sg_err err = {0};
    sg_checkpoint_info *v = NULL;
    size_t n = 9;
    assert_int_equal(sg_ckpt_client_list(f->c, &v, &n, &err), 0);
    assert_int_equal(n, 0);
    sg_checkpoint_infos_free(v, n);
}

static void test_diff_kinds(void **state)
{
    fx *f = fixture(state);
    wfile(f, "a.txt", "alpha\n");
    wfile(f, "mode.sh", "#!/bin/sh\n");
    wfile(f, "type", "a file\n");
    mkd(f, "dir");
    wfile(f, "dir/b.txt", "beta\n");
    char c1[41];
    take(f, "base", false, c1, NULL, NULL);

    sg_err err = {0};
    sg_checkpoint_change *ch = NULL;
    size_t n = 9;
    assert_int_equal(sg_ckpt_client_diff(f->c, c1, &ch, &n, &err), 0);
    assert_int_equal(n, 0); /* nothing changed yet */
    sg_checkpoint_changes_free(ch, n);

    wfile(f, "a.txt", "ALPHA\n");
    wfile(f, "new.txt", "new\n");
    wfile(f, "name \xff\xfe", "odd name\n");
    rm(f, "dir/b.txt");
    sg_autofree char *m = pj(f, "mode.sh");
    assert_int_equal(chmod(m, 0755), 0);
    rm(f, "type");
    sg_autofree char *t = pj(f, "type");
    assert_int_equal(symlink("a.txt", t), 0);

    assert_int_equal(sg_ckpt_client_diff(f->c, c1, &ch, &n, &err), 0);
    assert_int_equal(n, 6);
    /* sorted by path */
    assert_string_equal(ch[0].path, "a.txt");
    assert_int_equal(ch[0].kind, SG_CKPT_MODIFIED);
    assert_int_equal(ch[0].mode_now, S_IFREG | 0644);
    assert_int_equal(ch[0].mode_then, S_IFREG | 0644);
    const sg_checkpoint_change *x = find_change(ch, n, "dir/b.txt");
    assert_int_equal(x->kind, SG_CKPT_DELETED);
    assert_int_equal(x->mode_now, 0);
    assert_int_equal(x->mode_then, S_IFREG | 0644);
    x = find_change(ch, n, "new.txt");
    assert_int_equal(x->kind, SG_CKPT_CREATED);
    assert_int_equal(x->mode_then, 0);
    x = find_change(ch, n, "name \xff\xfe");
    assert_int_equal(x->kind, SG_CKPT_CREATED);
    assert_int_equal(x->uid_now, getuid());
    assert_int_equal(x->gid_now, getgid());
    x = find_change(ch, n, "mode.sh");
    assert_int_equal(x->kind, SG_CKPT_META);
    assert_int_equal(x->mode_now & 07777, 0755);
    assert_int_equal(x->mode_then & 07777, 0644);
    x = find_change(ch, n, "type");
    assert_int_equal(x->kind, SG_CKPT_TYPE);
    assert_true(S_ISLNK(x->mode_now));
    assert_true(S_ISREG(x->mode_then));
    sg_checkpoint_changes_free(ch, n);

    /* a unique prefix will do */
    char prefix[9];
    memcpy(prefix, c1, 8);
    prefix[8] = '\0';
    assert_int_equal(sg_ckpt_client_diff(f->c, prefix, &ch, &n, &err), 0);
    assert_int_equal(n, 6);
    sg_checkpoint_changes_free(ch, n);
}

static void test_restore(void **state)
{
    fx *f = fixture(state);
    wfile(f, "a.txt", "alpha\n");
    mkd(f, "dir");
    wfile(f, "dir/b.txt", "beta\n");
    char c1[41], c2[41];
    take(f, "first", false, c1, NULL, NULL);

    wfile(f, "a.txt", "ALPHA changed\n");
    wfile(f, "new.txt", "new\n");
    rm(f, "dir/b.txt");
    mkd(f, "newdir");
    wfile(f, "newdir/x", "x");
    take(f, "second", false, c2, NULL, NULL);

    sg_err err = {0};
    sg_checkpoint_stats stt = {0};
    assert_int_equal(sg_ckpt_client_restore(f->c, c1, &stt, &err), 0);
    assert_int_equal(stt.changed, 5);
    assert_int_equal(stt.files, 2);
    assert_int_equal(stt.bytes, 11);
    assert_file(f, "a.txt", "alpha\n");
    assert_file(f, "dir/b.txt", "beta\n");
    assert_false(lexists(f, "new.txt"));
    assert_false(lexists(f, "newdir"));
    sg_checkpoint_change *ch = NULL;
    size_t n = 9;
    assert_int_equal(sg_ckpt_client_diff(f->c, c1, &ch, &n, &err), 0);
    assert_int_equal(n, 0);
    sg_checkpoint_changes_free(ch, n);

    /* and forward again (stats optional) */
    assert_int_equal(sg_ckpt_client_restore(f->c, c2, NULL, &err), 0);
    assert_file(f, "a.txt", "ALPHA changed\n");
    assert_file(f, "newdir/x", "x");
    assert_false(lexists(f, "dir/b.txt"));
}

static void test_unified(void **state)
{
    fx *f = fixture(state);
    sg_err err = {0};
    sg_diff_result r;
    memset(&r, 0xab, sizeof r);
    const char *old = "one\ntwo\nthree\n", *new_ = "one\nTWO\nthree\nfour\n";
    assert_int_equal(sg_ckpt_client_unified(f->c, "dir/f.txt", old, strlen(old), new_, strlen(new_), &r, &err), 0);
    assert_non_null(r.text);
    assert_int_equal(strlen(r.text), r.len);
    assert_int_equal(r.added, 2);
    assert_int_equal(r.removed, 1);
    assert_non_null(strstr(r.text, "--- a/dir/f.txt\n"));
    assert_non_null(strstr(r.text, "+++ b/dir/f.txt\n"));
    assert_non_null(strstr(r.text, "\n-two\n"));
    assert_non_null(strstr(r.text, "\n+TWO\n"));
    assert_non_null(strstr(r.text, "\n+four\n"));
    sg_diff_result_clear(&r);

    /* a new file: no old side */
    assert_int_equal(sg_ckpt_client_unified(f->c, "n.txt", NULL, 0, "a\nb\n", 4, &r, &err), 0);
    assert_non_null(strstr(r.text, "--- /dev/null\n"));
    assert_non_null(strstr(r.text, "+++ b/n.txt\n"));
    assert_int_equal(r.added, 2);
    assert_int_equal(r.removed, 0);
    sg_diff_result_clear(&r);

    /* a deleted file: no new side */
    assert_int_equal(sg_ckpt_client_unified(f->c, "d.txt", "gone\n", 5, NULL, 0, &r, &err), 0);
    assert_non_null(strstr(r.text, "--- a/d.txt\n"));
    assert_non_null(strstr(r.text, "+++ /dev/null\n"));
    assert_int_equal(r.added, 0);
    assert_int_equal(r.removed, 1);
    sg_diff_result_clear(&r);

    /* equal sides: an empty diff */
    assert_int_equal(sg_ckpt_client_unified(f->c, "same", "x\n", 2, "x\n", 2, &r, &err), 0);
    assert_non_null(r.text);
    assert_int_equal(r.len, 0);
    assert_int_equal(r.added + r.removed, 0);
    sg_diff_result_clear(&r);

    /* a non-UTF-8 path and texts travel as bytes (libgit2 may quote the
     * path in the headers) */
    assert_int_equal(sg_ckpt_client_unified(f->c, "p\xff", "a\xfe\n", 3, "b\n", 2, &r, &err), 0);
    assert_non_null(strstr(r.text, "\n-a\xfe\n"));
    assert_int_equal(r.added, 1);
    assert_int_equal(r.removed, 1);
    sg_diff_result_clear(&r);

    /* usable as an sg_diff_fn */
    sg_diff_fn fn = sg_ckpt_client_unified;
    assert_int_equal(fn(f->c, "g", "a\n", 2, "b\n", 2, &r, &err), 0);
    assert_int_equal(r.added, 1);
    sg_diff_result_clear(&r);
}

static void test_stop_respawns(void **state)
{
    fx *f = fixture(state);
    wfile(f, "x", "1");
    char a[41];
    take(f, "one", false, a, NULL, NULL);
    pid_t p1 = sg_ckpt_client_pid(f->c);
    assert_true(p1 > 0);
    sg_ckpt_client_stop(f->c);
    assert_int_equal(sg_ckpt_client_pid(f->c), 0);
    sg_ckpt_client_stop(f->c); /* twice is harmless */
    /* the next call spawns a new worker on the same store */
    assert_int_equal(nlist(f), 1);
    pid_t p2 = sg_ckpt_client_pid(f->c);
    assert_true(p2 > 0);
    assert_true(p2 != p1);
    /* the stopped one exits and is collected (by reap, or at the next stop) */
    sg_ckpt_client_stop(f->c);
    assert_int_equal(nlist(f), 1);
    pid_t p3 = sg_ckpt_client_pid(f->c);
    assert_true(p3 > 0 && p3 != p2);
    assert_gone(p1);
    for (int i = 0; i < 500; i++) {
        sg_ckpt_client_reap(f->c);
        if (kill(p2, 0) < 0 && errno == ESRCH)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_gone(p2);
    /* start is idempotent while a worker runs */
    sg_err err = {0};
    assert_int_equal(sg_ckpt_client_start(f->c, &err), 0);
    assert_int_equal(sg_ckpt_client_pid(f->c), p3);
}

static void test_start_opened(void **state)
{
    fx *f = fixture(state);
    sg_err err = {0};
    assert_int_equal(sg_ckpt_client_start(f->c, &err), 0);
    assert_true(sg_ckpt_client_pid(f->c) > 0);
    assert_int_equal(sg_ckpt_client_opened(f->c, &err), 0);
    assert_int_equal(sg_ckpt_client_opened(f->c, &err), 0); /* nothing pending now */
    assert_int_equal(nlist(f), 0);
}

static void test_killed_worker(void **state)
{
    fx *f = fixture(state);
    wfile(f, "x", "1");
    char a[41], b[41];
    take(f, "one", false, a, NULL, NULL);
    pid_t p1 = sg_ckpt_client_pid(f->c);
    assert_true(p1 > 0);
    assert_int_equal(kill(p1, SIGKILL), 0);
    /* the call finds the socket closed and retries on a fresh worker */
    wfile(f, "x", "22");
    bool reused = true;
    take(f, "two", true, b, NULL, &reused);
    assert_false(reused);
    assert_string_not_equal(a, b);
    pid_t p2 = sg_ckpt_client_pid(f->c);
    assert_true(p2 > 0 && p2 != p1);
    assert_int_equal(nlist(f), 2);

    /* killed again while its "open" is pending */
    sg_ckpt_client_stop(f->c);
    sg_err err = {0};
    assert_int_equal(sg_ckpt_client_start(f->c, &err), 0);
    pid_t p3 = sg_ckpt_client_pid(f->c);
    assert_true(p3 > 0 && p3 != p2);
    assert_int_equal(kill(p3, SIGKILL), 0);
    assert_int_equal(nlist(f), 2);
    assert_true(sg_ckpt_client_pid(f->c) != p3);

    /* killed once more, then diff and restore still work */
    assert_int_equal(kill(sg_ckpt_client_pid(f->c), SIGKILL), 0);
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    assert_int_equal(sg_ckpt_client_diff(f->c, a, &ch, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ch[0].path, "x");
    sg_checkpoint_changes_free(ch, n);
    assert_int_equal(kill(sg_ckpt_client_pid(f->c), SIGKILL), 0);
    assert_int_equal(sg_ckpt_client_restore(f->c, a, NULL, &err), 0);
    assert_file(f, "x", "1");
    assert_int_equal(kill(sg_ckpt_client_pid(f->c), SIGKILL), 0);
    sg_diff_result r;
    assert_int_equal(sg_ckpt_client_unified(f->c, "x", "1\n", 2, "2\n", 2, &r, &err), 0);
    assert_int_equal(r.added, 1);
    sg_diff_result_clear(&r);
    /* the killed ones are all collected */
    assert_gone(p1);
    assert_gone(p3);
}

static void test_store_cannot_open(void **state)
{
    fx *f = fixture(state);
    /* a store inside the workspace is refused by the worker */
    sg_autofree char *inside = pj(f, ".ckpt");
    sg_ckpt_client *c = sg_ckpt_client_new(f->bin, inside, f->ws);
    sg_err err = {0};
    assert_int_equal(sg_ckpt_client_start(c, &err), 0);
    assert_true(sg_ckpt_client_pid(c) > 0);
    assert_int_equal(sg_ckpt_client_opened(c, &err), -1);
    assert_non_null(strstr(err.msg, "checkpoint store"));
    assert_int_equal(err.code, EINVAL);
    assert_int_equal(sg_ckpt_client_pid(c), 0); /* stopped */

    /* the first call reports it too */
    char id[41];
    sg_err e2 = {0};
    assert_int_equal(sg_ckpt_client_take(c, "x", false, id, NULL, NULL, &e2), -1);
    assert_non_null(strstr(e2.msg, "checkpoint store"));
    sg_checkpoint_info *v = (sg_checkpoint_info *)1;
    size_t n = 9;
    sg_err e3 = {0};
    assert_int_equal(sg_ckpt_client_list(c, &v, &n, &e3), -1);
    assert_non_null(strstr(e3.msg, "checkpoint store"));
    assert_null(v);
    assert_int_equal(n, 0);
    sg_ckpt_client_free(c);

    /* a workspace that does not exist */
    sg_autofree char *nows = sg_strdup_printf("%s/nonexistent", f->root);
    c = sg_ckpt_client_new(f->bin, f->repo, nows);
    sg_err e4 = {0};
    assert_int_equal(sg_ckpt_client_take(c, "x", false, id, NULL, NULL, &e4), -1);
    assert_non_null(strstr(e4.msg, "checkpoint store"));
    sg_ckpt_client_free(c);

    /* a worker binary that does not exist (ENOENT from posix_spawn; under
     * valgrind, whose posix_spawn is a fork, the child exits instead) */
    c = sg_ckpt_client_new("/nonexistent/sandglass-ckpt", f->repo, f->ws);
    sg_err e5 = {0};
    assert_int_equal(sg_ckpt_client_take(c, "x", false, id, NULL, NULL, &e5), -1);
    assert_true(e5.code != 0);
    assert_non_null(strstr(e5.msg, "checkpoint worker"));
    assert_int_equal(sg_ckpt_client_pid(c), 0);
    sg_ckpt_client_free(c);
    assert_no_child();
}

static void test_unknown_id(void **state)
{
    fx *f = fixture(state);
    wfile(f, "x", "1");
    char a[41];
    take(f, "one", false, a, NULL, NULL);
    pid_t pid = sg_ckpt_client_pid(f->c);

    sg_err err = {0};
    sg_checkpoint_change *ch = (sg_checkpoint_change *)1;
    size_t n = 9;
    assert_int_equal(sg_ckpt_client_diff(f->c, "0000000000000000000000000000000000000001", &ch, &n, &err), -1);
    assert_int_equal(err.code, ENOENT);
    assert_true(err.msg[0] != '\0');
    assert_null(ch);
    assert_int_equal(n, 0);
    sg_err e2 = {0};
    assert_int_equal(sg_ckpt_client_diff(f->c, "zz", &ch, &n, &e2), -1);
    assert_int_equal(e2.code, EINVAL);
    sg_err e3 = {0};
    assert_int_equal(sg_ckpt_client_restore(f->c, "0000000000000000000000000000000000000001", NULL, &e3), -1);
    assert_int_equal(e3.code, ENOENT);
    sg_err e4 = {0};
    assert_int_equal(sg_ckpt_client_diff(f->c, "", &ch, &n, &e4), -1);
    /* an id that is not UTF-8 is refused before it is sent */
    sg_err e5 = {0};
    assert_int_equal(sg_ckpt_client_diff(f->c, "\xff\xfe", &ch, &n, &e5), -1);
    assert_int_equal(e5.code, EINVAL);
    sg_err e6 = {0};
    assert_int_equal(sg_ckpt_client_restore(f->c, "\xff", NULL, &e6), -1);
    assert_int_equal(e6.code, EINVAL);

    /* the same worker keeps serving */
    assert_int_equal(sg_ckpt_client_pid(f->c), pid);
    assert_int_equal(nlist(f), 1);
    assert_int_equal(sg_ckpt_client_diff(f->c, a, &ch, &n, &err), 0);
    assert_int_equal(n, 0);
    sg_checkpoint_changes_free(ch, n);
    assert_int_equal(sg_ckpt_client_pid(f->c), pid);
    assert_file(f, "x", "1");
}

static void test_free_leaves_no_child(void **state)
{
    fx *f = fixture(state);
    sg_ckpt_client_free(f->c); /* never started */
    f->c = NULL;
    assert_no_child();
    sg_ckpt_client_free(NULL);

    sg_ckpt_client *c = sg_ckpt_client_new(f->bin, f->repo, f->ws);
    char id[41];
    sg_err err = {0};
    assert_int_equal(sg_ckpt_client_take(c, "x", false, id, NULL, NULL, &err), 0);
    pid_t p1 = sg_ckpt_client_pid(c);
    sg_ckpt_client_stop(c); /* one stopped, not yet reaped */
    assert_int_equal(sg_ckpt_client_take(c, "y", false, id, NULL, NULL, &err), 0);
    pid_t p2 = sg_ckpt_client_pid(c);
    assert_true(p1 > 0 && p2 > 0 && p1 != p2);
    sg_ckpt_client_free(c);
    assert_no_child();

    /* with an "open" in flight */
    c = sg_ckpt_client_new(f->bin, f->repo, f->ws);
    assert_int_equal(sg_ckpt_client_start(c, &err), 0);
    sg_ckpt_client_free(c);
    assert_no_child();

    /* with a killed worker not yet noticed */
    c = sg_ckpt_client_new(f->bin, f->repo, f->ws);
    assert_int_equal(sg_ckpt_client_start(c, &err), 0);
    assert_int_equal(kill(sg_ckpt_client_pid(c), SIGKILL), 0);
    sg_ckpt_client_free(c);
    assert_no_child();
}

/* Labels sent without waiting: recorded in order after their checkpoint;
 * a refused one is reported by the next call, which still succeeds. */
static void test_alias_nowait(void **state)
{
    fx *f = fixture(state);
    wfile(f, "x", "1");
    char a[SG_CHECKPOINT_ID_LEN + 1];
    take(f, "one", false, a, NULL, NULL);
    char *labels[] = {"two", "three"};
    int64_t times[] = {1700000000, 1700000001};
    sg_err err = {0};
    assert_int_equal(sg_ckpt_client_alias_nowait(f->c, a, labels, times, 2, &err), 0);
    char *bad[] = {"bad"};
    assert_int_equal(sg_ckpt_client_alias_nowait(f->c, "0000000000000000000000000000000000000000", bad, times, 1,
                                           &err), 0);
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    if (sg_ckpt_client_list(f->c, &v, &n, &err) < 0)
        fail_msg("list: %s", err.msg);
    assert_int_equal(n, 3);
    assert_string_equal(v[0].label, "one");
    assert_string_equal(v[1].label, "two");
    assert_string_equal(v[2].label, "three");
    assert_string_equal(v[2].id, a);
    assert_int_equal(v[1].time, 1700000000);
    sg_checkpoint_infos_free(v, n);
    sg_err owed = {0};
    assert_true(sg_ckpt_client_owed_error(f->c, &owed));
    assert_non_null(strstr(owed.msg, "not the newest"));
    assert_false(sg_ckpt_client_owed_error(f->c, &owed));
    /* with no worker running: one is spawned, and not waited for */
    sg_ckpt_client_stop(f->c);
    char *four[] = {"four"};
    assert_int_equal(sg_ckpt_client_alias_nowait(f->c, a, four, times, 1, &err), 0);
    assert_true(sg_ckpt_client_pid(f->c) > 0);
    if (sg_ckpt_client_list(f->c, &v, &n, &err) < 0)
        fail_msg("list: %s", err.msg);
    assert_int_equal(n, 4);
    assert_string_equal(v[3].label, "four");
    sg_checkpoint_infos_free(v, n);
    /* a full batch (the supervisor sends up to 256): one append, in order */
    enum { BATCH = 300 };
    char *many[BATCH];
    int64_t mtimes[BATCH];
    for (int i = 0; i < BATCH; i++) {
        many[i] = sg_strdup_printf("l%d", i);
        mtimes[i] = 1700000100 + i;
    }
    assert_int_equal(sg_ckpt_client_alias_nowait(f->c, a, many, mtimes, BATCH, &err), 0);
    for (int i = 0; i < BATCH; i++)
        free(many[i]);
    if (sg_ckpt_client_list(f->c, &v, &n, &err) < 0)
        fail_msg("list: %s", err.msg);
    assert_int_equal(n, 4 + BATCH);
    assert_string_equal(v[4].label, "l0");
    assert_string_equal(v[3 + BATCH].label, "l299");
    assert_int_equal(v[3 + BATCH].time, 1700000100 + BATCH - 1);
    sg_checkpoint_infos_free(v, n);
}

/* Label batches sent one after another without a call between them (a
 * program printing prompt marks in a loop once made the supervisor do
 * so): each answer is read before the next is sent, so the worker never
 * blocks writing answers nobody reads while we block sending to it. */
static void test_alias_nowait_many(void **state)
{
    fx *f = fixture(state);
    wfile(f, "x", "1");
    char a[SG_CHECKPOINT_ID_LEN + 1];
    take(f, "one", false, a, NULL, NULL);
    enum { SENDS = 20000 };
    char *label[] = {"a label of some length, as the supervisor's are (exec 1, prompt 1)"};
    int64_t t[] = {1700000000};
    sg_err err = {0};
    for (int i = 0; i < SENDS; i++)
        if (sg_ckpt_client_alias_nowait(f->c, a, label, t, 1, &err) < 0)
            fail_msg("alias %d: %s", i, err.msg);
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    if (sg_ckpt_client_list(f->c, &v, &n, &err) < 0)
        fail_msg("list: %s", err.msg);
    assert_int_equal(n, 1 + SENDS);
    sg_checkpoint_infos_free(v, n);
}

int main(void)
{
    /* as the supervisor does: a worker gone is EPIPE, not a signal */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_take_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reuse_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_labels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_diff_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_respawns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alias_nowait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alias_nowait_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_opened, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_cannot_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_leaves_no_child, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

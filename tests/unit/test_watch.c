/* Real inotify on real temp directories, driven on a real libuv loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/util.h"
#include "capture/watch.h"
#include "checkpoint/diff.h"
#include "checkpoint/udiff.h"

typedef struct fx {
    char dir[64];
    uv_loop_t loop;
    sg_watch *w;
    json_t *evs;
    uv_timer_t *guard; /* a test's own bound on its loop, closed by teardown after a failure */
} fx;

static void collect(void *ud, json_t *payload)
{
    fx *f = ud;
    json_array_append_new(f->evs, payload);
}

static char *P(fx *f, const char *rel)
{
    static char buf[4][512];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", f->dir, rel);
    return buf[i];
}

static void put(fx *f, const char *rel, const char *content)
{
    int fd = open(P(f, rel), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, content, strlen(content)), 0);
    close(fd);
}

static void put_bytes(fx *f, const char *rel, const void *buf, size_t len)
{
    int fd = open(P(f, rel), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, buf, len), 0);
    close(fd);
}

static void start(fx *f)
{
    sg_err err = {0};
    f->w = sg_watch_new(&f->loop, f->dir, collect, f, sg_udiff_fn, NULL, &err);
    if (!f->w)
        fail_msg("sg_watch_new: %s", err.msg);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/sg-watch-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->evs = json_array();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sg_watch_free(f->w);
    if (f->guard)
        uv_close((uv_handle_t *)f->guard, (uv_close_cb)free);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    sg_err err = {0};
    sg_rm_rf(f->dir, &err);
    json_decref(f->evs);
    free(f);
    return 0;
}

static void on_stop(uv_timer_t *t)
{
    *(int *)t->data = 1;
    uv_stop(t->loop);
}

/* Runs the loop until at least n events arrived (or timeout), then for
 * `extra` ms more so that any duplicate or spurious event shows up. */
static void run_until(fx *f, size_t n, int timeout_ms, int extra_ms)
{
    uv_timer_t t;
    int fired = 0;
    uv_timer_init(&f->loop, &t);
    t.data = &fired;
    /* timeout_ms counts from the last event, not from the start: a slow
     * machine (ASan beside a compiler) makes the watcher slower, not wrong,
     * so the wait gives up only when the events stop coming. */
    size_t seen = json_array_size(f->evs);
    uv_timer_start(&t, on_stop, (uint64_t)timeout_ms, 0);
    while (json_array_size(f->evs) < n && !fired) {
        uv_run(&f->loop, UV_RUN_ONCE);
        if (json_array_size(f->evs) > seen) {
            seen = json_array_size(f->evs);
            uv_timer_start(&t, on_stop, (uint64_t)timeout_ms, 0);
        }
    }
    if (extra_ms > 0) {
        fired = 0;
        uv_timer_start(&t, on_stop, (uint64_t)extra_ms, 0);
        while (!fired)
            uv_run(&f->loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
}

static void clear(fx *f)
{
    json_array_clear(f->evs);
}

static json_t *find(fx *f, const char *path, const char *change)
{
    size_t i;
    json_t *e;
    json_array_foreach(f->evs, i, e) {
        if (!strcmp(json_string_value(json_object_get(e, "path")), path) &&
            (!change || !strcmp(json_string_value(json_object_get(e, "change")), change)))
            return e;
    }
    return NULL;
}

static size_t count_path(fx *f, const char *path)
{
    size_t i, c = 0;
    json_t *e;
    json_array_foreach(f->evs, i, e)
        if (!strcmp(json_string_value(json_object_get(e, "path")), path))
            c++;
    return c;
}

static const char *sfield(json_t *e, const char *k)
{
    return json_string_value(json_object_get(e, k));
}

static void dump(fx *f)
{
    char *s = json_dumps(f->evs, JSON_INDENT(1));
    print_message("events: %s\n", s);
    free(s);
}

static void expect_n(fx *f, size_t n)
{
    if (json_array_size(f->evs) != n) {
        dump(f);
        fail_msg("expected %zu events, got %zu", n, json_array_size(f->evs));
    }
}

static void test_basic(void **state)
{
    fx *f = *state;
    put(f, "a.txt", "one\ntwo\n");
    mkdir(P(f, "sub"), 0755);
    put(f, "sub/old.txt", "old\n");
    start(f);
    sg_watch_stats st;
    sg_watch_get_stats(f->w, &st);
    assert_int_equal(st.files, 2);
    assert_int_equal(st.watches, 2);
    run_until(f, 1, 50, 0);
    expect_n(f, 0); /* the baseline emits nothing */

    put(f, "new.txt", "hello\n");
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    json_t *e = find(f, "new.txt", "created");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "+hello"));
    assert_int_equal(json_integer_value(json_object_get(e, "size")), 6);
    assert_string_equal(sfield(e, "sha256"),
                        "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
    assert_int_equal(json_integer_value(json_object_get(e, "added")), 1);

    clear(f);
    put(f, "a.txt", "one\n2\n");
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    e = find(f, "a.txt", "modified");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "-two\n+2\n"));
    assert_non_null(strstr(sfield(e, "diff"), "--- a/a.txt"));

    clear(f);
    assert_int_equal(unlink(P(f, "new.txt")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    e = find(f, "new.txt", "deleted");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "-hello"));

    clear(f);
    assert_int_equal(rename(P(f, "a.txt"), P(f, "sub/b.txt")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    e = find(f, "sub/b.txt", "renamed");
    assert_non_null(e);
    assert_string_equal(sfield(e, "old_path"), "a.txt");
    assert_string_equal(sfield(e, "diff"), "");

    /* Renamed out of the workspace: deleted. In from outside: created. */
    clear(f);
    char outside[128];
    snprintf(outside, sizeof(outside), "%s.out", f->dir);
    assert_int_equal(rename(P(f, "sub/old.txt"), outside), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(find(f, "sub/old.txt", "deleted"));
    clear(f);
    assert_int_equal(rename(outside, P(f, "back.txt")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(find(f, "back.txt", "created"));

    sg_watch_get_stats(f->w, &st);
    assert_int_equal(st.files, 2);
    assert_true(st.bytes_cached > 0);
}

static void test_nested_race(void **state)
{
    fx *f = *state;
    start(f);
    const int rounds = 20;
    for (int r = 0; r < rounds; r++) {
        char d[160], f1[192], f2[192];
        snprintf(d, sizeof(d), "%s/r%d/b/c", f->dir, r);
        snprintf(f1, sizeof(f1), "%s/f.txt", d);
        snprintf(f2, sizeof(f2), "%s/r%d/b/g.txt", f->dir, r);
        pid_t pid = sgt_fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            /* As fast as possible: mkdir -p, then write into the new dir. */
            sg_err e = {0};
            if (sg_mkdir_p(d, 0755, &e) < 0)
                _exit(1);
            int fd = open(f1, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || write(fd, "x\n", 2) != 2)
                _exit(2);
            close(fd);
            fd = open(f2, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || write(fd, "y\n", 2) != 2)
                _exit(3);
            close(fd);
            _exit(0);
        }
        /* The loop runs while the child writes. */
        run_until(f, (size_t)(2 * (r + 1)), 3000, 0);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(status, 0);
    }
    run_until(f, (size_t)(2 * rounds), 3000, 50);
    expect_n(f, (size_t)(2 * rounds));
    for (int r = 0; r < rounds; r++) {
        char a[64], b[64];
        snprintf(a, sizeof(a), "r%d/b/c/f.txt", r);
        snprintf(b, sizeof(b), "r%d/b/g.txt", r);
        assert_int_equal(count_path(f, a), 1);
        assert_int_equal(count_path(f, b), 1);
        assert_non_null(find(f, a, "created"));
        assert_non_null(strstr(sfield(find(f, a, NULL), "diff"), "+x"));
    }
}

static void test_editor_saves(void **state)
{
    fx *f = *state;
    put(f, "x.txt", "v1\n");
    put(f, "y.txt", "y1\n");
    put(f, "z.txt", "z1\n");
    start(f);

    /* Write a temp file and rename it over the target. */
    put(f, ".x.txt.swp", "v2\n");
    assert_int_equal(rename(P(f, ".x.txt.swp"), P(f, "x.txt")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    json_t *e = find(f, "x.txt", "modified");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "-v1\n+v2\n"));

    /* vim with a backup: rename target away, write a new one, drop the
     * backup. */
    clear(f);
    assert_int_equal(rename(P(f, "y.txt"), P(f, "y.txt~")), 0);
    put(f, "y.txt", "y2\n");
    assert_int_equal(unlink(P(f, "y.txt~")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    e = find(f, "y.txt", "modified");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "-y1\n+y2\n"));

    /* Truncate and rewrite in two steps. */
    clear(f);
    int fd = open(P(f, "z.txt"), O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "z", 1), 1);
    assert_int_equal(write(fd, "2\n", 2), 2);
    close(fd);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(strstr(sfield(find(f, "z.txt", "modified"), "diff"), "+z2"));

    /* Same content again: nothing. A temp file made and removed: nothing. */
    clear(f);
    put(f, "z.txt", "z2\n");
    put(f, "tmp.123", "scratch\n");
    assert_int_equal(unlink(P(f, "tmp.123")), 0);
    run_until(f, 1, 100, 0);
    expect_n(f, 0);

    /* A temp file that is renamed away in the same burst. */
    put(f, "a.tmp", "data\n");
    assert_int_equal(rename(P(f, "a.tmp"), P(f, "final.txt")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(find(f, "final.txt", "created"));
}

static void test_large_binary_symlink(void **state)
{
    fx *f = *state;
    start(f);
    size_t big = SG_DIFF_MAX_BYTES + 1000;
    char *buf = malloc(big);
    memset(buf, 'a', big);
    put_bytes(f, "big.txt", buf, big);
    free(buf);
    put_bytes(f, "bin.dat", "\x7f" "ELF\0\1\2", 7);
    assert_int_equal(symlink("/etc/passwd", P(f, "link")), 0);
    run_until(f, 3, 2000, 30);
    expect_n(f, 3);
    json_t *e = find(f, "big.txt", "created");
    assert_non_null(e);
    assert_true(json_is_true(json_object_get(e, "truncated")));
    assert_null(json_object_get(e, "diff"));
    assert_int_equal(json_integer_value(json_object_get(e, "size")), (json_int_t)big);
    assert_int_equal(strlen(sfield(e, "sha256")), 64);
    e = find(f, "bin.dat", "created");
    assert_true(json_is_true(json_object_get(e, "binary")));
    assert_null(json_object_get(e, "diff"));
    assert_int_equal(json_integer_value(json_object_get(e, "size")), 7);
    assert_int_equal(strlen(sfield(e, "sha256")), 64);
    /* A symlink is its target string, never the file it points to. */
    e = find(f, "link", "created");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "+/etc/passwd"));
    assert_null(strstr(sfield(e, "diff"), "root:"));

    /* A symlink to a directory outside is a file too: never watched or
     * walked into. */
    clear(f);
    sg_watch_stats st0, st1;
    sg_watch_get_stats(f->w, &st0);
    assert_int_equal(symlink("/etc", P(f, "etcdir")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(strstr(sfield(find(f, "etcdir", "created"), "diff"), "+/etc"));
    sg_watch_get_stats(f->w, &st1);
    assert_int_equal(st1.watches, st0.watches);
    assert_int_equal(st1.files, st0.files + 1);

    /* Binary becomes text: the diff shows the whole text, base empty. */
    clear(f);
    put(f, "bin.dat", "now text\n");
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    e = find(f, "bin.dat", "modified");
    assert_string_equal(sfield(e, "diff_base"), "empty");
    assert_non_null(strstr(sfield(e, "diff"), "+now text"));
}

static void test_dir_tree(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    assert_int_equal(sg_mkdir_p(P(f, "d/e"), 0755, &err), 0);
    put(f, "d/e/f1", "1\n");
    put(f, "d/e/f2", "2\n");
    put(f, "d/g", "3\n");
    assert_int_equal(sg_mkdir_p(P(f, "m/n"), 0755, &err), 0);
    put(f, "m/n/k", "k\n");
    put(f, "m/top", "t\n");
    start(f);

    /* Directory rename: every file under it is renamed. */
    assert_int_equal(rename(P(f, "m"), P(f, "moved")), 0);
    run_until(f, 2, 2000, 30);
    expect_n(f, 2);
    json_t *e = find(f, "moved/n/k", "renamed");
    assert_non_null(e);
    assert_string_equal(sfield(e, "old_path"), "m/n/k");
    assert_string_equal(sfield(find(f, "moved/top", "renamed"), "old_path"), "m/top");
    /* The moved tree is still watched at its new place. */
    clear(f);
    put(f, "moved/n/k", "k2\n");
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(find(f, "moved/n/k", "modified"));

    clear(f);
    assert_int_equal(sg_rm_rf(P(f, "d"), &err), 0);
    run_until(f, 3, 2000, 50);
    expect_n(f, 3);
    assert_non_null(find(f, "d/e/f1", "deleted"));
    assert_non_null(find(f, "d/e/f2", "deleted"));
    assert_non_null(find(f, "d/g", "deleted"));
    sg_watch_stats st;
    sg_watch_get_stats(f->w, &st);
    assert_int_equal(st.files, 2);
    assert_int_equal(st.watches, 3); /* root, moved, moved/n */
}

static void test_git_skipped_dotfiles_reported(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    assert_int_equal(sg_mkdir_p(P(f, ".git/objects"), 0755, &err), 0);
    put(f, ".git/HEAD", "ref: refs/heads/main\n");
    start(f);
    put(f, ".git/objects/ab", "blob");
    put(f, ".git/index", "idx");
    assert_int_equal(sg_mkdir_p(P(f, "pkg/.git/refs"), 0755, &err), 0);
    put(f, "pkg/.git/refs/x", "y");
    put(f, ".env", "KEY=1\n");
    run_until(f, 1, 2000, 50);
    expect_n(f, 1);
    assert_non_null(find(f, ".env", "created"));
}

static void test_flush_and_open_writer(void **state)
{
    fx *f = *state;
    start(f);
    sg_err err = {0};
    /* flush reports without running the loop. */
    put(f, "now.txt", "n\n");
    assert_int_equal(sg_watch_flush(f->w, &err), 1);
    expect_n(f, 1);
    assert_non_null(find(f, "now.txt", "created"));
    assert_int_equal(sg_watch_flush(f->w, &err), 0);

    /* A writer that keeps its file open: nothing before the cap, then one
     * event; the close later reports the rest. */
    clear(f);
    int fd = open(P(f, "log.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "a\n", 2), 2);
    run_until(f, 1, SG_WATCH_CAP_MS / 2, 0);
    expect_n(f, 0);
    run_until(f, 1, 2000, 0);
    expect_n(f, 1);
    assert_non_null(strstr(sfield(find(f, "log.txt", "created"), "diff"), "+a"));
    clear(f);
    assert_int_equal(write(fd, "b\n", 2), 2);
    close(fd);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(strstr(sfield(find(f, "log.txt", "modified"), "diff"), "+b"));
}

static void test_overflow_rescan(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    put(f, "keep.txt", "k\n");
    put(f, "mod.txt", "m1\n");
    put(f, "gone.txt", "g\n");
    assert_int_equal(sg_mkdir_p(P(f, "many"), 0755, &err), 0);
    start(f);
    /* The loop is not running: more events than the kernel queue holds
     * (16384 by default; each file gives IN_CREATE + IN_CLOSE_WRITE). */
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "many/f%05d", i);
        put(f, rel, "z\n");
    }
    put(f, "mod.txt", "m2\n");
    assert_int_equal(unlink(P(f, "gone.txt")), 0);
    run_until(f, (size_t)n + 2, 30000, 200);
    sg_watch_stats st;
    sg_watch_get_stats(f->w, &st);
    assert_true(st.overflows >= 1);
    expect_n(f, (size_t)n + 2);
    size_t i, created = 0;
    json_t *e;
    json_array_foreach(f->evs, i, e) {
        if (!strncmp(sfield(e, "path"), "many/f", 6)) {
            assert_string_equal(sfield(e, "change"), "created");
            created++;
        }
    }
    assert_int_equal(created, (size_t)n);
    assert_int_equal(count_path(f, "mod.txt"), 1);
    assert_non_null(strstr(sfield(find(f, "mod.txt", "modified"), "diff"), "+m2"));
    assert_int_equal(count_path(f, "gone.txt"), 1);
    assert_non_null(find(f, "gone.txt", "deleted"));
    assert_int_equal(count_path(f, "keep.txt"), 0);
    /* Still watching normally afterwards. */
    clear(f);
    put(f, "keep.txt", "k2\n");
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    assert_non_null(find(f, "keep.txt", "modified"));
}

/* ---- an overflow rescan across many slices, changes between them ----
 * The rescan's cursor (the directory it holds open, the directories still
 * to read, by path) is taken up again at each slice: what changed between
 * two slices (inotify's events, read as ever) and what the overflow lost
 * (the rescan's to find) must each be reported once. */

#define RS_DIRS 12     /* d00..d11; d10 removed and d11 renamed mid-rescan */
#define RS_FILES 20    /* f00..f19 in each */
#define RS_OPS_DIRS 10 /* the file operations stay in d00..d09 */
#define RS_PER_SLICE 2 /* operations between two slices */
#define RS_OPS 96      /* file operations in all: f04..f13 of d00..d09 (f00..f03: before) */
#define RS_GDIRS 4     /* g00..g03: one is replaced while the cursor holds it open */

/* What the workspace is expected to hold at the end, and how many events
 * each path may get (1: changed once, 0: left alone). */
typedef struct rs_model {
    json_t *now;   /* path -> content ("" for a file whose content is not followed) */
    json_t *touch; /* path -> events expected (an integer) */
} rs_model;

static void rs_touch(rs_model *m, const char *path)
{
    assert_null(json_object_get(m->touch, path)); /* each path changed once at most */
    json_object_set_new(m->touch, path, json_integer(1));
}

static void rs_put(fx *f, rs_model *m, const char *rel, const char *content)
{
    put(f, rel, content);
    json_object_set_new(m->now, rel, json_string(content));
}

static void rs_rm(fx *f, rs_model *m, const char *rel)
{
    assert_int_equal(unlink(P(f, rel)), 0);
    json_object_del(m->now, rel);
}

static void rs_mv(fx *f, rs_model *m, const char *from, const char *to)
{
    assert_int_equal(rename(P(f, from), P(f, to)), 0);
    json_object_set(m->now, to, json_object_get(m->now, from));
    json_object_del(m->now, from);
}

/* File operation k (each on a file of its own): modified, deleted,
 * created, renamed in its directory, renamed to another directory. */
static void rs_op(fx *f, rs_model *m, int k)
{
    int d = k % RS_OPS_DIRS, fi = 4 + k / RS_OPS_DIRS;
    char rel[64], to[64], body[64];
    snprintf(rel, sizeof rel, "d%02d/f%02d", d, fi);
    snprintf(body, sizeof body, "op %d\n", k);
    switch (k % 5) {
    case 0:
        rs_put(f, m, rel, body);
        rs_touch(m, rel);
        break;
    case 1:
        rs_rm(f, m, rel);
        rs_touch(m, rel);
        break;
    case 2:
        snprintf(to, sizeof to, "d%02d/c%03d", d, k);
        rs_put(f, m, to, body);
        rs_touch(m, to);
        break;
    case 3:
        snprintf(to, sizeof to, "d%02d/m%03d", d, k);
        rs_mv(f, m, rel, to);
        rs_touch(m, rel);
        rs_touch(m, to);
        break;
    default:
        snprintf(to, sizeof to, "d%02d/x%03d", (d + 5) % RS_OPS_DIRS, k);
        rs_mv(f, m, rel, to);
        rs_touch(m, rel);
        rs_touch(m, to);
        break;
    }
}

/* A whole directory: renamed (every file in it moves) or removed. */
static void rs_dir_op(fx *f, rs_model *m, int d, bool remove)
{
    char from[32], to[32];
    snprintf(from, sizeof from, "d%02d", d);
    snprintf(to, sizeof to, "e%02d", d);
    for (int i = 0; i < RS_FILES; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%s/f%02d", from, i);
        snprintf(b, sizeof b, "%s/f%02d", to, i);
        if (remove) {
            rs_rm(f, m, a);
        } else {
            json_object_set(m->now, b, json_object_get(m->now, a));
            json_object_del(m->now, a);
            rs_touch(m, b);
        }
        rs_touch(m, a);
    }
    if (remove)
        assert_int_equal(rmdir(P(f, from)), 0);
    else
        assert_int_equal(rename(P(f, from), P(f, to)), 0);
}

/* Operation k of the test: a file's, and two directories' on the way. */
static void rs_next(fx *f, rs_model *m, int k)
{
    if (k == 10)
        rs_dir_op(f, m, 11, false);
    if (k == 30)
        rs_dir_op(f, m, 10, true);
    rs_op(f, m, k);
}

/* The directory the cursor holds open, when it is a gNN not replaced yet:
 * renamed to hNN and a new gNN made in its place, with a file. */
static bool rs_replace_open(fx *f, rs_model *m)
{
    const char *at = sg_watch_test_rescan_at(f->w);
    if (!at || at[0] != 'g' || strlen(at) != 3)
        return false;
    char from[8], to[8], rel[64];
    snprintf(from, sizeof from, "%s", at);
    snprintf(to, sizeof to, "h%s", at + 1);
    for (int i = 0; i < RS_FILES; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%s/f%02d", from, i);
        snprintf(b, sizeof b, "%s/f%02d", to, i);
        json_object_set(m->now, b, json_object_get(m->now, a));
        json_object_del(m->now, a);
        rs_touch(m, a);
        rs_touch(m, b);
    }
    assert_int_equal(rename(P(f, from), P(f, to)), 0);
    assert_int_equal(mkdir(P(f, from), 0755), 0);
    snprintf(rel, sizeof rel, "%s/new", from);
    rs_put(f, m, rel, "in its place\n");
    rs_touch(m, rel);
    return true;
}

/* The events applied to the baseline give the workspace as it is, and
 * each path got exactly the events expected of it: none lost, none twice. */
static void rs_check(fx *f, json_t *base, rs_model *m)
{
    json_t *have = json_deep_copy(base), *seen = json_object();
    size_t i;
    json_t *e;
    json_array_foreach(f->evs, i, e) {
        const char *ch = sfield(e, "change"), *path = sfield(e, "path"), *old = sfield(e, "old_path");
        if (json_is_true(json_object_get(e, "dir"))) {
            dump(f);
            fail_msg("event %zu: a directory event (%s %s/): no directory was left empty", i, ch, path);
        }
        const char *paths[2] = {path, old};
        for (int k = 0; k < 2; k++)
            if (paths[k])
                json_object_set_new(seen, paths[k],
                                    json_integer(json_integer_value(json_object_get(seen, paths[k])) + 1));
        bool had = json_object_get(have, path) != NULL;
        if (!strcmp(ch, "created") || !strcmp(ch, "modified")) {
            if (had != !strcmp(ch, "modified")) {
                dump(f);
                fail_msg("event %zu: %s %s, which the workspace %s", i, ch, path, had ? "had" : "did not have");
            }
            json_object_set_new(have, path, json_string(""));
        } else if (!strcmp(ch, "deleted")) {
            if (!had) {
                dump(f);
                fail_msg("event %zu: deleted %s, which was not there", i, path);
            }
            json_object_del(have, path);
        } else if (!strcmp(ch, "renamed")) {
            if (!old || !json_object_get(have, old) ||
                (had && !json_is_true(json_object_get(e, "replaced")))) {
                dump(f);
                fail_msg("event %zu: renamed %s -> %s does not follow", i, old ? old : "?", path);
            }
            json_object_del(have, old);
            json_object_set_new(have, path, json_string(""));
        } else {
            fail_msg("event %zu: change '%s'", i, ch);
        }
    }
    const char *k;
    json_t *v;
    json_object_foreach(m->now, k, v) {
        if (!json_object_get(have, k)) {
            dump(f);
            fail_msg("%s is in the workspace and no event made it", k);
        }
    }
    json_object_foreach(have, k, v) {
        if (!json_object_get(m->now, k)) {
            dump(f);
            fail_msg("the events leave %s, which is gone", k);
        }
    }
    json_object_foreach(seen, k, v) {
        json_int_t want = json_integer_value(json_object_get(m->touch, k));
        if (json_integer_value(v) != want) {
            dump(f);
            fail_msg("%s: %lld event(s), expected %lld", k, (long long)json_integer_value(v), (long long)want);
        }
    }
    json_object_foreach(m->touch, k, v) {
        if (!json_object_get(seen, k)) {
            dump(f);
            fail_msg("%s changed and got no event", k);
        }
    }
    json_decref(have);
    json_decref(seen);
}

static void test_overflow_rescan_slices(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    rs_model m = {json_object(), json_object()};
    for (int d = 0; d < RS_DIRS; d++) {
        char rel[64];
        snprintf(rel, sizeof rel, "d%02d", d);
        assert_int_equal(sg_mkdir_p(P(f, rel), 0755, &err), 0);
        for (int i = 0; i < RS_FILES; i++) {
            char body[64];
            snprintf(rel, sizeof rel, "d%02d/f%02d", d, i);
            snprintf(body, sizeof body, "base %d %d\n", d, i);
            rs_put(f, &m, rel, body);
        }
    }
    for (int d = 0; d < RS_GDIRS; d++) {
        char rel[64];
        snprintf(rel, sizeof rel, "g%02d", d);
        assert_int_equal(sg_mkdir_p(P(f, rel), 0755, &err), 0);
        for (int i = 0; i < RS_FILES; i++) {
            snprintf(rel, sizeof rel, "g%02d/f%02d", d, i);
            rs_put(f, &m, rel, "g\n");
        }
    }
    rs_put(f, &m, "flood", "0\n");
    json_t *base = json_deep_copy(m.now);
    start(f);
    sg_watch_test_rescan_slice(f->w, 4);

    /* The kernel's queue overflows (the loop is not running): a write and
     * a close in turn, never two alike in a row (inotify folds those). */
    sg_watch_stats st;
    int fd = open(P(f, "flood"), O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(pwrite(fd, "1\n", 2, 0), 2);
        int again = open(P(f, "flood"), O_WRONLY | O_CLOEXEC);
        assert_true(again >= 0);
        close(again); /* IN_CLOSE_WRITE between two IN_MODIFY */
    }
    close(fd);
    json_object_set_new(m.now, "flood", json_string("1\n"));
    rs_touch(&m, "flood");
    /* Changes made while the queue is full: only the rescan finds them. */
    for (int d = 0; d < 4; d++) {
        char rel[64], to[64];
        snprintf(rel, sizeof rel, "d%02d/f%02d", d, d);
        switch (d) {
        case 0:
            rs_put(f, &m, rel, "lost modify\n");
            rs_touch(&m, rel);
            break;
        case 1:
            rs_rm(f, &m, rel);
            rs_touch(&m, rel);
            break;
        case 2:
            snprintf(to, sizeof to, "d%02d/lost", d);
            rs_put(f, &m, to, "lost create\n");
            rs_touch(&m, to);
            break;
        default:
            snprintf(to, sizeof to, "d%02d/lostmv", d);
            rs_mv(f, &m, rel, to);
            rs_touch(&m, rel);
            rs_touch(&m, to);
        }
    }

    /* The loop, a turn at a time: between two slices of the rescan, the
     * next operations (files of directories read already, of the one
     * being read, of ones still to read; a directory renamed, one
     * removed). */
    int ops = 0, during = 0, turns = 0;
    uint64_t last = 0;
    bool began = false, replaced = false;
    static int fired;
    fired = 0;
    f->guard = malloc(sizeof *f->guard);
    assert_non_null(f->guard);
    uv_timer_init(&f->loop, f->guard);
    f->guard->data = &fired;
    uv_timer_start(f->guard, on_stop, 60000, 0);
    while (!fired) {
        uv_run(&f->loop, UV_RUN_ONCE);
        turns++;
        sg_watch_get_stats(f->w, &st);
        began = began || st.rescanning;
        if (began && !st.rescanning)
            break;
        if (st.rescan_slices == last)
            continue;
        last = st.rescan_slices;
        if (!replaced && st.rescanning)
            replaced = rs_replace_open(f, &m);
        for (int i = 0; i < RS_PER_SLICE && ops < RS_OPS; i++, during++)
            rs_next(f, &m, ops++);
    }
    uv_close((uv_handle_t *)f->guard, (uv_close_cb)free);
    f->guard = NULL;
    assert_false(fired);
    while (ops < RS_OPS) /* a rescan that ended early: the rest after it */
        rs_next(f, &m, ops++);
    sg_watch_get_stats(f->w, &st);
    print_message("# rescan: %llu slices, %d operations made between them, %d turns\n",
                  (unsigned long long)st.rescan_slices, during, turns);
    /* everything settles; anything doubled shows up meanwhile */
    run_until(f, SIZE_MAX, 1000, 0);
    assert_int_equal(sg_watch_flush(f->w, &err) >= 0, 1);
    rs_check(f, base, &m);
    /* and the test did what it says */
    assert_int_equal(st.overflows, 1);
    assert_true(st.rescan_slices >= 40);
    assert_true(during >= RS_OPS / 2); /* most of them while it was under way */
    assert_true(replaced);             /* the cursor's directory was replaced under it */
    json_decref(base);
    json_decref(m.now);
    json_decref(m.touch);
}

/* Two names that differ only in bytes that are not UTF-8 show as the same
 * "path" (U+FFFD): path_hex tells them apart, exactly. */
static void test_invalid_utf8_names(void **state)
{
    fx *f = *state;
    start(f);
    run_until(f, 1, 50, 0);
    put(f, "a\xff", "one\n");
    put(f, "a\xfe", "two\n");
    put(f, "plain", "three\n");
    run_until(f, 3, 2000, 30);
    expect_n(f, 3);
    const char *h1 = NULL, *h2 = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(f->evs, i, e) {
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *hex = json_string_value(json_object_get(e, "path_hex"));
        if (strcmp(path, "plain") == 0) {
            assert_null(hex); /* a valid path has none */
        } else {
            assert_string_equal(path, "a\xef\xbf\xbd"); /* a U+FFFD */
            assert_non_null(hex);
            if (strcmp(hex, "61ff") == 0)
                h1 = hex;
            else if (strcmp(hex, "61fe") == 0)
                h2 = hex;
        }
    }
    assert_non_null(h1);
    assert_non_null(h2);
}

static void test_rename_chain_and_replace(void **state)
{
    fx *f = *state;
    put(f, "a", "A\n");
    put(f, "b", "B\n");
    put(f, "c", "C\n");
    start(f);
    /* mv b c; mv a b: b->c then a->b, in that order. */
    assert_int_equal(rename(P(f, "b"), P(f, "c")), 0);
    assert_int_equal(rename(P(f, "a"), P(f, "b")), 0);
    run_until(f, 2, 2000, 30);
    expect_n(f, 2);
    json_t *e0 = json_array_get(f->evs, 0), *e1 = json_array_get(f->evs, 1);
    assert_string_equal(sfield(e0, "old_path"), "b");
    assert_string_equal(sfield(e0, "path"), "c");
    assert_string_equal(sfield(e1, "old_path"), "a");
    assert_string_equal(sfield(e1, "path"), "b");
    /* The cache followed: editing the new b diffs against A. */
    clear(f);
    put(f, "b", "A2\n");
    run_until(f, 1, 2000, 30);
    assert_non_null(strstr(sfield(find(f, "b", "modified"), "diff"), "-A\n+A2\n"));
    /* `printf > tmp && mv tmp b` from two processes: the tmp is seen first,
     * then the rename over b diffs against what b held. */
    clear(f);
    put(f, "tmp", "A3\n");
    run_until(f, 1, 2000, 30);
    clear(f);
    assert_int_equal(rename(P(f, "tmp"), P(f, "b")), 0);
    run_until(f, 1, 2000, 30);
    expect_n(f, 1);
    json_t *r = find(f, "b", "renamed");
    assert_non_null(r);
    assert_true(json_is_true(json_object_get(r, "replaced")));
    assert_non_null(strstr(sfield(r, "diff"), "-A2\n+A3\n"));
}

/* The capture's watcher: the default ignore list and the hold. */
static void start_ext(fx *f)
{
    sg_err err = {0};
    sg_ignore *ig = sg_ignore_parse(sg_ignore_effective(NULL), &err);
    assert_non_null(ig);
    f->w = sg_watch_new_ext(&f->loop, f->dir, collect, f, sg_udiff_fn, NULL, ig, true, NULL, NULL, &err);
    if (!f->w)
        fail_msg("sg_watch_new_ext: %s", err.msg);
}

/* vim's backup by rename across bursts (the loop runs between the rename
 * and the new file): one modified; the swap file and the backup nothing. */
static void test_hold_backup_rename(void **state)
{
    fx *f = *state;
    put(f, "calc.py", "x = 1\n");
    put(f, ".calc.py.swp", "swap\n");
    start_ext(f);
    assert_int_equal(rename(P(f, "calc.py"), P(f, "calc.py~")), 0);
    run_until(f, 1, 20, 0); /* the rename's burst settles (well within the hold) */
    put(f, "calc.py", "x = 2\n");
    put(f, ".calc.py.swp", "swap 2\n");
    run_until(f, 1, 5000, 600); /* past the hold: anything more would show */
    expect_n(f, 1);
    json_t *e = find(f, "calc.py", "modified");
    assert_non_null(e);
    assert_non_null(strstr(sfield(e, "diff"), "-x = 1\n+x = 2\n"));
    /* a temporary file renamed into place after a pause: one modified */
    clear(f);
    put(f, "calc.py.tmp", "x = 3\n");
    run_until(f, 1, 20, 0);
    assert_int_equal(rename(P(f, "calc.py.tmp"), P(f, "calc.py")), 0);
    run_until(f, 1, 5000, 600);
    expect_n(f, 1);
    assert_non_null(find(f, "calc.py", "modified"));
    /* a plain delete still comes, after the hold */
    clear(f);
    assert_int_equal(unlink(P(f, "calc.py")), 0);
    run_until(f, 1, 5000, 0);
    expect_n(f, 1);
    assert_non_null(find(f, "calc.py", "deleted"));
}

static bool gate_three(void *ud)
{
    int *n = ud;
    return (*n)++ < 3;
}

static void collect_bulk(void *ud, json_t *payload)
{
    json_array_append_new(((fx *)ud)->evs, json_pack("{s:s, s:o}", "path", "(bulk)", "bulk", payload));
}

/* Past the gate: every change in bulk payloads, with size and hash. */
static void test_bulk(void **state)
{
    fx *f = *state;
    start(f);
    int passed = 0;
    sg_watch_set_gate(f->w, gate_three, &passed);
    sg_watch_set_bulk_cb(f->w, collect_bulk, f);
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        put(f, name, "z\n");
    }
    sg_err err = {0};
    assert_true(sg_watch_flush(f->w, &err) >= 0);
    assert_int_equal(json_array_size(f->evs), 4); /* 3 file_diff payloads, one bulk */
    json_t *b = json_object_get(find(f, "(bulk)", NULL), "bulk");
    json_t *files = json_object_get(b, "files");
    assert_int_equal(json_array_size(files), 7);
    assert_int_equal(json_integer_value(json_object_get(b, "count")), 7);
    json_t *e0 = json_array_get(files, 0);
    assert_string_equal(sfield(e0, "change"), "created");
    assert_int_equal(json_integer_value(json_object_get(e0, "size")), 2);
    assert_non_null(sfield(e0, "sha256"));
    assert_null(json_object_get(e0, "diff"));
    assert_false(sg_watch_pending(f->w));
}

/* The changes of the events since the last clear, "change path[/]" each
 * (a directory's with a slash), in order. */
static char *changes(fx *f)
{
    static char buf[1024];
    size_t i, o = 0;
    json_t *e;
    buf[0] = '\0';
    json_array_foreach(f->evs, i, e)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s %s%s", i ? ", " : "", sfield(e, "change"),
                              sfield(e, "path"), json_is_true(json_object_get(e, "dir")) ? "/" : "");
    return buf;
}

static void test_empty_dirs(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    assert_int_equal(mkdir(P(f, "old"), 0755), 0);
    start(f);
    /* an empty directory made: reported as one (after the hold, by the loop) */
    assert_int_equal(mkdir(P(f, "e1"), 0755), 0);
    run_until(f, 1, 3000, 0);
    assert_string_equal(changes(f), "created e1/");
    /* one with files is implied by them: no event of its own */
    clear(f);
    assert_int_equal(sg_mkdir_p(P(f, "d/x"), 0755, &err), 0);
    put(f, "d/x/f.txt", "f\n");
    assert_int_equal(sg_watch_flush(f->w, &err), 1);
    assert_string_equal(changes(f), "created d/x/f.txt");
    /* emptied: reported; removed: gone, and its parent left empty */
    clear(f);
    assert_int_equal(unlink(P(f, "d/x/f.txt")), 0);
    sg_watch_flush(f->w, &err);
    assert_string_equal(changes(f), "deleted d/x/f.txt, created d/x/");
    clear(f);
    assert_int_equal(rmdir(P(f, "d/x")), 0);
    sg_watch_flush(f->w, &err);
    assert_string_equal(changes(f), "deleted d/x/, created d/");
    /* moved: gone from the old path, made at the new one */
    clear(f);
    assert_int_equal(rename(P(f, "e1"), P(f, "e2")), 0);
    sg_watch_flush(f->w, &err);
    assert_string_equal(changes(f), "deleted e1/, created e2/");
    /* one that holds only what the watcher skips is not empty; an empty
     * one of the baseline (the seed's) is gone when removed */
    clear(f);
    assert_int_equal(sg_mkdir_p(P(f, "pkg/.git"), 0755, &err), 0);
    assert_int_equal(rmdir(P(f, "old")), 0);
    sg_watch_flush(f->w, &err);
    assert_string_equal(changes(f), "deleted old/");
    assert_false(sg_watch_pending(f->w));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_utf8_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_editor_saves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_binary_symlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_git_skipped_dotfiles_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_and_open_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow_rescan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow_rescan_slices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rename_chain_and_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hold_backup_rename, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bulk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_dirs, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sg_udiff_global_shutdown();
    return rc;
}

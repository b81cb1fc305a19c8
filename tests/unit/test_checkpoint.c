/* Unit tests for checkpoint: real directories, a real libgit2 store, real git. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <git2.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "checkpoint/checkpoint.h"

typedef struct fx {
    char root[64];
    char ws[128];
    char repo[160];
    char outside[128];
    sg_ckpt_store *st;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    strcpy(f->root, "/tmp/sg-ckpt-test-XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->ws, sizeof f->ws, "%s/ws", f->root);
    snprintf(f->repo, sizeof f->repo, "%s/state/sb/x/checkpoints.git", f->root);
    snprintf(f->outside, sizeof f->outside, "%s/outside", f->root);
    mkdir(f->ws, 0755);
    mkdir(f->outside, 0755);
    sg_err err = {0};
    f->st = sg_checkpoint_open(f->repo, f->ws, &err);
    if (!f->st) {
        fprintf(stderr, "open: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sg_checkpoint_close(f->st);
    sg_err err = {0};
    sg_rm_rf(f->root, &err);
    free(f);
    return 0;
}

static char *pj(const fx *f, const char *rel)
{
    return sg_strdup_printf("%s/%s", f->ws, rel);
}

static void wfile(const fx *f, const char *rel, const char *content, mode_t mode)
{
    sg_autofree char *p = pj(f, rel);
    unlink(p);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(sg_write_all(fd, content, strlen(content)), 0);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static char *rfile(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    sg_err err = {0};
    return sg_read_file(p, 1 << 20, NULL, &err);
}

static void assert_file(const fx *f, const char *rel, const char *content)
{
    sg_autofree char *got = rfile(f, rel);
    assert_non_null(got);
    assert_string_equal(got, content);
}

static bool lexists(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static mode_t lmode(const fx *f, const char *rel)
{
    sg_autofree char *p = pj(f, rel);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    return sb.st_mode;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = NULL;
    if (vasprintf(&cmd, fmt, ap) < 0)
        abort();
    va_end(ap);
    int r = system(cmd);
    free(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static char *sh_out(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, p);
    buf[n] = '\0';
    pclose(p);
    return buf;
}

static void take(fx *f, const char *label, char id[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stt)
{
    sg_err err = {0};
    int r = sg_checkpoint_take(f->st, label, id, stt, &err);
    if (r < 0)
        fail_msg("take: %s", err.msg);
    assert_int_equal(strlen(id), SG_CHECKPOINT_ID_LEN);
}

static void restore(fx *f, const char *id, sg_checkpoint_stats *stt)
{
    sg_err err = {0};
    if (sg_checkpoint_restore(f->st, id, stt, &err) < 0)
        fail_msg("restore: %s", err.msg);
}

/* Asserts the diff to id is empty (the workspace equals the checkpoint). */
static void assert_clean(fx *f, const char *id)
{
    sg_err err = {0};
    sg_checkpoint_change *ch = NULL;
    size_t n = 99;
    assert_int_equal(sg_checkpoint_diff(f->st, id, &ch, &n, &err), 0);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "unexpected change: %s %s\n", sg_checkpoint_change_kind_name(ch[i].kind), ch[i].path);
    assert_int_equal(n, 0);
    sg_checkpoint_changes_free(ch, n);
}

__attribute__((returns_nonnull)) static const sg_checkpoint_change *find_change(const sg_checkpoint_change *ch, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ch[i].path, path) == 0)
            return &ch[i];
    fail_msg("no change for %s", path);
    abort();
}

static void test_content_create_delete(void **state)
{
    fx *f = *state;
    wfile(f, "a.txt", "alpha\n", 0644);
    sg_autofree char *d = pj(f, "dir");
    mkdir(d, 0755);
    wfile(f, "dir/b.txt", "beta\n", 0644);
    char c1[41];
    sg_checkpoint_stats stt = {0};
    take(f, "first", c1, &stt);
    assert_int_equal(stt.files, 2);
    assert_int_equal(stt.dirs, 2);
    assert_int_equal(stt.bytes, 11);
    assert_int_equal(stt.changed, 4); /* everything is new: root, a.txt, dir, dir/b.txt */

    wfile(f, "a.txt", "ALPHA changed\n", 0644);
    wfile(f, "new.txt", "new\n", 0644);
    sg_autofree char *b = pj(f, "dir/b.txt");
    unlink(b);
    sg_autofree char *nd = pj(f, "newdir");
    mkdir(nd, 0755);
    wfile(f, "newdir/x", "x", 0644);

    sg_err err = {0};
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    assert_int_equal(sg_checkpoint_diff(f->st, c1, &ch, &n, &err), 0);
    assert_int_equal(n, 5);
    /* sorted by path */
    assert_string_equal(ch[0].path, "a.txt");
    assert_int_equal(ch[0].kind, SG_CKPT_MODIFIED);
    assert_string_equal(ch[1].path, "dir/b.txt");
    assert_int_equal(ch[1].kind, SG_CKPT_DELETED);
    assert_int_equal(ch[1].mode_then, S_IFREG | 0644);
    assert_int_equal(ch[1].mode_now, 0);
    assert_string_equal(ch[2].path, "new.txt");
    assert_int_equal(ch[2].kind, SG_CKPT_CREATED);
    assert_string_equal(ch[3].path, "newdir");
    assert_int_equal(ch[3].kind, SG_CKPT_CREATED);
    assert_string_equal(ch[4].path, "newdir/x");
    assert_int_equal(ch[4].kind, SG_CKPT_CREATED);
    sg_checkpoint_changes_free(ch, n);

    /* A second checkpoint counts what changed since the first. */
    char c2[41];
    take(f, "second", c2, &stt);
    assert_int_equal(stt.changed, 5);
    assert_string_not_equal(c1, c2);

    restore(f, c1, &stt);
    assert_int_equal(stt.changed, 5);
    assert_file(f, "a.txt", "alpha\n");
    assert_file(f, "dir/b.txt", "beta\n");
    assert_false(lexists(f, "new.txt"));
    assert_false(lexists(f, "newdir"));
    assert_clean(f, c1);

    /* and forward again */
    restore(f, c2, NULL);
    assert_file(f, "a.txt", "ALPHA changed\n");
    assert_file(f, "newdir/x", "x");
    assert_false(lexists(f, "dir/b.txt"));
    assert_clean(f, c2);

    /* bad ids */
    assert_int_equal(sg_checkpoint_restore(f->st, "zz", NULL, &err), -1);
    assert_int_equal(err.code, EINVAL);
    assert_int_equal(sg_checkpoint_restore(f->st, "0000000000000000000000000000000000000001", NULL, &err), -1);
    assert_int_equal(err.code, ENOENT);
}

static void test_modes(void **state)
{
    fx *f = *state;
    wfile(f, "secret", "s", 0600);
    wfile(f, "tool", "#!/bin/sh\n", 0755);
    wfile(f, "none", "n", 0);
    wfile(f, "suid", "u", 04750);
    sg_autofree char *d = pj(f, "private");
    mkdir(d, 0700);
    chmod(d, 0700);
    wfile(f, "private/k", "k", 0640);
    chmod(f->ws, 0751);
    char c1[41];
    take(f, NULL, c1, NULL);

    sg_autofree char *p1 = pj(f, "secret"), *p2 = pj(f, "tool"), *p3 = pj(f, "none"), *p4 = pj(f, "suid");
    chmod(p1, 0666);
    chmod(p2, 0644);
    chmod(p3, 0777);
    chmod(p4, 0755);
    chmod(d, 0755);
    chmod(f->ws, 0755);

    sg_err err = {0};
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    assert_int_equal(sg_checkpoint_diff(f->st, c1, &ch, &n, &err), 0);
    assert_int_equal(n, 6);
    const sg_checkpoint_change *x = find_change(ch, n, "secret");
    assert_non_null(x);
    assert_int_equal(x->kind, SG_CKPT_META);
    assert_int_equal(x->mode_now, S_IFREG | 0666);
    assert_int_equal(x->mode_then, S_IFREG | 0600);
    x = find_change(ch, n, ".");
    assert_non_null(x);
    assert_int_equal(x->mode_then, S_IFDIR | 0751);
    sg_checkpoint_changes_free(ch, n);

    restore(f, c1, NULL);
    assert_int_equal(lmode(f, "secret"), S_IFREG | 0600);
    assert_int_equal(lmode(f, "tool"), S_IFREG | 0755);
    assert_int_equal(lmode(f, "none"), S_IFREG | 0);
    assert_int_equal(lmode(f, "suid"), S_IFREG | 04750);
    assert_int_equal(lmode(f, "private"), S_IFDIR | 0700);
    struct stat sb;
    assert_int_equal(stat(f->ws, &sb), 0);
    assert_int_equal(sb.st_mode, S_IFDIR | 0751);

    /* Content and mode both restored when the file was deleted. */
    unlink(p4);
    unlink(p1);
    restore(f, c1, NULL);
    assert_int_equal(lmode(f, "suid"), S_IFREG | 04750);
    assert_int_equal(lmode(f, "secret"), S_IFREG | 0600);
    assert_file(f, "secret", "s");
    /* A deleted 0700 directory comes back with its mode. */
    assert_int_equal(sh("rm -rf '%s'", d), 0);
    restore(f, c1, NULL);
    assert_int_equal(lmode(f, "private"), S_IFDIR | 0700);
    assert_file(f, "private/k", "k");
    assert_clean(f, c1);
}

static void test_symlinks_and_outside(void **state)
{
    fx *f = *state;
    wfile(f, "a.txt", "a", 0644);
    sg_autofree char *l1 = pj(f, "link"), *l2 = pj(f, "dangling"), *l3 = pj(f, "etc"), *d = pj(f, "d");
    assert_int_equal(symlink("a.txt", l1), 0);
    assert_int_equal(symlink("no/such/target", l2), 0);
    assert_int_equal(symlink(f->outside, l3), 0);
    mkdir(d, 0755);
    wfile(f, "d/f", "inside", 0644);
    sg_autofree char *outf = sg_strdup_printf("%s/keep", f->outside);
    int fd = open(outf, O_WRONLY | O_CREAT, 0644);
    assert_int_equal(sg_write_all(fd, "outside", 7), 0);
    close(fd);
    wfile(f, "hl", "orig", 0644);
    char c1[41];
    take(f, "links", c1, NULL);

    /* "hl" becomes a hard link to a file outside: restoring it must replace
     * the link, never write through it. */
    sg_autofree char *hl = pj(f, "hl");
    unlink(hl);
    assert_int_equal(link(outf, hl), 0);

    /* The link changes target, the dangling one goes, "d" becomes a link
     * out of the workspace and "a.txt" a link to the outside file. */
    unlink(l1);
    assert_int_equal(symlink("elsewhere", l1), 0);
    unlink(l2);
    assert_int_equal(sh("rm -rf '%s'", d), 0);
    assert_int_equal(symlink(f->outside, d), 0);
    sg_autofree char *a = pj(f, "a.txt");
    unlink(a);
    assert_int_equal(symlink(outf, a), 0);

    sg_err err = {0};
    sg_checkpoint_change *ch = NULL;
    size_t n = 0;
    assert_int_equal(sg_checkpoint_diff(f->st, c1, &ch, &n, &err), 0);
    const sg_checkpoint_change *x = find_change(ch, n, "link");
    assert_non_null(x);
    assert_int_equal(x->kind, SG_CKPT_MODIFIED);
    x = find_change(ch, n, "d");
    assert_non_null(x);
    assert_int_equal(x->kind, SG_CKPT_TYPE);
    assert_true(S_ISLNK(x->mode_now));
    assert_true(S_ISDIR(x->mode_then));
    assert_non_null(find_change(ch, n, "d/f")); /* comes back */
    x = find_change(ch, n, "dangling");
    assert_non_null(x);
    assert_int_equal(x->kind, SG_CKPT_DELETED);
    sg_checkpoint_changes_free(ch, n);

    restore(f, c1, NULL);
    char buf[256];
    ssize_t r = readlink(l1, buf, sizeof buf - 1);
    assert_true(r > 0);
    buf[r] = '\0';
    assert_string_equal(buf, "a.txt");
    r = readlink(l2, buf, sizeof buf - 1);
    assert_true(r > 0);
    buf[r] = '\0';
    assert_string_equal(buf, "no/such/target");
    r = readlink(l3, buf, sizeof buf - 1);
    assert_true(r > 0);
    buf[r] = '\0';
    assert_string_equal(buf, f->outside);
    assert_true(S_ISDIR(lmode(f, "d")));
    assert_true(S_ISREG(lmode(f, "a.txt")));
    assert_file(f, "d/f", "inside");
    assert_file(f, "a.txt", "a");
    assert_file(f, "hl", "orig");
    /* Nothing was written outside. */
    sg_autofree char *ls = sg_strdup_printf("ls -A '%s'", f->outside);
    sg_autofree char *listing = sh_out(ls);
    assert_string_equal(listing, "keep\n");
    sg_err e2 = {0};
    sg_autofree char *keep = sg_read_file(outf, 100, NULL, &e2);
    assert_string_equal(keep, "outside");
    assert_clean(f, c1);
}

static void test_empty_dirs_fifo_socket(void **state)
{
    fx *f = *state;
    sg_autofree char *e = pj(f, "empty"), *e2 = pj(f, "deep"), *e3 = pj(f, "deep/er"), *fifo = pj(f, "pipe");
    mkdir(e, 0755);
    mkdir(e2, 0755);
    mkdir(e3, 0711);
    assert_int_equal(mkfifo(fifo, 0640), 0);
    char c1[41];
    sg_checkpoint_stats stt;
    take(f, NULL, c1, &stt);
    assert_int_equal(stt.dirs, 4);
    assert_int_equal(stt.files, 1);

    assert_int_equal(sh("rm -rf '%s' '%s' '%s'", e, e2, fifo), 0);
    wfile(f, "pipe", "now a file", 0644);
    /* A socket is never recorded; a rollback removes it like any new path. */
    sg_autofree char *sp = pj(f, "sock");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sp);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    close(s);
    char c2[41];
    take(f, NULL, c2, &stt);
    assert_int_equal(stt.skipped, 1);

    restore(f, c1, NULL);
    assert_int_equal(lmode(f, "empty"), S_IFDIR | 0755);
    assert_int_equal(lmode(f, "deep/er"), S_IFDIR | 0711);
    assert_int_equal(lmode(f, "pipe"), S_IFIFO | 0640);
    assert_false(lexists(f, "sock"));
    assert_clean(f, c1);
}

static void test_gitignore_and_escapes(void **state)
{
    fx *f = *state;
    wfile(f, ".gitignore", "*.log\nbuild/\n", 0644);
    wfile(f, "run.log", "log line\n", 0644);
    sg_autofree char *b = pj(f, "build");
    mkdir(b, 0755);
    wfile(f, "build/out.o", "obj", 0644);
    /* Names git refuses or that look like our escape. */
    wfile(f, ".GIT", "upper", 0644);
    wfile(f, "git~1", "ntfs", 0644);
    wfile(f, "%sg%", "escape-like", 0644);
    wfile(f, "%sg%.git", "double", 0644);
    wfile(f, "with\nnewline", "nl", 0644);
    char c1[41];
    take(f, NULL, c1, NULL);

    assert_int_equal(sh("rm -rf '%s'", b), 0);
    wfile(f, "run.log", "changed\n", 0644);
    wfile(f, "new.log", "new ignored\n", 0644);
    sg_autofree char *g = pj(f, ".GIT"), *s = pj(f, "%sg%"), *nl = pj(f, "with\nnewline");
    unlink(g);
    unlink(s);
    unlink(nl);

    restore(f, c1, NULL);
    assert_file(f, "run.log", "log line\n");
    assert_file(f, "build/out.o", "obj");
    assert_false(lexists(f, "new.log"));
    assert_file(f, ".GIT", "upper");
    assert_file(f, "git~1", "ntfs");
    assert_file(f, "%sg%", "escape-like");
    assert_file(f, "%sg%.git", "double");
    assert_file(f, "with\nnewline", "nl");
    assert_clean(f, c1);
    /* The store is a well-formed git repository. */
    assert_int_equal(sh("git --git-dir='%s' fsck --strict --no-progress >/dev/null 2>&1", f->repo), 0);
}

#define GIT "env -u GIT_DIR HOME=/nonexistent GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x " \
            "GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x git -c init.defaultBranch=main"

static void test_git_workspace_and_nested(void **state)
{
    fx *f = *state;
    wfile(f, "README", "v1\n", 0644);
    assert_int_equal(sh(GIT " -C '%s' init -q && " GIT " -C '%s' add -A && " GIT " -C '%s' commit -qm one",
                        f->ws, f->ws, f->ws), 0);
    sg_autofree char *sub = pj(f, "vendor/lib");
    assert_int_equal(sg_mkdir_p(sub, 0755, &(sg_err){0}), 0);
    wfile(f, "vendor/lib/lib.c", "int x;\n", 0644);
    assert_int_equal(sh(GIT " -C '%s' init -q && " GIT " -C '%s' add -A && " GIT " -C '%s' commit -qm nested",
                        sub, sub, sub), 0);
    sg_autofree char *cmd_head = sg_strdup_printf(GIT " -C '%s' rev-parse HEAD", f->ws);
    sg_autofree char *head1 = sh_out(cmd_head);
    sg_autofree char *cmd_sub = sg_strdup_printf(GIT " -C '%s' rev-parse HEAD", sub);
    sg_autofree char *subhead = sh_out(cmd_sub);
    char c1[41];
    take(f, "git", c1, NULL);

    /* A new commit, an edit, an untracked file; the nested repo's .git goes. */
    wfile(f, "README", "v2\n", 0644);
    assert_int_equal(sh(GIT " -C '%s' commit -qam two", f->ws), 0);
    wfile(f, "README", "v3 dirty\n", 0644);
    wfile(f, "untracked", "u", 0644);
    sg_autofree char *subgit = pj(f, "vendor/lib/.git");
    assert_int_equal(sh("rm -rf '%s'", subgit), 0);

    restore(f, c1, NULL);
    assert_clean(f, c1); /* before git runs: git status refreshes .git/index */
    sg_autofree char *head2 = sh_out(cmd_head);
    assert_string_equal(head1, head2);
    sg_autofree char *cmd_log = sg_strdup_printf(GIT " -C '%s' log --oneline | wc -l", f->ws);
    sg_autofree char *log = sh_out(cmd_log);
    assert_string_equal(log, "1\n");
    sg_autofree char *cmd_st = sg_strdup_printf(GIT " -C '%s' status --porcelain", f->ws);
    sg_autofree char *status = sh_out(cmd_st);
    /* The nested repo is untracked in the outer one, as before. */
    assert_string_equal(status, "?? vendor/\n");
    assert_file(f, "README", "v1\n");
    sg_autofree char *subhead2 = sh_out(cmd_sub);
    assert_string_equal(subhead, subhead2);
    sg_autofree char *cmd_subst = sg_strdup_printf(GIT " -C '%s' status --porcelain", sub);
    sg_autofree char *substatus = sh_out(cmd_subst);
    assert_string_equal(substatus, "");
    assert_int_equal(sh(GIT " -C '%s' fsck --no-progress >/dev/null 2>&1", f->ws), 0);
}

static void test_owner(void **state)
{
    fx *f = *state;
    if (geteuid() != 0)
        skip();
    wfile(f, "mine", "m", 0640);
    wfile(f, "gone", "g", 0600);
    sg_autofree char *d = pj(f, "d"), *l = pj(f, "l"), *m = pj(f, "mine"), *g = pj(f, "gone");
    mkdir(d, 0750);
    assert_int_equal(symlink("mine", l), 0);
    assert_int_equal(sh("chown -hR 1000:1000 '%s'", f->ws), 0);
    char c1[41];
    take(f, NULL, c1, NULL);

    assert_int_equal(chown(m, 0, 0), 0);
    assert_int_equal(lchown(l, 0, 0), 0);
    unlink(g);
    rmdir(d);
    restore(f, c1, NULL);
    const char *paths[] = {"mine", "gone", "d", "l", "."};
    for (size_t i = 0; i < SG_ARRAY_LEN(paths); i++) {
        sg_autofree char *p = pj(f, paths[i]);
        struct stat sb;
        assert_int_equal(lstat(p, &sb), 0);
        assert_int_equal(sb.st_uid, 1000);
        assert_int_equal(sb.st_gid, 1000);
    }
    assert_int_equal(lmode(f, "mine"), S_IFREG | 0640);
    assert_int_equal(lmode(f, "d"), S_IFDIR | 0750);
    assert_clean(f, c1);
}

static void test_stat_cache(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%02d", i);
        wfile(f, name, "0123456789", 0644);
    }
    usleep((useconds_t)(SG_CKPT_RACY_NS / 1000 * 2));
    char c1[41], c2[41], c3[41];
    sg_checkpoint_stats stt;
    take(f, NULL, c1, &stt);
    assert_int_equal(stt.hashed, 20);
    take(f, NULL, c2, &stt);
    assert_int_equal(stt.hashed, 0); /* nothing re-read */
    assert_int_equal(stt.changed, 0);

    /* Same size, mtime put back: the ctime still gives it away. */
    sg_autofree char *p = pj(f, "f07");
    struct stat before;
    assert_int_equal(stat(p, &before), 0);
    wfile(f, "f07", "abcdefghij", 0644);
    struct timespec ts[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    take(f, NULL, c3, &stt);
    assert_int_equal(stt.hashed, 1);
    assert_int_equal(stt.changed, 1);
    restore(f, c1, NULL);
    assert_file(f, "f07", "0123456789");
    restore(f, c3, NULL);
    assert_file(f, "f07", "abcdefghij");
}

/* Files above the in-memory threshold are streamed both ways. */
static void test_large_file(void **state)
{
    fx *f = *state;
    size_t n = 3u << 20;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + (i * 131 + i / 4096) % 26);
    big[n] = '\0';
    wfile(f, "big.bin", big, 0644);
    char c1[41];
    sg_checkpoint_stats stt;
    take(f, NULL, c1, &stt);
    assert_int_equal(stt.bytes, n);
    assert_clean(f, c1); /* hashed again (not stored) through the fd */
    big[n / 2] = '#';
    wfile(f, "big.bin", big, 0644);
    sg_err err = {0};
    sg_checkpoint_change *ch = NULL;
    size_t nc = 0;
    assert_int_equal(sg_checkpoint_diff(f->st, c1, &ch, &nc, &err), 0);
    assert_int_equal(nc, 1);
    assert_int_equal(ch[0].kind, SG_CKPT_MODIFIED);
    sg_checkpoint_changes_free(ch, nc);
    restore(f, c1, NULL);
    big[n / 2] = (char)('a' + ((n / 2) * 131 + (n / 2) / 4096) % 26);
    sg_autofree char *p = pj(f, "big.bin");
    size_t len = 0;
    sg_autofree char *got = sg_read_file(p, n + 16, &len, &err);
    assert_non_null(got);
    assert_int_equal(len, n);
    assert_memory_equal(got, big, n);
    free(big);
}

static void test_list_reopen_new_process(void **state)
{
    fx *f = *state;
    char ids[3][41];
    wfile(f, "x", "1", 0644);
    take(f, "one", ids[0], NULL);
    wfile(f, "x", "22", 0644);
    take(f, "two\nwith control\x01 chars", ids[1], NULL);
    wfile(f, "x", "333", 0644);
    take(f, "three", ids[2], NULL);
    char latest[41];
    sg_err err = {0};
    assert_int_equal(sg_checkpoint_latest(f->st, latest, &err), 0);
    assert_string_equal(latest, ids[2]);
    sg_checkpoint_close(f->st);
    f->st = NULL;

    pid_t pid = sgt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A new process opens the store from disk, lists and restores. */
        sg_err e = {0};
        sg_ckpt_store *st = sg_checkpoint_open(f->repo, f->ws, &e);
        if (!st)
            _exit(10);
        sg_checkpoint_info *v = NULL;
        size_t n = 0;
        if (sg_checkpoint_list(st, &v, &n, &e) < 0 || n != 3)
            _exit(11);
        for (size_t i = 0; i < 3; i++)
            if (strcmp(v[i].id, ids[i]) != 0 || v[i].files != 1 || v[i].bytes != i + 1 || v[i].time <= 0)
                _exit(12 + (int)i);
        if (strcmp(v[0].label, "one") || strcmp(v[1].label, "two with control  chars") || strcmp(v[2].label, "three"))
            _exit(15);
        sg_checkpoint_infos_free(v, n);
        char prefix[9];
        memcpy(prefix, ids[1], 8);
        prefix[8] = '\0';
        if (sg_checkpoint_restore(st, prefix, NULL, &e) < 0)
            _exit(16);
        sg_checkpoint_close(st);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_file(f, "x", "22");
    f->st = sg_checkpoint_open(f->repo, f->ws, &err);
    assert_non_null(f->st);
    assert_clean(f, ids[1]);
}

/* The exec path: an unchanged workspace reuses the newest checkpoint and
 * only its label is recorded; a change, or a restore, makes a new one. */
static void test_reuse_unchanged(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    char a[41], b[41], c[41], d[41];
    bool reused = true;
    wfile(f, "x", "1", 0644);
    assert_int_equal(sg_checkpoint_take_ex(f->st, "first", true, a, NULL, &reused, &err), 0);
    assert_false(reused); /* no checkpoint yet: a real one */
    assert_int_equal(sg_checkpoint_take_ex(f->st, "again", true, b, NULL, &reused, &err), 0);
    assert_true(reused);
    assert_string_equal(a, b);
    wfile(f, "x", "22", 0644);
    assert_int_equal(sg_checkpoint_take_ex(f->st, "changed", true, c, NULL, &reused, &err), 0);
    assert_false(reused);
    assert_string_not_equal(a, c);
    assert_int_equal(sg_checkpoint_take_ex(f->st, "same", true, d, NULL, &reused, &err), 0);
    assert_true(reused);
    assert_string_equal(c, d);
    sg_checkpoint_info *v = NULL;
    size_t n = 0;
    assert_int_equal(sg_checkpoint_list(f->st, &v, &n, &err), 0);
    assert_int_equal(n, 4);
    const char *labels[] = {"first", "again", "changed", "same"};
    const char *ids[] = {a, a, c, c};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(v[i].label, labels[i]);
        assert_string_equal(v[i].id, ids[i]);
    }
    sg_checkpoint_infos_free(v, n);
    /* after a restore the workspace equals an older one: a new checkpoint */
    assert_int_equal(sg_checkpoint_restore(f->st, a, NULL, &err), 0);
    assert_int_equal(sg_checkpoint_take_ex(f->st, "after restore", true, d, NULL, &reused, &err), 0);
    assert_false(reused);
    assert_file(f, "x", "1");
}

static void test_refuses_store_in_workspace(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    sg_autofree char *inside = pj(f, ".ckpt");
    assert_null(sg_checkpoint_open(inside, f->ws, &err));
    assert_int_equal(err.code, EINVAL);
    assert_null(sg_checkpoint_open(f->repo, "/nonexistent/ws", &err));
    /* Empty store: no checkpoints, no latest. */
    sg_checkpoint_info *v = NULL;
    size_t n = 5;
    assert_int_equal(sg_checkpoint_list(f->st, &v, &n, &err), 0);
    assert_int_equal(n, 0);
    char id[41];
    assert_int_equal(sg_checkpoint_latest(f->st, id, &err), -1);
    assert_int_equal(err.code, ENOENT);
}

static void test_host_git_config_ignored(void **state)
{
    /* A global config with an excludes file must change nothing: our walker
     * never reads ignore rules and libgit2's search paths are cleared. */
    fx *f = *state;
    sg_autofree char *home = sg_strdup_printf("%s/home", f->root);
    mkdir(home, 0755);
    sg_autofree char *cfg = sg_strdup_printf("%s/.gitconfig", home);
    FILE *fp = fopen(cfg, "w");
    fprintf(fp, "[core]\n\texcludesFile = %s/ignore\n", home);
    fclose(fp);
    sg_autofree char *ign = sg_strdup_printf("%s/ignore", home);
    fp = fopen(ign, "w");
    fprintf(fp, "*\n");
    fclose(fp);
    sg_autofree char *old = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", home, 1);
    wfile(f, "kept", "k", 0644);
    char c1[41];
    sg_checkpoint_stats stt;
    take(f, NULL, c1, &stt);
    assert_int_equal(stt.files, 1);
    git_buf gb = {0};
    assert_int_equal(git_libgit2_opts(GIT_OPT_GET_SEARCH_PATH, GIT_CONFIG_LEVEL_GLOBAL, &gb), 0);
    assert_true(gb.size == 0);
    git_buf_dispose(&gb);
    if (old)
        setenv("HOME", old, 1);
    else
        unsetenv("HOME");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_content_create_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlinks_and_outside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_dirs_fifo_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gitignore_and_escapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_git_workspace_and_nested, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stat_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_reopen_new_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reuse_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuses_store_in_workspace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_git_config_ignored, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

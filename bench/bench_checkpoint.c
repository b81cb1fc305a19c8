/* bench_checkpoint: checkpoint and rollback of a 10,000-file workspace after
 * 10 files changed, side by side in one run with
 *   - libgit2's own way (index update_all + add_all + write_tree + commit;
 *     checkout_tree FORCE|REMOVE_UNTRACKED with baseline_index),
 *   - cp -a (a full copy per checkpoint; rollback = rm -rf + cp -a),
 *   - rsync -a --delete (when installed).
 * Prints a table and writes the figures to bench/results/checkpoint.json
 * (or argv[1]). Not a timed test: targets are checked and reported only.
 *
 * Build and run from the source root:
 *   ninja -C build bench_checkpoint && build/bench_checkpoint
 * Env: SG_BENCH_DIR (default /var/tmp), SG_BENCH_FILES (10000),
 *      SG_BENCH_ROUNDS (7). */
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "checkpoint/checkpoint.h"

#define CHANGED 10
#define FILES_PER_DIR 100

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* CPU time of this process (user + system): less sensitive than wall time
 * to other load on a shared machine. */
static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_checkpoint: %s: %s\n", what, msg);
    exit(1);
}

static void gdie(const char *what)
{
    const git_error *e = git_error_last();
    die(what, e && e->message ? e->message : "libgit2 error");
}

static void put(const char *path, const char *content)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || sg_write_all(fd, content, strlen(content)) < 0)
        die(path, strerror(errno));
    close(fd);
}

static char *file_path(const char *ws, int i)
{
    return sg_strdup_printf("%s/d%02d/s%d/f%05d.txt", ws, i / 1000, (i / FILES_PER_DIR) % 10, i);
}

static void make_workspace(const char *ws, int nfiles)
{
    sg_err err = {0};
    char body[2048];
    for (int i = 0; i < nfiles; i++) {
        if (i % FILES_PER_DIR == 0) {
            sg_autofree char *d = sg_strdup_printf("%s/d%02d/s%d", ws, i / 1000, (i / FILES_PER_DIR) % 10);
            if (sg_mkdir_p(d, 0755, &err) < 0)
                die("mkdir", err.msg);
        }
        int len = 200 + (i * 37) % 1500;
        for (int j = 0; j < len; j++)
            body[j] = (char)('a' + (i + j * 7) % 26);
        body[len] = '\0';
        memcpy(body, "file ", 5);
        sg_autofree char *p = file_path(ws, i);
        put(p, body);
    }
}

static void modify(const char *ws, int nfiles, int round)
{
    for (int k = 0; k < CHANGED; k++) {
        int i = (int)(((long)round * 7919 + (long)k * 997) % nfiles);
        sg_autofree char *p = file_path(ws, i);
        sg_autofree char *c = sg_strdup_printf("round %d change %d of file %d\n", round, k, i);
        put(p, c);
    }
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct series {
    double v[64];
    int n;
} series;

static double median(series *s)
{
    if (!s->n)
        return -1;
    double t[64];
    memcpy(t, s->v, sizeof(double) * (size_t)s->n);
    qsort(t, (size_t)s->n, sizeof(double), dcmp);
    return s->n % 2 ? t[s->n / 2] : (t[s->n / 2 - 1] + t[s->n / 2]) / 2;
}

static double maxof(const series *s)
{
    double m = -1;
    for (int i = 0; i < s->n; i++)
        if (s->v[i] > m)
            m = s->v[i];
    return m;
}

static double timed_sh(const char *cmd)
{
    double t0 = now_ms();
    int r = system(cmd);
    double t = now_ms() - t0;
    if (r != 0)
        die("command failed", cmd);
    return t;
}

/* ---- libgit2's own approach, for comparison ---- */
typedef struct lg {
    git_repository *repo;
    git_index *idx;
    git_oid head;
    bool have_head;
} lg;

static double lg_commit(lg *g, git_oid *out)
{
    double t0 = now_ms();
    if (git_index_update_all(g->idx, NULL, NULL, NULL) < 0 ||
        git_index_add_all(g->idx, NULL, GIT_INDEX_ADD_FORCE, NULL, NULL) < 0 || git_index_write(g->idx) < 0)
        gdie("libgit2 add_all");
    git_oid tree_oid;
    if (git_index_write_tree(&tree_oid, g->idx) < 0)
        gdie("libgit2 write_tree");
    git_tree *tree = NULL;
    git_signature *sig = NULL;
    if (git_tree_lookup(&tree, g->repo, &tree_oid) < 0 || git_signature_now(&sig, "b", "b@x") < 0)
        gdie("libgit2 tree");
    git_commit *parent = NULL;
    if (g->have_head && git_commit_lookup(&parent, g->repo, &g->head) < 0)
        gdie("libgit2 parent");
    const git_commit *parents[1] = {parent};
    if (git_commit_create(out, g->repo, NULL, sig, sig, NULL, "c", tree, parent ? 1 : 0, parents) < 0)
        gdie("libgit2 commit");
    double t = now_ms() - t0;
    git_commit_free(parent);
    git_signature_free(sig);
    git_tree_free(tree);
    g->head = *out;
    g->have_head = true;
    return t;
}

static double lg_checkout(lg *g, const git_oid *id)
{
    double t0 = now_ms();
    git_commit *c = NULL;
    git_tree *tree = NULL;
    if (git_commit_lookup(&c, g->repo, id) < 0 || git_commit_tree(&tree, c) < 0)
        gdie("libgit2 lookup");
    git_checkout_options o;
    git_checkout_options_init(&o, GIT_CHECKOUT_OPTIONS_VERSION);
    o.checkout_strategy = GIT_CHECKOUT_FORCE | GIT_CHECKOUT_REMOVE_UNTRACKED;
    o.baseline_index = g->idx;
    if (git_checkout_tree(g->repo, (git_object *)tree, &o) < 0)
        gdie("libgit2 checkout");
    if (git_index_write(g->idx) < 0)
        gdie("libgit2 index write");
    double t = now_ms() - t0;
    git_tree_free(tree);
    git_commit_free(c);
    return t;
}

int main(int argc, char **argv)
{
    const char *out_path = argc > 1 ? argv[1] : "bench/results/checkpoint.json";
    const char *base = getenv("SG_BENCH_DIR") ? getenv("SG_BENCH_DIR") : "/var/tmp";
    int nfiles = getenv("SG_BENCH_FILES") ? atoi(getenv("SG_BENCH_FILES")) : 10000;
    int rounds = getenv("SG_BENCH_ROUNDS") ? atoi(getenv("SG_BENCH_ROUNDS")) : 7;
    if (nfiles < 100 || rounds < 1 || rounds > 60)
        die("args", "SG_BENCH_FILES >= 100, 1 <= SG_BENCH_ROUNDS <= 60");
    sg_err err = {0};
    sg_autofree char *root = sg_strdup_printf("%s/sg-bench-ckpt-XXXXXX", base);
    if (!mkdtemp(root))
        die("mkdtemp", strerror(errno));
    sg_autofree char *ws = sg_strdup_printf("%s/ws", root);
    sg_autofree char *ws2 = sg_strdup_printf("%s/ws-libgit2", root);
    sg_autofree char *ws3 = sg_strdup_printf("%s/ws-cp", root);
    sg_autofree char *ws4 = sg_strdup_printf("%s/ws-rsync", root);
    sg_autofree char *repo = sg_strdup_printf("%s/state/checkpoints.git", root);
    sg_autofree char *repo2 = sg_strdup_printf("%s/state/libgit2.git", root);
    double load_start[1] = {-1};
    getloadavg(load_start, 1);
    make_workspace(ws, nfiles);
    make_workspace(ws2, nfiles);
    make_workspace(ws3, nfiles);
    make_workspace(ws4, nfiles);
    sync();
    usleep(200 * 1000); /* past the racy window, as a real workspace would be */

    /* ---- sandglass ---- */
    sg_ckpt_store *st = sg_checkpoint_open(repo, ws, &err);
    if (!st)
        die("open", err.msg);
    char prev[41], id[41];
    sg_checkpoint_stats stt;
    double t0 = now_ms();
    if (sg_checkpoint_take(st, "first", prev, &stt, &err) < 0)
        die("take", err.msg);
    double sg_first = now_ms() - t0;
    uint64_t first_files = stt.files;
    t0 = now_ms();
    if (sg_checkpoint_take(st, "unchanged", prev, &stt, &err) < 0)
        die("take", err.msg);
    double sg_nochange = now_ms() - t0;
    series sg_ck = {0}, sg_rb = {0}, sg_diff = {0}, sg_ck_cpu = {0}, sg_rb_cpu = {0};
    for (int r = 0; r < rounds; r++) {
        modify(ws, nfiles, r);
        t0 = now_ms();
        double c0 = cpu_ms();
        if (sg_checkpoint_take(st, "after 10 changes", id, &stt, &err) < 0)
            die("take", err.msg);
        sg_ck.v[sg_ck.n++] = now_ms() - t0;
        sg_ck_cpu.v[sg_ck_cpu.n++] = cpu_ms() - c0;
        if (stt.changed != CHANGED)
            fprintf(stderr, "warning: round %d: %llu paths changed, expected %d\n", r,
                    (unsigned long long)stt.changed, CHANGED);
        sg_checkpoint_change *ch = NULL;
        size_t n = 0;
        t0 = now_ms();
        if (sg_checkpoint_diff(st, prev, &ch, &n, &err) < 0)
            die("diff", err.msg);
        sg_diff.v[sg_diff.n++] = now_ms() - t0;
        sg_checkpoint_changes_free(ch, n);
        t0 = now_ms();
        c0 = cpu_ms();
        if (sg_checkpoint_restore(st, prev, &stt, &err) < 0)
            die("restore", err.msg);
        sg_rb.v[sg_rb.n++] = now_ms() - t0;
        sg_rb_cpu.v[sg_rb_cpu.n++] = cpu_ms() - c0;
        if (stt.changed != CHANGED)
            fprintf(stderr, "warning: round %d: rollback touched %llu paths\n", r,
                    (unsigned long long)stt.changed);
    }
    sg_checkpoint_close(st);
    if (getenv("SG_BENCH_ONLY_SANDGLASS")) {
        printf("sandglass: first %.1f ms, unchanged %.1f ms, ckpt median %.1f ms, rollback median %.1f ms, diff %.1f ms\n",
               sg_first, sg_nochange, median(&sg_ck), median(&sg_rb), median(&sg_diff));
        sg_rm_rf(root, &err);
        return 0;
    }

    /* ---- libgit2 add_all + checkout_tree(baseline_index) ---- */
    git_libgit2_init();
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_SYSTEM, "");
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_XDG, "");
    git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_GLOBAL, "");
    lg g = {0};
    if (git_repository_init(&g.repo, repo2, 1) < 0 || git_repository_set_workdir(g.repo, ws2, 0) < 0 ||
        git_repository_index(&g.idx, g.repo) < 0)
        gdie("libgit2 init");
    git_oid lprev, lid;
    double lg_first = lg_commit(&g, &lprev);
    double lg_nochange = lg_commit(&g, &lprev);
    series lg_ck = {0}, lg_rb = {0};
    for (int r = 0; r < rounds; r++) {
        modify(ws2, nfiles, r);
        lg_ck.v[lg_ck.n++] = lg_commit(&g, &lid);
        lg_rb.v[lg_rb.n++] = lg_checkout(&g, &lprev);
    }
    git_index_free(g.idx);
    git_repository_free(g.repo);
    git_libgit2_shutdown();

    /* ---- cp -a: full copy per checkpoint ---- */
    sg_autofree char *snap = sg_strdup_printf("%s/snap-cp", root);
    sg_autofree char *cmd_first = sg_strdup_printf("cp -a '%s' '%s'", ws3, snap);
    double cp_first = timed_sh(cmd_first);
    series cp_ck = {0}, cp_rb = {0};
    for (int r = 0; r < rounds; r++) {
        modify(ws3, nfiles, r);
        sg_autofree char *s2 = sg_strdup_printf("%s/snap-cp-%d", root, r);
        sg_autofree char *c1 = sg_strdup_printf("cp -a '%s' '%s'", ws3, s2);
        cp_ck.v[cp_ck.n++] = timed_sh(c1);
        sg_autofree char *c2 = sg_strdup_printf("rm -rf '%s' && cp -a '%s' '%s'", ws3, snap, ws3);
        cp_rb.v[cp_rb.n++] = timed_sh(c2);
        sg_autofree char *c3 = sg_strdup_printf("rm -rf '%s'", s2);
        timed_sh(c3);
    }

    /* ---- rsync -a --delete: incremental copy ---- */
    bool have_rsync = system("command -v rsync >/dev/null 2>&1") == 0;
    double rs_first = -1;
    series rs_ck = {0}, rs_rb = {0};
    if (have_rsync) {
        sg_autofree char *rsnap = sg_strdup_printf("%s/snap-rsync", root);
        sg_autofree char *rsnap2 = sg_strdup_printf("%s/snap-rsync-2", root);
        sg_autofree char *c0 = sg_strdup_printf("rsync -a --delete '%s/' '%s/'", ws4, rsnap);
        rs_first = timed_sh(c0);
        sg_autofree char *cseed = sg_strdup_printf("cp -a '%s' '%s'", rsnap, rsnap2);
        timed_sh(cseed);
        for (int r = 0; r < rounds; r++) {
            modify(ws4, nfiles, r);
            /* checkpoint: bring a second snapshot up to date (only the
             * differences are copied, as rsync would between checkpoints) */
            sg_autofree char *c1 = sg_strdup_printf("rsync -a --delete '%s/' '%s/'", ws4, rsnap2);
            rs_ck.v[rs_ck.n++] = timed_sh(c1);
            sg_autofree char *c2 = sg_strdup_printf("rsync -a --delete '%s/' '%s/'", rsnap, ws4);
            rs_rb.v[rs_rb.n++] = timed_sh(c2);
            sg_autofree char *c3 = sg_strdup_printf("rsync -a --delete '%s/' '%s/'", rsnap, rsnap2);
            timed_sh(c3);
        }
    }

    struct statfs sfs;
    const char *fstype = "?";
    if (statfs(base, &sfs) == 0)
        fstype = sfs.f_type == 0xEF53 ? "ext4" : sfs.f_type == 0x01021994 ? "tmpfs"
               : sfs.f_type == 0x58465342 ? "xfs" : sfs.f_type == 0x9123683E ? "btrfs" : "other";

    double sgc = median(&sg_ck), sgr = median(&sg_rb);
    double load_end[1] = {-1};
    getloadavg(load_end, 1);
    printf("workspace: %d files (%llu captured), %d changed per round, %d rounds, %s on %s, load %.1f -> %.1f\n",
           nfiles, (unsigned long long)first_files, CHANGED, rounds, base, fstype, load_start[0], load_end[0]);
    printf("%-34s %12s %14s %12s\n", "", "first ckpt", "ckpt (10 chg)", "rollback");
    printf("%-34s %9.1f ms %11.1f ms %9.1f ms   (max %.1f / %.1f; unchanged %.1f ms; diff %.1f ms)\n",
           "sandglass", sg_first, sgc, sgr, maxof(&sg_ck), maxof(&sg_rb), sg_nochange, median(&sg_diff));
    printf("%-34s %12s %11.1f ms %9.1f ms\n", "sandglass, cpu time", "", median(&sg_ck_cpu),
           median(&sg_rb_cpu));
    printf("%-34s %9.1f ms %11.1f ms %9.1f ms   (unchanged %.1f ms)\n", "libgit2 add_all+checkout(baseline)",
           lg_first, median(&lg_ck), median(&lg_rb), lg_nochange);
    printf("%-34s %9.1f ms %11.1f ms %9.1f ms\n", "cp -a", cp_first, median(&cp_ck), median(&cp_rb));
    if (have_rsync)
        printf("%-34s %9.1f ms %11.1f ms %9.1f ms\n", "rsync -a --delete", rs_first, median(&rs_ck),
               median(&rs_rb));
    else
        printf("rsync: not installed\n");
    printf("ratios (other / sandglass), ckpt: libgit2 %.1fx, cp %.1fx%s; rollback: libgit2 %.1fx, cp %.1fx",
           median(&lg_ck) / sgc, median(&cp_ck) / sgc, have_rsync ? "" : "", median(&lg_rb) / sgr,
           median(&cp_rb) / sgr);
    if (have_rsync)
        printf(", rsync %.1fx (ckpt rsync %.1fx)", median(&rs_rb) / sgr, median(&rs_ck) / sgc);
    printf("\ntargets: checkpoint <= 100 ms: %s; rollback <= 100 ms: %s\n", sgc <= 100 ? "met" : "MISSED",
           sgr <= 100 ? "met" : "MISSED");

    sg_autofree char *dir = strdup(out_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        if (sg_mkdir_p(dir, 0755, &err) < 0)
            die("results dir", err.msg);
    }
    FILE *fp = fopen(out_path, "w");
    if (!fp)
        die(out_path, strerror(errno));
    char when[64];
    sg_now_iso8601(when, sizeof when);
    struct utsname un;
    uname(&un);
    fprintf(fp,
            "{\n  \"bench\": \"checkpoint\",\n  \"when\": \"%s\",\n  \"kernel\": \"%s\",\n"
            "  \"fs\": \"%s\",\n  \"loadavg_1m\": [%.2f, %.2f],\n  \"files\": %d,\n  \"changed_per_round\": %d,\n  \"rounds\": %d,\n"
            "  \"unit\": \"ms\",\n"
            "  \"sandglass\": {\"first_checkpoint\": %.2f, \"checkpoint_unchanged\": %.2f, "
            "\"checkpoint_median\": %.2f, \"checkpoint_max\": %.2f, \"rollback_median\": %.2f, "
            "\"rollback_max\": %.2f, \"diff_median\": %.2f, \"checkpoint_cpu_median\": %.2f, "
            "\"rollback_cpu_median\": %.2f},\n"
            "  \"libgit2_add_all_checkout_baseline\": {\"first_checkpoint\": %.2f, \"checkpoint_unchanged\": %.2f, "
            "\"checkpoint_median\": %.2f, \"rollback_median\": %.2f},\n"
            "  \"cp_a\": {\"first_checkpoint\": %.2f, \"checkpoint_median\": %.2f, \"rollback_median\": %.2f},\n",
            when, un.release, fstype, load_start[0], load_end[0], nfiles, CHANGED, rounds, sg_first, sg_nochange, sgc, maxof(&sg_ck), sgr,
            maxof(&sg_rb), median(&sg_diff), median(&sg_ck_cpu), median(&sg_rb_cpu), lg_first, lg_nochange, median(&lg_ck), median(&lg_rb), cp_first,
            median(&cp_ck), median(&cp_rb));
    if (have_rsync)
        fprintf(fp, "  \"rsync_a_delete\": {\"first_checkpoint\": %.2f, \"checkpoint_median\": %.2f, "
                    "\"rollback_median\": %.2f},\n", rs_first, median(&rs_ck), median(&rs_rb));
    else
        fprintf(fp, "  \"rsync_a_delete\": null,\n");
    fprintf(fp,
            "  \"ratios_vs_sandglass\": {\"checkpoint_libgit2\": %.2f, \"checkpoint_cp\": %.2f, "
            "\"rollback_libgit2\": %.2f, \"rollback_cp\": %.2f, \"checkpoint_rsync\": %.2f, \"rollback_rsync\": %.2f},\n"
            "  \"targets\": {\"checkpoint_ms\": 100, \"rollback_ms\": 100, \"checkpoint_met\": %s, \"rollback_met\": %s}\n}\n",
            median(&lg_ck) / sgc, median(&cp_ck) / sgc, median(&lg_rb) / sgr, median(&cp_rb) / sgr,
            have_rsync ? median(&rs_ck) / sgc : -1.0, have_rsync ? median(&rs_rb) / sgr : -1.0,
            sgc <= 100 ? "true" : "false", sgr <= 100 ? "true" : "false");
    fclose(fp);
    printf("written: %s\n", out_path);
    sg_rm_rf(root, &err);
    return 0;
}

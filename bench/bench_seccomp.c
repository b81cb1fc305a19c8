/* bench_seccomp: what the sandbox's syscall filter costs, side by side in
 * one run.
 *
 * The kernel runs a new filter for every syscall number as it loads it (to
 * cache the numbers that are always allowed), so the load costs in
 * proportion to the path each number takes through the program:
 *   1. the whole filter (src/sandbox/seccomp.c), a binary tree over the syscall
 *      numbers: what every exec child loaded before the filter was split;
 *   2. the same rules as a chain (libseccomp's default layout);
 *   3. a one-instruction "allow everything" program: the floor;
 *   4. init's part, the tree without the clone3 rule: loaded once per
 *      sandbox, by init on itself;
 *   5. the child's part, the clone3 rule alone (sg_seccomp_child_prog),
 *      loaded over init's part as each exec child does now.
 * Each load is timed in a fresh forked child (as in the sandbox); the
 * kinds are interleaved, R rounds of N loads each. Then the cost of a
 * syscall under each (getppid, L calls): the kernel's cache should make it
 * the same (under 5, both filters have run).
 *
 * bench_seccomp [--loads N] [--rounds R] [--calls L] [--out PATH]
 */
#include <errno.h>
#include <getopt.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "sandbox/seccomp.h"

#define KINDS 5
#define FLOOR 2 /* the allow-all kind */

static const char *const kind_name[KINDS] = {
    "tree (whole)", "chain", "allow-all (floor)", "init part", "child part",
};

typedef struct sample {
    double load_us;
    double call_ns;
} sample;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* In a forked child: load base (untimed) if any, time the load of prog,
 * then time L getppid calls. */
static int measure(const struct sock_fprog *base, const struct sock_fprog *prog, long calls,
                   sample *out)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        sample s = {0};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            _exit(1);
        if (base && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, base) < 0)
            _exit(1);
        double t0 = now_ns();
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
            _exit(1);
        s.load_us = (now_ns() - t0) / 1e3;
        t0 = now_ns();
        for (long i = 0; i < calls; i++)
            syscall(SYS_getppid);
        s.call_ns = calls > 0 ? (now_ns() - t0) / (double)calls : 0;
        _exit(write(p[1], &s, sizeof s) == (ssize_t)sizeof s ? 0 : 1);
    }
    close(p[1]);
    ssize_t n = read(p[0], out, sizeof *out);
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return n == (ssize_t)sizeof *out && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

static double mean(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return n ? s / (double)n : 0;
}

int main(int argc, char **argv)
{
    long loads = 200, rounds = 5, calls = 200000;
    const char *out = "bench/results/seccomp.json";
    static const struct option opts[] = {
        {"loads", required_argument, NULL, 'n'}, {"rounds", required_argument, NULL, 'r'},
        {"calls", required_argument, NULL, 'c'}, {"out", required_argument, NULL, 'o'},
        {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': loads = atol(optarg); break;
        case 'r': rounds = atol(optarg); break;
        case 'c': calls = atol(optarg); break;
        case 'o': out = optarg; break;
        default:
            fprintf(stderr, "usage: bench_seccomp [--loads N] [--rounds R] [--calls L] [--out PATH]\n");
            return 2;
        }
    }
    if (loads < 1 || rounds < 1 || calls < 0) {
        fprintf(stderr, "bench_seccomp: --loads and --rounds must be at least 1, --calls at least 0\n");
        return 2;
    }

    sg_err err = {0};
    sg_seccomp_prog tree = {0}, chain = {0}, init_part = {0};
    if (sg_seccomp_build_layout(&tree, SG_SECCOMP_TREE, 0, &err) < 0 ||
        sg_seccomp_build_layout(&chain, SG_SECCOMP_CHAIN, 0, &err) < 0 ||
        sg_seccomp_build_layout(&init_part, SG_SECCOMP_TREE, SG_SECCOMP_NO_CLONE3, &err) < 0) {
        fprintf(stderr, "bench_seccomp: %s\n", err.msg);
        return 1;
    }
    const sg_seccomp_prog *child = sg_seccomp_child_prog();
    if (!child) {
        fprintf(stderr, "bench_seccomp: no child part on this architecture\n");
        return 1;
    }
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog[KINDS] = {
        {.len = (unsigned short)tree.len, .filter = tree.insns},
        {.len = (unsigned short)chain.len, .filter = chain.insns},
        {.len = 1, .filter = &allow},
        {.len = (unsigned short)init_part.len, .filter = init_part.insns},
        {.len = (unsigned short)child->len, .filter = child->insns},
    };
    /* The child part is loaded over init's, as in the sandbox. */
    const struct sock_fprog *base[KINDS] = {[4] = &prog[3]};

    size_t total = (size_t)(loads * rounds);
    sg_autofree double *load = calloc(total * KINDS, sizeof *load);
    sg_autofree double *call = calloc((size_t)rounds * KINDS, sizeof *call);
    if (!load || !call) {
        fprintf(stderr, "bench_seccomp: out of memory\n");
        return 1;
    }
    size_t got[KINDS] = {0};
    for (long r = 0; r < rounds; r++) {
        for (int k = 0; k < KINDS; k++) {
            for (long i = 0; i < loads; i++) {
                sample s;
                /* the syscall loop only once per round: it is the slow part */
                if (measure(base[k], &prog[k], i == 0 ? calls : 0, &s) < 0) {
                    fprintf(stderr, "bench_seccomp: cannot load the %s program: %s\n", kind_name[k],
                            strerror(errno));
                    return 1;
                }
                load[(size_t)k * total + got[k]++] = s.load_us;
                if (i == 0)
                    call[(size_t)k * (size_t)rounds + (size_t)r] = s.call_ns;
            }
        }
    }

    sg_autojson json_t *res = json_object();
    json_object_set_new(res, "loads_per_kind", json_integer((json_int_t)total));
    json_object_set_new(res, "getppid_calls_per_round", json_integer(calls));
    json_t *kinds = json_object();
    json_object_set_new(res, "kinds", kinds);
    double floor_med = 0, tree_med = 0;
    printf("%-20s %6s %12s %12s %14s\n", "filter", "insns", "load mean", "load median", "getppid");
    for (int k = 0; k < KINDS; k++) {
        double *v = load + (size_t)k * total;
        double m = mean(v, total), med = median(v, total);
        double cn = median(call + (size_t)k * (size_t)rounds, (size_t)rounds);
        if (k == FLOOR)
            floor_med = med;
        if (k == 0)
            tree_med = med;
        json_object_set_new(kinds, kind_name[k],
            json_pack("{s:i, s:f, s:f, s:f}", "insns", (int)prog[k].len, "load_mean_us", m,
                      "load_median_us", med, "getppid_ns", cn));
    }
    for (int k = 0; k < KINDS; k++) {
        json_t *o = json_object_get(kinds, kind_name[k]);
        double med = json_real_value(json_object_get(o, "load_median_us"));
        json_object_set_new(o, "load_ratio_to_tree", json_real(tree_med > 0 ? med / tree_med : 0));
        printf("%-20s %6d %9.1f us %9.1f us %11.0f ns   (%.2fx the tree, %.1f us over the floor)\n",
               kind_name[k], (int)prog[k].len,
               json_real_value(json_object_get(o, "load_mean_us")), med,
               json_real_value(json_object_get(o, "getppid_ns")),
               tree_med > 0 ? med / tree_med : 0, med - floor_med);
    }
    double child_med = json_real_value(json_object_get(json_object_get(kinds, kind_name[4]),
                                                       "load_median_us"));
    json_object_set_new(res, "per_exec_saving_us", json_real(tree_med - child_med));
    printf("per exec: %.1f us (the child part) instead of %.1f us (the whole tree): %.1f us less\n",
           child_med, tree_med, tree_med - child_med);
    sg_seccomp_prog_free(&tree);
    sg_seccomp_prog_free(&chain);
    sg_seccomp_prog_free(&init_part);
    if (json_dump_file(res, out, JSON_INDENT(2)) < 0) {
        fprintf(stderr, "bench_seccomp: cannot write %s\n", out);
        return 1;
    }
    printf("written to %s\n", out);
    return 0;
}

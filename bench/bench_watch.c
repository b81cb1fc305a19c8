/* bench_watch: what watching a workspace costs, side by side in one run.
 *
 *   1. the inotify watcher (src/capture/watch.c) idle over an N-file workspace for
 *      S seconds: CPU of this process while the loop runs (getrusage);
 *   2. the original's approach, re-implemented faithfully in C: every
 *      250 ms walk the tree (sorted), stat every file, read and decode every
 *      file up to 64 KiB, compare with the previous snapshot;
 *   3. the original itself: the seed's _snapshot_workspace/_watcher_loop in
 *      python3 (a child process, CPU from wait4), if python3 is there;
 *   4. latency from a write (open, write, close) to the watcher's callback,
 *      p50/p99 over W writes, on the loop.
 * Prints the figures and ratios and writes them as JSON (--out).
 *
 * bench_watch [--files N] [--seconds S] [--writes W] [--out PATH] [--dir D]
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/json.h"
#include "base/util.h"
#include "capture/watch.h"
#include "checkpoint/diff.h"
#include "checkpoint/udiff.h"

static double cpu_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static double mono_s(void)
{
    return (double)sg_now_mono_ns() / 1e9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* 50k files: 500 directories of 100, 200 B to 4 KiB of text each. */
static void make_workspace(const char *root, int nfiles)
{
    char path[512];
    int per_dir = 100;
    char *buf = malloc(4096);
    for (int i = 0; i < 4096; i++)
        buf[i] = (i % 64 == 63) ? '\n' : (char)('a' + i % 26);
    for (int i = 0; i < nfiles; i++) {
        if (i % per_dir == 0) {
            snprintf(path, sizeof(path), "%s/pkg%03d/mod%02d", root, i / per_dir / 20,
                     (i / per_dir) % 20);
            sg_err err = {0};
            if (sg_mkdir_p(path, 0755, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                exit(1);
            }
        }
        snprintf(path, sizeof(path), "%s/pkg%03d/mod%02d/file%05d.py", root, i / per_dir / 20,
                 (i / per_dir) % 20, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            die(path);
        size_t len = 200 + (size_t)(i * 7919) % 3896;
        if (sg_write_all(fd, buf, len) < 0)
            die("write");
        close(fd);
    }
    free(buf);
}

/* ---- the original's poll, in C ------------------------------------------ */

typedef struct snap_ent {
    char *rel;
    int64_t mtime_ns, size;
    char *text; /* decoded (U+FFFD-replaced) text, or NULL if too large */
} snap_ent;

typedef struct snap {
    snap_ent *v;
    size_t n, cap;
} snap;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void snap_walk(snap *s, const char *root, const char *rel)
{
    char dpath[4096];
    snprintf(dpath, sizeof(dpath), "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dpath);
    if (!d)
        return;
    char **files = NULL, **dirs = NULL;
    size_t nf = 0, nd = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (!strncmp(de->d_name, ".nc-", 4))
            continue;
        if (de->d_type == DT_DIR) {
            dirs = realloc(dirs, (nd + 1) * sizeof(*dirs));
            dirs[nd++] = strdup(de->d_name);
        } else {
            files = realloc(files, (nf + 1) * sizeof(*files));
            files[nf++] = strdup(de->d_name);
        }
    }
    closedir(d);
    qsort(dirs, nd, sizeof(*dirs), cmp_name);
    qsort(files, nf, sizeof(*files), cmp_name);
    for (size_t i = 0; i < nf; i++) {
        char r[4096], p[8192];
        snprintf(r, sizeof(r), "%s%s%s", rel, *rel ? "/" : "", files[i]);
        snprintf(p, sizeof(p), "%s/%s", root, r);
        struct stat st;
        if (stat(p, &st) < 0) {
            free(files[i]);
            continue;
        }
        snap_ent e = {strdup(r), (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                      st.st_size, NULL};
        if (st.st_size <= SG_DIFF_MAX_BYTES) {
            size_t len = 0;
            sg_err err = {0};
            char *raw = sg_read_file(p, SG_DIFF_MAX_BYTES + 1, &len, &err);
            if (raw) {
                e.text = sg_utf8_sanitize(raw, len, NULL); /* errors="replace" */
                free(raw);
            }
        }
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 1024;
            s->v = realloc(s->v, s->cap * sizeof(*s->v));
        }
        s->v[s->n++] = e;
        free(files[i]);
    }
    free(files);
    for (size_t i = 0; i < nd; i++) {
        char r[4096];
        snprintf(r, sizeof(r), "%s%s%s", rel, *rel ? "/" : "", dirs[i]);
        snap_walk(s, root, r);
        free(dirs[i]);
    }
    free(dirs);
}

static void snap_free(snap *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].rel);
        free(s->v[i].text);
    }
    free(s->v);
    memset(s, 0, sizeof(*s));
}

static int cmp_ent(const void *a, const void *b)
{
    return strcmp(((const snap_ent *)a)->rel, ((const snap_ent *)b)->rel);
}

/* Compare as _watcher_loop does (sorted union of keys); returns changes. */
static size_t snap_compare(snap *old, snap *cur)
{
    qsort(cur->v, cur->n, sizeof(*cur->v), cmp_ent);
    size_t i = 0, j = 0, changes = 0;
    while (i < old->n || j < cur->n) {
        int c = i >= old->n ? 1 : j >= cur->n ? -1 : strcmp(old->v[i].rel, cur->v[j].rel);
        if (c < 0) {
            changes++, i++;
        } else if (c > 0) {
            changes++, j++;
        } else {
            const snap_ent *a = &old->v[i], *b = &cur->v[j];
            bool stat_diff = a->mtime_ns != b->mtime_ns || a->size != b->size;
            bool text_diff = (a->text == NULL) != (b->text == NULL) ||
                             (a->text && strcmp(a->text, b->text));
            if (stat_diff && text_diff)
                changes++;
            i++, j++;
        }
    }
    return changes;
}

static double poll_c(const char *root, double seconds, int *polls)
{
    snap base = {0};
    snap_walk(&base, root, "");
    qsort(base.v, base.n, sizeof(*base.v), cmp_ent);
    double c0 = cpu_s(RUSAGE_SELF), end = mono_s() + seconds;
    *polls = 0;
    while (mono_s() < end) {
        struct timespec ts = {0, 250 * 1000000};
        nanosleep(&ts, NULL);
        snap cur = {0};
        snap_walk(&cur, root, "");
        snap_compare(&base, &cur);
        snap_free(&base);
        base = cur;
        (*polls)++;
    }
    double used = cpu_s(RUSAGE_SELF) - c0;
    snap_free(&base);
    return used;
}

/* ---- the original itself (python3) --------------------------------------- */

static const char *py_src =
    "import os, sys, time\n"
    "from pathlib import Path\n"
    "_AGENT_DIR_PREFIX = '.nc-'\n"
    "_MAX_DIFF_BYTES = 64 * 1024\n"
    "root = Path(sys.argv[1]); dur = float(sys.argv[2])\n"
    "def snapshot():\n"
    "    snap = {}\n"
    "    if not root.is_dir():\n"
    "        return snap\n"
    "    for dirpath, dirnames, filenames in os.walk(root):\n"
    "        dirnames[:] = sorted(d for d in dirnames if not d.startswith(_AGENT_DIR_PREFIX))\n"
    "        for name in sorted(filenames):\n"
    "            if name.startswith(_AGENT_DIR_PREFIX):\n"
    "                continue\n"
    "            path = Path(dirpath) / name\n"
    "            try:\n"
    "                st = path.stat()\n"
    "            except OSError:\n"
    "                continue\n"
    "            rel = path.relative_to(root).as_posix()\n"
    "            text = None\n"
    "            if st.st_size <= _MAX_DIFF_BYTES:\n"
    "                try:\n"
    "                    text = path.read_text(encoding='utf-8', errors='replace')\n"
    "                except OSError:\n"
    "                    pass\n"
    "            snap[rel] = (st.st_mtime_ns, st.st_size, text)\n"
    "    return snap\n"
    "baseline = snapshot()\n"
    "print('ready', flush=True)\n"
    "t0 = time.process_time(); end = time.monotonic() + dur; polls = 0\n"
    "while time.monotonic() < end:\n"
    "    time.sleep(0.25)\n"
    "    current = snapshot()\n"
    "    for rel in sorted(current.keys() | baseline.keys()):\n"
    "        if rel not in baseline or rel not in current:\n"
    "            pass\n"
    "        else:\n"
    "            o, n = baseline[rel], current[rel]\n"
    "            if o[:2] != n[:2] and o[2] != n[2]:\n"
    "                pass\n"
    "    baseline = current\n"
    "    polls += 1\n"
    "print(time.process_time() - t0, polls, flush=True)\n";

/* Returns the CPU seconds the python loop reported for itself, -1 if no
 * python3. */
static double poll_python(const char *root, double seconds, int *polls)
{
    char secs[32];
    snprintf(secs, sizeof(secs), "%g", seconds);
    int pfd[2];
    if (pipe(pfd) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        execlp("python3", "python3", "-c", py_src, root, secs, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char out[256] = {0};
    size_t have = 0;
    ssize_t r;
    while (have < sizeof(out) - 1 && (r = read(pfd[0], out + have, sizeof(out) - 1 - have)) > 0)
        have += (size_t)r;
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    double used = -1;
    char *line = strchr(out, '\n');
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && line &&
        sscanf(line + 1, "%lf %d", &used, polls) == 2)
        return used;
    return -1;
}

/* ---- latency ------------------------------------------------------------- */

typedef struct lat {
    uv_loop_t *loop;
    uv_timer_t timer;
    const char *root;
    int i, n;
    uint64_t t0;
    double *ms;
    int got;
} lat;

static void lat_write(uv_timer_t *t)
{
    lat *l = t->data;
    char path[512], body[64];
    snprintf(path, sizeof(path), "%s/lat%d.txt", l->root, l->i % 10);
    int len = snprintf(body, sizeof(body), "write %d\n", l->i);
    l->got = 0;
    l->t0 = sg_now_mono_ns();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || sg_write_all(fd, body, (size_t)len) < 0)
        die("latency write");
    close(fd);
}

static void lat_cb(void *ud, json_t *payload)
{
    lat *l = ud;
    json_decref(payload);
    if (!l->ms || l->got)
        return;
    l->got = 1;
    l->ms[l->i] = (double)(sg_now_mono_ns() - l->t0) / 1e6;
    l->i++;
    if (l->i < l->n)
        uv_timer_start(&l->timer, lat_write, 2, 0); /* a gap between writes */
    else
        uv_stop(l->loop);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void idle_stop(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static void quiet_cb(void *ud, json_t *payload)
{
    (*(int *)ud)++;
    json_decref(payload);
}

int main(int argc, char **argv)
{
    int nfiles = 50000, writes = 1000;
    double seconds = 10;
    const char *out = "bench/results/watch.json", *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--files"))
            nfiles = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--writes"))
            writes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
    }
    char root[256];
    snprintf(root, sizeof(root), "%s/sg-bench-watch-XXXXXX", dir ? dir : "/var/tmp");
    if (!mkdtemp(root))
        die("mkdtemp");
    printf("workspace %s: %d files\n", root, nfiles);
    double t = mono_s();
    make_workspace(root, nfiles);
    printf("  made in %.2f s\n", mono_s() - t);

    /* 1. watcher idle */
    uv_loop_t loop;
    uv_loop_init(&loop);
    int spurious = 0;
    sg_err err = {0};
    double c0 = cpu_s(RUSAGE_SELF);
    t = mono_s();
    sg_watch *w = sg_watch_new(&loop, root, quiet_cb, &spurious, sg_udiff_fn, NULL, &err);
    if (!w) {
        fprintf(stderr, "sg_watch_new: %s\n", err.msg);
        return 1;
    }
    double baseline_wall = mono_s() - t, baseline_cpu = cpu_s(RUSAGE_SELF) - c0;
    sg_watch_stats st;
    sg_watch_get_stats(w, &st);
    printf("watcher baseline: %.3f s wall, %.3f s CPU; %zu watches, %zu files, %zu bytes cached\n",
           baseline_wall, baseline_cpu, st.watches, st.files, st.bytes_cached);
    uv_timer_t stop;
    uv_timer_init(&loop, &stop);
    c0 = cpu_s(RUSAGE_SELF);
    uv_timer_start(&stop, idle_stop, (uint64_t)(seconds * 1000), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    double watch_idle = cpu_s(RUSAGE_SELF) - c0;
    printf("watcher idle %.0f s: %.6f s CPU (%d events)\n", seconds, watch_idle, spurious);

    /* 4. latency, same watcher */
    lat l = {.loop = &loop, .root = root, .n = writes};
    l.ms = calloc((size_t)writes, sizeof(double));
    sg_watch_free(w);
    uv_run(&loop, UV_RUN_NOWAIT);
    w = sg_watch_new(&loop, root, lat_cb, &l, sg_udiff_fn, NULL, &err);
    if (!w) {
        fprintf(stderr, "sg_watch_new: %s\n", err.msg);
        return 1;
    }
    uv_timer_init(&loop, &l.timer);
    l.timer.data = &l;
    uv_timer_start(&l.timer, lat_write, 1, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    qsort(l.ms, (size_t)l.i, sizeof(double), cmp_d);
    double p50 = l.i ? l.ms[l.i / 2] : -1, p99 = l.i ? l.ms[(l.i * 99) / 100] : -1;
    double pmax = l.i ? l.ms[l.i - 1] : -1;
    printf("write -> callback over %d writes: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", l.i, p50,
           p99, pmax);
    sg_watch_free(w);
    uv_close((uv_handle_t *)&l.timer, NULL);
    uv_close((uv_handle_t *)&stop, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);

    /* 2. the original's poll in C */
    int polls_c = 0;
    double poll_cpu = poll_c(root, seconds, &polls_c);
    printf("poll every 250 ms (C re-implementation) %.0f s: %.3f s CPU over %d polls\n", seconds,
           poll_cpu, polls_c);

    /* 3. the original in python */
    int polls_py = 0;
    double py_cpu = poll_python(root, seconds, &polls_py);
    if (py_cpu >= 0)
        printf("poll every 250 ms (the seed's python) %.0f s: %.3f s CPU over %d polls\n", seconds,
               py_cpu, polls_py);
    else
        printf("python3 run failed: skipped\n");

    /* A floor for ratios: getrusage counts in µs; 0 CPU would divide by 0. */
    double floor_idle = watch_idle > 1e-6 ? watch_idle : 1e-6;
    printf("ratio poll(C)/watcher idle: %.0fx", poll_cpu / floor_idle);
    if (py_cpu >= 0)
        printf(", poll(python)/watcher idle: %.0fx", py_cpu / floor_idle);
    printf("\n");

    /* The machine is shared: say how busy it was (latency depends on it). */
    double load[1] = {-1};
    getloadavg(load, 1);
    double load1 = load[0];
    printf("load average (1 min): %.2f\n", load1);
    json_t *j = json_pack(
        "{s:i, s:f, s:f, s:{s:f, s:f, s:I, s:I, s:I}, s:{s:f, s:f, s:i}, s:{s:f, s:i}, "
        "s:{s:f, s:i}, s:{s:i, s:f, s:f, s:f, s:i}, s:{s:f, s:f}}",
        "files", nfiles, "seconds", seconds, "loadavg_1m", load1,
        "watcher", "baseline_wall_s", baseline_wall, "baseline_cpu_s", baseline_cpu,
        "watches", (json_int_t)st.watches, "files_known", (json_int_t)st.files,
        "bytes_cached", (json_int_t)st.bytes_cached,
        "watcher_idle", "cpu_s", watch_idle, "cpu_per_s", watch_idle / seconds,
        "events", spurious,
        "poll_c", "cpu_s", poll_cpu, "polls", polls_c,
        "poll_python", "cpu_s", py_cpu, "polls", polls_py,
        "latency_write_to_callback_ms", "writes", l.i, "p50", p50, "p99", p99, "max", pmax,
        "settle_us", SG_WATCH_SETTLE_US,
        "ratios", "poll_c_over_watcher_idle", poll_cpu / floor_idle,
        "poll_python_over_watcher_idle", py_cpu >= 0 ? py_cpu / floor_idle : -1.0);
    if (j) {
        char *s = json_dumps(j, JSON_INDENT(2));
        char *slash = strrchr(out, '/');
        if (slash) {
            char *d = strndup(out, (size_t)(slash - out));
            sg_mkdir_p(d, 0755, &err);
            free(d);
        }
        if (sg_write_file_atomic(out, s, strlen(s), 0644, &err) < 0)
            fprintf(stderr, "%s\n", err.msg);
        else
            printf("wrote %s\n", out);
        free(s);
        json_decref(j);
    }
    free(l.ms);
    sg_rm_rf(root, &err);
    sg_udiff_global_shutdown();
    return 0;
}

/* counters: a sandbox host's counters in small files (counters.h). */
#include "state/counters.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "state/state.h"

#define COUNTERS_MAGIC "sandglass-counters 1\n"

const double sg_counters_bounds[SG_COUNTERS_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                        0.25,   0.5,   1,      2.5,   5,    10,    60,   600};
const char *const sg_ctr_exec_names[SG_CTR_EXEC_N] = {"ok", "failed", "killed", "error"};
const char *const sg_ctr_kill_names[SG_CTR_KILL_N] = {"timeout", "output_limit", "memory",
                                                      "abort",   "rollback",     "other"};
const char *const sg_ctr_limit_names[SG_CTR_LIMIT_N] = {"memory", "pids", "output", "time", "cap"};
const char *const sg_ctr_expiry_names[SG_CTR_EXPIRY_N] = {"idle", "ttl"};
const char *const sg_ctr_state_names[SG_CTR_STATE_N] = {"running", "aborted", "expired", "spare", "dead"};

/* Every member of sg_counters is a uint64_t: the file is a list of named
 * runs of them. */
#define U64S(member) (sizeof(((sg_counters *)0)->member) / sizeof(uint64_t))
static const struct field {
    const char *key;
    size_t off, n;
    bool gauge; /* a value of now: never folded into the retired sum */
} fields[] = {
    {"state", offsetof(sg_counters, state), 1, true},
    {"execs", offsetof(sg_counters, execs), U64S(execs), false},
    {"exec_time", offsetof(sg_counters, exec_time), U64S(exec_time), false},
    {"kills", offsetof(sg_counters, kills), U64S(kills), false},
    {"kill_time", offsetof(sg_counters, kill_time), U64S(kill_time), false},
    {"ooms", offsetof(sg_counters, ooms), 1, false},
    {"limits", offsetof(sg_counters, limits), U64S(limits), false},
    {"expiries", offsetof(sg_counters, expiries), U64S(expiries), false},
    {"ckpt_time", offsetof(sg_counters, ckpt_time), U64S(ckpt_time), false},
    {"spool_events", offsetof(sg_counters, spool_events), 1, true},
    {"spool_bytes", offsetof(sg_counters, spool_bytes), 1, true},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

static uint64_t *at(const sg_counters *c, const struct field *f)
{
    return (uint64_t *)((char *)(uintptr_t)c + f->off);
}

void sg_ctr_observe(sg_ctr_hist *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    size_t i = 0;
    while (i < SG_COUNTERS_BUCKETS && s > sg_counters_bounds[i])
        i++;
    h->le[i]++;
    h->count++;
    h->sum_ns += ns;
}

sg_ctr_kill sg_ctr_kill_of(const char *cause)
{
    for (int i = 0; i < SG_CTR_KILL_OTHER; i++)
        if (strcmp(cause, sg_ctr_kill_names[i]) == 0)
            return (sg_ctr_kill)i;
    return SG_CTR_KILL_OTHER;
}

/* FNV-1a: the last line's check of the lines before it. */
static uint32_t fnv1a(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

#define SUM_LINE_LEN 14 /* "sum " + 8 hex digits + "\n" ... and its NUL while made */

size_t sg_counters_format(const sg_counters *c, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "%s", COUNTERS_MAGIC);
    for (size_t i = 0; i < NFIELDS && len < size; i++) {
        len += (size_t)snprintf(buf + len, size - len, "%s", fields[i].key);
        /* fixed width: the file keeps its length, written in place */
        for (size_t k = 0; k < fields[i].n && len < size; k++)
            len += (size_t)snprintf(buf + len, size - len, " %020llu", (unsigned long long)at(c, &fields[i])[k]);
        if (len < size)
            buf[len++] = '\n';
    }
    if (len + SUM_LINE_LEN > size)
        return 0;
    len += (size_t)snprintf(buf + len, size - len, "sum %08x\n", fnv1a(buf, len));
    return len;
}

/* One line (NUL-terminated, without its newline) into c; an unknown key
 * is a newer build's and is skipped. */
static int parse_line(char *line, sg_counters *c)
{
    char *sp = strchr(line, ' ');
    if (!sp)
        return -1;
    *sp = '\0';
    for (size_t i = 0; i < NFIELDS; i++) {
        if (strcmp(line, fields[i].key) != 0)
            continue;
        char *p = sp + 1;
        for (size_t k = 0; k < fields[i].n; k++) {
            if (*p < '0' || *p > '9')
                return -1;
            errno = 0;
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            if (errno || (*end != ' ' && *end != '\0') || (*end == ' ') != (k + 1 < fields[i].n))
                return -1;
            at(c, &fields[i])[k] = v;
            p = end + (*end == ' ');
        }
        return 0;
    }
    return 0;
}

int sg_counters_parse(const char *text, size_t len, sg_counters *out)
{
    memset(out, 0, sizeof *out);
    size_t ml = strlen(COUNTERS_MAGIC);
    if (len > SG_COUNTERS_FILE_MAX || len < ml + SUM_LINE_LEN - 1 || memcmp(text, COUNTERS_MAGIC, ml) != 0 ||
        text[len - 1] != '\n')
        return -1;
    /* the last line checks the rest: a read torn by a write in place fails */
    size_t body = len - (SUM_LINE_LEN - 1);
    char want[SUM_LINE_LEN];
    snprintf(want, sizeof want, "sum %08x\n", fnv1a(text, body));
    if (memcmp(text + body, want, SUM_LINE_LEN - 1) != 0 || text[body - 1] != '\n')
        return -1; /* (each line ends in a newline: the walk below relies on it) */
    len = body;
    char copy[SG_COUNTERS_FILE_MAX + 1];
    memcpy(copy, text, len);
    copy[len] = '\0';
    for (char *line = copy + ml; *line;) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        if (parse_line(line, out) < 0)
            return -1;
        line = nl + 1;
    }
    return out->state < SG_CTR_STATE_DEAD ? 0 : -1;
}

void sg_counters_add(sg_counters *a, const sg_counters *b)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (!fields[i].gauge)
            for (size_t k = 0; k < fields[i].n; k++)
                at(a, &fields[i])[k] += at(b, &fields[i])[k];
}

/* A counters file at dfd/path into out: 1, 0 when there is none, -1 bad. */
static int read_at(int dfd, const char *path, sg_counters *out)
{
    sg_autoclose int fd = openat(dfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    /* One read: a regular file of at most a few KiB comes in one (a scan
     * makes 1,000 of them); one torn by a write in place fails its sum and
     * is read again. */
    char buf[SG_COUNTERS_FILE_MAX + 1];
    for (int attempt = 0; attempt < 3; attempt++) {
        ssize_t n;
        while ((n = pread(fd, buf, sizeof buf, 0)) < 0 && errno == EINTR)
            ;
        if (n < 0)
            return -1;
        if (sg_counters_parse(buf, (size_t)n, out) == 0)
            return 1;
    }
    return -1;
}

int sg_counters_save(const char *id, const sg_counters *c, sg_err *err)
{
    char buf[SG_COUNTERS_FILE_MAX];
    size_t len = sg_counters_format(c, buf, sizeof buf);
    sg_autofree char *p = sg_state_sandbox_path(id, "counters");
    return sg_write_file_atomic(p, buf, len, 0600, err);
}

int sg_counters_open(const char *id, sg_err *err)
{
    sg_autofree char *p = sg_state_sandbox_path(id, "counters");
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    return fd < 0 ? sg_err_sys(err, "cannot open %s", p) : fd;
}

int sg_counters_write(int fd, const sg_counters *c, sg_err *err)
{
    char buf[SG_COUNTERS_FILE_MAX];
    size_t len = sg_counters_format(c, buf, sizeof buf);
    struct stat st;
    if (pwrite(fd, buf, len, 0) != (ssize_t)len || fstat(fd, &st) < 0 ||
        (st.st_size > (off_t)len && ftruncate(fd, (off_t)len) < 0))
        return sg_err_sys(err, "cannot write the sandbox's counters");
    return 0;
}

int sg_counters_load(const char *id, sg_counters *out)
{
    sg_autofree char *p = sg_state_sandbox_path(id, "counters");
    return read_at(AT_FDCWD, p, out);
}

/* <state>/host/lock, flock'ed as op asks. */
static int host_lock(int op, sg_err *err)
{
    sg_autofree char *dir = sg_state_path("host");
    if (sg_mkdir_p(dir, 0700, err) < 0)
        return -1;
    sg_autofree char *p = sg_state_path("host/lock");
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return sg_err_sys(err, "cannot open %s", p);
    while (flock(fd, op) < 0) {
        if (errno != EINTR) {
            sg_err_sys(err, "cannot lock %s", p);
            close(fd);
            return -1;
        }
    }
    return fd;
}

int sg_counters_retire(const char *id, sg_err *err)
{
    sg_autoclose int lock = host_lock(LOCK_EX, err);
    if (lock < 0)
        return -1;
    sg_autofree char *mine = sg_state_sandbox_path(id, "counters");
    sg_counters c, sum = {0};
    if (read_at(AT_FDCWD, mine, &c) != 1)
        return unlink(mine) < 0 && errno != ENOENT ? sg_err_sys(err, "cannot remove %s", mine) : 0;
    sg_autofree char *rp = sg_state_path("host/retired");
    read_at(AT_FDCWD, rp, &sum); /* none or bad: from zero (a bad one is lost, not kept forever) */
    sg_counters_add(&sum, &c);
    sum.state = SG_CTR_STATE_RUNNING;
    sum.spool_events = sum.spool_bytes = 0;
    char buf[SG_COUNTERS_FILE_MAX];
    size_t len = sg_counters_format(&sum, buf, sizeof buf);
    if (sg_write_file_atomic(rp, buf, len, 0600, err) < 0)
        return -1;
    if (unlink(mine) < 0)
        return sg_err_sys(err, "cannot remove %s", mine);
    return 0;
}

/* Whether a supervisor holds <dfd>/<id>/supervisor.lock (state.h's
 * rule), and which pid. */
static bool held_at(int dfd, const char *id, pid_t *pid)
{
    char p[96];
    snprintf(p, sizeof p, "%s/supervisor.lock", id);
    sg_autoclose int fd = openat(dfd, p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    bool held = fd >= 0 && fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
    *pid = held ? fl.l_pid : 0;
    return held;
}

/* What a scan knew of a sandbox: its file as last read (by identity:
 * inode, size, mtime), and its supervisor as last proven by its lock. */
#define RACY_NS 1000000000ll /* > any file system's mtime granularity */
typedef struct cache_ent {
    char id[64];
    ino_t ino;
    off_t size;
    struct timespec mtime;
    long long read_ns;  /* wall time of the read, for the racy rule */
    int r;              /* read_at's answer for that file */
    sg_counters c;
    pid_t pid;          /* the lock's holder, 0: none */
    uint64_t proven_ns; /* when the lock was last looked at */
} cache_ent;

struct sg_counters_cache {
    cache_ent *v;       /* sorted by id */
    size_t n;
};

sg_counters_cache *sg_counters_cache_new(void)
{
    return sg_xcalloc(1, sizeof(sg_counters_cache));
}

void sg_counters_cache_free(sg_counters_cache *cc)
{
    if (cc)
        free(cc->v);
    free(cc);
}

static int ent_cmp(const void *a, const void *b)
{
    return strcmp(((const cache_ent *)a)->id, ((const cache_ent *)b)->id);
}

static const cache_ent *cache_find(const sg_counters_cache *cc, const char *id)
{
    cache_ent key;
    snprintf(key.id, sizeof key.id, "%s", id);
    return cc && cc->n ? bsearch(&key, cc->v, cc->n, sizeof *cc->v, ent_cmp) : NULL;
}

/* The file, from the cache when it is the one read last time. */
static void ent_file(cache_ent *e, const cache_ent *old, int dfd)
{
    char p[96];
    snprintf(p, sizeof p, "%s/counters", e->id);
    struct stat st;
    if (fstatat(dfd, p, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        e->r = errno == ENOENT ? 0 : -1;
        return;
    }
    e->ino = st.st_ino;
    e->size = st.st_size;
    e->mtime = st.st_mtim;
    /* Trusted only when the file was already that old when it was read:
     * a write in place within the mtime's granularity after that read
     * keeps size and mtime (the racy-git rule). */
    long long mns = (long long)e->mtime.tv_sec * 1000000000ll + e->mtime.tv_nsec;
    if (old && old->ino == e->ino && old->size == e->size && old->mtime.tv_sec == e->mtime.tv_sec &&
        old->mtime.tv_nsec == e->mtime.tv_nsec && old->read_ns - mns > RACY_NS) {
        e->r = old->r;
        e->c = old->c;
        e->read_ns = old->read_ns;
        return;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    e->read_ns = (long long)now.tv_sec * 1000000000ll + now.tv_nsec;
    e->r = read_at(dfd, p, &e->c);
}

/* Its supervisor: alive while the pid its lock proved is (kill 0), the
 * lock looked at again every SG_COUNTERS_PROOF_S (a pid taken again by
 * another process after the supervisor died is believed that long). */
static void ent_alive(cache_ent *e, const cache_ent *old, int dfd, uint64_t now)
{
    if (old && old->pid > 0 && now - old->proven_ns < (uint64_t)SG_COUNTERS_PROOF_S * 1000000000u &&
        (kill(old->pid, 0) == 0 || errno == EPERM)) {
        e->pid = old->pid;
        e->proven_ns = old->proven_ns;
        return;
    }
    held_at(dfd, e->id, &e->pid);
    e->proven_ns = now;
}

static void scan_one(sg_host_counters *out, sg_counters_cache *cc, cache_ent *e, int dfd, uint64_t now)
{
    const cache_ent *old = cache_find(cc, e->id);
    ent_file(e, old, dfd);
    ent_alive(e, old, dfd, now);
    out->sandboxes++;
    if (e->r < 0)
        out->bad_files++;
    if (e->pid <= 0)
        out->states[SG_CTR_STATE_DEAD]++;
    else
        out->states[e->r == 1 ? e->c.state : SG_CTR_STATE_RUNNING]++; /* no file yet: starting */
    if (e->r == 1) {
        sg_counters_add(&out->total, &e->c);
        out->total.spool_events += e->c.spool_events;
        out->total.spool_bytes += e->c.spool_bytes;
    }
}

static uint64_t count_entries(const char *rel)
{
    sg_autofree char *dir = sg_state_path(rel);
    sg_autoclosedir DIR *d = opendir(dir);
    uint64_t n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.' && sg_valid_name(de->d_name);
    return n;
}

/* Every sandbox of <state>/sb into out; the entries seen replace cc's. */
static int scan_sandboxes(sg_host_counters *out, sg_counters_cache *cc, sg_err *err)
{
    sg_autofree char *sb = sg_state_path("sb");
    sg_autoclosedir DIR *d = opendir(sb);
    if (!d && errno != ENOENT)
        return sg_err_sys(err, "cannot list %s", sb);
    cache_ent *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t now = sg_now_mono_ns();
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof v->id || !sg_valid_name(de->d_name))
            continue;
        sg_xgrow(&v, &cap, n + 1, sizeof *v);
        memset(&v[n], 0, sizeof v[n]);
        snprintf(v[n].id, sizeof v[n].id, "%s", de->d_name);
        scan_one(out, cc, &v[n++], dirfd(d), now);
    }
    if (!cc) {
        free(v);
        return 0;
    }
    if (n)
        qsort(v, n, sizeof *v, ent_cmp);
    free(cc->v);
    cc->v = v;
    cc->n = n;
    return 0;
}

int sg_counters_scan(sg_counters_cache *cc, sg_host_counters *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    sg_autoclose int lock = host_lock(LOCK_SH, err);
    if (lock < 0)
        return -1;
    sg_autofree char *rp = sg_state_path("host/retired");
    if (read_at(AT_FDCWD, rp, &out->total) < 0) {
        out->bad_files++;
        memset(&out->total, 0, sizeof out->total);
    }
    out->total.state = 0;
    out->total.spool_events = out->total.spool_bytes = 0;
    if (scan_sandboxes(out, cc, err) < 0)
        return -1;
    out->undelivered = count_entries("undelivered");
    return 0;
}

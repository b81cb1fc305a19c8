/* procevents: programs run in a sandbox, from the kernel's process events
 * connector (see procevents.h for what it can miss). */
#include "capture/procevents.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "capture/execargs.h"
#include "capture/procfs.h"

#define log_line(...) sg_log(SG_LOG_WARN, "process events: " __VA_ARGS__)

#define NBUCKETS 1024
#define RUNNING_MAX 64          /* execs in flight remembered (SG_MCP_MAX_CALLS) */
#define RCVBUF (4 * 1024 * 1024) /* the kernel's queue for us: a burst of ~60k events */
#define BATCH 256               /* events read before any is handled */

/* One program being recorded: what was read at its exec event. */
typedef struct prog {
    json_t *payload; /* pid, ppid, argv, cwd, start_ts, exec_id, background */
    uint64_t start_ns;
} prog;

/* What a held execve asked to run (sg_procevents_exec_held), read while
 * its caller was stopped: used at its exec event instead of /proc. */
typedef struct held {
    json_t *argv;
    bool truncated;
    char *path, *cwd;
} held;

/* One process of the sandbox (a thread group), by host pid. */
typedef struct pent {
    pid_t pid, ppid; /* host pids; ppid: the parent at fork */
    pid_t nspid;     /* in the sandbox's pid namespace; 0 = not read yet */
    uint32_t exec_id; /* the exec whose tree it belongs to; 0 = none known */
    int64_t command_id; /* the shell command it was forked under; 0 = none */
    bool execd;       /* ran a program of its own (not only a fork) */
    prog *rec;        /* the program being recorded, if any */
    held *held;       /* its execve, read while held; NULL: none */
    struct pent *next;
} pent;

struct sg_procevents {
    uv_loop_t *loop;
    uv_poll_t *poll; /* its own allocation: freed by its close callback, so
                      * the capture can free this at once after close */
    int fd;
    pid_t init_pid;
    char pidns[64]; /* "pid:[N]" of the sandbox */
    sg_procevents_emit_fn emit;
    void *ud;
    pent *bucket[NBUCKETS];
    size_t tracked, live, nheld;
    uint32_t running[RUNNING_MAX];
    size_t nrunning;
    uint32_t last_exec;
    /* Each shell's foreground command (sg_procevents_command), and the
     * command of the last program recorded that started after its
     * command's end (a background job's) */
    struct {
        uint32_t exec_id;
        int64_t command_id;
    } fg[RUNNING_MAX];
    size_t nfg;
    uint32_t bg_exec;
    int64_t bg_command;
    void (*before_read)(void *ud);
    void *before_ud;
    json_t *exec_argv; /* last_exec's request */
    char *exec_cwd;
    /* the window: recorded programs and those only counted */
    uint64_t recorded, dropped, untracked, lost;
    bool closed;
};

/* ---- the set of the sandbox's processes ------------------------------------- */

static pent **slot(sg_procevents *p, pid_t pid)
{
    pent **e = &p->bucket[(uint32_t)pid % NBUCKETS];
    while (*e && (*e)->pid != pid)
        e = &(*e)->next;
    return e;
}

static pent *lookup(sg_procevents *p, pid_t pid)
{
    return *slot(p, pid);
}

static pent *track(sg_procevents *p, pid_t pid, pid_t ppid, uint32_t exec_id)
{
    pent **s = slot(p, pid);
    if (*s)
        return *s;
    if (p->tracked >= SG_PROC_TRACK_MAX) {
        p->untracked++;
        return NULL;
    }
    pent *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->pid = pid;
    e->ppid = ppid;
    e->exec_id = exec_id;
    *s = e;
    p->tracked++;
    return e;
}

static void prog_free(sg_procevents *p, pent *e)
{
    if (!e->rec)
        return;
    json_decref(e->rec->payload);
    free(e->rec);
    e->rec = NULL;
    p->live--;
}

static void held_free(held *h)
{
    if (!h)
        return;
    json_decref(h->argv);
    free(h->path);
    free(h->cwd);
    free(h);
}

/* Takes what was read of e's held execve, if anything. */
static held *held_take(sg_procevents *p, pent *e)
{
    held *h = e->held;
    if (h) {
        e->held = NULL;
        p->nheld--;
    }
    return h;
}

static void untrack(sg_procevents *p, pid_t pid)
{
    pent **s = slot(p, pid);
    pent *e = *s;
    if (!e)
        return;
    *s = e->next;
    held_free(held_take(p, e));
    prog_free(p, e);
    free(e);
    p->tracked--;
}

/* ---- reading a process from /proc ------------------------------------------- */

/* The monotonic time the connector stamps as RFC 3339 wall time. */
static void fmt_ts(uint64_t mono_ns, char *buf, size_t len)
{
    struct timespec rt, mt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    int64_t now_mono = (int64_t)mt.tv_sec * 1000000000 + mt.tv_nsec;
    int64_t wall = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - (now_mono - (int64_t)mono_ns);
    time_t sec = (time_t)(wall / 1000000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%06ld+00:00", base, (long)(wall % 1000000000 / 1000));
}




/* Whether the process behind dirfd lives in the sandbox's pid namespace:
 * a host process that took a pid we tracked is never read further. */
static int ns_state(const sg_procevents *p, int dirfd)
{
    char ns[64];
    ssize_t n = readlinkat(dirfd, "ns/pid", ns, sizeof ns - 1);
    if (n <= 0)
        return -1; /* gone, or a zombie: its namespaces went at its exit */
    ns[n] = 0;
    return strcmp(ns, p->pidns) == 0;
}

static bool in_sandbox(const sg_procevents *p, int dirfd)
{
    return ns_state(p, dirfd) == 1;
}

static pid_t nspid_of(sg_procevents *p, pid_t pid)
{
    if (pid == p->init_pid)
        return 1;
    pent *e = lookup(p, pid);
    if (e && e->nspid)
        return e->nspid;
    sg_autoclose int d = sg_procfs_open(pid);
    if (d < 0 || !in_sandbox(p, d))
        return 0;
    pid_t ns = sg_procfs_nspid(d, NULL);
    if (e)
        e->nspid = ns;
    return ns;
}


/* ---- records ---------------------------------------------------------------- */

/* The shell exec's command in the foreground now, 0 when none. */
static int64_t fg_command(const sg_procevents *p, uint32_t exec_id)
{
    for (size_t i = 0; i < p->nfg; i++)
        if (p->fg[i].exec_id == exec_id)
            return p->fg[i].command_id;
    return 0;
}

static bool exec_running(const sg_procevents *p, uint32_t id)
{
    for (size_t i = 0; i < p->nrunning; i++)
        if (p->running[i] == id)
            return true;
    return false;
}

enum how { END_EXIT, END_REPLACED, END_RUNNING };

/* A program ended (exit, or it replaced itself by another exec), or is
 * still running when the sandbox ends: its event. */
static void prog_end(sg_procevents *p, pent *e, uint64_t ts_ns, enum how how, int status)
{
    if (!e->rec)
        return;
    json_t *j = e->rec->payload;
    e->rec->payload = NULL;
    char ts[48];
    fmt_ts(ts_ns, ts, sizeof ts);
    json_object_set_new(j, "end_ts", json_string(ts));
    double dur = ts_ns > e->rec->start_ns ? (double)(ts_ns - e->rec->start_ns) / 1e9 : 0;
    json_object_set_new(j, "duration_s", json_real((double)(int64_t)(dur * 1e6) / 1e6));
    if (how != END_EXIT) {
        json_object_set_new(j, "exit_code", json_null());
        json_object_set_new(j, how == END_REPLACED ? "replaced" : "running_at_end", json_true());
    } else if (WIFSIGNALED(status)) {
        json_object_set_new(j, "exit_code", json_null());
        json_object_set_new(j, "signal", json_integer(WTERMSIG(status)));
    } else {
        json_object_set_new(j, "exit_code", json_integer(WEXITSTATUS(status)));
    }
    prog_free(p, e);
    p->emit(p->ud, SG_EV_PROCESS, j);
}



/* argv and cwd of the program that starts: what its held execve showed
 * (h), else /proc (procd, -1: not this program's any more), else, for an
 * exec's own program, the exec's request. */
static void fill_program(sg_procevents *p, pent *e, json_t *j, int procd, bool top, held *h)
{
    if (h) {
        json_object_set(j, "argv", h->argv ? h->argv : json_null());
        if (h->truncated)
            json_object_set_new(j, "argv_truncated", json_true());
        json_object_set_new(j, "path", h->path ? json_string(h->path) : json_null());
        json_object_set_new(j, "cwd", h->cwd ? json_string(h->cwd) : json_null());
        json_object_set_new(j, "argv_source", json_string("execve"));
        return;
    }
    json_t *av = procd >= 0 ? sg_procfs_argv(procd) : NULL;
    if (json_is_array(av) && json_array_size(av) == 0) { /* a zombie's: its memory is gone */
        json_decref(av);
        av = NULL;
    }
    if (av)
        json_object_set_new(j, "argv_source", json_string("proc"));
    if (json_is_object(av)) { /* cut at SG_PROC_ARGV_MAX */
        json_object_set(j, "argv", json_object_get(av, "argv"));
        json_object_set_new(j, "argv_truncated", json_true());
        json_decref(av);
    } else if (av) {
        json_object_set_new(j, "argv", av);
    } else if (top && e->exec_id && p->exec_argv) { /* gone: the request says */
        json_object_set(j, "argv", p->exec_argv);
        json_object_set_new(j, "from_request", json_true());
    } else {
        json_object_set_new(j, "argv", json_null()); /* gone before we read it */
    }
    char cwd[4096];
    ssize_t n = procd >= 0 ? readlinkat(procd, "cwd", cwd, sizeof cwd - 1) : -1;
    size_t clen = 0;
    sg_autofree char *cw = n > 0 ? sg_utf8_sanitize(cwd, (size_t)n, &clen) : NULL;
    if (cw)
        json_object_set_new(j, "cwd", json_stringn(cw, clen));
    else
        json_object_set_new(j, "cwd", top && e->exec_id && p->exec_cwd ? json_string(p->exec_cwd) : json_null());
}

static void held_freep(held **h)
{
    held_free(*h);
}

/* stale: the process exec'd again since (later in the batch): /proc shows
 * the later program, so this one is recorded without argv and cwd (unless
 * its execve was held and read then). */
static void on_exec(sg_procevents *p, pid_t pid, uint64_t ts_ns, bool stale)
{
    pent *e = lookup(p, pid);
    if (!e)
        return;
    __attribute__((cleanup(held_freep))) held *h = held_take(p, e);
    sg_autoclose int d = sg_procfs_open(pid);
    int ns = d >= 0 ? ns_state(p, d) : -1;
    if (ns == 0) {
        untrack(p, pid); /* a reused pid: never ours */
        return;
    }
    if (ns < 0) /* exited already (a zombie): nothing to read, still ours */
        sg_close_reset(&d);
    int procd = stale ? -1 : d; /* what may be read of this program */
    /* init's child: the ready stub, or (stale) the stub that became the
     * exec's program at once, which the next event records */
    bool stub = h ? !h->path /* execveat(fd, "", AT_EMPTY_PATH): ours alone does that there */
                  : stale || (d >= 0 && sg_procfs_is_exec_stub(d));
    if (e->ppid == p->init_pid && !e->execd && stub)
        return;
    bool top = e->ppid == p->init_pid && !e->execd; /* an exec's own program */
    if (top)
        e->exec_id = p->nrunning ? p->last_exec : 0;
    prog_end(p, e, ts_ns, END_REPLACED, 0);
    e->execd = true;
    if (p->recorded >= SG_PROC_EVENTS_MAX || p->live >= SG_PROC_LIVE_MAX) {
        p->dropped++;
        return;
    }
    prog *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->start_ns = ts_ns;
    if (d >= 0 && !e->nspid)
        e->nspid = sg_procfs_nspid(d, NULL);
    char ts[48];
    fmt_ts(ts_ns, ts, sizeof ts);
    json_t *j = json_pack("{s:s}", "start_ts", ts);
    fill_program(p, e, j, procd, top, h);
    json_object_set_new(j, "pid", e->nspid ? json_integer(e->nspid) : json_null());
    pid_t pp = nspid_of(p, e->ppid);
    json_object_set_new(j, "ppid", pp ? json_integer(pp) : json_null());
    if (e->exec_id) {
        /* a process the shell itself forked runs the command in the
         * foreground when it was forked, or now (the shell's own exec) */
        if (!e->command_id && !top)
            e->command_id = fg_command(p, e->exec_id);
        bool bg = !exec_running(p, e->exec_id) ||
                  (e->command_id && e->command_id != fg_command(p, e->exec_id));
        json_object_set_new(j, "exec_id", json_integer(e->exec_id));
        if (e->command_id)
            json_object_set_new(j, "command_id", json_integer(e->command_id));
        json_object_set_new(j, "background", json_boolean(bg));
        if (bg && e->command_id) {
            p->bg_exec = e->exec_id;
            p->bg_command = e->command_id;
        }
    }
    r->payload = j;
    e->rec = r;
    p->live++;
    p->recorded++;
}

static void on_fork(sg_procevents *p, pid_t parent, pid_t child)
{
    pent *pe = lookup(p, parent);
    pent *ce = pe ? track(p, child, parent, pe->exec_id) : NULL;
    /* a fork of the shell runs its foreground command (a background job
     * too: bash forks it before its next prompt, after the line's mark) */
    if (ce)
        ce->command_id = pe->command_id ? pe->command_id
                       : pe->ppid == p->init_pid ? fg_command(p, pe->exec_id) : 0;
}

static void on_exit_ev(sg_procevents *p, pid_t pid, uint32_t code, uint64_t ts_ns)
{
    pent *e = lookup(p, pid);
    if (!e || pid == p->init_pid)
        return;
    prog_end(p, e, ts_ns, END_EXIT, (int)code);
    untrack(p, pid);
}

/* Every process in the sandbox's pid namespace, from /proc: at start (a
 * claimed or adopted sandbox has processes already) and after the kernel
 * dropped events. Entries that are no longer in it go. */
static void rescan(sg_procevents *p)
{
    sg_autoclosedir DIR *dir = opendir("/proc");
    if (!dir)
        return;
    struct dirent *de;
    while ((de = readdir(dir))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        /* the sandbox's processes came after its init: older pids are not
         * looked at (a pid space that wrapped since is the exception; its
         * new processes are still tracked by fork). ~4 us a process. */
        if (*end || pid <= p->init_pid || lookup(p, (pid_t)pid))
            continue;
        sg_autoclose int d = openat(dirfd(dir), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d < 0 || !in_sandbox(p, d))
            continue;
        pid_t ppid = 0;
        pid_t ns = sg_procfs_nspid(d, &ppid);
        pent *pe = lookup(p, ppid);
        pent *e = track(p, (pid_t)pid, ppid, pe ? pe->exec_id : 0);
        if (e) {
            e->nspid = ns;
            /* already running: not recorded; but a ready child (a pool's
             * spare has one) is still to become an exec's program */
            e->execd = !(ppid == p->init_pid && (sg_procfs_is_exec_stub(d) || sg_procfs_same_exe(d, p->init_pid)));
        }
    }
    for (size_t b = 0; b < NBUCKETS; b++)
        for (pent **e = &p->bucket[b]; *e;) {
            sg_autoclose int d = sg_procfs_open((*e)->pid);
            if ((*e)->pid != p->init_pid && (d < 0 || !in_sandbox(p, d))) {
                pent *gone = *e;
                *e = gone->next;
                held_free(held_take(p, gone));
                prog_free(p, gone);
                free(gone);
                p->tracked--;
            } else {
                e = &(*e)->next;
            }
        }
}

/* ---- the connector ---------------------------------------------------------- */

/* Whether a later event of the batch is an exec of the same process: then
 * /proc shows that later program, not this one. */
static bool execs_again(const struct proc_event *evs, size_t i, size_t n)
{
    pid_t pid = evs[i].event_data.exec.process_tgid;
    for (size_t j = i + 1; j < n; j++)
        if (evs[j].what == PROC_EVENT_EXEC && evs[j].event_data.exec.process_tgid == pid)
            return true;
    return false;
}

static void handle(sg_procevents *p, const struct proc_event *evs, size_t i, size_t n)
{
    const struct proc_event *ev = &evs[i];
    switch (ev->what) {
    case PROC_EVENT_FORK:
        if (ev->event_data.fork.child_pid == ev->event_data.fork.child_tgid)
            on_fork(p, ev->event_data.fork.parent_tgid, ev->event_data.fork.child_tgid);
        break;
    case PROC_EVENT_EXEC:
        on_exec(p, ev->event_data.exec.process_tgid, ev->timestamp_ns, execs_again(evs, i, n));
        break;
    case PROC_EVENT_EXIT:
        if (ev->event_data.exit.process_pid == ev->event_data.exit.process_tgid)
            on_exit_ev(p, ev->event_data.exit.process_tgid, ev->event_data.exit.exit_code,
                       ev->timestamp_ns);
        break;
    default:
        break;
    }
}

/* One recv: 0 with *ev filled, 1 for another kind of message, -1 when the
 * queue is empty (or broken). */
static int recv_one(sg_procevents *p, struct proc_event *ev)
{
    char buf[1024] __attribute__((aligned(NLMSG_ALIGNTO)));
    for (;;) {
        ssize_t got = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && errno == ENOBUFS) { /* the kernel dropped some */
            p->lost++;
            rescan(p);
            continue;
        }
        if (got <= 0)
            return -1;
        struct nlmsghdr *h = (struct nlmsghdr *)buf;
        /* NLMSG_OK by hand: the macro compares signed with unsigned */
        if ((size_t)got < sizeof *h || h->nlmsg_len < sizeof *h || h->nlmsg_len > (size_t)got ||
            h->nlmsg_type != NLMSG_DONE)
            return 1;
        const struct cn_msg *cn = NLMSG_DATA(h);
        if (cn->id.idx != CN_IDX_PROC || cn->id.val != CN_VAL_PROC ||
            h->nlmsg_len < NLMSG_LENGTH(sizeof *cn + sizeof(struct proc_event)))
            return 1;
        memcpy(ev, cn->data, sizeof *ev);
        return 0;
    }
}

/* Reads what is queued in batches: a batch is read whole before any /proc
 * read, so an exec followed by another exec of the same process in it is
 * known to be stale (the kernel sends one message per datagram). */
void sg_procevents_drain(sg_procevents *p)
{
    if (!p || p->fd < 0)
        return;
    struct proc_event evs[BATCH];
    for (;;) {
        size_t n = 0;
        int r = 0;
        while (n < BATCH && (r = recv_one(p, &evs[n])) >= 0)
            n += r == 0;
        for (size_t i = 0; i < n; i++)
            handle(p, evs, i, n);
        if (r < 0)
            return;
    }
}

static void window_end(sg_procevents *p);

static void on_readable(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    sg_procevents *p = h->data;
    if (p && p->before_read)
        p->before_read(p->before_ud); /* the marks written before these forks */
    if (h->data)
        sg_procevents_drain(h->data);
}

void sg_procevents_set_before_read(sg_procevents *p, void (*fn)(void *ud), void *ud)
{
    if (!p)
        return;
    p->before_read = fn;
    p->before_ud = ud;
}

void sg_procevents_command(sg_procevents *p, uint32_t exec_id, int64_t command_id)
{
    if (!p)
        return;
    if (!command_id)
        sg_procevents_drain(p); /* its programs' events, before it is over */
    window_end(p);
    size_t i = 0;
    while (i < p->nfg && p->fg[i].exec_id != exec_id)
        i++;
    if (i == p->nfg && (!command_id || p->nfg == RUNNING_MAX))
        return;
    if (i == p->nfg)
        p->nfg++;
    p->fg[i].exec_id = exec_id;
    p->fg[i].command_id = command_id;
    if (!command_id)
        p->fg[i] = p->fg[--p->nfg];
}

bool sg_procevents_last_background(sg_procevents *p, uint32_t *exec_id, int64_t *command_id)
{
    if (!p || !p->bg_command)
        return false;
    *exec_id = p->bg_exec;
    *command_id = p->bg_command;
    return true;
}

/* Keeps fork (not of a thread), exec and exit (of a thread group), in the
 * kernel: a host thread storm never wakes a supervisor. Loads are in
 * network byte order, so constants are too. */
#define OFF_EV (NLMSG_LENGTH(0) + offsetof(struct cn_msg, data))
#define OFF(f) ((uint32_t)(OFF_EV + offsetof(struct proc_event, f)))
static int attach_filter(int fd)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF(what)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(PROC_EVENT_EXEC), 10, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(PROC_EVENT_FORK), 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(PROC_EVENT_EXIT), 4, 9),
        /* fork: child_pid == child_tgid */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF(event_data.fork.child_tgid)),
        BPF_STMT(BPF_MISC | BPF_TAX, 0),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF(event_data.fork.child_pid)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 4, 5),
        /* exit: process_pid == process_tgid */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF(event_data.exit.process_tgid)),
        BPF_STMT(BPF_MISC | BPF_TAX, 0),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF(event_data.exit.process_pid)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, 0xffffffff),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_fprog fprog = {.len = SG_ARRAY_LEN(code), .filter = code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog);
}

static int send_op(int fd, enum proc_cn_mcast_op op)
{
    /* nlmsghdr, cn_msg, op, laid out by hand: struct cn_msg ends in a
     * flexible array, which may not sit inside another struct. */
    unsigned char msg[NLMSG_LENGTH(sizeof(struct cn_msg) + sizeof op)] = {0};
    struct nlmsghdr h = {.nlmsg_len = sizeof msg, .nlmsg_type = NLMSG_DONE,
                         .nlmsg_pid = (uint32_t)getpid()};
    struct cn_msg cn = {.id = {.idx = CN_IDX_PROC, .val = CN_VAL_PROC}, .len = sizeof op};
    memcpy(msg, &h, sizeof h);
    memcpy(msg + NLMSG_HDRLEN, &cn, sizeof cn);
    memcpy(msg + NLMSG_HDRLEN + sizeof cn, &op, sizeof op);
    return send(fd, msg, sizeof msg, 0) == (ssize_t)sizeof msg ? 0 : -1;
}

sg_procevents *sg_procevents_new(uv_loop_t *loop, pid_t init_pid, sg_procevents_emit_fn emit,
                                 void *ud, sg_err *err)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)init_pid);
    char ns[64];
    ssize_t n = readlink(path, ns, sizeof ns - 1);
    if (n <= 0) {
        sg_err_sys(err, "readlink %s", path);
        return NULL;
    }
    ns[n] = 0;
    sg_autoclose int fd = socket(PF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_CONNECTOR);
    if (fd < 0) {
        sg_err_sys(err, "the process events connector");
        return NULL;
    }
    int sz = RCVBUF;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        sg_err_sys(err, "subscribe to the process events connector");
        return NULL;
    }
    if (attach_filter(fd) < 0) {
        sg_err_sys(err, "the process events filter");
        return NULL;
    }
    if (send_op(fd, PROC_CN_MCAST_LISTEN) < 0) {
        sg_err_sys(err, "listen to process events");
        return NULL;
    }
    sg_procevents *p = calloc(1, sizeof *p);
    if (!p) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    p->fd = -1;
    p->loop = loop;
    p->init_pid = init_pid;
    memcpy(p->pidns, ns, (size_t)n + 1);
    p->emit = emit;
    p->ud = ud;
    pent *init = track(p, init_pid, 0, 0);
    if (init) {
        init->nspid = 1;
        init->execd = true;
    }
    rescan(p); /* after subscribing: nothing falls between */
    p->poll = calloc(1, sizeof *p->poll);
    if (!p->poll || uv_poll_init(loop, p->poll, fd) < 0) {
        free(p->poll);
        p->poll = NULL;
        sg_procevents_free(p);
        sg_err_set(err, EIO, "cannot poll the process events connector");
        return NULL;
    }
    p->fd = fd;
    fd = -1;
    p->poll->data = p;
    uv_poll_start(p->poll, UV_READABLE, on_readable);
    return p;
}


bool sg_procevents_exec_held(sg_procevents *p, pid_t tid, sg_execargs *a,
                             bool (*still_held)(void *ud), void *ud)
{
    if (!p || p->fd < 0 || p->closed)
        return false;
    sg_procevents_drain(p); /* its fork first: then it is tracked */
    sg_autoclose int d = sg_procfs_open(tid);
    if (d < 0 || !in_sandbox(p, d))
        return false;
    pid_t tgid = sg_procfs_tgid(d);
    pid_t nspid = sg_procfs_nspid(d, NULL);
    char cwd[4096];
    ssize_t n = readlinkat(d, "cwd", cwd, sizeof cwd - 1);
    /* Only now: if it is still held, tid was that caller all along. */
    if (!still_held(ud))
        return false;
    pent *e = tgid > 0 ? lookup(p, tgid) : NULL;
    if (!e || (!e->held && p->nheld >= SG_PROC_LIVE_MAX))
        return false; /* untracked, or too many held at once: /proc at its exec */
    held *h = calloc(1, sizeof *h);
    if (!h)
        return false;
    size_t clen = 0;
    h->cwd = n > 0 ? sg_utf8_sanitize(cwd, (size_t)n, &clen) : NULL;
    h->argv = a->argv;
    h->path = a->path;
    h->truncated = a->truncated;
    a->argv = NULL;
    a->path = NULL;
    held_free(held_take(p, e)); /* an earlier execve of it that failed */
    e->held = h;
    p->nheld++;
    if (!e->nspid && tgid == tid)
        e->nspid = nspid;
    return true;
}

/* Closes a window: what was not recorded one by one, summed up. */
static void window_end(sg_procevents *p)
{
    if (p->dropped || p->lost || p->untracked)
        p->emit(p->ud, SG_EV_LIMIT, json_pack("{s:s, s:I, s:I, s:I, s:I, s:s}", "what", "process",
            "limit", (json_int_t)SG_PROC_EVENTS_MAX, "not_reported", (json_int_t)p->dropped,
            "queue_overflows", (json_int_t)p->lost, "untracked", (json_int_t)p->untracked,
            "note", "more programs than the limit, or the kernel's queue overflowed: the rest are "
                    "not reported one by one"));
    p->recorded = p->dropped = p->lost = p->untracked = 0;
}

void sg_procevents_exec_begin(sg_procevents *p, uint32_t exec_id, json_t *argv, const char *cwd)
{
    if (!p)
        return;
    sg_procevents_drain(p);
    window_end(p);
    if (p->nrunning < RUNNING_MAX)
        p->running[p->nrunning++] = exec_id;
    p->last_exec = exec_id;
    json_decref(p->exec_argv);
    p->exec_argv = json_incref(argv);
    free(p->exec_cwd);
    p->exec_cwd = cwd ? strdup(cwd) : NULL;
}

void sg_procevents_exec_end(sg_procevents *p, uint32_t exec_id)
{
    if (!p)
        return;
    sg_procevents_drain(p);
    window_end(p);
    for (size_t i = 0; i < p->nrunning; i++)
        if (p->running[i] == exec_id) {
            p->running[i] = p->running[--p->nrunning];
            break;
        }
}

void sg_procevents_finish(sg_procevents *p)
{
    if (!p)
        return;
    sg_procevents_drain(p);
    struct timespec mt;
    clock_gettime(CLOCK_MONOTONIC, &mt);
    uint64_t now = (uint64_t)mt.tv_sec * 1000000000 + (uint64_t)mt.tv_nsec;
    for (size_t b = 0; b < NBUCKETS; b++)
        for (pent *e = p->bucket[b]; e; e = e->next)
            if (e->rec)
                prog_end(p, e, now, END_RUNNING, 0);
    window_end(p);
}

static void on_closed(uv_handle_t *h)
{
    free(h);
}

void sg_procevents_close(sg_procevents *p)
{
    if (!p || p->closed)
        return;
    p->closed = true;
    if (p->fd >= 0)
        send_op(p->fd, PROC_CN_MCAST_IGNORE);
    if (p->poll) {
        uv_poll_stop(p->poll);
        p->poll->data = NULL;
        uv_close((uv_handle_t *)p->poll, on_closed);
        p->poll = NULL;
    }
}

void sg_procevents_free(sg_procevents *p)
{
    if (!p)
        return;
    sg_procevents_close(p); /* the handle, if the caller did not */
    for (size_t b = 0; b < NBUCKETS; b++)
        while (p->bucket[b])
            untrack(p, p->bucket[b]->pid);
    if (p->fd >= 0)
        close(p->fd);
    json_decref(p->exec_argv);
    free(p->exec_cwd);
    free(p);
}

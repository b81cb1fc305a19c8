/* sv_execnotify: the sandbox's held execve calls (sandbox/execnotify.h).
 * Init sends the listener first on its connection; each held call is read
 * for the process events (capture/execargs.h, procevents.h), checked to be
 * still held, and let go. A sandbox without a capture is let go unread. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "capture/execargs.h"
#include "capture/procevents.h"
#include "sandbox/execnotify.h"
#include "supervisor/sv_execnotify.h"

/* Held calls answered per wake-up: an execve storm takes its turn with the
 * kill switch, the control socket and the exec pipes. Each held call stops
 * its caller, so a storm runs at the pace we answer it. */
#define NOTIFY_BATCH 16

bool sv_execnotify_wanted(const sv_sup *s)
{
    const char *env = getenv("SANDGLASS_EXEC_NOTIFY");
    /* rootless: no process events to feed (no CAP_NET_ADMIN) */
    return !s->rootless && !(env && strcmp(env, "0") == 0) && sg_execnotify_supported();
}

typedef struct held_call {
    int fd;
    uint64_t id;
} held_call;

static bool still_held(void *ud)
{
    held_call *h = ud;
    return sg_execnotify_valid(h->fd, h->id);
}

static void read_held(sv_sup *s, const struct seccomp_notif *n)
{
    sg_procevents *pe = sg_capture_procevents(s->cap);
    if (!pe)
        return;
    sg_execargs a;
    if (sg_execargs_read((pid_t)n->pid, &n->data, &a) < 0)
        return;
    held_call h = {s->notify.fd, n->id};
    sg_procevents_exec_held(pe, (pid_t)n->pid, &a, still_held, &h);
    sg_execargs_clear(&a);
}

uint64_t sv_execnotify_held(const sv_sup *s)
{
    return s->notify.held;
}

void sv_execnotify_unmap(sv_sup *s)
{
    if (s->notify.page)
        munmap(s->notify.page, sizeof *s->notify.page);
    s->notify.page = NULL;
}

void sv_execnotify_stop(sv_sup *s)
{
    sv_execnotify_unmap(s);
    if (s->notify.fd < 0)
        return;
    uv_poll_stop(&s->notify.poll);
    if (!uv_is_closing((uv_handle_t *)&s->notify.poll))
        uv_close((uv_handle_t *)&s->notify.poll, NULL);
    sg_close_reset(&s->notify.fd);
}

/* Tests only (test_procevents.py): while the file $SANDGLASS_TEST_HOLD_EXEC
 * names exists, a received call is held here, unanswered, after FILE.held
 * is made: the test SIGKILLs us in the window a real crash hits by chance.
 * At most 30 s. Unset (always, outside tests): nothing. */
static void test_hold(void)
{
    static const char *path;
    static bool read_env;
    if (!read_env) {
        read_env = true;
        path = getenv("SANDGLASS_TEST_HOLD_EXEC");
    }
    if (!path || access(path, F_OK) != 0)
        return;
    char held[PATH_MAX];
    if (snprintf(held, sizeof held, "%s.held", path) >= (int)sizeof held)
        return;
    int fd = open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    for (int i = 0; i < 300 && access(path, F_OK) == 0; i++)
        usleep(100000);
}

/* Where init finds the id we work on if we die before answering it. */
static void record_inflight(sv_sup *s, uint64_t id)
{
    if (!s->notify.page)
        return;
    __atomic_store_n(&s->notify.page->id, id, __ATOMIC_RELAXED);
    __atomic_store_n(&s->notify.page->set, 1, __ATOMIC_RELEASE);
}

static void on_notify(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    sv_sup *s = p->data;
    for (int i = 0; i < NOTIFY_BATCH && s->notify.fd >= 0; i++) {
        struct seccomp_notif n;
        int r = sg_execnotify_recv(s->notify.fd, &n);
        if (r < 0) { /* the sandbox is gone (no process uses the filter) */
            sv_execnotify_stop(s);
            return;
        }
        if (r == 0)
            return;
        record_inflight(s, n.id);
        test_hold();
        if (!s->notify.seen) {
            /* a supervisor before us may have died holding some */
            s->notify.seen = true;
            sg_execnotify_release_stuck(s->notify.fd, n.id);
        }
        s->notify.held++;
        read_held(s, &n);
        sg_execnotify_continue(s->notify.fd, n.id);
    }
}

/* init's in-flight page (execnotify.h): mapped, or NULL (then a call we
 * die holding waits for the sandbox's next execve). Closes page_fd. */
static sg_execnotify_inflight *map_page(int page_fd)
{
    sg_autoclose int fd = page_fd;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(sg_execnotify_inflight))
        return NULL;
    void *m = mmap(NULL, sizeof(sg_execnotify_inflight), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return m == MAP_FAILED ? NULL : m;
}

void sv_execnotify_attach(sv_sup *s, int fd, int page_fd)
{
    sg_execnotify_inflight *page = map_page(page_fd);
    /* init sends it once per connection: a second one is not ours to use */
    if (s->notify.fd >= 0 || s->notify.poll.loop || uv_poll_init(&s->loop, &s->notify.poll, fd) < 0) {
        close(fd);
        if (page)
            munmap(page, sizeof *page);
        if (s->notify.fd < 0)
            sg_log(SG_LOG_ERROR, "cannot poll the execve listener: the sandbox's execs wait until "
                                 "this supervisor goes");
        return;
    }
    s->notify.fd = fd;
    s->notify.page = page;
    s->notify.poll.data = s;
    uv_poll_start(&s->notify.poll, UV_READABLE, on_notify);
}

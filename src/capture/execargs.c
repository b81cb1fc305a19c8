/* execargs: a held execve's path and argv from its caller's memory (see
 * execargs.h). */
#include "capture/execargs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"

#define PAGE 4096u       /* reads never cross this: one fails or succeeds whole */
#define FIRST_READ 256u  /* most strings end within it */

/* Up to len bytes at addr in tid's memory, never across a PAGE boundary:
 * the bytes read (0: unreadable). */
static size_t peek(pid_t tid, uint64_t addr, void *buf, size_t len)
{
    size_t room = PAGE - (size_t)(addr % PAGE);
    if (len > room)
        len = room;
    if (addr == 0 || addr + len < addr)
        return 0;
    struct iovec local = {.iov_base = buf, .iov_len = len};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
    ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
    return n > 0 ? (size_t)n : 0;
}

/* The NUL-terminated string at addr, at most cap bytes, into buf (cap + 1
 * bytes). Its length, or -1 when its first byte is unreadable; *cut when
 * no NUL came within cap bytes or the memory ended first. */
static ssize_t peek_str(pid_t tid, uint64_t addr, char *buf, size_t cap, bool *cut)
{
    size_t have = 0;
    while (have < cap) {
        size_t want = have == 0 && cap > FIRST_READ ? FIRST_READ : cap - have;
        size_t n = peek(tid, addr + have, buf + have, want);
        if (n == 0) {
            if (have == 0)
                return -1;
            *cut = true;
            break;
        }
        char *nul = memchr(buf + have, 0, n);
        if (nul)
            return nul - buf;
        have += n;
    }
    if (have >= cap)
        *cut = true;
    buf[have] = 0;
    return (ssize_t)have;
}

static json_t *json_text(const char *s, size_t len)
{
    size_t clen = 0;
    sg_autofree char *t = sg_utf8_sanitize(s, len, &clen);
    return json_stringn(t ? t : "", t ? clen : 0);
}

/* The argv array at addr: pointers until NULL, each string within what is
 * left of the byte budget. */
static json_t *read_argv(pid_t tid, uint64_t addr, bool *cut)
{
    if (addr == 0)
        return json_array(); /* the kernel runs it with an empty argv */
    sg_autofree char *buf = malloc(SG_PROC_ARGV_MAX + 1);
    json_t *av = json_array();
    if (!buf || !av) {
        json_decref(av);
        return NULL;
    }
    size_t left = SG_PROC_ARGV_MAX;
    uintptr_t ptrs[64];
    for (size_t i = 0; i <= SG_PROC_ARGS_MAX;) {
        size_t got = peek(tid, addr + i * sizeof *ptrs, ptrs, sizeof ptrs) / sizeof *ptrs;
        if (got == 0) { /* the array runs into unmapped memory */
            *cut = true;
            break;
        }
        for (size_t k = 0; k < got; k++, i++) {
            if (ptrs[k] == 0)
                return av;
            if (i == SG_PROC_ARGS_MAX || left == 0) {
                *cut = true;
                return av;
            }
            ssize_t n = peek_str(tid, ptrs[k], buf, left, cut);
            if (n < 0) {
                *cut = true;
                return av;
            }
            json_array_append_new(av, json_text(buf, (size_t)n));
            size_t used = (size_t)n + 1; /* its NUL counts */
            left = used < left ? left - used : 0;
        }
    }
    return av;
}

int sg_execargs_read(pid_t tid, const struct seccomp_data *d, sg_execargs *out)
{
    memset(out, 0, sizeof *out);
    uint64_t path_at, argv_at;
    bool empty_ok = false;
    if (d->nr == __NR_execve) {
        path_at = d->args[0];
        argv_at = d->args[1];
    } else if (d->nr == __NR_execveat) {
        path_at = d->args[1];
        argv_at = d->args[2];
        empty_ok = (d->args[4] & AT_EMPTY_PATH) != 0;
    } else {
        return -1;
    }
    out->argv = read_argv(tid, argv_at, &out->truncated);
    char *path = malloc(SG_PROC_PATH_MAX + 1);
    bool pcut = false;
    ssize_t n = path ? peek_str(tid, path_at, path, SG_PROC_PATH_MAX, &pcut) : -1;
    if (n < 0 || (n == 0 && empty_ok)) {
        free(path);
        return 0;
    }
    size_t clen = 0;
    out->path = sg_utf8_sanitize(path, (size_t)n, &clen);
    free(path);
    out->truncated |= pcut;
    return 0;
}

void sg_execargs_clear(sg_execargs *a)
{
    json_decref(a->argv);
    free(a->path);
    memset(a, 0, sizeof *a);
}

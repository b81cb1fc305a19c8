/* spawn: the supervisor-init protocol's messages. See spawn.h. */
#include "wire/spawn.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Appends the NUL-terminated s at *off; false when it does not fit. */
static bool put_str(char *buf, size_t cap, size_t *off, const char *s)
{
    size_t l = strlen(s) + 1;
    if (l > cap - *off)
        return false;
    memcpy(buf + *off, s, l);
    *off += l;
    return true;
}

ssize_t sg_spawn_encode(void *buf, size_t cap, const sg_spawn_hdr *h, char *const *argv,
                        char *const *envp, const char *cwd)
{
    sg_spawn_hdr hdr = *h;
    hdr.argc = hdr.envc = 0;
    size_t off = sizeof hdr;
    if (cap < off)
        return -E2BIG;
    for (char *const *a = argv; *a; a++, hdr.argc++)
        if (!put_str(buf, cap, &off, *a))
            return -E2BIG;
    for (char *const *e = envp; *e; e++, hdr.envc++)
        if (!put_str(buf, cap, &off, *e))
            return -E2BIG;
    if (!put_str(buf, cap, &off, cwd))
        return -E2BIG;
    memcpy(buf, &hdr, sizeof hdr);
    return (ssize_t)off;
}

int sg_spawn_hdr_decode(const void *msg, size_t len, sg_spawn_hdr *h)
{
    if (len < sizeof *h)
        return -1;
    memcpy(h, msg, sizeof *h);
    return 0;
}

int sg_spawn_decode(char *msg, size_t len, char **strs, size_t nstrs, char ***argv_out,
                    char ***envp_out, char **cwd)
{
    sg_spawn_hdr h;
    if (sg_spawn_hdr_decode(msg, len, &h) < 0)
        return -1;
    /* Every string takes a byte at least; argv and envp each end in NULL. */
    size_t want = (size_t)h.argc + h.envc + 1;
    if (h.argc == 0 || want > len - sizeof h || want + 1 > nstrs)
        return -1;
    /* argv: strs[0..argc], NULL; envp: strs[argc+1..], NULL */
    char **argv = strs, **envp = strs + h.argc + 1;
    size_t got = 0;
    char *p = msg + sizeof h, *end = msg + len;
    while (got < want && p < end) {
        char *nul = memchr(p, '\0', (size_t)(end - p));
        if (!nul)
            return -1;
        if (got < h.argc)
            argv[got] = p;
        else if (got < (size_t)h.argc + h.envc)
            envp[got - h.argc] = p;
        else
            *cwd = p;
        got++;
        p = nul + 1;
    }
    if (got != want || p != end)
        return -1;
    argv[h.argc] = NULL;
    envp[h.envc] = NULL;
    *argv_out = argv;
    *envp_out = envp;
    return 0;
}

int sg_spawn_reply_decode(const void *msg, size_t len, sg_spawn_reply *r)
{
    if (len != sizeof *r)
        return -1;
    memcpy(r, msg, sizeof *r);
    return r->type == SG_SPAWN_SPAWNED || r->type == SG_SPAWN_EXITED || r->type == SG_SPAWN_READY ||
                   r->type == SG_SPAWN_NOTIFY
               ? 0 : -1;
}

/* libFuzzer target: the supervisor -> init messages (wire/spawn.h) as init
 * and a ready child read them. init is inside the sandbox and reads any
 * process that reaches init.sock; a ready child reads what comes on its
 * socket: both must take a broken message for what it is.
 *
 * Invariants:
 *  - sg_spawn_hdr_decode succeeds exactly for an input that holds a
 *    header, and gives its bytes;
 *  - sg_spawn_decode succeeds exactly when an oracle written here says the
 *    message is well formed (argc >= 1, exactly argc + envc + 1
 *    NUL-terminated strings filling it to its end); then argv and envp end
 *    in NULL, every string lies inside the message, and sg_spawn_encode of
 *    what it gave (same header) yields the input byte for byte;
 *  - with a string table one entry too small it fails, never writes past it. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/spawn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The oracle: counts strings without the decoder's help. */
static bool well_formed(const uint8_t *data, size_t size, const sg_spawn_hdr *h)
{
    size_t body = size - sizeof *h;
    if (h->argc == 0 || body == 0 || data[size - 1] != '\0')
        return false;
    size_t nuls = 0;
    for (size_t i = sizeof *h; i < size; i++)
        nuls += data[i] == '\0';
    return nuls == (size_t)h->argc + h->envc + 1;
}

static bool inside(const char *p, const char *msg, size_t size)
{
    return p >= msg && p < msg + size && memchr(p, '\0', (size_t)(msg + size - p));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > SG_SPAWN_MSG_MAX)
        return 0;
    sg_spawn_hdr h;
    int hr = sg_spawn_hdr_decode(data, size, &h);
    if ((hr == 0) != (size >= sizeof h) || (hr == 0 && memcmp(&h, data, sizeof h) != 0))
        abort();
    if (hr < 0)
        return 0;
    char *msg = malloc(size);
    memcpy(msg, data, size);
    size_t nstrs = size + 2; /* as sandglass-exec's table: one a byte, two NULLs */
    char **strs = calloc(nstrs, sizeof *strs);
    char **argv = NULL, **envp = NULL, *cwd = NULL;
    int r = sg_spawn_decode(msg, size, strs, nstrs, &argv, &envp, &cwd);
    if ((r == 0) != well_formed(data, size, &h))
        abort();
    if (r == 0) {
        for (uint32_t i = 0; i < h.argc; i++)
            if (!inside(argv[i], msg, size))
                abort();
        for (uint32_t i = 0; i < h.envc; i++)
            if (!inside(envp[i], msg, size))
                abort();
        if (argv[h.argc] || envp[h.envc] || !inside(cwd, msg, size))
            abort();
        char *back = malloc(size);
        ssize_t n = sg_spawn_encode(back, size, &h, argv, envp, cwd);
        if (n != (ssize_t)size || memcmp(back, data, size) != 0)
            abort();
        /* one byte less of room: refused, not cut */
        if (sg_spawn_encode(back, size - 1, &h, argv, envp, cwd) != -E2BIG)
            abort();
        free(back);
        /* a table one entry too small for argv, envp and their NULLs */
        size_t need = (size_t)h.argc + h.envc + 2;
        char **small = calloc(need, sizeof *small);
        if (sg_spawn_decode(msg, size, small, need - 1, &argv, &envp, &cwd) != -1 || small[need - 1])
            abort();
        free(small);
    }
    free(strs);
    free(msg);
    return 0;
}

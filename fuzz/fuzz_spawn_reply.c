/* libFuzzer target: the init -> supervisor messages (wire/spawn.h) as the
 * supervisor reads them. init runs in the sandbox's namespaces: what it
 * says about a pid, an exit status or an exec id must be taken for what it
 * is, never as more.
 *
 * Invariants: sg_spawn_reply_decode succeeds exactly for an input of one
 * reply's size whose type is one init sends (SPAWNED, EXITED, READY,
 * NOTIFY), and then gives the input's bytes, field for field. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/spawn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_spawn_reply r;
    memset(&r, 0xa5, sizeof r);
    int rc = sg_spawn_reply_decode(data, size, &r);
    uint32_t type = 0;
    if (size >= sizeof type)
        memcpy(&type, data, sizeof type);
    int want = size == sizeof r && (type == SG_SPAWN_SPAWNED || type == SG_SPAWN_EXITED ||
                                     type == SG_SPAWN_READY || type == SG_SPAWN_NOTIFY);
    if ((rc == 0) != want)
        abort();
    if (rc == 0 && memcmp(&r, data, sizeof r) != 0)
        abort();
    return 0;
}

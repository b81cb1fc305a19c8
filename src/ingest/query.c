/* query: URL query arguments without lws (see query.h). */
#include "ingest/query.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sg_query_arg(sg_query_frag_fn get, void *ud, const char *name_eq, char *buf, size_t len)
{
    size_t nl = strlen(name_eq);
    int found = 0;
    char frag[SG_QUERY_FRAG_MAX + 1];
    for (int i = 0;; i++) {
        int fl = get(ud, i, frag, sizeof frag);
        if (fl == -1)
            break;
        if (fl < 0 || i >= SG_QUERY_FRAGS_MAX)
            return -1;
        if (strncmp(frag, name_eq, nl) != 0)
            continue;
        size_t vl = strlen(frag + nl);
        if (found || vl + 1 > len)
            return -1;
        memcpy(buf, frag + nl, vl + 1);
        found = 1;
    }
    return found;
}

int sg_query_i64(sg_query_frag_fn get, void *ud, const char *name_eq, int64_t min, int64_t *out)
{
    char v[32];
    int r = sg_query_arg(get, ud, name_eq, v, sizeof v);
    if (r <= 0)
        return r;
    /* digits only (an optional '-'): strtoll would take spaces and '+' */
    const char *d = v[0] == '-' ? v + 1 : v;
    if (!*d || strspn(d, "0123456789") != strlen(d))
        return -1;
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < min)
        return -1;
    *out = (int64_t)x;
    return 0;
}

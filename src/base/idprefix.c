/* idprefix: the one prefix rule for sandbox ids (see idprefix.h). */
#include "base/idprefix.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

bool sg_id_matches(const char *id, const char *arg)
{
    size_t len = strlen(arg);
    return strcmp(id, arg) == 0 || (len >= SG_ID_MIN_PREFIX && strncmp(id, arg, len) == 0);
}

/* Whether ids[i] is the same as an earlier one that also begins with the
 * prefix (a sandbox of several streams is one candidate). */
static bool seen_before(const char *const *ids, size_t i, const char *arg, size_t len)
{
    for (size_t j = 0; j < i; j++)
        if (ids[j] && strncmp(ids[j], arg, len) == 0 && strcmp(ids[j], ids[i]) == 0)
            return true;
    return false;
}

int sg_id_resolve(const char *arg, const char *const *ids, size_t n, const char *where, char *out, size_t outlen,
                  sg_err *err)
{
    char vis[80];
    sg_vis(arg, strlen(arg), vis, sizeof vis);
    size_t len = strlen(arg), hits = 0;
    const char *hit = NULL;
    for (size_t i = 0; i < n && !hit; i++)
        if (ids[i] && strcmp(ids[i], arg) == 0)
            hit = ids[i];
    if (!hit && len < SG_ID_MIN_PREFIX)
        return sg_err_set(err, EINVAL, "'%s' is too short: a sandbox id prefix needs at least %d characters", vis,
                          SG_ID_MIN_PREFIX);
    char cands[SG_ID_CANDIDATES_SHOWN * 48] = "";
    for (size_t i = 0; i < n && !hit; i++) {
        if (!ids[i] || strncmp(ids[i], arg, len) != 0 || seen_before(ids, i, arg, len))
            continue;
        if (hits < SG_ID_CANDIDATES_SHOWN) {
            char v[48];
            size_t cl = strlen(cands);
            snprintf(cands + cl, sizeof cands - cl, "%s%s", hits ? ", " : "",
                     sg_vis(ids[i], strlen(ids[i]), v, sizeof v));
        }
        hits++;
    }
    if (!hit && hits == 0)
        return sg_err_set(err, ENOENT, "no sandbox '%s'%s", vis, where);
    if (!hit && hits > 1)
        return sg_err_set(err, EINVAL, "'%s' is the start of %zu sandbox ids (%s%s): give more of it", vis, hits,
                          cands, hits > SG_ID_CANDIDATES_SHOWN ? ", ..." : "");
    for (size_t i = 0; i < n && !hit; i++)
        if (ids[i] && strncmp(ids[i], arg, len) == 0)
            hit = ids[i];
    if (strlen(hit) >= outlen)
        return sg_err_set(err, ENAMETOOLONG, "sandbox id '%.64s' is too long", hit);
    memcpy(out, hit, strlen(hit) + 1);
    return 0;
}

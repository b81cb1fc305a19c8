/* idprefix: the one rule for naming a sandbox by what a user typed, for
 * every command that takes a sandbox id (the state directory's sandboxes,
 * the undelivered spools, the ingest's streams): the id itself, or a
 * unique prefix of it of SG_ID_MIN_PREFIX characters at least, so that a
 * slip ("destroy 0") never names a learner's sandbox. */
#ifndef SG_BASE_IDPREFIX_H
#define SG_BASE_IDPREFIX_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* The shortest prefix of a sandbox id that names it. */
#define SG_ID_MIN_PREFIX 4
/* The candidates an ambiguous prefix's error names at most. */
#define SG_ID_CANDIDATES_SHOWN 5

/* Whether arg names id under the rule: equal, or a prefix of it of
 * SG_ID_MIN_PREFIX characters at least (the ingest's ?prefix= filter). */
bool sg_id_matches(const char *id, const char *arg);

/* arg against the n ids (repeats count once; NULL entries are skipped):
 * 0 and the id into out (outlen bytes), or -1 with err: ENOENT "no sandbox
 * 'arg'<where>", EINVAL too short ("a sandbox id prefix needs at least 4
 * characters") or ambiguous (the first SG_ID_CANDIDATES_SHOWN ids it
 * begins, and how many), ENAMETOOLONG an id longer than out. where ends
 * the "no sandbox" message (" in the ingest's store"; "" for nothing). */
int sg_id_resolve(const char *arg, const char *const *ids, size_t n, const char *where, char *out, size_t outlen,
                  sg_err *err);

#endif

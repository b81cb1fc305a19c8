/* leafset: the exec leaves of a sandbox (its cgroups x1, x2, ...) that may
 * still hold processes: a running exec's, and those an exec left with
 * background processes in them. The supervisor kills them all on an abort
 * and removes each once it is empty; a supervisor that adopts a sandbox
 * finds them in the cgroup tree and numbers its own leaves and execs past
 * the highest. No cgroup is touched here: names only. */
#ifndef SG_LEAFSET_H
#define SG_LEAFSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_leafset {
    char **names;
    size_t n, cap;
} sg_leafset;

/* Adds a copy of name. Out of memory ends the process (sg_oom: a name
 * is small, and a leaf left untracked would escape an abort's kill). */
void sg_leafset_add(sg_leafset *ls, const char *name);

/* Removes name (one entry); false when it was not there. The order of the
 * others may change. */
bool sg_leafset_remove(sg_leafset *ls, const char *name);

bool sg_leafset_has(const sg_leafset *ls, const char *name);

void sg_leafset_free(sg_leafset *ls);

/* The highest N of the leaf names "xN" among names (NULL-terminated, may
 * be NULL), 0 when there is none. */
uint32_t sg_leafset_highest(char *const *names);

#endif

/* leafset: the exec leaves that may hold processes. See leafset.h. */
#include "supervisor/leafset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"

void sg_leafset_add(sg_leafset *ls, const char *name)
{
    sg_xgrow(&ls->names, &ls->cap, ls->n + 1, sizeof *ls->names);
    ls->names[ls->n++] = sg_xstrdup(name);
}

bool sg_leafset_remove(sg_leafset *ls, const char *name)
{
    for (size_t i = 0; i < ls->n; i++) {
        if (strcmp(ls->names[i], name) == 0) {
            free(ls->names[i]);
            ls->names[i] = ls->names[--ls->n];
            return true;
        }
    }
    return false;
}

bool sg_leafset_has(const sg_leafset *ls, const char *name)
{
    for (size_t i = 0; i < ls->n; i++)
        if (strcmp(ls->names[i], name) == 0)
            return true;
    return false;
}

void sg_leafset_free(sg_leafset *ls)
{
    for (size_t i = 0; i < ls->n; i++)
        free(ls->names[i]);
    free(ls->names);
    *ls = (sg_leafset){0};
}

uint32_t sg_leafset_highest(char *const *names)
{
    uint32_t hi = 0;
    for (char *const *l = names; l && *l; l++) {
        unsigned n;
        if (sscanf(*l, "x%u", &n) == 1 && n > hi)
            hi = n;
    }
    return hi;
}

/* labels: checkpoint labels on the supervisor's side. See labels.h. */
#include "supervisor/labels.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

bool sg_labels_full(const sg_labels *q)
{
    return q->n == SG_LABELS_MAX;
}

int sg_labels_push(sg_labels *q, const char *label, int64_t t)
{
    if (sg_labels_full(q))
        return -1;
    if (!q->v) {
        q->v = sg_xcalloc(SG_LABELS_MAX, sizeof *q->v);
        q->times = sg_xcalloc(SG_LABELS_MAX, sizeof *q->times);
    }
    q->v[q->n] = sg_xstrdup(label);
    q->times[q->n++] = t;
    return 0;
}

void sg_labels_clear(sg_labels *q)
{
    for (size_t i = 0; i < q->n; i++)
        free(q->v[i]);
    q->n = 0;
}

void sg_labels_free(sg_labels *q)
{
    sg_labels_clear(q);
    free(q->v);
    free(q->times);
    *q = (sg_labels){0};
}

int sg_labels_newest(const sg_checkpoint_info *v, size_t n, const char *label, bool same,
                     char out[SG_CHECKPOINT_ID_LEN + 1])
{
    for (size_t i = n; i-- > 0;) {
        if ((v[i].label && strcmp(v[i].label, label) == 0) == same) {
            memcpy(out, v[i].id, SG_CHECKPOINT_ID_LEN + 1);
            return 1;
        }
    }
    if (!same && n > 0) { /* only copies labelled `label`: the newest */
        memcpy(out, v[n - 1].id, SG_CHECKPOINT_ID_LEN + 1);
        return 1;
    }
    return 0;
}

bool sg_labels_is_id_prefix(const char *to)
{
    size_t n = strlen(to);
    if (n < 4 || n > SG_CHECKPOINT_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((to[i] >= '0' && to[i] <= '9') || (to[i] >= 'a' && to[i] <= 'f')))
            return false;
    return true;
}

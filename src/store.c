/* store: backend dispatch (see store.h). */
#include "store.h"

#include <errno.h>
#include <string.h>

sg_store *sg_store_open(const char *url, sg_err *err)
{
    if (!url)
        return sg_err_set(err, EINVAL, "no store given"), NULL;
    if (strncmp(url, "sqlite:", 7) == 0) {
        if (url[7] == '\0')
            return sg_err_set(err, EINVAL, "store %s: empty path", url), NULL;
        return sg_store_sqlite_open(url + 7, err);
    }
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        return sg_store_pg_open(url, err); /* libpq takes the URL as it is */
    sg_err_set(err, EINVAL,
               "store %s: unknown kind (expected sqlite:PATH or postgresql://HOST:PORT/DB)", url);
    return NULL;
}

void sg_store_close(sg_store *s)
{
    if (s)
        s->ops->close(s);
}

int sg_store_put(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err)
{
    size_t dummy;
    if (!inserted)
        inserted = &dummy;
    *inserted = 0;
    if (n == 0)
        return 0;
    return s->ops->put(s, rows, n, inserted, err);
}

int sg_store_contiguous(sg_store *s, const char *learner, const char *task,
                        const char *sandbox, int64_t *seq, sg_err *err)
{
    return s->ops->contiguous(s, learner, task, sandbox, seq, err);
}

json_t *sg_store_events(sg_store *s, const sg_store_query *q, sg_err *err)
{
    return s->ops->events(s, q, err);
}

json_t *sg_store_sandboxes(sg_store *s, sg_err *err)
{
    return s->ops->sandboxes(s, err);
}

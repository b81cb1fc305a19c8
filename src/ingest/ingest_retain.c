/* ingest_retain: the ingest's --retain-days N (ingest.h): at start and
 * then every SG_INGEST_RETAIN_EVERY_S, the sessions (streams) whose last
 * event was received more than N days ago are removed from the store
 * (store_export.h: sg_store_purge, its own connection, one transaction),
 * on libuv's thread pool so that the loop never waits on it; each pass
 * that removes something, or fails, is logged. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ingest/ingest_internal.h"
#include "ingest/store_export.h"

struct ingest_retain {
    uv_timer_t timer;
    uv_work_t work;
    char *url;
    double days;
    bool busy;
    int rc;
    int64_t removed;
    sg_err err;
};

static void retain_work(uv_work_t *w)
{
    struct ingest_retain *r = w->data;
    char cutoff[64];
    sg_store_cutoff(r->days, cutoff, sizeof cutoff);
    sg_store_purge_q q = {.older_than = cutoff};
    r->rc = sg_store_purge(r->url, &q, &r->removed, &r->err);
}

static void retain_done(uv_work_t *w, int status)
{
    struct ingest_retain *r = w->data;
    r->busy = false;
    if (status != 0)
        return; /* cancelled at stop */
    if (r->rc < 0)
        sg_log(SG_LOG_WARN, "retention (%g days): %s", r->days, r->err.msg);
    else if (r->removed > 0)
        sg_log(SG_LOG_INFO, "retention: removed %" PRId64 " events of sessions idle for more than %g days",
               r->removed, r->days);
}

static void retain_tick(uv_timer_t *t)
{
    struct ingest_retain *r = t->data;
    if (r->busy)
        return; /* the last pass is still running */
    r->busy = true;
    r->work.data = r;
    if (uv_queue_work(t->loop, &r->work, retain_work, retain_done) != 0)
        r->busy = false;
}

int ingest_retain_start(sg_ingest *ing, const sg_ingest_opts *opts, sg_err *err)
{
    if (opts->retain_days <= 0)
        return 0;
    struct ingest_retain *r = calloc(1, sizeof *r);
    if (!r || !(r->url = strdup(opts->store_url))) {
        free(r);
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    r->days = opts->retain_days;
    uv_timer_init(ing->loop, &r->timer);
    r->timer.data = r;
    uv_timer_start(&r->timer, retain_tick, 0, (uint64_t)SG_INGEST_RETAIN_EVERY_S * 1000);
    ing->retain = r;
    return 0;
}

void ingest_retain_stop(sg_ingest *ing)
{
    struct ingest_retain *r = ing->retain;
    if (!r || uv_is_closing((uv_handle_t *)&r->timer))
        return;
    uv_timer_stop(&r->timer);
    uv_close((uv_handle_t *)&r->timer, NULL);
    if (r->busy)
        uv_cancel((uv_req_t *)&r->work); /* a pass not begun yet; a running one ends */
}

void ingest_retain_free(sg_ingest *ing)
{
    struct ingest_retain *r = ing->retain;
    if (!r)
        return;
    free(r->url);
    free(r);
    ing->retain = NULL;
}

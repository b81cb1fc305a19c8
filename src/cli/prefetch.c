/* prefetch: answers fetched ahead, taken in order (prefetch.h). */
#include "cli/prefetch.h"

#include <errno.h>
#include <stdlib.h>

/* f into the queue once there is room; false: the taker stopped (f freed). */
static bool prefetch_put(sg_prefetch_q *q, sg_fetched f)
{
    pthread_mutex_lock(&q->mu);
    while (q->n == SG_PREFETCH_DEPTH && !q->stop)
        pthread_cond_wait(&q->cv, &q->mu);
    bool stop = q->stop;
    if (!stop)
        q->q[(q->head + q->n++) % SG_PREFETCH_DEPTH] = f;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (stop)
        free(f.ans);
    return !stop;
}

static void *prefetch_main(void *arg)
{
    sg_prefetch_q *q = arg;
    sg_prefetch *p = q->p;
    for (size_t job = q->first; job < p->njobs; job += SG_PREFETCHERS) {
        for (long long cursor = -1;;) {
            sg_fetched f = p->fn(p->ud, job, &cursor);
            if (!prefetch_put(q, f) || !f.ans)
                return NULL;
            if (f.last)
                break;
        }
    }
    return NULL;
}

static void prefetch_end_one(sg_prefetch_q *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->th, NULL);
    for (; q->n; q->n--, q->head = (q->head + 1) % SG_PREFETCH_DEPTH)
        free(q->q[q->head].ans);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

int sg_prefetch_start(sg_prefetch *p, size_t njobs, sg_prefetch_fn fn, void *ud)
{
    *p = (sg_prefetch){.fn = fn, .ud = ud, .njobs = njobs};
    for (; p->started < SG_PREFETCHERS && p->started < njobs; p->started++) {
        sg_prefetch_q *q = &p->f[p->started];
        *q = (sg_prefetch_q){.p = p, .first = p->started};
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->cv, NULL);
        int e = pthread_create(&q->th, NULL, prefetch_main, q);
        if (e != 0) {
            pthread_mutex_destroy(&q->mu);
            pthread_cond_destroy(&q->cv);
            sg_prefetch_end(p);
            errno = e;
            return -1;
        }
    }
    return 0;
}

sg_fetched sg_prefetch_take(sg_prefetch *p, size_t job)
{
    sg_prefetch_q *q = &p->f[job % SG_PREFETCHERS];
    pthread_mutex_lock(&q->mu);
    while (q->n == 0)
        pthread_cond_wait(&q->cv, &q->mu);
    sg_fetched f = q->q[q->head];
    q->head = (q->head + 1) % SG_PREFETCH_DEPTH;
    q->n--;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return f;
}

void sg_prefetch_end(sg_prefetch *p)
{
    for (size_t k = 0; k < p->started; k++)
        prefetch_end_one(&p->f[k]);
    p->started = 0;
}

/* prefetch: answers fetched ahead by threads of their own, taken in order
 * (`sandglass export`'s event pages, `sandglass workspace`'s contents).
 *
 * There are njobs jobs; fetcher k of SG_PREFETCHERS runs the jobs k,
 * k + SG_PREFETCHERS, ... in order, each job giving one answer or several
 * (fn says which is its last), each fetcher up to SG_PREFETCH_DEPTH
 * answers ahead of the taker, who takes the jobs in order. The ingest
 * builds one fetcher's next answer while the other's is on the wire and
 * the taker writes the one before: no side waits for another's turn. */
#ifndef SG_CLI_PREFETCH_H
#define SG_CLI_PREFETCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define SG_PREFETCHERS 2
#define SG_PREFETCH_DEPTH 2

typedef struct sg_fetched {
    char *ans;        /* the whole answer (NULL: the fetch failed, said by fn) */
    const char *body; /* its body */
    size_t len;
    int status;       /* its HTTP status, when fn gives it */
    bool last;        /* the job's last answer */
} sg_fetched;

/* One answer of job; *cursor is -1 at the job's start, and fn's own
 * between the job's answers. Runs on a fetcher's thread. */
typedef sg_fetched (*sg_prefetch_fn)(void *ud, size_t job, long long *cursor);

typedef struct sg_prefetch_q {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sg_prefetch *p;
    size_t first;     /* this fetcher's jobs: first, first + SG_PREFETCHERS, ... */
    sg_fetched q[SG_PREFETCH_DEPTH];
    size_t head, n;   /* the queue: q[head], n of them */
    bool stop;        /* the taker wants no more */
    pthread_t th;
} sg_prefetch_q;

typedef struct sg_prefetch {
    sg_prefetch_fn fn;
    void *ud;
    size_t njobs, started;
    sg_prefetch_q f[SG_PREFETCHERS];
} sg_prefetch;

/* The fetchers started: 0, or -1 with errno (those started are ended). */
int sg_prefetch_start(sg_prefetch *p, size_t njobs, sg_prefetch_fn fn, void *ud);

/* The next answer of job (the jobs taken in order, each to its last
 * answer); the caller frees its ans. */
sg_fetched sg_prefetch_take(sg_prefetch *p, size_t job);

/* The fetchers told to stop, joined, and what they queued freed. */
void sg_prefetch_end(sg_prefetch *p);

#endif

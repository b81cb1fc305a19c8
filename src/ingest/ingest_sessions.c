/* ingest_sessions: GET /v1/sessions from a summary kept in memory.
 *
 * The store's query (sg_store_sessions) groups every row of the store on
 * each request: with 1,000 sessions that was most of the console's list
 * time, on the loop thread. Here each session's summary (store.h:
 * sg_store_sessions says what each field is) is kept per ingest and brought
 * up to date at each request by reading only the rows committed since the
 * last one (the row id is given out in commit order and a reader that sees
 * id N sees every row below it, store.h): rows from every node sharing the
 * store are counted, as the query counted them, with no notice to miss.
 * The first request reads the store once whole. The answer is the query's,
 * field for field (test_sessions.py compares them).
 *
 * Memory: one summary per session (about 200 bytes and its names). */
#include "ingest/ingest_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"

#define SUM_PAGE_ROWS 1000
#define SUM_PAGE_BYTES (8 * 1024 * 1024)

typedef struct sess_sum {
    char *key[3];            /* learner, task, sandbox */
    char *started, *last;    /* min(ts), max(ts) */
    char *state;             /* the last `sandbox` event's state (by seq), NULL: none */
    int64_t cursor;          /* min(id) */
    int64_t events, commands, aborts;
    int64_t test_seq, state_seq; /* seq of the last test_result / sandbox seen, -1: none */
    bool has_exit;           /* the last test_result's exit_code is an integer */
    int64_t test_exit;
    uint64_t hash;
} sess_sum;

struct ingest_sessions {
    sess_sum *v;             /* by cursor (a new session's first id is above every id read) */
    size_t n, cap;
    size_t *slots;           /* hash -> index + 1, 0: empty */
    size_t nslots;
    int64_t tail;            /* every row up to this id is counted */
    int64_t purges;          /* the store's purge count when the summaries were read */
};

static uint64_t key_hash(const char *const k[3])
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, the three names with NULs */
    for (int i = 0; i < 3; i++)
        for (const unsigned char *p = (const unsigned char *)k[i];; p++) {
            h = (h ^ *p) * 1099511628211ULL;
            if (!*p)
                break;
        }
    return h;
}

static bool key_eq(const sess_sum *s, const char *const k[3])
{
    return !strcmp(s->key[0], k[0]) && !strcmp(s->key[1], k[1]) && !strcmp(s->key[2], k[2]);
}

static int slots_grow(ingest_sessions *c)
{
    size_t ns = c->nslots ? c->nslots * 2 : 1024;
    size_t *sl = calloc(ns, sizeof *sl);
    if (!sl)
        return -1;
    for (size_t i = 0; i < c->n; i++) {
        size_t j = c->v[i].hash & (ns - 1);
        while (sl[j])
            j = (j + 1) & (ns - 1);
        sl[j] = i + 1;
    }
    free(c->slots);
    c->slots = sl;
    c->nslots = ns;
    return 0;
}

/* The session of key k, made if new (with the row's id as its cursor). */
static sess_sum *sum_get(ingest_sessions *c, const char *const k[3], int64_t id)
{
    uint64_t h = key_hash(k);
    if (c->nslots) {
        for (size_t j = h & (c->nslots - 1); c->slots[j]; j = (j + 1) & (c->nslots - 1)) {
            sess_sum *s = &c->v[c->slots[j] - 1];
            if (s->hash == h && key_eq(s, k))
                return s;
        }
    }
    if ((c->n + 1) * 2 > c->nslots && slots_grow(c) < 0)
        return NULL;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        sess_sum *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return NULL;
        c->v = v;
        c->cap = cap;
    }
    sess_sum *s = &c->v[c->n];
    *s = (sess_sum){.cursor = id, .test_seq = -1, .state_seq = -1, .hash = h};
    for (int i = 0; i < 3; i++)
        if (!(s->key[i] = strdup(k[i]))) {
            for (int j = 0; j < i; j++)
                free(s->key[j]);
            return NULL;
        }
    size_t j = h & (c->nslots - 1);
    while (c->slots[j])
        j = (j + 1) & (c->nslots - 1);
    c->slots[j] = ++c->n;
    return s;
}

static int set_str(char **dst, const char *v)
{
    char *d = strdup(v);
    if (!d)
        return -1;
    free(*dst);
    *dst = d;
    return 0;
}

/* A test_result's exit_code or a sandbox event's state, as the query's
 * json_extract gives them (an integer, or a string of one; a string). */
static int sum_payload(sess_sum *s, const sg_store_event *e, bool test)
{
    sg_err jerr;
    sg_autojson json_t *p = sg_json_parse(e->payload, e->payload_len, &jerr);
    json_t *v = json_object_get(p, test ? "exit_code" : "state");
    if (test) {
        s->test_seq = e->seq;
        const char *str = json_string_value(v);
        char *end = NULL;
        long long x = str && *str ? strtoll(str, &end, 10) : 0;
        s->has_exit = json_is_integer(v) || (str && *str && end && !*end);
        s->test_exit = json_is_integer(v) ? (int64_t)json_integer_value(v) : (int64_t)x;
        return 0;
    }
    s->state_seq = e->seq;
    free(s->state);
    s->state = NULL;
    return json_is_string(v) ? set_str(&s->state, json_string_value(v)) : 0;
}

static int sum_row(void *ud, const sg_store_event *e)
{
    ingest_sessions *c = ud;
    const char *k[3] = {e->learner, e->task, e->sandbox};
    sess_sum *s = sum_get(c, k, e->id);
    if (!s)
        return -1;
    c->tail = e->id;
    s->events++;
    if ((!s->started || strcmp(e->ts, s->started) < 0) && set_str(&s->started, e->ts) < 0)
        return -1;
    if ((!s->last || strcmp(e->ts, s->last) > 0) && set_str(&s->last, e->ts) < 0)
        return -1;
    bool test = !strcmp(e->kind, "test_result");
    s->commands += test || !strcmp(e->kind, "run_result");
    s->aborts += !strcmp(e->kind, "session_abort");
    if ((test && e->seq > s->test_seq) || (!strcmp(e->kind, "sandbox") && e->seq > s->state_seq))
        return sum_payload(s, e, test);
    return 0;
}

/* Reads the rows committed since the last call. */
static int sum_catch_up(sg_ingest *ing, ingest_sessions *c, sg_err *err)
{
    for (;;) {
        bool cut = false;
        sg_store_query q = {.after_seq = -1, .after_id = c->tail, .limit = SUM_PAGE_ROWS,
                            .max_bytes = SUM_PAGE_BYTES, .cut = &cut};
        int n = sg_store_scan(ing->store, &q, sum_row, c, err);
        if (n < 0)
            return -1;
        if (n < SUM_PAGE_ROWS && !cut)
            return 0;
    }
}

static json_t *sum_json(const sess_sum *s)
{
    char ex[24];
    snprintf(ex, sizeof ex, "%lld", (long long)s->test_exit);
    const char *const id[3] = {s->key[0], s->key[1], s->key[2]};
    return sg_store_session_row(id, s->cursor, s->events, s->started, s->last, s->commands, s->aborts,
                                s->has_exit ? ex : NULL, s->state);
}

static bool sum_passes(const sess_sum *s, const char *const f[3])
{
    return (!f[0] || !strcmp(f[0], s->key[0])) && (!f[1] || !strcmp(f[1], s->key[1])) &&
           (!f[2] || !strcmp(f[2], s->key[2]));
}

/* The first index whose cursor is above c (v is in cursor order). */
static size_t first_above(const ingest_sessions *c, int64_t cursor)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->v[mid].cursor <= cursor)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

json_t *ingest_sessions_list(sg_ingest *ing, const sg_store_query *q, int64_t before, sg_err *err)
{
    int64_t purges;
    if (sg_store_purges(ing->store, &purges, err) < 0)
        return NULL;
    if (ing->sessions && ing->sessions->purges != purges)
        ingest_sessions_free(ing); /* rows are gone: read the store whole again */
    if (!ing->sessions && !(ing->sessions = calloc(1, sizeof *ing->sessions)))
        return NULL;
    ingest_sessions *c = ing->sessions;
    c->purges = purges;
    if (sum_catch_up(ing, c, err) < 0)
        return NULL;
    const char *const f[3] = {q->learner, q->task, q->sandbox};
    size_t limit = q->limit ? q->limit : SG_STORE_QUERY_MAX;
    json_t *arr = json_array();
    bool ok = arr != NULL;
    if (before < 0) {
        for (size_t i = first_above(c, q->after_id); ok && i < c->n && json_array_size(arr) < limit; i++)
            ok = !sum_passes(&c->v[i], f) || json_array_append_new(arr, sum_json(&c->v[i])) == 0;
    } else {
        /* newest first: down from the last below `before` (0: from the newest) */
        for (size_t i = before ? first_above(c, before - 1) : c->n; ok && i > 0 && json_array_size(arr) < limit; i--)
            ok = !sum_passes(&c->v[i - 1], f) || json_array_append_new(arr, sum_json(&c->v[i - 1])) == 0;
    }
    if (!ok) {
        json_decref(arr);
        sg_err_set(err, ENOMEM, "list sessions: out of memory");
        return NULL;
    }
    return arr;
}

void ingest_sessions_free(sg_ingest *ing)
{
    ingest_sessions *c = ing->sessions;
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        for (int k = 0; k < 3; k++)
            free(c->v[i].key[k]);
        free(c->v[i].started);
        free(c->v[i].last);
        free(c->v[i].state);
    }
    free(c->v);
    free(c->slots);
    free(c);
    ing->sessions = NULL;
}

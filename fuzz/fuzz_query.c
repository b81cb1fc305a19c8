/* libFuzzer target: the ingest's URL query arguments (src/ingest/query.c:
 * the read endpoints' filters and numbers, the handshake's ?token= and
 * identity), network bytes. The input is a query as lws hands it over:
 * split at '&' into fragments (each a C string: cut at a NUL).
 *
 * Invariants, for each argument name the ingest reads, against an oracle
 * written here:
 *  - sg_query_arg is 1 with exactly the value of the one fragment that
 *    starts with the name, 0 when none does, -1 when two do, when the value
 *    does not fit the buffer, when any fragment is longer than
 *    SG_QUERY_FRAG_MAX or there are more than SG_QUERY_FRAGS_MAX fragments
 *    — never 0 for a value it could not take (a filter silently dropped);
 *  - sg_query_i64 takes exactly an optional '-' and 1+ digits whose value
 *    is in [min, INT64_MAX], and leaves out untouched otherwise. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/query.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXF 512

typedef struct frags {
    const char *s[MAXF];
    size_t len[MAXF];
    int n;
} frags;

static int get(void *ud, int i, char *buf, size_t size)
{
    frags *f = ud;
    if (i < 0 || i >= f->n)
        return -1;
    if (f->len[i] >= size)
        return -2;
    memcpy(buf, f->s[i], f->len[i]);
    buf[f->len[i]] = 0;
    return (int)f->len[i];
}

static int oracle_arg(const frags *f, const char *name, size_t buflen, const char **val)
{
    if (f->n > SG_QUERY_FRAGS_MAX)
        return -1;
    size_t nl = strlen(name);
    int found = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->len[i] > SG_QUERY_FRAG_MAX)
            return -1;
        if (f->len[i] >= nl && memcmp(f->s[i], name, nl) == 0) {
            if (found || f->len[i] - nl + 1 > buflen)
                return -1;
            found = 1;
            *val = f->s[i] + nl;
        }
    }
    return found;
}

/* The value of a plain decimal, or false (not one, or out of range). */
static int oracle_i64(const char *v, int64_t min, int64_t *out)
{
    int neg = v[0] == '-';
    const char *d = v + neg;
    if (!*d)
        return 0;
    uint64_t acc = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return 0;
        if (acc > (UINT64_MAX - 9) / 10)
            return 0;
        acc = acc * 10 + (uint64_t)(*d - '0');
        if (acc > (uint64_t)INT64_MAX + (uint64_t)neg)
            return 0;
    }
    int64_t x = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
    if (x < min)
        return 0;
    *out = x;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *q = malloc(size + 1);
    if (!q)
        return 0;
    memcpy(q, data, size);
    q[size] = 0;
    frags f = {.n = 0};
    /* split at '&' on the bytes, each fragment a C string (cut at a NUL) */
    size_t start = 0;
    for (size_t i = 0; i <= size && f.n < MAXF; i++) {
        if (i == size || q[i] == '&') {
            q[i] = 0;
            f.s[f.n] = q + start;
            f.len[f.n] = strlen(q + start);
            f.n++;
            start = i + 1;
        }
    }
    static const char *const names[] = {"learner=", "task=", "sandbox=", "token=", "after_seq=", "limit=", "a="};
    static const size_t lens[] = {72, 72, 72, SG_TOKEN_MAX + 64, 32, 32, 2};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char buf[SG_TOKEN_MAX + 64];
        memset(buf, 0x5a, sizeof buf);
        const char *want = NULL;
        int r = sg_query_arg(get, &f, names[k], buf, lens[k]);
        int o = oracle_arg(&f, names[k], lens[k], &want);
        if (r != o)
            abort();
        if (r == 1 && strcmp(buf, want) != 0)
            abort();
        if (r == 0 && (unsigned char)buf[0] != 0x5a)
            abort(); /* written to when absent */
        int64_t mins[] = {-1, 1, INT64_MIN};
        for (size_t m = 0; m < 3; m++) {
            int64_t out = 42, ow = 0;
            int ri = sg_query_i64(get, &f, names[k], mins[m], &out);
            const char *v = NULL;
            int oa = oracle_arg(&f, names[k], 32, &v);
            int expect = oa < 0 ? -1 : oa == 0 ? 0 : oracle_i64(v, mins[m], &ow) ? 0 : -1;
            if (ri != expect)
                abort();
            if (oa == 1 && ri == 0 && out != ow)
                abort();
            if ((oa != 1 || ri != 0) && out != 42)
                abort();
        }
    }
    free(q);
    return 0;
}

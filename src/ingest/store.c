/* store: backend dispatch (see store.h). */
#include "ingest/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"

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

int sg_store_schema_check(int version, const char *where, sg_err *err)
{
    if (version <= SG_STORE_SCHEMA_VERSION)
        return 0;
    return sg_err_set(err, ENOTSUP,
                      "%s: the store's schema is version %d, newer than this sandglass knows (%d):"
                      " open it with the sandglass ingest that made it, or a newer one",
                      where, version, SG_STORE_SCHEMA_VERSION);
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

int sg_store_load_begin(sg_store *s, sg_err *err)
{
    return s->ops->load_begin(s, err);
}

int sg_store_load_put(sg_store *s, const sg_store_row *rows, size_t n, size_t *inserted, sg_err *err)
{
    size_t dummy;
    if (!inserted)
        inserted = &dummy;
    *inserted = 0;
    return n ? s->ops->load_put(s, rows, n, inserted, err) : 0;
}

int sg_store_load_end(sg_store *s, bool commit, sg_err *err)
{
    return s->ops->load_end(s, commit, err);
}

int sg_store_contiguous(sg_store *s, const char *learner, const char *task,
                        const char *sandbox, int64_t *seq, sg_err *err)
{
    return s->ops->contiguous(s, learner, task, sandbox, seq, err);
}

int sg_store_scan(sg_store *s, const sg_store_query *q, sg_store_event_fn fn, void *ud, sg_err *err)
{
    return s->ops->scan(s, q, fn, ud, err);
}

/* The length of s's first bytes (a multiple of eight) that need no
 * escape: no '"', '\\' or control below 0x20 (a row's strings are
 * mostly such; eight bytes a step, then put_str goes byte by byte). */
static size_t str_plain_prefix(const char *s, size_t len)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    size_t i = 0;
    for (; len - i >= 8; i += 8) {
        uint64_t w, q, b;
        memcpy(&w, s + i, 8);
        q = w ^ (ones * '"');
        b = w ^ (ones * '\\');
        /* a byte below 0x20, '"' or '\\' sets the high bit of its lane
         * (bytes at or above 0x80 are masked out by ~w) */
        if (((w - ones * 0x20) | (q - ones) | (b - ones)) & ~w & high)
            break;
    }
    return i;
}

/* A JSON string of s (len bytes, valid UTF-8), escaped as jansson's
 * dump_string escapes it without JSON_ENSURE_ASCII: '"', '\\', and the
 * controls below 0x20 (\b \f \n \r \t, the rest \u00XX), written at o,
 * which has room for 6 * len + 2 bytes. Past its end. */
static char *put_str(char *o, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    *o++ = '"';
    size_t run = 0; /* bytes to copy as they are */
    size_t i = str_plain_prefix(s, len);
    for (; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        memcpy(o, s + run, i - run);
        o += i - run;
        run = i + 1;
        char t = c == '"' ? '"' : c == '\\' ? '\\' : c == '\b' ? 'b' : c == '\f' ? 'f'
                 : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : 0;
        *o++ = '\\';
        if (t) {
            *o++ = t;
            continue;
        }
        memcpy(o, "u00", 3);
        o[3] = hex[c >> 4];
        o[4] = hex[c & 15];
        o += 5;
    }
    memcpy(o, s + run, len - run);
    o += len - run;
    *o++ = '"';
    return o;
}

/* key (a literal: its text and length), then v in decimal. */
static char *put_i64(char *o, const char *key, size_t klen, int64_t v)
{
    memcpy(o, key, klen);
    o += klen;
    char d[24], *e = d + sizeof d, *p = e;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    memcpy(o, p, (size_t)(e - p));
    return o + (e - p);
}

static char *put_lit(char *o, const char *lit, size_t n)
{
    memcpy(o, lit, n);
    return o + n;
}
#define PUT_LIT(o, lit) put_lit(o, lit, sizeof lit - 1)

/* The stored payload, trimmed of surrounding whitespace, when it is an
 * object's text; else "{}" (what a row whose payload did not parse gave). */
static const char *payload_text(const sg_store_event *e, size_t *len)
{
    const char *p = e->payload ? e->payload : "";
    size_t n = e->payload ? e->payload_len : 0;
    while (n > 0 && strchr(" \t\r\n", *p) && *p) {
        p++;
        n--;
    }
    while (n > 0 && strchr(" \t\r\n", p[n - 1]) && p[n - 1])
        n--;
    if (n < 2 || p[0] != '{' || p[n - 1] != '}') {
        *len = 2;
        return "{}";
    }
    *len = n;
    return p;
}

int sg_store_event_json(sg_buf *b, const sg_store_event *e)
{
    size_t plen;
    const char *p = payload_text(e, &plen);
    const char *str[] = {e->learner, e->task, e->sandbox, e->kind, e->ts, e->received};
    size_t len[SG_ARRAY_LEN(str)], all = 0;
    for (size_t k = 0; k < SG_ARRAY_LEN(str); k++)
        all += len[k] = strlen(str[k]);
    /* one reservation a row, the worst case: keys and numbers, every
     * string's bytes escaped as \u00XX */
    if (sg_buf_reserve(b, 160 + 6 * all + plen) < 0)
        return -1;
    char *o = b->data + b->len;
    o = put_i64(o, "{\"id\":", 6, e->id);
    o = put_str(PUT_LIT(o, ",\"learner\":"), str[0], len[0]);
    o = put_str(PUT_LIT(o, ",\"task\":"), str[1], len[1]);
    o = put_str(PUT_LIT(o, ",\"sandbox\":"), str[2], len[2]);
    o = put_i64(o, ",\"seq\":", 7, e->seq);
    o = put_str(PUT_LIT(o, ",\"kind\":"), str[3], len[3]);
    o = put_str(PUT_LIT(o, ",\"ts\":"), str[4], len[4]);
    o = put_str(PUT_LIT(o, ",\"received\":"), str[5], len[5]);
    char *at = o = PUT_LIT(o, ",\"payload\":");
    o = put_lit(o, p, plen);
    *o++ = '}';
    *o = '\0'; /* as sg_buf keeps its text */
    b->len = (size_t)(o - b->data);
    /* JSON's whitespace may hold CR and LF; a string cannot hold them raw */
    for (char *c = at; (c = memchr(c, '\n', (size_t)(o - c))); c++)
        *c = ' ';
    for (char *c = at; (c = memchr(c, '\r', (size_t)(o - c))); c++)
        *c = ' ';
    return 0;
}

static int tree_row(void *ud, const sg_store_event *e)
{
    json_t *p = e->payload ? json_loadb(e->payload, e->payload_len, 0, NULL) : NULL;
    json_t *row = json_pack("{s:I, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:o}", "id", (json_int_t)e->id, "learner",
                            e->learner, "task", e->task, "sandbox", e->sandbox, "seq", (json_int_t)e->seq, "kind",
                            e->kind, "ts", e->ts, "received", e->received, "payload", p ? p : json_object());
    return row && json_array_append_new(ud, row) == 0 ? 0 : -1;
}

json_t *sg_store_events(sg_store *s, const sg_store_query *q, sg_err *err)
{
    json_t *arr = json_array();
    if (!arr) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    if (sg_store_scan(s, q, tree_row, arr, err) < 0) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

int sg_store_last_id(sg_store *s, int64_t *id, sg_err *err)
{
    return s->ops->last_id(s, id, err);
}

int sg_store_revoke(sg_store *s, const char *token_id, sg_err *err)
{
    return s->ops->revoke(s, token_id, err);
}

int sg_store_revoked(sg_store *s, const char *token_id, bool *yes, sg_err *err)
{
    return s->ops->revoked(s, token_id, yes, err);
}

int sg_store_host_put(sg_store *s, const char *name, const char *info, int64_t last_seen, sg_err *err)
{
    return s->ops->host_put(s, name, info, last_seen, err);
}

json_t *sg_store_hosts(sg_store *s, const sg_store_hosts_query *q, sg_err *err)
{
    return s->ops->hosts(s, q, err);
}

int sg_store_hosts_count(sg_store *s, int64_t now, int stale_beats, int64_t *known, int64_t *stale, sg_err *err)
{
    return s->ops->hosts_count(s, now, stale_beats, known, stale, err);
}

json_t *sg_store_host_row(const char *name, const char *info, int64_t last_seen)
{
    json_t *j = json_loads(info, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return json_pack("{s:s, s:I, s:o}", "name", name, "last_seen", (json_int_t)last_seen, "info", j);
}

int sg_store_purges(sg_store *s, int64_t *n, sg_err *err)
{
    return s->ops->purges(s, n, err);
}

int sg_store_listen(sg_store *s, sg_err *err)
{
    if (!s->ops->listen)
        return sg_err_set(err, ENOTSUP, "this store has no commit notices");
    return s->ops->listen(s, err);
}

int sg_store_notified(sg_store *s)
{
    return s->ops->notified ? s->ops->notified(s) : -1;
}

json_t *sg_store_revoked_ids(sg_store *s, sg_err *err)
{
    return s->ops->revoked_ids(s, err);
}

json_t *sg_store_sandboxes(sg_store *s, sg_err *err)
{
    return s->ops->sandboxes(s, err);
}

json_t *sg_store_sessions(sg_store *s, const sg_store_query *q, sg_err *err)
{
    return s->ops->sessions(s, q, err);
}

json_t *sg_store_session_row(const char *const id[3], int64_t cursor, int64_t events, const char *started,
                             const char *last, int64_t commands, int64_t aborts, const char *test_exit,
                             const char *state)
{
    /* a sandbox destroyed or expired stays so; else an abort shows */
    bool over = state && (!strcmp(state, "destroyed") || !strcmp(state, "expired"));
    const char *shown = over ? state : aborts > 0 ? "aborted" : "active";
    char *end = NULL;
    long long ex = test_exit && *test_exit ? strtoll(test_exit, &end, 10) : 0;
    json_t *tex = test_exit && *test_exit && end && !*end ? json_integer(ex) : json_null();
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:b, s:s, s:o}", "learner", id[0], "task", id[1],
                     "sandbox", id[2], "cursor", (json_int_t)cursor, "events", (json_int_t)events, "started",
                     started ? started : "", "last_activity", last ? last : "", "commands", (json_int_t)commands,
                     "aborted", aborts > 0, "state", shown, "last_test_exit", tex);
}

int sg_store_append(sg_store *s, const sg_store_row *rows, size_t n, uint8_t *verdicts,
                    size_t *inserted, sg_err *err)
{
    size_t dummy;
    if (!inserted)
        inserted = &dummy;
    *inserted = 0;
    if (n == 0)
        return 0;
    return s->ops->append(s, rows, n, verdicts, inserted, err);
}

bool sg_store_row_same(const sg_store_row *a, const char *kind, const char *payload,
                       size_t payload_len)
{
    return kind && payload && strcmp(a->kind, kind) == 0 && a->payload_len == payload_len &&
           memcmp(a->payload, payload, payload_len) == 0;
}

/* One stream of a batch: its next seq as judged so far. */
typedef struct judge_stream {
    uint64_t hash;
    size_t first;     /* a row of this stream (for its names) */
    int64_t next;
} judge_stream;

static uint64_t stream_hash(const sg_store_row *r)
{
    uint64_t h = 1469598103934665603ULL;
    const char *parts[] = {r->learner, r->task, r->sandbox};
    for (size_t k = 0; k < 3; k++) {
        for (const unsigned char *p = (const unsigned char *)parts[k]; *p; p++)
            h = (h ^ *p) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL; /* separator: names hold no 0xff */
    }
    return h;
}

static bool same_stream(const sg_store_row *a, const sg_store_row *b)
{
    return (a->learner == b->learner || strcmp(a->learner, b->learner) == 0) &&
           (a->task == b->task || strcmp(a->task, b->task) == 0) &&
           (a->sandbox == b->sandbox || strcmp(a->sandbox, b->sandbox) == 0);
}

int sg_store_judge(const sg_store_row *rows, size_t n, uint8_t *verdicts,
                   const sg_store_judge_ops *ops, void *ctx, sg_err *err)
{
    /* Open addressing over the batch's streams: at most n of them. */
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    sg_autofree judge_stream *tab = calloc(cap, sizeof *tab);
    sg_autofree bool *used = calloc(cap, sizeof *used);
    if (!tab || !used)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const sg_store_row *r = &rows[i];
        uint64_t h = stream_hash(r);
        size_t k = (size_t)h & (cap - 1);
        while (used[k] && !(tab[k].hash == h && same_stream(&rows[tab[k].first], r)))
            k = (k + 1) & (cap - 1);
        judge_stream *st = &tab[k];
        if (!used[k]) {
            int64_t max = -1;
            if (ops->max_seq(ctx, rows, i, &max, err) < 0)
                return -1;
            used[k] = true;
            *st = (judge_stream){.hash = h, .first = i, .next = max + 1};
        }
        if (r->seq == st->next) {
            verdicts[i] = SG_STORE_NEW;
            st->next++;
            continue;
        }
        if (r->seq > st->next) {
            verdicts[i] = SG_STORE_GAP;
            continue;
        }
        /* A resend: of a row earlier in this batch, or of a stored one. */
        int same = -1;
        for (size_t j = i; j-- > st->first;) {
            const sg_store_row *o = &rows[j];
            if (o->seq == r->seq && verdicts[j] == SG_STORE_NEW && same_stream(o, r)) {
                same = sg_store_row_same(r, o->kind, o->payload, o->payload_len);
                break;
            }
        }
        if (same < 0 && ops->stored(ctx, rows, i, &same, err) < 0)
            return -1;
        verdicts[i] = same < 0 ? SG_STORE_NEW /* a hole from before the rule */
                      : same   ? SG_STORE_SAME
                               : SG_STORE_CONFLICT;
    }
    return 0;
}

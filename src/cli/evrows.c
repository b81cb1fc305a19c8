/* evrows: a /v1/events page's rows as text (cli/evrows.h). */
#include <endian.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "cli/evrows.h"

#define EV_DEPTH_MAX 32 /* deeper: jansson's (as before) */
#define EV_KEYS_MAX 48  /* keys in one object checked for duplicates; more: jansson's */
#define EV_REALS 16     /* reals' dumps remembered (a page's rows repeat a few) */

typedef struct ev_scan {
    const char *p, *end;
    sg_buf *out; /* room for the rest of the input kept ahead (ev_room) */
    json_t *real; /* a real is written by jansson, as its dump writes it */
    struct ev_real { /* reals' texts and jansson's dumps of them, seen in this page */
        unsigned char in_len, out_len;
        char in[32], out[48];
    } reals[EV_REALS];
    sg_evrow *payload_of; /* the next object is this row's payload */
    sg_evpage *pg;
    /* the members of the row being scanned and of its payload, kept here
     * until the object ends (the payload's come in the middle of the row's)
     * and then put in pg->mem, each object's together */
    sg_evmember rowmem[EV_KEYS_MAX], plmem[EV_KEYS_MAX];
} ev_scan;

/* Bytes copied as they are in a string: printable ASCII but '"' and '\\'. */
static bool ev_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

static int ev_room(ev_scan *s, size_t extra)
{
    return sg_buf_reserve(s->out, (size_t)(s->end - s->p) + extra);
}

static void ev_put(ev_scan *s, char c)
{
    s->out->data[s->out->len++] = c;
}

static void ev_ws(ev_scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* The length of the valid UTF-8 sequence (2 to 4 bytes) at p as jansson
 * takes it (no overlong form, surrogate or code point past U+10FFFF), or 0. */
static size_t ev_utf8(const unsigned char *p, const unsigned char *end)
{
    size_t n = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    if (!n || (size_t)(end - p) < n)
        return 0;
    unsigned cp = p[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
        return 0;
    return n;
}

/* An escape at p (p[0] == '\\') that jansson's dump writes the same: its
 * length, or 0 (jansson writes \u00XX, upper case, only for a control
 * character without a short form; \/ and other \u as the character). */
static size_t ev_escape(const char *p, const char *end)
{
    if (end - p < 2)
        return 0;
    if (p[1] && strchr("\"\\bfnrt", p[1]))
        return 2;
    if (p[1] != 'u' || end - p < 6 || strncmp(p + 2, "00", 2) != 0)
        return 0;
    unsigned v = 0;
    for (int i = 4; i < 6; i++) {
        const char *h = p[i] ? strchr("0123456789ABCDEF", p[i]) : NULL;
        if (!h)
            return 0;
        v = v * 16 + (unsigned)(h - "0123456789ABCDEF");
    }
    return v > 0 && v < 0x20 && v != '\b' && v != '\t' && v != '\n' && v != '\f' && v != '\r' ? 6 : 0;
}

/* The plain bytes at p (before end) copied to *o: the first byte that is
 * not ev_plain, or end (*o past the copy). Eight bytes a step, each word
 * stored whole (out has room for the rest of the input: ev_room): in a
 * word with a byte below 0x20, at or above 0x80, '"' or '\\', the lowest
 * flagged byte is the first such (a borrow only flags bytes above the one
 * it comes from), and the copy stops there. */
static const char *ev_plain_copy(const char *p, const char *end, char **o)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    char *d = *o;
    while (end - p >= 8) {
        uint64_t w, q, b, m;
        memcpy(&w, p, 8);
        memcpy(d, p, 8);
        w = le64toh(w); /* the first byte the lowest */
        q = w ^ (ones * '"');
        b = w ^ (ones * '\\');
        m = ((w - ones * 0x20) | (q - ones) | (b - ones) | w) & high;
        if (m) {
            size_t k = (size_t)__builtin_ctzll(m) >> 3;
            *o = d + k;
            return p + k;
        }
        p += 8, d += 8;
    }
    while (p < end && ev_plain((unsigned char)*p))
        *d++ = *p++;
    *o = d;
    return p;
}

/* A string (s->p at its '"'), copied; *esc whether it held an escape. */
static int ev_string(ev_scan *s, bool *esc)
{
    const char *p = s->p + 1;
    sg_buf *o = s->out;
    ev_put(s, '"');
    *esc = false;
    for (;;) {
        char *d = o->data + o->len;
        p = ev_plain_copy(p, s->end, &d);
        o->len = (size_t)(d - o->data);
        if (p >= s->end)
            return -1;
        if (*p == '"')
            break;
        size_t n = *p == '\\' ? ev_escape(p, s->end)
                              : ev_utf8((const unsigned char *)p, (const unsigned char *)s->end);
        if (!n)
            return -1; /* a raw control character, or another escape */
        *esc |= *p == '\\';
        memcpy(o->data + o->len, p, n);
        o->len += n;
        p += n;
    }
    ev_put(s, '"');
    s->p = p + 1;
    return 0;
}

static bool ev_digit(const ev_scan *s, const char *p)
{
    return p < s->end && *p >= '0' && *p <= '9';
}

/* A number: an integer copied when jansson writes it back the same, a
 * real written by jansson. */
static int ev_number(ev_scan *s)
{
    const char *p = s->p, *st = p;
    bool real = false;
    p += p < s->end && *p == '-';
    if (!ev_digit(s, p))
        return -1;
    if (*p++ != '0')
        while (ev_digit(s, p))
            p++;
    if (p < s->end && *p == '.') {
        if (!ev_digit(s, ++p))
            return -1;
        while (ev_digit(s, p))
            p++;
        real = true;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        p++;
        p += p < s->end && (*p == '+' || *p == '-');
        if (!ev_digit(s, p))
            return -1;
        while (ev_digit(s, p))
            p++;
        real = true;
    }
    size_t n = (size_t)(p - st);
    s->p = p;
    if (!real) { /* "-0" is written 0; 19 digits may be past json_int_t */
        if ((n == 2 && st[0] == '-' && st[1] == '0') || n > 18)
            return -1;
        memcpy(s->out->data + s->out->len, st, n);
        s->out->len += n;
        return 0;
    }
    char tmp[64];
    if (n >= sizeof tmp || ev_room(s, 64) < 0)
        return -1;
    unsigned h = (unsigned)n;
    for (size_t i = 0; i < n; i++)
        h = h * 31 + (unsigned char)st[i];
    struct ev_real *c = &s->reals[h % EV_REALS];
    if (c->in_len == n && !memcmp(c->in, st, n)) { /* its dump as before */
        memcpy(s->out->data + s->out->len, c->out, c->out_len);
        s->out->len += c->out_len;
        return 0;
    }
    memcpy(tmp, st, n);
    tmp[n] = '\0';
    errno = 0;
    double d = strtod(tmp, NULL);
    if ((errno == ERANGE && fabs(d) == HUGE_VAL) || !isfinite(d) || json_real_set(s->real, d) < 0)
        return -1;
    size_t w = json_dumpb(s->real, s->out->data + s->out->len, 48, JSON_ENCODE_ANY | JSON_COMPACT);
    if (w == 0 || w > 48)
        return -1;
    if (n < sizeof c->in) {
        memcpy(c->in, st, n);
        memcpy(c->out, s->out->data + s->out->len, w);
        c->in_len = (unsigned char)n, c->out_len = (unsigned char)w;
    }
    s->out->len += w;
    return 0;
}

static int ev_value(ev_scan *s, int depth, sg_evrow *row);

/* An integer's text (at most 19 bytes, checked) as its value. */
static long long ev_int(const char *v, size_t vl)
{
    bool neg = vl > 0 && v[0] == '-';
    unsigned long long u = 0; /* at most 18 digits (ev_number): no overflow */
    for (size_t i = neg; i < vl; i++)
        u = u * 10 + (unsigned)(v[i] - '0');
    return neg ? -(long long)u : (long long)u;
}

/* A row's own field (key at ko, kl bytes; its value copied at vo). */
static int ev_row_field(ev_scan *s, sg_evrow *row, size_t ko, size_t kl, size_t vo, bool vesc)
{
    const char *k = s->out->data + ko, *v = s->out->data + vo;
    size_t vl = s->out->len - vo;
    bool str = v[0] == '"', integer = !str && vl < 20;
    for (size_t i = 0; integer && i < vl; i++)
        integer = (v[i] >= '0' && v[i] <= '9') || (i == 0 && v[i] == '-');
    if (kl == 2 && !memcmp(k, "id", 2) && integer)
        row->id = ev_int(v, vl), row->has_id = true;
    else if (kl == 3 && !memcmp(k, "seq", 3) && integer)
        row->seq = ev_int(v, vl), row->has_seq = true;
    else if (((kl == 4 && !memcmp(k, "kind", 4)) || (kl == 2 && !memcmp(k, "ts", 2))) && str) {
        if (vesc)
            return -1; /* compared as text: no escape */
        bool kind = kl == 4;
        *(kind ? &row->kind_off : &row->ts_off) = vo + 1;
        *(kind ? &row->kind_len : &row->ts_len) = vl - 2;
        *(kind ? &row->has_kind : &row->has_ts) = true;
    }
    return 0;
}

/* A row's payload's field (key at ko, kl bytes; its value at vo): its
 * "label" when a string, whether it has an "error". */
static void ev_payload_field(ev_scan *s, sg_evrow *pl, size_t ko, size_t kl, size_t vo)
{
    const char *k = s->out->data + ko, *v = s->out->data + vo;
    if (kl == 5 && !memcmp(k, "label", 5) && v[0] == '"') {
        pl->label_off = vo + 1;
        pl->label_len = s->out->len - vo - 2;
        pl->has_label = true;
    } else if (kl == 5 && !memcmp(k, "error", 5)) {
        pl->has_error = true;
    }
}

/* An object's nk members (a row's or its payload's, staged in s) to
 * pg->mem: their index there. */
static int ev_members(ev_scan *s, const sg_evmember *m, size_t nk, size_t *at)
{
    sg_evpage *pg = s->pg;
    if (sg_grow(&pg->mem, &pg->mem_cap, pg->nmem + nk, sizeof *pg->mem) < 0)
        return -1;
    *at = pg->nmem;
    memcpy(pg->mem + pg->nmem, m, nk * sizeof *m);
    pg->nmem += nk;
    return 0;
}

/* An object (s->p at its '{'): its keys checked for duplicates (as the
 * parse before did), a row's own fields noted when row is given, its
 * payload's (ev_payload_field) when it is s->payload_of's; the members of
 * both kept (sg_evrow's mem, pmem). */
static int ev_object(ev_scan *s, int depth, sg_evrow *row)
{
    size_t keys[EV_KEYS_MAX][2], nk = 0;
    sg_evrow *pl = s->payload_of;
    s->payload_of = NULL;
    sg_evmember *stage = !s->pg->members ? NULL : row ? s->rowmem : pl ? s->plmem : NULL;
    if (pl)
        pl->payload_obj = true;
    ev_put(s, '{');
    s->p++;
    ev_ws(s);
    if (s->p < s->end && *s->p == '}') {
        ev_put(s, '}');
        s->p++;
        return 0;
    }
    for (;;) {
        bool esc, kesc;
        size_t ko = s->out->len + 1;
        if (s->p >= s->end || *s->p != '"' || nk == EV_KEYS_MAX || ev_string(s, &esc) < 0)
            return -1;
        size_t kl = s->out->len - 1 - ko;
        for (size_t i = 0; i < nk; i++)
            if (keys[i][1] == kl && s->out->data[keys[i][0]] == s->out->data[ko] &&
                !memcmp(s->out->data + keys[i][0], s->out->data + ko, kl))
                return -1;
        keys[nk][0] = ko, keys[nk][1] = kl, nk++;
        kesc = esc;
        ev_ws(s);
        if (s->p >= s->end || *s->p != ':')
            return -1;
        ev_put(s, ':');
        s->p++;
        ev_ws(s);
        size_t vo = s->out->len;
        bool vesc = s->p < s->end && *s->p == '"';
        if (row && kl == 7 && !memcmp(s->out->data + ko, "payload", 7) && s->p < s->end && *s->p == '{')
            s->payload_of = row; /* taken by the ev_object that value is */
        if (vesc ? ev_string(s, &vesc) < 0 : ev_value(s, depth + 1, NULL) < 0)
            return -1;
        if (row && ev_row_field(s, row, ko, kl, vo, vesc) < 0)
            return -1;
        if (pl)
            ev_payload_field(s, pl, ko, kl, vo);
        if (stage)
            stage[nk - 1] = (sg_evmember){.key_off = ko, .key_len = kl, .val_off = vo, .val_len = s->out->len - vo,
                                          .kesc = kesc, .str = s->out->data[vo] == '"', .vesc = vesc};
        ev_ws(s);
        if (s->p >= s->end || (*s->p != ',' && *s->p != '}'))
            return -1;
        ev_put(s, *s->p);
        if (*s->p++ == '}') {
            if (stage && row)
                return row->nmem = nk, ev_members(s, stage, nk, &row->mem);
            if (stage)
                return pl->npmem = nk, ev_members(s, stage, nk, &pl->pmem);
            return 0;
        }
        ev_ws(s);
    }
}

static int ev_array(ev_scan *s, int depth)
{
    ev_put(s, '[');
    s->p++;
    ev_ws(s);
    if (s->p < s->end && *s->p == ']') {
        ev_put(s, ']');
        s->p++;
        return 0;
    }
    for (;;) {
        if (ev_value(s, depth + 1, NULL) < 0)
            return -1;
        ev_ws(s);
        if (s->p >= s->end || (*s->p != ',' && *s->p != ']'))
            return -1;
        ev_put(s, *s->p);
        if (*s->p++ == ']')
            return 0;
        ev_ws(s);
    }
}

static int ev_value(ev_scan *s, int depth, sg_evrow *row)
{
    if (s->p >= s->end || depth > EV_DEPTH_MAX)
        return -1;
    bool esc;
    static const char *const lits[] = {"true", "false", "null"};
    static const size_t lit_len[] = {4, 5, 4};
    switch (*s->p) {
    case '{': return ev_object(s, depth, row);
    case '[': return ev_array(s, depth);
    case '"': return ev_string(s, &esc);
    case 't':
    case 'f':
    case 'n':
        for (size_t i = 0; i < 3; i++) {
            size_t n = lit_len[i];
            if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, lits[i], n)) {
                memcpy(s->out->data + s->out->len, lits[i], n);
                s->out->len += n;
                s->p += n;
                return 0;
            }
        }
        return -1;
    default: return ev_number(s);
    }
}

/* The page's end after its rows (",\"more\":B,...}"): its "more". */
static int ev_tail(sg_evpage *pg, const char *p, const char *end)
{
    sg_autobuf sg_buf t = {0};
    const char *k = p + 1; /* a key after the comma: "{" and the rest are then the object the page's end is */
    while (k < end && (*k == ' ' || *k == '\t' || *k == '\n' || *k == '\r'))
        k++;
    if (p >= end || *p != ',' || k >= end || *k != '"' || sg_buf_puts(&t, "{") < 0 ||
        sg_buf_append(&t, k, (size_t)(end - k)) < 0)
        return -1;
    sg_err err;
    sg_autojson json_t *j = sg_json_parse(t.data, t.len, &err);
    if (!json_is_object(j) || json_object_get(j, "events"))
        return -1;
    json_t *more = json_object_get(j, "more");
    pg->more_given = more != NULL;
    pg->more = json_is_true(more);
    return 0;
}

int sg_evpage_scan(sg_evpage *pg, const char *body, size_t len)
{
    static const char head[] = "{\"events\":[";
    sg_buf_reset(&pg->out);
    pg->n = pg->nmem = 0;
    if (len < sizeof head - 1 || memcmp(body, head, sizeof head - 1) != 0)
        return -1;
    sg_autojson json_t *real = json_real(0);
    ev_scan s = {.p = body + sizeof head - 1, .end = body + len, .out = &pg->out, .real = real, .pg = pg};
    if (!real || ev_room(&s, 1) < 0)
        return -1;
    ev_ws(&s);
    bool empty = s.p < s.end && *s.p == ']';
    while (!empty) {
        ev_ws(&s);
        if (s.p >= s.end || *s.p != '{' || ev_room(&s, 1) < 0 || sg_grow(&pg->rows, &pg->cap, pg->n + 1, sizeof *pg->rows) < 0)
            return -1;
        sg_evrow *row = &pg->rows[pg->n];
        *row = (sg_evrow){.off = pg->out.len};
        if (ev_object(&s, 1, row) < 0)
            return -1;
        row->len = pg->out.len - row->off;
        ev_put(&s, '\n');
        pg->n++;
        ev_ws(&s);
        if (s.p < s.end && *s.p == ']')
            break;
        if (s.p >= s.end || *s.p++ != ',')
            return -1;
    }
    pg->out.data[pg->out.len] = '\0';
    return ev_tail(pg, s.p + 1, s.end);
}

/* ---------------------------------------------------------------- the tree
 *
 * A row's tree from its compact text, which the scan has checked: no
 * whitespace, valid UTF-8, only the escapes ev_escape takes (no \u0000),
 * integers of at most 18 digits, reals as jansson wrote them, no
 * duplicate key, at most EV_DEPTH_MAX deep. So each value is built as
 * json_loadb would build it, without its byte-by-byte lexer. */

typedef struct ev_tree {
    const char *p, *end;
    char *tmp; /* an unescaped string (grown) */
    size_t tmp_cap;
} ev_tree;

static json_t *ev_tree_value(ev_tree *t);

/* A string at t->p (its '"'): its bytes, unescaped, at *s (n bytes). */
static int ev_tree_str(ev_tree *t, const char **s, size_t *n)
{
    const char *p = t->p + 1, *q = p;
    while (q < t->end && *q != '"' && *q != '\\')
        q++;
    if (q < t->end && *q == '"') { /* no escape: the text itself */
        *s = p, *n = (size_t)(q - p);
        t->p = q + 1;
        return 0;
    }
    const char *close = q;
    while (close < t->end && *close != '"')
        close += *close == '\\' ? 2 : 1;
    if (close >= t->end || sg_grow(&t->tmp, &t->tmp_cap, (size_t)(close - p) + 1, 1) < 0)
        return -1;
    size_t o = (size_t)(q - p);
    memcpy(t->tmp, p, o);
    while (q < close) {
        if (*q != '\\') {
            const char *e = q;
            while (e < close && *e != '\\')
                e++;
            memcpy(t->tmp + o, q, (size_t)(e - q));
            o += (size_t)(e - q);
            q = e;
            continue;
        }
        char c = q[1];
        if (c == 'u') { /* \u00XX (ev_escape): a control character */
            unsigned v = 0;
            for (int i = 2; i < 6; i++)
                v = v * 16 + (unsigned)(q[i] <= '9' ? q[i] - '0' : (q[i] | 0x20) - 'a' + 10);
            t->tmp[o++] = (char)v;
            q += 6;
            continue;
        }
        t->tmp[o++] = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
        q += 2;
    }
    *s = t->tmp, *n = o;
    t->p = close + 1;
    return 0;
}

/* One "key":value of an object at t->p, set into o: 0, or -1. */
static int ev_tree_member(ev_tree *t, json_t *o)
{
    const char *k;
    size_t kl;
    if (t->p >= t->end || *t->p != '"' || ev_tree_str(t, &k, &kl) < 0)
        return -1;
    char small[64];
    sg_autofree char *big = kl >= sizeof small ? malloc(kl + 1) : NULL;
    char *key = big ? big : small;
    if (kl >= sizeof small && !big)
        return -1;
    memcpy(key, k, kl); /* before the value: it may unescape into tmp */
    key[kl] = '\0';
    if (t->p >= t->end || *t->p++ != ':')
        return -1;
    json_t *v = ev_tree_value(t);
    return v && json_object_setn_new_nocheck(o, key, kl, v) == 0 ? 0 : -1;
}

/* An object or an array (t->p at its '{' or '['). */
static json_t *ev_tree_container(ev_tree *t)
{
    bool obj = *t->p == '{';
    char close = obj ? '}' : ']';
    json_t *c = obj ? json_object() : json_array();
    t->p++;
    if (c && t->p < t->end && *t->p == close) {
        t->p++;
        return c;
    }
    while (c) {
        json_t *v = obj ? NULL : ev_tree_value(t);
        if (obj ? ev_tree_member(t, c) < 0 : !v || json_array_append_new(c, v) < 0)
            break;
        if (t->p < t->end && *t->p == ',') {
            t->p++;
            continue;
        }
        if (t->p < t->end && *t->p++ == close)
            return c;
        break;
    }
    json_decref(c);
    return NULL;
}

static json_t *ev_tree_value(ev_tree *t)
{
    if (t->p >= t->end)
        return NULL;
    switch (*t->p) {
    case '{':
    case '[': return ev_tree_container(t);
    case '"': {
        const char *s;
        size_t n;
        return ev_tree_str(t, &s, &n) < 0 ? NULL : json_stringn_nocheck(s, n);
    }
    case 't': t->p += 4; return json_true();
    case 'f': t->p += 5; return json_false();
    case 'n': t->p += 4; return json_null();
    default: break;
    }
    const char *st = t->p;
    bool real = false;
    while (t->p < t->end && strchr("-+.eE0123456789", *t->p) && *t->p) {
        real |= *t->p == '.' || *t->p == 'e' || *t->p == 'E';
        t->p++;
    }
    char tmp[64];
    size_t n = (size_t)(t->p - st);
    if (n == 0 || n >= sizeof tmp)
        return NULL;
    memcpy(tmp, st, n);
    tmp[n] = '\0';
    return real ? json_real(strtod(tmp, NULL)) : json_integer(strtoll(tmp, NULL, 10));
}

json_t *sg_evrow_tree(const sg_evpage *pg, const sg_evrow *r)
{
    ev_tree t = {.p = pg->out.data + r->off, .end = pg->out.data + r->off + r->len};
    json_t *v = ev_tree_value(&t);
    free(t.tmp);
    if (v && t.p != t.end) {
        json_decref(v);
        return NULL;
    }
    return v;
}

void sg_evpage_free(sg_evpage *pg)
{
    sg_buf_free(&pg->out);
    free(pg->rows);
    free(pg->mem);
    *pg = (sg_evpage){0};
}

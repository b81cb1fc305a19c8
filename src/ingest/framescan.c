/* framescan: single-pass strict frame scanner (see framescan.h). */
#include "ingest/framescan.h"

#include <errno.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "wire/event.h"

/* scan results inside this file: refused (err set), or "let jansson decide" */
#define SCAN_OK 0
#define SCAN_BAD (-1)
#define SCAN_FALLBACK 1
#define SCAN_MORE 2 /* after_member: another member follows */

/* Exponent values beyond this are clamped: the verdict (overflow or not)
 * is already certain, and the sums below stay far from int64's range. */
#define EXP_CLAMP 1000000000000LL

typedef enum vtype { V_STRING, V_INT, V_REAL, V_LITERAL, V_OBJECT, V_ARRAY } vtype;

typedef struct value {
    vtype type;
    size_t start, end;  /* the value's bytes; a string's without its quotes */
    bool escaped;       /* a string with a backslash escape */
    bool negative;      /* an integer with a minus sign */
} value;

typedef struct span {
    uint32_t off, len;  /* frames are at most SG_FRAME_MAX bytes */
} span;

/* The top-level keys the schema looks at. */
enum { F_SEQ, F_KIND, F_TS, F_PAYLOAD, F_SANDBOX, F_LEARNER, F_TASK, F__COUNT };

typedef struct top {
    unsigned present;   /* 1 << F_... */
    value field[F__COUNT];
    bool unknown;       /* a key that is none of the above; the first one: */
    span unknown_key;
} top;

typedef struct scanner {
    const unsigned char *b;
    size_t len, i;
    sg_err *err;
    size_t nkeys;                    /* keys of the open objects, innermost last */
    span keys[SG_FRAMESCAN_KEYS];
} scanner;

/* Bytes that stand for themselves in a string: printable ASCII but '"' and
 * '\\'. Anything else needs a closer look (escape, end, control, UTF-8). */
static const unsigned char plain[256] = {
    [0x20 ... 0x21] = 1,
    [0x23 ... 0x5B] = 1,
    [0x5D ... 0x7F] = 1,
};

static int bad(scanner *s, size_t at, const char *what)
{
    sg_err_set(s->err, 0, "invalid JSON at byte %zu: %s", at, what);
    return SCAN_BAD;
}

/* A byte where a token should start that cannot start one. A NUL there is
 * jansson's business: after a number or a literal it skips it. */
static int unexpected(scanner *s, const char *what)
{
    if (s->i < s->len && s->b[s->i] == 0)
        return SCAN_FALLBACK;
    return bad(s, s->i, what);
}

static inline void skip_ws(scanner *s)
{
    while (s->i < s->len &&
           (s->b[s->i] == ' ' || s->b[s->i] == '\n' || s->b[s->i] == '\r' || s->b[s->i] == '\t'))
        s->i++;
}

static inline int peek(const scanner *s)
{
    return s->i < s->len ? s->b[s->i] : -1;
}

static inline bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* The four hex digits at b[i..i+3] as a code unit, or -1. */
static long hex4(const unsigned char *b, size_t i, size_t len)
{
    if (len - i < 4)
        return -1;
    long v = 0;
    for (size_t k = i; k < i + 4; k++) {
        unsigned char c = b[k];
        int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The well-formed UTF-8 sequences of two to four bytes: the Unicode
 * standard's table 3-7. Its second-byte ranges exclude overlong forms,
 * UTF-16 surrogates and anything above U+10FFFF, as jansson's
 * utf8_check_full does. */
static const struct {
    unsigned char first_lo, first_hi, n, second_lo, second_hi;
} utf8_forms[] = {
    {0xC2, 0xDF, 2, 0x80, 0xBF},
    {0xE0, 0xE0, 3, 0xA0, 0xBF},
    {0xE1, 0xEC, 3, 0x80, 0xBF},
    {0xED, 0xED, 3, 0x80, 0x9F},
    {0xEE, 0xEF, 3, 0x80, 0xBF},
    {0xF0, 0xF0, 4, 0x90, 0xBF},
    {0xF1, 0xF3, 4, 0x80, 0xBF},
    {0xF4, 0xF4, 4, 0x80, 0x8F},
};

/* Length of the well-formed sequence at b[i] (a byte >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *b, size_t i, size_t len)
{
    for (size_t f = 0; f < SG_ARRAY_LEN(utf8_forms); f++) {
        if (b[i] < utf8_forms[f].first_lo || b[i] > utf8_forms[f].first_hi)
            continue;
        size_t n = utf8_forms[f].n;
        if (len - i < n || b[i + 1] < utf8_forms[f].second_lo || b[i + 1] > utf8_forms[f].second_hi)
            return 0;
        for (size_t k = 2; k < n; k++)
            if (b[i + k] < 0x80 || b[i + k] > 0xBF)
                return 0;
        return n;
    }
    return 0;
}

/* One escape at b[i] == '\\'; returns its length, or 0 (err set). */
static size_t scan_escape(scanner *s, size_t i)
{
    const unsigned char *b = s->b;
    if (i + 1 >= s->len)
        return bad(s, i, "unterminated string"), 0;
    switch (b[i + 1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return 2;
    case 'u':
        break;
    default:
        return bad(s, i, "invalid escape"), 0;
    }
    long u = hex4(b, i + 2, s->len);
    if (u < 0)
        return bad(s, i, "invalid \\u escape"), 0;
    if (u == 0)
        return bad(s, i, "\\u0000 is not allowed"), 0;
    if (u >= 0xDC00 && u <= 0xDFFF)
        return bad(s, i, "lone low surrogate escape"), 0;
    if (u < 0xD800 || u > 0xDBFF)
        return 6;
    /* a high surrogate: the low one must follow at once */
    if (i + 7 >= s->len || b[i + 6] != '\\' || b[i + 7] != 'u')
        return bad(s, i, "high surrogate escape without a low one"), 0;
    long lo = hex4(b, i + 8, s->len);
    if (lo < 0)
        return bad(s, i + 6, "invalid \\u escape"), 0;
    if (lo < 0xDC00 || lo > 0xDFFF)
        return bad(s, i, "high surrogate escape without a low one"), 0;
    return 12;
}

/* Whether all eight bytes of w are plain: no '"', '\\', byte < 0x20 or
 * byte >= 0x80. The usual bit tricks: x - 0x01.. sets a byte's high bit
 * where x had a zero byte (x ^ c: a byte equal to c), w - 0x20.. where w
 * had a byte below 0x20; a borrow only sets more high bits above the
 * first such byte, so "none" is exact. */
static inline bool word_plain(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull;
    uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
    uint64_t t = ((q - ones) & ~q) | ((bs - ones) & ~bs) | (w - ones * 0x20) | w;
    return (t & (ones * 0x80)) == 0;
}

/* The string at b[s->i] == '"'; on return s->i is past its closing quote. */
static int scan_string(scanner *s, bool *escaped)
{
    const unsigned char *b = s->b;
    size_t i = s->i + 1, len = s->len;
    *escaped = false;
    for (;;) {
        /* most string bytes are plain ASCII: skip them a word at a time */
        for (uint64_t w; len - i >= 8 && (memcpy(&w, b + i, 8), word_plain(w));)
            i += 8;
        while (i < len && plain[b[i]])
            i++;
        if (i >= len)
            return bad(s, s->i, "unterminated string");
        unsigned char c = b[i];
        size_t n;
        if (c == '"') {
            s->i = i + 1;
            return SCAN_OK;
        } else if (c == '\\') {
            *escaped = true;
            if (!(n = scan_escape(s, i)))
                return SCAN_BAD;
        } else if (c < 0x20) {
            return bad(s, i, "control character in a string");
        } else if (!(n = utf8_len(b, i, len))) {
            return bad(s, i, "invalid UTF-8");
        }
        i += n;
    }
}

/* A real overflows (jansson refuses it) iff strtod gives +-HUGE_VAL. With
 * its first significant digit at 10^(m-1) the value lies in [10^(m-1),
 * 10^m): m <= 308 is below DBL_MAX (1.797e308), m >= 310 is above it;
 * m == 309 needs the exact rounding, which jansson decides. */
static int real_overflow(scanner *s, size_t start, size_t int_end, size_t frac_start,
                         size_t frac_end, long long exp)
{
    const unsigned char *b = s->b;
    long long m;
    size_t k = start;
    while (k < int_end && b[k] == '0')
        k++;
    if (k < int_end) {
        m = (long long)(int_end - k);
    } else {
        k = frac_start;
        while (k < frac_end && b[k] == '0')
            k++;
        if (k == frac_end)
            return SCAN_OK; /* zero, whatever the exponent */
        m = -(long long)(k - frac_start);
    }
    m += exp;
    if (m <= 308)
        return SCAN_OK;
    if (m == 309)
        return SCAN_FALLBACK;
    return bad(s, start, "real number overflow");
}

/* A number per RFC 8259's grammar, as jansson reads it: integers (no '.',
 * no exponent) must fit in int64. */
static int scan_number(scanner *s, value *v)
{
    const unsigned char *b = s->b;
    size_t i = s->i, len = s->len;
    v->negative = b[i] == '-';
    if (v->negative)
        i++;
    size_t int_start = i;
    if (i < len && b[i] == '0') {
        i++;
        if (i < len && is_digit(b[i]))
            return bad(s, int_start, "leading zero in a number");
    } else if (i < len && is_digit(b[i])) {
        while (i < len && is_digit(b[i]))
            i++;
    } else {
        return bad(s, s->i, "invalid number");
    }
    size_t int_end = i, frac_start = i, frac_end = i;
    bool real = false;
    if (i < len && b[i] == '.') {
        real = true;
        frac_start = ++i;
        if (i >= len || !is_digit(b[i]))
            return bad(s, i, "digit expected after '.'");
        while (i < len && is_digit(b[i]))
            i++;
        frac_end = i;
    }
    long long exp = 0;
    if (i < len && (b[i] == 'e' || b[i] == 'E')) {
        real = true;
        i++;
        bool eneg = i < len && b[i] == '-';
        if (i < len && (b[i] == '-' || b[i] == '+'))
            i++;
        if (i >= len || !is_digit(b[i]))
            return bad(s, i, "digit expected in exponent");
        while (i < len && is_digit(b[i])) {
            if (exp < EXP_CLAMP)
                exp = exp * 10 + (b[i] - '0');
            i++;
        }
        if (eneg)
            exp = -exp;
    }
    s->i = i;
    if (real) {
        v->type = V_REAL;
        return real_overflow(s, int_start, int_end, frac_start, frac_end, exp);
    }
    v->type = V_INT;
    /* no leading zeros: more digits is larger; as many, compare as text */
    size_t nd = int_end - int_start;
    const char *limit = v->negative ? "9223372036854775808" : "9223372036854775807";
    if (nd > 19 || (nd == 19 && memcmp(b + int_start, limit, 19) > 0))
        return bad(s, s->i - nd, "integer out of the int64 range");
    return SCAN_OK;
}

static int scan_literal(scanner *s, const char *word)
{
    size_t n = strlen(word);
    if (s->len - s->i < n || memcmp(s->b + s->i, word, n) != 0)
        return bad(s, s->i, "invalid literal");
    s->i += n;
    return SCAN_OK;
}

static int scan_value(scanner *s, int depth, value *v);

static inline bool same_key(const scanner *s, span a, span b)
{
    /* a.off is in the buffer even for "": it is the closing quote */
    return a.len == b.len && s->b[a.off] == s->b[b.off] &&
           memcmp(s->b + a.off, s->b + b.off, a.len) == 0;
}

/* Which of the schema's keys, or F__COUNT (constant-length compares). */
static int field_of(const unsigned char *k, size_t len)
{
#define IS(lit) (memcmp(k, lit, sizeof lit - 1) == 0)
    switch (len) {
    case 2:
        return IS("ts") ? F_TS : F__COUNT;
    case 3:
        return IS("seq") ? F_SEQ : F__COUNT;
    case 4:
        return IS("kind") ? F_KIND : F__COUNT;
    case 7:
        return IS("payload") ? F_PAYLOAD : IS("task_id") ? F_TASK : F__COUNT;
    case 10:
        return IS("sandbox_id") ? F_SANDBOX : IS("learner_id") ? F_LEARNER : F__COUNT;
    default:
        return F__COUNT;
    }
#undef IS
}

/* At '{' or '[': steps in; true (and past close) if the container is empty. */
static bool opens_empty(scanner *s, int close)
{
    s->i++;
    skip_ws(s);
    if (peek(s) != close)
        return false;
    s->i++;
    return true;
}

/* After a member: SCAN_MORE past a ',', SCAN_OK past close, or an error. */
static int after_member(scanner *s, int close, const char *what)
{
    skip_ws(s);
    if (peek(s) == ',') {
        s->i++;
        skip_ws(s);
        return SCAN_MORE;
    }
    if (peek(s) != close)
        return unexpected(s, what);
    s->i++;
    return SCAN_OK;
}

/* The object at b[s->i] == '{'. The frame's own object (t != NULL) also
 * notes where the fields the schema checks stand. */
static int scan_object(scanner *s, int depth, top *t)
{
    size_t base = s->nkeys;
    if (opens_empty(s, '}'))
        return SCAN_OK;
    for (;;) {
        if (peek(s) != '"')
            return unexpected(s, "string or '}' expected");
        bool esc;
        size_t kstart = s->i + 1;
        int r = scan_string(s, &esc);
        if (r != SCAN_OK)
            return r;
        /* Keys are compared after unescaping; escaped keys are rare: jansson. */
        if (esc)
            return SCAN_FALLBACK;
        span key = {(uint32_t)kstart, (uint32_t)(s->i - 1 - kstart)};
        /* Pairwise compare is fine for small objects; bigger: jansson's hash. */
        if (s->nkeys - base >= SG_FRAMESCAN_OBJ_KEYS || s->nkeys >= SG_FRAMESCAN_KEYS)
            return SCAN_FALLBACK;
        for (size_t k = base; k < s->nkeys; k++)
            if (same_key(s, s->keys[k], key))
                return bad(s, kstart - 1, "duplicate object key");
        s->keys[s->nkeys++] = key;
        skip_ws(s);
        if (peek(s) != ':')
            return unexpected(s, "':' expected");
        s->i++;
        skip_ws(s);
        value v;
        if ((r = scan_value(s, depth + 1, &v)) != SCAN_OK)
            return r;
        if (t) {
            int f = field_of(s->b + key.off, key.len);
            if (f < F__COUNT) {
                t->present |= 1u << f;
                t->field[f] = v;
            } else if (!t->unknown) {
                t->unknown = true;
                t->unknown_key = key;
            }
        }
        if ((r = after_member(s, '}', "',' or '}' expected")) != SCAN_MORE) {
            s->nkeys = base; /* this object's keys are done with */
            return r;
        }
    }
}

static int scan_array(scanner *s, int depth)
{
    if (opens_empty(s, ']'))
        return SCAN_OK;
    for (;;) {
        value v;
        int r = scan_value(s, depth + 1, &v);
        if (r == SCAN_OK)
            r = after_member(s, ']', "',' or ']' expected");
        if (r != SCAN_MORE)
            return r;
    }
}

/* depth as jansson counts it: the frame is 1, what it holds 2, ... */
static int scan_value(scanner *s, int depth, value *v)
{
    if (depth > SG_FRAMESCAN_DEPTH)
        return SCAN_FALLBACK; /* below jansson's limit: it decides */
    int r;
    v->start = s->i;
    v->escaped = false;
    switch (peek(s)) {
    case '{':
        v->type = V_OBJECT;
        r = scan_object(s, depth, NULL);
        break;
    case '[':
        v->type = V_ARRAY;
        r = scan_array(s, depth);
        break;
    case '"':
        v->type = V_STRING;
        v->start++;
        r = scan_string(s, &v->escaped);
        v->end = s->i - 1;
        return r;
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        r = scan_number(s, v);
        break;
    case 't':
        v->type = V_LITERAL;
        r = scan_literal(s, "true");
        break;
    case 'f':
        v->type = V_LITERAL;
        r = scan_literal(s, "false");
        break;
    case 'n':
        v->type = V_LITERAL;
        r = scan_literal(s, "null");
        break;
    default:
        return unexpected(s, "value expected");
    }
    v->end = s->i;
    return r;
}

static int refuse(sg_err *err, int close_code, const char *msg)
{
    sg_err_set(err, 0, "%s", msg);
    return -close_code;
}

/* msg: the value, as event.c prints it (%.200s; the bytes are unescaped). */
static int refuse_with(sg_err *err, int close_code, const char *msg, const char *b, span v)
{
    sg_err_set(err, 0, "%s: %.*s", msg, (int)(v.len < 200 ? v.len : 200), b + v.off);
    return -close_code;
}

static span span_of(const value *v)
{
    return (span){(uint32_t)v->start, (uint32_t)(v->end - v->start)};
}

static inline bool has(const top *t, int f)
{
    return t->present & (1u << f);
}

/* A field the schema requires, of one type; the refusals are event.c's. */
static int need(const top *t, int f, vtype type, const char *missing, const char *wrong,
                sg_err *err)
{
    if (!has(t, f))
        return refuse(err, SG_CLOSE_BAD_DATA, missing);
    if (t->field[f].type != type)
        return refuse(err, SG_CLOSE_BAD_DATA, wrong);
    return SCAN_OK;
}

/* event.c's schema checks, in its order, on a frame that is valid JSON.
 * Returns SCAN_OK, SCAN_FALLBACK or a negated close code. */
static int check_schema(const top *t, const char *buf, const char *expect_sandbox_id,
                        sg_frame_view *out, sg_err *err)
{
    if (has(t, F_LEARNER))
        return refuse(err, SG_CLOSE_POLICY,
                      "frame carries learner_id (identity comes from the token only)");
    if (has(t, F_TASK))
        return refuse(err, SG_CLOSE_POLICY,
                      "frame carries task_id (identity comes from the token only)");
    if (has(t, F_SANDBOX)) {
        const value *sb = &t->field[F_SANDBOX];
        if (sb->type != V_STRING)
            return refuse(err, SG_CLOSE_POLICY, "frame sandbox_id is not a string");
        if (sb->escaped)
            return SCAN_FALLBACK;
        span v = span_of(sb);
        if (!expect_sandbox_id || strlen(expect_sandbox_id) != v.len ||
            memcmp(buf + v.off, expect_sandbox_id, v.len) != 0)
            return refuse_with(err, SG_CLOSE_POLICY,
                               "frame sandbox_id differs from the token's sandbox", buf, v);
    }
    if (t->unknown)
        return refuse_with(err, SG_CLOSE_BAD_DATA, "unknown top-level key", buf, t->unknown_key);

    int r;
    const value *kind = &t->field[F_KIND];
    if ((r = need(t, F_KIND, V_STRING, "frame has no kind", "kind is not a string", err)))
        return r;
    if (kind->escaped)
        return SCAN_FALLBACK;
    span kv = span_of(kind);
    int k = SG_EV__COUNT;
    while (--k >= 0) {
        const char *name = sg_event_kind_name(k);
        if (strlen(name) == kv.len && memcmp(buf + kv.off, name, kv.len) == 0)
            break;
    }
    if (k < 0)
        return refuse_with(err, SG_CLOSE_BAD_DATA, "unknown kind", buf, kv);

    const value *seq = &t->field[F_SEQ];
    if (!has(t, F_SEQ))
        return refuse(err, SG_CLOSE_BAD_DATA, "frame has no seq");
    /* "-0" is jansson's integer 0; any other minus is below zero */
    bool minus_zero = seq->end - seq->start == 2 && buf[seq->end - 1] == '0';
    if (seq->type != V_INT || (seq->negative && !minus_zero))
        return refuse(err, SG_CLOSE_BAD_DATA, "seq is not a non-negative integer");
    /* scan_number let through only integers within int64 */
    int64_t n = 0;
    for (size_t i = seq->start + seq->negative; i < seq->end; i++)
        n = n * 10 + (buf[i] - '0');

    const value *ts = &t->field[F_TS];
    if ((r = need(t, F_TS, V_STRING, "frame has no ts", "ts is not a string", err)))
        return r;
    if (ts->escaped)
        return SCAN_FALLBACK;

    const value *payload = &t->field[F_PAYLOAD];
    if ((r = need(t, F_PAYLOAD, V_OBJECT, "frame has no payload", "payload is not an object", err)))
        return r;

    out->seq = n;
    out->kind = k;
    out->ts = buf + ts->start;
    out->ts_len = ts->end - ts->start;
    out->payload = buf + payload->start;
    out->payload_len = payload->end - payload->start;
    return SCAN_OK;
}

/* The rare frame: jansson decides, and the view keeps its tree. */
static int fallback(const char *buf, size_t len, const char *expect_sandbox_id,
                    sg_frame_view *out, sg_err *err)
{
    sg_event ev;
    int r = sg_event_validate(buf, len, expect_sandbox_id, &ev, err);
    if (r < 0)
        return r;
    out->fallback = true;
    out->root = ev.root;
    out->seq = ev.seq;
    out->kind = ev.kind;
    out->ts = ev.ts;
    out->ts_len = strlen(ev.ts);
    if (sg_event_raw_payload(buf, len, &out->payload, &out->payload_len) == 0)
        return 0;
    /* "payload" written with an escape: its bytes are not found raw */
    out->dump = json_dumps(ev.payload, JSON_COMPACT);
    if (!out->dump) {
        sg_frame_view_clear(out);
        sg_err_set(err, ENOMEM, "out of memory");
        return -SG_FRAMESCAN_CLOSE_INTERNAL;
    }
    out->payload = out->dump;
    out->payload_len = strlen(out->dump);
    return 0;
}

int sg_frame_scan(const char *buf, size_t len, const char *expect_sandbox_id,
                  sg_frame_view *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    /* too big: sg_event_validate refuses it first thing, before parsing */
    if (len > SG_FRAME_MAX)
        return fallback(buf, len, expect_sandbox_id, out, err);
    scanner s;
    s.b = (const unsigned char *)buf;
    s.len = len;
    s.i = 0;
    s.err = err;
    s.nkeys = 0;
    top t;
    t.present = 0;
    t.unknown = false;

    int r;
    bool is_object = false;
    skip_ws(&s);
    if (peek(&s) == '{') {
        is_object = true;
        r = scan_object(&s, 1, &t);
    } else if (peek(&s) == '[') {
        value v;
        r = scan_value(&s, 1, &v);
    } else {
        r = unexpected(&s, "'[' or '{' expected");
    }
    if (r == SCAN_OK) {
        skip_ws(&s);
        if (s.i < len)
            r = unexpected(&s, "end of input expected");
    }
    if (r == SCAN_OK && !is_object)
        return refuse(err, SG_CLOSE_BAD_DATA, "frame is not a JSON object");
    if (r == SCAN_OK)
        r = check_schema(&t, buf, expect_sandbox_id, out, err);
    if (r == SCAN_FALLBACK)
        return fallback(buf, len, expect_sandbox_id, out, err);
    if (r == SCAN_BAD)
        return -SG_CLOSE_BAD_DATA;
    return r;
}

void sg_frame_view_clear(sg_frame_view *v)
{
    if (v->root)
        json_decref(v->root);
    free(v->dump);
    memset(v, 0, sizeof *v);
}

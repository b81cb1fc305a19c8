#include "capture/testsummary.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* A summary line is short; bytes past this on one line are dropped. */
#define TS_LINE_MAX 512

enum { R_PYTEST, R_UNITTEST, R_JEST, R_VITEST, R_MOCHA, R_GO, R_CARGO, R_RSPEC, R_N };
static const char *const runner_names[R_N] = {"pytest", "unittest", "jest",  "vitest",
                                              "mocha",  "go",       "cargo", "rspec"};

/* Where a "N word" item of a summary counts. */
enum { S_PASSED, S_FAILED, S_ERRORS, S_SKIPPED, S_TOTAL, S_NONE, S_N };

typedef struct kw {
    const char *word;
    int slot;
} kw;

typedef struct rstate {
    uint64_t n[S_N];
    bool seen, no_tests, go_pass, go_ok, truncated;
    size_t last; /* line number of its last summary line */
    size_t nnames;
    char names[SG_TS_NAMES_MAX][SG_TS_NAME_MAX + 1];
} rstate;

typedef struct tsp {
    rstate r[R_N];
    size_t lineno;
    bool ut_ran;         /* a unittest "Ran N tests": its OK/FAILED line follows */
    bool mocha_failures; /* after mocha's "N failing" */
    bool mocha_open;     /* a failing test's title continues on the next line */
    size_t mocha_len;
    char mocha_name[SG_TS_NAME_MAX + 1];
} tsp;

static void add(uint64_t *a, uint64_t b)
{
    *a = *a + b > SG_TS_COUNT_MAX ? SG_TS_COUNT_MAX : *a + b;
}

static uint64_t sub0(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static bool lit(const char **p, const char *end, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(end - *p) < n || memcmp(*p, s, n) != 0)
        return false;
    *p += n;
    return true;
}

static bool num(const char **p, const char *end, uint64_t *v)
{
    const char *q = *p;
    uint64_t x = 0;
    while (q < end && *q >= '0' && *q <= '9') {
        x = x > SG_TS_COUNT_MAX ? x : x * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (q == *p)
        return false;
    *v = x > SG_TS_COUNT_MAX ? SG_TS_COUNT_MAX : x;
    *p = q;
    return true;
}

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static void skip_sp(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\t'))
        (*p)++;
}

/* "N word<sep>N word..." with words from kws (longest first where one is
 * a prefix of another). Adds into n; returns the number of items (0: not
 * this summary) and leaves *p after the last item. */
static int items(const char **p, const char *end, const char *sep, const kw *kws, uint64_t n[S_N])
{
    uint64_t got[S_N] = {0};
    int count = 0;
    const char *q = *p;
    for (;;) {
        uint64_t v;
        const char *save = q;
        if (!num(&q, end, &v) || q >= end || *q != ' ') {
            q = save;
            break;
        }
        q++;
        const kw *k = kws;
        while (k->word && !(lit(&q, end, k->word) && (q == end || !is_alpha(*q))))
            k++;
        if (!k->word)
            return 0;
        add(&got[k->slot], v);
        count++;
        *p = q;
        if (!lit(&q, end, sep))
            break;
    }
    for (int i = 0; count && i < S_N; i++)
        add(&n[i], got[i]);
    return count;
}

static void trim(const char **s, const char **end)
{
    skip_sp(s, *end);
    while (*end > *s && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
        (*end)--;
}

/* A failing test's name, kept if there is room and it is new. */
static void name_add(rstate *r, const char *s, const char *end)
{
    trim(&s, &end);
    size_t n = (size_t)(end - s) > SG_TS_NAME_MAX ? SG_TS_NAME_MAX : (size_t)(end - s);
    if (!n)
        return;
    if (r->nnames == SG_TS_NAMES_MAX) {
        r->truncated = true;
        return;
    }
    for (size_t i = 0; i < r->nnames; i++)
        if (strlen(r->names[i]) == n && memcmp(r->names[i], s, n) == 0)
            return;
    memcpy(r->names[r->nnames], s, n);
    r->names[r->nnames++][n] = '\0';
}

static void seen(tsp *t, int runner)
{
    t->r[runner].seen = true;
    t->r[runner].last = t->lineno;
}

static const kw pytest_kw[] = {{"passed", S_PASSED},  {"failed", S_FAILED},   {"errors", S_ERRORS},
                               {"error", S_ERRORS},   {"skipped", S_SKIPPED}, {"xfailed", S_PASSED},
                               {"xpassed", S_PASSED}, {"warnings", S_NONE},   {"warning", S_NONE},
                               {"deselected", S_NONE}, {"rerun", S_NONE},     {NULL, 0}};

/* "==== 2 failed, 3 passed in 0.12s ====" (or without the = under -q). */
static void line_pytest(tsp *t, const char *s, const char *end)
{
    while (s < end && (*s == '=' || *s == ' '))
        s++;
    while (end > s && (end[-1] == '=' || end[-1] == ' '))
        end--;
    rstate *r = &t->r[R_PYTEST];
    if (lit(&s, end, "no tests ran in ")) {
        r->no_tests = true;
        seen(t, R_PYTEST);
        return;
    }
    uint64_t n[S_N] = {0};
    const char *p = s;
    if (items(&p, end, ", ", pytest_kw, n) && lit(&p, end, " in ") && p < end && *p >= '0' && *p <= '9') {
        for (int i = 0; i < S_N; i++)
            add(&r->n[i], n[i]);
        seen(t, R_PYTEST);
    } else if (lit(&s, end, "FAILED ") || lit(&s, end, "ERROR ")) {
        /* the short summary: "FAILED path::name - message" */
        const char *dash = s;
        while (dash + 3 <= end && memcmp(dash, " - ", 3) != 0)
            dash++;
        name_add(r, s, dash + 3 <= end ? dash : end);
    }
}

static const kw unittest_kw[] = {{"failures", S_FAILED},
                                 {"errors", S_ERRORS},
                                 {"skipped", S_SKIPPED},
                                 {"expected failures", S_NONE},
                                 {"unexpected successes", S_FAILED},
                                 {NULL, 0}};

/* "failures=1, errors=2)" into n: unittest's "key=N" form. */
static void unittest_status(const char *p, const char *end, uint64_t n[S_N])
{
    while (p < end && *p != ')') {
        const kw *k = unittest_kw;
        while (k->word && !lit(&p, end, k->word))
            k++;
        uint64_t v;
        if (!k->word || !lit(&p, end, "=") || !num(&p, end, &v))
            return;
        add(&n[k->slot], v);
        if (!lit(&p, end, ", "))
            return;
    }
}

static void line_unittest(tsp *t, const char *s, const char *end)
{
    rstate *r = &t->r[R_UNITTEST];
    const char *p = s;
    uint64_t v;
    if (lit(&p, end, "Ran ") && num(&p, end, &v) && lit(&p, end, " test")) {
        add(&r->n[S_TOTAL], v);
        if (!v)
            r->no_tests = true;
        t->ut_ran = true;
        seen(t, R_UNITTEST);
    } else if (t->ut_ran && (lit(&p, end, "OK") || lit(&p, end, "FAILED") || lit(&p, end, "NO TESTS RAN"))) {
        if (memcmp(s, "NO", 2) == 0)
            r->no_tests = true;
        if (lit(&p, end, " ("))
            unittest_status(p, end, r->n);
        t->ut_ran = false;
        seen(t, R_UNITTEST);
    } else if (lit(&p, end, "FAIL: ") || lit(&p, end, "ERROR: ")) {
        name_add(r, p, end);
    }
}

static const kw jest_kw[] = {{"failed", S_FAILED}, {"passed", S_PASSED}, {"skipped", S_SKIPPED},
                             {"todo", S_SKIPPED},  {"pending", S_SKIPPED}, {"total", S_NONE},
                             {NULL, 0}};

/* jest: "Tests:       1 failed, 2 passed, 3 total", "● Suite › name";
 * vitest: "Tests  1 failed | 2 passed (3)", "FAIL  file > suite > name". */
static void line_jest_vitest(tsp *t, const char *s, const char *end)
{
    const char *p = s;
    if (lit(&p, end, "Tests:")) {
        skip_sp(&p, end);
        if (items(&p, end, ", ", jest_kw, t->r[R_JEST].n))
            seen(t, R_JEST);
    } else if (lit(&p, end, "Tests ")) {
        skip_sp(&p, end);
        if (items(&p, end, " | ", jest_kw, t->r[R_VITEST].n) && lit(&p, end, " ("))
            seen(t, R_VITEST);
    } else if (lit(&p, end, "\xE2\x97\x8F ")) {
        name_add(&t->r[R_JEST], p, end);
    } else if (lit(&p, end, "FAIL ")) {
        for (const char *q = p; q + 3 <= end; q++)
            if (memcmp(q, " > ", 3) == 0) {
                name_add(&t->r[R_VITEST], p, end);
                break;
            }
    } else if (lit(&p, end, "No tests found")) {
        t->r[R_JEST].no_tests = true;
        seen(t, R_JEST);
    } else if (lit(&p, end, "No test files found")) {
        t->r[R_VITEST].no_tests = true;
        seen(t, R_VITEST);
    }
}

static void mocha_close(tsp *t)
{
    if (t->mocha_open)
        name_add(&t->r[R_MOCHA], t->mocha_name, t->mocha_name + t->mocha_len);
    t->mocha_open = false;
    t->mocha_len = 0;
}

/* A piece of a mocha title: "1) suite", "   nested", "     name:". */
static void mocha_piece(tsp *t, const char *s, const char *end)
{
    bool last = end > s && end[-1] == ':';
    if (last)
        end--;
    size_t room = SG_TS_NAME_MAX - t->mocha_len;
    size_t n = (size_t)(end - s) + (t->mocha_len ? 1 : 0);
    n = n > room ? room : n;
    if (n && t->mocha_len) {
        t->mocha_name[t->mocha_len++] = ' ';
        n--;
    }
    memcpy(t->mocha_name + t->mocha_len, s, n);
    t->mocha_len += n;
    if (last)
        mocha_close(t);
}

/* "  3 passing (5ms)", "  1 failing", "  1 pending", then the failures:
 * "  1) suite\n       test name:". */
static void line_mocha(tsp *t, const char *s, const char *end)
{
    static const kw mocha_kw[] = {{"passing", S_PASSED}, {"failing", S_FAILED}, {"pending", S_SKIPPED}, {NULL, 0}};
    const char *p = s;
    uint64_t n[S_N] = {0};
    if (items(&p, end, "\x01", mocha_kw, n) && (p == end || lit(&p, end, " ("))) {
        mocha_close(t);
        for (int i = 0; i < S_N; i++)
            add(&t->r[R_MOCHA].n[i], n[i]);
        if (n[S_FAILED])
            t->mocha_failures = true;
        seen(t, R_MOCHA);
        return;
    }
    uint64_t v;
    p = s;
    if (t->mocha_failures && num(&p, end, &v) && lit(&p, end, ") ")) {
        mocha_close(t);
        t->mocha_open = true;
        mocha_piece(t, p, end);
    } else if (t->mocha_open && s < end) {
        mocha_piece(t, s, end);
    } else {
        mocha_close(t);
    }
}

static bool contains(const char *s, const char *end, const char *what)
{
    size_t n = strlen(what);
    for (; s + n <= end; s++)
        if (memcmp(s, what, n) == 0)
            return true;
    return false;
}

/* go test: "--- FAIL: TestX (0.00s)" (top level only: subtests are indented),
 * "ok  \tpkg\t0.01s", "FAIL\tpkg [build failed]", "?   \tpkg\t[no test files]". */
static void line_go(tsp *t, const char *s, const char *end)
{
    rstate *r = &t->r[R_GO];
    const char *p = s;
    if (lit(&p, end, "--- FAIL: ")) {
        const char *q = p;
        while (q < end && *q != ' ')
            q++;
        add(&r->n[S_FAILED], 1);
        name_add(r, p, q);
    } else if (lit(&p, end, "--- PASS: ")) {
        add(&r->n[S_PASSED], 1);
        r->go_pass = true;
    } else if (lit(&p, end, "--- SKIP: ")) {
        add(&r->n[S_SKIPPED], 1);
    } else if (lit(&p, end, "ok  \t") || lit(&p, end, "FAIL\t") || lit(&p, end, "?   \t")) {
        if (*s == 'o')
            r->go_ok = true;
        if (contains(p, end, "[no test files]") || contains(p, end, "[no tests to run]"))
            r->no_tests = true;
        if (contains(p, end, "[build failed]") || contains(p, end, "[setup failed]"))
            add(&r->n[S_ERRORS], 1);
    } else {
        return;
    }
    seen(t, R_GO);
}

static const kw cargo_kw[] = {{"passed", S_PASSED},  {"failed", S_FAILED},       {"ignored", S_SKIPPED},
                              {"measured", S_NONE},  {"filtered out", S_NONE},   {NULL, 0}};

/* "test result: FAILED. 2 passed; 1 failed; 0 ignored; ...", "test a::b ... FAILED". */
static void line_cargo(tsp *t, const char *s, const char *end)
{
    rstate *r = &t->r[R_CARGO];
    const char *p = s;
    if (lit(&p, end, "test result: ")) {
        if ((lit(&p, end, "ok. ") || lit(&p, end, "FAILED. ")) && items(&p, end, "; ", cargo_kw, r->n))
            seen(t, R_CARGO);
    } else if (lit(&p, end, "test ") && end - p > 11 && memcmp(end - 11, " ... FAILED", 11) == 0) {
        name_add(r, p, end - 11);
    }
}

static const kw rspec_kw[] = {{"examples", S_TOTAL},
                              {"example", S_TOTAL},
                              {"failures", S_FAILED},
                              {"failure", S_FAILED},
                              {"pending", S_SKIPPED},
                              {"errors occurred outside of examples", S_ERRORS},
                              {"error occurred outside of examples", S_ERRORS},
                              {NULL, 0}};

/* "3 examples, 1 failure, 1 pending", "rspec ./spec/x_spec.rb:4 # desc". */
static void line_rspec(tsp *t, const char *s, const char *end)
{
    rstate *r = &t->r[R_RSPEC];
    const char *p = s;
    uint64_t n[S_N] = {0};
    if (items(&p, end, ", ", rspec_kw, n) >= 2 && p == end && contains(s, end, "example")) {
        for (int i = 0; i < S_N; i++)
            add(&r->n[i], n[i]);
        seen(t, R_RSPEC);
    } else if (lit(&p, end, "rspec ")) {
        name_add(r, p, end);
    }
}

static void line(tsp *t, const char *s, const char *end)
{
    t->lineno++;
    line_go(t, s, end);
    line_cargo(t, s, end);
    line_unittest(t, s, end);
    trim(&s, &end); /* the others indent their summaries */
    line_pytest(t, s, end);
    line_jest_vitest(t, s, end);
    line_mocha(t, s, end);
    line_rspec(t, s, end);
}

/* Splits buf into lines without terminal escape sequences, CRs and other
 * control characters (a runner colours its summary on a terminal). */
static void scan(tsp *t, const char *buf, size_t len)
{
    char ln[TS_LINE_MAX];
    size_t n = 0;
    enum { PLAIN, ESC, CSI, OSC } st = PLAIN;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n') {
            line(t, ln, ln + n);
            n = 0;
            st = PLAIN;
        } else if (st == ESC) {
            st = c == '[' ? CSI : c == ']' ? OSC : PLAIN;
        } else if (st == CSI) {
            st = c >= 0x40 && c <= 0x7e ? PLAIN : CSI;
        } else if (st == OSC) {
            st = c == '\a' || c == 0x1b ? PLAIN : OSC;
        } else if (c == 0x1b) {
            st = ESC;
        } else if ((c >= 0x20 || c == '\t') && c != 0x7f && n < sizeof ln) {
            ln[n++] = (char)c;
        }
    }
    if (n)
        line(t, ln, ln + n);
    mocha_close(t);
}

void sg_testsummary_name_copy(char *dst, const char *src)
{
    size_t n = 0;
    char *clean = sg_utf8_sanitize(src, strlen(src), &n);
    if (!clean) {
        strcpy(dst, "?");
        return;
    }
    if (n > SG_TS_NAME_MAX) {
        n = SG_TS_NAME_MAX;
        while (n && ((unsigned char)clean[n] & 0xC0) == 0x80) /* not inside a character */
            n--;
    }
    memcpy(dst, clean, n);
    dst[n] = '\0';
    free(clean);
}

static void finish(const tsp *t, sg_testsummary *out)
{
    int best = -1;
    for (int i = 0; i < R_N; i++)
        if (t->r[i].seen && (best < 0 || t->r[i].last > t->r[best].last))
            best = i;
    if (best < 0)
        return;
    const rstate *r = &t->r[best];
    out->runner = runner_names[best];
    out->failed = r->n[S_FAILED];
    out->errors = r->n[S_ERRORS];
    out->skipped = r->n[S_SKIPPED];
    out->passed = r->n[S_PASSED];
    if (best == R_UNITTEST || best == R_RSPEC) /* they print a total and the others */
        out->passed = sub0(r->n[S_TOTAL], out->failed + (best == R_UNITTEST ? out->errors : 0) + out->skipped);
    out->run = out->passed + out->failed + out->errors;
    out->no_tests = r->no_tests && out->run == 0;
    out->partial = best == R_GO && r->go_ok && !r->go_pass;
    out->names_truncated = r->truncated;
    out->nnames = r->nnames;
    for (size_t i = 0; i < r->nnames; i++)
        sg_testsummary_name_copy(out->names[i], r->names[i]);
}

int sg_testsummary_parse(const char *buf, size_t len, sg_testsummary *out)
{
    memset(out, 0, sizeof *out);
    tsp *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    scan(t, buf, len);
    finish(t, out);
    free(t);
    return 0;
}

const char *sg_testsummary_outcome(const sg_testsummary *s, const json_t *result)
{
    const json_t *code = json_object_get(result, "exit_code");
    if (!json_is_integer(code) || json_is_true(json_object_get(result, "timed_out")))
        return "error"; /* killed, timed out: whatever it printed is not the end */
    json_int_t rc = json_integer_value(code);
    if (!s->runner)
        return rc == 0 ? "passed" : "failed";
    if (s->failed || s->errors)
        return "failed";
    if (s->run == 0 && !s->partial)
        return rc == 0 || s->no_tests ? "no_tests" : "error";
    return rc == 0 ? "passed" : "error";
}

void sg_testsummary_to_json(const sg_testsummary *s, const json_t *result, json_t *r)
{
    if (!r)
        return;
    json_object_set_new(r, "outcome", json_string(sg_testsummary_outcome(s, result)));
    json_object_set_new(r, "parsed", json_boolean(s->runner != NULL));
    if (!s->runner)
        return;
    json_t *names = json_array();
    for (size_t i = 0; i < s->nnames; i++)
        json_array_append_new(names, json_string(s->names[i]));
    json_object_set_new(r, "runner", json_string(s->runner));
    json_object_set_new(r, "run", json_integer((json_int_t)s->run));
    json_object_set_new(r, "passed", json_integer((json_int_t)s->passed));
    json_object_set_new(r, "failed", json_integer((json_int_t)s->failed));
    json_object_set_new(r, "errors", json_integer((json_int_t)s->errors));
    json_object_set_new(r, "skipped", json_integer((json_int_t)s->skipped));
    json_object_set_new(r, "failing_tests", names);
    if (s->names_truncated)
        json_object_set_new(r, "failing_tests_truncated", json_true());
    if (s->partial)
        json_object_set_new(r, "partial", json_true());
}

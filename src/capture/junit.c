/* junit: JUnit XML reports read into a test summary (junit.h). */
#include "capture/junit.h"

#include <expat.h>
#include <stdlib.h>
#include <string.h>

typedef struct jstate {
    XML_Parser p;
    int depth;
    int case_depth;       /* depth of the open <testcase>; 0: none */
    bool failure, error, skipped;
    char name[SG_TS_NAME_MAX * 2 + 2]; /* the open case's "classname.name", cut */
    bool root_seen, bad;
    uint64_t cases;
    uint64_t n_passed, n_failed, n_errors, n_skipped; /* from <testcase>s */
    uint64_t a_tests, a_failed, a_errors, a_skipped;  /* from the suites' attributes */
    sg_testsummary *out;
} jstate;

static void cap_add(uint64_t *a, uint64_t b)
{
    *a = *a + b > SG_TS_COUNT_MAX || *a + b < *a ? SG_TS_COUNT_MAX : *a + b;
}

static void stop(jstate *j)
{
    j->bad = true;
    XML_StopParser(j->p, XML_FALSE);
}

static const char *attr(const XML_Char **atts, const char *name)
{
    for (; atts && atts[0]; atts += 2)
        if (strcmp(atts[0], name) == 0)
            return atts[1];
    return NULL;
}

/* A count attribute: its decimal digits, capped; anything else is 0. */
static uint64_t count_attr(const XML_Char **atts, const char *name)
{
    const char *v = attr(atts, name);
    uint64_t n = 0;
    for (; v && *v >= '0' && *v <= '9'; v++) {
        n = n * 10 + (uint64_t)(*v - '0');
        if (n > SG_TS_COUNT_MAX)
            return SG_TS_COUNT_MAX;
    }
    return n;
}

/* Appends at most n bytes of s to the open case's name. */
static void name_cat(jstate *j, const char *s)
{
    size_t have = strlen(j->name), room = sizeof j->name - 1 - have, n = strlen(s);
    memcpy(j->name + have, s, n < room ? n : room);
    j->name[have + (n < room ? n : room)] = '\0';
}

static void on_start(void *ud, const XML_Char *el, const XML_Char **atts)
{
    jstate *j = ud;
    if (++j->depth > SG_JUNIT_MAX_DEPTH) {
        stop(j);
        return;
    }
    bool suite = strcmp(el, "testsuite") == 0;
    if (j->depth == 1) {
        if (!suite && strcmp(el, "testsuites") != 0) {
            stop(j);
            return;
        }
        j->root_seen = true;
    }
    if (suite && j->depth <= 2) {
        cap_add(&j->a_tests, count_attr(atts, "tests"));
        cap_add(&j->a_failed, count_attr(atts, "failures"));
        cap_add(&j->a_errors, count_attr(atts, "errors"));
        cap_add(&j->a_skipped, count_attr(atts, "skipped"));
        cap_add(&j->a_skipped, count_attr(atts, "disabled"));
        if (j->depth == 2) /* only the suites under <testsuites> add up */
            return;
    }
    if (strcmp(el, "testcase") == 0 && !j->case_depth) {
        j->case_depth = j->depth;
        j->failure = j->error = j->skipped = false;
        j->name[0] = '\0';
        const char *cls = attr(atts, "classname"), *name = attr(atts, "name");
        if (cls && *cls) {
            name_cat(j, cls);
            if (name && *name)
                name_cat(j, ".");
        }
        if (name)
            name_cat(j, name);
    } else if (j->case_depth && j->depth == j->case_depth + 1) {
        if (strcmp(el, "failure") == 0)
            j->failure = true;
        else if (strcmp(el, "error") == 0)
            j->error = true;
        else if (strcmp(el, "skipped") == 0)
            j->skipped = true;
    }
}

/* A failing case's name, kept if there is room and it is new. */
static void name_keep(jstate *j)
{
    sg_testsummary *o = j->out;
    if (!j->name[0])
        return;
    if (o->nnames == SG_TS_NAMES_MAX) {
        o->names_truncated = true;
        return;
    }
    sg_testsummary_name_copy(o->names[o->nnames], j->name);
    for (size_t i = 0; i < o->nnames; i++)
        if (strcmp(o->names[i], o->names[o->nnames]) == 0)
            return;
    o->nnames++;
}

static void on_end(void *ud, const XML_Char *el)
{
    jstate *j = ud;
    (void)el;
    if (j->case_depth && j->depth == j->case_depth) {
        j->case_depth = 0;
        cap_add(&j->cases, 1);
        if (j->failure || j->error) {
            cap_add(j->failure ? &j->n_failed : &j->n_errors, 1);
            name_keep(j);
        } else if (j->skipped) {
            cap_add(&j->n_skipped, 1);
        } else {
            cap_add(&j->n_passed, 1);
        }
    }
    j->depth--;
}

/* No DOCTYPE: no entity of any kind can be declared. */
static void on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid, const XML_Char *pubid,
                       int internal)
{
    (void)name, (void)sysid, (void)pubid, (void)internal;
    stop(ud);
}

int sg_junit_parse(const char *buf, size_t len, sg_testsummary *out)
{
    memset(out, 0, sizeof *out);
    if (!buf || len > SG_JUNIT_MAX_BYTES)
        return -1;
    jstate *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->out = out;
    j->p = XML_ParserCreate(NULL);
    if (!j->p) {
        free(j);
        return -1;
    }
    XML_SetUserData(j->p, j);
    XML_SetElementHandler(j->p, on_start, on_end);
    XML_SetStartDoctypeDeclHandler(j->p, on_doctype);
    XML_SetParamEntityParsing(j->p, XML_PARAM_ENTITY_PARSING_NEVER);
    bool ok = XML_Parse(j->p, buf, (int)len, XML_TRUE) == XML_STATUS_OK && !j->bad && j->root_seen;
    XML_ParserFree(j->p);
    if (ok) {
        out->runner = "junit";
        if (j->cases) {
            out->passed = j->n_passed;
            out->failed = j->n_failed;
            out->errors = j->n_errors;
            out->skipped = j->n_skipped;
        } else { /* the suites' own counts */
            out->failed = j->a_failed;
            out->errors = j->a_errors;
            out->skipped = j->a_skipped;
            uint64_t other = j->a_failed + j->a_errors + j->a_skipped;
            out->passed = j->a_tests > other ? j->a_tests - other : 0;
        }
        out->run = out->passed + out->failed + out->errors;
        out->no_tests = out->run == 0;
    } else {
        memset(out, 0, sizeof *out);
    }
    free(j);
    return ok ? 0 : -1;
}

/* ---- the report a command line asks for ---- */

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Looks at one word (and the next, for "--opt P"): 1 when it named the
 * report (in path), 2 when it took the next word too, 0 when neither. */
static int word_report(const char *w, const char *next, char *path)
{
    static const char *const opts[] = {"--junitxml", "--junit-xml", "--junitfile", "--outputFile.junit"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
        size_t n = strlen(opts[i]);
        if (strncmp(w, opts[i], n) != 0)
            continue;
        const char *v = w[n] == '=' ? w + n + 1 : w[n] == '\0' ? next : NULL;
        if (!v || !*v || strlen(v) >= SG_JUNIT_PATH_MAX)
            return 0;
        strcpy(path, v);
        return w[n] == '=' ? 1 : 2;
    }
    return 0;
}

/* Follows `cd DIR` at a command's start: dir is where the line's later
 * commands run, relative to the exec's cwd ("" there). */
static void cd_to(char *dir, const char *to)
{
    size_t have = to[0] == '/' ? 0 : strlen(dir);
    size_t n = strlen(to);
    if (to[0] == '/')
        dir[0] = '\0';
    if (have + 1 + n >= SG_JUNIT_PATH_MAX) {
        dir[0] = '\0'; /* lost: the report is then looked for where the exec began */
        return;
    }
    if (have)
        dir[have++] = '/';
    memcpy(dir + have, to, n + 1);
}

/* LINE's words (quotes and backslashes honoured, split also at ; & | ( )
 * and newlines), each looked at with the next; `cd DIR` is followed. */
static bool line_report(const char *line, char *path)
{
    size_t cap = strlen(line) + 1;
    char *cur = malloc(cap), *prev = malloc(cap), *dir = calloc(1, SG_JUNIT_PATH_MAX);
    char *cdir = calloc(1, SG_JUNIT_PATH_MAX); /* the dir when the report was named */
    bool found = false;
    if (!cur || !prev || !dir || !cdir)
        goto out;
    size_t cl = 0;
    bool in_word = false, have_prev = false, prev_first = false, first = true;
    char quote = 0;
    for (const char *p = line;; p++) {
        char c = *p;
        bool end_cmd = c == '\0' || /* an unterminated quote ends there too */
                       (!quote && (c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' || c == ')'));
        bool sep = end_cmd || (!quote && (c == ' ' || c == '\t'));
        if (sep) {
            if (in_word) {
                cur[cl] = '\0';
                if (have_prev) {
                    if (prev_first && strcmp(prev, "cd") == 0)
                        cd_to(dir, cur);
                    else if (word_report(prev, cur, path)) {
                        found = true;
                        strcpy(cdir, dir);
                    }
                }
                char *t = prev;
                prev = cur, cur = t;
                have_prev = true;
                prev_first = first;
                first = false;
            }
            in_word = false;
            cl = 0;
            if (end_cmd) {
                if (have_prev && !prev_first && word_report(prev, NULL, path) == 1) {
                    found = true;
                    strcpy(cdir, dir);
                }
                have_prev = false;
                first = true;
            }
            if (c == '\0')
                break;
            continue;
        }
        if (quote && c == quote) {
            quote = 0;
            continue;
        }
        if (!quote && (c == '\'' || c == '"')) {
            quote = c;
            in_word = true;
            continue;
        }
        if (c == '\\' && quote != '\'' && p[1])
            c = *++p;
        in_word = true;
        cur[cl++] = c;
    }
    if (found && path[0] != '/' && cdir[0]) {
        size_t dl = strlen(cdir), pl = strlen(path);
        if (dl + 1 + pl >= SG_JUNIT_PATH_MAX) {
            found = false;
        } else {
            memmove(path + dl + 1, path, pl + 1);
            memcpy(path, cdir, dl);
            path[dl] = '/';
        }
    }
out:
    free(cur);
    free(prev);
    free(dir);
    free(cdir);
    return found;
}

bool sg_junit_report_arg(char *const *argv, char *path)
{
    if (!argv || !argv[0])
        return false;
    const char *b = base(argv[0]);
    bool shell = !strcmp(b, "sh") || !strcmp(b, "bash") || !strcmp(b, "dash") || !strcmp(b, "zsh") ||
                 !strcmp(b, "ash");
    bool found = false;
    for (char *const *a = argv + 1; *a; a++) {
        if (shell && (*a)[0] == '-' && (*a)[1] != '-' && strchr(*a, 'c'))
            return a[1] && line_report(a[1], path);
        int r = word_report(*a, a[1], path);
        if (r)
            found = true;
        if (r == 2)
            a++;
    }
    return found;
}

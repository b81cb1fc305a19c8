#include "capture/testrule.h"

#include <stdlib.h>
#include <string.h>

#define TR_MAX_WORDS 64
#define TR_WORD_MAX 256

typedef struct words {
    char w[TR_MAX_WORDS][TR_WORD_MAX];
    int n;
} words;

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static bool is_one(const char *w, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(w, *list) == 0)
            return true;
    return false;
}

static bool is_assignment(const char *w)
{
    const char *eq = strchr(w, '=');
    if (!eq || eq == w)
        return false;
    for (const char *p = w; p < eq; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (p > w && *p >= '0' && *p <= '9')))
            return false;
    return true;
}

static bool is_python(const char *b)
{
    return strncmp(b, "python", 6) == 0 || strcmp(b, "pypy3") == 0;
}

static bool is_shell(const char *b)
{
    static const char *const sh[] = {"sh", "bash", "dash", "zsh", "ash", NULL};
    return is_one(b, sh);
}

static bool script_name_is_test(const char *b)
{
    static const char *const names[] = {
        "test", "tests", "run_tests", "run-tests", "test.sh", "tests.sh",
        "run_tests.sh", "run-tests.sh", "test.py", "tests.py", "run_tests.py",
        "runtests.py", NULL};
    return is_one(b, names);
}

/* Judges one simple command (words already split). */
static bool simple_is_test(words *ws, int depth);

static bool line_is_test(const char *line, int depth);

static bool simple_is_test(words *ws, int depth)
{
    int i = 0;
    static const char *const wrappers[] = {"env", "time", "nice", "sudo", "xvfb-run", "npx",
                                           "bunx", "command", "exec", "nohup", "stdbuf", NULL};
    static const char *const runners[] = {"uv", "poetry", "pipenv", "pdm", "hatch", "rye", NULL};
    for (;;) {
        if (i >= ws->n)
            return false;
        const char *w = ws->w[i];
        const char *b = base(w);
        if (is_assignment(w)) {
            i++;
        } else if (is_one(b, wrappers)) {
            i++;
            while (i < ws->n && ws->w[i][0] == '-')
                i++;
        } else if (strcmp(b, "timeout") == 0) {
            i++;
            while (i < ws->n && ws->w[i][0] == '-')
                i++;
            i++; /* the duration */
        } else if (is_one(b, runners) && i + 1 < ws->n && strcmp(ws->w[i + 1], "run") == 0) {
            i += 2;
        } else if (is_python(b) && i + 2 < ws->n && strcmp(ws->w[i + 1], "-m") == 0) {
            i += 2;
        } else {
            break;
        }
    }
    const char *prog = base(ws->w[i]);
    const char *sub = i + 1 < ws->n ? ws->w[i + 1] : "";
    static const char *const alone[] = {
        "pytest", "py.test", "tox", "nox", "unittest", "nosetests", "nose2", "jest", "vitest",
        "mocha", "ava", "tap", "ctest", "rspec", "phpunit", "prove", "bats", "busted",
        "karma", "cucumber", "behave", "trial", NULL};
    if (is_one(prog, alone) || script_name_is_test(prog))
        return true;
    static const char *const test_sub[] = {
        "go", "cargo", "yarn", "pnpm", "bun", "deno", "dotnet", "mix", "swift", "lein",
        "stack", "cabal", "dune", "meson", "ninja", "flutter", "dart", NULL};
    if (is_one(prog, test_sub) && (strcmp(sub, "test") == 0 || (strcmp(prog, "cargo") == 0 &&
                                                                strcmp(sub, "nextest") == 0)))
        return true;
    if (strcmp(prog, "npm") == 0 || strcmp(prog, "yarn") == 0 || strcmp(prog, "pnpm") == 0) {
        if (strcmp(sub, "test") == 0 || strcmp(sub, "t") == 0 || strcmp(sub, "tst") == 0)
            return true;
        if (strcmp(sub, "run") == 0 && i + 2 < ws->n && strncmp(ws->w[i + 2], "test", 4) == 0)
            return true;
    }
    if (strcmp(prog, "make") == 0 || strcmp(prog, "gmake") == 0) {
        for (int k = i + 1; k < ws->n; k++)
            if (ws->w[k][0] != '-' && !is_assignment(ws->w[k]))
                if (!strcmp(ws->w[k], "test") || !strcmp(ws->w[k], "check") ||
                    !strcmp(ws->w[k], "tests") || !strcmp(ws->w[k], "test-all"))
                    return true;
        return false;
    }
    if ((strcmp(prog, "mvn") == 0 || strcmp(prog, "mvnw") == 0) &&
        (!strcmp(sub, "test") || !strcmp(sub, "verify")))
        return true;
    if ((strcmp(prog, "gradle") == 0 || strcmp(prog, "gradlew") == 0) &&
        (!strcmp(sub, "test") || !strcmp(sub, "check")))
        return true;
    if (strcmp(prog, "rake") == 0 && (!strcmp(sub, "test") || !strcmp(sub, "spec")))
        return true;
    if (strcmp(prog, "zig") == 0 && !strcmp(sub, "build") && i + 2 < ws->n &&
        !strcmp(ws->w[i + 2], "test"))
        return true;
    if (is_shell(prog) && depth < 3) {
        /* sh -c SCRIPT, bash -lc SCRIPT */
        for (int k = i + 1; k < ws->n; k++) {
            const char *o = ws->w[k];
            if (o[0] != '-')
                return false;
            if (strchr(o, 'c') && o[1] != '-')
                return k + 1 < ws->n && line_is_test(ws->w[k + 1], depth + 1);
        }
    }
    return false;
}

static bool line_is_test(const char *line, int depth)
{
    words ws;
    ws.n = 0;
    char cur[TR_WORD_MAX];
    size_t cl = 0;
    bool in_word = false;
    char quote = 0;
    for (const char *p = line;; p++) {
        char c = *p;
        bool end_cmd = !quote && (c == '\0' || c == ';' || c == '&' || c == '|' || c == '\n' ||
                                  c == '(' || c == ')');
        bool space = !quote && (c == ' ' || c == '\t');
        if (end_cmd || space) {
            if (in_word && ws.n < TR_MAX_WORDS) {
                cur[cl] = '\0';
                memcpy(ws.w[ws.n++], cur, cl + 1);
            }
            in_word = false;
            cl = 0;
            if (end_cmd) {
                if (ws.n && simple_is_test(&ws, depth))
                    return true;
                ws.n = 0;
                if (c == '\0')
                    return false;
            }
            continue;
        }
        if (c == '\0')
            return false; /* unterminated quote */
        if (quote) {
            if (c == quote) {
                quote = 0;
                continue;
            }
            if (c == '\\' && quote == '"' && p[1]) {
                c = *++p;
            }
        } else if (c == '\'' || c == '"') {
            quote = c;
            in_word = true;
            continue;
        } else if (c == '\\' && p[1]) {
            c = *++p;
        }
        in_word = true;
        if (cl + 1 < sizeof cur)
            cur[cl++] = c;
    }
}

bool sg_testrule_is_test_line(const char *line)
{
    return line && line_is_test(line, 0);
}

bool sg_testrule_is_test_argv(char *const *argv)
{
    words *ws = calloc(1, sizeof *ws);
    if (!ws)
        return false;
    /* `SHELL -c SCRIPT` is recorded as SCRIPT (sg_exec_cmdline's rule): its
     * program is the shell even when its directory looks like an
     * assignment ("A=b/sh"), so the verdict is the script's there too. */
    const char *b = argv && argv[0] ? base(argv[0]) : "";
    bool shell_c = (!strcmp(b, "sh") || !strcmp(b, "bash") || !strcmp(b, "dash")) && argv[1] &&
                   !strcmp(argv[1], "-c") && argv[2] && !argv[3];
    for (char *const *a = argv; a && *a && ws->n < TR_MAX_WORDS; a++) {
        const char *w = shell_c && a == argv ? b : *a;
        size_t l = strlen(w);
        if (l >= TR_WORD_MAX)
            l = TR_WORD_MAX - 1;
        memcpy(ws->w[ws->n], w, l);
        ws->w[ws->n++][l] = '\0';
    }
    bool r = simple_is_test(ws, 0);
    free(ws);
    return r;
}

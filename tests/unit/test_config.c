/* Unit tests for config: which file wins (the system's, then the user's
 * through XDG_CONFIG_HOME or ~/.config, or the one SANDGLASS_CONFIG names,
 * or none), the environment over both, each value's origin, and every
 * error naming the file and line (or the variable): a bad value, an
 * unknown key or section, a key outside its section or given twice, a
 * line that is not INI, a line too long; the keys exported for children. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "cli/config.h"

static char dir[] = "/tmp/sg-config-XXXXXX";

static char *write_conf(const char *name, const char *text)
{
    char *path = sg_strdup_printf("%s/%s", dir, name);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    assert_int_equal(sg_mkdir_p(path, 0700, NULL), 0);
    *slash = '/';
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* A clean slate: no file, no variable, nothing loaded. */
static int setup(void **state)
{
    sg_config_reset();
    for (int k = 0; k < SG_CONF__COUNT; k++) {
        char var[64] = "SANDGLASS_";
        const char *n = sg_config_key_name((sg_conf_key)k);
        size_t o = strlen(var);
        for (; *n; n++)
            var[o++] = *n == '-' ? '_' : (char)(*n >= 'a' && *n <= 'z' ? *n - 32 : *n);
        var[o] = '\0';
        unsetenv(var);
    }
    unsetenv("SANDGLASS_INGEST"); /* the url key's variable */
    unsetenv("SANDGLASS_CONFIG");
    unsetenv("XDG_CONFIG_HOME");
    setenv("HOME", dir, 1);
    sg_autofree char *none = sg_strdup_printf("%s/no-system.conf", dir);
    sg_config_set_system_file(none);
    (void)state;
    return 0;
}

/* Loads and expects an error containing want. */
static void load_fails(const char *want)
{
    sg_config_reset();
    sg_err err = {0};
    assert_int_equal(sg_config_load(&err), -1);
    if (!strstr(err.msg, want))
        fail_msg("error '%s' lacks '%s'", err.msg, want);
    assert_null(sg_config_get(SG_CONF_MEMORY, NULL)); /* nothing kept of a failed load */
}

static void load_ok(void)
{
    sg_config_reset();
    sg_err err = {0};
    if (sg_config_load(&err) < 0)
        fail_msg("load: %s", err.msg);
}

static void test_precedence(void **state)
{
    (void)state;
    sg_autofree char *sys = write_conf("sys.conf", "# system\n[limits]\nmemory = 1G\npids = 10\n\n[ingest]\n"
                                                   "url = ws://10.0.0.1:7433 ; the school's\n");
    sg_autofree char *xdg = sg_strdup_printf("%s/xdg", dir);
    sg_autofree char *user = write_conf("xdg/sandglass/sandglass.conf", "[limits]\nmemory = 2G\n");
    sg_config_set_system_file(sys);
    setenv("XDG_CONFIG_HOME", xdg, 1);
    load_ok();
    const char *origin = NULL;
    assert_string_equal(sg_config_get(SG_CONF_MEMORY, &origin), "2G");
    sg_autofree char *want = sg_strdup_printf("%s:2", user);
    assert_string_equal(origin, want);
    assert_string_equal(sg_config_get(SG_CONF_PIDS, &origin), "10");
    sg_autofree char *want_sys = sg_strdup_printf("%s:4", sys);
    assert_string_equal(origin, want_sys);
    assert_string_equal(sg_config_ingest(), "ws://10.0.0.1:7433");
    assert_null(sg_config_get(SG_CONF_TTL, NULL));

    setenv("SANDGLASS_MEMORY", "3G", 1);
    setenv("SANDGLASS_PIDS", "", 1); /* empty: unset */
    load_ok();
    assert_string_equal(sg_config_get(SG_CONF_MEMORY, &origin), "3G");
    assert_string_equal(origin, "SANDGLASS_MEMORY");
    assert_string_equal(sg_config_get(SG_CONF_PIDS, NULL), "10");

    /* ~/.config when XDG_CONFIG_HOME is unset */
    unsetenv("SANDGLASS_MEMORY");
    unsetenv("XDG_CONFIG_HOME");
    sg_autofree char *home = write_conf(".config/sandglass/sandglass.conf", "[session]\nttl = 2h\n");
    load_ok();
    assert_string_equal(sg_config_get(SG_CONF_TTL, NULL), "2h");
    assert_string_equal(sg_config_get(SG_CONF_MEMORY, NULL), "1G");

    /* SANDGLASS_CONFIG: that file alone, or none */
    sg_autofree char *one = write_conf("one.conf", "[limits]\ncpus = 0.5\n");
    setenv("SANDGLASS_CONFIG", one, 1);
    load_ok();
    assert_string_equal(sg_config_get(SG_CONF_CPUS, NULL), "0.5");
    assert_null(sg_config_get(SG_CONF_MEMORY, NULL));
    assert_null(sg_config_get(SG_CONF_TTL, NULL));
    setenv("SANDGLASS_CONFIG", "none", 1);
    load_ok();
    assert_null(sg_config_get(SG_CONF_CPUS, NULL));
    assert_string_equal(sg_config_ingest(), "ws://127.0.0.1:7433");
    setenv("SANDGLASS_CONFIG", "", 1);
    load_ok();
    assert_null(sg_config_get(SG_CONF_TTL, NULL));
    sg_autofree char *missing = sg_strdup_printf("%s/missing.conf", dir);
    setenv("SANDGLASS_CONFIG", missing, 1);
    load_fails("missing.conf: cannot read");
    unsetenv("SANDGLASS_CONFIG");
    sg_config_set_system_file(NULL);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[limits]\n\nmemory = 12Q\n", ":3: memory: invalid size '12Q'"},
        {"[session]\nttl = soon\n", ":2: ttl: invalid duration 'soon'"},
        {"[session]\nttl = off\nkeep = -1\n", ":3: keep: invalid duration '-1'"},
        {"[sandglass]\nlog-level = loud\n", ":2: log-level: 'loud' is not a level"},
        {"[sandglass]\nstate-dir = relative/dir\n", ":2: state-dir: 'relative/dir' is not an absolute path"},
        {"[caps]\ncheckpoints = sometimes\n", ":2: checkpoints: 'sometimes' is not exec or manual"},
        {"[limits]\ncpus = many\n", ":2: cpus: 'many' is not a positive number of cores"},
        {"[limits]\nmemroy = 1G\n", ":2: unknown key 'memroy' in [limits]"},
        {"[limit]\nmemory = 1G\n", ":2: unknown section [limit]"},
        {"memory = 1G\n", ":1: 'memory' is outside a section: put it under [limits]"},
        {"colour = red\n", ":1: unknown key 'colour' outside a section"},
        {"[caps]\nmemory = 1G\n", ":2: 'memory' belongs in [limits], not [caps]"},
        {"[limits]\nmemory = 1G\n[limits]\nmemory = 2G\n", ":4: 'memory' is given twice (lines 2 and 4"},
        {"[limits]\nmemory = 1G\n  2G\n", ":3: 'memory' is given twice"}, /* no multi-line values */
        {"[limits]\njust words\n", ":2: not a [section], a key = value or a comment"},
        {"[limits\n", ":1: not a [section]"},
        /* the first error is the one named */
        {"[limits]\npids = x\nmemory = y\n", ":2: pids:"},
        {"[limits]\nwords\npids = x\n", ":2: not a [section]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sg_autofree char *p = write_conf("bad.conf", cases[i].text);
        setenv("SANDGLASS_CONFIG", p, 1);
        sg_autofree char *want = sg_strdup_printf("%s%s", p, cases[i].want);
        load_fails(want);
    }
    /* a line longer than inih reads at once */
    char text[600] = "[ingest]\nurl = ws://";
    size_t o = strlen(text);
    memset(text + o, 'a', 300);
    strcpy(text + o + 300, "\n[limits]\npids = 5\n");
    sg_autofree char *p = write_conf("long.conf", text);
    setenv("SANDGLASS_CONFIG", p, 1);
    sg_autofree char *want = sg_strdup_printf("%s:2: the line is longer than", p);
    load_fails(want);

    setenv("SANDGLASS_CONFIG", "none", 1);
    setenv("SANDGLASS_MAX_WALL", "forever", 1);
    load_fails("SANDGLASS_MAX_WALL: invalid duration 'forever'");
    unsetenv("SANDGLASS_MAX_WALL");
    setenv("SANDGLASS_POOL_SIZE", "0", 1);
    load_ok();
    assert_string_equal(sg_config_get(SG_CONF_POOL_SIZE, NULL), "0");
    unsetenv("SANDGLASS_POOL_SIZE");
    unsetenv("SANDGLASS_CONFIG");
}

static void test_exported(void **state)
{
    (void)state;
    sg_autofree char *p = write_conf("state.conf", "[sandglass]\nstate-dir = /srv/sg\nlog-level = debug\n"
                                                   "[ingest]\nsecret = /etc/sg/secret\n");
    setenv("SANDGLASS_CONFIG", p, 1);
    setenv("SANDGLASS_STATE_DIR", "", 1); /* empty: unset, so the file's */
    setenv("SANDGLASS_LOG_LEVEL", "WARN", 1); /* any case, as the logger takes it */
    load_ok();
    assert_string_equal(getenv("SANDGLASS_STATE_DIR"), "/srv/sg"); /* for children and the state layer */
    assert_string_equal(getenv("SANDGLASS_LOG_LEVEL"), "WARN");    /* the environment's stays */
    assert_string_equal(sg_config_get(SG_CONF_LOG_LEVEL, NULL), "WARN");
    sg_autofree char *secret = sg_config_secret();
    assert_string_equal(secret, "/etc/sg/secret");
    /* no secret configured: the local ingest's */
    sg_autofree char *sdir = sg_strdup_printf("%s/state", dir);
    setenv("SANDGLASS_STATE_DIR", sdir, 1);
    setenv("SANDGLASS_CONFIG", "none", 1);
    load_ok();
    sg_autofree char *def = sg_config_secret();
    sg_autofree char *want = sg_strdup_printf("%s/ingest/secret", sdir);
    assert_string_equal(def, want);
    unsetenv("SANDGLASS_STATE_DIR");
    unsetenv("SANDGLASS_LOG_LEVEL");
    unsetenv("SANDGLASS_CONFIG");
    sg_config_reset();
}

/* A daemon's SIGHUP: a good file's new values in force; a broken one
 * keeps every old value (not the built-in defaults). */
static void test_reload(void **state)
{
    (void)state;
    sg_autofree char *p = write_conf("reload.conf", "[limits]\nmemory = 256M\n[ingest]\nurl = ws://a:1\n");
    setenv("SANDGLASS_CONFIG", p, 1);
    load_ok();
    assert_string_equal(sg_config_get(SG_CONF_INGEST, NULL), "ws://a:1");
    free(write_conf("reload.conf", "[limits]\nmemory = 512M\n[ingest]\nurl = ws://b:2\n"));
    sg_err err = {0};
    assert_int_equal(sg_config_reload(&err), 0);
    assert_string_equal(sg_config_get(SG_CONF_INGEST, NULL), "ws://b:2");
    assert_string_equal(sg_config_get(SG_CONF_MEMORY, NULL), "512M");
    free(write_conf("reload.conf", "[limits]\nmemory = 12Q\n[ingest]\nurl = ws://c:3\n"));
    assert_int_equal(sg_config_reload(&err), -1);
    assert_non_null(strstr(err.msg, "reload.conf:2"));
    assert_string_equal(sg_config_get(SG_CONF_INGEST, NULL), "ws://b:2"); /* the old ones kept */
    assert_string_equal(sg_config_get(SG_CONF_MEMORY, NULL), "512M");
    unsetenv("SANDGLASS_CONFIG");
    sg_config_reset();
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_precedence, setup),
        cmocka_unit_test_setup(test_errors, setup),
        cmocka_unit_test_setup(test_exported, setup),
        cmocka_unit_test_setup(test_reload, setup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sg_rm_rf(dir, NULL);
    return rc;
}

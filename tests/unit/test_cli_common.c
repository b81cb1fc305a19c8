/* Unit tests for the CLI's shared conventions (cli/common.c): how a typed
 * sandbox id is resolved (the id, a unique prefix, an ambiguous or unknown
 * one), and the one-line error and usage messages, plain and as JSON, with
 * their exit codes. Real sandbox directories in a temporary state
 * directory; stderr captured through a pipe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/common.h"
#include "state/state.h"

static char root[64];

static int group_setup(void **state)
{
    (void)state;
    strcpy(root, "/tmp/sg-cli-common-test-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    setenv("SANDGLASS_STATE_DIR", root, 1);
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return -1;
    /* Three sandboxes: two share the prefix "ab12". */
    const char *ids[] = {"ab12cd34ef56", "ab12ff000000", "0123456789ab"};
    for (size_t i = 0; i < 3; i++) {
        sg_autofree char *d = sg_state_sandbox_path(ids[i], NULL);
        if (sg_mkdir_p(d, 0700, &err) < 0)
            return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    sg_rm_rf(root, NULL);
    return 0;
}

static void test_resolve_id(void **state)
{
    (void)state;
    char out[SG_ID_LEN + 1];
    sg_err err = {0};
    assert_int_equal(sg_state_resolve_id("0123456789ab", out, &err), 0);
    assert_string_equal(out, "0123456789ab");
    assert_int_equal(sg_state_resolve_id("0123", out, &err), 0);
    assert_string_equal(out, "0123456789ab");
    err = (sg_err){0};
    assert_int_equal(sg_state_resolve_id("012", out, &err), -1); /* under 4 characters */
    assert_int_equal(err.code, EINVAL);
    assert_non_null(strstr(err.msg, "a sandbox id prefix needs at least 4 characters"));
    assert_int_equal(sg_state_resolve_id("ab12c", out, &err), 0);
    assert_string_equal(out, "ab12cd34ef56");

    err = (sg_err){0};
    assert_int_equal(sg_state_resolve_id("ab12", out, &err), -1);
    assert_int_equal(err.code, EINVAL);
    assert_non_null(strstr(err.msg, "is the start of 2 sandbox ids"));
    assert_non_null(strstr(err.msg, "ab12cd34ef56"));
    assert_non_null(strstr(err.msg, "ab12ff000000"));

    err = (sg_err){0};
    assert_int_equal(sg_state_resolve_id("ffff", out, &err), -1);
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.msg, "no sandbox 'ffff'"));

    /* Not a name: refused before any path is made of it. */
    const char *bad[] = {"../etc", "a/b", "", "ab12cd34ef56x", "x y"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err = (sg_err){0};
        assert_int_equal(sg_state_resolve_id(bad[i], out, &err), -1);
        assert_int_equal(err.code, ENOENT);
    }
    /* A full-length id that does not exist is not a prefix of anything. */
    err = (sg_err){0};
    assert_int_equal(sg_state_resolve_id("ab12cd34ef57", out, &err), -1);
    assert_int_equal(err.code, ENOENT);
}

/* Runs f with stderr redirected into a pipe; returns what it printed. */
static char *captured_stderr(int (*f)(void), int *rc)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(p[1], 2), 2);
    close(p[1]);
    *rc = f();
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    char *buf = calloc(1, 4096);
    assert_non_null(buf);
    ssize_t n = read(p[0], buf, 4095);
    close(p[0]);
    assert_true(n >= 0);
    return buf;
}

static int usage_plain(void)
{
    sg_cli_json_errors(false);
    return sg_cli_usage("pool", "--size: '%s' is not a number", "x\"y");
}

static int fail_plain(void)
{
    sg_cli_json_errors(false);
    return sg_cli_fail("destroy", "no sandbox 'zz'");
}

static int usage_json(void)
{
    sg_cli_json_errors(true);
    int rc = sg_cli_usage("pool", "--size: '%s' is not a number", "x\"y\n\x1b[2J");
    sg_cli_json_errors(false);
    return rc;
}

static void test_messages(void **state)
{
    (void)state;
    int rc = 0;
    sg_autofree char *a = captured_stderr(usage_plain, &rc);
    assert_int_equal(rc, SG_CLI_USAGE);
    assert_string_equal(a, "sandglass pool: --size: 'x\"y' is not a number (see 'sandglass pool --help')\n");

    sg_autofree char *b = captured_stderr(fail_plain, &rc);
    assert_int_equal(rc, SG_CLI_FAILED);
    assert_string_equal(b, "sandglass destroy: no sandbox 'zz'\n");

    /* Under --json: one JSON object on one line, ASCII only, the message
     * as given (escapes included), and the command named. */
    sg_autofree char *c = captured_stderr(usage_json, &rc);
    assert_int_equal(rc, SG_CLI_USAGE);
    size_t len = strlen(c);
    assert_true(len > 0 && c[len - 1] == '\n');
    assert_null(memchr(c, '\n', len - 1));
    for (size_t i = 0; i < len; i++)
        assert_true((unsigned char)c[i] < 0x80 && (c[i] >= 0x20 || c[i] == '\n'));
    sg_err err = {0};
    sg_autojson json_t *j = sg_json_parse(c, len - 1, &err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "command")), "pool");
    assert_string_equal(json_string_value(json_object_get(j, "error")),
                        "--size: 'x\"y\n\x1b[2J' is not a number (see 'sandglass pool --help')");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_id),
        cmocka_unit_test(test_messages),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* Unit tests for sandglass fork's known files (capture/contents.h): the
 * seed takes a file's sha256 from them without reading it only while the
 * file is as the CLI wrote it (a regular file of the same size, inode and
 * mtime); any other entry is read and hashed as before, a malformed or
 * loosely owned list is ignored whole, and the list serves one seed (it
 * is removed when loaded). And the rule that decides whether the fork
 * writes one (cli/ingest_check.h): the store it read is the one the new
 * sandbox streams to. Real files in a temporary directory, a real spool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "capture/contents.h"
#include "cli/ingest_check.h"
#include "delivery/spool.h"

/* sha256("") and a hash no file here has: a list naming the latter for a
 * file shows the bytes were not read */
#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA_FAKE "1111111111111111111111111111111111111111111111111111111111111111"

static char root[64], ws[96], spooldir[96], list[96];

static int setup(void **state)
{
    (void)state;
    strcpy(root, "/tmp/sg-seed-known-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    snprintf(ws, sizeof ws, "%s/ws", root);
    snprintf(spooldir, sizeof spooldir, "%s/spool", root);
    snprintf(list, sizeof list, "%s/" SG_CONTENTS_KNOWN_NAME, root);
    return mkdir(ws, 0700) == 0 && mkdir(spooldir, 0700) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sg_rm_rf(root, NULL);
    return 0;
}

static void put(const char *rel, const char *text)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", ws, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The list's line for rel as the fork makes it, with sha in place of its hash. */
static char *line_for(const char *rel, const char *sha)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", ws, rel);
    sg_autoclose int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    return sg_contents_known_line(rel, sha, fd);
}

static void write_list(const char *text, mode_t mode)
{
    unlink(list);
    int fd = open(list, O_WRONLY | O_CREAT | O_EXCL, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    fchmod(fd, mode);
    close(fd);
}

static void collect(void *ud, json_t *payload)
{
    json_t *seen = ud;
    json_object_set_new(seen, json_string_value(json_object_get(payload, "path")), payload);
}

/* The seed's payloads by path, the list loaded first: how many it took. */
static json_t *seed(size_t *loaded)
{
    sg_err err = {0};
    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(spooldir, &rep, &err);
    assert_non_null(sp);
    sg_contents *ct = sg_contents_new(ws, 0, &err);
    assert_non_null(ct);
    *loaded = sg_contents_load_known(ct, list);
    json_t *seen = json_object();
    sg_contents_seed(ct, sp, collect, seen);
    sg_contents_free(ct);
    sg_spool_close(sp);
    return seen;
}

static const char *sha_of(json_t *seen, const char *rel)
{
    json_t *c = json_object_get(json_object_get(seen, rel), "content");
    assert_true(json_is_true(json_object_get(c, "stored")));
    return json_string_value(json_object_get(c, "sha256"));
}

static void test_known_taken_only_while_unchanged(void **state)
{
    (void)state;
    put("same", "");      /* listed, unchanged: its hash taken from the list */
    put("grown", "");     /* listed, then written to: read again */
    put("unlisted", "");  /* not listed: read */
    sg_autofree char *a = line_for("same", SHA_FAKE), *b = line_for("grown", SHA_FAKE);
    sg_autofree char *text = sg_strdup_printf("%s%s", a, b);
    write_list(text, 0600);
    put("grown", "more");
    size_t loaded = 0;
    json_t *seen = seed(&loaded);
    assert_int_equal(loaded, 2);
    assert_string_equal(sha_of(seen, "same"), SHA_FAKE);
    assert_string_equal(sha_of(seen, "unlisted"), SHA_EMPTY);
    assert_string_not_equal(sha_of(seen, "grown"), SHA_FAKE);
    json_t *g = json_object_get(seen, "grown");
    assert_int_equal(json_integer_value(json_object_get(g, "size")), 4);
    /* the seed payload's own fields, as a read gives them */
    json_t *s = json_object_get(seen, "same");
    assert_string_equal(json_string_value(json_object_get(s, "sha256")), SHA_FAKE);
    assert_int_equal(json_integer_value(json_object_get(s, "size")), 0);
    assert_int_equal(access(list, F_OK), -1); /* it served this seed only */
    json_decref(seen);

    /* replaced by another file of the same size (another inode): read */
    sg_autofree char *c = line_for("same", SHA_FAKE);
    write_list(c, 0600);
    sg_autofree char *p = sg_strdup_printf("%s/same", ws), *q = sg_strdup_printf("%s/same.new", ws);
    put("same.new", "");
    assert_int_equal(rename(q, p), 0);
    seen = seed(&loaded);
    assert_int_equal(loaded, 1);
    assert_string_equal(sha_of(seen, "same"), SHA_EMPTY);
    json_decref(seen);
}

/* The watcher's baseline asks the same list (before the seed, which drops it). */
static void test_known_sha_for_the_baseline(void **state)
{
    (void)state;
    put("same", "");
    put("grown", "");
    sg_autofree char *a = line_for("same", SHA_FAKE), *b = line_for("grown", SHA_FAKE);
    sg_autofree char *text = sg_strdup_printf("%s%s", a, b);
    write_list(text, 0600);
    put("grown", "more");
    sg_err err = {0};
    sg_contents *ct = sg_contents_new(ws, 0, &err);
    assert_non_null(ct);
    assert_int_equal(sg_contents_load_known(ct, list), 2);
    struct stat st;
    uint8_t sha[32] = {0}, want[32];
    memset(want, 0x11, sizeof want);
    sg_autofree char *p = sg_strdup_printf("%s/same", ws), *q = sg_strdup_printf("%s/grown", ws);
    assert_int_equal(stat(p, &st), 0);
    assert_true(sg_contents_known_sha(ct, "same", &st, sha));
    assert_memory_equal(sha, want, sizeof want);
    assert_int_equal(stat(q, &st), 0);
    assert_false(sg_contents_known_sha(ct, "grown", &st, sha));
    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(spooldir, &rep, &err);
    assert_non_null(sp);
    json_t *seen = json_object();
    sg_contents_seed(ct, sp, collect, seen);
    json_decref(seen);
    assert_int_equal(stat(p, &st), 0);
    assert_false(sg_contents_known_sha(ct, "same", &st, sha)); /* dropped with the seed */
    sg_spool_close(sp);
    sg_contents_free(ct);
}

static void test_bad_lists_ignored(void **state)
{
    (void)state;
    put("f", "");
    sg_autofree char *good = line_for("f", SHA_FAKE);
    size_t loaded = 0;
    const char *bad[] = {
        "1111 0 1 1 66\n",                 /* a short hash */
        "zz11111111111111111111111111111111111111111111111111111111111111 0 1 1 66\n",
        "not a line at all\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sg_autofree char *text = sg_strdup_printf("%s%s", good, bad[i]); /* one bad line spoils it all */
        write_list(text, 0600);
        json_t *seen = seed(&loaded);
        assert_int_equal(loaded, 0);
        assert_string_equal(sha_of(seen, "f"), SHA_EMPTY);
        json_decref(seen);
    }
    /* torn: no final newline */
    sg_autofree char *torn = strndup(good, strlen(good) - 1);
    write_list(torn, 0600);
    json_t *seen = seed(&loaded);
    assert_int_equal(loaded, 0);
    json_decref(seen);
    /* writable by others: not trusted */
    write_list(good, 0622);
    seen = seed(&loaded);
    assert_int_equal(loaded, 0);
    assert_string_equal(sha_of(seen, "f"), SHA_EMPTY);
    json_decref(seen);
    assert_int_equal(access(list, F_OK), -1);
    /* none at all */
    seen = seed(&loaded);
    assert_int_equal(loaded, 0);
    json_decref(seen);
}

static void test_same_store(void **state)
{
    (void)state;
    assert_true(sg_cli_ingest_same_store("ws://127.0.0.1:8080", "ws://127.0.0.1:8080"));
    assert_true(sg_cli_ingest_same_store("http://127.0.0.1:8080", "ws://127.0.0.1:8080"));
    assert_true(sg_cli_ingest_same_store("HTTPS://Ingest.Example:443/", "wss://ingest.example:443"));
    assert_true(sg_cli_ingest_same_store("ws://a:1,ws://b:2", "http://a:1,http://b:2/"));
    assert_false(sg_cli_ingest_same_store("ws://127.0.0.1:8080", "ws://127.0.0.1:8081"));
    assert_false(sg_cli_ingest_same_store("ws://127.0.0.1:8080", "ws://localhost:8080")); /* not known */
    assert_false(sg_cli_ingest_same_store("http://a:1", "wss://a:1"));
    assert_false(sg_cli_ingest_same_store("ws://a:1/x", "ws://a:1/X"));
    assert_false(sg_cli_ingest_same_store("ws://a:1,ws://b:2", "ws://a:1"));
    assert_false(sg_cli_ingest_same_store("ws://a:1", "ws://a:1,ws://b:2"));
    assert_false(sg_cli_ingest_same_store("ws://b:2,ws://a:1", "ws://a:1,ws://b:2"));
    assert_false(sg_cli_ingest_same_store("a:1", "a:1"));
    assert_false(sg_cli_ingest_same_store(NULL, "ws://a:1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_known_taken_only_while_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_known_sha_for_the_baseline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_lists_ignored, setup, teardown),
        cmocka_unit_test(test_same_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

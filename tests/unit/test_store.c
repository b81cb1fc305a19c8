#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "ingest/store.h"
#include "store_contents_check.h"

#include <sqlite3.h>

typedef struct fixture {
    char dir[64];
    char url[160];
    sg_store *s;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sg-test-store-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->url, sizeof f->url, "sqlite:%s/db/events.db", f->dir);
    char db[sizeof f->dir + 8];
    snprintf(db, sizeof db, "%s/db", f->dir);
    if (mkdir(db, 0700) < 0) /* the store makes no directory */
        return -1;
    sg_err err = {0};
    f->s = sg_store_open(f->url, &err);
    if (!f->s)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sg_store_close(f->s);
    sg_err err;
    sg_rm_rf(f->dir, &err);
    free(f);
    return 0;
}

static sg_store_row row(const char *sb, int64_t seq, const char *payload)
{
    return (sg_store_row){.learner = "alice", .task = "t1", .sandbox = sb, .seq = seq,
                          .kind = "command", .ts = "2026-01-01T00:00:00+00:00",
                          .received = "2026-01-01T00:00:01+00:00", .payload = payload,
                          .payload_len = strlen(payload)};
}

static int64_t contiguous(sg_store *s, const char *sb)
{
    sg_err err = {0};
    int64_t v = -1;
    assert_int_equal(sg_store_contiguous(s, "alice", "t1", sb, &v, &err), 0);
    return v;
}

static void test_put_dedup_order(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    /* Out of order within a batch, and a duplicate in the same batch. */
    sg_store_row rows[] = {row("sb", 2, "{\"cmd\":\"c\"}"), row("sb", 0, "{\"cmd\":\"a\"}"),
                           row("sb", 1, "{\"cmd\":\"b\"}"), row("sb", 1, "{\"cmd\":\"X\"}")};
    size_t ins = 99;
    assert_int_equal(sg_store_put(f->s, rows, 4, &ins, &err), 0);
    assert_int_equal(ins, 3);
    /* Replaying the same rows inserts nothing and keeps the first payload. */
    assert_int_equal(sg_store_put(f->s, rows, 3, &ins, &err), 0);
    assert_int_equal(ins, 0);
    sg_store_query q = {.sandbox = "sb", .after_seq = -1, .after_id = -1};
    sg_autojson json_t *evs = sg_store_events(f->s, &q, &err);
    assert_non_null(evs);
    assert_int_equal(json_array_size(evs), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(evs, i);
        assert_int_equal(json_integer_value(json_object_get(e, "seq")), (json_int_t)i);
        assert_string_equal(json_string_value(json_object_get(e, "learner")), "alice");
        assert_string_equal(json_string_value(json_object_get(e, "received")),
                            "2026-01-01T00:00:01+00:00");
    }
    const char *cmd1 = json_string_value(
        json_object_get(json_object_get(json_array_get(evs, 1), "payload"), "cmd"));
    assert_string_equal(cmd1, "b");
    /* The same seq in another sandbox is another stream. */
    sg_store_row other = row("sb2", 0, "{}");
    assert_int_equal(sg_store_put(f->s, &other, 1, &ins, &err), 0);
    assert_int_equal(ins, 1);
}

static void test_contiguous_gaps(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    assert_int_equal(contiguous(f->s, "g"), -1);
    sg_store_row r1[] = {row("g", 1, "{}"), row("g", 2, "{}")};
    assert_int_equal(sg_store_put(f->s, r1, 2, NULL, &err), 0);
    assert_int_equal(contiguous(f->s, "g"), -1); /* seq 0 missing */
    sg_store_row r2[] = {row("g", 0, "{}"), row("g", 4, "{}")};
    assert_int_equal(sg_store_put(f->s, r2, 2, NULL, &err), 0);
    assert_int_equal(contiguous(f->s, "g"), 2);
    sg_store_row r3 = row("g", 3, "{}");
    assert_int_equal(sg_store_put(f->s, &r3, 1, NULL, &err), 0);
    assert_int_equal(contiguous(f->s, "g"), 4);
    /* Incremental: starting from a known value scans only above it. */
    int64_t v = 2;
    assert_int_equal(sg_store_contiguous(f->s, "alice", "t1", "g", &v, &err), 0);
    assert_int_equal(v, 4);

    sg_autojson json_t *sbs = sg_store_sandboxes(f->s, &err);
    assert_int_equal(json_array_size(sbs), 1);
    json_t *g = json_array_get(sbs, 0);
    assert_int_equal(json_integer_value(json_object_get(g, "events")), 5);
    assert_int_equal(json_integer_value(json_object_get(g, "acked_seq")), 4);
}

static void test_query_filters(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    sg_store_row rows[50];
    for (int i = 0; i < 50; i++)
        rows[i] = row("q", i, "{}");
    assert_int_equal(sg_store_put(f->s, rows, 50, NULL, &err), 0);
    sg_store_query q = {.sandbox = "q", .after_seq = 10, .after_id = -1, .limit = 5};
    sg_autojson json_t *a = sg_store_events(f->s, &q, &err);
    assert_int_equal(json_array_size(a), 5);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(a, 0), "seq")), 11);
    q = (sg_store_query){.learner = "bob", .after_seq = -1, .after_id = -1};
    sg_autojson json_t *b = sg_store_events(f->s, &q, &err);
    assert_int_equal(json_array_size(b), 0);
    q = (sg_store_query){.after_seq = -1, .after_id = 45};
    sg_autojson json_t *c = sg_store_events(f->s, &q, &err);
    assert_int_equal(json_array_size(c), 5);
    q = (sg_store_query){.after_seq = -1, .after_id = -1, .limit = 100000};
    sg_autojson json_t *d = sg_store_events(f->s, &q, &err);
    assert_int_equal(json_array_size(d), 50);
}

static void test_reopen_keeps_data(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    sg_store_row rows[] = {row("r", 0, "{\"k\":1}"), row("r", 1, "{\"k\":2}")};
    assert_int_equal(sg_store_put(f->s, rows, 2, NULL, &err), 0);
    sg_store_close(f->s);
    f->s = sg_store_open(f->url, &err);
    assert_non_null(f->s);
    assert_int_equal(contiguous(f->s, "r"), 1);
    size_t ins = 9;
    assert_int_equal(sg_store_put(f->s, rows, 2, &ins, &err), 0);
    assert_int_equal(ins, 0);
}

/* The stream's cursor: the highest id; SQLite has no other writer to hear. */
static void test_last_id(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    int64_t id = -1;
    assert_int_equal(sg_store_last_id(f->s, &id, &err), 0);
    assert_int_equal(id, 0);
    sg_store_row rows[] = {row("l", 0, "{}"), row("l", 1, "{}"), row("m", 0, "{}")};
    assert_int_equal(sg_store_put(f->s, rows, 3, NULL, &err), 0);
    assert_int_equal(sg_store_last_id(f->s, &id, &err), 0);
    sg_store_query q = {.after_seq = -1, .after_id = 0};
    sg_autojson json_t *evs = sg_store_events(f->s, &q, &err);
    assert_int_equal(json_array_size(evs), 3);
    assert_int_equal(id, json_integer_value(json_object_get(json_array_get(evs, 2), "id")));
    assert_int_equal(sg_store_listen(f->s, &err), -1);
    assert_int_equal(err.code, ENOTSUP);
}

/* Runs sql on the SQLite file of url ("sqlite:PATH"); the first column of
 * its last row, or -1. */
static int64_t raw_sql(const char *url, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(url + 7, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    const char *rest = sql;
    while (rest && *rest) {
        assert_int_equal(sqlite3_prepare_v2(db, rest, -1, &st, &rest), SQLITE_OK);
        if (!st)
            break;
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        assert_int_equal(rc, SQLITE_DONE);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* The version is recorded; a store newer than this build is refused with
 * both versions named, and left as it was. */
static void test_schema_version(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    assert_int_equal(raw_sql(f->url, "SELECT version FROM sg_schema"), SG_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_sql(f->url, "SELECT count(*) FROM sqlite_master WHERE name = 'events'"), 0);
    sg_store_close(f->s);
    f->s = NULL;
    raw_sql(f->url, "UPDATE sg_schema SET version = 99");
    assert_null(sg_store_open(f->url, &err));
    assert_int_equal(err.code, ENOTSUP);
    assert_non_null(strstr(err.msg, "version 99"));
    char known[32];
    snprintf(known, sizeof known, "knows (%d)", SG_STORE_SCHEMA_VERSION);
    assert_non_null(strstr(err.msg, known));
    assert_int_equal(raw_sql(f->url, "SELECT version FROM sg_schema"), 99);
    raw_sql(f->url, "UPDATE sg_schema SET version = 7"); /* SG_STORE_SCHEMA_VERSION */
    f->s = sg_store_open(f->url, &err);
    assert_non_null(f->s);
}

/* A store of version 6 (content and recording parts WITHOUT ROWID, their
 * bytes in the key's b-tree) is migrated: the parts kept, in rowid tables. */
static void test_schema_v6_parts_migrated(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    const char *sha = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    static unsigned char data[20000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 13);
    sg_content_part cp = {sha, sizeof data, 0, data, sizeof data};
    sg_cast_part kp = {"alice", "t1", "sb", "s1", 0, "{\"version\": 2}\n", 15};
    assert_int_equal(sg_store_put_contents(f->s, &cp, 1, &err), 0);
    assert_int_equal(sg_store_put_casts(f->s, &kp, 1, &err), 0);
    sg_store_close(f->s);
    f->s = NULL;
    raw_sql(f->url, "CREATE TABLE p6 (sha256 TEXT NOT NULL, off INTEGER NOT NULL, data BLOB NOT NULL,"
                    " PRIMARY KEY (sha256, off)) WITHOUT ROWID; INSERT INTO p6 SELECT * FROM sg_content_parts;"
                    "DROP TABLE sg_content_parts; ALTER TABLE p6 RENAME TO sg_content_parts;"
                    "CREATE TABLE c6 (learner TEXT NOT NULL, task TEXT NOT NULL, sandbox TEXT NOT NULL,"
                    " session TEXT NOT NULL, off INTEGER NOT NULL, data BLOB NOT NULL,"
                    " PRIMARY KEY (learner, task, sandbox, session, off)) WITHOUT ROWID;"
                    "INSERT INTO c6 SELECT * FROM sg_casts; DROP TABLE sg_casts; ALTER TABLE c6 RENAME TO sg_casts;"
                    "UPDATE sg_schema SET version = 6");
    assert_int_equal(raw_sql(f->url, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%WITHOUT ROWID%'"
                                     " AND name IN ('sg_content_parts', 'sg_casts')"), 2);
    f->s = sg_store_open(f->url, &err);
    assert_non_null(f->s);
    assert_int_equal(raw_sql(f->url, "SELECT version FROM sg_schema"), SG_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_sql(f->url, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%WITHOUT ROWID%'"
                                     " AND name IN ('sg_content_parts', 'sg_casts')"), 0);
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_store_content_read(f->s, sha, contents_take, &b, &err), 0);
    assert_int_equal(b.len, sizeof data);
    assert_memory_equal(b.data, data, sizeof data);
    sg_autobuf sg_buf c = {0};
    assert_int_equal(sg_store_cast_read(f->s, "alice", "t1", "sb", "s1", contents_take, &c, &err), 0);
    assert_int_equal(c.len, 15);
    /* the key is still unique: a part put again is stored once */
    assert_int_equal(sg_store_put_contents(f->s, &cp, 1, &err), 0);
    assert_int_equal(raw_sql(f->url, "SELECT count(*) FROM sg_content_parts"), 1);
}

/* A store of version 1 (the table "events", no version) is migrated at
 * open: its rows kept, ids and all, under the one vocabulary. */
static void test_schema_v1_migrated(void **state)
{
    fixture *f = *state;
    sg_store_close(f->s);
    f->s = NULL;
    char path[200];
    snprintf(path, sizeof path, "%s", f->url + 7);
    assert_int_equal(unlink(path), 0);
    raw_sql(f->url, "CREATE TABLE events (id INTEGER PRIMARY KEY, learner TEXT NOT NULL, task TEXT NOT NULL,"
                    " sandbox TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts TEXT NOT NULL,"
                    " received TEXT NOT NULL, payload TEXT NOT NULL, UNIQUE (learner, task, sandbox, seq));"
                    "INSERT INTO events VALUES (7, 'alice', 't1', 'old', 0, 'command', 'a', 'b', '{\"cmd\": 1}');"
                    "INSERT INTO events VALUES (9, 'alice', 't1', 'old', 1, 'command', 'a', 'b', '{}');");
    sg_err err = {0};
    f->s = sg_store_open(f->url, &err);
    assert_non_null(f->s);
    assert_int_equal(raw_sql(f->url, "SELECT version FROM sg_schema"), SG_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_sql(f->url, "SELECT count(*) FROM sqlite_master WHERE name = 'events'"), 0);
    assert_int_equal(contiguous(f->s, "old"), 1);
    sg_store_query q = {.sandbox = "old", .after_seq = -1, .after_id = -1};
    sg_autojson json_t *evs = sg_store_events(f->s, &q, &err);
    assert_int_equal(json_array_size(evs), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(evs, 0), "id")), 7);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_array_get(evs, 0), "payload"), "cmd")),
                     1);
    /* the unique key came along: a resend is still a duplicate */
    sg_store_row again = row("old", 1, "{}");
    size_t ins = 9;
    assert_int_equal(sg_store_put(f->s, &again, 1, &ins, &err), 0);
    assert_int_equal(ins, 0);
    int64_t id = 0;
    assert_int_equal(sg_store_last_id(f->s, &id, &err), 0);
    assert_int_equal(id, 9);
}

/* In another process (another owner of POSIX locks: the sqlite3 shell,
 * a fresh program, not a fork that would share this one's SQLite state):
 * how many rows the store's file holds, read by a connection of its own,
 * then closed. */
static int64_t count_elsewhere(const char *url)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' 'SELECT count(*) FROM sg_events'", url + 7);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    long long n = -1;
    if (fscanf(p, "%lld", &n) != 1)
        n = -1;
    assert_int_equal(pclose(p), 0);
    return n;
}

/* A second store of the same file in this process (the ingest's reader
 * and writer) keeps the first one's locks: another process's connection,
 * closing, must not take the WAL away from under it, and what it commits
 * afterwards is seen by every reader. */
static void test_second_open_keeps_locks(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    sg_store *other = sg_store_open(f->url, &err);
    assert_non_null(other);
    sg_store_row r0 = row("lk", 0, "{}"), r1 = row("lk", 1, "{}");
    assert_int_equal(sg_store_put(f->s, &r0, 1, NULL, &err), 0);
    assert_int_equal(count_elsewhere(f->url), 1);
    char wal[200];
    snprintf(wal, sizeof wal, "%s-wal", f->url + 7);
    struct stat st;
    assert_int_equal(stat(wal, &st), 0);
    assert_int_equal(sg_store_put(f->s, &r1, 1, NULL, &err), 0);
    assert_int_equal(count_elsewhere(f->url), 2);
    sg_store_close(other);
}

typedef struct texts {
    sg_buf all;
    size_t n;
} texts;

static int collect(void *ud, const sg_store_event *e)
{
    texts *t = ud;
    if (t->n++ && sg_buf_append(&t->all, ",", 1) < 0)
        return -1;
    return sg_store_event_json(&t->all, e);
}

/* Rows written as stored (sg_store_event_json) are the bytes jansson's
 * compact dump of the parsed rows gives, when the payloads are compact as
 * the capture makes them; a payload with other whitespace is the same
 * JSON, on one line. */
static void test_event_json_bytes(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    /* every ASCII byte (controls too), non-ASCII, and values of each type */
    char all[200];
    size_t k = 0;
    for (int c = 1; c < 128; c++)
        all[k++] = (char)c;
    all[k] = '\0';
    sg_autojson json_t *pv = json_pack("{s:s, s:s, s:i, s:f, s:f, s:b, s:n, s:[i, s, {s:s}], s:I}", "all", all,
                                       "utf8", "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80 \xe2\x80\xae", "i", -42,
                                       "f", 1.5, "g", 1e300, "t", 1, "nul", "arr", 1, "x/y", "o", "k",
                                       "big", (json_int_t)INT64_MAX);
    sg_autofree char *compact = json_dumps(pv, JSON_COMPACT);
    sg_store_row rows[] = {row("ej", 0, compact), row("ej", 1, "{}"), row("ej", 2, "{\"a\":{\"b\":[]}}")};
    rows[0].ts = "ts \"q\" \\ \x01\x1f\x7f \xc3\xa9";
    rows[1].kind = "stdout";
    assert_int_equal(sg_store_put(f->s, rows, 3, NULL, &err), 0);
    sg_store_query q = {.sandbox = "ej", .after_seq = -1, .after_id = -1};
    texts t = {0};
    assert_int_equal(sg_store_scan(f->s, &q, collect, &t, &err), 3);
    sg_autojson json_t *tree = sg_store_events(f->s, &q, &err);
    sg_autofree char *want = json_dumps(tree, JSON_COMPACT);
    assert_non_null(want);
    want[strlen(want) - 1] = '\0'; /* want is [...] */
    if (strcmp(t.all.data, want + 1) != 0) {
        size_t d = 0;
        while (t.all.data[d] == want[1 + d])
            d++;
        fail_msg("differ at %zu: ...%.40s vs ...%.40s", d, t.all.data + d, want + 1 + d);
    }
    sg_buf_free(&t.all);

    /* another layout of the same payload: the same JSON, one line */
    sg_store_row spaced = row("ej2", 0, " {\n  \"a\" : [1, 2],\r\n\t\"s\": \"x\"\n}\n");
    assert_int_equal(sg_store_put(f->s, &spaced, 1, NULL, &err), 0);
    q.sandbox = "ej2";
    t = (texts){0};
    assert_int_equal(sg_store_scan(f->s, &q, collect, &t, &err), 1);
    assert_null(strchr(t.all.data, '\n'));
    assert_null(strchr(t.all.data, '\r'));
    json_error_t je;
    sg_autojson json_t *got = json_loads(t.all.data, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(got);
    sg_autojson json_t *p2 = json_pack("{s:[i, i], s:s}", "a", 1, 2, "s", "x");
    assert_true(json_equal(json_object_get(got, "payload"), p2));
    sg_buf_free(&t.all);
}

static void test_bad_urls(void **state)
{
    (void)state;
    sg_err err = {0};
    assert_null(sg_store_open("mysql://x", &err));
    assert_non_null(strstr(err.msg, "unknown"));
    assert_null(sg_store_open("sqlite:", &err));
    assert_null(sg_store_open("sqlite:/proc/nope/x.db", &err));
    /* a missing directory is refused, not made */
    char dir[] = "/tmp/sg-test-store-missing-XXXXXX", url[128], sub[96];
    assert_non_null(mkdtemp(dir));
    snprintf(url, sizeof url, "sqlite:%s/no/such/events.db", dir);
    assert_null(sg_store_open(url, &err));
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.msg, "does not exist"));
    snprintf(sub, sizeof sub, "%s/no", dir);
    struct stat st;
    assert_int_equal(stat(sub, &st), -1);
    assert_int_equal(rmdir(dir), 0);
}

static void test_contents(void **state)
{
    fixture *f = *state;
    contents_check(f->s);
}

/* sg_hosts: a host's row replaced by its next registration (an upsert by
 * name), listed by name, one asked for by name. */
static void test_hosts(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    assert_int_equal(sg_store_host_put(f->s, "b", "{\"n\":1}", 100, &err), 0);
    assert_int_equal(sg_store_host_put(f->s, "a", "{\"n\":2}", 101, &err), 0);
    assert_int_equal(sg_store_host_put(f->s, "b", "{\"n\":3}", 102, &err), 0);
    json_t *all = sg_store_hosts(f->s, &(sg_store_hosts_query){0}, &err);
    assert_non_null(all);
    assert_int_equal(json_array_size(all), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 0), "name")), "a");
    json_t *b = json_array_get(all, 1);
    assert_int_equal(json_integer_value(json_object_get(b, "last_seen")), 102);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "info"), "n")), 3);
    json_decref(all);
    json_t *one = sg_store_hosts(f->s, &(sg_store_hosts_query){.name = "a"}, &err);
    assert_int_equal(json_array_size(one), 1);
    json_decref(one);
    json_t *none = sg_store_hosts(f->s, &(sg_store_hosts_query){.name = "zz"}, &err);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    /* the next page: names after the cursor */
    json_t *next = sg_store_hosts(f->s, &(sg_store_hosts_query){.after = "a"}, &err);
    assert_int_equal(json_array_size(next), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(next, 0), "name")), "b");
    json_decref(next);
    /* the hosts that list a sandbox: by its id, or a prefix of it */
    assert_int_equal(sg_store_host_put(f->s, "c", "{\"sandboxes\":[{\"id\":\"0123456789ab\"},{\"id\":\"ffff00\"}]}",
                                       103, &err), 0);
    const char *hits[] = {"0123456789ab", "0123", "ffff00"}, *misses[] = {"0124", "123456789ab"};
    for (size_t i = 0; i < 3; i++) {
        json_t *h = sg_store_hosts(f->s, &(sg_store_hosts_query){.sandbox = hits[i]}, &err);
        assert_int_equal(json_array_size(h), 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(h, 0), "name")), "c");
        json_decref(h);
    }
    for (size_t i = 0; i < 2; i++) {
        json_t *h = sg_store_hosts(f->s, &(sg_store_hosts_query){.sandbox = misses[i]}, &err);
        assert_int_equal(json_array_size(h), 0);
        json_decref(h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_dedup_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_contents, setup, teardown),
        cmocka_unit_test_setup_teardown(test_contiguous_gaps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_keeps_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_last_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_v1_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_v6_parts_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_json_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_second_open_keeps_locks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hosts, setup, teardown),
        cmocka_unit_test(test_bad_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

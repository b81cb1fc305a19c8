/* Unit tests for state: the state directory's paths, a sandbox's record
 * (written, read back, refused when corrupt), the listing, the abort
 * record, the host-wide uid slots and the ownership test gc relies on.
 * Real files in a temporary state directory; the uid slots are the real
 * SG_UID_DIR (slots are claimed O_EXCL, so live sandboxes are not touched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "state/state.h"

static char root[64];

static int group_setup(void **state)
{
    (void)state;
    strcpy(root, "/tmp/sg-state-test-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    setenv("SANDGLASS_STATE_DIR", root, 1);
    sg_err err = {0};
    const char *d = sg_state_dir(&err);
    return d && strcmp(d, root) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    sg_rm_rf(root, NULL);
    return 0;
}

/* A sandbox directory for id (create makes it before it saves the record). */
static void make_sandbox_dir(const char *id)
{
    sg_autofree char *dir = sg_state_sandbox_path(id, NULL);
    sg_err err = {0};
    assert_int_equal(sg_mkdir_p(dir, 0700, &err), 0);
}

static void fill_meta(sg_sandbox_meta *m, const char *id)
{
    memset(m, 0, sizeof *m);
    snprintf(m->id, sizeof m->id, "%s", id);
    m->learner = strdup("ada");
    m->task = strdup("t1");
    m->workspace = strdup("/srv/ws");
    m->ingest_url = strdup("ws://127.0.0.1:7433");
    m->secret_file = strdup("/etc/sg/secret");
    m->own_workspace = true;
    m->idmap_workspace = true;
    m->memory = 512u << 20;
    m->pids = 128;
    m->cpus = 1.5;
    m->timeout_s = 30.25;
    m->output_limit = 1u << 20;
    m->max_wall_s = 3600;
    m->max_execs = 100;
    m->max_cpu_s = 60.5;
    m->max_calls = 7;
    m->manual_checkpoints = true;
    m->uid = 0x70000001;
    m->gid = 0x70000001;
    m->supervisor_pid = 4242;
    m->init_pid = 4343;
    m->creator = strdup("{\"user\":\"root\",\"uid\":0,\"pid\":77}");
    snprintf(m->created, sizeof m->created, "2026-12-02T05:00:00.000000+00:00");
}

static void test_paths(void **state)
{
    (void)state;
    sg_autofree char *p = sg_state_path("ingest/secret");
    sg_autofree char *d = sg_state_sandbox_path("abc", NULL);
    sg_autofree char *f = sg_state_sandbox_path("abc", "meta.json");
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s/ingest/secret", root);
    assert_string_equal(p, want);
    snprintf(want, sizeof want, "%s/sb/abc", root);
    assert_string_equal(d, want);
    snprintf(want, sizeof want, "%s/sb/abc/meta.json", root);
    assert_string_equal(f, want);
    struct stat st;
    assert_int_equal(stat(root, &st), 0);
}

static void test_meta_round_trip(void **state)
{
    (void)state;
    make_sandbox_dir("rt1");
    sg_sandbox_meta m, back;
    fill_meta(&m, "rt1");
    sg_err err = {0};
    assert_int_equal(sg_sandbox_meta_save(&m, &err), 0);
    sg_autofree char *path = sg_state_sandbox_path("rt1", "meta.json");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* the learner's names and paths */
    assert_int_equal(sg_sandbox_meta_load("rt1", &back, &err), 0);
    assert_string_equal(back.id, "rt1");
    assert_string_equal(back.learner, "ada");
    assert_string_equal(back.task, "t1");
    assert_string_equal(back.workspace, "/srv/ws");
    assert_null(back.rootfs);
    assert_string_equal(back.ingest_url, "ws://127.0.0.1:7433");
    assert_string_equal(back.secret_file, "/etc/sg/secret");
    assert_true(back.own_workspace);
    assert_true(back.idmap_workspace);
    assert_int_equal(back.memory, m.memory);
    assert_int_equal(back.pids, 128);
    assert_true(back.cpus == 1.5);
    assert_true(back.timeout_s == 30.25);
    assert_int_equal(back.output_limit, m.output_limit);
    assert_true(back.max_wall_s == 3600);
    assert_int_equal(back.max_execs, 100);
    assert_true(back.max_cpu_s == 60.5);
    assert_int_equal(back.max_calls, 7);
    assert_true(back.manual_checkpoints);
    assert_int_equal(back.uid, m.uid);
    assert_int_equal(back.gid, m.gid);
    assert_int_equal(back.supervisor_pid, 4242);
    assert_int_equal(back.init_pid, 4343);
    assert_string_equal(back.created, m.created);
    /* the creator (the capture's `sandbox` created actor) survives the record */
    sg_autojson json_t *cr = json_loads(back.creator, 0, NULL);
    assert_non_null(cr);
    assert_string_equal(json_string_value(json_object_get(cr, "user")), "root");
    assert_int_equal(json_integer_value(json_object_get(cr, "pid")), 77);
    sg_sandbox_meta_clear(&back);

    /* Without a task: not captured, and the keys say so by their absence. */
    free(m.task);
    m.task = NULL;
    m.idmap_workspace = false;
    m.manual_checkpoints = false;
    assert_int_equal(sg_sandbox_meta_save(&m, &err), 0);
    assert_int_equal(sg_sandbox_meta_load("rt1", &back, &err), 0);
    assert_null(back.task);
    assert_false(back.idmap_workspace);
    assert_false(back.manual_checkpoints);
    sg_autojson json_t *j = sg_sandbox_meta_json(&back);
    assert_non_null(j);
    assert_null(json_object_get(j, "idmap_workspace"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "caps"), "checkpoints")), "exec");
    sg_sandbox_meta_clear(&back);
    sg_sandbox_meta_clear(&m);
    /* Cleared means zeroed: a second clear frees nothing twice. */
    sg_sandbox_meta_clear(&m);
}

/* The actor of the events: {user, uid, pid}, user null for a uid with no
 * name, via only when given. */
static void test_actor_json(void **state)
{
    (void)state;
    sg_autojson json_t *a = sg_actor_json(0, 12, NULL);
    assert_non_null(a);
    assert_string_equal(json_string_value(json_object_get(a, "user")), "root");
    assert_int_equal(json_integer_value(json_object_get(a, "uid")), 0);
    assert_int_equal(json_integer_value(json_object_get(a, "pid")), 12);
    assert_int_equal(json_object_size(a), 3);
    sg_autojson json_t *b = sg_actor_json(SG_UID_BASE + 12345, 13, "mcp: x");
    assert_non_null(b);
    assert_true(json_is_null(json_object_get(b, "user")));
    assert_string_equal(json_string_value(json_object_get(b, "via")), "mcp: x");
    sg_autojson json_t *c = sg_actor_json(0, 14, "");
    assert_null(json_object_get(c, "via"));
}

static void write_meta_text(const char *id, const char *text)
{
    make_sandbox_dir(id);
    sg_autofree char *path = sg_state_sandbox_path(id, "meta.json");
    sg_err err = {0};
    assert_int_equal(sg_write_file_atomic(path, text, strlen(text), 0600, &err), 0);
}

static void test_meta_refused(void **state)
{
    (void)state;
    sg_sandbox_meta m;
    sg_err err = {0};

    assert_int_equal(sg_sandbox_meta_load("nosuch", &m, &err), -1);
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.msg, "no sandbox with id 'nosuch'"));

    /* Ids are names: no path walks out of sb/. */
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("../../etc", &m, &err), -1);
    assert_int_equal(err.code, EINVAL);
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("0123456789012345678901234567890123456789", &m, &err), -1);
    assert_int_equal(err.code, EINVAL);

    write_meta_text("bad1", "{not json");
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("bad1", &m, &err), -1);
    assert_non_null(strstr(err.msg, "corrupt sandbox record"));

    write_meta_text("bad2", "[1, 2]");
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("bad2", &m, &err), -1);
    assert_non_null(strstr(err.msg, "corrupt sandbox record"));

    write_meta_text("bad3", "{\"learner\": \"ada\"}");
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("bad3", &m, &err), -1);
    assert_non_null(strstr(err.msg, "missing learner or workspace"));

    write_meta_text("bad4", "{\"learner\": 7, \"workspace\": \"/w\"}");
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("bad4", &m, &err), -1);

    /* A minimal record loads, with zeros for what it leaves out. */
    write_meta_text("min1", "{\"learner\": \"l\", \"workspace\": \"/w\"}");
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_load("min1", &m, &err), 0);
    assert_int_equal(m.memory, 0);
    assert_null(m.task);
    assert_string_equal(m.created, "");
    assert_null(m.creator); /* a record from before it: no creator, no error */
    sg_sandbox_meta_clear(&m);
    /* a creator that is not an object is none */
    write_meta_text("min2", "{\"learner\": \"l\", \"workspace\": \"/w\", \"creator\": \"root\"}");
    assert_int_equal(sg_sandbox_meta_load("min2", &m, &err), 0);
    assert_null(m.creator);
    sg_sandbox_meta_clear(&m);

    /* from_json: the id is the caller's, never the record's. */
    sg_autojson json_t *j = json_pack("{s:s, s:s, s:s}", "id", "other", "learner", "l", "workspace", "/w");
    assert_int_equal(sg_sandbox_meta_from_json(j, "mine", &m, &err), 0);
    assert_string_equal(m.id, "mine");
    sg_sandbox_meta_clear(&m);
    sg_autojson json_t *arr = json_array();
    err = (sg_err){0};
    assert_int_equal(sg_sandbox_meta_from_json(arr, "mine", &m, &err), -1);
    assert_int_equal(err.code, EINVAL);
}

static void test_list(void **state)
{
    (void)state;
    make_sandbox_dir("lst-a");
    make_sandbox_dir("lst-b");
    /* Not sandbox names: skipped, never handed to a caller as an id. */
    sg_autofree char *dot = sg_state_sandbox_path(".hidden", NULL);
    sg_autofree char *bad = sg_state_sandbox_path("has space", NULL);
    assert_int_equal(mkdir(dot, 0700), 0);
    assert_int_equal(mkdir(bad, 0700), 0);
    sg_err err = {0};
    sg_autostrv char **ids = sg_state_list(&err);
    assert_non_null(ids);
    bool a = false, b = false;
    for (char **p = ids; *p; p++) {
        a |= strcmp(*p, "lst-a") == 0;
        b |= strcmp(*p, "lst-b") == 0;
        assert_true(sg_valid_name(*p));
        assert_true((*p)[0] != '.');
    }
    assert_true(a && b);
}

static void test_abort_record(void **state)
{
    (void)state;
    make_sandbox_dir("ab1");
    char by[32], reason[64];
    assert_int_equal(sg_state_abort_load("ab1", by, sizeof by, reason, sizeof reason), 0);
    sg_err err = {0};
    assert_int_equal(sg_state_abort_save("ab1", "operator", "stop \"now\"\n", &err), 0);
    assert_int_equal(sg_state_abort_load("ab1", by, sizeof by, reason, sizeof reason), 1);
    assert_string_equal(by, "operator");
    assert_string_equal(reason, "stop \"now\"\n");
    /* A reason longer than the caller's buffer is cut, never overrun. */
    char longr[300];
    memset(longr, 'r', sizeof longr - 1);
    longr[sizeof longr - 1] = '\0';
    assert_int_equal(sg_state_abort_save("ab1", "cap", longr, &err), 0);
    char small[8];
    assert_int_equal(sg_state_abort_load("ab1", by, sizeof by, small, sizeof small), 1);
    assert_string_equal(small, "rrrrrrr");
    /* A corrupt record still says "aborted": never a silent resume. */
    sg_autofree char *path = sg_state_sandbox_path("ab1", "abort.json");
    assert_int_equal(sg_write_file_atomic(path, "garbage", 7, 0600, &err), 0);
    assert_int_equal(sg_state_abort_load("ab1", by, sizeof by, reason, sizeof reason), 1);
    assert_string_equal(by, "unknown");
    sg_state_abort_clear("ab1");
    assert_int_equal(sg_state_abort_load("ab1", by, sizeof by, reason, sizeof reason), 0);
    sg_state_abort_clear("ab1"); /* twice: nothing to clear is fine */
    /* No sandbox directory: the save fails with a message, not silently. */
    err = (sg_err){0};
    assert_int_equal(sg_state_abort_save("no-dir", "operator", "x", &err), -1);
    assert_non_null(strstr(err.msg, "cannot record the abort"));
}

/* The uplink's state for `ls`: none, then each save replaces the last; a
 * corrupt record is no record (ls adds nothing rather than a guess). */
static void test_uplink_record(void **state)
{
    (void)state;
    make_sandbox_dir("up1");
    sg_state_uplink u;
    assert_int_equal(sg_state_uplink_load("up1", &u), 0);
    sg_err err = {0};
    assert_int_equal(sg_state_uplink_save("up1", "unreachable", "connection refused", &err), 0);
    assert_int_equal(sg_state_uplink_load("up1", &u), 1);
    assert_string_equal(u.state, "unreachable");
    assert_string_equal(u.reason, "connection refused");
    assert_true(strlen(u.since) >= 20 && u.since[4] == '-' && u.since[10] == 'T');
    char longr[SG_UPLINK_REASON_MAX * 2];
    memset(longr, 'x', sizeof longr - 1);
    longr[sizeof longr - 1] = '\0';
    assert_int_equal(sg_state_uplink_save("up1", "rejected", longr, &err), 0);
    assert_int_equal(sg_state_uplink_load("up1", &u), 1);
    assert_string_equal(u.state, "rejected");
    assert_int_equal(strlen(u.reason), SG_UPLINK_REASON_MAX - 1);
    sg_autofree char *path = sg_state_sandbox_path("up1", "uplink.json");
    assert_int_equal(sg_write_file_atomic(path, "garbage", 7, 0600, &err), 0);
    assert_int_equal(sg_state_uplink_load("up1", &u), 0);
    err = (sg_err){0};
    assert_int_equal(sg_state_uplink_save("no-dir", "connected", "", &err), -1);
    assert_non_null(strstr(err.msg, "cannot record the uplink"));
}

/* The bound on exec ids a takeover numbers past (execs.json). */
static void test_exec_ids_record(void **state)
{
    (void)state;
    make_sandbox_dir("ids1");
    assert_int_equal(sg_state_exec_ids_load("ids1"), 0);
    sg_err err = {0};
    assert_int_equal(sg_state_exec_ids_save("ids1", 1025, &err), 0);
    assert_int_equal(sg_state_exec_ids_load("ids1"), 1025);
    assert_int_equal(sg_state_exec_ids_save("ids1", UINT32_MAX, &err), 0);
    assert_int_equal(sg_state_exec_ids_load("ids1"), UINT32_MAX);
    sg_autofree char *path = sg_state_sandbox_path("ids1", "execs.json");
    assert_int_equal(sg_write_file_atomic(path, "{\"until\": -3}", 14, 0600, &err), 0);
    assert_int_equal(sg_state_exec_ids_load("ids1"), 0);
    err = (sg_err){0};
    assert_int_equal(sg_state_exec_ids_save("no-dir", 1, &err), -1);
    assert_non_null(strstr(err.msg, "cannot record the exec ids"));
}

static void slot_path(uid_t uid, char *buf, size_t n)
{
    snprintf(buf, n, SG_UID_DIR "/%u", (unsigned)(uid - SG_UID_BASE));
}

static void test_uid_slots(void **state)
{
    (void)state;
    make_sandbox_dir("uid-a");
    make_sandbox_dir("uid-b");
    sg_err err = {0};
    uid_t a = 0, b = 0;
    assert_int_equal(sg_state_uid_claim("uid-a", &a, &err), 0);
    assert_int_equal(sg_state_uid_claim("uid-b", &b, &err), 0);
    assert_true(a >= SG_UID_BASE && a - SG_UID_BASE < SG_UID_SLOTS);
    assert_true(b >= SG_UID_BASE && b - SG_UID_BASE < SG_UID_SLOTS);
    assert_int_not_equal(a, b);
    char pa[64], pb[64];
    slot_path(a, pa, sizeof pa);
    slot_path(b, pb, sizeof pb);
    struct stat st;
    assert_int_equal(stat(pa, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* Releasing with another sandbox's id leaves the slot alone. */
    sg_state_uid_release(a, "uid-b");
    assert_int_equal(stat(pa, &st), 0);
    /* Uids outside the range are never slots. */
    sg_state_uid_release(65534, "uid-a");
    sg_state_uid_release(SG_UID_BASE + SG_UID_SLOTS, "uid-a");

    /* A live slot is not taken over: a claim for the same id while its
     * sandbox directory exists gets another slot. */
    uid_t again = 0;
    assert_int_equal(sg_state_uid_claim("uid-a", &again, &err), 0);
    assert_int_not_equal(again, a);
    sg_state_uid_release(again, "uid-a");

    /* A stale slot (its sandbox directory gone, say after a crash) is taken
     * over by the next claim that probes it: uid-a's probe starts there. */
    sg_autofree char *dir = sg_state_sandbox_path("uid-a", NULL);
    assert_int_equal(rmdir(dir), 0);
    uid_t taken = 0;
    assert_int_equal(sg_state_uid_claim("uid-a", &taken, &err), 0);
    assert_int_equal(taken, a);
    char owner[PATH_MAX] = "";
    int fd = open(pa, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, owner, sizeof owner - 1);
    close(fd);
    assert_true(n > 0);
    owner[n] = '\0';
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s\n", dir);
    assert_string_equal(owner, want);

    /* Given back by their owners. */
    make_sandbox_dir("uid-a");
    sg_state_uid_release(taken, "uid-a");
    sg_state_uid_release(b, "uid-b");
    assert_int_equal(stat(pa, &st), -1);
    assert_int_equal(stat(pb, &st), -1);
}

static void test_is_ours(void **state)
{
    (void)state;
    assert_true(sg_state_is_ours(root));
    char link[PATH_MAX];
    snprintf(link, sizeof link, "%s-link", root);
    unlink(link);
    assert_int_equal(symlink(root, link), 0);
    assert_true(sg_state_is_ours(link)); /* the same directory by another name */
    unlink(link);
    char other[64] = "/tmp/sg-state-other-XXXXXX";
    assert_non_null(mkdtemp(other));
    assert_false(sg_state_is_ours(other));
    rmdir(other);
    assert_false(sg_state_is_ours("/nonexistent/sandglass"));
}

static void test_pid_alive(void **state)
{
    (void)state;
    assert_true(sg_state_pid_alive(getpid()));
    assert_false(sg_state_pid_alive(0));
    assert_false(sg_state_pid_alive(-1));
    /* A zombie is not alive. */
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0)
        _exit(0);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)c);
    for (;;) { /* until the child has exited (a zombie: not reaped yet) */
        sg_autofree char *st = sg_read_file(path, 4096, NULL, NULL);
        const char *rp = st ? strrchr(st, ')') : NULL;
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            break;
        usleep(1000);
    }
    assert_false(sg_state_pid_alive(c));
    int status;
    assert_int_equal(waitpid(c, &status, 0), c);
    assert_false(sg_state_pid_alive(c));
}

/* The ingest create streams to and events reads without --ingest:
 * $SANDGLASS_INGEST when set and not empty, else the default port. */
static void test_default_ingest(void **state)
{
    (void)state;
    const char *saved = getenv("SANDGLASS_INGEST");
    sg_autofree char *keep = saved ? strdup(saved) : NULL;
    unsetenv("SANDGLASS_INGEST");
    assert_string_equal(sg_state_default_ingest(), SG_DEFAULT_INGEST_URL);
    setenv("SANDGLASS_INGEST", "", 1);
    assert_string_equal(sg_state_default_ingest(), SG_DEFAULT_INGEST_URL);
    setenv("SANDGLASS_INGEST", "ws://127.0.0.1:9", 1);
    assert_string_equal(sg_state_default_ingest(), "ws://127.0.0.1:9");
    if (keep)
        setenv("SANDGLASS_INGEST", keep, 1);
    else
        unsetenv("SANDGLASS_INGEST");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_meta_round_trip),
        cmocka_unit_test(test_meta_refused),
        cmocka_unit_test(test_actor_json),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_abort_record),
        cmocka_unit_test(test_uplink_record),
        cmocka_unit_test(test_exec_ids_record),
        cmocka_unit_test(test_uid_slots),
        cmocka_unit_test(test_is_ours),
        cmocka_unit_test(test_pid_alive),
        cmocka_unit_test(test_default_ingest),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

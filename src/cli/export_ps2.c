/* export_ps2: `sandglass export --format progsnap2`: a ProgSnap2 dataset
 * directory (docs/EXPORT.md says the mapping): DatasetMetadata.csv,
 * MainTable.csv (one row per event, and one Run.Test row per failing test
 * under the test run's ExecutionID), Resources/ (each output and input as
 * a file, named by ProgramOutput/ProgramErrorOutput/ProgramInput),
 * CodeStates/ and a README.md describing the X- event types.
 *
 * CodeStateID: a session's code state is the set of its files (path and
 * sha256, as file_diff reports them); its id is the first 128 bits of the
 * sha256 of that set, sorted by path. The state before any change has the
 * id of the empty set. Events that change nothing reuse it. The set is the
 * one thing held per session (bounded by its files). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/export.h"
#include "cli/workspace.h"

typedef struct ps2_state {
    FILE *main;
    json_t *files;     /* this session's state, as sg_ws_event keeps it: key -> content */
    json_t *cache;     /* content sha256 -> whether .contents/ has it */
    char csid[33];     /* its CodeStateID */
    bool csid_valid;
} ps2_state;

static const char *const main_cols[] = {
    "EventID", "SubjectID", "ToolInstances", "EventType", "CodeStateID", "Order", "SessionID", "AssignmentID",
    "ProblemID", "ServerTimestamp", "ServerTimezone", "ClientTimestamp", "CodeStateSection",
    "DestinationCodeStateSection", "EditType", "ExecutionID", "ExecutionResult", "Score", "TestID",
    "EventInitiator", "ProgramInput", "ProgramOutput", "ProgramErrorOutput", "X-Kind", "X-ExecID", "X-Command",
    "X-SHA256",
};
enum { C_EVENTID, C_SUBJECT, C_TOOL, C_TYPE, C_CSID, C_ORDER, C_SESSION, C_ASSIGN, C_PROBLEM, C_STS, C_STZ, C_CTS,
       C_SECTION, C_DEST, C_EDIT, C_EXECID, C_RESULT, C_SCORE, C_TESTID, C_INIT, C_IN, C_OUT, C_ERR, C_XKIND,
       C_XEXEC, C_XCMD, C_XSHA, C__N };

static const char readme[] =
    "# sandglass ProgSnap2 export\n\n"
    "Written by `sandglass export --format progsnap2` (ToolInstances names the version).\n"
    "SubjectID = learner (a keyed hash with --pseudonymize), AssignmentID = ProblemID = task,\n"
    "SessionID = sandbox, Order = the event's seq in its session (EventOrderScope Restricted\n"
    "to SessionID; a test run's per-test rows share their run's Order), ServerTimestamp = when\n"
    "the ingest received the event (UTC), ClientTimestamp = the capture's time.\n\n"
    "## Event types\n"
    "- Session.Start / Session.End: the sandbox was created / destroyed.\n"
    "- File.Create, File.Edit, File.Delete, File.Rename (CodeStateSection: the old name,\n"
    "  DestinationCodeStateSection: the new), X-SHA256 the new content's hash.\n"
    "- Run.Program: a command's end (ExecutionResult Success, Error or Timeout).\n"
    "- Run.Test: a test command's end, ExecutionResult Success, TestFailed, Error or Timeout,\n"
    "  Score = passed / run when the runner's summary was parsed; then one Run.Test row per\n"
    "  failing test (TestID its name, ExecutionResult TestFailed) under the same ExecutionID.\n"
    "- X-Command: a command started (X-Command its line). X-Input: the typed input\n"
    "  (ProgramInput). X-Output: a command's output (ProgramOutput / ProgramErrorOutput).\n"
    "- X-Process: a program started inside the sandbox. X-Activity: idle or busy marks.\n"
    "- X-Checkpoint, X-Rollback, X-Abort, X-Limit, X-Sandbox (other sandbox states).\n"
    "- X-Bulk: one command changed more files than the capture's per-exec limit: its\n"
    "  paths (change, size, sha256) enter the code state as file changes would.\n\n"
    "## EventInitiator\n"
    "InstructorDirectAction: an operator acted (an event whose actor names the caller: a\n"
    "Session.Start whose creator is known, a Session.End an operator asked for; or a file\n"
    "change made by an operator's rollback or cp, or the seed: the File.Create rows of the\n"
    "workspace the session started from). ToolReaction: a cap that fired or the supervisor\n"
    "(automatic checkpoints, expiry), and other sandbox states. ToolTimedEvent:\n"
    "activity marks. UserDirectAction: the rest (the learner's own work).\n\n"
    "## Code states\n"
    "CodeStateID identifies the set of the session's files (path and sha256 as the capture\n"
    "reported them): the first 32 hex digits of the sha256 of the lines \"path\\tsha256\\n\",\n"
    "sorted by path (X-CodeStateManifests/<CodeStateID>.tsv lists them; a name that is not\n"
    "UTF-8 as \"hex:\" and its bytes in hex). The state is the one `sandglass workspace --at`\n"
    "rebuilds (a deleted directory takes its files with it). CodeStateRepresentation\n"
    "is Directory: CodeStates/<CodeStateID>/ holds the files whose contents the store kept\n"
    "(hard links to one copy each; a symbolic link as a link). A file over the capture's size\n"
    "limit, or recorded before the store kept contents, is in the manifest only.\n\n"
    "## Resources\n"
    "Resources/<EventID>.txt: an output or input event's text (as stored: the last 64 KiB).\n";

static int ps2_write_file(const char *dir, const char *name, const char *text, size_t len, sg_err *err)
{
    sg_autofree char *p = sg_strdup_printf("%s/%s", dir, name);
    sg_autoclose int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || sg_write_all(fd, text, len) < 0)
        return sg_err_sys(err, "write %s", p);
    return 0;
}

static int ps2_begin(sg_export *x, sg_err *err)
{
    ps2_state *s = sg_xcalloc(1, sizeof *s);
    x->state = s;
    static const char meta[] = "Property,Value\r\nVersion,6.0\r\nIsEventOrderingConsistent,true\r\n"
                               "EventOrderScope,Restricted\r\nEventOrderScopeColumns,SessionID\r\n"
                               "CodeStateRepresentation,Directory\r\n";
    sg_autofree char *cs = sg_strdup_printf("%s/CodeStates", x->dir);
    sg_autofree char *res = sg_strdup_printf("%s/Resources", x->dir);
    sg_autofree char *mt = sg_strdup_printf("%s/MainTable.csv", x->dir);
    if (ps2_write_file(x->dir, "DatasetMetadata.csv", meta, strlen(meta), err) < 0 ||
        ps2_write_file(x->dir, "README.md", readme, strlen(readme), err) < 0)
        return -1;
    sg_autofree char *man = sg_strdup_printf("%s/X-CodeStateManifests", x->dir);
    sg_autofree char *cache = sg_strdup_printf("%s/.contents", x->dir);
    if (mkdir(cs, 0755) < 0 || mkdir(res, 0755) < 0 || mkdir(man, 0755) < 0 || mkdir(cache, 0700) < 0)
        return sg_err_sys(err, "mkdir in %s", x->dir);
    if (!(s->main = fopen(mt, "wx")))
        return sg_err_sys(err, "create %s", mt);
    setvbuf(s->main, NULL, _IOFBF, 1 << 20);
    for (int i = 0; i < C__N; i++)
        fprintf(s->main, "%s%s", i ? "," : "", main_cols[i]);
    fputs("\r\n", s->main);
    s->files = json_object();
    s->cache = json_object();
    return 0;
}

static int path_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The content sha (stored by the ingest) in the dataset's cache, fetched
 * once: 1 there, 0 the store does not have it, -1 error. */
static int ps2_cached(sg_export *x, ps2_state *s, const char *sha, char **path, sg_err *err)
{
    *path = sg_strdup_printf("%s/.contents/%s", x->dir, sha);
    json_t *known = json_object_get(s->cache, sha);
    if (known)
        return json_is_true(known);
    char q[128];
    snprintf(q, sizeof q, "/v1/contents?sha256=%.64s", sha);
    sg_autoclose int fd = open(*path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sg_err_sys(err, "create %s", *path);
    sg_err e = {0};
    bool have = x->get_to(x->ctx, q, fd, &e) >= 0;
    if (!have && e.code != ENOENT) /* 404: not stored (over the limit, or a store before contents) */
        return *err = e, -1;
    if (!have)
        unlink(*path);
    json_object_set_new(s->cache, sha, json_boolean(have));
    return have;
}

/* One file of a state: its content hard-linked from the cache (a symlink
 * for a link: its content is the target), when the store has it. */
static int ps2_put_file(sg_export *x, ps2_state *s, const char *dir, const char *key, json_t *c, sg_err *err)
{
    sg_autofree char *path = sg_ws_unhex(key);
    if (!path)
        return sg_err_set(err, ENOMEM, "out of memory");
    const char *type = json_string_value(json_object_get(c, "type"));
    const char *sha = json_string_value(json_object_get(c, "sha256"));
    bool link_ = type && !strcmp(type, "link");
    if (type && !strcmp(type, "dir")) { /* an empty directory (file_diff dir: true) */
        if (!sg_ws_safe_path(path))
            return 0;
        sg_autofree char *dst = sg_strdup_printf("%s/%s", dir, path);
        return sg_mkdir_p(dst, 0755, err);
    }
    if (!sha || strlen(sha) != 64 || !json_is_true(json_object_get(c, "stored")) || !sg_ws_safe_path(path) ||
        (type && strcmp(type, "file") && !link_))
        return 0;
    sg_autofree char *cached = NULL;
    int r = ps2_cached(x, s, sha, &cached, err);
    if (r <= 0)
        return r;
    sg_autofree char *dst = sg_strdup_printf("%s/%s", dir, path);
    char *slash = strrchr(dst, '/');
    *slash = '\0';
    if (sg_mkdir_p(dst, 0755, err) < 0)
        return -1;
    *slash = '/';
    if (!link_)
        return link(cached, dst) < 0 ? sg_err_sys(err, "link %s", dst) : 0;
    size_t tl = 0;
    sg_autofree char *target = sg_read_file(cached, 4096, &tl, err);
    if (!target)
        return -1;
    return tl == 0 || symlink(target, dst) == 0 ? 0 : sg_err_sys(err, "symlink %s", dst);
}

/* The session's CodeStateID; the first time it is seen, its manifest
 * (X-CodeStateManifests/ID.tsv: path, sha256) and CodeStates/ID/ with the
 * files whose contents the store holds. */
static int ps2_codestate(sg_export *x, ps2_state *s, sg_err *err)
{
    if (s->csid_valid)
        return 0;
    size_t n = json_object_size(s->files), i = 0;
    sg_autofree const char **keys = sg_xcalloc(n ? n : 1, sizeof *keys);
    const char *k;
    json_t *v;
    json_object_foreach(s->files, k, v) keys[i++] = k;
    qsort(keys, n, sizeof *keys, path_cmp);
    sg_autobuf sg_buf man = {0};
    for (i = 0; i < n; i++) {
        const char *sha = json_string_value(json_object_get(json_object_get(s->files, keys[i]), "sha256"));
        bool hex = keys[i][0] == '\x01'; /* a name that is not UTF-8: "hex:" and its bytes in hex */
        if (sg_buf_printf(&man, "%s%s\t%s\n", hex ? "hex:" : "", keys[i] + hex, sha ? sha : "") < 0)
            return sg_err_set(err, ENOMEM, "out of memory");
    }
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)(man.data ? man.data : ""), man.len, md);
    for (i = 0; i < 16; i++)
        snprintf(s->csid + 2 * i, 3, "%02x", md[i]);
    s->csid_valid = true;
    sg_autofree char *dir = sg_strdup_printf("%s/CodeStates/%s", x->dir, s->csid);
    if (mkdir(dir, 0755) < 0)
        return errno == EEXIST ? 0 : sg_err_sys(err, "mkdir %s", dir);
    sg_autofree char *mdir = sg_strdup_printf("%s/X-CodeStateManifests", x->dir);
    sg_autofree char *mname = sg_strdup_printf("%s.tsv", s->csid);
    if (ps2_write_file(mdir, mname, man.data ? man.data : "", man.len, err) < 0)
        return -1;
    for (i = 0; i < n; i++)
        if (ps2_put_file(x, s, dir, keys[i], json_object_get(s->files, keys[i]), err) < 0)
            return -1;
    return 0;
}

/* A file_diff's File.* type; the change itself goes through sg_ws_event. */
static const char *ps2_diff_type(json_t *p, const char **edit)
{
    const char *ch = json_string_value(json_object_get(p, "change"));
    ch = ch ? ch : "";
    *edit = !strcmp(ch, "modified") ? "GenericEdit" : "";
    return !strcmp(ch, "created") ? "File.Create" : !strcmp(ch, "deleted") ? "File.Delete"
         : !strcmp(ch, "renamed") ? "File.Rename" : "File.Edit";
}

/* Who caused an event: an operator on the control socket (actor with a
 * uid: the sandbox's creator, its destroyer; or a file_diff of an
 * operator's rollback, cp or seed) is the instructor's side; a cap or the
 * supervisor is the tool's. */
static void ps2_initiator(json_t *p, char **init)
{
    json_t *actor = json_object_get(p, "actor");
    if (json_is_object(json_object_get(p, "operator")) || json_object_get(actor, "uid"))
        *init = "InstructorDirectAction";
    else if (json_object_get(actor, "cap") || json_object_get(actor, "supervisor"))
        *init = "ToolReaction";
}

/* An output or input event's text into Resources/: the name for its column. */
static char *ps2_resource(sg_export *x, const char *evid, json_t *data, sg_err *err)
{
    if (!json_is_string(data))
        return NULL;
    sg_autofree char *name = sg_strdup_printf("%s.txt", evid);
    sg_autofree char *dir = sg_strdup_printf("%s/Resources", x->dir);
    if (ps2_write_file(dir, name, json_string_value(data), json_string_length(data), err) < 0)
        return NULL;
    return sg_strdup_printf("Resources/%s", name);
}

static int ps2_put_row(ps2_state *s, char *const col[C__N])
{
    for (int i = 0; i < C__N; i++)
        if ((i && fputc(',', s->main) == EOF) ||
            (col[i] && sg_export_csv_field(s->main, col[i], strlen(col[i])) < 0))
            return -1;
    return fputs("\r\n", s->main) == EOF ? -1 : 0;
}

/* Run.Program / Run.Test's result and score. */
static void ps2_result(const char *kind, json_t *p, char **result, char *score, size_t n)
{
    json_t *code = json_object_get(p, "exit_code");
    const char *outcome = json_string_value(json_object_get(p, "outcome"));
    if (json_is_true(json_object_get(p, "timed_out")))
        *result = "Timeout";
    else if (!strcmp(kind, "test_result") && outcome)
        *result = !strcmp(outcome, "passed") ? "Success" : !strcmp(outcome, "failed") ? "TestFailed" : "Error";
    else
        *result = json_is_integer(code) && json_integer_value(code) == 0 ? "Success" : "Error";
    json_int_t run = json_integer_value(json_object_get(p, "run"));
    if (json_is_true(json_object_get(p, "parsed")) && run > 0)
        snprintf(score, n, "%.4f", (double)json_integer_value(json_object_get(p, "passed")) / (double)run);
}

static const char *ps2_type(const char *kind, json_t *p, char **init)
{
    static const struct { const char *kind, *type, *init; } map[] = {
        {"command", "X-Command", NULL},          {"stdin", "X-Input", NULL},
        {"stdout", "X-Output", NULL},            {"process", "X-Process", NULL},
        {"activity", "X-Activity", "ToolTimedEvent"}, {"checkpoint", "X-Checkpoint", "ToolReaction"},
        {"rollback", "X-Rollback", "InstructorDirectAction"},
        {"session_abort", "X-Abort", "InstructorDirectAction"}, {"limit", "X-Limit", "ToolReaction"},
        {"run_result", "Run.Program", NULL},     {"test_result", "Run.Test", NULL},
        {"bulk", "X-Bulk", NULL},
    };
    *init = "UserDirectAction";
    if (!strcmp(kind, "sandbox")) {
        const char *st = json_string_value(json_object_get(p, "state"));
        *init = "ToolReaction";
        return st && !strcmp(st, "created") ? "Session.Start" : st && !strcmp(st, "destroyed") ? "Session.End"
                                                                                            : "X-Sandbox";
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].kind, kind)) {
            if (map[i].init)
                *init = (char *)map[i].init;
            return map[i].type;
        }
    return "X-Other";
}

/* One Run.Test row per failing test, under the run's ExecutionID. */
static int ps2_failing(ps2_state *s, char **col, json_t *p)
{
    json_t *names = json_object_get(p, "failing_tests");
    size_t i;
    json_t *nm;
    char id[200];
    const char *base = col[C_EVENTID];
    json_array_foreach(names, i, nm) {
        if (!json_is_string(nm))
            continue;
        snprintf(id, sizeof id, "%s-t%zu", base, i + 1);
        col[C_EVENTID] = id;
        col[C_TESTID] = (char *)json_string_value(nm);
        col[C_RESULT] = "TestFailed";
        col[C_SCORE] = NULL;
        if (ps2_put_row(s, col) < 0)
            return -1;
    }
    return 0;
}

static int ps2_row(sg_export *x, json_t *ev, sg_err *err)
{
    ps2_state *s = x->state;
    const char *kind = json_string_value(json_object_get(ev, "kind"));
    json_t *p = json_object_get(ev, "payload");
    kind = kind ? kind : "";
    char *col[C__N] = {0};
    char evid[160], order[32], score[32] = "", tool[64], exec_id[160] = "";
    const char *sb = json_string_value(json_object_get(ev, "sandbox"));
    json_int_t seq = json_integer_value(json_object_get(ev, "seq"));
    snprintf(evid, sizeof evid, "%.128s-%lld", sb ? sb : "", (long long)seq);
    snprintf(order, sizeof order, "%lld", (long long)seq);
    snprintf(tool, sizeof tool, "sandglass %s", x->version);
    const char *type = ps2_type(kind, p, &col[C_INIT]), *edit = NULL;
    if (!strcmp(kind, "file_diff")) {
        type = ps2_diff_type(p, &edit);
        bool ren = json_object_get(p, "old_path") != NULL;
        col[C_SECTION] = (char *)json_string_value(json_object_get(p, ren ? "old_path" : "path"));
        col[C_DEST] = ren ? (char *)json_string_value(json_object_get(p, "path")) : NULL;
        col[C_EDIT] = (char *)edit;
        col[C_XSHA] = (char *)json_string_value(json_object_get(p, "sha256"));
    }
    if (!strcmp(kind, "file_diff") || !strcmp(kind, "bulk")) {
        sg_ws_event(s->files, ev);
        s->csid_valid = false;
    }
    ps2_initiator(p, &col[C_INIT]);
    if (ps2_codestate(x, s, err) < 0)
        return -1;
    if (!strcmp(kind, "run_result") || !strcmp(kind, "test_result")) {
        ps2_result(kind, p, &col[C_RESULT], score, sizeof score);
        snprintf(exec_id, sizeof exec_id, "%s", evid);
        col[C_EXECID] = exec_id;
        col[C_SCORE] = score[0] ? score : NULL;
    }
    sg_autofree char *res = NULL;
    if (!strcmp(kind, "stdout") || !strcmp(kind, "stdin")) {
        err->code = 0;
        res = ps2_resource(x, evid, json_object_get(p, "data"), err);
        if (!res && err->code)
            return -1;
        const char *stream = json_string_value(json_object_get(p, "stream"));
        col[!strcmp(kind, "stdin") ? C_IN : stream && !strcmp(stream, "stderr") ? C_ERR : C_OUT] = res;
    }
    col[C_EVENTID] = evid, col[C_SUBJECT] = (char *)json_string_value(json_object_get(ev, "learner"));
    col[C_TOOL] = tool, col[C_TYPE] = (char *)type, col[C_CSID] = s->csid, col[C_ORDER] = order;
    col[C_SESSION] = (char *)sb;
    col[C_ASSIGN] = col[C_PROBLEM] = (char *)json_string_value(json_object_get(ev, "task"));
    col[C_STS] = (char *)json_string_value(json_object_get(ev, "received")), col[C_STZ] = "UTC";
    col[C_CTS] = (char *)json_string_value(json_object_get(ev, "ts")), col[C_XKIND] = (char *)kind;
    col[C_XEXEC] = (char *)json_string_value(json_object_get(p, "exec_id"));
    col[C_XCMD] = (char *)json_string_value(json_object_get(p, "cmd"));
    if (ps2_put_row(s, col) < 0 || (!strcmp(kind, "test_result") && ps2_failing(s, col, p) < 0))
        return sg_err_sys(err, "write MainTable.csv");
    return 0;
}

/* A new session starts from the empty set. */
static int ps2_stream_end(sg_export *x, sg_err *err)
{
    (void)err;
    ps2_state *s = x->state;
    json_object_clear(s->files);
    s->csid_valid = false;
    return 0;
}

static int ps2_end(sg_export *x, sg_err *err)
{
    ps2_state *s = x->state;
    int rc = 0;
    if (s->main && (fflush(s->main) != 0 || fsync(fileno(s->main)) != 0))
        rc = sg_err_sys(err, "write MainTable.csv");
    if (s->main && fclose(s->main) != 0 && rc == 0)
        rc = sg_err_sys(err, "write MainTable.csv");
    s->main = NULL;
    json_decref(s->files);
    json_decref(s->cache);
    sg_autofree char *cache = sg_strdup_printf("%s/.contents", x->dir);
    if (sg_rm_rf(cache, err) < 0 && rc == 0) /* the states hold their links */
        rc = -1;
    free(s);
    x->state = NULL;
    return rc;
}

const sg_export_fmt sg_export_ps2 = {.name = "progsnap2", .is_dir = true, .begin = ps2_begin,
                                     .row = ps2_row, .stream_end = ps2_stream_end, .end = ps2_end};

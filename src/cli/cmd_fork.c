/* sandglass fork: a new live sandbox on this host whose workspace is
 * another sandbox's code state just after event SEQ, read from the
 * ingest's store alone (the original may be gone, or on another host).
 * The state is rebuilt as `sandglass workspace` does (workspace.h),
 * straight into the new sandbox's own workspace by create's seed step
 * (sg_cmd_create_from), before its supervisor starts. Processes are not
 * carried. When the new sandbox streams to the store read here, the files
 * written are listed for its capture's seed (capture/contents.h: the known
 * files), which then names their contents without sending them again. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "capture/contents.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/ingest_check.h"
#include "cli/ingest_http.h"
#include "cli/report.h"
#include "cli/workspace.h"
#include "state/state.h"

typedef struct fork_opts {
    sg_ws_opts ws;
    const char *learner, *task;
    bool json, ingest_given;
    char id[SG_ID_LEN + 1];
} fork_opts;

static void fork_usage(FILE *f)
{
    fprintf(f, "usage: sandglass fork --sandbox ID --at SEQ [--learner L] [--task T] [--json]\n"
               "                     [--ingest URL] [--ingest-ca FILE] [--token T | --secret FILE]\n\n"
               "Creates a new live sandbox on this host whose workspace is sandbox ID's just\n"
               "after event SEQ, rebuilt from the ingest's store (processes are not carried),\n"
               "and prints its id. Its `sandbox` event says where it came from (forked_from).\n"
               "Files the store does not hold are named on stderr (exit status 3).\n");
}

static int fork_parse(int argc, char **argv, fork_opts *o)
{
    static const struct option opts[] = {
        {"sandbox", required_argument, NULL, 's'}, {"at", required_argument, NULL, 'a'},
        {"learner", required_argument, NULL, 'l'}, {"task", required_argument, NULL, 'T'},
        {"ingest", required_argument, NULL, 'i'}, {"token", required_argument, NULL, 't'},
        {"secret", required_argument, NULL, 'S'}, {"json", no_argument, NULL, 'j'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'}, {0},
    };
    *o = (fork_opts){.ws = {.ingest = sg_config_ingest(), .at = -1}};
    int ch;
    char *end = NULL;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': o->ws.sandbox = optarg; break;
        case 'a': o->ws.at = strtoll(optarg, &end, 10); o->ws.at = *end || end == optarg ? -1 : o->ws.at; break;
        case 'l': o->learner = optarg; break;
        case 'T': o->task = optarg; break;
        case 'i': o->ws.ingest = optarg; o->ingest_given = true; break;
        case 'C': o->ws.ingest_ca = optarg; break;
        case 't': o->ws.token = optarg; break;
        case 'S': o->ws.secret = optarg; break;
        case 'j': o->json = true; break;
        case 'h': fork_usage(stdout); return 0;
        default: return sg_cli_bad_option("fork", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("fork", "unexpected argument '%s'", argv[optind]);
    if (!o->ws.sandbox || o->ws.at < 0)
        return sg_cli_usage("fork", "--sandbox ID and --at SEQ (>= 0) are required");
    return -1;
}

/* The store's stream of o->ws.sandbox (an id or a unique prefix, the one
 * rule: sg_cli_store_sandbox): its full id into o->id, its learner and
 * task (borrowed from *rows), SEQ checked against its end. -1 with err. */
static int fork_resolve(fork_opts *o, const sg_cli_target *t, const char *tok, json_t **rows,
                        const char **learner, const char **task, sg_err *err)
{
    *rows = sg_cli_store_sandbox(t, tok, o->ws.sandbox, o->id, sizeof o->id, err);
    if (!*rows)
        return -1;
    json_t *found = json_array_get(*rows, json_array_size(*rows) - 1); /* its last stream */
    long long last = json_integer_value(json_object_get(found, "last_seq"));
    if (o->ws.at > last)
        return sg_err_set(err, ERANGE, "--at %lld is past the end of sandbox %s's events (its last is %lld)",
                          o->ws.at, o->id, last);
    *learner = json_string_value(json_object_get(found, "learner"));
    *task = json_string_value(json_object_get(found, "task"));
    o->ws.sandbox = o->id;
    if (json_array_size(*rows) == 1) {
        o->ws.learner = *learner;
        o->ws.task = *task;
    }
    return 0;
}

/* create's seed (cmds.h): the state at SEQ written straight into the new
 * sandbox's workspace, before its supervisor starts, each entry its
 * user's, the modes as stored (umask 0 meanwhile). */
typedef struct fork_seed {
    fork_opts *o;
    const sg_cli_target *t;
    const char *tok;
    int missing; /* the paths not written */
    sg_buf known; /* the known files (capture/contents.h) */
} fork_seed;

static int fork_known(void *ud, const char *rel, const char *sha256, int fd)
{
    fork_seed *fs = ud;
    sg_autofree char *line = sg_contents_known_line(rel, sha256, fd);
    if (!line)
        return -1;
    return sg_buf_puts(&fs->known, line) < 0 ? (errno = ENOMEM, -1) : 0;
}

/* The known files into the new sandbox's state directory, for its
 * capture's seed: new (O_EXCL), its own, 0600. */
static int fork_known_save(fork_seed *fs, const char *id, sg_err *err)
{
    sg_autofree char *path = sg_state_sandbox_path(id, SG_CONTENTS_KNOWN_NAME);
    sg_autoclose int fd = path ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    if (fd < 0 || sg_write_all(fd, fs->known.data, fs->known.len) < 0)
        return sg_err_sys(err, "save %s", path ? path : SG_CONTENTS_KNOWN_NAME);
    return 0;
}

static int fork_rebuild(void *ud, int dirfd, const sg_sandbox_meta *m, sg_err *err)
{
    fork_seed *fs = ud;
    sg_ws_opts ws = fs->o->ws;
    ws.own = true;
    ws.uid = m->uid;
    ws.gid = m->gid;
    /* Contents the sandbox's own store holds are not sent again by its
     * seed: only when it streams to the store read here (the same nodes).
     * Any other store gets every content from the seed, as create's. */
    bool same = sg_cli_ingest_same_store(fs->o->ws.ingest, m->ingest_url);
    if (same) {
        ws.wrote = fork_known;
        ws.wrote_ud = fs;
    }
    mode_t old = umask(0);
    fs->missing = sg_ws_rebuild(&ws, fs->t, fs->tok, dirfd, err);
    umask(old);
    if (fs->missing < 0)
        return -1;
    return same && fs->known.len ? fork_known_save(fs, m->id, err) : 0;
}

int sg_cmd_fork(int argc, char **argv)
{
    fork_opts o;
    int rc = fork_parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    sg_err err = {0};
    sg_cli_target t;
    if (sg_cli_target_parse(o.ws.ingest, o.ws.ingest_ca, &t, &err) < 0)
        return sg_cli_usage("fork", "%s", err.msg);
    sg_autofree char *tok = sg_ws_token(&o.ws, &err);
    if (!tok)
        return sg_cli_failf("fork", "%s", err.msg);
    sg_autojson json_t *rows = NULL;
    const char *learner = NULL, *task = NULL;
    if (fork_resolve(&o, &t, tok, &rows, &learner, &task, &err) < 0)
        return sg_cli_failf("fork", "%s", err.msg);
    sg_autojson json_t *from = json_pack("{s:s?, s:s?, s:s, s:I}", "learner", learner, "task", task,
                                         "sandbox", o.id, "seq", (json_int_t)o.ws.at);
    sg_autofree char *from_text = from ? json_dumps(from, JSON_COMPACT) : NULL;
    if (!from_text)
        return sg_cli_failf("fork", "out of memory");
    const char *cargv[16] = {"create", "--learner", o.learner ? o.learner : learner ? learner : ""};
    int n = 3;
    if (o.task || task) {
        cargv[n++] = "--task";
        cargv[n++] = o.task ? o.task : task;
    }
    char wsurl[1024]; /* create streams over WebSocket: the same host and port */
    if (o.ingest_given) {
        bool http = strncmp(o.ws.ingest, "http://", 7) == 0, https = strncmp(o.ws.ingest, "https://", 8) == 0;
        snprintf(wsurl, sizeof wsurl, "%s%s", http ? "ws://" : https ? "wss://" : "",
                 o.ws.ingest + (http ? 7 : https ? 8 : 0));
        cargv[n++] = "--ingest";
        cargv[n++] = wsurl;
    }
    if (o.ws.ingest_ca) {
        cargv[n++] = "--ingest-ca";
        cargv[n++] = o.ws.ingest_ca;
    }
    if (o.ws.secret) {
        cargv[n++] = "--secret";
        cargv[n++] = o.ws.secret;
    }
    if (o.json)
        cargv[n++] = "--json";
    optind = 0; /* create parses its own argv from the start (glibc: a full reset) */
    fork_seed fs = {.o = &o, .t = &t, .tok = tok};
    rc = sg_cmd_create_from(n, (char **)cargv, fork_rebuild, &fs, from_text);
    sg_buf_free(&fs.known);
    return rc == 0 && fs.missing ? 3 : rc;
}

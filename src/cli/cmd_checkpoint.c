/* sandglass checkpoint / checkpoints / rollback: workspace snapshots taken
 * from outside the sandbox, and exact restore. rollback shows what will
 * change and asks y/n on a terminal (the original's offer_rollback). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "state/state.h"

/* The one positional argument, a sandbox id or a unique prefix, into id.
 * Returns 0, or the exit code of the error it printed. */
static int one_id(const char *cmd, int argc, char **argv, int first, char id[SG_ID_LEN + 1])
{
    if (first >= argc)
        return sg_cli_usage(cmd, "missing sandbox id");
    if (first != argc - 1)
        return sg_cli_usage(cmd, "takes exactly one sandbox id");
    sg_err err = {0};
    if (!sg_state_dir(&err) || sg_state_resolve_id(argv[first], id, &err) < 0)
        return sg_cli_fail(cmd, err.msg);
    return 0;
}

/* RFC 3339 in UTC, as every time sandglass prints. */
static void rfc3339(time_t t, char *buf, size_t len)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int sg_cmd_checkpoint(int argc, char **argv)
{
    static const struct option opts[] = {
        {"label", required_argument, NULL, 'l'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *label = NULL;
    bool json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': label = optarg; break;
        case 'j':
            json = true;
            sg_cli_json_errors(true);
            break;
        case 'h':
            printf("usage: sandglass checkpoint ID [--label TEXT] [--json]\n"
                   "\n"
                   "Snapshots the workspace now, from outside the sandbox, and prints the\n"
                   "checkpoint's id (12 characters; --json gives all 40). ID may be a unique\n"
                   "prefix of the sandbox's id.\n"
                   "\n"
                   "  --label TEXT   what to call it (at most 190 characters; default: \"on request\")\n"
                   "  --json         print {id, label, files, bytes, ...}\n");
            return 0;
        default:
            return sg_cli_usage("checkpoint", "unknown option, or one without its value: '%s'", argv[optind - 1]);
        }
    }
    char id[SG_ID_LEN + 1];
    int rc = one_id("checkpoint", argc, argv, optind, id);
    if (rc)
        return rc;
    if (label && strlen(label) > 190)
        return sg_cli_usage("checkpoint", "--label is longer than 190 characters");
    sg_err err = {0};
    sg_ctl_req req = {.op = SG_OP_CHECKPOINT, .u.checkpoint.label = (char *)label};
    sg_autojson json_t *res = sg_cli_request(id, &req, &err);
    if (!res)
        return sg_cli_fail("checkpoint", err.msg);
    __attribute__((cleanup(sg_ctl_checkpoint_reply_free))) sg_ctl_checkpoint_reply cr = {0};
    if (sg_ctl_decode_checkpoint_reply(res, &cr, &err) < 0)
        return sg_cli_fail("checkpoint", err.msg);
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        printf("%.12s\n", cr.id ? cr.id : "(null)");
    }
    return 0;
}

/* --json: an array of {id, label, time (RFC 3339), files, bytes}. */
static int print_checkpoints_json(const sg_ctl_checkpoints_reply *list)
{
    sg_autojson json_t *arr = json_array();
    for (size_t i = 0; arr && i < list->n; i++) {
        const sg_ctl_checkpoint_entry *e = &list->v[i];
        char when[32];
        rfc3339((time_t)e->time, when, sizeof when);
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I}", "id", e->id, "label", e->label, "time", when, "files",
                              (json_int_t)e->files, "bytes", (json_int_t)e->bytes);
        if (!o || json_array_append_new(arr, o) < 0)
            return sg_cli_fail("checkpoints", "out of memory");
    }
    sg_autofree char *s = arr ? sg_json_dump(arr) : NULL;
    if (!s)
        return sg_cli_fail("checkpoints", "out of memory");
    printf("%s\n", s);
    return 0;
}

int sg_cmd_checkpoints(int argc, char **argv)
{
    bool json = false;
    const char *args[2] = {argv[0], NULL};
    int nargs = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: sandglass checkpoints ID [--json]\n"
                   "\n"
                   "Lists the sandbox's checkpoints, oldest first: id (12 characters), time\n"
                   "(RFC 3339, UTC), files, label. ID may be a unique prefix.\n"
                   "\n"
                   "  --json    a JSON array of {id (all 40 characters), label, time, files, bytes}\n");
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
            sg_cli_json_errors(true);
        } else if (argv[i][0] == '-') {
            return sg_cli_usage("checkpoints", "unknown option '%s'", argv[i]);
        } else if (nargs < 2) {
            args[nargs++] = argv[i];
        } else {
            return sg_cli_usage("checkpoints", "takes exactly one sandbox id");
        }
    }
    char id[SG_ID_LEN + 1];
    int rc = one_id("checkpoints", nargs, (char **)args, 1, id);
    if (rc)
        return rc;
    sg_err err = {0};
    sg_autojson json_t *res = sg_cli_request(id, &(sg_ctl_req){.op = SG_OP_CHECKPOINTS}, &err);
    if (!res)
        return sg_cli_fail("checkpoints", err.msg);
    sg_ctl_checkpoints_reply list;
    if (sg_ctl_decode_checkpoints_reply(res, &list, &err) < 0)
        return sg_cli_fail("checkpoints", err.msg);
    rc = json ? print_checkpoints_json(&list) : 0;
    if (!json)
        printf("%-12s %-20s %7s %s\n", "ID", "TIME", "FILES", "LABEL");
    for (size_t i = 0; !json && i < list.n; i++) {
        /* Labels hold the exec's command: learner text, shown escaped. */
        char label[600], when[32];
        const sg_ctl_checkpoint_entry *e = &list.v[i];
        rfc3339((time_t)e->time, when, sizeof when);
        printf("%-12.12s %-20s %7lld %s\n", e->id, when, e->files, sg_vis(e->label, strlen(e->label), label, sizeof label));
    }
    sg_ctl_checkpoints_reply_free(&list);
    return rc;
}

static void print_changes(json_t *changes)
{
    size_t i;
    json_t *v;
    json_array_foreach(changes, i, v) {
        const char *kind = json_string_value(json_object_get(v, "change"));
        /* Say what the rollback does to each path. */
        const char *does = !strcmp(kind, "created") ? "delete" : !strcmp(kind, "deleted") ? "restore"
                           : !strcmp(kind, "modified") ? "revert" : "reset";
        const char *path = json_string_value(json_object_get(v, "path"));
        char safe[1024];
        printf("  %-8s %s (%s since)\n", does, sg_vis(path, path ? strlen(path) : 0, safe, sizeof safe), kind);
    }
}

static void rollback_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass rollback ID [--to CHECKPOINT] [--yes] [--force] [--json]\n"
        "\n"
        "Restores the workspace exactly (contents, modes, owners, symlinks, deleted\n"
        "files, empty and .git directories) to a checkpoint, whether a tool or a\n"
        "shell command made the changes. It first shows what will change and asks\n"
        "y/n on a terminal; it keeps the present as a checkpoint labelled \"before\n"
        "rollback\" so the rollback can be undone. A rollback that changes nothing\n"
        "does nothing. ID may be a unique prefix of the sandbox's id.\n"
        "\n"
        "  --to CHECKPOINT   a checkpoint id (or a unique prefix of it, 4 characters\n"
        "                    at least) or label; default: the newest checkpoint\n"
        "                    that is not a \"before rollback\" one\n"
        "  --yes             do not ask (needed when stdin is not a terminal)\n"
        "  --force           kill running execs first (refused while one runs otherwise)\n"
        "  --json            print the result as one JSON object\n");
}

int sg_cmd_rollback(int argc, char **argv)
{
    static const struct option opts[] = {
        {"to", required_argument, NULL, 't'},
        {"yes", no_argument, NULL, 'y'},
        {"force", no_argument, NULL, 'f'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *to = NULL;
    bool yes = false, force = false, json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': to = optarg; break;
        case 'y': yes = true; break;
        case 'f': force = true; break;
        case 'j':
            json = true;
            sg_cli_json_errors(true);
            break;
        case 'h':
            rollback_usage(stdout);
            return 0;
        default:
            return sg_cli_usage("rollback", "unknown option, or one without its value: '%s'", argv[optind - 1]);
        }
    }
    char id[SG_ID_LEN + 1];
    int rc = one_id("rollback", argc, argv, optind, id);
    if (rc)
        return rc;
    sg_err err = {0};
    /* With --yes no plan is needed first: the result lists what changed. */
    __attribute__((cleanup(sg_ctl_rollback_reply_free))) sg_ctl_rollback_reply plan = {0};
    const char *target = to;
    if (!yes) {
        sg_ctl_req dry = {.op = SG_OP_ROLLBACK, .u.rollback = {.to = (char *)to, .dry_run = true}};
        sg_autojson json_t *pj = sg_cli_request(id, &dry, &err);
        if (!pj || sg_ctl_decode_rollback_reply(pj, &plan, &err) < 0)
            return sg_cli_fail("rollback", err.msg);
        target = plan.to;
        if (json_array_size(plan.changes) == 0 && plan.running_execs <= 0) {
            if (json) {
                sg_autofree char *s = sg_json_dump(pj);
                printf("%s\n", s);
            } else {
                printf("%s is already as checkpoint %.12s: nothing to roll back\n", id, target ? target : "?");
            }
            return 0;
        }
        if (!json) {
            printf("rollback of %s to checkpoint %.12s: %zu change(s)\n", id, target ? target : "?",
                   json_array_size(plan.changes));
            print_changes(plan.changes);
        }
        if (!isatty(0))
            return sg_cli_usage("rollback", "stdin is not a terminal: pass --yes to roll back without asking");
        if (!sg_cli_ask_yes(stdout, "Revert all changes?")) {
            printf("keeping the changes\n");
            return 0;
        }
    }
    sg_ctl_req req = {.op = SG_OP_ROLLBACK, .u.rollback = {.to = (char *)target, .force = force}};
    sg_autojson json_t *res = sg_cli_request(id, &req, &err);
    __attribute__((cleanup(sg_ctl_rollback_reply_free))) sg_ctl_rollback_reply rb = {0};
    if (!res || sg_ctl_decode_rollback_reply(res, &rb, &err) < 0)
        return sg_cli_fail("rollback", err.msg);
    const char *done = rb.to ? rb.to : "?";
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else if (!rb.restored) {
        printf("%s is already as checkpoint %.12s: nothing to roll back\n", id, done);
    } else {
        if (yes) {
            printf("rollback of %s to checkpoint %.12s: %zu change(s)\n", id, done, json_array_size(rb.changes));
            print_changes(rb.changes);
        }
        printf("restored %s to %.12s (%zu change(s) undone)\n", id, done, json_array_size(rb.changes));
    }
    return 0;
}

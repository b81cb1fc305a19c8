/* sandglass checkpoint / checkpoints / rollback: workspace snapshots taken
 * from outside the sandbox, and exact restore. rollback shows what will
 * change and asks y/n on a terminal (the original's offer_rollback). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "cmds.h"
#include "common.h"
#include "jsonutil.h"
#include "state.h"
#include "util.h"

static int one_id(const char *cmd, int argc, char **argv, int first)
{
    if (first != argc - 1) {
        char m[64];
        snprintf(m, sizeof m, "takes exactly one sandbox id");
        return sg_cli_fail(cmd, m);
    }
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail(cmd, err.msg);
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(argv[first], &m, &err) < 0)
        return sg_cli_fail(cmd, err.msg);
    sg_sandbox_meta_clear(&m);
    return 0;
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
        case 'j': json = true; break;
        case 'h':
            printf("usage: sandglass checkpoint ID [--label TEXT] [--json]\n");
            return 0;
        default:
            return sg_cli_fail("checkpoint", "unknown or incomplete option");
        }
    }
    if (one_id("checkpoint", argc, argv, optind))
        return 1;
    if (label && strlen(label) > 190)
        return sg_cli_fail("checkpoint", "--label is longer than 190 characters");
    sg_err err = {0};
    sg_autojson json_t *req = json_pack("{s:s, s:s?}", "op", "checkpoint", "label", label);
    sg_autojson json_t *res = sg_cli_request(argv[optind], req, &err);
    if (!res)
        return sg_cli_fail("checkpoint", err.msg);
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        printf("%s\n", json_string_value(json_object_get(res, "id")));
    }
    return 0;
}

int sg_cmd_checkpoints(int argc, char **argv)
{
    bool json = false;
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("usage: sandglass checkpoints ID [--json]\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
            memmove(argv + i, argv + i + 1, (size_t)(argc - i - 1) * sizeof *argv);
            argc--;
            i--;
        }
    }
    if (one_id("checkpoints", argc, argv, first))
        return 1;
    sg_err err = {0};
    sg_autojson json_t *req = json_pack("{s:s}", "op", "checkpoints");
    sg_autojson json_t *res = sg_cli_request(argv[first], req, &err);
    if (!res)
        return sg_cli_fail("checkpoints", err.msg);
    json_t *arr = json_object_get(res, "checkpoints");
    if (json) {
        sg_autofree char *s = sg_json_dump(arr);
        printf("%s\n", s);
        return 0;
    }
    printf("%-12s %-20s %7s %s\n", "ID", "TIME", "FILES", "LABEL");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        time_t t = (time_t)json_integer_value(json_object_get(v, "time"));
        struct tm tm;
        char when[32];
        localtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        printf("%-12.12s %-20s %7lld %s\n", json_string_value(json_object_get(v, "id")), when,
               (long long)json_integer_value(json_object_get(v, "files")),
               json_string_value(json_object_get(v, "label")));
    }
    return 0;
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
        printf("  %-8s %s (%s since)\n", does, json_string_value(json_object_get(v, "path")), kind);
    }
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
        case 'j': json = true; break;
        case 'h':
            printf("usage: sandglass rollback ID [--to CHECKPOINT] [--yes] [--force] [--json]\n");
            return 0;
        default:
            return sg_cli_fail("rollback", "unknown or incomplete option");
        }
    }
    if (one_id("rollback", argc, argv, optind))
        return 1;
    const char *id = argv[optind];
    sg_err err = {0};
    /* With --yes no plan is needed first: the result lists what changed. */
    sg_autojson json_t *plan = NULL;
    const char *target = to;
    if (!yes) {
        sg_autojson json_t *dry = json_pack("{s:s, s:s?, s:b}", "op", "rollback", "to", to, "dry_run", 1);
        plan = sg_cli_request(id, dry, &err);
        if (!plan)
            return sg_cli_fail("rollback", err.msg);
        target = json_string_value(json_object_get(plan, "to"));
        if (!json) {
            json_t *changes = json_object_get(plan, "changes");
            printf("rollback of %s to checkpoint %.12s: %zu change(s)\n", id, target, json_array_size(changes));
            print_changes(changes);
        }
        if (!isatty(0))
            return sg_cli_fail("rollback", "not a terminal: pass --yes to roll back without asking");
        printf("Revert all changes? [y/n]: ");
        fflush(stdout);
        char line[16] = "";
        if (!fgets(line, sizeof line, stdin) || (line[0] != 'y' && line[0] != 'Y')) {
            printf("keeping the changes\n");
            return 0;
        }
    }
    sg_autojson json_t *req = json_pack("{s:s, s:s?, s:b}", "op", "rollback", "to", target, "force", force);
    sg_autojson json_t *res = sg_cli_request(id, req, &err);
    if (!res)
        return sg_cli_fail("rollback", err.msg);
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        json_t *changes = json_object_get(res, "changes");
        if (yes) {
            printf("rollback of %s to checkpoint %.12s: %zu change(s)\n", id,
                   json_string_value(json_object_get(res, "to")), json_array_size(changes));
            print_changes(changes);
        }
        printf("restored %s to %.12s (%zu change(s) undone)\n", id,
               json_string_value(json_object_get(res, "to")), json_array_size(changes));
    }
    return 0;
}

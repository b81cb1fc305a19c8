/* sandglass abort: the kill switch. Stops new work, kills every process of
 * the sandbox but its init (without tearing it down unless --destroy), and
 * prints the abort record with the proof that nothing is left running.
 * --rollback then restores the workspace to the latest checkpoint. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ckptc.h"
#include "cleanup.h"
#include "cmds.h"
#include "common.h"
#include "jsonutil.h"
#include "state.h"
#include "util.h"

static int print_result(json_t *res, bool json)
{
    sg_autofree char *s = json ? sg_json_dump(res) : json_dumps(res, JSON_INDENT(2));
    printf("%s\n", s);
    return 0;
}

int sg_cmd_abort(int argc, char **argv)
{
    static const struct option opts[] = {
        {"reason", required_argument, NULL, 'r'},
        {"destroy", no_argument, NULL, 'd'},
        {"rollback", no_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *reason = NULL;
    bool destroy = false, rollback = false, json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'r': reason = optarg; break;
        case 'd': destroy = true; break;
        case 'b': rollback = true; break;
        case 'j': json = true; break;
        case 'h':
            printf("usage: sandglass abort ID [--reason TEXT] [--destroy] [--rollback] [--json]\n");
            return 0;
        default: {
            char msg[128];
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", argv[optind - 1]);
            return sg_cli_fail("abort", msg);
        }
        }
    }
    if (optind != argc - 1)
        return sg_cli_fail("abort", "takes exactly one sandbox id");
    const char *id = argv[optind];
    if (destroy && rollback)
        return sg_cli_fail("abort", "--destroy and --rollback exclude each other");
    if (reason && strlen(reason) > 200)
        return sg_cli_fail("abort", "--reason is longer than 200 characters");
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("abort", err.msg);
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, &err) < 0)
        return sg_cli_fail("abort", err.msg);
    sg_sandbox_meta_clear(&m);
    /* The supervisor may be inside a long checkpoint: its worker is killed
     * first, so this request never waits for it (ckptc.h). */
    sg_err kerr = {0};
    if (sg_ckptc_kill_sandbox_worker(id, &kerr) < 0)
        fprintf(stderr, "sandglass abort: the checkpoint worker: %s\n", kerr.msg);
    sg_autojson json_t *req = json_pack("{s:s, s:s?}", "op", "abort", "reason", reason);
    sg_autojson json_t *res = sg_cli_request(id, req, &err);
    if (!res)
        return sg_cli_fail("abort", err.msg);
    if (rollback) {
        sg_autojson json_t *rb = json_pack("{s:s, s:b}", "op", "rollback", "force", 1);
        json_t *r2 = sg_cli_request(id, rb, &err);
        if (!r2)
            return sg_cli_fail("abort", err.msg);
        json_object_set_new(res, "rollback", r2);
    }
    print_result(res, json);
    if (destroy) {
        char *dargv[] = {"destroy", (char *)id, NULL};
        return sg_cmd_destroy(2, dargv);
    }
    return 0;
}

int sg_cmd_resume(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        if (argc == 2 && strcmp(argv[1], "--help") == 0) {
            printf("usage: sandglass resume ID\n");
            return 0;
        }
        return sg_cli_fail("resume", "takes exactly one sandbox id");
    }
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("resume", err.msg);
    sg_autojson json_t *req = json_pack("{s:s}", "op", "resume");
    sg_autojson json_t *res = sg_cli_request(argv[1], req, &err);
    if (!res)
        return sg_cli_fail("resume", err.msg);
    printf("resumed %s\n", argv[1]);
    return 0;
}

/* sandglass abort: the kill switch. Stops new work, kills every process of
 * the sandbox but its init (without tearing it down unless --destroy), and
 * prints the abort record with the proof that nothing is left running.
 * --rollback then restores the workspace to the latest checkpoint. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "checkpoint/ckpt_client.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"
#include "state/state.h"

/* The reason without the "by: " the supervisor puts before it. */
static const char *bare_reason(const sg_ctl_abort_reply *a)
{
    size_t n = a->by ? strlen(a->by) : 0;
    const char *r = a->reason;
    if (r && n && strncmp(r, a->by, n) == 0 && r[n] == ':' && r[n + 1] == ' ')
        return r + n + 2;
    return r ? r : "";
}

/* The abort record in words: who, why, what was killed, the proof; rb the
 * rollback's answer after it, or NULL. */
void sg_cli_print_abort(const char *id, const sg_ctl_abort_reply *a, const sg_ctl_rollback_reply *rb)
{
    /* The reason is free text (a cap's, a signal's or an operator's). */
    const char *r = bare_reason(a);
    char vr[1024], vby[64];
    sg_vis(r, strlen(r), vr, sizeof vr);
    sg_vis(a->by ? a->by : "?", strlen(a->by ? a->by : "?"), vby, sizeof vby);
    if (a->already) {
        printf("%s was already aborted (by %s: %s)\n", id, vby, vr);
    } else {
        printf("aborted %s (by %s: %s)\n", id, vby, vr);
        printf("  execs killed: %zu, processes killed: %lld\n", a->kill.n_execs_killed, a->kill.processes_killed);
        if (a->killed)
            printf("  proof: the cgroup holds only init: %s (checked in %.1f ms)\n",
                   a->kill.proof.cgroup_holds_only_init ? "yes" : "NO", a->kill.proof.kill_ms);
    }
    if (rb)
        printf("  rolled back to %.12s\n", rb->to ? rb->to : "?");
}

static void abort_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass abort ID [--reason TEXT] [--destroy | --rollback] [--json] [--via TEXT]\n"
        "                       [--ingest URL [--ingest-ca FILE] [--token T] [--secret FILE]]\n"
        "\n"
        "The kill switch: refuses new execs, kills every process of the sandbox but\n"
        "its init (escapers and fork bombs included), proves the cgroup holds only\n"
        "init, and records a session_abort event. The sandbox stays for inspection,\n"
        "rollback or 'sandglass resume' unless --destroy. ID may be a unique prefix.\n"
        "\n"
        "  --reason TEXT   why (at most 200 characters; default: \"abort requested\")\n"
        "  --destroy       destroy the sandbox after the abort\n"
        "  --rollback      then restore the workspace to the newest checkpoint\n"
        "  --json          print one JSON object (with --destroy: its proof under \"destroy\")\n"
        "  --via TEXT      whom the abort is for, recorded in its actor beside you (serve\n"
        "                  gives \"remote: USER@HOST\" for another host's operator; never\n"
        "                  relayed to another host)\n"
        "\n"
        "A sandbox of another host (not in this state directory) is aborted through\n"
        "that host's serve, found in the ingest's store (the hosts' registrations):\n"
        "  --ingest URL    the ingest to ask (default the config's; none: no other host)\n"
        "  --ingest-ca FILE  the CA (PEM) an https ingest's and serve's certificates are\n"
        "                  verified by\n"
        "  --token T       an operator read token to find the host with (default:\n"
        "                  one made from the secret)\n"
        "  --secret FILE   the secret that host's serve verifies, for the action token\n"
        "                  (default the config's, else <state>/ingest/secret)\n");
}

int sg_cmd_abort(int argc, char **argv)
{
    static const struct option opts[] = {
        {"reason", required_argument, NULL, 'r'},
        {"destroy", no_argument, NULL, 'd'},
        {"rollback", no_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"token", required_argument, NULL, 'T'},
        {"secret", required_argument, NULL, 'S'},
        {"via", required_argument, NULL, 'v'},
        {0},
    };
    const char *reason = NULL, *ingest = NULL, *via = NULL;
    bool destroy = false, rollback = false, json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'r': reason = optarg; break;
        case 'd': destroy = true; break;
        case 'b': rollback = true; break;
        case 'i': ingest = optarg; break;
        case 'v':
            via = optarg;
            if (!sg_cli_via_ok(via))
                return sg_cli_usage("abort", SG_CLI_VIA_IS);
            break;
        case 'C':
        case 'T':
        case 'S': break; /* the other host's path's (sandglassd) */
        case 'j':
            json = true;
            sg_cli_json_errors(true);
            break;
        case 'h':
            abort_usage(stdout);
            return 0;
        default:
            return sg_cli_usage("abort", "unknown option, or one without its value: '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return sg_cli_usage("abort", optind >= argc ? "missing sandbox id" : "takes exactly one sandbox id");
    if (destroy && rollback)
        return sg_cli_usage("abort", "--destroy and --rollback exclude each other");
    if (reason && strlen(reason) > 200)
        return sg_cli_usage("abort", "--reason is longer than 200 characters");
    sg_err err = {0};
    char id[SG_ID_LEN + 1];
    if (!sg_state_dir(&err))
        return sg_cli_fail("abort", err.msg);
    if (sg_state_resolve_id(argv[optind], id, &err) < 0) {
        /* not here: another host's, through its serve (sandglassd speaks HTTP) */
        if (err.code == ENOENT && !via && (ingest || sg_config_ingest_given())) /* --via: relayed already */
            return sg_cli_handoff("abort", argv);
        return sg_cli_fail("abort", err.msg);
    }
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, &err) < 0)
        return sg_cli_fail("abort", err.msg);
    sg_sandbox_meta_clear(&m);
    /* The supervisor may be inside a long checkpoint: its worker is killed
     * first, so this request never waits for it (checkpoint/ckpt_client.h). */
    sg_err kerr = {0};
    if (sg_ckpt_client_kill_sandbox_worker(id, &kerr) < 0)
        sg_cli_sayf("abort", "the checkpoint worker: %s", kerr.msg);
    sg_ctl_req req = {.op = SG_OP_ABORT, .u.abort.reason = (char *)reason, .via = (char *)via};
    sg_autojson json_t *res = sg_cli_request(id, &req, &err);
    __attribute__((cleanup(sg_ctl_abort_reply_free))) sg_ctl_abort_reply ab = {0};
    if (!res || sg_ctl_decode_abort_reply(res, &ab, &err) < 0)
        return sg_cli_fail("abort", err.msg);
    __attribute__((cleanup(sg_ctl_rollback_reply_free))) sg_ctl_rollback_reply rb = {0};
    if (rollback) {
        sg_ctl_req rbq = {.op = SG_OP_ROLLBACK, .u.rollback.force = true};
        json_t *r2 = sg_cli_request(id, &rbq, &err);
        if (!r2)
            return sg_cli_fail("abort", err.msg);
        json_object_set_new(res, "rollback", r2);
        if (sg_ctl_decode_rollback_reply(r2, &rb, &err) < 0)
            return sg_cli_fail("abort", err.msg);
    }
    if (destroy) {
        json_t *d = sg_cli_destroy(id, via, !json, &err);
        if (!d) {
            if (json) {
                sg_autofree char *s = sg_json_dump(res);
                printf("%s\n", s);
            } else {
                sg_cli_print_abort(id, &ab, NULL);
            }
            return sg_cli_fail("abort", err.msg);
        }
        json_object_set_new(res, "destroy", d);
    }
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        sg_cli_print_abort(id, &ab, rollback ? &rb : NULL);
        if (destroy)
            printf("destroyed %s\n", id);
    }
    return 0;
}

int sg_cmd_resume(int argc, char **argv)
{
    bool json = false;
    const char *arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: sandglass resume ID [--json]\n"
                   "\n"
                   "Clears an abort by the operator or a signal, so execs run again. An abort\n"
                   "by a cap stays. ID may be a unique prefix of the sandbox's id.\n"
                   "\n"
                   "  --json    print {\"resumed\": ID, \"was\": REASON}\n");
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
            sg_cli_json_errors(true);
        } else if (argv[i][0] == '-') {
            return sg_cli_usage("resume", "unknown option '%s'", argv[i]);
        } else if (!arg) {
            arg = argv[i];
        } else {
            return sg_cli_usage("resume", "takes exactly one sandbox id");
        }
    }
    if (!arg)
        return sg_cli_usage("resume", "missing sandbox id");
    sg_err err = {0};
    char id[SG_ID_LEN + 1];
    if (!sg_state_dir(&err) || sg_state_resolve_id(arg, id, &err) < 0)
        return sg_cli_fail("resume", err.msg);
    sg_autojson json_t *res = sg_cli_request(id, &(sg_ctl_req){.op = SG_OP_RESUME}, &err);
    if (!res)
        return sg_cli_fail("resume", err.msg);
    __attribute__((cleanup(sg_ctl_resume_reply_free))) sg_ctl_resume_reply rr = {0};
    if (sg_ctl_decode_resume_reply(res, &rr, &err) < 0)
        return sg_cli_fail("resume", err.msg);
    if (json) {
        sg_autojson json_t *out = json_pack("{s:s, s:s?}", "resumed", id, "was", rr.was);
        sg_autofree char *s = sg_json_dump(out);
        printf("%s\n", s);
    } else {
        printf("resumed %s\n", id);
    }
    return 0;
}

/* sandglassd cast: a terminal session's recording read from the ingest's
 * store (streamed there as it was written: capture/contents.h), for a
 * sandbox that is gone or on another host. `sandglass cast` hands over to
 * it when the sandbox is not on this host, or given --ingest/--token/--secret. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/hostreg.h"
#include "cli/ingest_http.h"
#include "cli/report.h"
#include "state/state.h"
#include "wire/token.h"

#define CAST_TOKEN_TTL_S 600

/* The exec number of a session "N" (its exec's number), or -1. */
static long session_num(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && *end == '\0' && v >= 0 ? v : -1;
}

static int cast_print(const sg_cli_target *t, const char *tok, const char *sandbox, long want)
{
    sg_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "/v1/cast?sandbox=%s&session=%ld", sandbox, want);
    int status = 0;
    const char *body = NULL;
    size_t blen = 0;
    sg_autofree char *raw = sg_cli_http_get(t, path, tok, &status, &body, &blen, &err);
    if (!raw)
        return sg_cli_failf("cast", "%s", err.msg);
    if (status != 200)
        return sg_cli_failf("cast", "exec %ld of sandbox %s has no recording in the ingest's store (HTTP %d)",
                            want, sandbox, status);
    return sg_write_all(1, body, blen) < 0 ? SG_CLI_FAILED : 0;
}

int sg_cmd_cast_store(int argc, char **argv)
{
    static const struct option opts[] = {
        {"list", no_argument, NULL, 'l'}, {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"token", required_argument, NULL, 't'}, {"secret", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'}, {0},
    };
    const char *ingest = sg_config_ingest(), *ingest_ca = NULL, *token = NULL, *secret = NULL;
    bool list = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': list = true; break;
        case 'i': ingest = optarg; break;
        case 'C': ingest_ca = optarg; break;
        case 't': token = optarg; break;
        case 'S': secret = optarg; break;
        case 'h':
            printf("usage: sandglass cast ID [N] [--list] [--ingest URL] [--ingest-ca FILE]\n"
                   "                      [--token T | --secret FILE]\n\n"
                   "The recording of a terminal session of sandbox ID from the ingest's store.\n");
            return 0;
        default: return sg_cli_bad_option("cast", argv[optind - 1]);
        }
    }
    if (optind >= argc || argc - optind > 2 || strpbrk(argv[optind], "&?#% /"))
        return sg_cli_usage("cast", "ID [N]: a sandbox id and an optional exec number");
    sg_err err = {0};
    sg_cli_target t;
    if (sg_cli_target_parse(ingest, ingest_ca, &t, &err) < 0)
        return sg_cli_usage("cast", "%s", err.msg);
    sg_autofree char *tok = sg_cli_read_token(token, secret, CAST_TOKEN_TTL_S, &err);
    if (!tok)
        return sg_cli_failf("cast", "%s", err.msg);
    /* the id or a unique prefix of it (the one rule), in the store */
    char sandbox[SG_NAME_MAX + 1];
    sg_autojson json_t *streams = sg_cli_store_sandbox(&t, tok, argv[optind], sandbox, sizeof sandbox, &err);
    if (!streams)
        return sg_cli_failf("cast", "%s", err.msg);
    char path[512];
    snprintf(path, sizeof path, "/v1/casts?sandbox=%s", sandbox);
    sg_autojson json_t *ans = sg_cli_http_get_json(&t, path, tok, NULL, &err);
    if (!ans)
        return sg_cli_failf("cast", "%s", err.msg);
    long newest = -1, want = -1;
    json_t *row;
    size_t i;
    json_array_foreach(json_object_get(ans, "casts"), i, row) {
        long n = session_num(json_string_value(json_object_get(row, "session")));
        if (list && n >= 0)
            printf("%ld\n", n);
        if (n > newest)
            newest = n;
    }
    if (list)
        return 0;
    if (optind + 1 < argc) {
        char *end;
        want = strtol(argv[optind + 1], &end, 10);
        if (*end || end == argv[optind + 1] || want < 0)
            return sg_cli_usage("cast", "N must be an exec number, not '%.64s'", argv[optind + 1]);
    } else if ((want = newest) < 0) {
        return sg_cli_failf("cast", "no sandbox %s on this host, and no recording of it in the ingest's store",
                            sandbox);
    }
    return cast_print(&t, tok, sandbox, want);
}

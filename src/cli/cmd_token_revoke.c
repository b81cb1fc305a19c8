/* sandglass token revoke ID|TOKEN [--ingest URL] [--secret FILE]
 *   withdraws a token for good without rotating the secret: the token's id
 *   (the first 16 hex digits of its SHA-256, as the ingest's log names it;
 *   a whole token is reduced to its id here) goes to the ingest at URL with
 *   a one-minute revoke token the secret signs for that id only (GET
 *   /v1/revoke). The ingest records it in its store, and every node on the
 *   store refuses the token from then on (docs/CONSOLE.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/ingest_http.h"
#include "cli/report.h"
#include "state/state.h"
#include "wire/token.h"

static const char usage[] =
    "usage: sandglass token revoke ID|TOKEN [--ingest URL] [--ingest-ca FILE] [--secret FILE]\n"
    "  revokes a token (any kind) on every ingest node sharing the store\n"
    "  ID        the token's id: 16 hex digits (the ingest logs it with each read;\n"
    "            printf %s TOKEN | sha256sum | cut -c1-16); or the token itself\n"
    "  --ingest  the ingest (default: the config's, else $SANDGLASS_INGEST, else\n"
    "            http://127.0.0.1:7433)\n"
    "  --ingest-ca  the CA file an https ingest is verified by (default the\n"
    "            config's, else the system's trust store)\n"
    "  --secret  the ingest's secret file (default <state>/ingest/secret)\n";

#define REVOKE_TTL_S 60

int sg_cmd_token_revoke(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"secret", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *ingest = sg_config_ingest(), *ingest_ca = NULL, *secret_path = NULL;
    sg_err err;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': ingest = optarg; break;
        case 'C': ingest_ca = optarg; break;
        case 'k': secret_path = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("token revoke", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return sg_cli_usage("token revoke", "give one token id (or token)");
    char id[SG_TOKEN_ID_LEN + 1];
    const char *arg = argv[optind];
    if (sg_token_id_valid(arg))
        snprintf(id, sizeof id, "%s", arg);
    else if (strchr(arg, '.') && strlen(arg) > SG_TOKEN_ID_LEN)
        sg_token_id(arg, id);
    else
        return sg_cli_usage("token revoke", "'%.64s' is neither a token id (16 hex digits, lowercase) nor a token",
                            arg);
    sg_cli_target t;
    if (sg_cli_target_parse(ingest, ingest_ca, &t, &err) < 0)
        return sg_cli_usage("token revoke", "--ingest: %s", err.msg);
    sg_autofree char *secret_default = NULL;
    if (!secret_path) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("token revoke", "state directory: %s", err.msg);
        secret_path = secret_default = sg_config_secret();
    }
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    if (sg_token_secret_load(secret_path, secret, &err) < 0)
        return sg_cli_failf("token revoke", "%s", err.msg);
    sg_autofree char *tok = sg_token_make_revoke(secret, id, REVOKE_TTL_S, &err);
    memset(secret, 0, sizeof secret);
    if (!tok)
        return sg_cli_failf("token revoke", "%s", err.msg);
    sg_autojson json_t *ans = sg_cli_http_get_json(&t, "/v1/revoke", tok, NULL, &err);
    if (!ans)
        return sg_cli_failf("token revoke", "the ingest at %s: %s", ingest, err.msg);
    printf("revoked %s\n", id);
    return 0;
}

/* sandglass token --learner L --task T --sandbox ID [--ttl S] [--secret FILE]
 *   prints a stream token (writes that one stream) for an outside agent
 *   (e.g. the original Python one);
 * sandglass token --read [--learner L] [--task T] [--sandbox ID] [--ttl S] [--secret FILE]
 *   prints a read token for /v1/events and /v1/sandboxes: scoped to what it
 *   names, or every event (an operator token) when it names nothing;
 * sandglass token --terminal --sandbox ID [--ttl S] [--secret FILE]
 *   prints a terminal token: opens a shell in that sandbox through
 *   `sandglass serve` (the browser's terminal), nothing else;
 * sandglass token --watch --sandbox ID [--ttl S] [--secret FILE]
 *   prints a watch token: watches that sandbox's open terminal, read-only,
 *   through `sandglass serve`, nothing else. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/bounds.h"
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
    "usage: sandglass token --learner L --task T --sandbox ID [--ttl DURATION] [--secret FILE]\n"
    "       sandglass token --read [--learner L] [--task T] [--sandbox ID] [--ttl DURATION]\n"
    "                       [--secret FILE]\n"
    "  (no --read) a stream token: sends that one stream's events, reads nothing\n"
    "       sandglass token --terminal|--watch --sandbox ID [--ttl DURATION] [--secret FILE]\n"
    "       sandglass token revoke ID|TOKEN [--ingest URL] [--secret FILE]   (see --help there)\n"
    "  --read    a read token: reads the events of what it names (all of them with\n"
    "            no --learner/--task/--sandbox: an operator token), sends nothing\n"
    "  --terminal  a terminal token: opens a shell in sandbox ID (a live sandbox of\n"
    "            this host with a task; its learner and task are the sandbox's)\n"
    "            through `sandglass serve`, and does nothing else\n"
    "  --watch   a watch token: watches the terminal open in sandbox ID through\n"
    "            `sandglass serve`, read-only (it cannot type or resize)\n"
    "  --ttl     validity: seconds or 90s, 15m, 2h, 7d (default 7d)\n"
    "  --secret  the ingest's secret file (default <state>/ingest/secret)\n"
    "  --check URL  (stream token) do not print it: ask the ingest at URL (ws://,\n"
    "            wss://, http:// or https://HOST:PORT) whether it takes it, writing\n"
    "            nothing; prints {\"result\": accepted|rejected|tls-failed|unreachable|\n"
    "            unchecked, \"reason\"} and exits 0 only when accepted ('sandglass\n"
    "            create' asks this)\n"
    "  --ingest-ca FILE  with --check: the CA file (PEM) a TLS ingest is verified by\n"
    "            (default the config's, else the system's trust store)\n";

#define CHECK_TTL_S 60 /* a token made only to be checked */

/* --check: whether the ingest at url takes tok (GET /v1/token, which opens
 * and writes nothing). One JSON object on stdout; a line on stderr when
 * the answer is not "accepted". */
static int check_token(const char *url, const char *ca, const char *tok)
{
    const char *result, *reason = "";
    sg_err err = {0};
    sg_cli_target t;
    int status = 0;
    sg_autojson json_t *ans = NULL;
    if (sg_cli_target_parse(url, ca, &t, &err) < 0) {
        return sg_cli_usage("token", "%s", err.msg);
    } else if (!(ans = sg_cli_http_get_json(&t, "/v1/token", tok, &status, &err))) {
        /* TLS that fails (an unknown CA, another host's certificate, a
         * plain port): the uplink would fail the same way, for ever. */
        result = status ? "unchecked" : err.code == EKEYREJECTED ? "tls-failed" : "unreachable";
        reason = err.msg;
    } else if (status == 200) {
        result = "accepted";
    } else if (status == 401) {
        result = "rejected";
        reason = json_string_value(json_object_get(ans, "error")) ?: "401";
    } else {
        /* An ingest from before /v1/token (404): it cannot tell. */
        result = "unchecked";
        reason = status == 404 ? "the ingest has no /v1/token (older than this sandglass)" : "unexpected answer";
    }
    sg_autojson json_t *out = json_pack("{s:s, s:s, s:s}", "ingest", url, "result", result, "reason", reason);
    sg_autofree char *s = out ? sg_json_dump(out) : NULL;
    if (s)
        puts(s);
    if (strcmp(result, "accepted") == 0)
        return 0;
    char vbuf[300];
    sg_cli_sayf("token", "the ingest at %s: %s%s%s", url, result, *reason ? ": " : "",
                sg_vis(reason, strlen(reason), vbuf, sizeof vbuf));
    return SG_CLI_FAILED;
}

static void meta_clearp(sg_sandbox_meta *m)
{
    sg_sandbox_meta_clear(m);
}

int sg_cmd_token(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"learner", required_argument, NULL, 'l'},
        {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'},
        {"ttl", required_argument, NULL, 'T'},
        {"secret", required_argument, NULL, 'k'},
        {"read", no_argument, NULL, 'r'},
        {"terminal", no_argument, NULL, 'x'},
        {"watch", no_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc > 1 && strcmp(argv[1], "revoke") == 0)
        return sg_cmd_token_revoke(argc - 1, argv + 1);
    const char *learner = NULL, *task = NULL, *sandbox = NULL, *secret_path = NULL, *check = NULL;
    const char *ingest_ca = NULL;
    uint64_t ttl = SG_TOKEN_TTL_DEFAULT;
    bool read = false, terminal = false, watch = false;
    sg_err err;
    int c;
    optind = 1;
    opterr = 0; /* our one-line message, not getopt's */
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': learner = optarg; break;
        case 't': task = optarg; break;
        case 's': sandbox = optarg; break;
        case 'k': secret_path = optarg; break;
        case 'r': read = true; break;
        case 'x': terminal = true; break;
        case 'w': watch = true; break;
        case 'c': check = optarg; break;
        case 'C': ingest_ca = optarg; break;
        case 'T':
        {
            double d;
            if (sg_parse_duration(optarg, (double)SG_TOKEN_TTL_MAX, &d, &err) < 0)
                return sg_cli_usage("token", "--ttl: %s", err.msg);
            ttl = d < 1 ? 1 : (uint64_t)d; /* whole seconds: a token's exp is one */
            break;
        }
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("token", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("token", "unexpected argument '%.64s' (token takes only options)", argv[optind]);
    if (read + terminal + watch > 1)
        return sg_cli_usage("token", "--read, --terminal and --watch are three kinds of token: give one");
    const char *kind = watch ? "--watch" : "--terminal";
    terminal = terminal || watch; /* both name one sandbox, its learner and task */
    if (terminal && !sandbox)
        return sg_cli_usage("token", "--sandbox is required for a %s token", kind + 2);
    if (terminal && check)
        return sg_cli_usage("token", "--check is for a stream token: drop %s", kind);
    /* A terminal token names the sandbox's own learner and task. */
    __attribute__((cleanup(meta_clearp))) sg_sandbox_meta meta = {0};
    char sid[SG_ID_LEN + 1];
    if (terminal) {
        if (sg_state_resolve_id(sandbox, sid, &err) < 0 || sg_sandbox_meta_load(sid, &meta, &err) < 0)
            return sg_cli_failf("token", "%s", err.msg);
        sandbox = sid;
        bool ok = meta.task != NULL;
        const char *why = !ok ? "has no task (a terminal token names learner, task and sandbox)"
                          : learner && strcmp(learner, meta.learner) != 0 ? "belongs to another learner"
                          : task && strcmp(task, meta.task) != 0 ? "has another task" : NULL;
        if (!why) {
            learner = meta.learner;
            task = meta.task;
        }
        if (why)
            return sg_cli_failf("token", "sandbox %s %s", sid, why);
    }
    if (!read && !terminal && (!learner || !task || !sandbox))
        return sg_cli_usage("token", "%s is required for a stream token (or --read for a read token)",
                            !learner ? "--learner" : !task ? "--task" : "--sandbox");
    if (read && check)
        return sg_cli_usage("token", "--check is for a stream token: drop --read");
    if (ingest_ca && !check)
        return sg_cli_usage("token", "--ingest-ca goes with --check URL (the ingest it verifies)");
    const char *names[][2] = {{"--learner", learner}, {"--task", task}, {"--sandbox", sandbox}};
    for (size_t i = 0; i < SG_ARRAY_LEN(names); i++)
        if (names[i][1] && !sg_valid_name(names[i][1])) {
            return sg_cli_usage("token", "%s '%s': use 1-128 of [A-Za-z0-9._@-]", names[i][0], names[i][1]);
        }
    sg_autofree char *secret_default = NULL;
    if (!secret_path) {
        if (!sg_state_dir(&err)) {
            return sg_cli_failf("token", "state directory: %s", err.msg);
        }
        secret_path = secret_default = sg_config_secret();
    }
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    if (sg_token_secret_load(secret_path, secret, &err) < 0) {
        return sg_cli_failf("token", "%s%s", err.msg, err.code == ENOENT ? " (start `sandglass ingest` once, or pass --secret)" : "");
    }
    sg_autofree char *tok =
        read ? sg_token_make_read(secret, learner, task, sandbox, (int64_t)ttl, &err)
        : watch ? sg_token_make_watch(secret, learner, task, sandbox, (int64_t)ttl, &err)
        : terminal ? sg_token_make_terminal(secret, learner, task, sandbox, (int64_t)ttl, &err)
             : sg_token_make(secret, learner, task, sandbox, check ? CHECK_TTL_S : (int64_t)ttl, &err);
    memset(secret, 0, sizeof secret);
    if (!tok) {
        return sg_cli_failf("token", "%s", err.msg);
    }
    if (check)
        return check_token(check, ingest_ca, tok);
    puts(tok);
    return 0;
}

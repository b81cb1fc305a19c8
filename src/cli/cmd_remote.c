/* sandglassd abort|destroy: `sandglass abort ID` and `sandglass destroy ID`
 * of a sandbox that is not in this state directory (the thin CLI hands
 * over to it: it speaks no HTTP).
 *
 * Which host has it: the ingest's store (GET /v1/hosts?sandbox=ID, an
 * operator read token), where every `sandglass host` lists its sandboxes
 * by id each heartbeat; the sandbox's id is the key that ties a session
 * (its streams' sandbox) to its host. The id is resolved by the one prefix
 * rule against the ids the hosts list. Then the action goes to that host's
 * serve (its registration's serve_url): POST /v1/abort or /v1/destroy with
 * an action token (wire/token.h, 60 s, single use) made from the secret
 * that serve verifies, and the body {"sandbox": ID[, "reason": R], "by":
 * USER@HOST} (who asks, from where: the record's "via" over there). serve
 * runs the host's own `sandglass abort|destroy ID --json --via ...` and
 * answers its JSON, which is printed as a local abort or destroy prints
 * it. */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"
#include "cli/hostreg.h"
#include "cli/ingest_http.h"
#include "state/state.h"
#include "wire/token.h"

#define REMOTE_READ_TTL_S 300

typedef struct remote_opts {
    const char *cmd; /* "abort" or "destroy" */
    const char *ingest, *ingest_ca, *token, *secret, *reason, *arg;
    bool json, yes, destroy;
} remote_opts;

/* The sandbox's host, found in the store. */
typedef struct remote_host {
    char id[SG_ID_LEN + 1];
    char name[SG_NAME_MAX + 1];
    char serve_url[1024];
    bool stale;
    long long age_s;
} remote_host;

/* Of the hosts listing id, the one to ask: not stale before stale, then
 * the most recently seen. */
static int pick_host(json_t *hosts, const char *id, remote_host *out, sg_err *err)
{
    json_t *best = NULL;
    size_t i, j;
    json_t *h, *sb;
    json_array_foreach(hosts, i, h) {
        bool lists = false;
        json_array_foreach(json_object_get(json_object_get(h, "info"), "sandboxes"), j, sb)
            lists = lists || strcmp(json_string_value(json_object_get(sb, "id")) ?: "", id) == 0;
        if (!lists)
            continue;
        bool stale = json_is_true(json_object_get(h, "stale"));
        if (!best || (json_is_true(json_object_get(best, "stale")) && !stale) ||
            (json_is_true(json_object_get(best, "stale")) == stale &&
             json_integer_value(json_object_get(h, "last_seen")) > json_integer_value(json_object_get(best, "last_seen"))))
            best = h;
    }
    if (!best)
        return sg_err_set(err, ENOENT, "no registered host lists the sandbox %s", id);
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->name, sizeof out->name, "%s", json_string_value(json_object_get(best, "name")));
    const char *url = json_string_value(json_object_get(json_object_get(best, "info"), "serve_url"));
    snprintf(out->serve_url, sizeof out->serve_url, "%s", url ? url : "");
    out->stale = json_is_true(json_object_get(best, "stale"));
    out->age_s = (long long)json_integer_value(json_object_get(best, "age_s"));
    return 0;
}

/* The sandbox o->arg names, by the one prefix rule over every host's
 * sandboxes, and its host: 0, or -1 with err. */
static int find_host(const remote_opts *o, const sg_cli_target *t, remote_host *out, sg_err *err)
{
    char where[600];
    snprintf(where, sizeof where,
             " here nor on any host registered in the ingest's store at %s:%s (a host lists its sandboxes every "
             "heartbeat: one made since may not be listed yet)", t->host, t->port);
    if (!sg_valid_name(o->arg) || strlen(o->arg) < SG_ID_MIN_PREFIX) /* nothing to ask */
        return sg_id_resolve(o->arg, NULL, 0, where, out->id, sizeof out->id, err);
    sg_autofree char *token = sg_cli_read_token(o->token, o->secret, REMOTE_READ_TTL_S, err);
    if (!token) {
        sg_err_prefix(err, "no sandbox '%s' here; finding it on another host needs an operator read token "
                      "(--token) or the secret (--secret)", o->arg);
        return -1;
    }
    sg_autojson json_t *hosts = sg_cli_hosts_all(t, token, o->arg, err);
    if (!hosts) {
        sg_err_prefix(err, "no sandbox '%s' here, and the ingest could not say which host has it", o->arg);
        return -1;
    }
    sg_autofree const char **ids = NULL;
    size_t n = 0, i, j;
    json_t *h, *sb;
    json_array_foreach(hosts, i, h) {
        json_t *sbs = json_object_get(json_object_get(h, "info"), "sandboxes");
        json_array_foreach(sbs, j, sb) {
            ids = sg_xrealloc(ids, (n + 1) * sizeof *ids);
            ids[n++] = json_string_value(json_object_get(sb, "id"));
        }
    }
    char id[SG_ID_LEN + 1];
    if (sg_id_resolve(o->arg, ids, n, where, id, sizeof id, err) < 0)
        return -1;
    return pick_host(hosts, id, out, err);
}

/* The secret the host's serve verifies (the deployment's ingest secret). */
static int load_secret(const remote_opts *o, uint8_t key[SG_TOKEN_SECRET_LEN], sg_err *err)
{
    const char *secret = o->secret ? o->secret : sg_config_get(SG_CONF_SECRET, NULL);
    sg_autofree char *def = secret ? NULL : sg_config_secret();
    if (sg_token_secret_load(secret ? secret : def, key, err) < 0) {
        sg_err_prefix(err, "the action token needs the secret the host's serve verifies (--secret FILE)");
        return -1;
    }
    return 0;
}

/* Who asks, for the record on the other host: USER@HOST (this process's
 * user and host names, each character outside [A-Za-z0-9._-] as '_'). */
static void asker(char *out, size_t size)
{
    struct passwd *pw = getpwuid(geteuid());
    char host[65] = "?";
    if (gethostname(host, sizeof host - 1) < 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    snprintf(out, size, "%.31s@%.31s", pw && pw->pw_name[0] ? pw->pw_name : "?", host);
    for (char *c = out; *c; c++) {
        bool ok = *c == '.' || *c == '_' || *c == '-' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= 'A' && *c <= 'Z');
        if (!ok && !(*c == '@' && c == strchr(out, '@')))
            *c = '_';
    }
}

/* POST /v1/<what> to h's serve: its JSON answer (200), or NULL with err
 * naming the host and what went wrong. */
static json_t *serve_call(const remote_opts *o, const remote_host *h, const char *what, sg_err *err)
{
    char stale[96] = "";
    if (h->stale)
        snprintf(stale, sizeof stale, " (stale: not seen for %lld s)", h->age_s);
    if (!h->serve_url[0])
        return sg_err_set(err, EHOSTUNREACH, "the sandbox %s is on host %s%s, which registered no serve URL "
                          "(sandglass host --serve-url): it cannot be reached from here", h->id, h->name, stale), NULL;
    sg_cli_target t;
    if (sg_cli_target_parse(h->serve_url, o->ingest_ca, &t, err) < 0 || t.n != 1) {
        if (t.n != 1)
            sg_err_set(err, EINVAL, "one URL");
        sg_err_prefix(err, "host %s's serve URL", h->name);
        return NULL;
    }
    t.peer = "serve";
    uint8_t key[SG_TOKEN_SECRET_LEN];
    if (load_secret(o, key, err) < 0)
        return NULL;
    sg_autofree char *token = sg_token_make_action(key, what, h->id, err);
    memset(key, 0, sizeof key);
    char by[65];
    asker(by, sizeof by);
    sg_autojson json_t *body = json_pack("{s:s, s:s}", "sandbox", h->id, "by", by);
    if (o->reason && strcmp(what, "abort") == 0)
        json_object_set_new(body, "reason", json_string(o->reason));
    sg_autofree char *text = token && body ? sg_json_dump(body) : NULL;
    if (!text)
        return token ? (sg_err_set(err, ENOMEM, "out of memory"), NULL) : NULL;
    int status = 0;
    const char *ans = NULL;
    size_t ans_len = 0;
    char path[32];
    snprintf(path, sizeof path, "/v1/%s", what);
    sg_autofree char *buf = sg_cli_http_request(&t, path, token, text, strlen(text), &status, &ans, &ans_len, err);
    if (!buf) {
        sg_err_prefix(err, "host %s%s is unreachable (its serve at %s)", h->name, stale, h->serve_url);
        return NULL;
    }
    sg_err jerr;
    json_t *j = sg_json_parse(ans, ans_len, &jerr);
    const char *msg = json_string_value(json_object_get(j, "error"));
    if (status == 200 && json_is_object(j) && !msg)
        return j;
    char vb[512];
    sg_err_set(err, EPROTO, "host %s's serve refused the %s of %s: %s (HTTP %d)", h->name, what, h->id,
               msg ? sg_vis(msg, strlen(msg), vb, sizeof vb) : "no JSON answer (is it a sandglass serve?)", status);
    json_decref(j);
    return NULL;
}

/* The ingest's target, and the sandbox's host: 0, or the exit status. */
static int remote_setup(const remote_opts *o, remote_host *h)
{
    const char *ingest = o->ingest ? o->ingest : sg_config_ingest_given();
    sg_err err = {0};
    if (!ingest)
        return sg_cli_usage(o->cmd, "no sandbox '%s' here, and no --ingest to find it on another host", o->arg);
    sg_cli_target t;
    if (sg_cli_target_parse(ingest, o->ingest_ca, &t, &err) < 0)
        return sg_cli_usage(o->cmd, "--ingest: %s", err.msg);
    if (find_host(o, &t, h, &err) < 0)
        return sg_cli_fail(o->cmd, err.msg);
    return 0;
}

/* ---- abort ----------------------------------------------------------------- */

static int abort_parse(int argc, char **argv, remote_opts *o)
{
    static const struct option opts[] = {
        {"reason", required_argument, NULL, 'r'},    {"destroy", no_argument, NULL, 'd'},
        {"rollback", no_argument, NULL, 'b'},        {"json", no_argument, NULL, 'j'},
        {"ingest", required_argument, NULL, 'i'},    {"ingest-ca", required_argument, NULL, 'C'},
        {"token", required_argument, NULL, 'T'},     {"secret", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},            {0},
    };
    const char **dst[128] = {['r'] = &o->reason, ['i'] = &o->ingest, ['C'] = &o->ingest_ca, ['T'] = &o->token,
                             ['S'] = &o->secret};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: sandglassd abort ID [--reason TEXT] [--destroy] [--json] --ingest URL [--ingest-ca FILE]\n"
                   "                      [--token T] [--secret FILE]\n\n"
                   "abort of a sandbox on another host, through its serve ('sandglass abort --help').\n");
            return 0;
        }
        if (c == 'j')
            o->json = true, sg_cli_json_errors(true);
        else if (c == 'd')
            o->destroy = true;
        else if (c == 'b')
            return sg_cli_usage("abort", "--rollback of a sandbox on another host: run it on that host");
        else if (c > 0 && c < 128 && dst[c])
            *dst[c] = optarg;
        else
            return sg_cli_bad_option("abort", argv[optind - 1]);
    }
    if (optind != argc - 1)
        return sg_cli_usage("abort", optind >= argc ? "missing sandbox id" : "takes exactly one sandbox id");
    if (o->reason && strlen(o->reason) > 200)
        return sg_cli_usage("abort", "--reason is longer than 200 characters");
    o->arg = argv[optind];
    return -1;
}

int sg_cmd_abort_remote(int argc, char **argv)
{
    remote_opts o = {.cmd = "abort"};
    int r = abort_parse(argc, argv, &o);
    if (r >= 0)
        return r;
    remote_host h;
    if ((r = remote_setup(&o, &h)) != 0)
        return r;
    sg_err err = {0};
    sg_autojson json_t *res = serve_call(&o, &h, "abort", &err);
    __attribute__((cleanup(sg_ctl_abort_reply_free))) sg_ctl_abort_reply ab = {0};
    if (!res || sg_ctl_decode_abort_reply(res, &ab, &err) < 0)
        return sg_cli_fail("abort", err.msg);
    json_t *d = o.destroy ? serve_call(&o, &h, "destroy", &err) : NULL;
    if (d)
        json_object_set_new(res, "destroy", d);
    if (o.json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        sg_cli_print_abort(h.id, &ab, NULL);
        if (d)
            printf("destroyed %s\n", h.id);
    }
    if (o.destroy && !d)
        return sg_cli_fail("abort", err.msg);
    return 0;
}

/* ---- destroy --------------------------------------------------------------- */

static int destroy_parse(int argc, char **argv, remote_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **val = strcmp(a, "--ingest") == 0      ? &o->ingest
                           : strcmp(a, "--ingest-ca") == 0 ? &o->ingest_ca
                           : strcmp(a, "--token") == 0     ? &o->token
                           : strcmp(a, "--secret") == 0    ? &o->secret
                                                           : NULL;
        if (val) {
            if (i + 1 >= argc)
                return sg_cli_usage("destroy", "%s needs a value", a);
            *val = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
            sg_cli_json_errors(true);
        } else if (strcmp(a, "--yes") == 0 || strcmp(a, "-y") == 0) {
            o->yes = true;
        } else if (strcmp(a, "--help") == 0) {
            printf("usage: sandglassd destroy ID [--json] [--yes] --ingest URL [--ingest-ca FILE] [--token T]\n"
                   "                        [--secret FILE]\n\n"
                   "destroy of a sandbox on another host, through its serve ('sandglass destroy --help').\n");
            return 0;
        } else if (a[0] == '-') {
            return sg_cli_usage("destroy", "'%s' of a sandbox on another host: give one id (a filter acts on this "
                                "host's sandboxes)", a);
        } else if (o->arg) {
            return sg_cli_usage("destroy", "one sandbox of another host at a time");
        } else {
            o->arg = a;
        }
    }
    if (!o->arg)
        return sg_cli_usage("destroy", "missing sandbox id");
    return -1;
}

int sg_cmd_destroy_remote(int argc, char **argv)
{
    remote_opts o = {.cmd = "destroy"};
    int r = destroy_parse(argc, argv, &o);
    if (r >= 0)
        return r;
    remote_host h;
    if ((r = remote_setup(&o, &h)) != 0)
        return r;
    /* a prefix names it: a person says yes on a terminal, a script --yes */
    if (strcmp(o.arg, h.id) != 0 && !o.yes) {
        if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO))
            return sg_cli_fail("destroy", "a prefix names the sandbox: give its full id, or --yes");
        char q[128];
        snprintf(q, sizeof q, "destroy %s on host %.64s?", h.id, h.name);
        if (!sg_cli_ask_yes(stderr, q))
            return sg_cli_fail("destroy", "nothing destroyed");
    }
    sg_err err = {0};
    sg_autojson json_t *res = serve_call(&o, &h, "destroy", &err);
    if (!res)
        return sg_cli_fail("destroy", err.msg);
    json_int_t left = json_integer_value(json_object_get(res, "events_undelivered"));
    if (left > 0)
        sg_cli_sayf("destroy", "%lld captured event%s of %s could not be delivered to the ingest: kept on host %s "
                    "in its undelivered/%s; deliver them with 'sandglass flush %s' there",
                    (long long)left, left == 1 ? "" : "s", h.id, h.name, h.id, h.id);
    if (o.json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        printf("destroyed %s\n", h.id);
    }
    return 0;
}

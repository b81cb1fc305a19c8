/* sandglassd ls --all-hosts: the sandboxes of every host registered in the
 * ingest's store (GET /v1/hosts, every page; `sandglass host` registers each), one row
 * a sandbox with its HOST, a host that lists none as one row of its own.
 * `sandglass ls --all-hosts` hands over to it (the thin CLI speaks no
 * HTTP). Every string the store gave is escaped on the terminal: the
 * ingest checked them, but a terminal trusts no one's bytes. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/hostreg.h"
#include "cli/ingest_http.h"
#include "cli/report.h"

#define LS_HOSTS_TOKEN_TTL_S 300

typedef struct hosts_opts {
    const char *ingest, *ingest_ca, *token, *secret;
    const char *learner, *task, *state;
    bool json;
} hosts_opts;

static const char hosts_usage[] =
    "usage: sandglass ls --all-hosts [--learner L] [--task T] [--state S] [--json]\n"
    "                    [--ingest URL] [--ingest-ca FILE] [--token T | --secret FILE]\n"
    "\n"
    "Lists the sandboxes of every host registered in the ingest's store (each\n"
    "`sandglass host` registers its own every heartbeat): host, id, state,\n"
    "created, last active, learner, task, as the host last told them. A host\n"
    "not seen for more than 3 of its heartbeats is marked stale; a host that\n"
    "lists more sandboxes than a registration carries says how many it has.\n"
    "\n"
    "  --ingest URL   the ingest to ask (default the config's)\n"
    "  --ingest-ca FILE  the CA file (PEM) an https ingest's certificate is verified by\n"
    "  --token T      an operator read token (sandglass token --read)\n"
    "  --secret FILE  without --token: make one from this secret (default the\n"
    "                 config's, else <state>/ingest/secret)\n"
    "  --json         the hosts as JSON: [{name, serve_url, version, capacity,\n"
    "                 heartbeat_s, last_seen, age_s, stale, sandboxes_total,\n"
    "                 sandboxes: [{id, learner, task, state, created, last_active}]}]\n";

static int hosts_parse(int argc, char **argv, hosts_opts *o)
{
    static const struct option opts[] = {
        {"all-hosts", no_argument, NULL, 'A'},        {"json", no_argument, NULL, 'j'},
        {"learner", required_argument, NULL, 'l'},    {"task", required_argument, NULL, 't'},
        {"state", required_argument, NULL, 's'},      {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'},  {"token", required_argument, NULL, 'T'},
        {"secret", required_argument, NULL, 'S'},     {"help", no_argument, NULL, 'h'},
        {0},
    };
    *o = (hosts_opts){.ingest = sg_config_ingest()};
    const char **dst[128] = {['l'] = &o->learner, ['t'] = &o->task, ['s'] = &o->state, ['i'] = &o->ingest,
                             ['C'] = &o->ingest_ca, ['T'] = &o->token, ['S'] = &o->secret};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(hosts_usage, stdout);
            return 0;
        }
        if (c == 'j')
            o->json = true;
        else if (c > 0 && c < 128 && dst[c])
            *dst[c] = optarg;
        else if (c != 'A')
            return sg_cli_bad_option("ls", argv[optind - 1]);
    }
    if (optind < argc)
        return sg_cli_usage("ls", "unexpected argument '%.64s'", argv[optind]);
    return -1;
}

/* A string of the store's, escaped for the terminal ("-": none). */
static const char *vis(json_t *v, char *buf, size_t n)
{
    const char *s = json_string_value(v);
    return s ? sg_vis(s, strlen(s), buf, n) : "-";
}

static bool row_wanted(const hosts_opts *o, json_t *sb)
{
    const char *want[] = {o->learner, o->task, o->state}, *key[] = {"learner", "task", "state"};
    for (size_t i = 0; i < SG_ARRAY_LEN(want); i++) {
        const char *v = json_string_value(json_object_get(sb, key[i]));
        if (want[i] && (!v || strcmp(v, want[i]) != 0))
            return false;
    }
    return true;
}

/* One line: the host's columns, then the sandbox's (sb NULL: none). */
static void print_row(json_t *h, json_t *sb, const char *note)
{
    char b[7][SG_NAME_MAX * 4 + 8];
    printf("%-20s %-12s %-8s %-20s %-20s %-16s %s%s\n", vis(json_object_get(h, "name"), b[0], sizeof b[0]),
           vis(json_object_get(sb, "id"), b[1], sizeof b[1]), vis(json_object_get(sb, "state"), b[2], sizeof b[2]),
           vis(json_object_get(sb, "created"), b[3], sizeof b[3]),
           vis(json_object_get(sb, "last_active"), b[4], sizeof b[4]),
           vis(json_object_get(sb, "learner"), b[5], sizeof b[5]), vis(json_object_get(sb, "task"), b[6], sizeof b[6]),
           note);
}

/* What follows a host's rows: stale, a cut list. */
static void host_note(json_t *h, char *note, size_t n)
{
    json_t *info = json_object_get(h, "info");
    size_t listed = json_array_size(json_object_get(info, "sandboxes"));
    json_int_t total = json_integer_value(json_object_get(info, "sandboxes_total"));
    int off = 0;
    note[0] = '\0';
    if (json_is_true(json_object_get(h, "stale")))
        off = snprintf(note, n, "  (stale: not seen for %lld s)", (long long)json_integer_value(json_object_get(h, "age_s")));
    if (off >= 0 && (size_t)off < n && total > (json_int_t)listed)
        snprintf(note + off, n - (size_t)off, "  (the host lists %zu of its %lld sandboxes)", listed, (long long)total);
}

static void print_table(const hosts_opts *o, json_t *hosts)
{
    printf("%-20s %-12s %-8s %-20s %-20s %-16s %s\n", "HOST", "ID", "STATE", "CREATED", "LAST ACTIVE", "LEARNER",
           "TASK");
    size_t i, j;
    json_t *h, *sb;
    json_array_foreach(hosts, i, h) {
        char note[160];
        host_note(h, note, sizeof note);
        size_t shown = 0;
        json_array_foreach(json_object_get(json_object_get(h, "info"), "sandboxes"), j, sb) {
            if (!row_wanted(o, sb))
                continue;
            print_row(h, sb, note);
            shown++;
        }
        if (shown == 0 && !o->learner && !o->task && !o->state)
            print_row(h, NULL, note);
    }
}

/* The hosts as --json prints them: each host's registration with
 * last_seen (RFC 3339), age_s and stale, its sandboxes filtered. */
static json_t *hosts_json(const hosts_opts *o, json_t *hosts)
{
    json_t *out = json_array();
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h) {
        json_t *one = json_deep_copy(json_object_get(h, "info"));
        if (!json_is_object(one)) {
            json_decref(one);
            continue;
        }
        json_object_del(one, "v");
        time_t seen = (time_t)json_integer_value(json_object_get(h, "last_seen"));
        struct tm tm;
        char t[32] = "";
        if (gmtime_r(&seen, &tm))
            strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_object_set_new(one, "last_seen", json_string(t));
        json_object_set(one, "age_s", json_object_get(h, "age_s"));
        json_object_set(one, "stale", json_object_get(h, "stale"));
        json_t *sbs = json_object_get(one, "sandboxes");
        for (size_t k = json_array_size(sbs); k-- > 0;)
            if (!row_wanted(o, json_array_get(sbs, k)))
                json_array_remove(sbs, k);
        json_array_append_new(out, one);
    }
    return out;
}

int sg_cmd_ls_hosts(int argc, char **argv)
{
    hosts_opts o;
    int r = hosts_parse(argc, argv, &o);
    if (r >= 0)
        return r;
    sg_err err = {0};
    sg_cli_target t;
    if (sg_cli_target_parse(o.ingest, o.ingest_ca, &t, &err) < 0)
        return sg_cli_usage("ls", "--ingest: %s", err.msg);
    sg_autofree char *tok = sg_cli_read_token(o.token, o.secret, LS_HOSTS_TOKEN_TTL_S, &err);
    if (!tok)
        return sg_cli_failf("ls", "%s (pass --token, an operator read token, or --secret)", err.msg);
    sg_autojson json_t *hosts = sg_cli_hosts_all(&t, tok, NULL, &err); /* every page */
    if (!hosts)
        return sg_cli_failf("ls", "%s", err.msg);
    if (o.json) {
        sg_autojson json_t *out = hosts_json(&o, hosts);
        sg_autofree char *s = sg_json_dump(out);
        printf("%s\n", s ? s : "[]");
        return 0;
    }
    print_table(&o, hosts);
    return 0;
}

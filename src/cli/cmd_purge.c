/* sandglass purge [--learner L] [--task T] [--sandbox ID] [--older-than-days N]
 *                 [--store URL | --ingest URL [--ingest-ca FILE] [--secret FILE]]
 * Removes events from a store, for an erasure request (a learner's, a
 * task's, a sandbox's: all the given filters together) or by age (whole
 * sessions whose last event is older than N days, as the ingest's
 * --retain-days does). An operator's action: through the ingest (--ingest:
 * POST /v1/purge with an operator write token made from the ingest's
 * secret; the ingest logs it), or on the store itself (--store URL,
 * default the local ingest's; its own access is the authority), in one
 * transaction, logged on stderr. A live stream purged refuses its later
 * events (their seqs no longer follow the store's): purge ended sessions. */
#include <getopt.h>
#include <jansson.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/ingest_op.h"
#include "cli/report.h"
#include "ingest/store_export.h"
#include "state/state.h"

static const char usage[] =
    "usage: sandglass purge [--learner L] [--task T] [--sandbox ID] [--older-than-days N]\n"
    "                       [--store URL | --ingest URL [--ingest-ca FILE] [--secret FILE]]\n"
    "  removes the events of the learner, task and sandbox given (all of them\n"
    "  together), or the sessions whose last event is older than N days\n"
    "  --store  default sqlite:<state>/ingest/events.db (postgresql://... too)\n"
    "  --ingest purge through the ingest at URL (POST /v1/purge), with an\n"
    "           operator write token made from the ingest's secret\n"
    "  --ingest-ca  the CA file an https ingest is verified by\n"
    "  --secret the ingest's secret file (default <state>/ingest/secret)\n";

/* The purge through the ingest: its filter as POST /v1/purge's query. */
static int purge_ingest(const sg_cli_op *o, const sg_store_purge_q *q, uint64_t days)
{
    char days_s[24] = "";
    if (days)
        snprintf(days_s, sizeof days_s, "%llu", (unsigned long long)days);
    /* the names are valid names (no byte to escape), the query's & between them */
    const char *const names[] = {"learner", "task", "sandbox", "older_than_days"};
    const char *const vals[] = {q->learner, q->task, q->sandbox, days ? days_s : NULL};
    sg_autofree char *path = sg_xstrdup("/v1/purge");
    for (int i = 0; i < 4; i++) {
        if (!vals[i])
            continue;
        char *next = sg_strdup_printf("%s%c%s=%s", path, strchr(path, '?') ? '&' : '?', names[i], vals[i]);
        free(path);
        path = next;
    }
    sg_err err;
    int status = 0;
    sg_autojson json_t *ans = sg_cli_op_post(o, "purge", path, -1, 0, &status, &err);
    if (!ans)
        return sg_cli_failf("purge", "%s", err.msg);
    printf("removed %lld events\n", (long long)json_integer_value(json_object_get(ans, "removed")));
    return 0;
}

int sg_cmd_purge(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"learner", required_argument, NULL, 'l'}, {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'}, {"older-than-days", required_argument, NULL, 'd'},
        {"store", required_argument, NULL, 'S'},   {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'}, {"secret", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    sg_store_purge_q q = {0};
    const char *store = NULL;
    sg_cli_op o = {0};
    char cutoff[64];
    sg_err err;
    uint64_t days = 0;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': q.learner = optarg; break;
        case 't': q.task = optarg; break;
        case 's': q.sandbox = optarg; break;
        case 'S': store = optarg; break;
        case 'i': o.ingest = optarg; break;
        case 'C': o.ingest_ca = optarg; break;
        case 'k': o.secret_path = optarg; break;
        case 'd':
            /* 0 would be "older than now": every session in the store. */
            if (sg_parse_uint(optarg, 100000, &days, &err) < 0 || days == 0)
                return sg_cli_usage("purge", "--older-than-days: a number of days (1..100000)");
            sg_store_cutoff((double)days, cutoff, sizeof cutoff);
            q.older_than = cutoff;
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("purge", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("purge", "unexpected argument '%.64s' (purge takes only options)", argv[optind]);
    const char *const given[] = {q.learner, q.task, q.sandbox};
    for (int i = 0; i < 3; i++)
        if (given[i] && !sg_valid_name(given[i]))
            return sg_cli_usage("purge", "--%s: not a valid name", i == 0 ? "learner" : i == 1 ? "task" : "sandbox");
    if (!q.learner && !q.task && !q.sandbox && !q.older_than)
        return sg_cli_usage("purge", "give --learner, --task, --sandbox or --older-than-days");
    if (store && o.ingest)
        return sg_cli_usage("purge", "--store or --ingest, not both");
    if (!o.ingest && (o.ingest_ca || o.secret_path))
        return sg_cli_usage("purge", "--ingest-ca and --secret go with --ingest");
    if (o.ingest)
        return purge_ingest(&o, &q, days);
    sg_autofree char *store_default = NULL;
    if (!store) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("purge", "state directory: %s", err.msg);
        sg_autofree char *db = sg_state_path("ingest/events.db");
        store = store_default = sg_strdup_printf("sqlite:%s", db);
    }
    sg_log_init("purge");
    int64_t removed = 0;
    if (sg_store_purge(store, &q, &removed, &err) < 0)
        return sg_cli_failf("purge", "%s (nothing removed)", err.msg);
    sg_log(SG_LOG_INFO, "purged learner=%s task=%s sandbox=%s older_than=%s: %" PRId64 " events removed",
           q.learner ? q.learner : "*", q.task ? q.task : "*", q.sandbox ? q.sandbox : "*",
           q.older_than ? q.older_than : "-", removed);
    printf("removed %" PRId64 " events\n", removed);
    return 0;
}

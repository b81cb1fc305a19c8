/* sandglass purge [--learner L] [--task T] [--sandbox ID] [--older-than-days N]
 *                 [--store URL]
 * Removes events from a store, for an erasure request (a learner's, a
 * task's, a sandbox's: all the given filters together) or by age (whole
 * sessions whose last event is older than N days, as the ingest's
 * --retain-days does). An operator's action on the store itself (its URL,
 * default the local ingest's; its own access is the authority), in one
 * transaction, logged on stderr. A live stream purged refuses its later
 * events (their seqs no longer follow the store's): purge ended sessions. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/report.h"
#include "ingest/store_export.h"
#include "state/state.h"

static const char usage[] =
    "usage: sandglass purge [--learner L] [--task T] [--sandbox ID] [--older-than-days N]\n"
    "                       [--store URL]\n"
    "  removes the events of the learner, task and sandbox given (all of them\n"
    "  together), or the sessions whose last event is older than N days\n"
    "  --store  default sqlite:<state>/ingest/events.db (postgresql://... too)\n";

int sg_cmd_purge(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"learner", required_argument, NULL, 'l'}, {"task", required_argument, NULL, 't'},
        {"sandbox", required_argument, NULL, 's'}, {"older-than-days", required_argument, NULL, 'd'},
        {"store", required_argument, NULL, 'S'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    sg_store_purge_q q = {0};
    const char *store = NULL;
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

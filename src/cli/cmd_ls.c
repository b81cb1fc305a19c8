/* sandglass ls: the sandboxes in the state directory and whether their
 * supervisor is alive. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "state/state.h"

/* running, or dead only when its init is: a sandbox whose supervisor
 * died while its init lives is taken over (revive.h), never shown dead.
 * The record is read again: the new supervisor's pid. */
static const char *ls_state(sg_sandbox_meta *m)
{
    if (sg_state_supervisor_held(m->id, NULL) == 1)
        return "running";
    sg_err err = {0};
    if (sg_revive_takeover(m->id, "ls", &err) < 0) {
        if (err.code != ESRCH)
            sg_cli_sayf("ls", "%s: %s", m->id, err.msg);
        return "dead";
    }
    sg_sandbox_meta fresh;
    if (sg_sandbox_meta_load(m->id, &fresh, NULL) == 0) {
        sg_sandbox_meta_clear(m);
        *m = fresh;
    }
    return "running";
}

int sg_cmd_ls(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: sandglass ls [--json]\n"
                   "\n"
                   "Lists this state directory's sandboxes (the pool's spares left out): id,\n"
                   "state (running, aborted and why, starting, dead), learner, task, workspace;\n"
                   "a captured one whose ingest cannot be reached or rejects its token says so.\n"
                   "\n"
                   "  --json    a JSON array of the sandboxes' records, with state, abort and\n"
                   "            uplink {state: connected|unreachable|rejected|error, reason, since}\n");
            return 0;
        } else {
            return sg_cli_usage("ls", "unknown option '%s'", argv[i]);
        }
    }
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("ls", err.msg);
    sg_autostrv char **ids = sg_state_list(&err);
    if (!ids)
        return sg_cli_fail("ls", err.msg);
    sg_autojson json_t *arr = json_array();
    if (!json)
        printf("%-14s %-10s %-20s %-20s %-12s %s\n", "ID", "STATE", "LEARNER", "TASK", "EXPIRES", "WORKSPACE");
    for (char **p = ids; *p; p++) {
        sg_sandbox_meta m;
        if (sg_sandbox_meta_load(*p, &m, &err) < 0)
            continue;
        if (strcmp(m.learner, SG_POOL_LEARNER) == 0) {
            sg_sandbox_meta_clear(&m); /* a spare: `sandglass pool` counts those */
            continue;
        }
        const char *state = m.supervisor_pid == 0 ? "starting" : ls_state(&m);
        /* An aborted session says so, and why (state.h keeps the abort). */
        char by[32], reason[256];
        bool aborted = sg_state_abort_load(m.id, by, sizeof by, reason, sizeof reason) == 1;
        if (aborted && strcmp(state, "running") == 0)
            state = "aborted";
        /* A captured sandbox whose events do not reach the ingest says so
         * (the capture records its uplink's state: state.h). */
        sg_state_uplink u;
        bool uplink = m.task && sg_state_uplink_load(m.id, &u) == 1;
        bool stuck = uplink && strcmp(u.state, "connected") != 0;
        /* when its lifecycle ends it, as its supervisor last armed it (state.h) */
        double exp_at;
        char exp_why[16], exp_in[16], exp_col[40] = "-";
        bool expiry = strcmp(state, "dead") && sg_state_expiry_load(m.id, &exp_at, exp_why, sizeof exp_why) == 1;
        if (expiry) {
            sg_fmt_duration(exp_at - sg_now_wall(), exp_in, sizeof exp_in);
            snprintf(exp_col, sizeof exp_col, "%s (%s)", exp_in, exp_why);
        }
        if (json) {
            json_t *j = sg_sandbox_meta_json(&m);
            json_object_set_new(j, "state", json_string(state));
            if (aborted)
                json_object_set_new(j, "abort", json_pack("{s:s, s:s}", "by", by, "reason", reason));
            if (expiry)
                json_object_set_new(j, "expiry", json_pack("{s:f, s:s}", "at", exp_at, "why", exp_why));
            if (uplink)
                json_object_set_new(j, "uplink", json_pack("{s:s, s:s, s:s}", "state", u.state, "reason", u.reason,
                                                           "since", u.since));
            json_array_append_new(arr, j);
        } else {
            printf("%-14s %-10s %-20s %-20s %-12s %s", m.id, state, m.learner, m.task ? m.task : "-",
                   exp_col, m.workspace);
            if (aborted) {
                size_t n = strlen(by); /* the reason without the "by: " before it */
                const char *r = strncmp(reason, by, n) == 0 && reason[n] == ':' && reason[n + 1] == ' '
                                ? reason + n + 2 : reason;
                printf("  (aborted by %s: %s)", by, r);
            }
            /* A workspace without a file system of its own (disk.h):
             * the operator's, or create could not make one. */
            if (m.disk == 0)
                printf("  (no disk limit)");
            char vbuf[SG_UPLINK_REASON_MAX * 4];
            if (stuck) {
                printf("  (ingest %s since %s: %s; events kept in the spool)", u.state, u.since,
                       sg_vis(u.reason, strlen(u.reason), vbuf, sizeof vbuf));
            } else if (uplink && m.ingest_url && strchr(m.ingest_url, ',') && u.reason[0]) {
                /* several ingest nodes: which one takes the events */
                printf("  (ingest %s since %s)", sg_vis(u.reason, strlen(u.reason), vbuf, sizeof vbuf), u.since);
            }
            printf("\n");
        }
        sg_sandbox_meta_clear(&m);
    }
    if (json) {
        sg_autofree char *s = sg_json_dump(arr);
        printf("%s\n", s);
    }
    return 0;
}

/* sandglass destroy: asks the supervisor to kill every process of the
 * sandbox, prove its cgroup empty and remove it; waits until the
 * supervisor has exited. A sandbox whose supervisor died is cleaned up
 * from here. */
#include <errno.h>
#include <stdlib.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "checkpoint/ckpt_client.h"
#include "sandbox/cgroup.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"
#include "state/state.h"

json_t *sg_cli_destroy(const char *id, const char *via, bool verbose, sg_err *err)
{
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, err) < 0)
        return NULL;
    sg_sandbox_meta_clear(&m);
    /* A supervisor that died while the sandbox's init lives is replaced
     * first: the sandbox is destroyed by its own supervisor, which proves
     * it empty and delivers its capture (with the "destroyed" event). */
    sg_err terr = {0};
    bool dead = sg_revive_takeover(id, "destroy", &terr) < 0;
    pid_t sup = 0;
    if (!dead && sg_sandbox_meta_load(id, &m, NULL) == 0) {
        sup = m.supervisor_pid;
        sg_sandbox_meta_clear(&m);
    }

    /* The supervisor may be inside a long checkpoint: its worker is killed
     * first, so this request never waits for it (checkpoint/ckpt_client.h). */
    sg_err kerr = {0};
    if (sg_ckpt_client_kill_sandbox_worker(id, &kerr) < 0)
        sg_cli_sayf("destroy", "the checkpoint worker: %s", kerr.msg);
    sg_err rerr = {0};
    json_t *res = dead ? NULL : sg_cli_request(id, &(sg_ctl_req){.op = SG_OP_DESTROY, .via = (char *)via}, &rerr);
    if (!res) {
        /* The sandbox's init is dead too (no supervisor can take it over),
         * or its supervisor could not finish (its init or cgroup gone):
         * destroy stays idempotent and cleans up whatever is left from
         * here, saying what it found. */
        if (!dead)
            sg_cli_sayf("destroy",
                        "the supervisor could not destroy %s (%s): cleaning up "
                        "from here",
                        id, rerr.msg);
        else
            sg_cli_sayf("destroy",
                        "the supervisor of %s is not running and none can take "
                        "it over (%s): cleaning up from here",
                        id, terr.msg);
        if (sg_cli_cleanup_dead(id, verbose, err) < 0)
            return NULL;
        return sg_ctl_encode_destroy_reply(&(sg_ctl_destroy_reply){
            .destroyed = (char *)id, .cgroup_empty = true, .cgroup_removed = true, .kill_ms = -1,
            .events_undelivered = -1, .supervisor_was_dead = true});
    }
    /* The supervisor lived in its own cgroup, beside the sandbox's: it is
     * removed once the supervisor has exited (a leftover goes with gc). */
    sg_err serr = {0};
    if (sup > 0 && sg_state_wait_exit(sup, 10000) && sg_cgroup_supervisor_remove(id, &serr) < 0)
        sg_cli_sayf("destroy", "%s", serr.msg);
    sg_ctl_destroy_reply proof;
    if (sg_ctl_decode_destroy_reply(res, &proof, &rerr) < 0) {
        json_decref(res);
        return sg_err_set(err, EPROTO, "%s", rerr.msg), NULL;
    }
    long long left = proof.events_undelivered;
    sg_ctl_destroy_reply_free(&proof);
    if (left > 0)
        sg_cli_sayf("destroy",
                    "%lld captured event%s of %s could not be delivered to the "
                    "ingest: kept in the state directory's undelivered/%s; deliver them with "
                    "'sandglass flush %s'",
                    left, left == 1 ? "" : "s", id, id, id);
    return res;
}

static void destroy_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass destroy ID... [--json] [--yes]\n"
        "       sandglass destroy --learner L | --task T | --all [--json] [--yes]\n"
        "\n"
        "Kills every process of the sandbox, proves its cgroup empty, removes its\n"
        "cgroups, mounts, state and (when create made it) its workspace (a disk of\n"
        "its own is released in the background after the answer). Whatever\n"
        "is left of a broken sandbox (dead supervisor, gone cgroup) is removed too.\n"
        "A captured sandbox's events the ingest has not acknowledged are kept for\n"
        "'sandglass flush'. ID may be a unique prefix (4 characters at least).\n"
        "One full id is destroyed at once; several, a prefix or a filter ask first\n"
        "on a terminal, and need --yes otherwise.\n"
        "\n"
        "  --learner L, --task T  every sandbox of that learner / task (both: of both)\n"
        "  --all      every sandbox of this state directory\n"
        "  --yes      do not ask\n"
        "  --json     print the proof as one JSON object per sandbox, one a line\n"
        "             (errors as JSON on stderr)\n"
        "  --via TEXT whom the destroy is for, recorded in its actor (as abort's)\n"
        "\n"
        "One sandbox of another host (not in this state directory) is destroyed\n"
        "through that host's serve, found in the ingest's store:\n"
        "  --ingest URL, --ingest-ca FILE, --token T, --secret FILE  as abort's\n");
}

typedef struct {
    bool json, yes, all;
    const char *learner, *task;
    const char *ingest; /* another host's sandbox: the ingest to find it with */
    const char *via;    /* --via: whom the destroy acts for (serve's, for another host's operator) */
    char **args; /* the ids or prefixes typed, argv's */
    size_t nargs;
} destroy_opts;

static int destroy_parse(int argc, char **argv, destroy_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            o->json = true;
            sg_cli_json_errors(true);
        } else if (strcmp(a, "--yes") == 0 || strcmp(a, "-y") == 0) {
            o->yes = true;
        } else if (strcmp(a, "--all") == 0) {
            o->all = true;
        } else if (strcmp(a, "--learner") == 0 || strcmp(a, "--task") == 0) {
            if (i + 1 >= argc)
                return sg_cli_usage("destroy", "%s needs a value", a);
            *(a[2] == 'l' ? &o->learner : &o->task) = argv[++i];
        } else if (strcmp(a, "--ingest") == 0 || strcmp(a, "--ingest-ca") == 0 || strcmp(a, "--token") == 0 ||
                   strcmp(a, "--secret") == 0) { /* the other host's path's (sandglassd) */
            if (i + 1 >= argc)
                return sg_cli_usage("destroy", "%s needs a value", a);
            if (strcmp(a, "--ingest") == 0)
                o->ingest = argv[i + 1];
            i++;
        } else if (strcmp(a, "--via") == 0) {
            if (i + 1 >= argc)
                return sg_cli_usage("destroy", "%s needs a value", a);
            o->via = argv[++i];
            if (!sg_cli_via_ok(o->via))
                return sg_cli_usage("destroy", SG_CLI_VIA_IS);
        } else if (strcmp(a, "--help") == 0) {
            destroy_usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            return sg_cli_usage("destroy", "unknown option '%s'", a);
        } else {
            argv[o->nargs++] = argv[i]; /* argv[0] is never read again */
        }
    }
    o->args = argv;
    bool filter = o->all || o->learner || o->task;
    if (!filter && o->nargs == 0)
        return sg_cli_usage("destroy", "missing sandbox id (or --learner, --task, --all)");
    if (filter && o->nargs > 0)
        return sg_cli_usage("destroy", "give ids or a filter (--learner, --task, --all), not both");
    if (o->all && (o->learner || o->task))
        return sg_cli_usage("destroy", "--all takes no --learner or --task");
    return 1;
}

/* The ids a filter names, in the order of the state directory. */
static char **destroy_select(const destroy_opts *o, size_t *n, sg_err *err)
{
    sg_autostrv char **ids = sg_state_list(err);
    if (!ids)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; ids[i]; i++) {
        char *id = ids[i];
        ids[i] = NULL; /* k <= i: a kept id moves down, never onto one unread */
        sg_sandbox_meta m;
        bool keep = o->all;
        if (!keep && sg_sandbox_meta_load(id, &m, NULL) == 0) {
            keep = (!o->learner || (m.learner && strcmp(m.learner, o->learner) == 0)) &&
                   (!o->task || (m.task && strcmp(m.task, o->task) == 0));
            sg_sandbox_meta_clear(&m);
        }
        if (keep)
            ids[k++] = id;
        else
            free(id);
    }
    ids[k] = NULL;
    *n = k;
    return sg_steal_ptr(&ids);
}

/* Several sandboxes, a filter or a prefix: a person says yes on a
 * terminal; a script says --yes. Returns whether to go on. */
static bool destroy_confirm(const destroy_opts *o, char **ids, size_t n)
{
    if (o->yes)
        return true;
    if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO)) {
        sg_cli_fail("destroy", n == 1 ? "a prefix or a filter names the sandbox: give its full id, or --yes"
                                      : "several sandboxes: say --yes (no terminal to ask on)");
        return false;
    }
    for (size_t i = 0; i < n && i < 20; i++)
        sg_print_vis(2, "  ", "%s", ids[i]);
    if (n > 20)
        sg_print_vis(2, "  ", "... and %zu more", n - 20);
    char q[64];
    snprintf(q, sizeof q, "destroy %zu sandbox%s?", n, n == 1 ? "" : "es");
    if (sg_cli_ask_yes(stderr, q))
        return true;
    sg_print_vis(2, "", "nothing destroyed");
    return false;
}

static int destroy_one(const destroy_opts *o, const char *id)
{
    sg_err err = {0};
    sg_autojson json_t *res = sg_cli_destroy(id, o->via, !o->json, &err);
    if (!res) {
        /* each target's result on its own line, named */
        if (strstr(err.msg, id))
            sg_cli_fail("destroy", err.msg);
        else
            sg_cli_failf("destroy", "%s: %s", id, err.msg);
        return 1;
    }
    if (o->json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        printf("destroyed %s\n", id);
    }
    fflush(stdout);
    return 0;
}

/* argv as sg_cli_handoff takes it, copied before destroy_parse reuses argv. */
static char **handoff_argv(int argc, char **argv)
{
    char **copy = calloc((size_t)argc + 2, sizeof *copy);
    if (copy)
        memcpy(copy + 1, argv, (size_t)argc * sizeof *argv);
    return copy;
}

int sg_cmd_destroy(int argc, char **argv)
{
    destroy_opts o = {0};
    sg_autofree char **orig = handoff_argv(argc, argv);
    if (!orig)
        return sg_cli_fail("destroy", "out of memory");
    int r = destroy_parse(argc, argv, &o);
    if (r != 1)
        return r;
    sg_err err = {0};
    if (!sg_state_dir(&err))
        return sg_cli_fail("destroy", err.msg);
    size_t n = 0;
    bool ask = o.nargs > 1 || o.all || o.learner || o.task;
    sg_autostrv char **ids = NULL;
    if (ask && o.nargs == 0) {
        if (!(ids = destroy_select(&o, &n, &err)))
            return sg_cli_fail("destroy", err.msg);
        if (n == 0)
            return sg_cli_fail("destroy", "no sandbox matches");
    } else {
        /* Every id is resolved before anything is destroyed: a typo in the
         * third one destroys none. */
        ids = calloc(o.nargs + 1, sizeof *ids);
        if (!ids)
            return sg_cli_fail("destroy", "out of memory");
        for (; n < o.nargs; n++) {
            char id[SG_ID_LEN + 1];
            /* one id that is not here: another host's, through its serve (sandglassd speaks HTTP) */
            if (sg_state_resolve_id(o.args[n], id, &err) < 0 && err.code == ENOENT && o.nargs == 1 && !o.via &&
                (o.ingest || sg_config_ingest_given())) /* --via: relayed here already, never again */
                return sg_cli_handoff("destroy", orig + 1);
            if (err.code || !(ids[n] = strdup(id)))
                return sg_cli_fail("destroy", err.msg[0] ? err.msg : "out of memory");
            for (size_t j = 0; j < n; j++)
                if (strcmp(ids[j], id) == 0)
                    return sg_cli_usage("destroy", "%s is named twice (%s)", id, o.args[n]);
            ask = ask || strcmp(o.args[n], id) != 0;
        }
    }
    if (ask && !destroy_confirm(&o, ids, n))
        return 1;
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed |= destroy_one(&o, ids[i]);
    return failed;
}

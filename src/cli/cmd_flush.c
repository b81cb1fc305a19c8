/* sandglass flush [--ingest URL] [--timeout S] [ID...]
 *
 * Delivers the spools a destroy could not deliver (the ingest was down):
 * sup_shutdown keeps them as <state>/undelivered/<id>/{meta.json,spool/}.
 * For each (or each named one): open the spool (recovering it like a
 * supervisor would), mint a token from the secret its meta.json names, run
 * an uplink until the ingest has acknowledged everything, then remove it.
 * Exit status 0 only when nothing stays undelivered. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/report.h"
#include "delivery/spool.h"
#include "delivery/uplink.h"
#include "state/state.h"
#include "wire/event.h"
#include "wire/token.h"

#define FLUSH_TIMEOUT_DEFAULT_S 30.0
#define FLUSH_META_MAX (64u * 1024)

static const char usage[] =
    "usage: sandglass flush [--ingest ws://HOST:PORT] [--ingest-ca FILE] [--secret FILE]\n"
    "                       [--timeout S] [ID...]\n"
    "  delivers the capture spools of destroyed sandboxes that the ingest did not\n"
    "  acknowledge (kept under <state>/undelivered/), then removes them\n"
    "  --ingest   deliver there instead of the ingest the sandbox was created with\n"
    "  --ingest-ca  verify a wss:// ingest by this CA file (default: the sandbox's,\n"
    "             unless --ingest; else the config's; else the system's trust store)\n"
    "  --secret   sign the tokens with this key instead of the one the sandbox used\n"
    "  --timeout  give up on one spool after this many seconds (default 30)\n";

/* Why a spool is not getting through, for the one line that says so. */
typedef struct flush_watch {
    sg_uplink *u;
    char why[300];
} flush_watch;

static void on_uplink_event(void *ud, const sg_uplink_event *ev)
{
    flush_watch *w = ud;
    if (ev->type == SG_UPLINK_REFUSED && (ev->code == 401 || ev->code == 403)) {
        /* A rejected token stays rejected: retrying cannot help. */
        snprintf(w->why, sizeof w->why, "token rejected (%d): %s", ev->code, ev->reason);
        sg_uplink_drain_stop(w->u);
    } else if (ev->type == SG_UPLINK_REFUSED || ev->type == SG_UPLINK_ERROR ||
               ev->type == SG_UPLINK_DISCONNECTED) {
        snprintf(w->why, sizeof w->why, "%s", ev->reason);
    }
    /* a frame the ingest refused by its seq is said even when the rest
     * gets through (another holder of the token stored that seq) */
    if (ev->type == SG_UPLINK_ERROR && ev->code == SG_CLOSE_POLICY)
        sg_cli_sayf("flush", "%s", ev->reason);
}

/* What the command line overrides of each sandbox's record (NULL: the
 * record's), and the bound of one spool. */
typedef struct flush_opts {
    const char *ingest, *ingest_ca, *secret;
    double timeout_s;
} flush_opts;

/* The CA file of a spool's uplink: --ingest-ca; else the record's, unless
 * --ingest points elsewhere; else the config's; else none (the system's). */
static const char *flush_ca(const flush_opts *o, json_t *meta)
{
    const char *mine = json_string_value(json_object_get(meta, "ingest_ca"));
    if (o->ingest_ca)
        return o->ingest_ca;
    if (!o->ingest && mine)
        return mine;
    return sg_config_get(SG_CONF_INGEST_CA, NULL);
}

/* Delivers one undelivered spool. Returns 0 when all of it is acknowledged
 * (and removed), -1 otherwise; *delivered counts the events sent. */
static int flush_one(const char *udir, const char *id, const flush_opts *o, uint64_t *delivered, sg_err *err)
{
    const char *ingest_override = o->ingest, *secret_override = o->secret;
    double timeout_s = o->timeout_s;
    *delivered = 0;
    sg_autofree char *dir = sg_strdup_printf("%s/%s", udir, id);
    struct stat st;
    if (stat(dir, &st) < 0)
        return sg_err_set(err, ENOENT, "no undelivered spool of a sandbox '%s' (see 'sandglass flush' with "
                          "no id for all of them)", id);
    sg_autofree char *meta_path = sg_strdup_printf("%s/meta.json", dir);
    sg_autofree char *spool_dir = sg_strdup_printf("%s/spool", dir);
    size_t len = 0;
    sg_autofree char *text = sg_read_file(meta_path, FLUSH_META_MAX, &len, err);
    if (!text)
        return -1;
    sg_autojson json_t *meta = sg_json_parse(text, len, err);
    if (!meta) {
        sg_err_prefix(err, "%s", meta_path);
        return -1;
    }
    const char *learner = json_string_value(json_object_get(meta, "learner"));
    const char *task = json_string_value(json_object_get(meta, "task"));
    const char *url = ingest_override ? ingest_override
                                      : json_string_value(json_object_get(meta, "ingest"));
    const char *secret_file = secret_override ? secret_override
                                              : json_string_value(json_object_get(meta, "secret_file"));
    if (!learner || !task || !url || !secret_file)
        return sg_err_set(err, EINVAL, "%s lacks learner, task, ingest or secret_file", meta_path);

    uint8_t secret[SG_TOKEN_SECRET_LEN];
    if (sg_token_secret_load(secret_file, secret, err) < 0)
        return -1;
    sg_autofree char *token = sg_token_make(secret, learner, task, id, SG_TOKEN_TTL_DEFAULT, err);
    memset(secret, 0, sizeof secret);
    if (!token)
        return -1;

    sg_spool_report rep;
    sg_spool *sp = sg_spool_open(spool_dir, &rep, err);
    if (!sp) {
        sg_err_prefix(err, "cannot open the spool %s", spool_dir);
        return -1;
    }
    if (rep.text[0])
        sg_cli_sayf("flush", "%s: spool recovery: %s", id, rep.text);
    sg_spool_stats before;
    sg_spool_get_stats(sp, &before);

    uv_loop_t loop;
    uv_loop_init(&loop);
    int r = 0;
    flush_watch w = {0};
    sg_uplink *u = sg_uplink_new(&loop, url, token, sp, flush_ca(o, meta), err);
    if (!u) {
        sg_err_prefix(err, "cannot start an uplink to %s", url);
        r = -1;
    } else {
        w.u = u;
        sg_uplink_set_event_cb(u, on_uplink_event, &w);
        r = sg_uplink_drain(u, (uint64_t)(timeout_s * 1000.0), err);
        if (r < 0 && w.why[0])
            sg_err_set(err, err->code, "%" PRIu64 " events not delivered to %s: %s", sg_spool_pending(sp), url,
                       w.why);
        sg_uplink_free(u);
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    if (uv_loop_close(&loop) != 0)
        sg_cli_sayf("flush", "warning: event loop not fully closed");
    sg_spool_stats after;
    sg_spool_get_stats(sp, &after);
    sg_spool_close(sp);
    *delivered = after.acked_seq > before.acked_seq ? (uint64_t)(after.acked_seq - before.acked_seq) : 0;
    if (r < 0)
        return -1;
    if (sg_rm_rf(dir, err) < 0) {
        sg_err_prefix(err, "delivered, but cannot remove %s", dir);
        return -1;
    }
    return 0;
}

int sg_cmd_flush(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"timeout", required_argument, NULL, 't'},
        {"secret", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    flush_opts o = {.timeout_s = FLUSH_TIMEOUT_DEFAULT_S};
    sg_err err = {0};
    int c;
    optind = 1;
    opterr = 0; /* our one-line message, not getopt's */
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': o.ingest = optarg; break;
        case 'C': o.ingest_ca = optarg; break;
        case 's': o.secret = optarg; break;
        case 't':
            if (sg_parse_duration(optarg, 24 * 3600.0, &o.timeout_s, &err) < 0) {
                return sg_cli_usage("flush", "--timeout: %s", err.msg);
            }
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("flush", argv[optind - 1]);
        }
    }
    /* What goes wrong is said in one line per spool: libwebsockets' own
     * log lines only with SG_UPLINK_DEBUG. */
    lws_set_log_level(getenv("SG_UPLINK_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE : 0, NULL);
    if (!sg_state_dir(&err)) {
        return sg_cli_failf("flush", "state directory: %s", err.msg);
    }
    sg_autofree char *udir = sg_state_path("undelivered");
    /* the undelivered spools: all of them, or those the ids given name
     * (each the id or a unique prefix of it: the one rule) */
    sg_autostrv char **found = NULL;
    size_t nfound = 0, cap = 0;
    DIR *d = opendir(udir);
    if (!d && errno != ENOENT)
        return sg_cli_failf("flush", "cannot read %s: %s", udir, strerror(errno));
    for (struct dirent *de; d && (de = readdir(d));) {
        if (!sg_valid_name(de->d_name))
            continue;
        if (sg_strv_push(&found, &nfound, &cap, de->d_name) < 0)
            break;
    }
    if (d)
        closedir(d);
    char **ids = found;
    size_t nids = nfound;
    sg_autostrv char **named = NULL;
    size_t ok = 0, failed = 0;
    if (optind < argc) {
        nids = 0;
        named = calloc((size_t)(argc - optind) + 1, sizeof *named);
        if (!named)
            return sg_cli_fail("flush", "out of memory");
        for (int i = optind; i < argc; i++) {
            char id[SG_NAME_MAX + 1];
            sg_err e = {0};
            if (sg_id_resolve(argv[i], (const char *const *)found, nfound,
                              " with an undelivered spool (see 'sandglass flush' with no id for all of them)", id,
                              sizeof id, &e) < 0) {
                sg_cli_sayf("flush", "%s", e.msg);
                failed++;
                continue;
            }
            named[nids++] = sg_xstrdup(id);
        }
        ids = named;
    }
    uint64_t events = 0;
    for (size_t i = 0; i < nids; i++) {
        if (!ids[i] || !sg_valid_name(ids[i])) {
            sg_cli_sayf("flush", "invalid sandbox id '%s'", ids[i] ? ids[i] : "");
            failed++;
            continue;
        }
        uint64_t n = 0;
        sg_err e = {0};
        if (flush_one(udir, ids[i], &o, &n, &e) < 0) {
            if (strncmp(e.msg, "no undelivered spool", 20) == 0)
                sg_cli_sayf("flush", "%s", e.msg);
            else
                sg_cli_sayf("flush", "%s: %s (kept under %s/%s)", ids[i], e.msg, udir, ids[i]);
            failed++;
        } else {
            printf("%s: %" PRIu64 " events delivered\n", ids[i], n);
            ok++;
        }
        events += n;
    }
    rmdir(udir); /* only when empty */
    printf("flushed %zu spool(s), %" PRIu64 " events; %zu left undelivered\n", ok, events, failed);
    return failed ? 1 : 0;
}

/* sandglass serve [--listen HOST:PORT] [--secret FILE] [--web DIR]
 *                 [--max-terminals N] [--max-unauth N] [--max-unauth-per-addr N]
 *                 [--max-conns-per-addr N] [--log-level LEVEL]
 *                 [--ingest URL [--ingest-ca FILE] [--revoked-poll SECONDS]]
 *                 [--tls-cert FILE --tls-key FILE | --insecure-plaintext]: the browser's terminal into the
 * sandboxes of this host (serve/terminal.h). */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/daemon_signals.h"
#include "cli/config.h"
#include "cli/listen_tls.h"
#include "cli/report.h"
#include "cli/revoked_poll.h"
#include "ingest/ingest.h"
#include "serve/terminal.h"
#include "base/webdir.h"
#include "state/state.h"

static const char usage[] =
    "usage: sandglass serve [--listen HOST:PORT] [--secret FILE] [--web DIR]\n"
    "                       [--max-terminals N] [--max-unauth N] [--max-unauth-per-addr N]\n"
    "                       [--max-conns-per-addr N] [--log-level LEVEL]\n"
    "                       [--ingest URL [--ingest-ca FILE] [--revoked-poll SECONDS]]\n"
    "                       [--tls-cert FILE --tls-key FILE | --insecure-plaintext]\n"
    "\n"
    "Serves the learner's terminal in a browser for the sandboxes of this host:\n"
    "open http://HOST:PORT/#token=TOKEN with a terminal token ('sandglass token\n"
    "--terminal --sandbox ID'); each page is one 'sandglass shell' in that sandbox,\n"
    "captured command by command like any shell.\n"
    "\n"
    "  --listen  address to listen on, exactly (default 127.0.0.1:7434; port 0 = any\n"
    "            free port, printed on the first line); without TLS, a loopback\n"
    "            address only unless --insecure-plaintext\n"
    "  --secret  the tokens' secret (default <state>/ingest/secret)\n"
    "  --web     the page's directory, as 'meson install' puts it (default:\n"
    "            $SANDGLASS_WEB_DIR, else ../share/sandglass/web beside sandglassd,\n"
    "            else a build tree's web/ beside it, else the installed datadir's)\n"
    "  --max-terminals        terminals open at once (default 64; 4 per sandbox)\n"
    "  --max-unauth           connections still to send their token (default 256)\n"
    "  --max-unauth-per-addr  of those, from one address (default 8)\n"
    "  --max-conns-per-addr   WebSockets from one address (default 32)\n"
    "  --ingest URL           the ingest whose store's revoked tokens this serve refuses\n"
    "                         (GET /v1/revoked; default: the config's ingest, else\n"
    "                         $SANDGLASS_INGEST; none given: revocations are not checked)\n"
    "  --ingest-ca FILE       the CA file an https ingest is verified by\n"
    "  --revoked-poll SECONDS asks for the revoked tokens this often (default 15; 1..3600);\n"
    "                         open terminals and watches of a revoked token are closed\n"
    SG_CLI_TLS_USAGE
    "  --log-level LEVEL      error, warn, info or debug: the lowest level logged on\n"
    "                         stderr (default: $SANDGLASS_LOG_LEVEL, the config's\n"
    "                         log-level, else info)\n"
    "\n"
    "SIGHUP reads the secret again: tokens of a replaced secret are refused from\n"
    "then on and the connections they opened are closed; a file that cannot be read\n"
    "keeps the old secret (logged); and asks the ingest for the revoked tokens at once.\n"
    "SIGINT, SIGTERM: close every terminal and stop.\n";

/* --max-...: a number in 1..100000 into *out; else the usage error's status. */
static int limit_opt(const char *name, const char *arg, unsigned *out)
{
    uint64_t v = 0;
    sg_err err;
    if (sg_parse_uint(arg, 100000, &v, &err) < 0 || v == 0)
        return sg_cli_usage("serve", "--%s: a number in 1..100000", name);
    *out = (unsigned)v;
    return 0;
}

typedef struct run_ctx {
    sg_serve *srv;
    sg_cli_signals sigs;
    const sg_cli_target *ingest; /* NULL: revocations not checked */
    const char *ingest_url;
    unsigned poll_s;
    sg_revoked_poll revoked;
} run_ctx;

static void on_signal(void *ud, int signum)
{
    run_ctx *rc = ud;
    sg_log(SG_LOG_INFO, "%s, closing every terminal", strsignal(signum));
    sg_revoked_poll_stop(&rc->revoked);
    sg_serve_stop(rc->srv);
}

static void on_hup(void *ud)
{
    run_ctx *rc = ud;
    sg_err err;
    sg_log(SG_LOG_INFO, "SIGHUP: reading the secret again");
    (void)sg_serve_reload(rc->srv, &err); /* logged; the old secret kept on an error */
    sg_revoked_poll_now(&rc->revoked);
}

/* Starts serve on a loop of its own and runs it until a signal. */
static int run(const sg_serve_opts *opts, const sg_cli_tls *tls, run_ctx *rcp)
{
    sg_err err;
    uv_loop_t loop;
    uv_loop_init(&loop);
    run_ctx rc = *rcp;
    rc.sigs = (sg_cli_signals){.stop = on_signal, .hup = on_hup, .ud = &rc};
    sg_cli_signals_hold(&rc.sigs);
    rc.srv = sg_serve_start(&loop, opts, &err);
    if (!rc.srv) {
        uv_loop_close(&loop);
        return sg_cli_failf("serve", "%s", err.msg);
    }
    bool v6 = strchr(opts->host, ':') != NULL;
    printf("serving terminals on %s://%s%s%s:%d/\n", sg_cli_tls_scheme(tls, false), v6 ? "[" : "", opts->host,
           v6 ? "]" : "", sg_serve_port(rc.srv));
    fflush(stdout);
    sg_cli_signals_start(&loop, &rc.sigs);
    if (rc.ingest)
        sg_revoked_poll_start(&rc.revoked, &loop, rc.srv, rc.ingest, rc.ingest_url, opts->secret_path, rc.poll_s);
    else
        sg_log(SG_LOG_INFO, "no --ingest: revoked tokens are not checked (terminal and watch tokens hold until "
               "they expire or the secret changes)");
    uv_run(&loop, UV_RUN_DEFAULT);
    sg_serve_free(rc.srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    sg_log(SG_LOG_INFO, "stopped");
    return 0;
}

int sg_cmd_serve(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"secret", required_argument, NULL, 'k'},
        {"web", required_argument, NULL, 'w'},
        {"max-terminals", required_argument, NULL, 'T'},
        {"max-unauth", required_argument, NULL, 'U'},
        {"max-unauth-per-addr", required_argument, NULL, 'u'},
        {"max-conns-per-addr", required_argument, NULL, 'a'},
        {"log-level", required_argument, NULL, 'L'},
        {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"revoked-poll", required_argument, NULL, 'P'},
        SG_CLI_TLS_LONGOPTS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = "127.0.0.1:7434", *secret = NULL, *web = NULL;
    char host[256];
    sg_serve_opts opts = {.host = host};
    const char *log_level = NULL;
    sg_log_level level = SG_LOG_INFO;
    sg_cli_tls tls = {0};
    const char *ingest = NULL, *ingest_ca = NULL;
    unsigned poll_s = SG_REVOKED_POLL_DEFAULT_S;
    sg_err err;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (sg_cli_tls_opt(&tls, c, optarg))
            continue;
        switch (c) {
        case 'l': listen = optarg; break;
        case 'k': secret = optarg; break;
        case 'w': web = optarg; break;
        case 'T':
        case 'U':
        case 'u':
        case 'a': {
            unsigned *out = c == 'T' ? &opts.max_terminals : c == 'U' ? &opts.max_unauth
                            : c == 'u' ? &opts.max_unauth_per_addr : &opts.max_conns_per_addr;
            int r = limit_opt(c == 'T' ? "max-terminals" : c == 'U' ? "max-unauth"
                              : c == 'u' ? "max-unauth-per-addr" : "max-conns-per-addr", optarg, out);
            if (r)
                return r;
            break;
        }
        case 'L':
            if (sg_log_level_parse(optarg, &level) < 0)
                return sg_cli_usage("serve", "--log-level '%.64s': not a level (error, warn, info or debug)", optarg);
            log_level = optarg;
            break;
        case 'i': ingest = optarg; break;
        case 'C': ingest_ca = optarg; break;
        case 'P': {
            uint64_t v = 0;
            if (sg_parse_uint(optarg, SG_REVOKED_POLL_MAX_S, &v, &err) < 0 || v == 0)
                return sg_cli_usage("serve", "--revoked-poll: seconds, 1..%d (not '%.32s')", SG_REVOKED_POLL_MAX_S,
                                    optarg);
            poll_s = (unsigned)v;
            break;
        }
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("serve", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("serve", "unexpected argument '%.64s' (serve takes only options)", argv[optind]);
    if (sg_ingest_parse_listen(listen, host, sizeof host, &opts.port, &err) < 0)
        return sg_cli_usage("serve", "%s", err.msg);
    int trc = sg_cli_tls_check("serve", &tls, (const char *const[]){"--listen"}, (const char *const[]){host}, 1);
    if (trc)
        return trc;
    opts.tls_cert = tls.cert;
    opts.tls_key = tls.key;
    sg_autofree char *secret_default = NULL;
    if (!secret) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("serve", "state directory: %s", err.msg);
        secret = secret_default = sg_config_secret();
    }
    opts.secret_path = secret;
    char webdir[PATH_MAX];
    if (web)
        snprintf(webdir, sizeof webdir, "%s", web);
    else
        sg_web_dir(webdir, sizeof webdir);
    opts.web_dir = webdir;
    char cli[PATH_MAX];
    if (sg_cli_find_cli(cli, sizeof cli) == 0)
        opts.cli = cli;

    if (!ingest)
        ingest = sg_config_ingest_given();
    sg_cli_target target;
    if (ingest && sg_cli_target_parse(ingest, ingest_ca, &target, &err) < 0)
        return sg_cli_usage("serve", "--ingest: %s", err.msg);
    if (!ingest && ingest_ca)
        return sg_cli_usage("serve", "--ingest-ca needs an ingest (--ingest, the config's or $SANDGLASS_INGEST)");
    run_ctx rc = {.ingest = ingest ? &target : NULL, .ingest_url = ingest, .poll_s = poll_s};

    signal(SIGPIPE, SIG_IGN);
    sg_log_init("serve");
    if (log_level)
        sg_log_set_level(level);
    return run(&opts, &tls, &rc);
}

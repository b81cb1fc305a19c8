/* sandglass ingest [--listen HOST:PORT] [--store sqlite:PATH] [--secret FILE]
 *                  [--max-conns N] [--max-conns-per-addr N] [--max-stream-rate N]
 *                  [--retain-days N] [--serve URL]...
 *                  [--metrics-listen HOST:PORT] [--metrics-token FILE]
 *                  [--log-level LEVEL]
 *                  [--tls-cert FILE --tls-key FILE | --insecure-plaintext] */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/daemon_signals.h"
#include "cli/config.h"
#include "cli/listen_tls.h"
#include "cli/report.h"
#include "ingest/ingest.h"
#include "state/state.h"

static const char usage[] =
    "usage: sandglass ingest [--listen HOST:PORT] [--store sqlite:PATH] [--secret FILE]\n"
    "                        [--max-conns N] [--max-conns-per-addr N] [--max-stream-rate N]\n"
    "                        [--retain-days N] [--serve URL]...\n"
    "                        [--metrics-listen HOST:PORT] [--metrics-token FILE]\n"
    "                        [--log-level LEVEL]\n"
    "                        [--tls-cert FILE --tls-key FILE | --insecure-plaintext]\n"
    "  --listen  address to listen on, exactly: an IPv4 address or [IPv6] address\n"
    "            (default 127.0.0.1:7433; port 0 = any free port); without TLS, a\n"
    "            loopback address only unless --insecure-plaintext\n"
    "  --store   event store (default sqlite:<state>/ingest/events.db, created 0600)\n"
    "  --secret  HMAC secret file, created 0600 if missing (default <state>/ingest/secret)\n"
    "  --max-conns           connections in all (default 8192, less if RLIMIT_NOFILE is lower)\n"
    "  --max-conns-per-addr  connections from one client address (default 1024)\n"
    "  --max-stream-rate     events a second one stream may send (default 10000): a faster\n"
    "                        stream is read more slowly (its uplink keeps the rest)\n"
    "  --retain-days  remove the sessions whose last event is older than N days, at\n"
    "                 start and every hour (default: keep everything)\n"
    "  --serve URL    a sandbox host's `sandglass serve` (http://HOST:PORT), which the\n"
    "                 console's watch page connects to (and no other host); once per\n"
    "                 serve, up to 8, tried in order\n"
    "  --metrics-listen HOST:PORT  serve GET /metrics (Prometheus) on this address only,\n"
    "                 not on --listen's (port 0 = any free port)\n"
    "  --metrics-token FILE  a scrape must send this file's token (Authorization:\n"
    "                 Bearer); the file must not be readable by every user.\n"
    "                 With neither, /metrics answers loopback peers on --listen only\n"
    SG_CLI_TLS_USAGE
    "                 (both listeners, --listen's and --metrics-listen's, alike)\n"
    "  --log-level LEVEL  error, warn, info or debug: the lowest level logged on stderr\n"
    "                 (default: $SANDGLASS_LOG_LEVEL, the config's log-level, else info)\n"
    "SIGHUP reads the secret and --metrics-token's file again: tokens of a replaced\n"
    "secret are refused from then on and the streams they opened are closed; a file\n"
    "that cannot be read keeps the old one (logged). SIGINT, SIGTERM: commit and stop.\n";

typedef struct run_ctx {
    sg_ingest *ing;
    sg_cli_signals sigs;
    int status;
} run_ctx;

static void on_signal(void *ud, int signum)
{
    run_ctx *rc = ud;
    sg_log(SG_LOG_INFO, "%s, committing and stopping", strsignal(signum));
    sg_err err;
    if (sg_ingest_stop(rc->ing, &err) < 0) {
        sg_cli_sayf("ingest", "final commit failed: %s", err.msg);
        rc->status = 1;
    }
}

static void on_hup(void *ud)
{
    run_ctx *rc = ud;
    sg_err err;
    sg_log(SG_LOG_INFO, "SIGHUP: reading the secret and the metrics token again");
    (void)sg_ingest_reload(rc->ing, &err); /* each outcome logged; the old secret kept on an error */
}

/* What the command line asked for. */
typedef struct ingest_args {
    const char *listen, *store, *secret, *metrics_listen, *metrics_token, *log_level;
    sg_cli_tls tls;
    uint64_t max_conns, max_per_addr, stream_rate, retain_days;
    const char *serves[SG_INGEST_SERVES_MAX];
    unsigned nserves;
    sg_log_level level;
} ingest_args;

/* One option (getopt's c, its optarg) into a; 0, or the usage error's
 * status. */
static int parse_opt(ingest_args *a, int c, const char *arg, char **argv)
{
    sg_err err;
    switch (c) {
    case 'l': a->listen = arg; break;
    case 's': a->store = arg; break;
    case 'k': a->secret = arg; break;
    case 'm':
    case 'a': {
        uint64_t *v = c == 'm' ? &a->max_conns : &a->max_per_addr;
        if (sg_parse_uint(arg, 1000000, v, &err) < 0 || *v == 0)
            return sg_cli_usage("ingest", "--%s: a number in 1..1000000", c == 'm' ? "max-conns" : "max-conns-per-addr");
        break;
    }
    case 'r':
        if (sg_parse_uint(arg, 10000000, &a->stream_rate, &err) < 0 || a->stream_rate == 0)
            return sg_cli_usage("ingest", "--max-stream-rate: a number in 1..10000000");
        break;
    case 'R':
        if (sg_parse_uint(arg, 100000, &a->retain_days, &err) < 0 || a->retain_days == 0)
            return sg_cli_usage("ingest", "--retain-days: a number of days in 1..100000");
        break;
    case 'S': {
        char u[SG_INGEST_SERVE_URL_MAX + 1];
        if (a->nserves == SG_INGEST_SERVES_MAX)
            return sg_cli_usage("ingest", "--serve: at most %d serves", SG_INGEST_SERVES_MAX);
        if (sg_ingest_serve_url_check(arg, u, sizeof u, &err) < 0)
            return sg_cli_usage("ingest", "--serve '%.200s': %s", arg, err.msg);
        a->serves[a->nserves++] = arg;
        break;
    }
    case 'M': a->metrics_listen = arg; break;
    case 'T':
        if (!arg[0])
            return sg_cli_usage("ingest", "--metrics-token: a file name (the file holds the token)");
        a->metrics_token = arg;
        break;
    case 'L':
        if (sg_log_level_parse(arg, &a->level) < 0)
            return sg_cli_usage("ingest", "--log-level '%.64s': not a level (error, warn, info or debug)", arg);
        a->log_level = arg;
        break;
    default: return sg_cli_bad_option("ingest", argv[optind - 1]);
    }
    return 0;
}

/* The listeners, TLS and the store's and secret's defaults into opts
 * (host and mhost: 256 bytes each; the defaults' strings into *store_d,
 * *secret_d, the caller's to free); 0, or the command's status. */
static int resolve_opts(ingest_args *a, sg_ingest_opts *opts, char *host, char *mhost, char **store_d, char **secret_d)
{
    sg_err err;
    *opts = (sg_ingest_opts){.host = host, .metrics_token_path = a->metrics_token,
                             .max_conns = (unsigned)a->max_conns, .max_conns_per_addr = (unsigned)a->max_per_addr,
                             .stream_rate = (unsigned)a->stream_rate, .retain_days = (double)a->retain_days,
                             .serves = a->serves, .nserves = a->nserves};
    if (sg_ingest_parse_listen(a->listen, host, 256, &opts->port, &err) < 0)
        return sg_cli_usage("ingest", "%s", err.msg);
    if (a->metrics_listen) {
        if (sg_ingest_parse_listen(a->metrics_listen, mhost, 256, &opts->metrics_port, &err) < 0)
            return sg_cli_usage("ingest", "--metrics-listen: %s", err.msg);
        if (opts->port != 0 && opts->metrics_port == opts->port && strcmp(mhost, host) == 0)
            return sg_cli_usage("ingest", "--metrics-listen %s: the same address as --listen", a->metrics_listen);
        opts->metrics_host = mhost;
    }
    int trc = sg_cli_tls_check("ingest", &a->tls, (const char *const[]){"--listen", "--metrics-listen"},
                               (const char *const[]){host, opts->metrics_host}, 2);
    if (trc)
        return trc;
    opts->tls_cert = a->tls.cert;
    opts->tls_key = a->tls.key;
    if (!a->store || !a->secret) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("ingest", "state directory: %s", err.msg);
        if (!a->store) {
            sg_autofree char *db = sg_state_path("ingest/events.db");
            sg_autofree char *dir = sg_state_path("ingest");
            if (sg_mkdir_p(dir, 0700, &err) < 0)
                return sg_cli_failf("ingest", "%s", err.msg);
            a->store = *store_d = sg_strdup_printf("sqlite:%s", db);
        }
        if (!a->secret)
            a->secret = *secret_d = sg_config_secret();
    }
    opts->store_url = a->store;
    opts->secret_path = a->secret;
    return 0;
}

/* Starts the ingest on a loop of its own and runs it until a signal. */
static int run(const sg_ingest_opts *opts, const sg_cli_tls *tls)
{
    sg_err err;
    uv_loop_t loop;
    uv_loop_init(&loop);
    run_ctx rc = {0};
    rc.sigs = (sg_cli_signals){.stop = on_signal, .hup = on_hup, .ud = &rc};
    sg_cli_signals_hold(&rc.sigs);
    rc.ing = sg_ingest_start(&loop, opts, &err);
    if (!rc.ing) {
        sg_cli_sayf("ingest", "%s", err.msg);
        uv_loop_close(&loop);
        return 1;
    }
    bool v6 = strchr(opts->host, ':') != NULL;
    printf("listening on %s://%s%s%s:%d\n", sg_cli_tls_scheme(tls, true), v6 ? "[" : "", opts->host,
           v6 ? "]" : "", sg_ingest_port(rc.ing));
    if (opts->metrics_host) {
        bool mv6 = strchr(opts->metrics_host, ':') != NULL;
        printf("metrics on %s://%s%s%s:%d/metrics\n", sg_cli_tls_scheme(tls, false), mv6 ? "[" : "",
               opts->metrics_host, mv6 ? "]" : "", sg_ingest_metrics_port(rc.ing));
    }
    fflush(stdout);

    sg_cli_signals_start(&loop, &rc.sigs);

    uv_run(&loop, UV_RUN_DEFAULT);
    sg_ingest_free(rc.ing);
    uv_run(&loop, UV_RUN_DEFAULT); /* handles lws closed in its second destroy */
    if (uv_loop_close(&loop) != 0)
        sg_cli_sayf("ingest", "warning: event loop not fully closed");
    sg_log(rc.status ? SG_LOG_ERROR : SG_LOG_INFO, "stopped%s", rc.status ? " (the final commit failed)" : "");
    return rc.status;
}

int sg_cmd_ingest(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"store", required_argument, NULL, 's'},
        {"secret", required_argument, NULL, 'k'},
        {"max-conns", required_argument, NULL, 'm'},
        {"max-conns-per-addr", required_argument, NULL, 'a'},
        {"max-stream-rate", required_argument, NULL, 'r'},
        {"retain-days", required_argument, NULL, 'R'},
        {"serve", required_argument, NULL, 'S'},
        {"metrics-listen", required_argument, NULL, 'M'},
        {"metrics-token", required_argument, NULL, 'T'},
        {"log-level", required_argument, NULL, 'L'},
        SG_CLI_TLS_LONGOPTS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ingest_args a = {.listen = "127.0.0.1:7433", .level = SG_LOG_INFO};
    int c;
    optind = 1;
    opterr = 0; /* our one-line message, not getopt's */
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (sg_cli_tls_opt(&a.tls, c, optarg))
            continue;
        if (c == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        int rc = parse_opt(&a, c, optarg, argv);
        if (rc)
            return rc;
    }
    if (optind < argc)
        return sg_cli_usage("ingest", "unexpected argument '%.64s' (ingest takes only options)", argv[optind]);
    char host[256], mhost[256];
    sg_ingest_opts opts;
    sg_autofree char *store_default = NULL, *secret_default = NULL;
    int rc = resolve_opts(&a, &opts, host, mhost, &store_default, &secret_default);
    if (rc)
        return rc;

    signal(SIGPIPE, SIG_IGN);
    sg_log_init("ingest");
    if (a.log_level)
        sg_log_set_level(a.level);
    return run(&opts, &a.tls);
}

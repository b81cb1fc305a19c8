/* sandglass serve [--listen HOST:PORT] [--secret FILE] [--web DIR]: the
 * browser's terminal into the sandboxes of this host (serve/terminal.h). */
#include <getopt.h>
#include <libgen.h>
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
#include "cli/report.h"
#include "ingest/ingest.h"
#include "serve/terminal.h"
#include "state/state.h"

static const char usage[] =
    "usage: sandglass serve [--listen HOST:PORT] [--secret FILE] [--web DIR]\n"
    "\n"
    "Serves the learner's terminal in a browser for the sandboxes of this host:\n"
    "open http://HOST:PORT/#token=TOKEN with a terminal token ('sandglass token\n"
    "--terminal --sandbox ID'); each page is one 'sandglass shell' in that sandbox,\n"
    "captured command by command like any shell.\n"
    "\n"
    "  --listen  address to listen on, exactly (default 127.0.0.1:7434; port 0 = any\n"
    "            free port, printed on the first line)\n"
    "  --secret  the tokens' secret (default <state>/ingest/secret)\n"
    "  --web     the page's directory, with xterm.js installed by 'npm install'\n"
    "            (default: web/ of the source tree the binary was built in, else\n"
    "            ../share/sandglass/web beside it; $SANDGLASS_WEB_DIR overrides)\n";

typedef struct run_ctx {
    sg_serve *srv;
    uv_signal_t sigint, sigterm;
} run_ctx;

static void on_signal(uv_signal_t *h, int signum)
{
    run_ctx *rc = h->data;
    sg_cli_sayf("serve", "%s, closing every terminal", strsignal(signum));
    sg_serve_stop(rc->srv);
    uv_close((uv_handle_t *)&rc->sigint, NULL);
    uv_close((uv_handle_t *)&rc->sigterm, NULL);
}

/* The web directory: $SANDGLASS_WEB_DIR, else beside the binary (a build
 * directory inside the source tree, or an installed libexec). */
static void default_web_dir(char *buf, size_t size)
{
    const char *env = getenv("SANDGLASS_WEB_DIR");
    if (env && *env) {
        snprintf(buf, size, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    const char *dir = dirname(exe);
    const char *cands[] = {"/../web", "/../share/sandglass/web"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        snprintf(buf, size, "%s%s", dir, cands[i]);
        char page[PATH_MAX + 32];
        snprintf(page, sizeof page, "%s/terminal.html", buf);
        if (access(page, R_OK) == 0)
            return;
    }
    snprintf(buf, size, "%s/../web", dir);
}

int sg_cmd_serve(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"secret", required_argument, NULL, 'k'},
        {"web", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = "127.0.0.1:7434", *secret = NULL, *web = NULL;
    sg_err err;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'k': secret = optarg; break;
        case 'w': web = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("serve", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("serve", "unexpected argument '%.64s' (serve takes only options)", argv[optind]);
    char host[256];
    sg_serve_opts opts = {.host = host};
    if (sg_ingest_parse_listen(listen, host, sizeof host, &opts.port, &err) < 0)
        return sg_cli_usage("serve", "%s", err.msg);
    sg_autofree char *secret_default = NULL;
    if (!secret) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("serve", "state directory: %s", err.msg);
        secret = secret_default = sg_state_path("ingest/secret");
    }
    opts.secret_path = secret;
    char webdir[PATH_MAX];
    if (web)
        snprintf(webdir, sizeof webdir, "%s", web);
    else
        default_web_dir(webdir, sizeof webdir);
    opts.web_dir = webdir;

    signal(SIGPIPE, SIG_IGN);
    sg_log_init("serve");
    uv_loop_t loop;
    uv_loop_init(&loop);
    run_ctx rc = {0};
    rc.srv = sg_serve_start(&loop, &opts, &err);
    if (!rc.srv) {
        uv_loop_close(&loop);
        return sg_cli_failf("serve", "%s", err.msg);
    }
    bool v6 = strchr(host, ':') != NULL;
    printf("serving terminals on http://%s%s%s:%d/\n", v6 ? "[" : "", host, v6 ? "]" : "",
           sg_serve_port(rc.srv));
    fflush(stdout);
    uv_signal_init(&loop, &rc.sigint);
    uv_signal_init(&loop, &rc.sigterm);
    rc.sigint.data = rc.sigterm.data = &rc;
    uv_signal_start(&rc.sigint, on_signal, SIGINT);
    uv_signal_start(&rc.sigterm, on_signal, SIGTERM);
    uv_run(&loop, UV_RUN_DEFAULT);
    sg_serve_free(rc.srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 0;
}

/* listen_tls: ingest's and serve's TLS options (listen_tls.h). */
#include "cli/listen_tls.h"

#include <stddef.h>

#include "base/err.h"
#include "cli/report.h"
#include "ingest/tls.h"

int sg_cli_tls_opt(sg_cli_tls *t, int c, const char *arg)
{
    switch (c) {
    case SG_CLI_TLS_OPT_CERT: t->cert = arg; return 1;
    case SG_CLI_TLS_OPT_KEY: t->key = arg; return 1;
    case SG_CLI_TLS_OPT_INSECURE: t->insecure = true; return 1;
    default: return 0;
    }
}

int sg_cli_tls_check(const char *cmd, const sg_cli_tls *t, const char *const *flags, const char *const *hosts,
                     unsigned n)
{
    if ((t->cert && !t->cert[0]) || (t->key && !t->key[0]))
        return sg_cli_usage(cmd, "--%s: a file name", t->cert && !t->cert[0] ? "tls-cert" : "tls-key");
    if (t->cert && !t->key)
        return sg_cli_usage(cmd, "--tls-cert needs --tls-key (the certificate's private key)");
    if (t->key && !t->cert)
        return sg_cli_usage(cmd, "--tls-key needs --tls-cert (the certificate it goes with)");
    if (t->cert && t->insecure)
        return sg_cli_usage(cmd, "--insecure-plaintext and --tls-cert: choose one (with TLS nothing is plain)");
    for (unsigned i = 0; i < n; i++) {
        sg_err err;
        if (hosts[i] && sg_tls_listen_check(flags[i], hosts[i], t->cert != NULL, t->insecure, &err) < 0)
            return sg_cli_usage(cmd, "%s", err.msg);
        if (hosts[i] && !t->cert && !sg_tls_is_loopback(hosts[i]))
            sg_cli_sayf(cmd, "warning: %s %s without TLS (--insecure-plaintext): tokens and learners' data "
                        "cross the network in clear", flags[i], hosts[i]);
    }
    return 0;
}

const char *sg_cli_tls_scheme(const sg_cli_tls *t, bool ws)
{
    if (t->cert)
        return ws ? "wss" : "https";
    return ws ? "ws" : "http";
}

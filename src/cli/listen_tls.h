/* listen_tls: the TLS options of the two servers, `sandglass ingest` and
 * `sandglass serve` (ingest/tls.h has the rule): --tls-cert FILE,
 * --tls-key FILE (both or neither) and --insecure-plaintext, parsed and
 * checked the same way for both. */
#ifndef SG_CLI_LISTEN_TLS_H
#define SG_CLI_LISTEN_TLS_H

#include <getopt.h>
#include <stdbool.h>

/* getopt_long's values of the three options (above any character). */
#define SG_CLI_TLS_OPT_CERT 0x1001
#define SG_CLI_TLS_OPT_KEY 0x1002
#define SG_CLI_TLS_OPT_INSECURE 0x1003
#define SG_CLI_TLS_LONGOPTS                                                                                  \
    {"tls-cert", required_argument, NULL, SG_CLI_TLS_OPT_CERT},                                              \
        {"tls-key", required_argument, NULL, SG_CLI_TLS_OPT_KEY},                                            \
        {"insecure-plaintext", no_argument, NULL, SG_CLI_TLS_OPT_INSECURE}

/* The usage's lines of the three options. */
#define SG_CLI_TLS_USAGE                                                                                     \
    "  --tls-cert FILE  serve https:// and wss:// only, with this PEM certificate (its chain\n"             \
    "                 may follow it in the file); needs --tls-key\n"                                         \
    "  --tls-key FILE   the certificate's private key (PEM, unencrypted, not readable by\n"                  \
    "                 every user)\n"                                                                         \
    "  --insecure-plaintext  allow a listener without TLS on an address that is not\n"                       \
    "                 loopback (a TLS proxy in front); else refused\n"

typedef struct sg_cli_tls {
    const char *cert, *key;
    bool insecure;
} sg_cli_tls;

/* getopt's c: 1 when it was one of the three (taken into t), else 0. */
int sg_cli_tls_opt(sg_cli_tls *t, int c, const char *arg);

/* The options together, and the listen rule for each of n listeners
 * (flags[i] "--listen", hosts[i] its address): 0, or the usage error's
 * exit status (the message printed, naming cmd). */
int sg_cli_tls_check(const char *cmd, const sg_cli_tls *t, const char *const *flags, const char *const *hosts,
                     unsigned n);

/* "https" or "http", "wss" or "ws": what the listeners speak. */
const char *sg_cli_tls_scheme(const sg_cli_tls *t, bool ws);

#endif

/* ingest_check: what `sandglass create` checks of a captured sandbox's
 * ingest before anything is made, so that a capture that could never be
 * delivered does not start in silence: the URL and the key file's form,
 * then whether something listens there (a warning when not: the spool
 * keeps everything, by design) and whether the ingest takes the key's
 * tokens (a refusal when not). The last is asked of `sandglassd token
 * --check` (GET /v1/token): this binary has no HMAC (no libcrypto). */
#ifndef SG_CLI_INGEST_CHECK_H
#define SG_CLI_INGEST_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* A passed token check is trusted this long for the same ingest URL and
 * key file (same inode, size and mtime): the check costs ~7 ms (a
 * sandglassd start and an HTTP request) against ~1.5 ms for a create from
 * the pool. An ingest that changes its key within it shows in `ls`. */
#define SG_CLI_INGEST_CHECK_TTL_S 60

/* --ingest: ws://HOST:PORT[/PATH] or wss://...; fills host and port. 0, or
 * -1 with why (naming the flag). */
int sg_cli_ingest_url_check(const char *url, char *host, size_t hsize, int *port, char *why, size_t wsize);
/* --secret: a regular 0600 file holding 64 hex characters. 0, or -1 with
 * why. */
int sg_cli_ingest_secret_check(const char *path, char *why, size_t wsize);
/* --ingest-ca: a readable file holding a PEM certificate ("-----BEGIN
 * CERTIFICATE-----"; OpenSSL reads it for real in the token check and the
 * uplink), resolved to an absolute path into real (rsize bytes): the
 * uplink daemon, detached, reads it later from wherever it runs. 0, or -1
 * with why. */
int sg_cli_ingest_ca_check(const char *path, char *real, size_t rsize, char *why, size_t wsize);
/* --ingest URL,URL,...: ingest nodes of one store, each checked as
 * above; an empty element or more than SG_CLI_INGEST_NODES_MAX is refused,
 * naming the list. 0, or -1 with why. */
#define SG_CLI_INGEST_NODES_MAX 8 /* as SG_UPLINK_URLS_MAX */
int sg_cli_ingest_list_check(const char *list, char *why, size_t wsize);
/* Whether the ingest lists a and b (a read's http[s]:// or a stream's
 * ws[s]:// form) are the same nodes in the same order, hence one store:
 * each element's scheme (http as ws, https as wss) and host compared
 * without regard to case, a trailing '/' ignored. Anything else (another
 * spelling of the same host included) is not known to be the same. */
bool sg_cli_ingest_same_store(const char *a, const char *b);
/* Reachability (a warning line on stderr when not) and the token check
 * of each node of the list (a TLS node verified by the CAs of ca, an
 * absolute path, or NULL for the system's): 0, or -1 with why when a node
 * rejects the key's tokens or its TLS fails (an unknown CA, another host's
 * certificate, a plain port behind wss://) (the uplink may fail over to any node, so every node that
 * answers must take the key; a node that does not listen is a warning
 * only, as for one ingest: the spool keeps everything). secret is
 * --secret or NULL for <state>/ingest/secret. */
int sg_cli_ingest_check(const char *list, const char *ca, const char *learner, const char *task, const char *secret,
                        char *why, size_t wsize);

#endif

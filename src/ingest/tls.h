/* tls: the TLS side of the servers built on libwebsockets (the ingest, its
 * metrics listener, `sandglass serve`) and the one rule for a listener
 * without it.
 *
 * With a certificate and its key (PEM files, given together) a listener
 * speaks https and wss only: a plain HTTP request or ws:// handshake on its
 * port is dropped at the TLS handshake, never answered. Without them a
 * listener is plain, which is allowed on a loopback address (127.0.0.0/8,
 * [::1]) only, unless the operator says --insecure-plaintext (a TLS proxy
 * in front, a private network): tokens and learners' data would cross the
 * network in clear, and that must be a choice that is seen. The files are
 * checked before anything listens (sg_tls_server_check): lws 4.1 fails a
 * vhost whose certificate will not load on a foreign loop and then crashes
 * in its teardown, and an operator should read what is wrong with which
 * file, not "cannot listen". ALPN offers http/1.1 only: the servers'
 * handlers and WebSockets are HTTP/1.1's. */
#ifndef SG_INGEST_TLS_H
#define SG_INGEST_TLS_H

#include <libwebsockets.h>
#include <stdbool.h>

#include "base/err.h"

/* cert: a readable PEM file whose first block is an X.509 certificate
 * valid now (the chain's others may follow it); key: a readable PEM
 * private key, not encrypted, not readable by every user, matching the
 * certificate's public key. -1 with err naming the file (by its flag,
 * --tls-cert or --tls-key) and what is wrong. */
int sg_tls_server_check(const char *cert, const char *key, sg_err *err);

/* Whether host (a numeric address, as sg_ingest_parse_listen gives it) is
 * a loopback address: 127.0.0.0/8, ::1, or ::ffff:127.x.y.z. */
bool sg_tls_is_loopback(const char *host);

/* The rule above for one listener: flag ("--listen") names it in err. 0
 * when tls, or host is loopback, or insecure; else -1 with what to do. */
int sg_tls_listen_check(const char *flag, const char *host, bool tls, bool insecure, sg_err *err);

/* TLS on a server's info (after sg_http_server_info): cert and key (NULL:
 * plain, info untouched), OpenSSL's global init, ALPN http/1.1. */
void sg_tls_server_info(struct lws_context_creation_info *info, const char *cert, const char *key);

#endif

/* tls: the servers' certificates and the plain listener's rule (tls.h). */
#include "ingest/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>


/* An encrypted key is refused, never prompted for: a daemon has no one to
 * ask. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

/* t as OpenSSL prints it ("Dec  5 08:31:20 2026 GMT"). */
static void asn1_time_text(const ASN1_TIME *t, char *out, size_t size)
{
    BIO *b = BIO_new(BIO_s_mem());
    int n = b && ASN1_TIME_print(b, t) ? BIO_read(b, out, (int)size - 1) : 0;
    out[n > 0 ? n : 0] = '\0';
    BIO_free(b);
}

static FILE *open_pem(const char *flag, const char *path, sg_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        sg_err_sys(err, "%s %s: cannot read", flag, path);
    return f;
}

/* The certificate of cert (its first PEM block), valid now; NULL with err. */
static X509 *load_cert(const char *cert, sg_err *err)
{
    FILE *f = open_pem("--tls-cert", cert, err);
    if (!f)
        return NULL;
    X509 *x = PEM_read_X509(f, NULL, no_passphrase, NULL);
    fclose(f);
    ERR_clear_error();
    if (!x) {
        sg_err_set(err, EINVAL, "--tls-cert %s: not a PEM certificate (expected -----BEGIN CERTIFICATE-----)", cert);
        return NULL;
    }
    char when[64];
    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
        asn1_time_text(X509_get0_notAfter(x), when, sizeof when);
        sg_err_set(err, EINVAL, "--tls-cert %s: the certificate expired (%s)", cert, when);
    } else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
        asn1_time_text(X509_get0_notBefore(x), when, sizeof when);
        sg_err_set(err, EINVAL, "--tls-cert %s: the certificate is not valid before %s", cert, when);
    } else {
        return x;
    }
    X509_free(x);
    return NULL;
}

static EVP_PKEY *load_key(const char *key, sg_err *err)
{
    struct stat st;
    if (stat(key, &st) == 0 && (st.st_mode & S_IROTH)) {
        sg_err_set(err, EPERM, "--tls-key %s: every user may read the private key (chmod o-r; 0600 or 0640)", key);
        return NULL;
    }
    FILE *f = open_pem("--tls-key", key, err);
    if (!f)
        return NULL;
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
    fclose(f);
    ERR_clear_error();
    if (!k)
        sg_err_set(err, EINVAL, "--tls-key %s: not a PEM private key (or an encrypted one: the key must be "
                   "unencrypted, its file readable by the server only)", key);
    return k;
}

int sg_tls_server_check(const char *cert, const char *key, sg_err *err)
{
    X509 *x = load_cert(cert, err);
    if (!x)
        return -1;
    EVP_PKEY *k = load_key(key, err);
    int rc = -1;
    if (k && X509_check_private_key(x, k) != 1)
        sg_err_set(err, EINVAL, "--tls-key %s does not match the certificate of --tls-cert %s", key, cert);
    else if (k)
        rc = 0;
    ERR_clear_error();
    EVP_PKEY_free(k);
    X509_free(x);
    return rc;
}

bool sg_tls_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) != 1)
        return false;
    return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
}

int sg_tls_listen_check(const char *flag, const char *host, bool tls, bool insecure, sg_err *err)
{
    if (tls || insecure || sg_tls_is_loopback(host))
        return 0;
    bool v6 = strchr(host, ':') != NULL;
    return sg_err_set(err, EPERM,
                      "%s %s%s%s: not a loopback address, and no TLS: give --tls-cert FILE --tls-key FILE, or "
                      "--insecure-plaintext to serve tokens and learners' data in clear (behind a TLS proxy)",
                      flag, v6 ? "[" : "", host, v6 ? "]" : "");
}

void sg_tls_server_info(struct lws_context_creation_info *info, const char *cert, const char *key)
{
    if (!cert)
        return;
    info->options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info->ssl_cert_filepath = cert;
    info->ssl_private_key_filepath = key;
    info->alpn = "http/1.1";
}

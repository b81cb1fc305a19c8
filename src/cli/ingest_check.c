#include "cli/ingest_check.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/common.h"
#include "cli/config.h"
#include "state/state.h"

/* --ingest: ws://HOST:PORT[/PATH] or wss://..., the ingest's WebSocket URL.
 * Fills host and port. A bad one is refused at create: a capture that
 * could never be delivered must not start in silence. */
int sg_cli_ingest_url_check(const char *url, char *host, size_t hsize, int *port, char *why, size_t wsize)
{
    const char *p;
    if (strncmp(url, "ws://", 5) == 0) {
        p = url + 5;
    } else if (strncmp(url, "wss://", 6) == 0) {
        p = url + 6;
    } else {
        snprintf(why, wsize, strncmp(url, "http", 4) == 0
                 ? "invalid --ingest '%.200s': the capture streams over WebSocket: use ws://HOST:PORT "
                   "(http:// is the address of 'sandglass events')"
                 : "invalid --ingest '%.200s': expected ws://HOST:PORT or wss://HOST:PORT", url);
        return -1;
    }
    size_t hl;
    const char *colon;
    if (*p == '[') { /* [v6]:port */
        const char *end = strchr(p, ']');
        if (!end || end[1] != ':')
            goto bad;
        hl = (size_t)(end - p - 1);
        if (hl == 0 || hl >= hsize)
            goto bad;
        memcpy(host, p + 1, hl);
        colon = end + 1;
    } else {
        colon = strchr(p, ':');
        if (!colon)
            goto bad;
        hl = (size_t)(colon - p);
        if (hl == 0 || hl >= hsize)
            goto bad;
        memcpy(host, p, hl);
    }
    host[hl] = '\0';
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || v < 1 || v > 65535 || (*end && *end != '/'))
        goto bad;
    *port = (int)v;
    return 0;
bad:
    snprintf(why, wsize, "invalid --ingest '%.200s': expected ws://HOST:PORT with a port from 1 to 65535", url);
    return -1;
}

/* Calls fn on each element of a comma-separated list (none empty, at most
 * SG_CLI_INGEST_NODES_MAX), stopping at its first failure. */
static int each_node(const char *list, int (*fn)(const char *url, void *ud), void *ud, char *why, size_t wsize)
{
    sg_autofree char *copy = strdup(list);
    if (!copy) {
        snprintf(why, wsize, "out of memory");
        return -1;
    }
    unsigned n = 0;
    for (char *p = copy;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p || ++n > SG_CLI_INGEST_NODES_MAX) {
            snprintf(why, wsize, !*p ? "invalid --ingest '%.200s': an empty element in the list"
                                     : "invalid --ingest '%.200s': more than %d ingest nodes",
                     list, SG_CLI_INGEST_NODES_MAX);
            return -1;
        }
        if (fn(p, ud) < 0)
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* One element of an ingest list, up to its end or its comma, normalized
 * into out (a stream's scheme, the scheme and authority in lowercase, no
 * trailing '/'): its length in the list, or -1 (not a URL, too long). */
static int node_norm(const char *p, char *out, size_t osize)
{
    size_t n = strcspn(p, ",");
    const char *sep = memmem(p, n, "://", 3);
    if (!sep || sep == p || (size_t)(sep - p) > 5 || n + 2 > osize)
        return -1;
    size_t o = 0, i = 0;
    for (; p + i < sep; i++)
        out[o++] = (char)tolower((unsigned char)p[i]);
    out[o] = '\0';
    if (strcmp(out, "http") == 0 || strcmp(out, "https") == 0) {
        memmove(out + 2, out + 4, o - 3); /* http -> ws, https -> wss (and its NUL) */
        memcpy(out, "ws", 2);
        o -= 2;
    }
    size_t auth = i + 3 + strcspn(sep + 3, "/,");
    for (; i < n; i++)
        out[o++] = i < auth ? (char)tolower((unsigned char)p[i]) : p[i];
    while (o > 0 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
    return (int)n;
}

bool sg_cli_ingest_same_store(const char *a, const char *b)
{
    if (!a || !b)
        return false;
    for (;;) {
        char na[1024], nb[1024];
        int la = node_norm(a, na, sizeof na), lb = node_norm(b, nb, sizeof nb);
        if (la < 0 || lb < 0 || strcmp(na, nb) != 0)
            return false;
        a += la;
        b += lb;
        if (!*a || !*b)
            return !*a && !*b;
        a++, b++;
    }
}

typedef struct node_ctx {
    const char *learner, *task, *secret, *ca;
    char *why;
    size_t wsize;
} node_ctx;

static int url_one(const char *url, void *ud)
{
    node_ctx *c = ud;
    char host[256];
    int port;
    return sg_cli_ingest_url_check(url, host, sizeof host, &port, c->why, c->wsize);
}

int sg_cli_ingest_list_check(const char *list, char *why, size_t wsize)
{
    node_ctx c = {.why = why, .wsize = wsize};
    return each_node(list, url_one, &c, why, wsize);
}

static int node_check(const char *url, const char *host, int port, const node_ctx *c);

static int check_one(const char *url, void *ud)
{
    node_ctx *c = ud;
    char host[256];
    int port;
    if (sg_cli_ingest_url_check(url, host, sizeof host, &port, c->why, c->wsize) < 0)
        return -1;
    return node_check(url, host, port, c);
}

int sg_cli_ingest_check(const char *list, const char *ca, const char *learner, const char *task, const char *secret,
                        char *why, size_t wsize)
{
    node_ctx c = {.learner = learner, .task = task, .secret = secret, .ca = ca, .why = why, .wsize = wsize};
    return each_node(list, check_one, &c, why, wsize);
}

/* The stream tokens' key: 64 hex characters (32 bytes), in a regular file
 * readable by its owner only (wire/token.h). A missing default file is
 * made by the capture's first token; a given one must be valid now. */
int sg_cli_ingest_secret_check(const char *path, char *why, size_t wsize)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        snprintf(why, wsize, "--secret %.200s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        snprintf(why, wsize, "--secret %.200s: must be a regular file of mode 0600 (it is the ingest's key)", path);
        return -1;
    }
    char buf[80];
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
    size_t len = n > 0 ? (size_t)n : 0;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    bool hex = len == 64;
    for (size_t i = 0; hex && i < len; i++)
        hex = (buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f') || (buf[i] >= 'A' && buf[i] <= 'F');
    if (!hex) {
        snprintf(why, wsize, "--secret %.200s: not a sandglass key (64 hex characters, as 'sandglass ingest' "
                 "makes in <state>/ingest/secret)", path);
        return -1;
    }
    return 0;
}

int sg_cli_ingest_ca_check(const char *path, char *real, size_t rsize, char *why, size_t wsize)
{
    char buf[65536];
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (n < 0) {
        snprintf(why, wsize, "--ingest-ca %.200s: %s", path, strerror(errno));
        return -1;
    }
    buf[n] = '\0';
    if (!strstr(buf, "-----BEGIN CERTIFICATE-----")) {
        snprintf(why, wsize, "--ingest-ca %.200s: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
                 path);
        return -1;
    }
    char tmp[PATH_MAX];
    if (!realpath(path, tmp) || strlen(tmp) >= rsize) {
        snprintf(why, wsize, "--ingest-ca %.200s: %s", path, strerror(errno ? errno : ENAMETOOLONG));
        return -1;
    }
    snprintf(real, rsize, "%s", tmp);
    return 0;
}

/* One line on stderr when nothing listens at the ingest's address: the
 * spool keeps every event until it does, but the operator should know.
 * Returns whether something listens. */
static bool warn_unreachable(const char *url, const char *host, int port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &ai);
    if (gr != 0) {
        sg_cli_sayf("create",
                    "warning: the ingest host '%s' of %s does not resolve (%s): events are "
                    "kept in the spool until it can be reached",
                    host, url, gai_strerror(gr));
        return false;
    }
    int err = ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        sg_autoclose int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
            err = errno;
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int soerr = ETIMEDOUT;
        socklen_t sl = sizeof soerr;
        if (poll(&pf, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
            freeaddrinfo(ai);
            return true;
        }
        err = soerr;
    }
    freeaddrinfo(ai);
    sg_cli_sayf("create",
                "warning: the ingest at %s is not reachable (%s): events are kept in the "
                "spool and sent when it is (see 'sandglass flush')",
                url, strerror(err));
    return false;
}

#define TOKEN_CHECK_OUT_MAX 4096

/* Asks `sandglassd token --check` (this binary has no HMAC: no libcrypto)
 * whether the ingest takes the tokens of this key. Its JSON answer on
 * stdout, parsed; NULL when it gave none. */
static json_t *ask_token_check(const char *url, const node_ctx *c)
{
    char daemon[PATH_MAX];
    if (sg_cli_daemon_path(daemon, sizeof daemon) < 0)
        return NULL;
    /* The sandbox id is not chosen yet and no part of the check: the
     * ingest checks the key and the expiry. */
    char *argv[16] = {"sandglass", "token", "--learner", (char *)c->learner, "--task", (char *)c->task,
                      "--sandbox", "create-check", "--check", (char *)url};
    int n = 10;
    if (c->ca) {
        argv[n++] = "--ingest-ca";
        argv[n++] = (char *)c->ca;
    }
    if (c->secret) {
        argv[n++] = "--secret";
        argv[n++] = (char *)c->secret;
    }
    int status;
    return sg_cli_run_json(daemon, argv, TOKEN_CHECK_OUT_MAX, true, &status);
}

/* What a passed check holds for: the URL and the key file's identity.
 * NULL when the key file cannot be looked at (then nothing is cached). */
static char *check_key(const char *url, const char *secret, const char *ca)
{
    sg_autofree char *def = secret ? NULL : sg_config_secret();
    const char *path = secret ? secret : def;
    struct stat st, cst = {0};
    if (!path || stat(path, &st) < 0 || (ca && stat(ca, &cst) < 0))
        return NULL;
    /* the CA file's identity too: a check passed with one CA says nothing
     * of another */
    return sg_strdup_printf("%s\n%s\n%llu %lld %lld.%09ld\n%s\n%llu %lld.%09ld\n", url, path,
                            (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                            st.st_mtim.tv_nsec, ca ? ca : "-", (unsigned long long)cst.st_ino,
                            (long long)cst.st_mtim.tv_sec, cst.st_mtim.tv_nsec);
}

/* <state>/ingest-check: the last passed check, its time the file's. */
static bool check_cached(const char *key)
{
    sg_autofree char *path = sg_state_path("ingest-check");
    struct stat st;
    if (!path || stat(path, &st) < 0 || time(NULL) - st.st_mtime > SG_CLI_INGEST_CHECK_TTL_S ||
        st.st_mtime > time(NULL))
        return false;
    sg_autofree char *body = sg_read_file(path, 4096, NULL, NULL);
    return body && strcmp(body, key) == 0;
}

static void check_remember(const char *key)
{
    sg_autofree char *path = sg_state_path("ingest-check");
    if (path)
        sg_write_file_atomic(path, key, strlen(key), 0600, NULL); /* best effort: a miss only asks again */
}

/* A captured sandbox's ingest, checked before anything is made: nothing
 * listening is a warning (the spool keeps everything, by design); an
 * ingest that rejects this key's tokens is a refusal (the capture could
 * never be delivered). Returns 0, or -1 with why. */
static int node_check(const char *url, const char *host, int port, const node_ctx *c)
{
    const char *secret = c->secret;
    char *why = c->why;
    size_t wsize = c->wsize;
    if (!warn_unreachable(url, host, port))
        return 0;
    /* A listening ingest and no key here (a fresh state directory): the
     * uplink would make a key of its own, which that ingest cannot know. */
    sg_autofree char *def = secret ? NULL : sg_config_secret();
    if (def && access(def, F_OK) < 0 && errno == ENOENT) {
        snprintf(why, wsize, "the ingest at %s listens, but this state directory has no key (%s): give it the "
                 "ingest's key with --secret", url, def);
        return -1;
    }
    sg_autofree char *key = check_key(url, secret, c->ca);
    if (key && check_cached(key))
        return 0;
    sg_autojson json_t *ans = ask_token_check(url, c);
    const char *result = json_string_value(json_object_get(ans, "result"));
    const char *reason = json_string_value(json_object_get(ans, "reason"));
    char vbuf[256];
    const char *vr = sg_vis(reason ? reason : "", reason ? strlen(reason) : 0, vbuf, sizeof vbuf);
    if (result && strcmp(result, "accepted") == 0 && key)
        check_remember(key);
    if (result && strcmp(result, "tls-failed") == 0) {
        snprintf(why, wsize, "the ingest at %s: %s", url, vr);
        return -1;
    }
    if (result && strcmp(result, "rejected") == 0) {
        snprintf(why, wsize, "the ingest at %s rejects the tokens of the key %s (%s): give it its key with --secret",
                 url, secret ? secret : "<state>/ingest/secret", vr);
        return -1;
    }
    if (!result)
        sg_cli_sayf("create",
                    "warning: could not ask the ingest at %s whether it takes the tokens of "
                    "the key %s (try 'sandglass token --check %s ...')",
                    url, secret ? secret : "<state>/ingest/secret", url);
    else if (strcmp(result, "unreachable") == 0)
        sg_cli_sayf("create",
                    "warning: the ingest at %s did not answer (%s): events are kept in the "
                    "spool and sent when it does (see 'sandglass flush')",
                    url, vr);
    return 0;
}

#include "cli/ingest_http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/idprefix.h"
#include "base/json.h"
#include "base/util.h"

static int node_parse(const char *url, sg_cli_node *t, sg_err *err)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    else if (strncmp(p, "ws://", 5) == 0)
        p += 5;
    else if (strstr(p, "://"))
        return sg_err_set(err, EINVAL, "--ingest %s: only http:// (or ws://) is supported", url);
    const char *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    char hostport[300];
    if (hl == 0 || hl >= sizeof hostport)
        return sg_err_set(err, EINVAL, "--ingest %s: bad address", url);
    memcpy(hostport, p, hl);
    hostport[hl] = '\0';
    char *colon = strrchr(hostport, ':');
    if (colon && !strchr(colon, ']')) {
        *colon = '\0';
        snprintf(t->port, sizeof t->port, "%.7s", colon + 1);
    } else {
        snprintf(t->port, sizeof t->port, "80");
    }
    char *h = hostport;
    if (h[0] == '[') {
        h++;
        h[strcspn(h, "]")] = '\0';
    }
    snprintf(t->host, sizeof t->host, "%.255s", h);
    return 0;
}

int sg_cli_target_parse(const char *url, sg_cli_target *t, sg_err *err)
{
    sg_autofree char *copy = strdup(url);
    if (!copy)
        return sg_err_set(err, ENOMEM, "out of memory");
    t->n = 0;
    for (char *p = copy;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p)
            return sg_err_set(err, EINVAL, "--ingest %s: an empty element in the list", url);
        if (t->n == SG_CLI_TARGET_NODES)
            return sg_err_set(err, EINVAL, "--ingest %s: more than %d ingest nodes", url, SG_CLI_TARGET_NODES);
        if (node_parse(p, &t->node[t->n++], err) < 0)
            return -1;
        if (!comma)
            break;
        p = comma + 1;
    }
    memcpy(t->host, t->node[0].host, sizeof t->host);
    memcpy(t->port, t->node[0].port, sizeof t->port);
    return 0;
}

static int node_connect(const sg_cli_node *t, int timeout_s, sg_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gr = getaddrinfo(t->host, t->port, &hints, &ai);
    if (gr != 0)
        return sg_err_set(err, EINVAL, "resolve %s: %s", t->host, gai_strerror(gr));
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        /* An ingest that takes the connection and never answers must not
         * hold us for good: each connect, send and read waits this long. */
        struct timeval tv = {.tv_sec = timeout_s};
        if (fd >= 0) {
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        }
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return sg_err_sys(err, "connect to the ingest at %s:%s", t->host, t->port);
    return fd;
}

int sg_cli_http_connect(const sg_cli_target *t, int timeout_s, sg_err *err)
{
    int fd = -1;
    for (unsigned i = 0; i < t->n && fd < 0; i++)
        fd = node_connect(&t->node[i], timeout_s, err); /* err: the last node's */
    return fd;
}

char *sg_cli_http_get(const sg_cli_target *t, const char *path, const char *token, int *status, const char **body,
                       size_t *body_len, sg_err *err)
{
    *status = 0;
    sg_autoclose int fd = sg_cli_http_connect(t, SG_CLI_HTTP_TIMEOUT_S, err);
    if (fd < 0)
        return NULL;
    sg_autofree char *req = sg_strdup_printf(
        "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: application/json\r\n"
        "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
        path, t->host, t->port, token);
    if (sg_write_all(fd, req, strlen(req)) < 0) {
        sg_err_sys(err, "send to the ingest");
        return NULL;
    }
    size_t have = 0;
    sg_err re = {0};
    sg_autofree char *buf = sg_read_fd(fd, SG_CLI_HTTP_ANSWER_MAX, &have, &re);
    if (!buf) {
        if (re.code == EFBIG)
            sg_err_set(err, EFBIG, "answer from the ingest exceeds %d bytes", SG_CLI_HTTP_ANSWER_MAX);
        else
            sg_err_set(err, re.code, "read from the ingest: %s", re.msg);
        return NULL;
    }
    char *hend = strstr(buf, "\r\n\r\n");
    if (!hend || sscanf(buf, "HTTP/1.%*[01] %d", status) != 1) {
        *status = 0;
        sg_err_set(err, EPROTO, "malformed HTTP answer from the ingest");
        return NULL;
    }
    *hend = '\0';
    *body = hend + 4;
    *body_len = have - (size_t)(*body - buf);
    /* Honour Content-Length when present (the ingest always sends it). */
    for (char *line = strstr(buf, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "content-length:", 15) == 0) {
            unsigned long long cl = strtoull(line + 17, NULL, 10);
            if (cl > *body_len) {
                sg_err_set(err, EPROTO, "truncated answer from the ingest");
                return NULL;
            }
            *body_len = (size_t)cl;
        } else if (strncasecmp(line + 2, "transfer-encoding:", 18) == 0) {
            sg_err_set(err, EPROTO, "chunked answers are not supported");
            return NULL;
        }
    }
    char *ans = buf;
    buf = NULL;
    return ans;
}

json_t *sg_cli_http_answer_json(const char *body, size_t body_len, int status, int *status_out, sg_err *err)
{
    json_t *j = sg_json_parse(body, body_len, err);
    if (!j) {
        sg_err_prefix(err, "answer from the ingest (HTTP %d)", status);
        return NULL;
    }
    if (status != 200 && !status_out) {
        const char *msg = json_string_value(json_object_get(j, "error"));
        char vbuf[256]; /* the answer's text reaches the terminal too */
        sg_err_set(err, EPROTO, "ingest answered HTTP %d: %s", status,
                   sg_vis(msg ? msg : "?", strlen(msg ? msg : "?"), vbuf, sizeof vbuf));
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *sg_cli_http_get_json(const sg_cli_target *t, const char *path, const char *token, int *status_out,
                             sg_err *err)
{
    int status = 0;
    const char *body = NULL;
    size_t body_len = 0;
    sg_autofree char *buf = sg_cli_http_get(t, path, token, &status, &body, &body_len, err);
    if (status_out)
        *status_out = status;
    if (!buf)
        return NULL;
    return sg_cli_http_answer_json(body, body_len, status, status_out, err);
}

json_t *sg_cli_store_sandbox(const sg_cli_target *t, const char *token, const char *arg, char *out, size_t outlen,
                             sg_err *err)
{
    char where[300];
    snprintf(where, sizeof where, " in the ingest's store (at %s:%s)", t->host, t->port);
    if (!sg_valid_name(arg)) /* no stream has that name: nothing to ask */
        return sg_id_resolve(arg, NULL, 0, where, out, outlen, err), NULL;
    sg_autofree char *path = sg_strdup_printf("/v1/sandboxes?prefix=%s", arg);
    sg_autojson json_t *ans = sg_cli_http_get_json(t, path, token, NULL, err);
    if (!ans)
        return NULL;
    json_t *rows = json_object_get(ans, "sandboxes"), *row;
    size_t n = json_array_size(rows), i;
    sg_autofree const char **ids = calloc(n + 1, sizeof *ids);
    if (!ids)
        return sg_err_set(err, ENOMEM, "out of memory"), NULL;
    json_array_foreach(rows, i, row)
        ids[i] = json_string_value(json_object_get(row, "sandbox"));
    if (sg_id_resolve(arg, ids, n, where, out, outlen, err) < 0)
        return NULL;
    json_t *mine = json_array();
    json_array_foreach(rows, i, row)
        if (mine && ids[i] && strcmp(ids[i], out) == 0)
            json_array_append(mine, row);
    if (!mine)
        sg_err_set(err, ENOMEM, "out of memory");
    return mine;
}

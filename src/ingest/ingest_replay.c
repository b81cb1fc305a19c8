/* ingest_replay: the recordings of terminal sessions for the console's
 * replay, with a read token:
 *   GET /v1/casts?sandbox=ID[&learner=&task=]  {"casts": [{"learner", "task",
 *       "sandbox", "session", "bytes"}]}, oldest session first
 *   GET /v1/cast?sandbox=ID&session=N          one recording (asciicast v3)
 * These are the names and shapes of the store's recordings endpoints
 * (helper blobs' work, recordings reaching the ingest through the uplink).
 * Until they are here, the ingest reads the recordings where `sandglass
 * cast` does: <state>/sb/<id>/casts/<N>.cast of a sandbox of this host's
 * state directory (an ingest on the sandboxes' host, the default setup).
 * The sandbox's record names its learner and task: they must be within
 * the token's scope (and the query's). Another host's sandbox has none
 * here (an empty list). */
#include "ingest/ingest_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "capture/asciicast.h"
#include "state/state.h"

static void meta_clearp(sg_sandbox_meta *m)
{
    sg_sandbox_meta_clear(m);
}

/* The sandbox of the query under the token's scope, its record loaded:
 * 0; 1 answered (400, 403); 2 no such sandbox on this host. */
static int replay_sandbox(struct lws *wsi, sg_http_req *req, const sg_token_claims *cl, sg_sandbox_meta *m)
{
    char v[3][SG_NAME_MAX + 8];
    static const char *const names[] = {"learner=", "task=", "sandbox="};
    const char *claims[] = {cl->learner, cl->task, cl->sandbox}, *want[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        int r = ingest_urlarg(wsi, names[k], v[k], sizeof v[k]);
        if (r < 0) {
            sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("an argument too long or twice"));
            return 1;
        }
        if (!ingest_scope_filter(wsi, req, names[k], claims[k], v[k], r, &want[k]))
            return 1;
    }
    if (!want[2] || strlen(want[2]) != SG_ID_LEN || strspn(want[2], "0123456789abcdef") != SG_ID_LEN) {
        sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("sandbox= (a whole sandbox id) is required"));
        return 1;
    }
    sg_err err;
    if (sg_sandbox_meta_load(want[2], m, &err) < 0 || !m->task)
        return 2;
    /* the record's learner and task within the token's and the query's */
    if ((want[0] && strcmp(want[0], m->learner)) || (want[1] && strcmp(want[1], m->task)))
        return 2;
    return 0;
}

int ingest_http_casts(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    (void)ing;
    __attribute__((cleanup(meta_clearp))) sg_sandbox_meta m = {0};
    int r = replay_sandbox(wsi, req, cl, &m);
    if (r == 1)
        return 0;
    json_t *arr = json_array();
    sg_autofree char *dir = r == 0 ? sg_state_sandbox_path(m.id, "casts") : NULL;
    sg_autoclosedir DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    while (arr && d && (e = readdir(d))) {
        char *end;
        unsigned long n = strtoul(e->d_name, &end, 10);
        struct stat st;
        if (end == e->d_name || strcmp(end, ".cast") || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        char sess[32];
        snprintf(sess, sizeof sess, "%lu", n);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:I}", "learner", m.learner, "task", m.task,
                                             "sandbox", m.id, "session", sess, "bytes", (json_int_t)st.st_size));
    }
    /* oldest first: by the exec number */
    size_t n = json_array_size(arr);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            json_t *a = json_array_get(arr, j - 1), *b = json_array_get(arr, j);
            if (strtoul(json_string_value(json_object_get(a, "session")), NULL, 10) <=
                strtoul(json_string_value(json_object_get(b, "session")), NULL, 10))
                break;
            json_incref(a);
            json_array_set(arr, j - 1, b);
            json_array_set_new(arr, j, a);
        }
    return sg_http_answer(wsi, req, HTTP_STATUS_OK, json_pack("{s:o}", "casts", arr));
}

int ingest_http_cast(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const sg_token_claims *cl)
{
    (void)ing;
    __attribute__((cleanup(meta_clearp))) sg_sandbox_meta m = {0};
    int r = replay_sandbox(wsi, req, cl, &m);
    if (r == 1)
        return 0;
    char sess[24];
    char *end = NULL;
    if (ingest_urlarg(wsi, "session=", sess, sizeof sess) != 1 || !sess[0] || (strtoul(sess, &end, 10), *end))
        return sg_http_answer(wsi, req, HTTP_STATUS_BAD_REQUEST, ingest_error_json("session= (a number) is required"));
    char rel[48];
    snprintf(rel, sizeof rel, "casts/%s.cast", sess);
    sg_autofree char *path = r == 0 ? sg_state_sandbox_path(m.id, rel) : NULL;
    sg_autoclose int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > SG_CAST_MAX)
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, ingest_error_json("no such recording"));
    unsigned char *buf = malloc(LWS_PRE + (size_t)st.st_size + 1);
    size_t have = 0;
    while (buf && have < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + LWS_PRE + have, (size_t)st.st_size - have);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    if (!buf)
        return -1;
    return sg_http_answer_body(wsi, req, HTTP_STATUS_OK, "application/x-asciicast", buf, have, NULL, 0);
}

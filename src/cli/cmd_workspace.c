/* sandglass workspace: the workspace as it was just after event SEQ,
 * rebuilt from the ingest's store alone (the sandbox may be gone): the
 * file_diff events up to SEQ say which content each path held
 * (capture/contents.h: their "content"), GET /v1/contents gives the
 * bytes. Files over the capture's size limit are not written; each is
 * named on stderr with its size and hash. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/config.h"
#include "cli/export.h"
#include "cli/ingest_http.h"
#include "cli/prefetch.h"
#include "cli/report.h"
#include "cli/workspace.h"
#include "state/state.h"
#include "wire/token.h"

#define WS_PAGE 1000
#define WS_TOKEN_TTL_S 600

typedef sg_ws_opts ws_opts;

static void ws_usage(FILE *f)
{
    fprintf(f, "usage: sandglass workspace --sandbox ID --at SEQ --out DIR [--ingest URL]\n"
               "                          [--ingest-ca FILE] [--token T | --secret FILE]\n\n"
               "Writes the workspace of sandbox ID as it was just after event SEQ, from the\n"
               "ingest's store alone, into DIR (which must not exist yet), or as a tar stream\n"
               "on stdout with --out -. Files over the capture's size limit are not written:\n"
               "each is named on stderr with its size and sha256 (exit status 3).\n");
}

/* The key of a payload's path in the state (path_hex for a path that is not UTF-8). */
static const char *path_key(json_t *p, const char *key, char *buf, size_t n)
{
    char hk[32];
    snprintf(hk, sizeof hk, "%s_hex", key);
    const char *h = json_string_value(json_object_get(p, hk));
    if (h) {
        snprintf(buf, n, "\x01%s", h);
        return buf;
    }
    return json_string_value(json_object_get(p, key));
}

static bool ws_is_dir(json_t *content)
{
    const char *type = json_string_value(json_object_get(content, "type"));
    return type && strcmp(type, "dir") == 0;
}

/* A directory gone: it and whatever the state still has under it (a
 * directory is removed empty: what is left under it is stale, such as a
 * file whose deletion comes after it). */
static void ws_dir_gone(json_t *state, const char *path)
{
    json_object_del(state, path);
    sg_autofree char *raw = sg_ws_unhex(path);
    size_t n = raw ? strlen(raw) : 0;
    const char *key;
    json_t *c;
    void *tmp;
    json_object_foreach_safe(state, tmp, key, c) {
        sg_autofree char *k = sg_ws_unhex(key);
        if (raw && k && strncmp(k, raw, n) == 0 && k[n] == '/')
            json_object_del(state, key);
    }
}

/* One file_diff applied to the state {path: content}. A directory's
 * (`dir: true`: an empty one made, or one removed) is an entry of type
 * "dir"; a file's deletion never removes one, nor a directory's a file. */
static void ws_apply(json_t *state, json_t *p)
{
    char kb[8200], ob[8200];
    const char *change = json_string_value(json_object_get(p, "change"));
    const char *path = path_key(p, "path", kb, sizeof kb);
    if (!change || !path)
        return;
    json_t *content = json_object_get(p, "content");
    bool dir = json_is_true(json_object_get(p, "dir"));
    json_t *had = json_object_get(state, path);
    if (strcmp(change, "deleted") == 0) {
        if (dir && (!had || ws_is_dir(had)))
            ws_dir_gone(state, path);
        else if (!dir && !ws_is_dir(had))
            json_object_del(state, path);
        return;
    }
    if (dir) {
        json_object_set_new(state, path, ws_is_dir(content) ? json_incref(content) : json_pack("{s:s}", "type", "dir"));
        return;
    }
    if (strcmp(change, "renamed") == 0) {
        const char *old = path_key(p, "old_path", ob, sizeof ob);
        json_t *was = old ? json_incref(json_object_get(state, old)) : NULL;
        if (old)
            json_object_del(state, old);
        if (!content && was)
            content = was;
        json_object_set(state, path, content ? content : json_null());
        json_decref(was);
        return;
    }
    json_object_set(state, path, content ? content : json_null());
}

char *sg_ws_token(const sg_ws_opts *o, sg_err *err)
{
    if (o->token)
        return strdup(o->token);
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    sg_autofree char *def = o->secret ? NULL : sg_config_secret();
    if (!o->secret && !sg_state_dir(err))
        return NULL;
    if (sg_token_secret_load(o->secret ? o->secret : def, secret, err) < 0)
        return NULL;
    return sg_token_make_read(secret, NULL, NULL, NULL, WS_TOKEN_TTL_S, err);
}

/* One event applied: a file_diff, or a bulk event's list of changes
 * past the per-exec limit (each entry as a file_diff; its content when
 * the capture gave one). */
void sg_ws_event(json_t *state, json_t *e)
{
    json_t *p = json_object_get(e, "payload"), *f;
    if (strcmp(json_string_value(json_object_get(e, "kind")) ?: "", "bulk") != 0) {
        ws_apply(state, p);
        return;
    }
    size_t i;
    json_array_foreach(json_object_get(p, "files"), i, f)
        ws_apply(state, f);
}

/* The state just after event o->at: 0, or -1 with err. An ingest that
 * knows no `bulk` kind (400 to the kind list) is asked for file_diff only. */
static int ws_replay(const ws_opts *o, const sg_cli_target *t, const char *tok, json_t *state,
                     long long *last, sg_err *err)
{
    long long after = -1;
    const char *kinds = "file_diff,bulk";
    *last = -1;
    /* the stream's learner and task when known: the store's index
     * (learner, task, sandbox, seq) then gives each page from where it
     * starts; without them every page sorted the sandbox's rows after it
     * again. The diffs' text is not needed: the ingest leaves it out
     * (omit=diff; one that does not know omit= sends it, unread). */
    char base[1024] = "/v1/events";
    if (o->learner && o->task) {
        sg_export_url_arg(base, sizeof base, "learner", o->learner);
        sg_export_url_arg(base, sizeof base, "task", o->task);
    }
    sg_export_url_arg(base, sizeof base, "sandbox", o->sandbox);
    for (;;) {
        char path[1400];
        snprintf(path, sizeof path, "%s&kind=%s&omit=diff&limit=%d&after_seq=%lld", base, kinds, WS_PAGE, after);
        int status = 0;
        sg_autojson json_t *ans = sg_cli_http_get_json(t, path, tok, &status, err);
        if (ans && status == 400 && strchr(kinds, ',')) {
            kinds = "file_diff";
            continue;
        }
        if (!ans || status != 200)
            return ans ? sg_err_set(err, EIO, "events: HTTP %d: %s", status,
                                    json_string_value(json_object_get(ans, "error")) ?: "") : -1;
        json_t *evs = json_object_get(ans, "events"), *e;
        size_t i;
        json_array_foreach(evs, i, e) {
            long long seq = json_integer_value(json_object_get(e, "seq"));
            if (seq > o->at)
                return 0;
            sg_ws_event(state, e);
            after = *last = seq;
        }
        if (!json_is_true(json_object_get(ans, "more")) || json_array_size(evs) == 0)
            return 0;
    }
}

/* An entry this run made (rel under dirfd, not followed) given to o's
 * owner, when o asks for one. */
static int ws_own(const ws_opts *o, int dirfd, const char *rel)
{
    return o->own ? fchownat(dirfd, rel, o->uid, o->gid, AT_SYMLINK_NOFOLLOW) : 0;
}

/* parents of rel under dir, made as needed; each must be a directory, not
 * a link written before it (a stored "d -> /etc" then "d/x" would
 * otherwise write through the link, outside dir). *done is the last parent
 * checked (the paths come sorted, so neighbours share it): its components
 * are directories this run made or found, and nothing this run writes
 * replaces one (every write is O_EXCL / symlinkat), so they are not
 * checked again. */
static int ws_mkparents(const ws_opts *o, int dirfd, const char *rel, char **done)
{
    sg_autofree char *p = strdup(rel);
    if (!p)
        return -1;
    char *slash = strrchr(p, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    size_t skip = 0; /* bytes of p (whole components) already checked */
    if (*done) {
        size_t dl = strlen(*done);
        if (strncmp(p, *done, dl) == 0 && (p[dl] == '\0' || p[dl] == '/'))
            skip = dl;
        else
            for (size_t i = 0; (*done)[i] && (*done)[i] == p[i]; i++)
                if ((*done)[i + 1] == '/' && (p[i + 1] == '/' || p[i + 1] == '\0'))
                    skip = i + 1;
    }
    if (p[skip] != '\0') {
        for (char *s = p + skip + 1;; s++) {
            if (*s != '/' && *s != '\0')
                continue;
            char c = *s;
            *s = '\0';
            struct stat st;
            int made = mkdirat(dirfd, p, 0755);
            if (made < 0 && errno != EEXIST)
                return -1;
            if (fstatat(dirfd, p, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
                return errno = ENOTDIR, -1;
            if (made == 0 && ws_own(o, dirfd, p) < 0)
                return -1;
            *s = c;
            if (!c)
                break;
        }
    }
    free(*done);
    *done = p;
    p = NULL;
    return 0;
}

/* A path the store names stays inside the tree: relative, no empty, "."
 * or ".." component (the ingest stores what a stream sent). */
bool sg_ws_safe_path(const char *rel)
{
    if (!rel[0] || rel[0] == '/')
        return false;
    for (const char *c = rel; c;) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c = end ? end + 1 : NULL;
    }
    return true;
}

char *sg_ws_unhex(const char *key)
{
    if (key[0] != '\x01')
        return strdup(key);
    size_t n = strlen(key + 1) / 2;
    char *p = malloc(n + 1);
    for (size_t i = 0; p && i < n; i++) {
        unsigned v = 0;
        sscanf(key + 1 + 2 * i, "%2x", &v);
        p[i] = (char)v;
    }
    if (p)
        p[n] = '\0';
    return p;
}

/* ---- tar (ustar, GNU long names), for --out - */

static void tar_octal(char *f, size_t n, uint64_t v)
{
    snprintf(f, n, "%0*llo", (int)n - 1, (unsigned long long)v);
}

/* The stream goes out in pieces of up to TAR_OUT bytes: 2 or 3 writes a
 * file (header, bytes, padding) were 2,000 system calls for 1,000 files,
 * each a wake-up of the reader at a pipe's other end. */
#define TAR_OUT (256 * 1024)
static char tar_buf[TAR_OUT];
static size_t tar_len;

static int tar_flush(void)
{
    int r = tar_len ? sg_write_all(1, tar_buf, tar_len) : 0;
    tar_len = 0;
    return r;
}

static int tar_out(const void *data, size_t len)
{
    if (tar_len + len > TAR_OUT && tar_flush() < 0)
        return -1;
    if (len >= TAR_OUT)
        return sg_write_all(1, data, len);
    memcpy(tar_buf + tar_len, data, len);
    tar_len += len;
    return 0;
}

static int tar_block(const void *data, size_t len)
{
    static const char zero[512];
    if (len && tar_out(data, len) < 0)
        return -1;
    return len % 512 ? tar_out(zero, 512 - len % 512) : 0;
}

/* One header; a name or link target over 100 bytes goes before it as a
 * GNU 'L' / 'K' entry. */
static int tar_header(const char *name, char type, mode_t mode, uint64_t size, const char *link)
{
    const char *longs[2] = {name, link};
    for (int k = 0; k < 2; k++) {
        if (!longs[k] || strlen(longs[k]) < 100)
            continue;
        if (tar_header("././@LongLink", k ? 'K' : 'L', 0644, strlen(longs[k]) + 1, NULL) < 0 ||
            tar_block(longs[k], strlen(longs[k]) + 1) < 0)
            return -1;
    }
    char h[512] = {0};
    snprintf(h, 100, "%s", name);
    tar_octal(h + 100, 8, mode & 07777);
    tar_octal(h + 108, 8, 0);
    tar_octal(h + 116, 8, 0);
    tar_octal(h + 124, 12, size);
    tar_octal(h + 136, 12, 0);
    memset(h + 148, ' ', 8);
    h[156] = type;
    if (link)
        snprintf(h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    return tar_block(h, 512);
}

/* Whether the state's entry c has bytes to fetch. */
static bool ws_fetchable(json_t *c)
{
    return json_string_value(json_object_get(c, "type")) && json_string_value(json_object_get(c, "sha256")) &&
           json_is_true(json_object_get(c, "stored"));
}

/* The bytes of sha in a batch answer ("HEX LEN\n" + bytes each), or NULL. */
static const char *ws_find(const char *body, size_t blen, const char *sha, size_t *len)
{
    size_t off = 0;
    while (off + 66 < blen) {
        const char *nl = memchr(body + off, '\n', blen - off);
        if (!nl)
            return NULL;
        long long n = strtoll(body + off + 65, NULL, 10);
        const char *data = nl + 1;
        if (memcmp(body + off, sha, 64) == 0) {
            if (n < 0 || (size_t)n > blen - (size_t)(data - body))
                return NULL;
            *len = (size_t)n;
            return data;
        }
        off = (size_t)(data - body) + (size_t)(n > 0 ? n : 0);
    }
    return NULL;
}

/* One path of the state into dirfd (-1: onto stdout as tar), its bytes
 * from a batch answer. 0 written, 1 not (said on stderr), -1 error. */
static int ws_write(const ws_opts *o, const char *batch, size_t batch_len, int dirfd, const char *key, json_t *c,
                    char **done, sg_err *err)
{
    sg_autofree char *rel = sg_ws_unhex(key);
    const char *type = json_string_value(json_object_get(c, "type"));
    const char *sha = json_string_value(json_object_get(c, "sha256"));
    if (rel && !sg_ws_safe_path(rel)) {
        sg_print_vis(2, "sandglass workspace: ", "not written: %s is not a path inside the workspace", rel);
        return 1;
    }
    if (!rel || (dirfd >= 0 && ws_mkparents(o, dirfd, rel, done) < 0))
        return sg_err_sys(err, "mkdir for %s", key);
    if (type && strcmp(type, "dir") == 0) { /* an empty directory (or one made before its files) */
        mode_t dmode = ((mode_t)json_integer_value(json_object_get(c, "mode")) & 0777) | 0700;
        if (dirfd < 0) {
            sg_autofree char *name = sg_strdup_printf("%s/", rel);
            return tar_header(name, '5', dmode, 0, NULL) == 0 ? 0 : sg_err_sys(err, "tar %s", rel);
        }
        struct stat st;
        int made = mkdirat(dirfd, rel, dmode);
        if (made < 0 &&
            (errno != EEXIST || fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)))
            return sg_err_sys(err, "mkdir %s", rel);
        return made == 0 && ws_own(o, dirfd, rel) < 0 ? sg_err_sys(err, "chown %s", rel) : 0;
    }
    if (!type || !sha || !json_is_true(json_object_get(c, "stored"))) {
        sg_print_vis(2, "sandglass workspace: ", "not stored: %s%s size %lld sha256 %s", rel,
                json_is_true(json_object_get(c, "over_limit")) ? " (over the size limit)" : "",
                (long long)json_integer_value(json_object_get(c, "size")), sha ? sha : "-");
        return 1;
    }
    size_t blen = 0;
    const char *body = ws_find(batch, batch_len, sha, &blen);
    if (!body)
        return sg_err_set(err, EIO, "content %s of %s is not in the store", sha, rel);
    mode_t mode = (mode_t)json_integer_value(json_object_get(c, "mode")) & 0777;
    if (strcmp(type, "link") == 0) {
        sg_autofree char *target = strndup(body, blen);
        if (dirfd < 0)
            return target && tar_header(rel, '2', 0777, 0, target) == 0 ? 0 : sg_err_sys(err, "tar %s", rel);
        return target && symlinkat(target, dirfd, rel) == 0 && ws_own(o, dirfd, rel) == 0
                   ? 0 : sg_err_sys(err, "symlink %s", rel);
    }
    if (strcmp(type, "file") != 0) {
        sg_print_vis(2, "sandglass workspace: ", "not written: %s is a %s", rel, type);
        return 1;
    }
    if (dirfd < 0)
        return tar_header(rel, '0', mode ? mode : 0644, blen, NULL) == 0 && tar_block(body, blen) == 0
                   ? 0 : sg_err_sys(err, "tar %s", rel);
    sg_autoclose int fd = openat(dirfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                 mode ? mode : 0644);
    if (fd < 0 || (o->own && fchown(fd, o->uid, o->gid) < 0) || sg_write_all(fd, body, blen) < 0 ||
        (o->wrote && o->wrote(o->wrote_ud, rel, sha, fd) < 0))
        return sg_err_sys(err, "write %s", rel);
    return 0;
}

#define WS_BATCH 32 /* contents one request fetches (the ingest's bound) */
/* and their bytes, at most (a batch is closed past it): the fetchers hold
 * up to SG_PREFETCHERS * SG_PREFETCH_DEPTH answers and the writer one, so
 * at most 5 * (WS_BATCH_BYTES + a content) in memory: 45 MiB at the 1 MiB
 * file limit, where 32 contents a batch could be 160 MiB */
#define WS_BATCH_BYTES (8 * 1024 * 1024)

/* The contents of the state's paths, WS_BATCH distinct ones to a request,
 * fetched ahead (cli/prefetch.h) while the paths before are written: batch
 * b holds the paths keys[at[b]] to keys[at[b + 1]] and asks for paths[b]
 * (NULL: none of them has bytes to fetch). */
typedef struct ws_batches {
    const sg_cli_target *t;
    const char *tok;
    size_t n;
    size_t *at;
    char **paths;
    sg_err *errs; /* why batch b's fetch failed */
} ws_batches;

/* The batches of the n sorted keys: 0, or -1 with err. */
static int ws_plan(ws_batches *bs, json_t *state, const char **keys, size_t n, sg_err *err)
{
    bs->at = calloc(n + 2, sizeof *bs->at);
    bs->paths = calloc(n + 1, sizeof *bs->paths);
    bs->errs = calloc(n + 1, sizeof *bs->errs);
    if (!bs->at || !bs->paths || !bs->errs)
        return sg_err_set(err, ENOMEM, "out of memory");
    for (size_t k = 0; k < n;) {
        char path[WS_BATCH * 65 + 64] = "/v1/contents?sha256=";
        size_t want = 0;
        long long bytes = 0;
        bs->at[bs->n] = k;
        for (; k < n && want < WS_BATCH && bytes < WS_BATCH_BYTES; k++) {
            json_t *c = json_object_get(state, keys[k]);
            if (!ws_fetchable(c) || strstr(path, json_string_value(json_object_get(c, "sha256"))))
                continue;
            json_int_t size = json_integer_value(json_object_get(c, "size"));
            bytes += size > 0 ? size : 0;
            if (want++)
                strcat(path, ",");
            strncat(path, json_string_value(json_object_get(c, "sha256")), 64);
        }
        if (want == 1) /* one: the batch form still, so the answer is framed */
            strcat(path, ",");
        if (want && !(bs->paths[bs->n] = strdup(path)))
            return sg_err_set(err, ENOMEM, "out of memory");
        bs->n++;
    }
    bs->at[bs->n] = n;
    return 0;
}

static void ws_plan_free(ws_batches *bs)
{
    for (size_t b = 0; bs->paths && b < bs->n; b++)
        free(bs->paths[b]);
    free(bs->paths);
    free(bs->at);
    free(bs->errs);
}

/* Batch b's answer (a fetcher's job; one answer). */
static sg_fetched ws_fetch(void *ud, size_t b, long long *cursor)
{
    ws_batches *bs = ud;
    sg_fetched f = {.last = true, .body = ""};
    (void)cursor;
    if (!bs->paths[b] && !(f.ans = strdup("")))
        sg_err_set(&bs->errs[b], ENOMEM, "out of memory");
    else if (bs->paths[b])
        f.ans = sg_cli_http_get(bs->t, bs->paths[b], bs->tok, &f.status, &f.body, &f.len, &bs->errs[b]);
    if (f.ans && bs->paths[b] && f.status != 200) {
        sg_err_set(&bs->errs[b], EIO, "contents: HTTP %d", f.status);
        free(f.ans);
        f.ans = NULL;
    }
    return f;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int ws_parse(int argc, char **argv, ws_opts *o)
{
    static const struct option opts[] = {
        {"sandbox", required_argument, NULL, 's'}, {"at", required_argument, NULL, 'a'},
        {"out", required_argument, NULL, 'o'}, {"ingest", required_argument, NULL, 'i'},
        {"token", required_argument, NULL, 't'}, {"secret", required_argument, NULL, 'S'},
        {"ingest-ca", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'}, {0},
    };
    *o = (ws_opts){.ingest = sg_config_ingest(), .at = -1};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': o->sandbox = optarg; break;
        case 'a': o->at = strtoll(optarg, NULL, 10); break;
        case 'o': o->out = optarg; break;
        case 'i': o->ingest = optarg; break;
        case 'C': o->ingest_ca = optarg; break;
        case 't': o->token = optarg; break;
        case 'S': o->secret = optarg; break;
        case 'h': ws_usage(stdout); return 0;
        default: return sg_cli_bad_option("workspace", argv[optind - 1]);
        }
    }
    if (!o->sandbox || o->at < 0 || !o->out || strpbrk(o->sandbox, "&?#% /"))
        return sg_cli_usage("workspace", "--sandbox ID, --at SEQ (>= 0) and --out DIR are required");
    return -1;
}

/* Replays the events up to o->at and writes each path: in path order, so
 * the same store gives the same tar stream. */
int sg_ws_rebuild(const sg_ws_opts *o, const sg_cli_target *t, const char *tok, int dirfd, sg_err *err)
{
    sg_autojson json_t *state = json_object();
    long long last;
    if (!state)
        return sg_err_set(err, ENOMEM, "out of memory");
    if (ws_replay(o, t, tok, state, &last, err) < 0)
        return -1;
    size_t n = json_object_size(state), k = 0;
    sg_autofree const char **keys = calloc(n + 1, sizeof *keys);
    const char *key;
    json_t *c;
    if (!keys)
        return sg_err_set(err, ENOMEM, "out of memory");
    json_object_foreach(state, key, c)
        keys[k++] = key;
    qsort(keys, n, sizeof *keys, cmp_str);
    ws_batches bs = {.t = t, .tok = tok};
    sg_prefetch pf;
    int missing = 0;
    sg_autofree char *done = NULL; /* the last parent ws_mkparents checked */
    if (ws_plan(&bs, state, keys, n, err) < 0) {
        ws_plan_free(&bs);
        return -1;
    }
    if (sg_prefetch_start(&pf, bs.n, ws_fetch, &bs) < 0) {
        ws_plan_free(&bs);
        return sg_err_sys(err, "start the content fetchers");
    }
    for (size_t b = 0; b < bs.n && missing >= 0; b++) {
        sg_fetched f = sg_prefetch_take(&pf, b);
        if (!f.ans) {
            *err = bs.errs[b];
            missing = -1;
        }
        for (k = bs.at[b]; k < bs.at[b + 1] && missing >= 0; k++) {
            int r = ws_write(o, f.body, f.len, dirfd, keys[k], json_object_get(state, keys[k]), &done, err);
            missing = r < 0 ? -1 : missing + r;
        }
        free(f.ans);
    }
    sg_prefetch_end(&pf);
    ws_plan_free(&bs);
    return missing;
}

int sg_cmd_workspace(int argc, char **argv)
{
    ws_opts o;
    int rc = ws_parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    sg_err err = {0};
    sg_cli_target t;
    if (sg_cli_target_parse(o.ingest, o.ingest_ca, &t, &err) < 0)
        return sg_cli_usage("workspace", "%s", err.msg);
    sg_autofree char *tok = sg_ws_token(&o, &err);
    if (!tok)
        return sg_cli_failf("workspace", "%s", err.msg);
    /* the id or a unique prefix of it (the one rule), in the store */
    char id[SG_NAME_MAX + 1];
    sg_autojson json_t *streams = sg_cli_store_sandbox(&t, tok, o.sandbox, id, sizeof id, &err);
    if (!streams)
        return sg_cli_failf("workspace", "%s", err.msg);
    o.sandbox = id;
    if (json_array_size(streams) == 1) { /* its one stream's */
        o.learner = json_string_value(json_object_get(json_array_get(streams, 0), "learner"));
        o.task = json_string_value(json_object_get(json_array_get(streams, 0), "task"));
    }
    bool tar = strcmp(o.out, "-") == 0;
    if (!tar && mkdir(o.out, 0755) < 0)
        return sg_cli_failf("workspace", "mkdir %s: %s", o.out, strerror(errno));
    sg_autoclose int dirfd = tar ? -1 : open(o.out, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int missing = sg_ws_rebuild(&o, &t, tok, dirfd, &err);
    if (missing < 0) {
        if (tar)
            tar_flush(); /* the entries made, as they were written before */
        return sg_cli_failf("workspace", "%s", err.msg);
    }
    if (tar) {
        static const char end[1024];
        if (tar_out(end, sizeof end) < 0 || tar_flush() < 0)
            return sg_cli_failf("workspace", "write: %s", strerror(errno));
    }
    return missing ? 3 : 0;
}

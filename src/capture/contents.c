/* contents: changed files' contents into the spool (contents.h). */
#include "capture/contents.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/digest.h"
#include "base/json.h"
#include "base/util.h"
#include "capture/watch_internal.h"
#include "delivery/spool.h"
#include "wire/event.h"

#define SENT_SLOTS 65536 /* hashes remembered as sent this session (a cache: a miss resends) */

struct sg_contents {
    int rootfd;
    uint64_t max_file;
    uint64_t read_bytes;
    uint64_t *sent;      /* first 8 bytes of each sent hash, open addressing */
    size_t nsent;
    char *buf;           /* max_file + 1 bytes */
    json_t *known;       /* the seed's known files: PATHHEX -> [sha256, size, ino, mtime_ns] */
};

sg_contents *sg_contents_new(const char *workspace, uint64_t max_file, sg_err *err)
{
    const char *off = getenv("SANDGLASS_CAPTURE_CONTENTS"); /* "0": off, for bench/ only */
    if (off && strcmp(off, "0") == 0) {
        sg_err_set(err, ECANCELED, "SANDGLASS_CAPTURE_CONTENTS=0");
        return NULL;
    }
    sg_contents *ct = calloc(1, sizeof *ct);
    if (!ct) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    ct->max_file = max_file ? max_file : SG_CAPTURE_MAX_FILE_DEFAULT;
    ct->sent = calloc(SENT_SLOTS, sizeof *ct->sent);
    ct->buf = malloc(ct->max_file + 1);
    ct->rootfd = open(workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (!ct->sent || !ct->buf || ct->rootfd < 0) {
        sg_err_sys(err, "contents: open %s", workspace);
        sg_contents_free(ct);
        return NULL;
    }
    return ct;
}

void sg_contents_free(sg_contents *ct)
{
    if (!ct)
        return;
    if (ct->rootfd >= 0)
        close(ct->rootfd);
    free(ct->sent);
    free(ct->buf);
    json_decref(ct->known);
    free(ct);
}

uint64_t sg_contents_take_read(sg_contents *ct)
{
    uint64_t n = ct ? ct->read_bytes : 0;
    if (ct)
        ct->read_bytes = 0;
    return n;
}

static uint64_t key_of(const uint8_t sha[SG_SHA256_LEN])
{
    uint64_t k;
    memcpy(&k, sha, sizeof k);
    return k ? k : 1;
}

/* Whether the hash was sent (then true), else remembers it. */
static bool sent_check(sg_contents *ct, const uint8_t sha[SG_SHA256_LEN], bool remember)
{
    uint64_t k = key_of(sha);
    for (size_t i = 0, h = k % SENT_SLOTS; i < 64; i++, h = (h + 1) % SENT_SLOTS) {
        if (ct->sent[h] == k)
            return true;
        if (!ct->sent[h]) {
            if (remember && ct->nsent < SENT_SLOTS / 2) {
                ct->sent[h] = k;
                ct->nsent++;
            }
            return false;
        }
    }
    return false;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* The payload's path as bytes (path_hex when the path is not UTF-8). */
static char *payload_path(json_t *payload)
{
    const char *h = json_string_value(json_object_get(payload, "path_hex"));
    if (h) {
        size_t n = strlen(h) / 2;
        char *p = malloc(n + 1);
        for (size_t i = 0; p && i < n; i++) {
            unsigned v;
            if (sscanf(h + 2 * i, "%2x", &v) != 1)
                v = '?';
            p[i] = (char)v;
        }
        if (p)
            p[n] = '\0';
        return p;
    }
    const char *s = json_string_value(json_object_get(payload, "path"));
    return s && !json_object_get(payload, "path_bytes") ? strdup(s) : NULL;
}

/* Appends the blob records of buf[0, len). -1: not (all) spooled. */
static int spool_parts(struct sg_spool *spool, const char *sha, const char *buf, size_t len)
{
    size_t off = 0;
    do {
        size_t n = len - off < SG_BLOB_PART ? len - off : SG_BLOB_PART, flen = 0;
        sg_autofree char *f = sg_blob_content_frame(sha, (int64_t)len, (int64_t)off, buf + off, n, &flen);
        sg_err err = {0};
        if (!f || sg_spool_append_blob(spool, f, flen, &err) < 0)
            return -1;
        off += n;
    } while (off < len);
    return 0;
}

/* Reads what rel is into ct->buf: 1 (bytes in *len; a link's target), 0
 * over the limit or not readable as bytes (a FIFO...), -1 gone. As the
 * watcher does (watch_read_state), only a regular file is opened to be
 * read: a FIFO or a device is looked at through O_PATH alone. */
static int read_entry(sg_contents *ct, const char *rel, struct stat *st, size_t *len)
{
    sg_autoclose int pfd = sg_open_beneath(ct->rootfd, rel, O_PATH);
    if (pfd < 0 || fstat(pfd, st) < 0)
        return -1;
    if (S_ISLNK(st->st_mode)) {
        ssize_t n = readlinkat(pfd, "", ct->buf, ct->max_file < PATH_MAX ? ct->max_file : PATH_MAX);
        if (n < 0)
            return -1;
        *len = (size_t)n;
        return 1;
    }
    if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size > ct->max_file)
        return 0;
    sg_autoclose int fd = sg_open_beneath(ct->rootfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0)
        return -1;
    if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size > ct->max_file)
        return 0;
    ssize_t got = sg_read_all(fd, ct->buf, ct->max_file + 1);
    if (got < 0)
        return -1;
    ct->read_bytes += (uint64_t)got;
    if ((uint64_t)got > ct->max_file) { /* grew past the limit as we read */
        st->st_size = got;
        return 0;
    }
    *len = (size_t)got;
    return 1;
}

const char *sg_contents_read_file(sg_contents *ct, const char *rel, size_t max, size_t *len,
                                  int64_t *mtime_ns)
{
    struct stat st = {0};
    if (!ct || !rel || read_entry(ct, rel, &st, len) != 1 || !S_ISREG(st.st_mode) || *len > max)
        return NULL;
    *mtime_ns = watch_ts_ns(&st.st_mtim);
    return ct->buf;
}

void sg_contents_capture(sg_contents *ct, struct sg_spool *spool, json_t *payload)
{
    const char *change = json_string_value(json_object_get(payload, "change"));
    if (!ct || !change || strcmp(change, "deleted") == 0)
        return;
    sg_autofree char *rel = payload_path(payload);
    struct stat st = {0};
    size_t len = 0;
    int r = rel ? read_entry(ct, rel, &st, &len) : -1;
    if (r < 0)
        return; /* gone already: its deletion follows */
    json_t *c = json_pack("{s:s, s:I, s:I}", "type", sg_watch_type_name(st.st_mode), "size",
                          (json_int_t)(r ? (int64_t)len : S_ISDIR(st.st_mode) ? 0 : st.st_size), "mode",
                          (json_int_t)(st.st_mode & 07777));
    if (!c)
        return;
    if (r == 0) {
        const char *sha = json_string_value(json_object_get(payload, "sha256"));
        if (S_ISREG(st.st_mode)) {
            json_object_set_new(c, "over_limit", json_true());
            if (sha)
                json_object_set_new(c, "sha256", json_string(sha));
        }
        json_object_set_new(c, "stored", json_false());
        json_object_set_new(payload, "content", c);
        return;
    }
    uint8_t sha[SG_SHA256_LEN];
    sg_sha256_buf(ct->buf, len, sha);
    char hx[2 * SG_SHA256_LEN + 1];
    hex(sha, SG_SHA256_LEN, hx);
    json_object_set_new(c, "sha256", json_string(hx));
    bool ok = sent_check(ct, sha, false) || spool_parts(spool, hx, ct->buf, len) == 0;
    if (ok)
        sent_check(ct, sha, true);
    json_object_set_new(c, "stored", json_boolean(ok));
    json_object_set_new(payload, "content", c);
}

void sg_contents_capture_bulk(sg_contents *ct, struct sg_spool *spool, json_t *payload)
{
    json_t *f;
    size_t i;
    json_array_foreach(json_object_get(payload, "files"), i, f)
        sg_contents_capture(ct, spool, f);
}

/* ---- recordings ------------------------------------------------------- */

#define CAST_TAIL_NS 1000000000ull /* the unfinished part goes at least this often */

struct sg_contents_cast {
    struct sg_spool *spool;
    int fd;
    int64_t off;         /* bytes sent */
    uint64_t last_ns;    /* when the last part went */
    char session[SG_BLOB_SESSION_MAX + 1];
    char *buf;           /* SG_BLOB_PART */
};

sg_contents_cast *sg_contents_cast_new(struct sg_spool *spool, const char *path, const char *session)
{
    if (!spool || !sg_blob_session_valid(session))
        return NULL;
    sg_contents_cast *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->spool = spool;
    k->buf = malloc(SG_BLOB_PART);
    k->fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    k->last_ns = sg_now_mono_ns();
    snprintf(k->session, sizeof k->session, "%s", session);
    if (!k->buf || k->fd < 0) {
        if (k->fd >= 0)
            close(k->fd);
        free(k->buf);
        free(k);
        return NULL;
    }
    return k;
}

void sg_contents_cast_pump(sg_contents_cast *k, bool final)
{
    if (!k)
        return;
    for (;;) {
        ssize_t n = pread(k->fd, k->buf, SG_BLOB_PART, k->off);
        if (n <= 0)
            return;
        uint64_t now = sg_now_mono_ns();
        if ((size_t)n < SG_BLOB_PART && !final && now - k->last_ns < CAST_TAIL_NS)
            return; /* a small tail: wait for more, or for the next second */
        size_t flen = 0;
        sg_autofree char *f = sg_blob_cast_frame(k->session, k->off, k->buf, (size_t)n, &flen);
        sg_err err = {0};
        if (!f || sg_spool_append_blob(k->spool, f, flen, &err) < 0)
            return; /* tried again at the next write */
        k->off += n;
        k->last_ns = now;
    }
}

void sg_contents_cast_end(sg_contents_cast *k)
{
    if (!k)
        return;
    sg_contents_cast_pump(k, true);
    close(k->fd);
    free(k->buf);
    free(k);
}

/* ---- the starting workspace ---------------------------------------------- */

char *sg_contents_known_line(const char *rel, const char *sha256, int fd)
{
    struct stat st;
    size_t n = strlen(rel);
    sg_autofree char *hx = malloc(2 * n + 1);
    if (!hx || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return NULL;
    hex((const uint8_t *)rel, n, hx);
    return sg_strdup_printf("%s %lld %llu %lld %s\n", sha256, (long long)st.st_size,
                            (unsigned long long)st.st_ino, (long long)watch_ts_ns(&st.st_mtim), hx);
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* One line (NUL-terminated, no newline) into known: 0, or -1 malformed. */
static int known_parse(json_t *known, char *line)
{
    char *f[5], *save = NULL;
    for (int i = 0; i < 5; i++)
        if (!(f[i] = strtok_r(i ? NULL : line, " ", &save)))
            return -1;
    if (strtok_r(NULL, " ", &save) || strlen(f[0]) != 2 * SG_SHA256_LEN || !is_hex(f[0], strlen(f[0])) ||
        !*f[4] || strlen(f[4]) % 2 || strlen(f[4]) > 2 * PATH_MAX || !is_hex(f[4], strlen(f[4])))
        return -1;
    long long v[3];
    for (int i = 0; i < 3; i++) {
        char *end = NULL;
        errno = 0;
        v[i] = strtoll(f[1 + i], &end, 10);
        if (errno || end == f[1 + i] || *end || v[i] < 0)
            return -1;
    }
    json_t *e = json_pack("[s, I, I, I]", f[0], (json_int_t)v[0], (json_int_t)v[1], (json_int_t)v[2]);
    return e && json_object_set_new(known, f[4], e) == 0 ? 0 : -1;
}

size_t sg_contents_load_known(sg_contents *ct, const char *path)
{
    sg_autoclose int fd = path ? open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1;
    if (path)
        unlink(path);
    struct stat st;
    /* only a regular file of this process's user, written by no one else */
    if (!ct || fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022) || (uint64_t)st.st_size > SG_CONTENTS_KNOWN_MAX)
        return 0;
    sg_autofree char *text = malloc((size_t)st.st_size + 1);
    ssize_t got = text ? sg_read_all(fd, text, (size_t)st.st_size + 1) : -1;
    if (got < 0 || got > st.st_size)
        return 0;
    text[got] = '\0';
    json_t *known = json_object();
    size_t n = 0;
    for (char *p = text, *nl; known && *p; p = nl + 1) {
        if (!(nl = strchr(p, '\n')) || ++n > SG_CONTENTS_SEED_MAX) {
            json_decref(known); /* a torn or oversized file: none of it */
            return 0;
        }
        *nl = '\0';
        if (known_parse(known, p) < 0) {
            json_decref(known);
            return 0;
        }
    }
    json_decref(ct->known);
    ct->known = known;
    return known ? json_object_size(known) : 0;
}

/* The known entry of rel when rel (of stat st) is still the file the CLI
 * wrote (a regular file of the listed size, inode and mtime, within the
 * size limit): its hex sha256, else NULL. */
static const char *known_entry(sg_contents *ct, const char *rel, const struct stat *st)
{
    if (!ct || !ct->known || !st || !S_ISREG(st->st_mode) || (uint64_t)st->st_size > ct->max_file)
        return NULL;
    size_t n = strlen(rel);
    sg_autofree char *hx = n <= PATH_MAX ? malloc(2 * n + 1) : NULL;
    if (!hx)
        return NULL;
    hex((const uint8_t *)rel, n, hx);
    json_t *e = json_object_get(ct->known, hx);
    const char *sha = json_string_value(json_array_get(e, 0));
    if (!sha || json_integer_value(json_array_get(e, 1)) != (json_int_t)st->st_size ||
        json_integer_value(json_array_get(e, 2)) != (json_int_t)st->st_ino ||
        json_integer_value(json_array_get(e, 3)) != (json_int_t)watch_ts_ns(&st->st_mtim))
        return NULL;
    return sha;
}

static void unhex_sha(const char *sha, uint8_t raw[SG_SHA256_LEN])
{
    for (size_t i = 0; i < SG_SHA256_LEN; i++) {
        unsigned v = 0;
        sscanf(sha + 2 * i, "%2x", &v);
        raw[i] = (uint8_t)v;
    }
}

bool sg_contents_known_sha(void *ud, const char *rel, const struct stat *st, uint8_t sha[SG_SHA256_LEN])
{
    const char *hx = known_entry(ud, rel, st);
    if (hx)
        unhex_sha(hx, sha);
    return hx != NULL;
}

/* The payload's content from the known files when rel is still the file
 * the CLI wrote: true, else false (read it). */
static bool seed_known(sg_contents *ct, const char *rel, const struct stat *st, json_t *payload)
{
    const char *sha = known_entry(ct, rel, st);
    json_t *c = sha ? json_pack("{s:s, s:I, s:I, s:s, s:b}", "type", "file", "size", (json_int_t)st->st_size,
                                "mode", (json_int_t)(st->st_mode & 07777), "sha256", sha, "stored", 1)
                    : NULL;
    if (!c)
        return false;
    uint8_t raw[SG_SHA256_LEN];
    unhex_sha(sha, raw);
    sent_check(ct, raw, true); /* the store has it: a later change back to it is not resent */
    json_object_set_new(payload, "content", c);
    return true;
}

typedef struct seed_walk {
    sg_contents *ct;
    struct sg_spool *spool;
    sg_contents_emit_fn emit;
    void *ud;
    uint64_t seen;
} seed_walk;

static void seed_entry(seed_walk *w, const char *rel, const struct stat *st, bool dir)
{
    if (++w->seen > SG_CONTENTS_SEED_MAX)
        return;
    /* A name that is not UTF-8: U+FFFD in "path", its bytes in path_hex (as
     * the watcher's file_diffs give it). */
    size_t n = strlen(rel), shown_len = 0;
    sg_autofree char *shown = sg_utf8_sanitize(rel, n, &shown_len);
    json_t *p = shown ? json_pack("{s:s, s:s, s:b}", "path", shown, "change", "created", "seed", 1) : NULL;
    if (!p)
        return;
    if (shown_len != n || memcmp(shown, rel, n) != 0) {
        sg_autofree char *hx = malloc(2 * n + 1);
        if (hx) {
            hex((const uint8_t *)rel, n, hx);
            json_object_set_new(p, "path_hex", json_string(hx));
        }
    }
    if (dir)
        json_object_set_new(p, "dir", json_true());
    if (dir || !seed_known(w->ct, rel, st, p))
        sg_contents_capture(w->ct, w->spool, p);
    json_t *c = json_object_get(p, "content");
    if (c) { /* the fields a file_diff has */
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t && strcmp(t, "file") && strcmp(t, "link") && strcmp(t, "dir")) /* a FIFO, socket or device */
            json_object_set(p, "type", json_object_get(c, "type"));
        json_object_set(p, "size", json_object_get(c, "size"));
        if (json_object_get(c, "sha256"))
            json_object_set(p, "sha256", json_object_get(c, "sha256"));
    }
    w->emit(w->ud, p);
}

/* The entries under dfd; an empty directory is an entry of its own (the
 * files imply the others). Returns whether it held any entry. */
static bool seed_dir(seed_walk *w, int dfd, const char *prefix, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return true; /* unreadable: not said to be empty */
    }
    bool any = false;
    struct dirent *e;
    while ((e = readdir(d)) && w->seen <= SG_CONTENTS_SEED_MAX) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        any = true;
        sg_autofree char *rel = prefix[0] ? sg_strdup_printf("%s/%s", prefix, e->d_name) : strdup(e->d_name);
        struct stat st;
        if (!rel || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            seed_entry(w, rel, &st, false);
            continue;
        }
        int sub = depth < SG_CONTENTS_SEED_DEPTH
                      ? openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (sub >= 0 && !seed_dir(w, sub, rel, depth + 1))
            seed_entry(w, rel, NULL, true);
    }
    closedir(d);
    return any;
}

uint64_t sg_contents_seed(sg_contents *ct, struct sg_spool *spool, sg_contents_emit_fn emit, void *ud)
{
    if (!ct || !emit)
        return 0;
    seed_walk w = {ct, spool, emit, ud, 0};
    int dfd = openat(ct->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        seed_dir(&w, dfd, "", 0);
    json_decref(ct->known); /* served the baseline and the seed: nothing after */
    ct->known = NULL;
    return w.seen;
}

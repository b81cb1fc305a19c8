/* checkpoint: content-addressed workspace snapshots in a bare libgit2
 * repository, and exact restore. The layout and rules are in checkpoint.h;
 * this file holds the commits (take, label, list, diff, restore), the
 * parts they use are in ckpt_internal.h. */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "checkpoint/ckpt_internal.h"

#define CKPT_REF "refs/heads/checkpoints"
#define BASE_REF "refs/sg/base" /* what the workspace was last made equal to */
#define TRAILER "sandglass-checkpoint:"
#define SIG "sandglass <sandglass@localhost>"

/* A learner renaming files while the workspace is walked makes a walk fail
 * with "changed under us" (EAGAIN, or a name gone or replaced between two
 * calls): the whole scan is taken again, at most SG_CKPT_RACE_TRIES times
 * with a short backoff, before the error is reported. */
static bool raced(const sg_err *e)
{
    switch (e->code) {
    case EAGAIN:
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EEXIST:
    case ENOTEMPTY:
    case ESTALE:
        return true;
    default:
        return false;
    }
}

/* After a failed try: true (having waited) when another one is due. */
static bool race_again(int try, int rc, const sg_err *err)
{
    if (rc == 0 || try + 1 >= SG_CKPT_RACE_TRIES || !raced(err))
        return false;
    struct timespec ts = {0, (10L << try) * 1000 * 1000}; /* 10, 20, 40 ms */
    nanosleep(&ts, NULL);
    return true;
}

/* ---------- commits ---------- */

static int latest(sg_ckpt_store *st, git_oid *out, sg_err *err)
{
    int r = git_reference_name_to_id(out, st->repo, CKPT_REF);
    if (r == GIT_ENOTFOUND)
        return sg_err_set(err, ENOENT, "no checkpoint yet");
    if (r < 0)
        return sg_ckpt_git_fail(err, "reading %s", CKPT_REF);
    return 0;
}

static bool parse_trailer(const char *msg, uint64_t *files, uint64_t *dirs, uint64_t *bytes, size_t *label_len)
{
    const char *t = NULL;
    for (const char *p = msg; (p = strstr(p, "\n\n" TRAILER)); p++)
        t = p;
    if (!t)
        return false;
    unsigned long long f, d, b;
    if (sscanf(t + 2, TRAILER " files=%llu dirs=%llu bytes=%llu", &f, &d, &b) != 3)
        return false;
    *files = f;
    *dirs = d;
    *bytes = b;
    *label_len = (size_t)(t - msg);
    return true;
}

/* A full id or a unique prefix (>= 4 hex chars) of one of our commits. */
static int resolve(sg_ckpt_store *st, const char *id, git_commit **out, sg_err *err)
{
    size_t len = id ? strlen(id) : 0;
    if (len < 4 || len > GIT_OID_HEXSZ || strspn(id, "0123456789abcdefABCDEF") != len)
        return sg_err_set(err, EINVAL, "invalid checkpoint id '%s'", id ? id : "");
    git_oid oid;
    if (git_oid_fromstrn(&oid, id, len) < 0)
        return sg_err_set(err, EINVAL, "invalid checkpoint id '%s'", id);
    int r = git_commit_lookup_prefix(out, st->repo, &oid, len);
    if (r == GIT_EAMBIGUOUS)
        return sg_err_set(err, EINVAL, "checkpoint id '%s' is ambiguous", id);
    if (r < 0)
        return sg_err_set(err, ENOENT, "no checkpoint '%s'", id);
    uint64_t f, d, b;
    size_t ll;
    if (!parse_trailer(git_commit_message_raw(*out), &f, &d, &b, &ll)) {
        git_commit_free(*out);
        *out = NULL;
        return sg_err_set(err, EINVAL, "'%s' is not a checkpoint", id);
    }
    return 0;
}

static char *clean_label(const char *label)
{
    if (!label || !*label)
        label = "checkpoint";
    size_t n = strnlen(label, SG_CKPT_LABEL_MAX);
    if (n == SG_CKPT_LABEL_MAX) /* do not cut a UTF-8 sequence in half */
        while (n > 0 && ((unsigned char)label[n] & 0xc0) == 0x80)
            n--;
    char *s = sg_xrealloc(NULL, n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)label[i];
        s[i] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
    }
    s[n] = '\0';
    return s;
}

int sg_checkpoint_latest(sg_ckpt_store *st, char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err)
{
    git_oid oid;
    if (latest(st, &oid, err) < 0)
        return -1;
    git_oid_tostr(id_out, SG_CHECKPOINT_ID_LEN + 1, &oid);
    return 0;
}

int sg_checkpoint_take(sg_ckpt_store *st, const char *label, char id_out[SG_CHECKPOINT_ID_LEN + 1],
                       sg_checkpoint_stats *stats, sg_err *err)
{
    return sg_checkpoint_take_ex(st, label, false, id_out, stats, NULL, err);
}

/* Labels of checkpoints that reused the newest one (an unchanged
 * workspace): "<id> <label>" lines, appended; listed after their commit. */
#define ALIASES_FILE "sg-aliases"

/* All the lines in one write: a batch of labels (the supervisor sends up
 * to 256 at once) costs one open and one append, not one each. */
static int alias_append(sg_ckpt_store *st, const char *id, char *const *labels, const int64_t *times,
                        size_t n, sg_err *err)
{
    sg_autofree char *path = sg_strdup_printf("%s/" ALIASES_FILE, st->repo_dir);
    sg_autobuf sg_buf buf = {0};
    for (size_t i = 0; i < n; i++) {
        sg_autofree char *lab = clean_label(labels[i]);
        if (sg_buf_printf(&buf, "%s %lld %s\n", id, (long long)times[i], lab) < 0)
            sg_oom(); /* this module's policy (util.h), as sg_xrealloc was */
    }
    if (!buf.len)
        return 0;
    sg_autoclose int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || sg_write_all(fd, buf.data, buf.len) < 0)
        return sg_err_sys(err, "cannot record checkpoint label in %s", path);
    return 0;
}

int sg_checkpoint_alias(sg_ckpt_store *st, const char *id, char *const *labels, const int64_t *times,
                        size_t n, sg_err *err)
{
    SG_CKPT_STORE_LOCKED(st);
    git_oid head;
    char hex[SG_CHECKPOINT_ID_LEN + 1];
    if (latest(st, &head, err) < 0)
        return -1;
    git_oid_tostr(hex, sizeof hex, &head);
    if (strcmp(hex, id) != 0)
        return sg_err_set(err, EINVAL, "checkpoint %s is not the newest (%s): no label for it", id, hex);
    /* After a restore the workspace is another checkpoint's state. */
    git_oid base;
    if (git_reference_name_to_id(&base, st->repo, BASE_REF) == 0 && !git_oid_equal(&base, &head))
        return sg_err_set(err, EINVAL, "the workspace was restored since checkpoint %s: no label for it", id);
    git_error_clear();
    return alias_append(st, id, labels, times, n, err);
}

/* The commits a take compares with and builds on. */
typedef struct take_refs {
    git_oid parent, parent_tree; /* the newest checkpoint */
    git_oid base, base_tree;     /* what the workspace was last made equal to */
    bool have_parent, have_base;
} take_refs;

static int take_find_refs(sg_ckpt_store *st, take_refs *r, sg_err *err)
{
    int rc = 0;
    sg_err e2 = {0};
    if (latest(st, &r->parent, &e2) == 0) {
        git_commit *pc = NULL;
        if (git_commit_lookup(&pc, st->repo, &r->parent) < 0)
            rc = sg_ckpt_git_fail(err, "previous checkpoint");
        else {
            r->parent_tree = *git_commit_tree_id(pc);
            r->have_parent = true;
            git_commit_free(pc);
        }
    } else if (e2.code != ENOENT) {
        *err = e2;
        rc = -1;
    }
    /* "changed" counts against the state the workspace was last known to
     * be in: the last checkpoint, or the one last restored. */
    if (rc == 0 && git_reference_name_to_id(&r->base, st->repo, BASE_REF) == 0) {
        git_commit *bc = NULL;
        if (git_commit_lookup(&bc, st->repo, &r->base) == 0) {
            r->base_tree = *git_commit_tree_id(bc);
            r->have_base = true;
            git_commit_free(bc);
        }
    }
    return rc;
}

/* Nothing changed since the newest checkpoint: this is it again. Only its
 * label is recorded (an O_APPEND line, no object, no ref). */
static int take_reuse(sg_ckpt_store *st, const char *label, const take_refs *r, const scan *s,
                      char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stats, bool *reused,
                      sg_err *err)
{
    git_oid_tostr(id_out, SG_CHECKPOINT_ID_LEN + 1, &r->base);
    char *one[1] = {(char *)label};
    int64_t now = (int64_t)time(NULL);
    int rc = alias_append(st, id_out, one, &now, 1, err);
    if (rc == 0 && stats) {
        *stats = s->stats;
        stats->changed = 0;
    }
    if (rc == 0 && reused)
        *reused = true;
    return rc;
}

/* Writes the commit object of a new checkpoint of tree `root`. */
static int take_write_commit(sg_ckpt_store *st, const char *label, const node *root, const scan *s,
                             const take_refs *r, git_oid *commit, sg_err *err)
{
    sg_autofree char *lab = clean_label(label);
    char tree_hex[GIT_OID_HEXSZ + 1], parent_hex[GIT_OID_HEXSZ + 1];
    git_oid_tostr(tree_hex, sizeof tree_hex, &root->oid);
    long long now = (long long)time(NULL);
    sg_autobuf sg_buf b = {0};
    sg_autofree char *head = sg_strdup_printf("tree %s\n", tree_hex);
    sg_ckpt_sb_str(&b, head);
    if (r->have_parent) {
        git_oid_tostr(parent_hex, sizeof parent_hex, &r->parent);
        sg_autofree char *pl = sg_strdup_printf("parent %s\n", parent_hex);
        sg_ckpt_sb_str(&b, pl);
    }
    sg_autofree char *rest = sg_strdup_printf(
        "author " SIG " %lld +0000\ncommitter " SIG " %lld +0000\n\n%s\n\n" TRAILER
        " files=%llu dirs=%llu bytes=%llu\n",
        now, now, lab, (unsigned long long)s->stats.files, (unsigned long long)s->stats.dirs,
        (unsigned long long)s->stats.bytes);
    sg_ckpt_sb_str(&b, rest);
    return sg_ckpt_put_obj(st, true, commit, b.data, b.len, GIT_OBJECT_COMMIT, err);
}

/* Points the checkpoints ref (and, unless unchanged, the base) at commit. */
static int take_update_refs(sg_ckpt_store *st, const git_oid *commit, bool unchanged, sg_err *err)
{
    int rc = 0;
    git_reference *ref = NULL;
    if (git_reference_create(&ref, st->repo, CKPT_REF, commit, 1, "checkpoint") < 0)
        rc = sg_ckpt_git_fail(err, "updating %s", CKPT_REF);
    git_reference_free(ref);
    ref = NULL;
    if (rc == 0 && !unchanged &&
        git_reference_create(&ref, st->repo, BASE_REF, commit, 1, "checkpoint") < 0)
        rc = sg_ckpt_git_fail(err, "updating %s", BASE_REF);
    git_reference_free(ref);
    if (rc == 0 && !unchanged) {
        sg_err e3 = {0};
        (void)sg_ckpt_cache_save(st, &e3); /* a lost cache only costs time */
    }
    return rc;
}

static int take_once(sg_ckpt_store *st, const char *label, bool reuse_unchanged, char id_out[SG_CHECKPOINT_ID_LEN + 1],
                     sg_checkpoint_stats *stats, bool *reused, sg_err *err)
{
    scan s;
    node root;
    int rc = sg_ckpt_scan_workspace(st, &s, true, &root, NULL, err);
    take_refs r = {0};
    if (rc == 0)
        rc = take_find_refs(st, &r, err);
    git_error_clear();
    cmpx c = {.st = st, .err = err};
    if (rc == 0)
        rc = sg_ckpt_compare(&c, -1, &root, r.have_base ? &r.base_tree : r.have_parent ? &r.parent_tree : NULL);
    if (rc == 0 && reuse_unchanged && r.have_base && r.have_parent && git_oid_equal(&r.base, &r.parent) &&
        git_oid_equal(&root.oid, &r.base_tree) && c.nchanged == 0) {
        rc = take_reuse(st, label, &r, &s, id_out, stats, reused, err);
    } else {
        git_oid commit;
        if (rc == 0)
            rc = take_write_commit(st, label, &root, &s, &r, &commit, err);
        /* An unchanged workspace keeps its base (same tree) and its stat
         * cache: one object and one ref is all the exec path pays then. */
        if (rc == 0)
            rc = take_update_refs(st, &commit,
                                  r.have_base && git_oid_equal(&root.oid, &r.base_tree) && c.nchanged == 0, err);
        sg_ckpt_usage_save(st); /* what was written counts, even for a failed take */
        if (rc == 0) {
            git_oid_tostr(id_out, SG_CHECKPOINT_ID_LEN + 1, &commit);
            if (stats) {
                *stats = s.stats;
                stats->changed = c.nchanged;
            }
        }
    }
    sg_ckpt_cmpx_free(&c);
    sg_ckpt_node_free(&root);
    sg_ckpt_scan_free(&s);
    return rc;
}

int sg_checkpoint_take_ex(sg_ckpt_store *st, const char *label, bool reuse_unchanged,
                          char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stats, bool *reused, sg_err *err)
{
    SG_CKPT_STORE_LOCKED(st);
    if (reused)
        *reused = false;
    int rc, try = 0;
    do
        rc = take_once(st, label, reuse_unchanged, id_out, stats, reused, err);
    while (race_again(try++, rc, err));
    if (rc < 0)
        sg_err_prefix(err, "checkpoint");
    return rc;
}

int sg_checkpoint_list(sg_ckpt_store *st, sg_checkpoint_info **out, size_t *nout, sg_err *err)
{
    *out = NULL;
    *nout = 0;
    git_oid head;
    sg_err e = {0};
    if (latest(st, &head, &e) < 0) {
        if (e.code == ENOENT)
            return 0;
        *err = e;
        return -1;
    }
    git_revwalk *w = NULL;
    if (git_revwalk_new(&w, st->repo) < 0)
        return sg_ckpt_git_fail(err, "listing checkpoints");
    git_revwalk_sorting(w, GIT_SORT_TOPOLOGICAL | GIT_SORT_REVERSE);
    git_revwalk_simplify_first_parent(w);
    if (git_revwalk_push(w, &head) < 0) {
        git_revwalk_free(w);
        return sg_ckpt_git_fail(err, "listing checkpoints");
    }
    sg_checkpoint_info *v = NULL;
    size_t n = 0, cap = 0;
    git_oid oid;
    int rc = 0, r;
    while ((r = git_revwalk_next(&oid, w)) == 0) {
        git_commit *cm = NULL;
        if (git_commit_lookup(&cm, st->repo, &oid) < 0) {
            rc = sg_ckpt_git_fail(err, "listing checkpoints");
            break;
        }
        const char *msg = git_commit_message_raw(cm);
        uint64_t f = 0, d = 0, b = 0;
        size_t ll = 0;
        if (!parse_trailer(msg, &f, &d, &b, &ll)) {
            git_commit_free(cm);
            continue;
        }
        sg_xgrow(&v, &cap, n + 1, sizeof *v);
        sg_checkpoint_info *x = &v[n++];
        memset(x, 0, sizeof *x);
        git_oid_tostr(x->id, sizeof x->id, &oid);
        x->label = strndup(msg, ll);
        if (!x->label)
            abort();
        x->time = (int64_t)git_commit_time(cm);
        x->files = f;
        x->dirs = d;
        x->bytes = b;
        git_commit_free(cm);
    }
    if (rc == 0 && r != GIT_ITEROVER)
        rc = sg_ckpt_git_fail(err, "listing checkpoints");
    git_revwalk_free(w);
    if (rc < 0) {
        sg_checkpoint_infos_free(v, n);
        return rc;
    }
    /* Reused checkpoints: each label goes right after its commit (an alias
     * always names the newest commit when it was written). */
    sg_autofree char *apath = sg_strdup_printf("%s/" ALIASES_FILE, st->repo_dir);
    sg_autofclose FILE *af = fopen(apath, "re");
    char line[SG_CKPT_LABEL_MAX + 128];
    while (af && fgets(line, sizeof line, af)) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *sp1 = strchr(line, ' ');
        char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2 || sp1 - line != SG_CHECKPOINT_ID_LEN)
            continue;
        *sp1 = '\0';
        size_t at = n;
        for (size_t i = n; i-- > 0;)
            if (strcmp(v[i].id, line) == 0) {
                at = i + 1;
                while (at < n && strcmp(v[at].id, line) == 0)
                    at++; /* after earlier aliases of the same commit */
                break;
            }
        if (at == n && (n == 0 || strcmp(v[n - 1].id, line) != 0))
            continue; /* names no listed commit */
        sg_xgrow(&v, &cap, n + 1, sizeof *v);
        memmove(&v[at + 1], &v[at], (n - at) * sizeof *v);
        n++;
        sg_checkpoint_info *x = &v[at];
        *x = v[at - 1];
        x->label = strdup(sp2 + 1);
        if (!x->label)
            abort();
        x->time = strtoll(sp1 + 1, NULL, 10);
    }
    *out = v;
    *nout = n;
    return 0;
}

static int change_cmp(const void *a, const void *b)
{
    return strcmp(((const sg_checkpoint_change *)a)->path, ((const sg_checkpoint_change *)b)->path);
}

static int diff_once(sg_ckpt_store *st, const git_oid *target, sg_checkpoint_change **out, size_t *nout, sg_err *err)
{
    scan s;
    node root;
    int rc = sg_ckpt_scan_workspace(st, &s, false, &root, NULL, err);
    cmpx c = {.st = st, .err = err, .collect = true};
    if (rc == 0)
        rc = sg_ckpt_compare(&c, -1, &root, target);
    if (rc == 0) {
        if (c.nch)
            qsort(c.ch, c.nch, sizeof(*c.ch), change_cmp);
        *out = c.ch;
        *nout = c.nch;
        c.ch = NULL;
        c.nch = 0;
    }
    sg_ckpt_cmpx_free(&c);
    sg_ckpt_node_free(&root);
    sg_ckpt_scan_free(&s);
    return rc;
}

int sg_checkpoint_diff(sg_ckpt_store *st, const char *id, sg_checkpoint_change **out, size_t *nout, sg_err *err)
{
    *out = NULL;
    *nout = 0;
    SG_CKPT_STORE_LOCKED(st);
    git_commit *cm = NULL;
    if (resolve(st, id, &cm, err) < 0)
        return -1;
    git_oid target = *git_commit_tree_id(cm);
    git_commit_free(cm);
    int rc, try = 0;
    do
        rc = diff_once(st, &target, out, nout, err);
    while (race_again(try++, rc, err));
    if (rc < 0)
        sg_err_prefix(err, "checkpoint diff");
    return rc;
}

/* One try at making the workspace equal to tree target (its scan, then the
 * changes); *s and *c are the caller's to free. */
static int restore_once(sg_ckpt_store *st, const git_oid *target, scan *s, cmpx *c, sg_err *err)
{
    node root;
    sg_autoclose int root_fd = -1;
    int rc = sg_ckpt_scan_workspace(st, s, false, &root, &root_fd, err);
    *c = (cmpx){.st = st, .err = err, .apply = true};
    if (rc == 0)
        rc = sg_ckpt_compare(c, root_fd, &root, target);
    sg_ckpt_node_free(&root);
    return rc;
}

int sg_checkpoint_restore(sg_ckpt_store *st, const char *id, sg_checkpoint_stats *stats, sg_err *err)
{
    SG_CKPT_STORE_LOCKED(st);
    git_commit *cm = NULL;
    if (resolve(st, id, &cm, err) < 0)
        return -1;
    git_oid target = *git_commit_tree_id(cm);
    git_oid target_commit = *git_commit_id(cm);
    uint64_t f = 0, d = 0, b = 0;
    size_t ll;
    parse_trailer(git_commit_message_raw(cm), &f, &d, &b, &ll);
    git_commit_free(cm);

    scan s;
    cmpx c;
    int rc, try = 0;
    for (;;) {
        rc = restore_once(st, &target, &s, &c, err);
        if (!race_again(try++, rc, err))
            break;
        sg_ckpt_cmpx_free(&c);
        sg_ckpt_scan_free(&s);
    }
    /* Entries of files left alone stay valid; replaced files have new
     * inodes and ctimes, so stale entries can never match them. */
    sg_err e3 = {0};
    if (rc == 0)
        (void)sg_ckpt_cache_save(st, &e3);
    if (rc == 0) {
        git_reference *ref = NULL;
        if (git_reference_create(&ref, st->repo, BASE_REF, &target_commit, 1, "restore") < 0)
            rc = sg_ckpt_git_fail(err, "updating %s", BASE_REF);
        git_reference_free(ref);
    }
    if (rc == 0 && stats) {
        memset(stats, 0, sizeof *stats);
        stats->files = f;
        stats->dirs = d;
        stats->bytes = b;
        stats->changed = c.nchanged;
        stats->hashed = s.stats.hashed;
        stats->unrestorable = c.unrestorable;
    }
    sg_ckpt_cmpx_free(&c);
    sg_ckpt_scan_free(&s);
    if (rc < 0)
        sg_err_prefix(err, "rollback to %s", id);
    return rc;
}


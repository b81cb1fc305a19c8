/* watch_resolve: a settled burst of dirty paths resolved into file_diff
 * payloads (renames, replacements, diffs against the last content seen),
 * and the limit events. See watch.h for the rules. */
#include "capture/watch_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"

/* ---- resolution ----------------------------------------------------------- */

enum act_kind { ACT_DEL, ACT_REN, ACT_MOD, ACT_CRE };

typedef struct action {
    enum act_kind kind;
    node *n;            /* tree node (NULL for a deletion) */
    node *old;          /* whose st is the old content: n, a grave, or NULL */
    char *path;         /* current path (deleted: the old path) */
    fstate cur;
    node *replaced;     /* renamed over an existing file: that file (a grave) */
} action;

static int grave_cmp(const void *a, const void *b)
{
    return strcmp((*(node *const *)a)->orig_path, (*(node *const *)b)->orig_path);
}

/* The unclaimed grave at path among the first n (sorted) graves. */
static node *grave_find(sg_watch *w, size_t n, const char *path)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(w->graves[mid]->orig_path, path);
        if (!c)
            return w->graves[mid]->dirty ? NULL : w->graves[mid]; /* dirty: consumed */
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int act_cmp(const void *a, const void *b)
{
    const action *x = a, *y = b;
    if (x->kind != y->kind)
        return (int)x->kind - (int)y->kind;
    if (x->kind == ACT_REN)
        return x->n->move_seq < y->n->move_seq ? -1 : x->n->move_seq > y->n->move_seq;
    return strcmp(x->path, y->path);
}

static json_t *jstr_path(const char *p)
{
    sg_autofree char *s = sg_utf8_sanitize(p, strlen(p), NULL);
    return s ? json_string(s) : NULL;
}

#define SG_WATCH_PATH_HEX_MAX 4096 /* bytes of a path given in path_hex, at most */

/* A path that is not valid UTF-8 shows with U+FFFD in "path" (JSON can
 * carry nothing else), so two such files could share it: its bytes go
 * beside it, in hex, so every path in the events is told apart and can be
 * given back exactly. NULL for a valid path. */
static json_t *jhex_path_if_invalid(const char *p)
{
    size_t n = strlen(p), clean_len = 0;
    /* Bounded: a learner nests paths far past PATH_MAX, and a file_diff
     * frame must stay under the ingest's frame limit (path, old_path and
     * their U+FFFD forms are already in it). Past the bound: no hex. */
    if (n > SG_WATCH_PATH_HEX_MAX)
        return NULL;
    sg_autofree char *s = sg_utf8_sanitize(p, n, &clean_len);
    if (s && clean_len == n && memcmp(s, p, n) == 0)
        return NULL;
    sg_autofree char *hex = malloc(2 * n + 1);
    if (!hex)
        return NULL;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[(unsigned char)p[i] >> 4];
        hex[2 * i + 1] = digits[(unsigned char)p[i] & 15];
    }
    hex[2 * n] = '\0';
    return json_string(hex);
}

/* What a change is, in a file_diff payload or a bulk one's entry: its
 * paths, the change, the new content's size and hash. */
static void put_identity(json_t *p, const action *a)
{
    static const char *names[] = {"deleted", "renamed", "modified", "created"};
    json_object_set_new(p, "path", jstr_path(a->path));
    json_t *raw = jhex_path_if_invalid(a->path);
    if (raw)
        json_object_set_new(p, "path_hex", raw);
    json_object_set_new(p, "change", json_string(names[a->kind]));
    if (a->kind == ACT_REN) {
        json_object_set_new(p, "old_path", jstr_path(a->old->orig_path));
        json_t *oraw = jhex_path_if_invalid(a->old->orig_path);
        if (oraw)
            json_object_set_new(p, "old_path_hex", oraw);
    }
    if (a->kind != ACT_DEL && watch_is_special(&a->cur))
        json_object_set_new(p, "type", json_string(sg_watch_type_name(a->cur.mode)));
    if (a->kind != ACT_DEL) {
        json_object_set_new(p, "size", json_integer(a->cur.size));
        if (a->cur.has_sha) {
            char hex[SG_DIFF_SHA256_HEX];
            sg_diff_hex(a->cur.sha, hex);
            json_object_set_new(p, "sha256", json_string(hex));
        }
    }
}

static json_t *build_payload(sg_watch *w, const action *a)
{
    json_t *p = json_object();
    if (!p)
        return NULL;
    put_identity(p, a);
    const fstate *old = a->replaced ? &a->replaced->st : a->old ? &a->old->st : NULL;
    if (a->replaced)
        json_object_set_new(p, "replaced", json_true());
    const fstate *nw = a->kind == ACT_DEL ? NULL : &a->cur;
    if (nw && watch_is_special(nw))
        return p; /* its type alone: nothing was read, no diff */
    const fstate *flags = nw ? nw : old;
    if (flags->large) {
        json_object_set_new(p, "truncated", json_true());
        if (flags->binary)
            json_object_set_new(p, "binary", json_true());
        return p;
    }
    if (flags->binary) {
        json_object_set_new(p, "binary", json_true());
        return p;
    }
    const char *otext = NULL, *ntext = NULL;
    size_t olen = 0, nlen = 0;
    if (nw) {
        ntext = nw->text ? nw->text : "";
        nlen = nw->text_len;
    }
    if (old) {
        if (old->dropped) {
            json_object_set_new(p, "diff_unavailable", json_true());
            return p;
        }
        if (old->large || old->binary) {
            json_object_set_new(p, "diff_base", json_string("empty"));
            otext = "";
        } else {
            otext = old->text ? old->text : "";
            olen = old->text_len;
        }
    }
    sg_diff_result r;
    sg_err err = {0};
    /* The diff names the current path on both sides (the rename is in
     * old_path). */
    if (w->differ(w->differ_ud, a->path, otext, olen, ntext, nlen, &r, &err) < 0) {
        json_object_set_new(p, "diff_unavailable", json_true());
        return p;
    }
    json_t *d = json_stringn(r.text, r.len);
    if (d) {
        json_object_set_new(p, "diff", d);
        json_object_set_new(p, "added", json_integer((json_int_t)r.added));
        json_object_set_new(p, "removed", json_integer((json_int_t)r.removed));
    } else {
        json_object_set_new(p, "diff_unavailable", json_true());
    }
    sg_diff_result_clear(&r);
    return p;
}

/* Limit events (sg_watch_set_limit_cb): the first directory past the
 * watch budget, each overflow rescan, each growth of the untracked count. */
static void report_limits(sg_watch *w)
{
    if (!w->limit_cb)
        return;
    if (w->unwatched && !w->rep_unwatched) {
        w->rep_unwatched = true;
        w->limit_cb(w->limit_ud, json_pack("{s:s, s:I, s:I, s:I, s:s}", "what", "watches",
            "limit", (json_int_t)w->max_watches, "host_max_user_watches", (json_int_t)w->host_watches,
            "unwatched_dirs", (json_int_t)w->unwatched,
            "degraded", "directories past the limit are rescanned at each flush (every exec's end)"));
    }
    if (w->overflows > w->rep_overflows) {
        w->rep_overflows = w->overflows;
        w->limit_cb(w->limit_ud, json_pack("{s:s, s:I, s:s}", "what", "watch_overflow",
            "overflows", (json_int_t)w->overflows,
            "degraded", "the kernel's event queue overflowed: changes found by a full rescan"));
    }
    if (w->dropped > w->rep_dropped) {
        w->rep_dropped = w->dropped;
        w->limit_cb(w->limit_ud, json_pack("{s:s, s:I, s:I, s:I}", "what", "watch_untracked",
            "untracked", (json_int_t)w->dropped, "max_files", (json_int_t)SG_WATCH_MAX_FILES,
            "max_dirs", (json_int_t)SG_WATCH_MAX_DIRS));
    }
}

void sg_watch_charge_read(sg_watch *w, uint64_t bytes)
{
    if (w && bytes) /* the bucket only: read_bytes is the watcher's own (its turns count it) */
        w->read_tokens -= (int64_t)bytes;
}

void sg_watch_set_gate(sg_watch *w, sg_watch_gate_fn gate, void *userdata)
{
    w->gate = gate;
    w->gate_ud = userdata;
}

void sg_watch_set_bulk_cb(sg_watch *w, sg_watch_cb cb, void *userdata)
{
    w->bulk_cb = cb;
    w->bulk_ud = userdata;
}

/* The bulk payload being filled goes to the owner. */
static void bulk_flush(sg_watch *w)
{
    if (!w->bulk)
        return;
    json_t *p = json_pack("{s:o, s:I}", "files", w->bulk, "count", (json_int_t)json_array_size(w->bulk));
    w->bulk = NULL;
    w->bulk_bytes = 0;
    if (p)
        w->bulk_cb(w->bulk_ud, p);
}

/* A change past the gate, listed in a bulk payload: its path, change,
 * size and hash (no diff). A path costs at most 6 bytes a byte in JSON
 * (\u00XX), its hex 2: the estimate is from above, so that a payload
 * stays under the frame limit. */
static void bulk_add(sg_watch *w, const action *a)
{
    size_t cost = 8 * strlen(a->path) + 160;
    if (a->kind == ACT_REN)
        cost += 8 * strlen(a->old->orig_path);
    if (w->bulk && w->bulk_bytes + cost > SG_WATCH_BULK_BYTES)
        bulk_flush(w);
    json_t *f = json_object();
    if (!f)
        return;
    put_identity(f, a);
    if (!w->bulk)
        w->bulk = json_array();
    json_array_append_new(w->bulk, f);
    w->bulk_bytes += cost;
}

void sg_watch_set_limit_cb(sg_watch *w, sg_watch_cb cb, void *userdata)
{
    w->limit_cb = cb;
    w->limit_ud = userdata;
}

/* The actions list being built by one resolution. */
typedef struct action_list {
    action *v;
    size_t n, cap;
} action_list;

static void add_action(action_list *l, action a)
{
    sg_xgrow(&l->v, &l->cap, l->n + 1, sizeof *l->v);
    l->v[l->n++] = a;
}

/* A file made since the baseline and never reported waits the hold
 * (sg_watch_new_ext) before it is read: an editor's temporary file is
 * renamed into place (or removed) within it, and is never reported. */
static bool held_new(const sg_watch *w, const node *n, uint64_t now)
{
    return w->hold_ns && !n->rep && n->born_ns && now - n->born_ns < w->hold_ns;
}

/* A new file where a grave is: it replaces it (an editor's save), so it
 * is not held. */
static bool new_claims_grave(sg_watch *w, size_t nsorted, const node *n)
{
    if (!nsorted)
        return false;
    sg_autofree char *path = watch_node_path(n);
    return grave_find(w, nsorted, path) != NULL;
}


/* A grave not yet claimed is kept through the hold (from when its file
 * left), and as long as a file at its path is still to be read: an
 * editor's backup by rename (`calc.py` -> `calc.py~`, a new `calc.py`
 * written) then gives one `modified` against the old content. */
static bool grave_held(sg_watch *w, const node *g, bool force, uint64_t now)
{
    if (force || !w->hold_ns || w->ngraves > SG_WATCH_HOLD_MAX)
        return false;
    if (now - g->dirty_ns < w->hold_ns)
        return true;
    node *k = watch_path_find(w, g->orig_path);
    return k && !k->is_dir && k->dirty;
}

uint64_t watch_next_due(sg_watch *w, uint64_t now)
{
    uint64_t cap_ns = SG_WATCH_CAP_MS * 1000000ull, soonest = UINT64_MAX;
    size_t visits = 0;
    for (node *n = w->dhead; n; n = n->dnext) {
        uint64_t left;
        if (visits++ >= SG_WATCH_HOLD_MAX + SG_WATCH_WALK_SKIP) {
            /* a long list (read_ready's bound): the rest after a turn */
            left = SG_WATCH_TURN_US * 1000ull;
            soonest = left < soonest ? left : soonest;
            break;
        }
        if (held_new(w, n, now)) {
            left = n->born_ns + w->hold_ns - now;
        } else if (!n->writing) {
            /* put off only because the turn's slice was full: due after
             * one more turn's length (the loop's other work between), not
             * after a writer's wait; the byte bucket still paces it */
            left = SG_WATCH_TURN_US * 1000ull;
        } else {
            uint64_t age = now - n->dirty_ns;
            left = age >= cap_ns ? 0 : cap_ns - age;
        }
        if (left < soonest)
            soonest = left;
    }
    for (size_t i = 0; i < w->ngraves; i++) {
        const node *g = w->graves[i];
        uint64_t age = now - g->dirty_ns;
        if (w->hold_ns && age < w->hold_ns && w->hold_ns - age < soonest)
            soonest = w->hold_ns - age;
    }
    return soonest == UINT64_MAX ? cap_ns : soonest;
}

/* Takes the ready dirty paths off the dirty list and reads their current
 * states; the gone ones leave the tree first so that the graveyard is
 * complete before anything is matched against it. */
static void read_ready(sg_watch *w, bool force, action_list *acts, bool *deferred, bool *text_full)
{
    uint64_t now = sg_now_mono_ns();
    node **work = NULL;
    size_t nwork = 0, wcap = 0, nsorted = w->ngraves, held = 0;
    if (nsorted && w->hold_ns)
        qsort(w->graves, nsorted, sizeof(*w->graves), grave_cmp);
    bool full = force;
    size_t max_files = (size_t)((full ? SG_WATCH_FLUSH_US : SG_WATCH_TURN_US) * 1000ull / (w->file_cost_ns | 1));
    /* The walk itself is bounded: a learner can make the dirty list as
     * long as the workspace (130,000 files touched after an overflow), and
     * walking all of it to take this turn's few and put the rest back cost
     * 50-170 ms a turn. The oldest come first; the rest wait in place (and
     * may claim a grave: the deletions wait with them). */
    size_t visits = 0, max_visits = max_files + SG_WATCH_HOLD_MAX + SG_WATCH_WALK_SKIP;
    for (node *n = w->dhead, *next; n; n = next) {
        next = n->dnext;
        if (nwork > max_files || visits++ >= max_visits) {
            *deferred = true;
            break;
        }
        if (!force && n->writing && now - n->dirty_ns < SG_WATCH_CAP_MS * 1000000ull)
            continue;
        if (!force && held < SG_WATCH_HOLD_MAX && held_new(w, n, now) && !new_claims_grave(w, nsorted, n)) {
            held++;
            continue;
        }
        watch_dirty_unlink(w, n);
        sg_xgrow(&work, &wcap, nwork + 1, sizeof *work);
        work[nwork++] = n;
    }
    /* The read budget: past the bucket or this turn's slice (a flush has
     * no slice of its own), the rest waits on the dirty list. */
    uint64_t start = w->read_bytes, turn = 0, slice = full ? SG_WATCH_READ_BURST : SG_WATCH_READ_SLICE;
    bool over = false;
    size_t text_held = 0; /* text read this round, held until its diff: at most the cache's bound */
    for (size_t i = 0; i < nwork; i++) {
        node *n = work[i];
        if (!over && text_held >= SG_WATCH_CACHE_MAX) {
            over = true;
            *text_full = true;
        }
        if (!over) {
            uint64_t used = w->read_bytes - start;
            start = w->read_bytes;
            w->read_tokens -= (int64_t)used;
            turn += used;
            if (i > 0)
                w->read_tokens -= SG_WATCH_FILE_COST; /* the open, the stat: a file is never free */
            over = turn >= slice || (i > 0 && i >= max_files) || watch_budget_wait(w) > 0 ||
                   (i > 0 && watch_yield(w));
        }
        if (over) {
            watch_dirty_mark(w, n, -1);
            w->read_deferred++;
            *deferred = true;
            continue;
        }
        char *path = watch_node_path(n);
        fstate cur;
        int r = watch_read_state(w, path, &cur);
        if (r == 0) {
            free(path);
            watch_node_detach(w, n, true);
            continue;
        }
        if (r < 0) {
            free(path);
            continue;
        }
        text_held += cur.text_len;
        add_action(acts, (action){ACT_MOD, n, NULL, path, cur, NULL});
    }
    w->read_tokens -= (int64_t)(w->read_bytes - start);
    free(work);
}

/* Decides what each read path is (renamed, modified, created, or nothing
 * at all) against its last content and the graveyard; then what is left in
 * the graveyard is deleted. A grave is "consumed" (dirty flag reused: graves
 * are never on the dirty list) when a file at its path replaces it. */
static void classify(sg_watch *w, action_list *acts, bool deferred, bool force)
{
    uint64_t now = sg_now_mono_ns();
    if (w->ngraves)
        qsort(w->graves, w->ngraves, sizeof(*w->graves), grave_cmp);
    size_t keep = 0;
    for (size_t i = 0; i < acts->n; i++) {
        action *a = &acts->v[i];
        node *n = a->n;
        node *g = grave_find(w, w->ngraves, a->path);
        if (n->rep) {
            const char *opath = n->orig_path ? n->orig_path : a->path;
            if (strcmp(opath, a->path)) {
                a->kind = ACT_REN;
                a->old = n;
                if (g) {
                    /* `mv tmp target`: the diff is against what target held */
                    g->dirty = true;
                    a->replaced = g;
                }
            } else if (!watch_same_content(&n->st, &a->cur)) {
                a->kind = ACT_MOD;
                a->old = n;
            } else {
                watch_adopt_state(w, n, &a->cur); /* same content; refresh stat */
                free(a->path);
                continue;
            }
        } else if (g) {
            g->dirty = true;
            if (watch_same_content(&g->st, &a->cur)) {
                watch_adopt_state(w, n, &a->cur); /* replaced by the same bytes */
                free(a->path);
                continue;
            }
            a->kind = ACT_MOD;
            a->old = g;
        } else {
            a->kind = ACT_CRE;
        }
        acts->v[keep++] = *a;
    }
    acts->n = keep;
    /* With files put off, a grave may still be claimed by one of them (a
     * rename): the deletions wait for the round that reads them all. */
    for (size_t i = 0; i < w->ngraves; i++) {
        node *g = w->graves[i];
        g->held = !g->dirty && (deferred || grave_held(w, g, force, now));
        if (!g->dirty && !g->held)
            add_action(acts, (action){ACT_DEL, NULL, g, sg_xstrdup(g->orig_path), {0}, NULL});
    }
}

/* Past the turn's time (a diff waited for a checkpoint worker that was
 * just killed, or busy), an action that stands alone — a file changed or
 * made, no grave in it — waits for the next turn: its node dirty again,
 * its state as read dropped (it is read again then). */
static bool put_off(sg_watch *w, action *a)
{
    if ((a->kind != ACT_MOD && a->kind != ACT_CRE) || a->replaced || (a->old && a->old != a->n))
        return false;
    watch_dirty_mark(w, a->n, -1);
    w->read_deferred++;
    free(a->cur.text);
    free(a->path);
    return true;
}

/* A held grave under directory path: a file of it may come back (an
 * editor's save), so it is not empty yet. */
static bool grave_held_under(const sg_watch *w, const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < w->ngraves; i++) {
        const node *g = w->graves[i];
        if (g->held && !strncmp(g->orig_path, path, n) && g->orig_path[n] == '/')
            return true;
    }
    return false;
}

/* A directory's change: {path, change, dir: true}, through the gate as a
 * file's is (past it: an entry of the bulk payload). */
static int dir_emit(sg_watch *w, const char *path, bool gone)
{
    json_t *p = json_object();
    if (!p)
        return 0;
    json_object_set_new(p, "path", jstr_path(path));
    json_t *raw = jhex_path_if_invalid(path);
    if (raw)
        json_object_set_new(p, "path_hex", raw);
    json_object_set_new(p, "change", json_string(gone ? "deleted" : "created"));
    json_object_set_new(p, "dir", json_true());
    if (w->gate && !w->gate(w->gate_ud)) {
        size_t cost = 8 * strlen(path) + 160;
        if (w->bulk && w->bulk_bytes + cost > SG_WATCH_BULK_BYTES)
            bulk_flush(w);
        if (!w->bulk_cb || (!w->bulk && !(w->bulk = json_array()))) {
            json_decref(p);
            return 0;
        }
        json_array_append_new(w->bulk, p);
        w->bulk_bytes += cost;
        return 0;
    }
    w->events++;
    w->cb(w->ud, p);
    return 1;
}

/* Whether the directory at rel holds nothing at all on disk (no entry,
 * not even one the watcher skips: a `.git`, an ignored name). */
static bool dir_empty_on_disk(const sg_watch *w, const char *rel)
{
    int fd = sg_open_beneath(w->rootfd, rel, O_RDONLY | O_DIRECTORY);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    const struct dirent *de;
    bool empty = true;
    while (empty && (de = readdir(dp)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(dp);
    return empty;
}

/* The directories queued (watch_dir_queue), after the files' changes: the
 * record's directories that are gone, then each queued directory that is
 * here, empty on disk and not in the record yet. A new one waits
 * SG_WATCH_HOLD_MS for its files unless forced (`mkdir -p d && echo >
 * d/f` gives no event of d), and one with a held grave under it waits for
 * the grave (an editor's save). So an empty directory is in the record,
 * and `sandglass workspace` makes it; a directory with files is implied
 * by them. */
static int resolve_dirs(sg_watch *w, bool force)
{
    int emitted = 0;
    size_t keep = 0;
    uint64_t now = sg_now_mono_ns();
    for (size_t i = 0; i < w->ndirq; i++)
        if (w->dirq[i].gone)
            emitted += dir_emit(w, w->dirq[i].path, true);
    for (size_t i = 0; i < w->ndirq; i++) {
        dir_item *q = &w->dirq[i];
        node *d = q->gone ? NULL : watch_path_find(w, q->path);
        if (d && d->is_dir && d->parent && !d->rep && !d->nkids) {
            if ((!force && now - q->at_ns < SG_WATCH_HOLD_MS * 1000000ull) || grave_held_under(w, q->path)) {
                w->dirq[keep++] = *q;
                continue;
            }
            if (dir_empty_on_disk(w, q->path)) {
                d->rep = true;
                emitted += dir_emit(w, q->path, false);
            }
        }
        free(q->path);
    }
    w->ndirq = keep;
    return emitted;
}

static int resolve_(sg_watch *w, bool force, bool *text_full)
{
    action_list acts = {0};
    bool deferred = false;
    uint64_t t0 = sg_now_mono_ns();
    read_ready(w, force, &acts, &deferred, text_full);
    size_t nread = acts.n;
    classify(w, &acts, deferred, force);
    if (acts.n > 1)
        qsort(acts.v, acts.n, sizeof(*acts.v), act_cmp);
    int emitted = 0;
    uint64_t until = t0 + (force ? SG_WATCH_FLUSH_US : SG_WATCH_TURN_US) * 1000ull;
    for (size_t i = 0; i < acts.n; i++) {
        action *a = &acts.v[i];
        if (i > 0 && (sg_now_mono_ns() > until || watch_yield(w)) && put_off(w, a))
            continue;
        /* Past the owner's budget no payload is made: no diff, no JSON
         * (the state is still adopted, so the next change is right). */
        bool pass = !w->gate || w->gate(w->gate_ud);
        json_t *p = pass ? build_payload(w, a) : NULL;
        if (!pass && w->bulk_cb)
            bulk_add(w, a);
        if (a->n)
            watch_adopt_state(w, a->n, &a->cur);
        free(a->path);
        if (p) {
            w->events++;
            emitted++;
            w->cb(w->ud, p);
        }
    }
    free(acts.v);
    emitted += resolve_dirs(w, force);
    bulk_flush(w);
    size_t keep = 0;
    for (size_t i = 0; i < w->ngraves; i++) {
        if (w->graves[i]->held)
            w->graves[keep++] = w->graves[i]; /* unclaimed yet */
        else
            watch_node_free(w, w->graves[i]);
    }
    w->ngraves = keep;
    if (nread) {
        uint64_t per = (sg_now_mono_ns() - t0) / nread;
        w->file_cost_ns = w->file_cost_ns ? (3 * w->file_cost_ns + per) / 4 : per;
    }
    return emitted;
}

/* A flush goes on in rounds of at most SG_WATCH_CACHE_MAX of text each
 * (within its time): a round holds every text it read until its diffs are
 * made, and one round of 1,100 texts of 60 KiB took the supervisor's RSS
 * to 64 MB for a moment. */
int watch_resolve(sg_watch *w, bool force)
{
    bool had = w->dhead != NULL;
    uint64_t until = sg_now_mono_ns() + SG_WATCH_FLUSH_US * 1000ull;
    bool text_full;
    int n = 0;
    do {
        text_full = false;
        n += resolve_(w, force, &text_full);
    } while (force && text_full && sg_now_mono_ns() < until);
    report_limits(w);
    if (had && !w->dhead && w->drained)
        w->drained(w->drained_ud);
    return n;
}

bool sg_watch_pending(const sg_watch *w)
{
    return w && w->dhead != NULL;
}

void sg_watch_set_drained_cb(sg_watch *w, void (*fn)(void *userdata), void *userdata)
{
    w->drained = fn;
    w->drained_ud = userdata;
}

/* watch: the workspace watcher. Runs on the host side, on the supervisor's
 * libuv loop, and reports file changes under a workspace directory as
 * `file_diff` event payloads.
 *
 * Mechanism: one inotify instance, a watch on every directory (added through
 * a directory fd opened with RESOLVE_NO_SYMLINKS, so a learner's symlink can
 * never make us watch or read a host path), polled with uv_poll_t. A new
 * directory is watched first, then scanned, so files made in it before the
 * watch existed are still reported. IN_Q_OVERFLOW triggers a full rescan.
 * Idle cost is zero: no timers run while nothing changes.
 *
 * Coalescing: raw events only mark paths dirty. A burst is resolved once it
 * settles (SG_WATCH_SETTLE_US after the last event; a timerfd, armed
 * only while something is pending), by comparing each dirty
 * path's current state (lstat + content hash) with the last content seen, so
 * an editor save (temp file renamed over the target, or truncate+rewrite)
 * gives one `modified`, a temp file created and renamed away in the burst
 * gives nothing, and a write that changes nothing gives nothing. A file
 * created or modified but not yet closed (IN_CLOSE_WRITE) waits up to
 * SG_WATCH_CAP_MS for its writer (so does a file found by the scan of a new
 * directory: its writer may still hold it). sg_watch_flush() resolves
 * everything now. The callback runs on the loop (or inside sg_watch_flush)
 * and must not call sg_watch_free.
 *
 * Payload of each event (ownership passed to the callback):
 *   path      relative to the root, '/'-separated (non-UTF-8 bytes in a name
 *             are replaced by U+FFFD)
 *   change    "created" | "modified" | "deleted" | "renamed"
 *   old_path  for "renamed" (IN_MOVED_FROM/IN_MOVED_TO paired by cookie; a
 *             directory rename reports every file under it as renamed)
 *   replaced  true when a rename replaced an existing file (`mv tmp target`
 *             seen across two bursts): the diff is then against what the
 *             target held, not against the moved file
 *   size      bytes (absent for "deleted")
 *   sha256    hex of the content (absent for "deleted", and for files over
 *             SG_WATCH_HASH_MAX)
 *   diff      unified diff against the last content seen ("" for a rename
 *             without change); absent when either side is not text:
 *   truncated true: the new content is over SG_DIFF_MAX_BYTES
 *   binary    true: the new content is binary (sg_diff_is_binary)
 *   diff_base "empty": the old content was binary or too large, so the diff
 *             shows the whole new text as added
 *   diff_unavailable true: the old text was not kept (cache budget
 *             SG_WATCH_CACHE_MAX exceeded), only the hash is known
 *   added, removed  line counts of the diff
 *
 * Rules:
 * - Files are reported (regular files and symlinks); a deleted directory
 *   reports each file it contained as deleted. A directory is reported
 *   only when the files do not imply it: {path, change, dir: true}
 *   "created" when it is empty on disk and not reported yet (a new one
 *   SG_WATCH_HOLD_MS after it appeared, or at a flush: `mkdir -p d &&
 *   echo > d/f` gives no event of d; one its last file left), "deleted"
 *   when a reported one (or an empty one of the baseline) is removed or
 *   moved away (its new path is checked as a new one's). Through the gate
 *   and bulk payloads as files are.
 * - A symlink is reported as a file whose content is its target string (as
 *   git stores it); it is never followed.
 * - Contents of directories named `.git` (at any depth) are skipped: a
 *   workspace that is a git repository would otherwise flood binary events.
 *   Other dotfiles are reported.
 * - Paths on the ignore list (sg_watch_new_ext, ignore.h) are neither
 *   tracked nor reported; ignored directories are neither watched nor read.
 * - Mode-only changes (chmod) are not reported; content is what counts.
 * - The initial scan in sg_watch_new is a baseline: it emits nothing.
 * - Within one burst, renames are reported in the order they happened; a
 *   rename onto an existing file replaces it (no separate "deleted").
 * - After an overflow rescan, a rename shows as deleted + created.
 * - Files beyond SG_WATCH_MAX_FILES / directories beyond SG_WATCH_MAX_DIRS
 *   or deeper than SG_WATCH_MAX_DEPTH are not tracked (counted in
 *   stats.dropped; a "watch_untracked" limit event).
 * - Watches: at most 1/SG_WATCH_HOST_SHARE of the host's
 *   fs.inotify.max_user_watches (root's one limit is shared by every
 *   sandbox). Directories past it (or past what the host has left) are
 *   tracked without a watch; from then on every sg_watch_flush rescans the
 *   tree, so their changes still come (at the next flush, i.e. at the end
 *   of each exec), and a "watches" limit says so once. An IN_Q_OVERFLOW
 *   rescan gives a "watch_overflow" limit.
 * - Paths longer than PATH_MAX (deep trees) are opened one component at a
 *   time, under the same no-symlink rules: their changes are reported.
 * - Every dirty file is re-read and re-hashed when its burst resolves (mtime
 *   is too coarse to trust within a burst); the overflow rescan trusts an
 *   unchanged stat unless the last read was racy (mtime within 50 ms of it).
 * - That work is bounded per sandbox (bounds.h, SG_WATCH_READ_*): a bucket
 *   of bytes read per second, a slice of bytes and of time per loop turn
 *   (SG_WATCH_TURN_US), a flush at most SG_WATCH_FLUSH_US; overflow rescans
 *   at most every SG_WATCH_RESCAN_MIN_MS. A file past them stays dirty and
 *   is reported a little later, never lost.
 */
#ifndef SG_WATCH_H
#define SG_WATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "base/err.h"
#include "capture/ignore.h"
#include "checkpoint/diff.h"

#define SG_WATCH_SETTLE_US 500 /* quiet time that ends a burst */
#define SG_WATCH_CAP_MS 50    /* longest wait for an open writer / busy burst */
#define SG_WATCH_HOST_SHARE 16 /* a watcher takes at most 1/16 of the host's inotify watches */
#define SG_WATCH_MAX_DEPTH 1024 /* directories deeper are not tracked (a limit event) */
#define SG_WATCH_HOLD_MS 500   /* a new file's / a gone file's wait for the rest of a save */
#define SG_WATCH_HOLD_MAX 64   /* files held at once, at most: more is no editor's save */
#define SG_WATCH_BULK_BYTES (256 * 1024) /* a bulk payload's files, at most (estimated) */

typedef struct sg_watch sg_watch;

/* A file's type as the events name it: file, link, dir, fifo, socket,
 * chardev, blockdev (or other). */
const char *sg_watch_type_name(mode_t mode);

/* payload: a file_diff payload; ownership passes to the callee. */
typedef void (*sg_watch_cb)(void *userdata, json_t *payload);

typedef struct sg_watch_stats {
    size_t watches;       /* directories watched */
    size_t files;         /* files known */
    size_t bytes_cached;  /* text kept for diffs */
    uint64_t events;      /* payloads emitted */
    uint64_t overflows;   /* IN_Q_OVERFLOW rescans */
    uint64_t dropped;     /* files/dirs not tracked (limits) */
    uint64_t rescan_slices; /* slices the overflow rescans took (one a loop turn) */
    bool rescanning;      /* an overflow rescan is under way */
} sg_watch_stats;

/* Watches root (recursively) on loop and takes the baseline. differ makes
 * the unified diffs of text files (called with differ_ud). */
sg_watch *sg_watch_new(uv_loop_t *loop, const char *root, sg_watch_cb cb, void *userdata,
                       sg_diff_fn differ, void *differ_ud, sg_err *err);

/* The same, with the capture's two refinements:
 * - ignore (taken; NULL: nothing ignored): paths on the operator's ignore
 *   list (ignore.h) are neither tracked nor reported; a tracked file
 *   renamed to an ignored name leaves the view (deleted, unless replaced);
 * - hold: a file made since the baseline and not yet reported is read
 *   only SG_WATCH_HOLD_MS after it appeared, and a reported file that
 *   left (deleted, or renamed to an ignored name) is reported gone only
 *   SG_WATCH_HOLD_MS after, unless a file takes its place meanwhile: so
 *   an editor's save across several bursts (vim's backup by rename,
 *   emacs's, write-to-temp-and-rename as VS Code, sed -i and Python's
 *   atomic writes do) gives one `modified`, and its temporary files
 *   nothing. A flush (every exec's end) resolves everything at once.
 *   At most SG_WATCH_HOLD_MAX new files are held at a time, and no gone
 *   file while more than that are gone: a program making or removing
 *   thousands of files is reported as before, and the loop's passes over
 *   the dirty list and the graveyard stay short.
 *   Hold is what the loop's reports wait, never a flush. */
/* known (may be NULL): asked during the baseline alone, for each regular
 * file read (rel, its fstat) whether its SHA-256 is known already (1 and
 * sha filled: it is not hashed again; contents.h's known files, which a
 * fork's CLI wrote before any learner process existed). */
typedef bool (*sg_watch_known_fn)(void *ud, const char *rel, const struct stat *st, uint8_t sha[32]);
sg_watch *sg_watch_new_ext(uv_loop_t *loop, const char *root, sg_watch_cb cb, void *userdata,
                           sg_diff_fn differ, void *differ_ud, sg_ignore *ignore, bool hold,
                           sg_watch_known_fn known, void *known_ud, sg_err *err);

/* Reads every pending inotify event and resolves every dirty path now
 * (open writers included), within the read budget and SG_WATCH_FLUSH_US:
 * what is left comes from the loop, in turns. Returns the number of
 * payloads emitted, or < 0. */
int sg_watch_flush(sg_watch *w, sg_err *err);
/* While on, a flush only reads what inotify holds (one turn's worth) and
 * leaves the changes to the loop, which reports them in its turns right
 * after: the kill switch's own flushes (the killed execs' ends) never wait
 * for a learner's pile of changes, nor for a new checkpoint worker. */
void sg_watch_hurry(sg_watch *w, bool on);
/* Asked between pieces of the watcher's work in a loop turn (each inotify
 * read, each file resolved, every few entries of a rescan): true ends the
 * turn there, its rest left for the next, so that a request the kill
 * switch took (an abort, a destroy: killswitch.h's ks_kill_waiting) is
 * handled at once. Called on the loop's thread; fn must be cheap. */
typedef bool (*sg_watch_yield_fn)(void *ud);
void sg_watch_set_yield(sg_watch *w, sg_watch_yield_fn fn, void *ud);

void sg_watch_get_stats(const sg_watch *w, sg_watch_stats *out);

/* Tests only (test_watch.c): the overflow rescan's slices end after every
 * `entries` directory entries read (and at each directory's end) instead
 * of after SG_WATCH_TURN_US, so that a rescan spans many slices, with
 * changes made between them, on however fast a machine; 0 puts the time
 * slices back. */
void sg_watch_test_rescan_slice(sg_watch *w, unsigned entries);
/* Tests only: the directory the rescan's cursor holds open between two
 * slices (its path, "" for the root), NULL when none. */
const char *sg_watch_test_rescan_at(const sg_watch *w);

/* Where limit payloads go ({"what": "watches" | "watch_overflow" |
 * "watch_untracked", ...}; ownership passes): the capture emits them as
 * `limit` events. */
void sg_watch_set_limit_cb(sg_watch *w, sg_watch_cb cb, void *userdata);

/* Asked before each payload is made: false skips it (no read of the old
 * text into a diff, no JSON; the change is still taken in). The capture's
 * per-exec budget of file_diff events (capture.h). */
typedef bool (*sg_watch_gate_fn)(void *userdata);
void sg_watch_set_gate(sg_watch *w, sg_watch_gate_fn gate, void *userdata);
/* Bytes another reader of the workspace read (the contents sent to the
 * store, capture/contents.h), charged to the watcher's read budget. */
void sg_watch_charge_read(sg_watch *w, uint64_t bytes);

/* Where the changes the gate turned away go, so that none is missing
 * from the record: `bulk` payloads {files: [{path, change, old_path,
 * size, sha256, path_hex, old_path_hex}...], count}, each of at most
 * SG_WATCH_BULK_BYTES (estimated from above), made at the end of each
 * resolution (ownership passes). No diff is made for them. Unset: they
 * are only counted (by the gate's owner). */
void sg_watch_set_bulk_cb(sg_watch *w, sg_watch_cb cb, void *userdata);

/* Whether changes are still to be reported (a flush's bound, the read
 * budget, an open writer, the hold left them to the loop). */
bool sg_watch_pending(const sg_watch *w);
/* Called when a resolution leaves no change pending: the owner closes
 * what it kept open for them (the capture: an exec's file_diff window). */
void sg_watch_set_drained_cb(sg_watch *w, void (*fn)(void *userdata), void *userdata);

/* Called when the settle timer fires, before the settled changes become
 * payloads: the owner reads what else it has pending that happened first
 * (the capture: a terminal's command mark written before the change), so
 * that a change never comes before the command that made it. It may call
 * sg_watch_flush. */
void sg_watch_set_before_settle(sg_watch *w, void (*fn)(void *userdata), void *userdata);

/* Stops watching and closes the libuv handles; the memory is released when
 * the loop has run the close callbacks (run the loop once more after this).
 * Emits nothing. NULL is fine. */
void sg_watch_free(sg_watch *w);

#endif

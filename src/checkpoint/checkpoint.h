/* checkpoint: content-addressed snapshots of a workspace directory, taken
 * from outside the sandbox, and exact restore.
 *
 * Storage: a bare libgit2 repository (e.g. <state>/sb/<id>/checkpoints.git,
 * never inside the workspace; sg_checkpoint_open refuses that). Each
 * checkpoint is a commit on refs/heads/checkpoints (first-parent chain, so
 * checkpoints taken after a restore still follow the latest one); its id is
 * the commit's 40-hex oid. The commit message is the label, a blank line and
 * a trailer "sandglass-checkpoint: files=N dirs=N bytes=N". refs/sg/base
 * names the checkpoint the workspace was last made equal to (the last one
 * taken or restored); take counts its changes against it. Objects are loose
 * and never garbage-collected (checkpoints are kept for the sandbox's life).
 *
 * Tree layout. We walk the workspace ourselves (openat, O_NOFOLLOW,
 * AT_SYMLINK_NOFOLLOW; never libgit2's add_all), so .gitignore hides
 * nothing, a workspace that is a git repository is captured with its .git,
 * and a nested repository is just more directories. Tree objects are
 * serialised by us (git's format and order), one per directory:
 *   - regular file -> blob, mode 100644 / 100755 (owner x bit)
 *   - symlink      -> blob holding the target, mode 120000 (dangling too)
 *   - fifo         -> empty blob, 100644; the meta record says it is a fifo
 *   - directory    -> tree, 040000
 *   - "%sg%"       -> meta blob of this directory (reserved name, see below):
 *     records "<octal st_mode> <uid> <gid> <stored name>\0" for "." (the
 *     directory itself) and every non-directory entry, so full permission
 *     bits (setuid, 0600, 0700 dirs, ...), file types and owners are exact.
 *     Every directory tree holds it, so empty directories are captured.
 * Name escaping: git refuses some names in trees (".git" and its NTFS
 * aliases). A name is stored with the prefix "%sg%" when it is ".git"
 * (any case), ".git" followed only by dots/spaces, "git~<digits>", or when
 * it already starts with "%sg%"; restore strips one prefix. The stored name
 * "%sg%" alone (the escape of the empty name) can therefore never come from
 * the workspace and is free for the meta blob.
 *
 * Not recorded: sockets and block/char devices (counted in stats.skipped).
 * Restore makes the workspace equal to the checkpoint, so such an entry is
 * removed like any other path the checkpoint does not have. Hard links are
 * captured as independent files (same blob) and restored as separate files.
 * Timestamps are not restored (a restored file gets a new mtime, which is
 * the safe choice for build tools).
 *
 * Restore: the current state is scanned (stat cache: unchanged files are not
 * re-read), compared directory by directory with the target tree (equal
 * subtree oids are skipped whole), and only what differs is touched: a file
 * is written to a temporary name in its directory then renamed over (never
 * written through an existing inode or link), owners are set with
 * fchownat(AT_SYMLINK_NOFOLLOW) and modes after the owner. Restore as root
 * gives files their recorded uid/gid; without root a chown to another owner
 * is skipped.
 *
 * Stat cache: <repo_dir>/sg-statcache maps path -> (size, mtime, ctime,
 * inode, mode) -> blob oid, so an unchanged file is not hashed again. Entries
 * whose ctime is within SG_CKPT_RACY_NS of the scan start are not trusted
 * ("racy git"). It is only a cache: a bad or missing file is ignored.
 *
 * Limits (the learner controls the workspace, and this work is done for
 * the sandbox: it runs in the worker, in the sandbox's cgroup, checkpoint/ckpt_client.h):
 *   - SG_CKPT_FILE_MAX: a regular file larger (apparent size) is never
 *     read. It is recorded by size and a marker, not content: its blob is
 *     the text "sandglass: content not stored (<why>) size=N mtime=NS
 *     ino=N\n" (so any change gives a new checkpoint) and its meta record
 *     carries SG_CKPT_MODE_OMITTED. Reading is never by apparent size: the
 *     files that are read (at most SG_CKPT_FILE_MAX) are read by their data
 *     extents (SEEK_DATA/SEEK_HOLE), holes become zeros without a read.
 *   - SG_CKPT_TAKE_MAX: bytes of file content one checkpoint reads (stat
 *     cache misses); files past it are recorded as markers ("budget").
 *   - SG_CKPT_STORE_MAX: bytes stored in the repository over the sandbox's
 *     life (counted uncompressed in <repo_dir>/sg-usage); past it no file
 *     content is stored any more ("store full"; trees still are).
 *     SANDGLASS_CKPT_STORE_MAX lowers it (tests).
 *   - SG_CKPT_MAX_DEPTH: a directory at that depth is recorded (owner,
 *     mode) but its contents are not walked; its meta record carries
 *     SG_CKPT_MODE_PARTIAL.
 * Every such case is counted in the stats (omitted, partial, store_full),
 * which the supervisor puts in the checkpoint event: nothing is dropped
 * silently, and the checkpoint itself still succeeds.
 * Restore and such entries: a file recorded as a marker, and the contents
 * of a partial directory, are left as they are now (present or absent);
 * each is counted in stats.unrestorable. Anything that the target
 * checkpoint does not have at all is removed as usual, at any depth
 * (openat-relative, no PATH_MAX or depth limit: sg_rm_rf_at).
 *
 * Host git configuration never leaks in: the global, XDG, system and
 * programdata search paths are cleared on open.
 *
 * Not thread-safe: one store per thread. Operations take an flock on
 * <repo_dir>/sg.lock so two processes do not interleave. */
#ifndef SG_CHECKPOINT_H
#define SG_CHECKPOINT_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "wire/ckpt_proto.h"

#define SG_CKPT_RACY_NS (50ll * 1000 * 1000)
#define SG_CKPT_FILE_MAX (32ull * 1024 * 1024)   /* larger files: size + marker, not content */
#define SG_CKPT_TAKE_MAX (256ull * 1024 * 1024)  /* file bytes one checkpoint reads */
#define SG_CKPT_STORE_MAX (1024ull * 1024 * 1024) /* bytes stored per sandbox, all checkpoints */
/* Tries of a take, a diff or a restore whose walk a learner's renames broke
 * (EAGAIN, a name gone or replaced mid-walk), 10, 20, 40 ms apart. */
#define SG_CKPT_RACE_TRIES 4
#define SG_CKPT_MODE_OMITTED 01000000u /* meta record: content not stored */
#define SG_CKPT_MODE_PARTIAL 02000000u /* meta record (".") : contents not walked */

typedef struct sg_ckpt_store sg_ckpt_store;

/* Opens (creating when missing, bare, mode 0700) the store at repo_dir for
 * the workspace directory. repo_dir must not lie inside the workspace. */
sg_ckpt_store *sg_checkpoint_open(const char *repo_dir, const char *workspace, sg_err *err);
void sg_checkpoint_close(sg_ckpt_store *st);

/* Snapshots the workspace. label may be NULL; control characters are
 * replaced and it is cut at SG_CKPT_LABEL_MAX bytes. id_out gets the
 * checkpoint id; stats optional. */
int sg_checkpoint_take(sg_ckpt_store *st, const char *label,
                       char id_out[SG_CHECKPOINT_ID_LEN + 1],
                       sg_checkpoint_stats *stats, sg_err *err);
/* Like sg_checkpoint_take; with reuse_unchanged, when the workspace equals
 * the newest checkpoint (and nothing was restored since), that checkpoint is
 * the answer: only the label is recorded (listed after it by
 * sg_checkpoint_list), no object or ref is written, and *reused is true.
 * The automatic checkpoint before every exec uses it. */
int sg_checkpoint_take_ex(sg_ckpt_store *st, const char *label, bool reuse_unchanged,
                          char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_checkpoint_stats *stats,
                          bool *reused, sg_err *err);


/* Records labels[0..n) (at times[i], seconds since the epoch) for id,
 * which must be the newest checkpoint: what take_ex with reuse_unchanged
 * records when the workspace is unchanged, for execs the supervisor itself
 * found unchanged (checkpoint/fingerprint.h). All or none. */
int sg_checkpoint_alias(sg_ckpt_store *st, const char *id, char *const *labels, const int64_t *times,
                        size_t n, sg_err *err);

/* All checkpoints, oldest first. Free with sg_checkpoint_infos_free. */
int sg_checkpoint_list(sg_ckpt_store *st, sg_checkpoint_info **out, size_t *n, sg_err *err);

/* What a restore to id (full id or a unique prefix of at least 4 hex
 * chars) would change in the workspace now, sorted by path. Inside a
 * created or deleted directory every path is listed. Free with
 * sg_checkpoint_changes_free. */
int sg_checkpoint_diff(sg_ckpt_store *st, const char *id,
                       sg_checkpoint_change **out, size_t *n, sg_err *err);

/* Makes the workspace equal to checkpoint id. stats optional (files, dirs
 * and bytes of the checkpoint; changed = paths touched). */
int sg_checkpoint_restore(sg_ckpt_store *st, const char *id,
                          sg_checkpoint_stats *stats, sg_err *err);

/* Id of the newest checkpoint; -1 with ENOENT when there is none. */
int sg_checkpoint_latest(sg_ckpt_store *st, char id_out[SG_CHECKPOINT_ID_LEN + 1], sg_err *err);


#endif

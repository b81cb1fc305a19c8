/* seed: a new workspace filled before its sandbox starts (create --from),
 * from a tarball or from a checkpoint of another sandbox of this host; a
 * directory is copied by sandbox/wscopy.h in the CLI itself. Run by
 * sandglass-seed, the one process that maps libarchive (and, for a
 * checkpoint, libgit2), never by a supervisor.
 *
 * The source is the operator's but may be hostile (an archive from a
 * learner, a checkpoint of a learner's workspace): every seed is bounded as
 * `sandglass cp` is (SG_CP_MAX_BYTES read and written, SG_CP_MAX_ENTRIES
 * entries, SG_CP_MAX_DEPTH levels; a bound passed refuses the seed, naming
 * it), nothing is made outside the workspace, and every entry ends up the
 * sandbox user's with no set-id bit. */
#ifndef SG_CHECKPOINT_SEED_H
#define SG_CHECKPOINT_SEED_H

#include <sys/types.h>

#include "base/err.h"
#include "sandbox/wscopy.h"

/* The tarball open on tarfd (tar, optionally compressed: gzip, bzip2, xz,
 * zstd, ...) extracted into the directory wsfd by the calling process, which has
 * already become the sandbox user (sandglass-seed drops root first, so the
 * kernel makes every entry the user's and no write as root can be led
 * anywhere). libarchive's secure extraction refuses an entry with `..`, an
 * absolute path, or one under a symlink it made; regular files,
 * directories, symlinks and hard links are made, with their permission
 * bits sans set-id and sticky, never their owners; FIFOs, devices and
 * sockets are skipped (counted in st->skipped). An entry's declared size
 * counts against the byte bound before a byte of it is written (a sparse
 * 1 TiB entry is refused at its header). */
int sg_seed_tar(int tarfd, int wsfd, sg_wscopy_stats *st, sg_err *err);

/* The checkpoint id (a unique prefix of at least 4 hex digits) of the
 * store store_dir (another sandbox's checkpoints.git, only read)
 * restored into the empty workspace ws through a scratch store tmp_dir
 * (made, borrowing store_dir's objects as git alternates, then removed),
 * then every entry given to uid/gid and its set-id bits dropped. */
int sg_seed_checkpoint(const char *store_dir, const char *id, const char *ws, const char *tmp_dir, uid_t uid, gid_t gid,
                       sg_wscopy_stats *st, sg_err *err);

#endif

/* contents: each changed file's exact content into the spool, as blob
 * records (delivery/spool.h, wire/event.h) written just before its
 * file_diff event, and the "content" object added to that event's
 * payload, which says what the store has of it:
 *   {"type":"file"|"link"|"fifo"|"socket"|"chardev"|"blockdev",
 *    "sha256":HEX,"size":N,"mode":M,"stored":true|false[,"over_limit":true]}
 * A link's content is its target (never followed). A file over the
 * per-sandbox limit (--capture-max-file) keeps its hash and size only.
 * Reads are bounded: openat2 beneath the workspace, no symlink followed,
 * O_NONBLOCK (a FIFO never blocks), at most limit + 1 bytes. */
#ifndef SG_CONTENTS_H
#define SG_CONTENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define SG_CAPTURE_MAX_FILE_DEFAULT (1024 * 1024)

struct sg_spool;
typedef struct sg_contents sg_contents;

sg_contents *sg_contents_new(const char *workspace, uint64_t max_file, sg_err *err);
void sg_contents_free(sg_contents *ct);
/* For a file_diff payload about to be appended: the blob records of the
 * path's current content (unless sent already this session) and the
 * payload's "content". A deletion gets nothing. Never fails the event: a
 * content that could not be read or spooled says "stored": false. */
void sg_contents_capture(sg_contents *ct, struct sg_spool *spool, json_t *payload);
/* The same for each entry of a `bulk` event's "files" (the changes past
 * the per-exec file_diff limit), so those paths' contents are stored too:
 * called on a bulk payload before it is emitted. */
void sg_contents_capture_bulk(sg_contents *ct, struct sg_spool *spool, json_t *payload);

/* The workspace a session starts from (a seeded or --workspace directory):
 * one file_diff payload per entry that is not a directory, and per empty
 * directory (with "dir":true, content type "dir"), {"path",
 * "change":"created","seed":true,"content"}, handed to emit in the order
 * of a depth-first walk, after its content's blob records are spooled.
 * Never follows a link; at most SG_CONTENTS_SEED_MAX entries (more are
 * counted in the returned total but not emitted). Returns the entries seen. */
#define SG_CONTENTS_SEED_MAX 100000
#define SG_CONTENTS_SEED_DEPTH 256
typedef void (*sg_contents_emit_fn)(void *ud, json_t *payload);
/* The seed's known files (sandglass fork, src/cli/cmd_fork.c): the regular
 * files its CLI wrote into the workspace from the store the sandbox
 * streams to, whose contents that store therefore holds. A file the walk
 * finds still as it was written (a regular file of the same size, inode
 * and mtime, within the capture's size limit) gets the known sha256 and
 * "stored": true without its bytes being read, hashed or spooled again;
 * any other entry is captured as before. The file is a line per file,
 * "SHA256 SIZE INO MTIME_NS PATHHEX\n" (PATHHEX: the path's bytes in hex),
 * at most SG_CONTENTS_SEED_MAX lines and SG_CONTENTS_KNOWN_MAX bytes, in
 * the sandbox's state directory (root's, which no learner process writes;
 * none exists before the supervisor starts). */
#define SG_CONTENTS_KNOWN_NAME "seed-known"
#define SG_CONTENTS_KNOWN_MAX (64u << 20)
/* One line of the known files for rel, written from fd (fstat: its size,
 * inode and mtime). Caller frees; NULL when out of memory or fd fails. */
char *sg_contents_known_line(const char *rel, const char *sha256, int fd);
/* Loads the known files from path and removes it (whatever it held: it
 * serves one seed). A missing file is none; a malformed one is ignored
 * whole. Returns the files loaded. */
size_t sg_contents_load_known(sg_contents *ct, const char *path);
/* A known file's hash for the watcher's baseline (watch.h's
 * sg_watch_known_fn, ud: the sg_contents): whether rel, of stat st, is
 * still as written, its raw SHA-256 then in sha. Until sg_contents_seed,
 * which drops the list. */
struct stat;
bool sg_contents_known_sha(void *ud, const char *rel, const struct stat *st, uint8_t sha[32]);
uint64_t sg_contents_seed(sg_contents *ct, struct sg_spool *spool, sg_contents_emit_fn emit, void *ud);
/* The regular file rel of the workspace (a test runner's report, junit.h),
 * read as contents are (beneath, no link followed, O_NONBLOCK, charged to
 * the reads sg_contents_take_read returns): its bytes, valid until ct's
 * next read, or NULL (missing, not a regular file, over max or over the
 * contents' limit). *mtime_ns: its modification time (CLOCK_REALTIME). */
const char *sg_contents_read_file(sg_contents *ct, const char *rel, size_t max, size_t *len,
                                  int64_t *mtime_ns);
/* Bytes read from the workspace since the last call (for the watcher's
 * read budget: sg_watch_charge_read). */
uint64_t sg_contents_take_read(sg_contents *ct);

/* A terminal session's recording streamed to the ingest as it is
 * written (cast blob frames, wire/event.h): the bytes of the cast file at
 * path from where the last part ended, in parts of SG_BLOB_PART, the tail
 * at least once a second while the session writes, and all of it at the
 * end (final). session: the recording's name (the exec number). */
typedef struct sg_contents_cast sg_contents_cast;
sg_contents_cast *sg_contents_cast_new(struct sg_spool *spool, const char *path, const char *session);
void sg_contents_cast_pump(sg_contents_cast *k, bool final);
/* Pumps what is left (final) and frees. NULL is fine. */
void sg_contents_cast_end(sg_contents_cast *k);

#endif

/* ckpt_proto: the records checkpoint operations return, and their wire form
 * between a supervisor and its checkpoint worker (sandglass-ckpt).
 *
 * Why a worker: libgit2 and the ~15 libraries it loads cost a process
 * ~2.6 MiB resident. The supervisor of every sandbox would pay it for its
 * whole life; the worker pays it only while checkpoints are being taken,
 * and exits when idle (checkpoint/ckpt_client.h).
 *
 * Wire: a SOCK_STREAM socketpair; each message is a 4-byte length (host
 * order, at most SG_CKPT_PROTO_MAX) and that many bytes of one JSON object.
 *   supervisor -> worker  {"op": "open"|"take"|"list"|"diff"|"restore"|
 *                          "unified", ...arguments}
 *   worker -> supervisor  {"ok": {...}} or {"error": msg, "errno": n}
 * Paths, labels and file texts need not be UTF-8, which JSON strings must
 * be: they travel as lowercase hex (sg_ckpt_proto_bytes / _unbytes). */
#ifndef SG_CKPT_PROTO_H
#define SG_CKPT_PROTO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_CHECKPOINT_ID_LEN 40

typedef struct sg_checkpoint_stats {
    uint64_t files;    /* regular files, symlinks and fifos in the snapshot */
    uint64_t dirs;     /* directories, the workspace root included */
    uint64_t bytes;    /* total size of the regular files */
    uint64_t changed;  /* take: paths that differ from the checkpoint last
                          taken or restored (all paths, root included, for the
                          first); restore: paths touched (as listed by diff) */
    uint64_t hashed;   /* files read and hashed (stat cache misses) */
    uint64_t skipped;  /* sockets and devices, not recorded */
    uint64_t omitted;  /* take: regular files recorded by size and marker,
                          not content (checkpoint.h: limits) */
    uint64_t partial;  /* take: directories whose contents were not walked
                          (deeper than SG_CKPT_MAX_DEPTH) */
    uint64_t unrestorable; /* restore: paths left as they were (markers,
                          partial directories) */
    uint64_t store_full; /* take: 1 when the store is at SG_CKPT_STORE_MAX */
} sg_checkpoint_stats;

typedef struct sg_checkpoint_info {
    char id[SG_CHECKPOINT_ID_LEN + 1];
    char *label;
    int64_t time;      /* seconds since the epoch */
    uint64_t files, dirs, bytes;
} sg_checkpoint_info;

typedef enum sg_checkpoint_change_kind {
    SG_CKPT_MODIFIED = 1, /* contents (or symlink target) differ */
    SG_CKPT_CREATED,      /* exists now, not in the checkpoint: rollback deletes it */
    SG_CKPT_DELETED,      /* in the checkpoint, gone now: rollback brings it back */
    SG_CKPT_TYPE,         /* file type differs (e.g. file <-> symlink <-> dir) */
    SG_CKPT_META,         /* only permission bits or owner differ */
} sg_checkpoint_change_kind;

typedef struct sg_checkpoint_change {
    char *path;           /* relative to the workspace; "." is the root */
    sg_checkpoint_change_kind kind;
    uint32_t mode_now;    /* full st_mode now, 0 if absent */
    uint32_t mode_then;   /* full st_mode in the checkpoint, 0 if absent */
    uint32_t uid_now, gid_now, uid_then, gid_then;
} sg_checkpoint_change;

void sg_checkpoint_infos_free(sg_checkpoint_info *v, size_t n);
void sg_checkpoint_changes_free(sg_checkpoint_change *v, size_t n);
const char *sg_checkpoint_change_kind_name(sg_checkpoint_change_kind k);

#define SG_CKPT_PROTO_MAX (256u * 1024 * 1024) /* bytes of one message */

/* Sends one message (blocking). Returns 0 or -1 with err (err->code EPIPE
 * when the peer is gone). */
int sg_ckpt_proto_send(int fd, const json_t *msg, sg_err *err);
/* Receives one message (blocking): 1 with *msg (an object), 0 on a clean
 * EOF before a message, -1 with err. */
int sg_ckpt_proto_recv(int fd, json_t **msg, sg_err *err);

/* Bytes as a hex JSON string, and back (NULL with err when the value is
 * not a hex string; the result is NUL-terminated, *len optional). With
 * no_nul, a decoded NUL byte is refused (paths and labels). */
json_t *sg_ckpt_proto_bytes(const void *buf, size_t len);
char *sg_ckpt_proto_unbytes(const json_t *v, bool no_nul, size_t *len, sg_err *err);

json_t *sg_ckpt_proto_stats(const sg_checkpoint_stats *st);
int sg_ckpt_proto_unstats(const json_t *v, sg_checkpoint_stats *st, sg_err *err);
json_t *sg_ckpt_proto_infos(const sg_checkpoint_info *v, size_t n);
int sg_ckpt_proto_uninfos(const json_t *v, sg_checkpoint_info **out, size_t *n, sg_err *err);
json_t *sg_ckpt_proto_changes(const sg_checkpoint_change *v, size_t n);
int sg_ckpt_proto_unchanges(const json_t *v, sg_checkpoint_change **out, size_t *n, sg_err *err);

#endif

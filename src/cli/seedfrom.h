/* seedfrom: create --from SRC, the CLI's side. SRC is classified before
 * anything is made (a directory, a regular file taken as a tarball, or
 * ID@CHECKPOINT naming a sandbox of this state directory by the one prefix
 * rule), then the new workspace is seeded before its supervisor starts: a
 * directory by sandbox/wscopy.h here (the bounds of `sandglass cp`), a
 * tarball or a checkpoint by sandglass-seed (checkpoint/seed.h: libarchive
 * and libgit2 are mapped by that process only). The result is the record's
 * `from`, {kind, source, files, dirs, links, bytes, skipped}. */
#ifndef SG_CLI_SEEDFROM_H
#define SG_CLI_SEEDFROM_H

#include <limits.h>

#include "base/bounds.h"
#include "base/err.h"
#include "state/state.h"

typedef enum { SG_SEED_DIR, SG_SEED_TAR, SG_SEED_CHECKPOINT } sg_seed_kind;

typedef struct sg_seedfrom {
    sg_seed_kind kind;
    char path[PATH_MAX];    /* dir, tar: resolved */
    char id[SG_ID_LEN + 1]; /* checkpoint: the sandbox */
    char ckpt[64];          /* checkpoint: the checkpoint as given */
} sg_seedfrom;

/* arg classified into f; err names what is wrong (missing, neither a
 * directory nor a file, no such sandbox, no checkpoint given). */
int sg_seedfrom_check(const char *arg, sg_seedfrom *f, sg_err *err);

/* The workspace of m (made by create, empty, m->uid's) seeded from f; m->from
 * set to the record's `from` (JSON text). On failure what was made stays
 * (create removes the whole sandbox). */
int sg_seedfrom_run(const sg_seedfrom *f, sg_sandbox_meta *m, sg_err *err);

#endif

/* A workspace rebuilt from the ingest's store at an event (cmd_workspace.c),
 * shared by `sandglass workspace` and `sandglass fork`. */
#ifndef SG_CLI_WORKSPACE_H
#define SG_CLI_WORKSPACE_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "base/err.h"
#include "cli/ingest_http.h"

typedef struct sg_ws_opts {
    const char *ingest, *ingest_ca, *sandbox, *out, *token, *secret;
    const char *learner, *task; /* the sandbox's one stream's, when known (NULL: not) */
    long long at;
    bool own;         /* every entry made chowned to uid:gid (fork: the new sandbox's user) */
    uid_t uid;
    gid_t gid;
    /* called with each regular file written into dirfd, still open (fork's
     * known files, capture/contents.h); 0, or -1 to stop with errno */
    int (*wrote)(void *ud, const char *rel, const char *sha256, int fd);
    void *wrote_ud;
} sg_ws_opts;

/* The read token: o->token, or a short-lived operator read token made from
 * o->secret (default: the local ingest's). Caller frees; NULL with err. */
char *sg_ws_token(const sg_ws_opts *o, sg_err *err);

/* The workspace of o->sandbox just after event o->at written into dirfd
 * (-1: as tar entries on stdout, without the end blocks). The paths not
 * written (each said on stderr), or -1 with err. */
int sg_ws_rebuild(const sg_ws_opts *o, const sg_cli_target *t, const char *tok, int dirfd, sg_err *err);

/* One stored event (its "kind" and "payload") applied to a state {key:
 * content}: a file_diff, or a bulk event's entries; a deleted directory
 * takes what is under it. A key is the path, or "\x01" and path_hex for a
 * name that is not UTF-8. `workspace`, `fork` and the ProgSnap2 export
 * replay events through it alone. */
void sg_ws_event(json_t *state, json_t *e);

/* A key's path as raw bytes (NULL: out of memory). Caller frees. */
char *sg_ws_unhex(const char *key);

/* A path that may be written under a directory: relative, no empty, "."
 * or ".." component. */
bool sg_ws_safe_path(const char *rel);

#endif

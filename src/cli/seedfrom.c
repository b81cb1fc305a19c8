/* seedfrom: create --from SRC. See seedfrom.h. */
#include "cli/seedfrom.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/common.h"
#include "sandbox/wscopy.h"

#define VIS_MAX 256
#define SEED_ANSWER_MAX 8192 /* sandglass-seed's one JSON line */

static int from_checkpoint(const char *arg, const char *at, sg_seedfrom *f, sg_err *err)
{
    char v[VIS_MAX];
    char idpart[PATH_MAX];
    snprintf(idpart, sizeof idpart, "%.*s", (int)(at - arg), arg);
    const char *ck = at + 1;
    if (!*ck || strlen(ck) >= sizeof f->ckpt)
        return sg_err_set(err, EINVAL,
                          "'%s': give ID@CHECKPOINT, a checkpoint id (or a prefix of 4 hex digits or "
                          "more) after the '@' (sandglass checkpoints ID lists them)",
                          sg_vis(arg, strlen(arg), v, sizeof v));
    if (sg_state_resolve_id(idpart, f->id, err) < 0) {
        sg_err_prefix(err, "'%s' is no directory or file, and its ID", sg_vis(arg, strlen(arg), v, sizeof v));
        return -1;
    }
    snprintf(f->ckpt, sizeof f->ckpt, "%s", ck);
    f->kind = SG_SEED_CHECKPOINT;
    return 0;
}

int sg_seedfrom_check(const char *arg, sg_seedfrom *f, sg_err *err)
{
    char v[VIS_MAX];
    memset(f, 0, sizeof *f);
    struct stat st;
    if (stat(arg, &st) < 0) {
        const char *at = strrchr(arg, '@');
        if (errno == ENOENT && at && at != arg)
            return from_checkpoint(arg, at, f, err);
        return sg_err_sys(err, "'%s' (a directory, a tarball or ID@CHECKPOINT)", sg_vis(arg, strlen(arg), v, sizeof v));
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return sg_err_set(err, EINVAL, "'%s' is neither a directory nor a tarball",
                          sg_vis(arg, strlen(arg), v, sizeof v));
    if (!realpath(arg, f->path))
        return sg_err_sys(err, "'%s'", sg_vis(arg, strlen(arg), v, sizeof v));
    f->kind = S_ISDIR(st.st_mode) ? SG_SEED_DIR : SG_SEED_TAR;
    return 0;
}

static int seed_dir(const sg_seedfrom *f, const sg_sandbox_meta *m, sg_wscopy_stats *st, sg_err *err)
{
    sg_autoclose int src = open(f->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (src < 0)
        return sg_err_sys(err, "cannot open it");
    sg_autoclose int dst = open(m->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dst < 0)
        return sg_err_sys(err, "the workspace %s", m->workspace);
    /* "." onto ".": the tree's entries into the workspace, as cp copies
     * in (special files skipped, set-id bits dropped, the SG_CP_* bounds) */
    sg_wscopy_opts o = {.uid = m->uid, .gid = m->gid};
    return sg_wscopy(src, ".", dst, ".", &o, st, err);
}

/* sandglass-seed's answer (argv) into st, or its error into err. */
static int run_seeder(char *const *argv, sg_wscopy_stats *st, sg_err *err)
{
    int status;
    sg_autojson json_t *j = sg_cli_run_json(argv[0], argv, SEED_ANSWER_MAX, false, &status);
    const char *msg = json_string_value(json_object_get(j, "error"));
    if (msg)
        return sg_err_set(err, EINVAL, "%s", msg);
    if (!json_is_object(j) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return sg_err_set(err, EIO, "%s gave no answer (status %d)", argv[0], status);
    st->files = (uint64_t)json_integer_value(json_object_get(j, "files"));
    st->dirs = (uint64_t)json_integer_value(json_object_get(j, "dirs"));
    st->links = (uint64_t)json_integer_value(json_object_get(j, "links"));
    st->bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
    st->skipped = (uint64_t)json_integer_value(json_object_get(j, "skipped"));
    return 0;
}

static int seed_other(const sg_seedfrom *f, const sg_sandbox_meta *m, sg_wscopy_stats *st, sg_err *err)
{
    char exe[PATH_MAX], uid[16], gid[16];
    if (sg_sibling_exe("SANDGLASS_SEED", "sandglass-seed", exe, sizeof exe) < 0)
        return sg_err_set(err, ENOENT, "cannot find sandglass-seed next to this binary");
    snprintf(uid, sizeof uid, "%u", (unsigned)m->uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)m->gid);
    if (f->kind == SG_SEED_TAR)
        return run_seeder((char *const[]){exe, "tar", (char *)f->path, m->workspace, uid, gid, NULL}, st, err);
    sg_autofree char *store = sg_state_sandbox_path(f->id, "checkpoints.git");
    sg_autofree char *scratch = sg_state_sandbox_path(m->id, "seed.git");
    return run_seeder((char *const[]){exe, "checkpoint", store, (char *)f->ckpt, m->workspace, scratch, uid, gid, NULL},
                      st, err);
}

int sg_seedfrom_run(const sg_seedfrom *f, sg_sandbox_meta *m, sg_err *err)
{
    static const char *const kinds[] = {"dir", "tar", "checkpoint"};
    sg_wscopy_stats st = {0};
    if ((f->kind == SG_SEED_DIR ? seed_dir(f, m, &st, err) : seed_other(f, m, &st, err)) < 0)
        return -1;
    char src[PATH_MAX + 80];
    if (f->kind == SG_SEED_CHECKPOINT)
        snprintf(src, sizeof src, "%s@%s", f->id, f->ckpt);
    else
        snprintf(src, sizeof src, "%s", f->path);
    size_t n;
    sg_autofree char *source = sg_utf8_sanitize(src, strlen(src), &n); /* a path's bytes, made valid */
    sg_autojson json_t *j =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "kind", kinds[f->kind], "source", source, "files",
                  (json_int_t)st.files, "dirs", (json_int_t)st.dirs, "links", (json_int_t)st.links, "bytes",
                  (json_int_t)st.bytes, "skipped", (json_int_t)st.skipped);
    free(m->from);
    m->from = j ? json_dumps(j, JSON_COMPACT) : NULL;
    return 0;
}

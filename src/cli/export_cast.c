/* export_cast: `sandglass export --format asciicast --out DIR`: every
 * terminal session's recording (asciicast v3, as the capture wrote it) of
 * the streams exported, read from the ingest (GET /v1/casts, GET /v1/cast:
 * the recordings kept in the store, helper blobs' API), one file each:
 * DIR/SANDBOX/SESSION.cast, and DIR/index.csv (learner, task, sandbox,
 * session, file, bytes). Each recording is copied to its file as it
 * arrives (constant memory). An ingest without the recordings' API is
 * refused with a message saying so. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/export.h"

static int cast_cmp(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "session"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "session"));
    return strcmp(x ? x : "", y ? y : "");
}

static int cast_begin(sg_export *x, sg_err *err)
{
    sg_autofree char *p = sg_strdup_printf("%s/index.csv", x->dir);
    if (!(x->out = fopen(p, "wx")))
        return sg_err_sys(err, "create %s", p);
    if (fputs("learner,task,sandbox,session,file,bytes\r\n", x->out) == EOF)
        return sg_err_sys(err, "write %s", p);
    return 0;
}

/* One recording into DIR/SANDBOX/SESSION.cast, and its index line. */
static int cast_one(sg_export *x, const char *const id[3], const char *session, sg_err *err)
{
    if (!sg_valid_name(session))
        return sg_err_set(err, EPROTO, "the ingest named a recording '%.64s': not a valid name", session);
    sg_autofree char *dir = sg_strdup_printf("%s/%s", x->dir, id[2]);
    sg_autofree char *file = sg_strdup_printf("%s/%s.cast", id[2], session);
    sg_autofree char *path = sg_strdup_printf("%s/%s", x->dir, file);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return sg_err_sys(err, "mkdir %s", dir);
    sg_autoclose int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return sg_err_sys(err, "create %s", path);
    char q[1024] = "/v1/cast";
    sg_export_url_arg(q, sizeof q, "learner", id[0]);
    sg_export_url_arg(q, sizeof q, "task", id[1]);
    sg_export_url_arg(q, sizeof q, "sandbox", id[2]);
    sg_export_url_arg(q, sizeof q, "session", session);
    long long bytes = x->get_to(x->ctx, q, fd, err);
    if (bytes < 0 || fsync(fd) < 0)
        return bytes < 0 ? -1 : sg_err_sys(err, "write %s", path);
    const char *cols[] = {id[0], id[1], id[2], session, file};
    for (int i = 0; i < 5; i++)
        if (sg_export_csv_field(x->out, cols[i], strlen(cols[i])) < 0 || fputc(',', x->out) == EOF)
            return sg_err_sys(err, "write index.csv");
    return fprintf(x->out, "%lld\r\n", bytes) < 0 ? sg_err_sys(err, "write index.csv") : 0;
}

static int cast_stream(sg_export *x, json_t *st, sg_err *err)
{
    const char *id[3] = {json_string_value(json_object_get(st, "learner")),
                         json_string_value(json_object_get(st, "task")),
                         json_string_value(json_object_get(st, "sandbox"))};
    char q[1024] = "/v1/casts";
    sg_export_url_arg(q, sizeof q, "learner", id[0]);
    sg_export_url_arg(q, sizeof q, "task", id[1]);
    sg_export_url_arg(q, sizeof q, "sandbox", id[2]);
    sg_autojson json_t *ans = x->get_json(x->ctx, q, err);
    if (!ans) /* an ingest before the recordings were kept has no /v1/casts */
        return sg_err_prefix(err, "the ingest's recordings (GET /v1/casts)"), -1;
    json_t *casts = json_object_get(ans, "casts");
    size_t n = json_array_size(casts);
    sg_autofree json_t **v = sg_xcalloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(casts, i);
    qsort(v, n, sizeof *v, cast_cmp);
    for (size_t i = 0; i < n; i++) {
        const char *session = json_string_value(json_object_get(v[i], "session"));
        if (!session || cast_one(x, id, session, err) < 0)
            return session ? -1 : sg_err_set(err, EPROTO, "a recording without a session in /v1/casts");
        x->rows++;
    }
    return 0;
}

static int cast_end(sg_export *x, sg_err *err)
{
    int rc = 0;
    if (x->out && (fflush(x->out) != 0 || fsync(fileno(x->out)) != 0))
        rc = sg_err_sys(err, "write index.csv");
    if (x->out && fclose(x->out) != 0 && rc == 0)
        rc = sg_err_sys(err, "write index.csv");
    x->out = NULL;
    return rc;
}

const sg_export_fmt sg_export_cast = {.name = "asciicast", .is_dir = true, .begin = cast_begin,
                                      .stream = cast_stream, .end = cast_end};

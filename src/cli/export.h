/* export: `sandglass export`'s parts (cli/cmd_export.c reads the ingest;
 * cli/export_csv.c and cli/export_ps2.c write the formats). Rows arrive
 * stream by stream, each stream in seq order, the streams sorted by
 * (learner, task, sandbox): the same store gives the same bytes. */
#ifndef SG_CLI_EXPORT_H
#define SG_CLI_EXPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "cli/evrows.h"

typedef struct sg_export sg_export;

/* A format: begin once (out: the open temporary file, or for a directory
 * format NULL and dir its temporary directory), row per event (ev: the
 * row {"learner","task","sandbox","seq","kind","ts","received","payload"},
 * learner already pseudonymized), stream_end after each stream's last
 * row, end once. Each returns 0 or -1 with err. */
typedef struct sg_export_fmt {
    const char *name;
    bool is_dir;
    int (*begin)(sg_export *x, sg_err *err);
    int (*row)(sg_export *x, json_t *ev, sg_err *err);
    /* Optional, without --pseudonymize: row r of a scanned page (its
     * compact text {"id":N,...} and its members, cli/evrows.h), written
     * without a tree, the same bytes row writes. */
    int (*row_text)(sg_export *x, const sg_evpage *pg, const sg_evrow *r, sg_err *err);
    bool members; /* row_text reads the row's members (sg_evpage's members) */
    int (*stream_end)(sg_export *x, sg_err *err);
    /* Instead of row: a format that reads something else of each stream
     * (st: its /v1/sandboxes row), through get_json and get_to. */
    int (*stream)(sg_export *x, json_t *st, sg_err *err);
    int (*end)(sg_export *x, sg_err *err);
} sg_export_fmt;

struct sg_export {
    const sg_export_fmt *fmt;
    FILE *out;         /* the single-file formats' temporary file */
    const char *dir;   /* the directory formats' temporary directory */
    const char *version;
    void *state;       /* the format's own */
    /* GET path from the ingest with the export's read token: the answer
     * parsed (a 200's; another is an error naming its message), or its
     * body copied to fd as it arrives (the bytes copied, or -1). */
    json_t *(*get_json)(void *ctx, const char *path, sg_err *err);
    long long (*get_to)(void *ctx, const char *path, int fd, sg_err *err);
    void *ctx;
    uint64_t rows;
};

extern const sg_export_fmt sg_export_csv, sg_export_ps2, sg_export_cast;

/* Appends &name=value (or ?name=value) to the URL path q, percent-encoded. */
void sg_export_url_arg(char *q, size_t qlen, const char *name, const char *val);

/* s as one CSV field (RFC 4180: quoted when it holds , " CR or LF). */
int sg_export_csv_field(FILE *f, const char *s, size_t len);
/* A JSON value as CSV field text: a string as itself, null as nothing,
 * anything else as its compact JSON. */
int sg_export_csv_value(FILE *f, json_t *v);

#endif

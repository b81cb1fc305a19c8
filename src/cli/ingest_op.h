/* ingest_op: an operator's write through the ingest (`sandglass import
 * --ingest`, `sandglass purge --ingest`): an operator write token for the
 * operation (wire/token.h, one minute) made from the ingest's secret as
 * `sandglass token` makes tokens, then POST /v1/import or /v1/purge over
 * the ingest HTTP client (ingest_http.h), whose answer is waited for as
 * long as the ingest's transaction takes (SG_CLI_OP_TIMEOUT_S a read). */
#ifndef SG_CLI_INGEST_OP_H
#define SG_CLI_INGEST_OP_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

#define SG_CLI_OP_TIMEOUT_S 3600 /* one send or read of an operation (the ingest's INGEST_OP_WAIT_S) */

typedef struct sg_cli_op {
    const char *ingest;      /* the ingest's URL (--ingest) */
    const char *ingest_ca;   /* --ingest-ca, NULL: the config's */
    const char *secret_path; /* --secret, NULL: the config's, else <state>/ingest/secret */
} sg_cli_op;

/* POST path (with its query) for op ("import" or "purge"), the body len
 * bytes read from fd (fd < 0: none): the answer's JSON when the ingest
 * took it (200), else NULL with err (the ingest's message, escaped, with
 * its status; *status_out the status, 0 when none came). */
json_t *sg_cli_op_post(const sg_cli_op *o, const char *op, const char *path, int fd, size_t len, int *status_out,
                       sg_err *err);

#endif

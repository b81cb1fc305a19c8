/* ingest_op: an operator's write through the ingest (ingest_op.h). */
#include "cli/ingest_op.h"

#include <errno.h>
#include <string.h>

#include "base/cleanup.h"
#include "cli/config.h"
#include "cli/ingest_http.h"
#include "state/state.h"
#include "wire/token.h"

json_t *sg_cli_op_post(const sg_cli_op *o, const char *op, const char *path, int fd, size_t len, int *status_out,
                       sg_err *err)
{
    *status_out = 0;
    sg_cli_target t;
    if (sg_cli_target_parse(o->ingest, o->ingest_ca, &t, err) < 0) {
        sg_err_prefix(err, "--ingest");
        return NULL;
    }
    sg_autofree char *secret_default = NULL;
    const char *secret_path = o->secret_path;
    if (!secret_path) {
        if (!sg_state_dir(err)) {
            sg_err_prefix(err, "state directory");
            return NULL;
        }
        secret_path = secret_default = sg_config_secret();
    }
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    if (sg_token_secret_load(secret_path, secret, err) < 0) {
        if (err->code == ENOENT)
            sg_err_prefix(err, "the ingest's secret (--secret FILE)");
        return NULL;
    }
    sg_autofree char *tok = sg_token_make_op(secret, op, err);
    memset(secret, 0, sizeof secret);
    if (!tok)
        return NULL;
    /* no body: an empty one, read from nowhere */
    const char *body = NULL;
    size_t body_len = 0;
    sg_autofree char *ans = sg_cli_http_post_fd(&t, path, tok, fd >= 0 ? "application/x-ndjson" : "text/plain",
                                                fd, fd >= 0 ? len : 0, SG_CLI_OP_TIMEOUT_S, status_out, &body,
                                                &body_len, err);
    if (!ans) {
        sg_err_prefix(err, "the ingest at %s", o->ingest);
        return NULL;
    }
    json_t *j = sg_cli_http_answer_json(body, body_len, *status_out, NULL, err);
    if (!j)
        sg_err_prefix(err, "the ingest at %s", o->ingest);
    return j;
}

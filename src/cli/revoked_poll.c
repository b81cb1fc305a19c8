/* revoked_poll: serve's list of revoked tokens from the ingest
 * (revoked_poll.h). */
#include "cli/revoked_poll.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/log.h"
#include "cli/hostreg.h"

static void poll_run(uv_work_t *w)
{
    sg_revoked_poll *p = w->data;
    p->err = (sg_err){0};
    p->got = NULL;
    sg_autofree char *token = sg_cli_read_token(NULL, p->secret_path, SG_REVOKED_TOKEN_TTL_S, &p->err);
    if (!token)
        return;
    json_t *ans = sg_cli_http_get_json(&p->target, "/v1/revoked", token, NULL, &p->err);
    OPENSSL_cleanse(token, strlen(token));
    json_t *ids = json_object_get(ans, "revoked");
    if (ans && !json_is_array(ids)) {
        sg_err_set(&p->err, EPROTO, "the answer of /v1/revoked has no \"revoked\" list");
    } else if (ans) {
        p->got = json_incref(ids);
    }
    json_decref(ans);
}

static void poll_apply(sg_revoked_poll *p, json_t *ids)
{
    size_t n = json_array_size(ids);
    sg_autofree const char **list = n ? calloc(n, sizeof *list) : NULL;
    if (n && !list) {
        sg_err_set(&p->err, ENOMEM, "out of memory");
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (json_is_string(json_array_get(ids, i)))
            list[k++] = json_string_value(json_array_get(ids, i));
    if (sg_serve_set_revoked(p->srv, list, k, &p->err) < 0)
        return;
    if (p->tried && p->ok && k != p->count)
        sg_log(SG_LOG_INFO, "revoked tokens: %zu (were %zu)", k, p->count);
    p->count = k;
}

static void poll_done(uv_work_t *w, int status)
{
    sg_revoked_poll *p = w->data;
    p->busy = false;
    sg_autojson json_t *got = p->got;
    p->got = NULL;
    if (!p->on)
        return;
    if (status == 0 && got)
        poll_apply(p, got);
    bool ok = status == 0 && got && p->err.msg[0] == '\0';
    if (ok && (!p->tried || !p->ok))
        sg_log(SG_LOG_INFO, "revoked tokens: %zu, from the ingest at %s (asked again every %u s)", p->count, p->url,
               p->interval_s);
    else if (!ok && (!p->tried || p->ok))
        sg_log(SG_LOG_WARN, "cannot read the revoked tokens from the ingest at %s: %s (the last list, %zu ids, stays "
               "in force; asking again every %u s)", p->url, status == 0 ? p->err.msg : uv_strerror(status),
               p->count, p->interval_s);
    p->tried = true;
    p->ok = ok;
    if (p->again) {
        p->again = false;
        sg_revoked_poll_now(p);
    }
}

void sg_revoked_poll_now(sg_revoked_poll *p)
{
    if (!p->on)
        return;
    if (p->busy) {
        p->again = true;
        return;
    }
    p->work.data = p;
    if (uv_queue_work(p->loop, &p->work, poll_run, poll_done) == 0)
        p->busy = true;
}

static void on_timer(uv_timer_t *t)
{
    sg_revoked_poll_now(t->data);
}

void sg_revoked_poll_start(sg_revoked_poll *p, uv_loop_t *loop, sg_serve *srv, const sg_cli_target *target,
                           const char *url, const char *secret_path, unsigned interval_s)
{
    *p = (sg_revoked_poll){.loop = loop, .srv = srv, .target = *target, .interval_s = interval_s, .on = true};
    snprintf(p->url, sizeof p->url, "%s", url);
    snprintf(p->secret_path, sizeof p->secret_path, "%s", secret_path);
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    uv_timer_start(&p->timer, on_timer, 0, (uint64_t)interval_s * 1000);
}

void sg_revoked_poll_stop(sg_revoked_poll *p)
{
    if (!p->on)
        return;
    p->on = false;
    uv_close((uv_handle_t *)&p->timer, NULL);
}

/* hostreg: a host's registration, made and sent (see hostreg.h). */
#include "cli/hostreg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/common.h"
#include "cli/config.h"
#include "cli/pool.h"
#include "state/state.h"
#include "wire/hostreg.h"

static json_t *iso_or_null(time_t t)
{
    struct tm tm;
    char buf[32];
    if (t <= 0 || !gmtime_r(&t, &tm) || strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return json_null();
    return json_string(buf);
}

/* One sandbox as the registration lists it (NULL: not listed: a spare,
 * or no record: *unready set when it may be one being made). Its state as
 * ls tells it, without taking over a supervisor (that is ls's, run by an
 * operator). */
static json_t *sandbox_row(const char *id, bool *unready)
{
    sg_sandbox_meta m;
    if (sg_sandbox_meta_load(id, &m, NULL) < 0) {
        *unready = true;
        return NULL;
    }
    if (!m.created[0])
        *unready = true;
    json_t *row = NULL;
    if (strcmp(m.learner, SG_POOL_LEARNER) != 0 && sg_valid_name(m.learner) && m.created[0]) {
        char by[32], reason[256];
        const char *state = m.supervisor_pid == 0                         ? "starting"
                            : sg_state_supervisor_held(m.id, NULL) != 1   ? "dead"
                            : sg_state_abort_load(m.id, by, sizeof by, reason, sizeof reason) == 1 ? "aborted"
                                                                                                  : "running";
        time_t spool = sg_cli_newest_mtime(m.id, "spool"), casts = sg_cli_newest_mtime(m.id, "casts");
        row = json_pack("{s:s, s:s, s:o, s:s, s:s, s:o}", "id", m.id, "learner", m.learner, "task",
                        m.task ? json_string(m.task) : json_null(), "state", state, "created", m.created,
                        "last_active", iso_or_null(spool > casts ? spool : casts));
    }
    sg_sandbox_meta_clear(&m);
    return row;
}

static json_t *capacity(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    const char *confmax = sg_config_get(SG_CONF_MAX_SANDBOXES, NULL); /* checked at load: 1 and up */
    long long maxsb = confmax ? strtoll(confmax, NULL, 10) : SG_MAX_SANDBOXES;
    return json_pack("{s:I, s:I, s:I, s:I}", "cpus", (json_int_t)(cpus > 0 ? cpus : 0), "memory_bytes",
                     (json_int_t)(pages > 0 && psize > 0 ? (long long)pages * psize : 0), "max_sandboxes",
                     (json_int_t)maxsb, "pool_size", (json_int_t)sg_pool_size());
}

char *sg_cli_read_token(const char *token, const char *secret, int64_t ttl_s, sg_err *err)
{
    if (token)
        return strdup(token);
    uint8_t key[SG_TOKEN_SECRET_LEN];
    sg_autofree char *def = secret ? NULL : sg_config_secret();
    if (!secret && !sg_state_dir(err))
        return NULL;
    if (sg_token_secret_load(secret ? secret : def, key, err) < 0)
        return NULL;
    return sg_token_make_read(key, NULL, NULL, NULL, ttl_s, err);
}

json_t *sg_cli_host_registration(const char *name, const char *serve_url, int heartbeat_s, size_t *unready,
                                 sg_err *err)
{
    *unready = 0;
    sg_autostrv char **ids = sg_state_list(err);
    if (!ids)
        return NULL;
    json_t *sbs = json_array();
    size_t total = 0;
    for (size_t i = 0; ids[i]; i++) {
        bool not_yet = false;
        json_t *row = sandbox_row(ids[i], &not_yet);
        *unready += not_yet;
        if (!row)
            continue;
        if (total++ < SG_HOSTREG_SANDBOXES_MAX)
            json_array_append_new(sbs, row);
        else
            json_decref(row);
    }
    json_t *reg = json_pack("{s:i, s:s, s:o, s:s, s:i, s:o, s:I, s:o}", "v", SG_HOSTREG_VERSION, "name", name,
                            "serve_url", serve_url ? json_string(serve_url) : json_null(), "version", SG_VERSION,
                            "heartbeat_s", heartbeat_s, "capacity", capacity(), "sandboxes_total",
                            (json_int_t)total, "sandboxes", sbs);
    if (!reg)
        sg_err_set(err, ENOMEM, "out of memory");
    return reg;
}

int sg_cli_host_register(const sg_cli_target *t, const uint8_t secret[SG_TOKEN_SECRET_LEN], json_t *reg,
                         sg_err *err)
{
    const char *name = json_string_value(json_object_get(reg, "name"));
    sg_autofree char *token = sg_token_make_host(secret, name, SG_HOST_TOKEN_TTL_S, err);
    sg_autofree char *body = token ? sg_json_dump(reg) : NULL;
    if (!body)
        return token ? sg_err_set(err, ENOMEM, "out of memory") : -1;
    int status = 0;
    const char *ans = NULL;
    size_t ans_len = 0;
    sg_autofree char *buf =
        sg_cli_http_request(t, "/v1/hosts", token, body, strlen(body), &status, &ans, &ans_len, err);
    if (!buf)
        return -1;
    sg_autojson json_t *j = sg_cli_http_answer_json(ans, ans_len, status, NULL, err);
    return j ? 0 : -1;
}

json_t *sg_cli_hosts_all(const sg_cli_target *t, const char *token, const char *sandbox, sg_err *err)
{
    sg_autojson json_t *hosts = json_array();
    sg_autofree char *after = NULL;
    for (int page = 0; hosts && page < SG_CLI_HOSTS_PAGES; page++) {
        sg_buf path = {0};
        sg_buf_printf(&path, "/v1/hosts?");
        if (sandbox)
            sg_buf_printf(&path, "sandbox=%s&", sandbox);
        if (after)
            sg_buf_printf(&path, "after=%s", after);
        sg_autofree char *p = sg_buf_steal(&path, NULL);
        sg_autojson json_t *ans = p ? sg_cli_http_get_json(t, p, token, NULL, err) : NULL;
        if (!ans)
            return p ? NULL : (sg_err_set(err, ENOMEM, "out of memory"), NULL);
        json_t *hs = json_object_get(ans, "hosts");
        if (!json_is_array(hs))
            return sg_err_set(err, EPROTO, "the ingest's answer has no hosts (an ingest older than this sandglass?)"),
                   NULL;
        json_array_extend(hosts, hs);
        json_t *next = json_object_get(ans, "next");
        if (!next || json_is_null(next)) /* an ingest before pages has no "next": one page */
            return sg_steal_ptr(&hosts);
        const char *n = json_string_value(next);
        if (!n || !sg_valid_name(n) || (after && strcmp(n, after) <= 0))
            return sg_err_set(err, EPROTO, "the ingest's answer has a bad \"next\""), NULL;
        free(after);
        after = strdup(n);
        if (!after)
            return sg_err_set(err, ENOMEM, "out of memory"), NULL;
    }
    if (!hosts)
        return sg_err_set(err, ENOMEM, "out of memory"), NULL;
    return sg_err_set(err, EFBIG, "more than %d pages of hosts", SG_CLI_HOSTS_PAGES), NULL;
}

#include "wire/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "state/state.h"

int sg_ctl_socket(const char *id, int flags, struct sockaddr_un *sa, sg_err *err)
{
    if (!sg_state_dir(err))
        return -1;
    sg_autofree char *path = sg_state_sandbox_path(id, "ctl.sock");
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path)
        return sg_err_set(err, ENAMETOOLONG, "socket path %s is too long", path);
    memcpy(sa->sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | flags, 0);
    if (fd < 0)
        return sg_err_sys(err, "socket");
    return fd;
}

int sg_ctl_connect(const char *id, sg_err *err)
{
    struct sockaddr_un sa;
    sg_autoclose int fd = sg_ctl_socket(id, 0, &sa, err);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return sg_err_sys(err, "cannot reach the supervisor of sandbox %s", id);
    return sg_steal_fd(&fd);
}

void *sg_ctl_parse_req(const char *buf, size_t len, const char **op, sg_err *err)
{
    json_t *j = sg_json_parse(buf, len, err);
    if (!j)
        return NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        sg_err_set(err, EINVAL, "request is not a JSON object");
        return NULL;
    }
    *op = json_string_value(json_object_get(j, "op"));
    if (!*op) {
        json_decref(j);
        sg_err_set(err, EINVAL, "request has no string \"op\"");
        return NULL;
    }
    return j;
}

static char **strv_from_json(json_t *arr, size_t max, const char *what, bool env, sg_err *err)
{
    if (!json_is_array(arr)) {
        sg_err_set(err, EINVAL, "\"%s\" must be an array of strings", what);
        return NULL;
    }
    size_t n = json_array_size(arr);
    if (n > max) {
        sg_err_set(err, E2BIG, "too many %s entries: %zu (at most %zu)", what, n, max);
        return NULL;
    }
    sg_autostrv char **v = calloc(n + 1, sizeof *v);
    if (!v) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_string(s) || strlen(json_string_value(s)) != json_string_length(s)) {
            sg_err_set(err, EINVAL, "%s[%zu] must be a string without NUL", what, i);
            return NULL;
        }
        const char *str = json_string_value(s);
        if (env) {
            const char *eq = strchr(str, '=');
            if (!eq || eq == str) {
                sg_err_set(err, EINVAL, "env entry '%s' is not KEY=VALUE", str);
                return NULL;
            }
            for (const char *p = str; p < eq; p++) {
                if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                      (p > str && *p >= '0' && *p <= '9'))) {
                    sg_err_set(err, EINVAL, "env entry '%s' has an invalid name", str);
                    return NULL;
                }
            }
        }
        v[i] = strdup(str);
        if (!v[i]) {
            sg_err_set(err, ENOMEM, "out of memory");
            return NULL;
        }
    }
    return sg_steal_ptr(&v);
}

void sg_exec_req_free(sg_exec_req *r)
{
    sg_strvfreep(&r->argv);
    sg_strvfreep(&r->env);
    free(r->cwd);
    free(r->tool_name);
    if (r->tool)
        json_decref(r->tool);
    memset(r, 0, sizeof *r);
}

static int parse_winsz(json_t *tty, sg_ctl_winsz *w)
{
    json_t *rows = json_object_get(tty, "rows"), *cols = json_object_get(tty, "cols");
    if (!json_is_object(tty) || json_object_size(tty) != 2 || !json_is_integer(rows) || !json_is_integer(cols))
        return -1;
    json_int_t r = json_integer_value(rows), c = json_integer_value(cols);
    if (r < 0 || r > 65535 || c < 0 || c > 65535)
        return -1;
    w->rows = (uint16_t)r;
    w->cols = (uint16_t)c;
    return 0;
}

int sg_exec_req_parse(const void *obj, sg_exec_req *out, sg_err *err)
{
    json_t *j = (json_t *)obj;
    memset(out, 0, sizeof *out);
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val) {
        if (strcmp(key, "op") && strcmp(key, "argv") && strcmp(key, "env") &&
            strcmp(key, "cwd") && strcmp(key, "timeout") && strcmp(key, "tool") &&
            strcmp(key, "result") && strcmp(key, "tty") && strcmp(key, "record_input") &&
            strcmp(key, "detachable") && strcmp(key, "v") && strcmp(key, "rid"))
            return sg_err_set(err, EINVAL, "unknown field \"%s\" in exec request", key);
    }
    out->argv = strv_from_json(json_object_get(j, "argv"), SG_EXEC_MAX_ARGS, "argv", false, err);
    if (!out->argv)
        return -1;
    if (!out->argv[0]) {
        sg_exec_req_free(out);
        return sg_err_set(err, EINVAL, "missing command");
    }
    if (!out->argv[0][0]) {
        sg_exec_req_free(out);
        return sg_err_set(err, EINVAL, "empty command name");
    }
    json_t *env = json_object_get(j, "env");
    if (env) {
        out->env = strv_from_json(env, SG_EXEC_MAX_ENV, "env", true, err);
        if (!out->env) {
            sg_exec_req_free(out);
            return -1;
        }
    }
    json_t *cwd = json_object_get(j, "cwd");
    if (cwd) {
        const char *c = json_string_value(cwd);
        if (!c || c[0] != '/' || strlen(c) != json_string_length(cwd) || strlen(c) > 4096) {
            sg_exec_req_free(out);
            return sg_err_set(err, EINVAL, "\"cwd\" must be an absolute path inside the sandbox");
        }
        out->cwd = strdup(c);
    }
    json_t *tool = json_object_get(j, "tool");
    if (tool) {
        const char *name = json_string_value(json_object_get(tool, "name"));
        if (!json_is_object(tool) || !name || !*name || strlen(name) > 64) {
            sg_exec_req_free(out);
            return sg_err_set(err, EINVAL, "\"tool\" must be an object with a \"name\" of 1-64 characters");
        }
        out->tool_name = strdup(name);
        out->tool = json_incref(tool);
    }
    json_t *t = json_object_get(j, "timeout");
    if (t) {
        double v = json_number_value(t);
        if (!json_is_number(t) || !(v > 0) || v > 7 * 24 * 3600.0) {
            sg_exec_req_free(out);
            return sg_err_set(err, EINVAL, "\"timeout\" must be a number of seconds in (0, 604800]");
        }
        /* the precision the request travels with: decode(encode(x)) == x */
        out->timeout_s = sg_json_real_canonical(v);
    }
    json_t *res = json_object_get(j, "result");
    if (res) {
        const char *r = json_string_value(res);
        if (!r || (strcmp(r, "code") && strcmp(r, "full"))) {
            sg_exec_req_free(out);
            return sg_err_set(err, EINVAL, "\"result\" must be \"code\" or \"full\"");
        }
        out->code_only = strcmp(r, "code") == 0;
    }
    json_t *rid = json_object_get(j, "rid");
    if (rid) {
        const char *r = json_string_value(rid);
        size_t n = r ? strlen(r) : 0;
        if (!r || n == 0 || n > SG_CTL_RID_MAX || n != json_string_length(rid) ||
            strspn(r, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-") != n) {
            sg_exec_req_free(out);
            return sg_err_set(err, EINVAL, "\"rid\" must be 1-%d of [0-9A-Za-z_-]", SG_CTL_RID_MAX);
        }
        memcpy(out->rid, r, n + 1);
    }
    json_t *tty = json_object_get(j, "tty");
    if (tty && parse_winsz(tty, &out->winsz) < 0) {
        sg_exec_req_free(out);
        return sg_err_set(err, EINVAL, "\"tty\" must be {\"rows\": 0-65535, \"cols\": 0-65535}");
    }
    out->tty = tty != NULL;
    json_t *ri = json_object_get(j, "record_input");
    if (ri && !json_is_boolean(ri)) {
        sg_exec_req_free(out);
        return sg_err_set(err, EINVAL, "\"record_input\" must be true or false");
    }
    out->no_record_input = json_is_false(ri);
    json_t *dt = json_object_get(j, "detachable");
    if (dt && (!json_is_boolean(dt) || (json_is_true(dt) && !out->tty))) {
        sg_exec_req_free(out);
        return sg_err_set(err, EINVAL, "\"detachable\" must be true or false, and true only with \"tty\"");
    }
    out->detachable = json_is_true(dt);
    return 0;
}

int sg_ctl_asm_feed(sg_ctl_asm *a, uint8_t type, const char *msg, size_t len, sg_err *err)
{
    if (a->len + len + 1 > SG_CTL_RESULT_MAX)
        return sg_err_set(err, EMSGSIZE, "the supervisor's answer is larger than %d bytes", SG_CTL_RESULT_MAX);
    if (sg_buf_append(a, msg, len) < 0)
        return sg_err_set(err, ENOMEM, "out of memory");
    return type == SG_CTL_RESULT_PART ? 0 : 1;
}

void sg_ctl_asm_free(sg_ctl_asm *a)
{
    sg_buf_free(a);
}

static sg_ctl_call_end call_bad(sg_ctl_call *c, const char *why)
{
    snprintf(c->error, sizeof c->error, "bad answer from the supervisor: %.900s", why);
    return SG_CTL_CALL_BAD;
}

sg_ctl_call_end sg_ctl_call_feed(sg_ctl_call *c, uint8_t type, const char *msg, size_t len)
{
    if (type == 0) {
        c->lost = 0;
        snprintf(c->error, sizeof c->error, "the supervisor closed the connection without an answer");
        return SG_CTL_CALL_LOST;
    }
    c->answered = true;
    if (type == SG_CTL_STDOUT || type == SG_CTL_STDERR) {
        if (c->on_output)
            c->on_output(c->ud, type, msg, len);
        return SG_CTL_CALL_MORE;
    }
    if (type == SG_CTL_EXIT) {
        int32_t code;
        if (len != sizeof code)
            return call_bad(c, "an exit code of the wrong size");
        memcpy(&code, msg, sizeof code);
        c->exit_code = code;
        return SG_CTL_CALL_EXIT;
    }
    if (type != SG_CTL_RESULT && type != SG_CTL_ERROR && type != SG_CTL_RESULT_PART)
        return SG_CTL_CALL_MORE;
    sg_err err = {0};
    int done = sg_ctl_asm_feed(&c->answer, type, msg, len, &err);
    if (done <= 0)
        return done < 0 ? call_bad(c, err.msg) : SG_CTL_CALL_MORE;
    json_t *j = sg_json_parse(c->answer.data, c->answer.len, &err);
    sg_ctl_asm_free(&c->answer);
    if (!j)
        return call_bad(c, err.msg);
    if (type == SG_CTL_RESULT) {
        c->result = j;
        return SG_CTL_CALL_RESULT;
    }
    const char *m = json_string_value(json_object_get(j, "error"));
    snprintf(c->error, sizeof c->error, "%.1000s", m ? m : "failed");
    json_decref(j);
    return SG_CTL_CALL_ERROR;
}

sg_ctl_call_end sg_ctl_call_recv(int fd, sg_ctl_call *c)
{
    static char buf[SG_CTL_MSG_MAX];
    for (;;) {
        uint8_t type;
        ssize_t n = sg_seqpacket_recv_typed(fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n < 0) {
            c->lost = (int)n;
            snprintf(c->error, sizeof c->error, "lost the supervisor: %.200s", strerror((int)-n));
            return SG_CTL_CALL_LOST;
        }
        sg_ctl_call_end e = sg_ctl_call_feed(c, type, buf, (size_t)n);
        if (e != SG_CTL_CALL_MORE)
            return e;
    }
}

void sg_ctl_call_free(sg_ctl_call *c)
{
    sg_ctl_asm_free(&c->answer);
    if (c->result)
        json_decref(c->result);
    c->result = NULL;
}

static bool needs_quoting(const char *s)
{
    if (!*s)
        return true;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p))
            return true;
    return false;
}

char *sg_exec_cmdline(char *const *argv)
{
    if (!argv || !argv[0])
        return strdup("");
    const char *b = strrchr(argv[0], '/');
    b = b ? b + 1 : argv[0];
    if ((!strcmp(b, "sh") || !strcmp(b, "bash") || !strcmp(b, "dash")) && argv[1] &&
        !strcmp(argv[1], "-c") && argv[2] && !argv[3])
        return strdup(argv[2]);
    sg_autobuf sg_buf out = {0};
    int r = 0;
    for (char *const *a = argv; r == 0 && *a; a++) {
        if (a != argv)
            r |= sg_buf_puts(&out, " ");
        if (!needs_quoting(*a)) {
            r |= sg_buf_puts(&out, *a);
            continue;
        }
        r |= sg_buf_puts(&out, "'");
        for (const char *p = *a; *p; p++)
            r |= *p == '\'' ? sg_buf_puts(&out, "'\\''") : sg_buf_append(&out, p, 1);
        r |= sg_buf_puts(&out, "'");
    }
    return r == 0 ? sg_buf_steal(&out, NULL) : NULL;
}

int sg_ctl_listen(const char *path, int backlog, sg_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return sg_err_set(err, ENAMETOOLONG, "socket path %s is too long", path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    sg_autoclose int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return sg_err_sys(err, "socket");
    unlink(path); /* the caller owns the path: a file left there is stale */
    mode_t old = umask(077);
    int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (r < 0)
        return sg_err_sys(err, "cannot bind %s", path);
    if (listen(fd, backlog) < 0)
        return sg_err_sys(err, "cannot listen on %s", path);
    return sg_steal_fd(&fd);
}

bool sg_ctl_stdin_ok(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return false;
    if (S_ISCHR(st.st_mode))
        return st.st_rdev == makedev(1, 3); /* /dev/null */
    if (!S_ISFIFO(st.st_mode))
        return false;
    struct statfs sf;
    int fl = fcntl(fd, F_GETFL);
    return fstatfs(fd, &sf) == 0 && sf.f_type == PIPEFS_MAGIC && fl >= 0 &&
           (fl & O_ACCMODE) == O_RDONLY;
}

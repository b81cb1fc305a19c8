/* sandglass mcp: serves the Model Context Protocol on stdio for one agent
 * session in a sandbox (created here, or attached with --sandbox).
 *
 * One event loop (poll) over stdin, a signalfd and one control connection
 * per tool call in flight: calls overlap, and cancelling one closes its
 * connection, which makes the supervisor kill exactly that exec's cgroup
 * leaf. stdout carries only protocol messages; logs go to stderr.
 *
 * End of session: EOF on stdin, SIGTERM, SIGINT or SIGHUP. The session is
 * aborted (op "abort": every process in the sandbox is killed, the reason
 * recorded), the calls still in flight are answered as the abort ends
 * them, and the sandbox is left in place so that the operator can look at
 * it and roll it back; its id is printed on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "mcp/mcp.h"
#include "mcp/tools.h"
#include "state/state.h"
#include "wire/ctl.h"

#define MCP_READ_CHUNK (64 * 1024)
#define MCP_DRAIN_MS 10000   /* wait for calls to end after the abort */
#define MCP_KEEP_DEFAULT_S 300.0 /* an ended session's sandbox stays this long (--keep) */
#define MCP_CREATE_OUT_MAX (64 * 1024)

typedef struct app {
    char id[SG_NAME_MAX + 1];
    sg_mcp *m;
    bool stdout_broken;
} app;

static void app_log_msg(const char *msg)
{
    sg_cli_sayf("mcp", "%s", msg);
}

static void io_log(void *ud, const char *msg)
{
    (void)ud;
    app_log_msg(msg);
}

static void io_send(void *ud, const char *msg, size_t len)
{
    app *a = ud;
    if (a->stdout_broken)
        return;
    /* One write per message where it fits, so that a reader never sees
     * half a line from us. */
    char *line = malloc(len + 1);
    int r;
    if (line) {
        memcpy(line, msg, len);
        line[len] = '\n';
        r = sg_write_all(1, line, len + 1);
        free(line);
    } else {
        r = sg_write_all(1, msg, len) < 0 ? -1 : sg_write_all(1, "\n", 1);
    }
    if (r < 0) {
        a->stdout_broken = true;
        app_log_msg("stdout is closed; answers are dropped");
    }
}

/* Writes buf into the pipe wr (closed here, which is the reader's EOF):
 * the pipe is made large enough to hold it all when it can be (root may
 * pass pipe-max-size); else a writer process, detached from us, feeds it,
 * so that a command reading slowly never blocks the session's loop. */
static int write_behind(int wr_fd, const char *buf, size_t len, sg_err *err)
{
    sg_autoclose int wr = wr_fd;
    int cap = fcntl(wr, F_GETPIPE_SZ);
    if (len > (size_t)(cap > 0 ? cap : 0) && len <= INT32_MAX)
        cap = fcntl(wr, F_SETPIPE_SZ, (int)len);
    if (cap >= 0 && len <= (size_t)cap) {
        if (sg_write_all(wr, buf, len) < 0)
            return sg_err_sys(err, "cannot buffer the input");
        return 0;
    }
    pid_t mid = fork();
    if (mid < 0)
        return sg_err_sys(err, "cannot start the input's writer");
    if (mid == 0) {
        /* Double fork: the writer is nobody's child to reap. */
        if (fork() == 0) {
            /* Holds nothing of the session but the pipe: not the client's
             * stdio, not a control socket. */
            int null = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (null < 0 || dup2(wr, 3) < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
                _exit(1);
            syscall(SYS_close_range, 4, ~0U, 0); /* musl has no close_range() */
            signal(SIGPIPE, SIG_IGN);
            _exit(sg_write_all(3, buf, len) < 0 ? 1 : 0);
        }
        _exit(0);
    }
    waitpid(mid, NULL, 0);
    return 0;
}

/* The stdin of a call's command, as the read end of a pipe: only pipes
 * cross into a sandbox (docs/SECURITY.md). Its bytes (c->input) are
 * written behind; a tool with a dialogue (tools.h's reply) keeps the
 * writing end in c->in_fd for its answer. */
static int input_fd(sg_mcp_call *c, sg_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sg_err_sys(err, "cannot make a pipe for the input");
    sg_autoclose int rd = p[0];
    if (c->tool->reply) {
        sg_close_reset(&c->in_fd);
        c->in_fd = p[1];
        fcntl(c->in_fd, F_SETFL, O_NONBLOCK);
        return sg_steal_fd(&rd);
    }
    if (write_behind(p[1], c->input, c->input_len, err) < 0)
        return -1;
    return sg_steal_fd(&rd);
}

/* Output of a call; a tool's answer to its command goes on its stdin. */
static void call_output(void *ud, uint8_t type, const char *buf, size_t len)
{
    sg_mcp_call *c = ud;
    int r = sg_mcp_call_output(c, type == SG_CTL_STDERR, buf, len);
    if (r == 0 || c->in_fd < 0)
        return;
    sg_err err = {0};
    int wr = c->in_fd;
    c->in_fd = -1;
    fcntl(wr, F_SETFL, 0);
    /* Out of memory (-1): the closed pipe ends the command (its read fails). */
    if (r > 0 && write_behind(wr, c->reply.data, c->reply.len, &err) < 0)
        app_log_msg(err.msg);
    else if (r < 0)
        close(wr);
    sg_buf_free(&c->reply);
}

static int io_start(void *ud, sg_mcp_call *c, sg_err *err)
{
    app *a = ud;
    sg_autofree char *body = sg_json_dump(c->req);
    if (!body)
        return sg_err_set(err, ENOMEM, "out of memory");
    if (strlen(body) > SG_CTL_MSG_MAX - 1)
        return sg_err_set(err, E2BIG, "request too large for the control socket");
    sg_autoclose int fd = -1;
    for (int attempt = 0; fd < 0; attempt++) {
        fd = sg_revive_connect(a->id, "mcp", err);
        if (fd < 0)
            return -1;
        sg_autoclose int in = -1;
        if ((c->input || c->tool->reply) && (in = input_fd(c, err)) < 0)
            return -1;
        int r = sg_seqpacket_send_typed(fd, SG_CTL_REQ, body, strlen(body), in >= 0 ? &in : NULL, in >= 0 ? 1 : 0);
        if (r < 0) {
            sg_close_reset(&fd);
            if (attempt == 0 && sg_revive_unread(r))
                continue; /* the supervisor died as we connected */
            errno = -r;
            return sg_err_sys(err, "cannot send the request to the supervisor");
        }
    }
    /* The input stays with the call until it ends: a request a dying
     * supervisor never read is sent again (call_readable). */
    c->io_data = NULL; /* set once the supervisor answers anything */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return sg_err_sys(err, "fcntl");
    c->fd = sg_steal_fd(&fd);
    return 0;
}

static void io_cancel(void *ud, sg_mcp_call *c)
{
    (void)ud;
    sg_close_reset(&c->in_fd);
    if (c->fd < 0)
        return;
    /* SIGKILL to the exec at once; closing the connection then makes the
     * supervisor kill its whole cgroup leaf (forks and all). */
    unsigned char sig = SIGKILL;
    sg_seqpacket_send_typed(c->fd, SG_CTL_SIGNAL, &sig, 1, NULL, 0);
    close(c->fd);
    c->fd = -1;
}

/* The call's connection ended: closed, the answer fed to the core. */
static bool call_end(app *a, sg_mcp_call *c, sg_ctl_call_end e)
{
    close(c->fd);
    c->fd = -1;
    sg_close_reset(&c->in_fd);
    bool v0 = !c->v0 && sg_ctl_is_v0_refusal(c->answer.error);
    const char *drop = v0 ? "v"
                     : json_object_get(c->req, "via") && sg_ctl_is_via_refusal(c->answer.error) ? "via"
                     : json_object_get(c->req, "rid") && sg_ctl_is_rid_refusal(c->answer.error) ? "rid" : NULL;
    if (e == SG_CTL_CALL_ERROR && drop) {
        /* A supervisor of the build before versions: the request again
         * without "v" (its protocol is this one without it); one before
         * "via" or "rid": without that. */
        sg_err err = {0};
        c->v0 |= v0;
        json_object_del(c->req, drop);
        sg_ctl_call_free(&c->answer);
        c->answer = (sg_ctl_call){.on_output = call_output, .ud = c};
        if (io_start(a, c, &err) == 0)
            return false;
        sg_mcp_call_done(a->m, c, NULL, err.msg);
        return true;
    }
    if (e == SG_CTL_CALL_RESULT)
        sg_mcp_call_done(a->m, c, c->answer.result, NULL);
    else if (e == SG_CTL_CALL_ERROR)
        sg_mcp_call_done(a->m, c, NULL, c->answer.error);
    else
        sg_mcp_call_done(a->m, c, NULL, "bad answer from the supervisor");
    return true;
}

/* Reads what a call's connection has (the call helper's step, ctl.h).
 * Returns true when the call ended (and was answered and freed). */
static bool call_readable(app *a, sg_mcp_call *c)
{
    static char buf[SG_CTL_MSG_MAX];
    for (;;) {
        uint8_t type;
        ssize_t n = sg_seqpacket_recv_typed(c->fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return false;
        if (n < 0 || type == 0) {
            close(c->fd);
            c->fd = -1;
            sg_close_reset(&c->in_fd);
            /* Reset before any answer: the supervisor died before it read
             * the request; the one that takes the sandbox over gets it. */
            sg_err err = {0};
            if (n < 0 && !c->io_data && sg_revive_unread((int)n) && io_start(a, c, &err) == 0) {
                c->io_data = c; /* once */
                return false;
            }
            sg_mcp_call_done(a->m, c, NULL, "lost the supervisor before the call finished");
            return true;
        }
        c->io_data = c;
        c->answer.on_output = call_output;
        c->answer.ud = c;
        sg_ctl_call_end e = sg_ctl_call_feed(&c->answer, type, buf, (size_t)n);
        if (e != SG_CTL_CALL_MORE)
            return call_end(a, c, e);
    }
}

/* Serves the call connections that poll marked; pfd[i] is call[i]. */
static void serve_calls(app *a, struct pollfd *pfd, sg_mcp_call **calls, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pfd[i].revents)
            call_readable(a, calls[i]);
}

static size_t collect_calls(app *a, struct pollfd *pfd, sg_mcp_call **calls, size_t cap)
{
    size_t n = 0;
    for (sg_mcp_call *c = sg_mcp_calls(a->m); c && n < cap; c = c->next) {
        if (c->fd < 0)
            continue;
        pfd[n] = (struct pollfd){.fd = c->fd, .events = POLLIN};
        calls[n++] = c;
    }
    return n;
}

/* Line framing of stdin, with a bound: a longer line is dropped (and
 * answered with an error) and the session goes on. */
typedef struct linebuf {
    sg_buf line;
    bool dropping;
    uint64_t dropped;
} linebuf;

static void feed(app *a, linebuf *lb, const char *data, size_t n)
{
    while (n) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (lb->dropping) {
            lb->dropped += take;
        } else if (lb->line.len + take > SG_MCP_MSG_MAX) {
            lb->dropping = true;
            lb->dropped = lb->line.len + take;
            sg_buf_reset(&lb->line);
        } else if (sg_buf_append(&lb->line, data, take) < 0) {
            app_log_msg("out of memory");
            exit(1);
        }
        if (!nl)
            return;
        if (lb->dropping) {
            sg_mcp_oversized(a->m, lb->dropped);
            lb->dropping = false;
            lb->dropped = 0;
        } else {
            sg_mcp_handle_line(a->m, lb->line.data, lb->line.len);
        }
        sg_buf_reset(&lb->line);
        data += take + 1;
        n -= take + 1;
    }
}

static void abort_session(app *a, const char *reason)
{
    sg_err err = {0};
    sg_ctl_req req = {.op = SG_OP_ABORT, .u.abort.reason = (char *)reason, .via = (char *)sg_mcp_via(a->m)};
    sg_autojson json_t *res = sg_cli_request(a->id, &req, &err);
    __attribute__((cleanup(sg_ctl_abort_reply_free))) sg_ctl_abort_reply ab = {0};
    char msg[SG_ERR_MSG_MAX + SG_NAME_MAX + 256];
    if (!res || sg_ctl_decode_abort_reply(res, &ab, &err) < 0)
        snprintf(msg, sizeof msg, "cannot abort sandbox %s: %s", a->id, err.msg);
    else
        snprintf(msg, sizeof msg, "aborted the session of sandbox %s (%s); %lld processes killed", a->id, reason,
                 ab.kill.processes_killed);
    app_log_msg(msg);
}

/* Runs `sandglass create ... --json` and returns the new sandbox's id in
 * a->id. Its stderr is ours; its stdout is read here. Returns 0, -1 with
 * err, or create's exit status when it failed (its stderr said why). */
static int create_sandbox(app *a, char **args, sg_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sg_err_sys(err, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return sg_err_sys(err, "fork");
    }
    if (pid == 0) {
        dup2(p[1], 1);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0); /* our stdin is the client's: never hand it on */
        execv("/proc/self/exe", args);
        sg_cli_sayf("mcp", "cannot run sandglass create: %s", strerror(errno));
        _exit(127);
    }
    close(p[1]);
    char out[MCP_CREATE_OUT_MAX];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(p[0], out + have, sizeof out - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        if (have == sizeof out - 1)
            break;
    }
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    /* create said what was wrong, on its one line */
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        return WEXITSTATUS(st) == SG_CLI_USAGE ? SG_CLI_USAGE : SG_CLI_FAILED;
    if (!WIFEXITED(st))
        return sg_err_set(err, EIO, "sandglass create was killed by signal %d", WTERMSIG(st));
    sg_autojson json_t *j = sg_json_parse(out, have, err);
    const char *id = json_string_value(json_object_get(j, "id"));
    if (!id || !sg_valid_name(id))
        return sg_err_set(err, EIO, "sandglass create printed no sandbox id");
    snprintf(a->id, sizeof a->id, "%s", id);
    return 0;
}

static void mcp_usage(FILE *f)
{
    sg_autobuf sg_buf names = {0};
    if (sg_mcp_tool_names(&names, -1) < 0)
        names.len = 0;
    fprintf(f,
        "usage: sandglass mcp --learner L --task T [--workspace DIR] [--memory 512M] [--pids N]\n"
        "                     [--cpus C] [--timeout S] [--output-limit B] [--disk 1G] [--rootfs DIR]\n"
        "                     [--ingest URL] [--secret FILE]\n"
        "                     [--max-calls N] [--max-wall S] [--max-execs N] [--max-cpu S]\n"
        "                     [--keep S|forever]\n"
        "       sandglass mcp --sandbox ID\n"
        "\n"
        "Serves the Model Context Protocol (2025-11-25 and 2026-07-28) on stdin/stdout\n"
        "with tools that all run inside the sandbox:\n"
        "  %s\n"
        "Calls that may write run one at a time, in the order sent; reads run alongside.\n"
        "EOF on stdin or SIGTERM/SIGINT aborts the session; the sandbox it\n"
        "made is kept (its id is printed on stderr) for 'sandglass rollback', then\n"
        "destroyed by its supervisor (a sandbox event says why).\n"
        "\n"
        "  --keep S       how long to keep it after the session ends (default 300; 'forever'\n"
        "                 keeps it until 'sandglass destroy')\n"
        "  --sandbox ID   serve an existing sandbox (it is never destroyed by mcp)\n"
        "  the other options are create's (see 'sandglass create --help')\n", names.len ? names.data : "");
}

#define MCP_GO (-1) /* from a step: carry on (else: the exit code) */

/* What the command line asked for; cargs is the argv for `sandglass
 * create` (create's options passed on as they came). */
typedef struct mcp_opts {
    const char *sandbox;
    bool have_learner, have_task, have_caps, keep_given;
    double keep_s;
    char **cargs;
    size_t nc;
} mcp_opts;

static int mcp_parse(int argc, char **argv, mcp_opts *o)
{
    static const struct option opts[] = {
        {"sandbox", required_argument, NULL, 'S'},
        {"learner", required_argument, NULL, 'C'},
        {"task", required_argument, NULL, 'C'},
        {"workspace", required_argument, NULL, 'C'},
        {"memory", required_argument, NULL, 'C'},
        {"pids", required_argument, NULL, 'C'},
        {"cpus", required_argument, NULL, 'C'},
        {"timeout", required_argument, NULL, 'C'},
        {"output-limit", required_argument, NULL, 'C'},
        {"disk", required_argument, NULL, 'C'},
        {"rootfs", required_argument, NULL, 'C'},
        {"ingest", required_argument, NULL, 'C'},
        {"secret", required_argument, NULL, 'C'},
        {"max-calls", required_argument, NULL, 'K'},
        {"max-wall", required_argument, NULL, 'K'},
        {"max-execs", required_argument, NULL, 'K'},
        {"max-cpu", required_argument, NULL, 'K'},
        {"keep", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    /* opts[i].name with its dashes, for the create command line. */
    static const char *const flags[] = {
        "--sandbox", "--learner", "--task", "--workspace", "--memory", "--pids", "--cpus",
        "--timeout", "--output-limit", "--disk", "--rootfs", "--ingest", "--secret",
        "--max-calls", "--max-wall", "--max-execs", "--max-cpu", "--keep", "--help",
    };
    _Static_assert(SG_ARRAY_LEN(flags) == SG_ARRAY_LEN(opts) - 1, "one flag per option");
    o->cargs[o->nc++] = "sandglass";
    o->cargs[o->nc++] = "create";
    int c, idx = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+", opts, &idx)) != -1) {
        switch (c) {
        case 'S': o->sandbox = optarg; break;
        case 'k':
            if (strcmp(optarg, "forever") == 0) {
                o->keep_s = -1;
            } else {
                sg_err kerr = {0};
                if (sg_parse_duration(optarg, 365 * 24 * 3600.0, &o->keep_s, &kerr) < 0)
                    return sg_cli_usage("mcp", "--keep: %s (or 'forever')", kerr.msg);
            }
            o->keep_given = true;
            break;
        case 'K':
            o->have_caps = true;
            __attribute__((fallthrough));
        case 'C': {
            const char *name = opts[idx].name;
            if (strcmp(name, "learner") == 0)
                o->have_learner = true;
            if (strcmp(name, "task") == 0)
                o->have_task = true;
            o->cargs[o->nc++] = (char *)flags[idx];
            o->cargs[o->nc++] = optarg;
            break;
        }
        case 'h':
            mcp_usage(stdout);
            return 0;
        default:
            return sg_cli_usage("mcp", "unknown option, or one without its value: '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("mcp", "unexpected argument '%.64s' (mcp takes only options)", argv[optind]);
    if (o->sandbox && o->keep_given)
        return sg_cli_usage("mcp", "--keep is for a sandbox mcp creates; an attached one stays its owner's");
    return MCP_GO;
}

/* --sandbox: attaches to an existing sandbox, refused when it is aborted. */
static int mcp_attach(app *a, const mcp_opts *o)
{
    sg_err err = {0};
    if (o->nc > 2)
        return sg_cli_usage("mcp", "%s", o->have_caps
            ? "--max-* caps are set when the sandbox is created: give them to 'sandglass create', or drop --sandbox"
            : "--sandbox attaches to an existing sandbox: create's options do not apply");
    char full[SG_ID_LEN + 1];
    if (!sg_state_dir(&err) || sg_state_resolve_id(o->sandbox, full, &err) < 0) {
        char msg[SG_ERR_MSG_MAX + SG_NAME_MAX + 64];
        snprintf(msg, sizeof msg, "cannot attach to sandbox %.64s: %s", o->sandbox, err.msg);
        return sg_cli_fail("mcp", msg);
    }
    snprintf(a->id, sizeof a->id, "%s", full);
    sg_autojson json_t *res = sg_cli_request(a->id, &(sg_ctl_req){.op = SG_OP_INFO}, &err);
    if (!res) {
        char msg[SG_ERR_MSG_MAX + SG_NAME_MAX + 64];
        snprintf(msg, sizeof msg, "cannot attach to sandbox %s: %s", a->id, err.msg);
        return sg_cli_fail("mcp", msg);
    }
    /* An aborted sandbox would take initialize and then refuse every
     * call: say so now, and how to go on. */
    sg_ctl_info_reply info;
    if (sg_ctl_decode_info_reply(res, &info, &err) < 0)
        return sg_cli_fail("mcp", err.msg);
    if (info.abort_by || info.abort_reason) {
        const char *by = info.abort_by;
        char msg[600];
        snprintf(msg, sizeof msg, "sandbox %s is aborted (%s): no call can run in it; %s", a->id,
                 info.abort_reason ? info.abort_reason : "?",
                 by && strcmp(by, "cap") == 0 ? "an abort by a cap stays: create a new sandbox"
                                              : "'sandglass resume ID' clears it first");
        sg_ctl_info_reply_free(&info);
        return sg_cli_fail("mcp", msg);
    }
    sg_ctl_info_reply_free(&info);
    return MCP_GO;
}

/* Without --sandbox: creates one through `sandglass create --json`. */
static int mcp_create(app *a, mcp_opts *o)
{
    sg_err err = {0};
    if (!o->have_learner || !o->have_task)
        return sg_cli_usage("mcp", "%s is required (or --sandbox ID to attach)",
                            o->have_learner ? "--task" : "--learner");
    o->cargs[o->nc++] = "--json";
    o->cargs[o->nc] = NULL;
    int rc = create_sandbox(a, o->cargs, &err);
    if (rc > 0)
        return rc; /* create named what was wrong (the flag), on its one line */
    if (rc < 0)
        return sg_cli_fail("mcp", err.msg);
    return MCP_GO;
}

/* Serves MCP on stdin/stdout until stdin closes, a signal comes or poll
 * fails; returns why it ended (in reason_buf when a signal). */
static const char *mcp_serve(app *a, int sfd, char *reason_buf, size_t reason_len)
{
    linebuf lb = {0};
    static char chunk[MCP_READ_CHUNK];
    struct pollfd pfd[SG_MCP_MAX_CALLS + 2];
    sg_mcp_call *calls[SG_MCP_MAX_CALLS];
    const char *reason = NULL;
    while (!reason) {
        size_t n = collect_calls(a, pfd, calls, SG_MCP_MAX_CALLS);
        pfd[n] = (struct pollfd){.fd = 0, .events = POLLIN};
        pfd[n + 1] = (struct pollfd){.fd = sfd, .events = POLLIN};
        int timeout = sg_mcp_tick(a->m, sg_now_mono_ns());
        int r = poll(pfd, n + 2, timeout);
        if (r < 0 && errno != EINTR) {
            reason = "poll failed";
            break;
        }
        if (r <= 0)
            continue;
        /* Calls first: reading stdin may cancel (free) some of them. */
        serve_calls(a, pfd, calls, n);
        if (pfd[n + 1].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                snprintf(reason_buf, reason_len, "received %s",
                         si.ssi_signo == SIGTERM ? "SIGTERM" : si.ssi_signo == SIGINT ? "SIGINT" : "SIGHUP");
                reason = reason_buf;
            }
        }
        if (!reason && pfd[n].revents) {
            ssize_t got = read(0, chunk, sizeof chunk);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                if (lb.line.len)
                    sg_mcp_handle_line(a->m, lb.line.data, lb.line.len); /* last line without newline */
                reason = "stdin closed";
            } else {
                feed(a, &lb, chunk, (size_t)got);
            }
        }
    }
    sg_buf_free(&lb.line);
    return reason;
}

/* The abort ended the calls in flight: answer them as they report. */
static void mcp_drain(app *a)
{
    struct pollfd pfd[SG_MCP_MAX_CALLS + 2];
    sg_mcp_call *calls[SG_MCP_MAX_CALLS];
    uint64_t deadline = sg_now_mono_ns() + (uint64_t)MCP_DRAIN_MS * 1000000;
    while (sg_mcp_ncalls(a->m) > 0) {
        uint64_t now = sg_now_mono_ns();
        if (now >= deadline)
            break;
        size_t n = collect_calls(a, pfd, calls, SG_MCP_MAX_CALLS);
        if (n == 0)
            break;
        int r = poll(pfd, n, (int)((deadline - now) / 1000000) + 1);
        if (r > 0)
            serve_calls(a, pfd, calls, n);
    }
}

/* A sandbox this session created is kept for rollback, then destroyed by
 * its supervisor (which records why in a sandbox event): sessions that
 * end must not leave sandboxes for good. */
static void mcp_keep(const app *a, double keep_s)
{
    sg_err err = {0};
    if (keep_s >= 0) {
        sg_ctl_req ex = {.op = SG_OP_EXPIRE, .u.expire.after_s = keep_s};
        sg_autojson json_t *res = sg_cli_request(a->id, &ex, &err);
        if (!res)
            sg_cli_sayf("mcp", "cannot set the keep of sandbox %s: %s", a->id, err.msg);
    }
    char keep[64];
    if (keep_s >= 0)
        snprintf(keep, sizeof keep, "for %g s", keep_s);
    else
        snprintf(keep, sizeof keep, "for good (--keep forever)");
    sg_cli_sayf("mcp",
                "sandbox %s kept %s: 'sandglass rollback %s' restores a checkpoint, "
                "'sandglass destroy %s' removes it",
                a->id, keep, a->id, a->id);
}

int sg_cmd_mcp(int argc, char **argv)
{
    app a = {0};
    /* argv for `sandglass create`: at most every option twice, plus 4. */
    sg_autofree char **cargs = calloc((size_t)argc * 2 + 8, sizeof *cargs);
    if (!cargs)
        return sg_cli_fail("mcp", "out of memory");
    mcp_opts o = {.keep_s = MCP_KEEP_DEFAULT_S, .cargs = cargs};
    int rc = mcp_parse(argc, argv, &o);
    if (rc != MCP_GO)
        return rc;
    rc = o.sandbox ? mcp_attach(&a, &o) : mcp_create(&a, &o);
    if (rc != MCP_GO)
        return rc;
    bool created = !o.sandbox;
    char msg[256];
    snprintf(msg, sizeof msg, "serving MCP on stdio for sandbox %s", a.id);
    app_log_msg(msg);

    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    sg_autoclose int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        return sg_cli_fail("mcp", "signalfd failed");

    sg_mcp_io io = {.send = io_send, .start = io_start, .cancel = io_cancel, .log = io_log, .ud = &a};
    a.m = sg_mcp_new(&io, "/workspace");
    if (!a.m)
        return sg_cli_fail("mcp", "out of memory");
    char reason_buf[64];
    const char *reason = mcp_serve(&a, sfd, reason_buf, sizeof reason_buf);
    snprintf(msg, sizeof msg, "ending the session: %s", reason);
    app_log_msg(msg);
    abort_session(&a, reason);
    mcp_drain(&a);
    sg_mcp_free(a.m);
    if (created)
        mcp_keep(&a, o.keep_s);
    return 0;
}

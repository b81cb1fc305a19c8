/* sandglass exec: runs a command in a live sandbox. The caller's stdin
 * reaches the command as a pipe: handed over as it is when it already is
 * a pipe's read end or /dev/null, else (a terminal, a file, a directory, a
 * socket) relayed by us through a pipe of our own, so no capability of the
 * caller crosses into the sandbox (docs/SECURITY.md). Its stdout and stderr
 * come back through the supervisor (which captures them and enforces the
 * output limit); the exit status is the command's (128+N for signal N).
 * This is the hot path: it touches no file but the control socket. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/buf.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "base/log.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/detachkeys.h"
#include "cli/tty.h"
#include "state/state.h"
#include "wire/ctl.h"

#define EXEC_EXIT_INTERNAL 125 /* our own failure, not the command's */
/* The sandbox's supervisor died while the command ran or the terminal was
 * open: the command's end is unknown (README). */
#define EXEC_EXIT_SUPERVISOR_DIED 122
/* From exec_wait: the supervisor died before it read the request. */
#define EXEC_RESEND (-2)
/* From exec_wait and tty_relay: a supervisor of control protocol 0 (the
 * build before versions) refused "v": the same request goes without it. */
#define EXEC_RESEND_V0 (-3)
/* From exec_wait and tty_relay: a supervisor of the build before "rid"
 * refused it: the same request goes without it. */
#define EXEC_RESEND_NORID (-4)

/* After a SIGTERM or SIGHUP, how long the command has to end (and its
 * last output to come back) before exec leaves without it: `timeout 60
 * sandglass exec` must end even when the supervisor is busy (a checkpoint
 * before the command). The command still gets the signal. */
#define EXEC_TERM_GRACE_MS 5000

/* The subcommand's name in messages: exec, or shell (cmd_shell.c). */
static const char *prog = "exec";

static volatile sig_atomic_t ctl_fd_for_signals = -1;
static volatile sig_atomic_t interactive_tty; /* -t -i: the caller's keys are raw bytes for the sandbox */
static volatile sig_atomic_t signals_seen;
static volatile sig_atomic_t term_sig; /* the first SIGTERM/SIGHUP */
static volatile sig_atomic_t detachable_tty; /* closing the terminal detaches, not hangs up */
static const char *exec_id_arg = "ID";   /* the sandbox, for the line that says how to reattach */

/* The first SIGINT/SIGTERM/SIGHUP goes to the command, which may handle
 * it; a second one means the caller will not wait (`timeout`, a second
 * Ctrl-C): the command is killed and we leave at once, without waiting
 * for an answer that a busy supervisor may not give soon. After a SIGTERM
 * or SIGHUP we wait EXEC_TERM_GRACE_MS at most. */
static void forward_as(int sig, int send_sig, bool leaving)
{
    int fd = ctl_fd_for_signals;
    if (fd < 0)
        return;
    unsigned char s = (unsigned char)(signals_seen ? SIGKILL : send_sig);
    sg_seqpacket_send_typed(fd, SG_CTL_SIGNAL, &s, 1, NULL, 0);
    if (signals_seen++)
        _exit(128 + sig);
    if (leaving)
        term_sig = sig;
}

static void forward_signal(int sig)
{
    forward_as(sig, sig, sig != SIGINT);
}

/* A tty exec: a Ctrl-C typed in raw mode is a byte for the sandbox's
 * terminal, never a signal here. A signal in raw mode (and any SIGTERM or
 * SIGHUP) means the caller is leaving: the terminal is restored at once
 * and the command's terminal hangs up (SIGHUP), as a closed terminal
 * window would. Without raw mode (-t without -i) SIGINT goes on as exec's. */
static void tty_forward_signal(int sig)
{
    if (sig == SIGHUP && detachable_tty) {
        /* The window closed: leaving closes the connection, which detaches
         * the shell; it runs on until attached again. */
        sg_cli_tty_restore();
        _exit(128 + SIGHUP);
    }
    if (sig != SIGINT || interactive_tty) {
        sg_cli_tty_restore();
        forward_as(sig, SIGHUP, true);
    } else
        forward_signal(sig);
}

/* After a SIGTERM/SIGHUP: waits for the supervisor until the grace ends.
 * Returns false when it ended first. */
static bool term_wait(int ctl)
{
    static uint64_t deadline;
    uint64_t now = sg_now_mono_ns();
    if (!deadline)
        deadline = now + (uint64_t)EXEC_TERM_GRACE_MS * 1000000u;
    while (now < deadline) {
        struct pollfd p = {.fd = ctl, .events = POLLIN};
        int r = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
        if (r > 0)
            return true;
        now = sg_now_mono_ns();
    }
    return false;
}

/* Copies the caller's stdin into the pipe the command reads, as the
 * command takes it; ends (closing the pipe: EOF for the command) at the
 * caller's EOF or error, or when the command closed its end. */
typedef struct stdin_relay {
    int src, dst; /* -1 once done */
    bool used;    /* something was read from the caller's stdin */
    /* Until the supervisor answers, what was read is kept: a supervisor of
     * protocol 0 refuses the request (EXEC_RESEND_V0), and the request
     * that goes again must carry it (at most a pipe's and buf's worth:
     * nothing drains the pipe before the command runs). */
    bool keep, kept_lost;
    sg_buf kept;
    size_t off, len;
    char buf[65536];
} stdin_relay;

static void relay_stop(stdin_relay *r)
{
    if (r->dst >= 0)
        close(r->dst);
    r->src = r->dst = -1;
}

static void relay_step(stdin_relay *r, short src_ev, short dst_ev)
{
    if (r->len == r->off && (src_ev & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = read(r->src, r->buf, sizeof r->buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            return;
        r->used = true;
        if (n <= 0) {
            if (n < 0)
                sg_cli_sayf("exec", "cannot read stdin (%s): the command gets EOF", strerror(errno));
            relay_stop(r);
            return;
        }
        r->off = 0;
        r->len = (size_t)n;
        if (r->keep && sg_buf_append(&r->kept, r->buf, r->len) < 0)
            r->kept_lost = true;
    }
    if (r->len > r->off && (dst_ev & (POLLOUT | POLLERR | POLLHUP))) {
        ssize_t n = write(r->dst, r->buf + r->off, r->len - r->off);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            return;
        if (n < 0) { /* EPIPE: the command closed its stdin */
            relay_stop(r);
            return;
        }
        r->off += (size_t)n;
    }
}

/* Waits until the supervisor's socket is readable, relaying stdin
 * meanwhile. Returns false when poll fails. */
static bool relay_until_readable(int ctl, stdin_relay *r)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = ctl, .events = POLLIN}, {.fd = -1}};
        if (r->src >= 0)
            p[1] = r->len > r->off ? (struct pollfd){.fd = r->dst, .events = POLLOUT}
                                   : (struct pollfd){.fd = r->src, .events = POLLIN};
        if (poll(p, 2, -1) < 0)
            return false; /* EINTR too: the caller looks at the signal */
        if (r->src >= 0 && p[1].revents)
            relay_step(r, p[1].fd == r->src ? p[1].revents : 0, p[1].fd == r->dst ? p[1].revents : 0);
        if (p[0].revents)
            return true;
    }
}

static void exec_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass exec ID [-t [-i]] [--timeout S] [--cwd DIR] [--env K=V]... [--json] -- CMD [ARG...]\n"
        "\n"
        "Runs CMD in the live sandbox ID (or a unique prefix of its id), as the\n"
        "sandbox user, with this stdin (relayed through a pipe unless it is one) and\n"
        "its stdout and stderr apart. Exits with the command's status (128+N for\n"
        "signal N); 125: sandglass's own error, 126: the command could not start,\n"
        "127: not found. A command sandglass kills (time limit, output or memory\n"
        "limit, abort) ends with one line on stderr saying why.\n"
        "\n"
        "  --timeout S   wall time for this exec (default: the sandbox's, 600 s unless\n"
        "                create said otherwise; with -t none: a terminal session)\n"
        "  --cwd DIR     an absolute directory inside the sandbox (default /workspace)\n"
        "  --env K=V     one more environment variable (repeatable)\n"
        "  -t, --tty     run CMD on a terminal made inside the sandbox (stdin must be a\n"
        "                terminal); its output comes on stdout, stdout and stderr as one;\n"
        "                TERM and the window size (and every resize) are passed on\n"
        "  -i, --interactive  with -t: this terminal in raw mode, every key to CMD's\n"
        "                terminal (Ctrl-C reaches its foreground job); restored at the end\n"
        "  --no-record-input  with -t: the session's recording (sandglass cast) keeps\n"
        "                the output but not the keys typed (passwords)\n"
        "  --detach-keys KEYS  with -t -i: these keys (e.g. ctrl-p,ctrl-q) detach this\n"
        "                terminal and CMD runs on, as does closing the terminal (SIGHUP);\n"
        "                `sandglass shell ID --attach` reattaches\n"
        "  --json        end stdout with {exit_code, signal, wall_s, cpu_s, memory_peak,\n"
        "                oom_killed, pids_limit_hit, timed_out, output_bytes,\n"
        "                output_limit_hit, killed_by}\n"
        "\n"
        "The first SIGINT, SIGTERM or SIGHUP goes to the command; after SIGTERM or\n"
        "SIGHUP exec waits 5 s at most; a second signal kills the command.\n");
}

static int exec_fail(const char *msg)
{
    sg_cli_sayf(prog, "%s", msg);
    return EXEC_EXIT_INTERNAL;
}

/* Where the output of an exec goes, and the last byte it wrote (an
 * answer of our own starts on a fresh line). */
typedef struct exec_out {
    bool tty;
    char last_out;
} exec_out;

/* What the supervisor says itself during a tty exec (why it killed the
 * command): on a restored terminal, on a line of its own. */
static void tty_say(const char *buf, size_t n, char last_out)
{
    sg_cli_tty_restore();
    if (last_out != '\n')
        sg_write_all(2, "\r\n", 2);
    sg_write_all(2, buf, n);
}

static void exec_output(void *ud, uint8_t type, const char *buf, size_t n)
{
    exec_out *o = ud;
    if (type == SG_CTL_STDOUT) {
        sg_write_all(1, buf, n);
        if (n > 0)
            o->last_out = buf[n - 1];
    } else if (o->tty) {
        tty_say(buf, n, o->last_out);
        o->last_out = '\n';
    } else {
        sg_write_all(2, buf, n);
    }
}

/* The RESULT of an exec: its exit code, or a detached shell; --json
 * prints it whole. */
static int exec_result(json_t *res, bool json, char last_out)
{
    sg_err err = {0};
    sg_ctl_exec_reply r;
    if (sg_ctl_decode_exec_reply(res, &r, &err) < 0) {
        sg_cli_sayf(prog, "bad answer from the supervisor: %s", err.msg);
        return EXEC_EXIT_INTERNAL;
    }
    if (r.detached) {
        char line[300];
        int l = snprintf(line, sizeof line, "sandglass %s: detached; the shell (exec %lld) runs on: "
                         "sandglass shell %s --attach\n", prog, r.exec, exec_id_arg);
        if (last_out != '\n')
            sg_write_all(2, "\r\n", 2);
        sg_write_all(2, line, (size_t)l < sizeof line ? (size_t)l : sizeof line - 1);
        return 0;
    }
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        if (last_out != '\n')
            sg_write_all(1, "\n", 1);
        printf("%s\n", s);
    }
    return r.exit_code < 0 ? 0 : r.exit_code;
}

/* One message of the supervisor during an exec (c's step): output, or
 * the answer that ends it (returns true, *code set; EXEC_RESEND_V0 when a
 * supervisor of protocol 0 refused the request's version). */
static bool exec_message(sg_ctl_call *c, uint8_t type, const char *buf, ssize_t n, bool json, int *code)
{
    exec_out *o = c->ud;
    sg_ctl_call_end e = sg_ctl_call_feed(c, type, buf, (size_t)n);
    if (e == SG_CTL_CALL_MORE)
        return false;
    if (e == SG_CTL_CALL_ERROR && sg_ctl_is_v0_refusal(c->error)) {
        *code = EXEC_RESEND_V0;
        return true;
    }
    if (e == SG_CTL_CALL_ERROR && sg_ctl_is_rid_refusal(c->error)) {
        *code = EXEC_RESEND_NORID;
        return true;
    }
    /* A terminal's last line may be unfinished: the answer's own line
     * (an error, --json's result) starts on a fresh one. */
    if (sg_cli_tty_restore() || o->tty) {
        if (o->last_out != '\n' && (e == SG_CTL_CALL_ERROR || json))
            sg_write_all(2, "\r\n", 2);
        o->last_out = '\n';
    }
    if (e == SG_CTL_CALL_EXIT)
        *code = c->exit_code;
    else if (e == SG_CTL_CALL_RESULT)
        *code = exec_result(c->result, json, o->last_out);
    else
        sg_cli_sayf(prog, "%s", c->error);
    /* Our request again, after a connection lost before any answer: the
     * supervisor had started it; it ran once, its end unknown here. */
    if (e == SG_CTL_CALL_ERROR && sg_ctl_is_rid_seen(c->error))
        *code = EXEC_EXIT_SUPERVISOR_DIED;
    return true;
}

/* Sends one message on the non-blocking connection of a tty exec: 1 sent,
 * 0 not now (EAGAIN: the supervisor does not read; backpressure), -1 lost. */
static int tty_send(int fd, uint8_t type, const void *buf, size_t len)
{
    int r = sg_seqpacket_send_typed(fd, type, buf, len, NULL, 0);
    return r == 0 ? 1 : r == -EAGAIN ? 0 : -1;
}

/* The connection ended with no answer. The sandbox lives on (its record
 * and its init are there) when its supervisor died under the command: the
 * next command takes it over. Else it went (a destroy). Fills line (what
 * to say) and returns the exit status. */
static int exec_lost(bool tty, char *line, size_t len)
{
    sg_sandbox_meta m;
    bool lives = false;
    if (sg_sandbox_meta_load(exec_id_arg, &m, NULL) == 0) {
        lives = sg_state_pid_alive(m.init_pid);
        sg_sandbox_meta_clear(&m);
    }
    if (!lives) {
        snprintf(line, len, "sandglass %s: lost the supervisor before the command finished (the sandbox was "
                 "destroyed?)\n", prog);
        return EXEC_EXIT_INTERNAL;
    }
    if (tty)
        snprintf(line, len, "sandglass %s: the sandbox's supervisor died; the terminal ended; the sandbox lives "
                 "on: run the %s again\n", prog, strcmp(prog, "shell") == 0 ? "shell" : "command");
    else
        snprintf(line, len, "sandglass %s: the sandbox's supervisor died while the command ran: its end is "
                 "unknown (it may still run); the sandbox lives on: the next command takes it over\n", prog);
    return EXEC_EXIT_SUPERVISOR_DIED;
}

/* The relay of a tty exec once its request is sent: the caller's keys
 * (with -i) and window size up, the terminal's output down, until the
 * exit code comes. Returns the exit status. */
/* Keys sent before the supervisor's first answer: a supervisor of
 * protocol 0 refuses the request (EXEC_RESEND_V0), and they go again on
 * the next connection. */
static char tty_kept[4096];
static size_t tty_kept_len;

static int tty_relay(int fd, bool interactive, bool json, sg_detach_keys *dk)
{
    int winch = sg_cli_tty_winch_fd();
    interactive_tty = interactive;
    if (sg_cli_tty_raw(interactive) < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "cannot put the terminal in raw mode: %s", strerror(errno));
        return exec_fail(msg);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    static char buf[SG_CTL_MSG_MAX];
    char in[4096 + SG_DETACH_KEYS_MAX], raw[4096];
    exec_out out = {.tty = true, .last_out = '\n'};
    __attribute__((cleanup(sg_ctl_call_free))) sg_ctl_call call = {.on_output = exec_output, .ud = &out};
    size_t in_len = tty_kept_len;
    memcpy(in, tty_kept, tty_kept_len);
    tty_kept_len = 0;
    bool in_eof = !interactive, ws_pending = false, detach = false;
    detachable_tty = interactive && dk->n > 0;
    int code = EXEC_EXIT_INTERNAL;
    for (;;) {
        if (term_sig) {
            in_eof = true;
            if (!term_wait(fd)) {
                sg_cli_sayf(prog, "the command did not end within %d s of the signal; leaving it",
                            EXEC_TERM_GRACE_MS / 1000);
                code = 128 + term_sig;
                break;
            }
        }
        struct pollfd p[3] = {
            {.fd = fd, .events = POLLIN | (in_len || ws_pending || detach ? POLLOUT : 0)},
            {.fd = in_eof || in_len ? -1 : 0, .events = POLLIN},
            {.fd = winch, .events = POLLIN},
        };
        if (poll(p, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[2].revents) {
            sg_cli_tty_winch_clear();
            ws_pending = true;
        }
        if (p[1].revents) {
            ssize_t n = read(0, raw, sizeof raw);
            if (n > 0 && sg_detach_filter(dk, raw, (size_t)n, in, &in_len))
                detach = in_eof = true; /* what came before the keys goes first */
            else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                in_eof = true; /* the caller's terminal is gone: nothing more to type */
        }
        int sent = 1;
        if (ws_pending) {
            sg_ctl_winsz ws = sg_cli_tty_size();
            if ((sent = tty_send(fd, SG_CTL_WINSZ, &ws, sizeof ws)) > 0)
                ws_pending = false;
        }
        if (sent >= 0 && in_len && (sent = tty_send(fd, SG_CTL_STDIN, in, in_len)) > 0) {
            if (!call.answered && in_len <= sizeof tty_kept - tty_kept_len) {
                memcpy(tty_kept + tty_kept_len, in, in_len);
                tty_kept_len += in_len;
            }
            in_len = 0;
        }
        if (sent >= 0 && detach && !in_len && (sent = tty_send(fd, SG_CTL_DETACH, NULL, 0)) > 0)
            detach = false; /* the answer ends the relay */
        if (sent < 0 && !p[0].revents) {
            tty_say("sandglass: lost the supervisor\n", 31, out.last_out);
            break;
        }
        if (!p[0].revents)
            continue;
        uint8_t type;
        ssize_t n = sg_seqpacket_recv_typed(fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n == -EINTR || n == -EAGAIN)
            continue;
        if (n < 0 || type == 0) {
            char line[320];
            code = exec_lost(true, line, sizeof line);
            tty_say(line, strlen(line), out.last_out);
            break;
        }
        if (type != SG_CTL_ERROR)
            tty_kept_len = 0; /* answered: the keys were the command's */
        if (exec_message(&call, type, buf, n, json, &code))
            break;
    }
    if (code != EXEC_RESEND_V0 && code != EXEC_RESEND_NORID)
        tty_kept_len = 0;
    sg_cli_tty_restore();
    return code;
}

void sg_cmd_exec_reset(void)
{
    signals_seen = 0;
    term_sig = 0;
}

int sg_cmd_exec_as(const char *name, int argc, char **argv)
{
    prog = name;
    return sg_cmd_exec(argc, argv);
}

#define EXEC_GO (-1) /* from a step: carry on (else: the exit code) */

/* What the command line asked for; req is the request being built. Its
 * strings are the command line's (argv, optarg) and env[]: not owned. */
typedef struct exec_opts {
    sg_exec_req req;
    char *env[SG_EXEC_MAX_ENV + 2];
    size_t nenv;
    char term[160];
    const char *id;
    bool json, tty, interactive, has_term, has_detach_keys;
    sg_detach_keys dk;
} exec_opts;

static bool utf8_ok(const char *s)
{
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

/* One more "K=V"; one that is not UTF-8 is not passed (as before). */
static int exec_add_env(exec_opts *o, char *kv)
{
    if (!utf8_ok(kv))
        return EXEC_GO;
    if (o->nenv >= SG_EXEC_MAX_ENV + 1)
        return exec_fail("too many --env (at most 1024)");
    o->env[o->nenv++] = kv;
    o->req.env = o->env;
    return EXEC_GO;
}

/* The options, up to the id and the command. */
static int exec_parse_options(int argc, char **argv, exec_opts *o)
{
    static const struct option opts[] = {
        {"timeout", required_argument, NULL, 'T'},
        {"tty", no_argument, NULL, 't'},
        {"interactive", no_argument, NULL, 'i'},
        {"no-record-input", no_argument, NULL, 'N'},
        {"detach-keys", required_argument, NULL, 'D'},
        {"cwd", required_argument, NULL, 'c'},
        {"env", required_argument, NULL, 'e'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    sg_err err = {0};
    int c;
    while ((c = getopt_long(argc, argv, "+ti", opts, NULL)) != -1) {
        switch (c) {
        case 't': o->tty = true; break;
        case 'i': o->interactive = true; break;
        case 'N': o->req.no_record_input = true; break;
        case 'D':
            if (sg_detach_keys_parse(optarg, &o->dk, &err) < 0)
                return exec_fail(err.msg);
            o->has_detach_keys = true;
            break;
        case 'T': {
            double t;
            if (sg_parse_duration(optarg, 7 * 24 * 3600.0, &t, &err) < 0) {
                char msg[sizeof err.msg + 16];
                snprintf(msg, sizeof msg, "--timeout: %s", err.msg);
                return exec_fail(msg);
            }
            o->req.timeout_s = t;
            break;
        }
        case 'c':
            if (optarg[0] != '/')
                return exec_fail("--cwd must be an absolute path inside the sandbox");
            o->req.cwd = utf8_ok(optarg) ? optarg : NULL;
            break;
        case 'e':
            if (!strchr(optarg, '=') || optarg[0] == '=')
                return exec_fail("--env takes KEY=VALUE");
            if (exec_add_env(o, optarg) != EXEC_GO)
                return EXEC_EXIT_INTERNAL;
            o->has_term = o->has_term || strncmp(optarg, "TERM=", 5) == 0;
            break;
        case 'j': o->json = true; break;
        case 'h':
            exec_usage(stdout);
            return 0;
        default: {
            char msg[128];
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", argv[optind - 1]);
            return exec_fail(msg);
        }
        }
    }
    return EXEC_GO;
}

/* The command line into o->req: id, options, the command's argv. */
static int exec_parse(int argc, char **argv, exec_opts *o)
{
    opterr = 0;
    /* "+" stops at the first non-option: the id, then more options. */
    if (argc >= 2 && argv[1][0] != '-') {
        o->id = argv[1];
        argv++;
        argc--;
    }
    int rc = exec_parse_options(argc, argv, o);
    if (rc != EXEC_GO)
        return rc;
    if (!o->id && optind < argc)
        o->id = argv[optind++];
    if (!o->id) {
        exec_usage(stderr);
        return exec_fail("missing sandbox id");
    }
    if (!sg_valid_name(o->id)) {
        char msg[256];
        snprintf(msg, sizeof msg, "invalid sandbox id '%.128s'", o->id);
        return exec_fail(msg);
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0 && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc)
        return exec_fail("missing command (sandglass exec ID -- CMD [ARG...])");
    for (int i = optind; i < argc; i++)
        if (!utf8_ok(argv[i]))
            return exec_fail("arguments must be valid UTF-8");
    o->req.argv = argv + optind; /* NULL-terminated, as argv is */
    return EXEC_GO;
}

/* Checks the options that go together; -t adds the terminal's size and
 * TERM to the request. */
static int exec_finish_request(exec_opts *o)
{
    if (o->interactive && !o->tty)
        return exec_fail("-i goes with -t (an exec without a terminal always gets this stdin)");
    if (!o->tty && o->req.no_record_input)
        return exec_fail("--no-record-input goes with -t (only a terminal's session is recorded)");
    if (o->has_detach_keys && !o->interactive)
        return exec_fail("--detach-keys goes with -t -i (only a terminal typed at can be detached)");
    o->req.detachable = o->dk.n > 0;
    if (o->tty) {
        /* The terminal itself never crosses (docs/SECURITY.md): one is made
         * inside the sandbox and relayed; ours must be one to relay. */
        if (!isatty(0))
            return exec_fail("-t needs a terminal on stdin (stdin is not a terminal)");
        o->req.tty = true;
        o->req.winsz = sg_cli_tty_size();
        const char *term = getenv("TERM");
        snprintf(o->term, sizeof o->term, "TERM=%s", term ? term : "");
        /* A TERM that is not UTF-8 is not passed (exec_add_env). */
        if (!o->has_term && term && *term && strlen(term) < 128 && exec_add_env(o, o->term) != EXEC_GO)
            return EXEC_EXIT_INTERNAL;
    }
    /* Without --json only the exit code is used: the supervisor sends it
     * alone (SG_CTL_EXIT), with no JSON to make or to parse. */
    o->req.code_only = !o->json;
    return EXEC_GO;
}

/* Connects to the sandbox's supervisor (*id may become the full id, in
 * full), starting a new one when it died but the sandbox lives on. */
static int exec_connect(const char **id, char full[SG_ID_LEN + 1], int *fdp)
{
    sg_err err = {0};
    int fd = sg_ctl_connect(*id, &err);
    if (fd < 0 && strlen(*id) < SG_ID_LEN) {
        /* A unique prefix of an id (looked up only when the name is not an
         * id itself: the hot path connects at once). */
        sg_err rerr = {0};
        if (sg_state_resolve_id(*id, full, &rerr) < 0)
            return exec_fail(rerr.msg);
        *id = full;
        fd = sg_ctl_connect(*id, &err);
    }
    if (fd < 0 && (err.code == ECONNREFUSED || err.code == ENOENT)) {
        /* The supervisor died (crash, SIGKILL) but the sandbox may live on:
         * a new supervisor takes it over (revive.h), or we learn it is gone. */
        fd = sg_revive_connect(*id, prog, &err);
    }
    if (fd < 0)
        return exec_fail(err.msg);
    *fdp = fd;
    return EXEC_GO;
}

/* Sends the request with the command's stdin: as it is when it is
 * already a pipe or /dev/null (the fast path: nothing to relay), else
 * through a pipe of ours that relay feeds. Closes fd on failure. */
static int exec_send(int fd, const char *body, bool tty, stdin_relay *relay)
{
    sg_err err = {0};
    int in = 0;
    sg_autoclose int relay_in = -1;
    if (!tty && !sg_ctl_stdin_ok(0)) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
            close(fd);
            sg_err_sys(&err, "cannot make a pipe for stdin");
            return exec_fail(err.msg);
        }
        relay_in = in = p[0];
        relay->dst = p[1];
        relay->src = 0;
        signal(SIGPIPE, SIG_IGN);
        /* Sent again (EXEC_RESEND_V0): what the refused request's pipe got
         * first. The pipe holds it all: nothing reads it before the command runs. */
        if (relay->kept.len) {
            fcntl(relay->dst, F_SETPIPE_SZ, (int)relay->kept.len);
            if (sg_write_all(relay->dst, relay->kept.data, relay->kept.len) < 0) {
                close(fd);
                relay_stop(relay);
                return exec_fail("cannot relay stdin again to the older supervisor");
            }
            relay->off = relay->len = 0;
        }
        sg_buf_free(&relay->kept);
        relay->keep = !relay->kept_lost;
        fcntl(relay->dst, F_SETFL, O_NONBLOCK);
    }
    /* A tty exec sends no stdin: its terminal is made inside. */
    int r = sg_seqpacket_send_typed(fd, SG_CTL_REQ, body, strlen(body), tty ? NULL : &in, tty ? 0 : 1);
    if (r < 0) {
        close(fd);
        relay_stop(relay);
        if (sg_revive_unread(r))
            return EXEC_RESEND; /* the supervisor died as we connected */
        errno = -r;
        sg_err_sys(&err, "cannot send the request to the supervisor");
        return exec_fail(err.msg);
    }
    /* relay_in closes here: the command's end now lives in the sandbox. */
    return EXEC_GO;
}

/* Without -t: relays stdin, prints what comes back, until the exit. */
static int exec_wait(int fd, stdin_relay *relay, bool json)
{
    static char buf[SG_CTL_MSG_MAX];
    exec_out out = {.tty = false, .last_out = '\n'};
    __attribute__((cleanup(sg_ctl_call_free))) sg_ctl_call call = {.on_output = exec_output, .ud = &out};
    int code = EXEC_EXIT_INTERNAL;
    bool first = true;
    for (;;) {
        uint8_t type;
        if (term_sig) {
            relay_stop(relay); /* the caller is going away */
            if (!term_wait(fd)) {
                sg_cli_sayf("exec",
                            "the command did not end within %d s of %s; leaving it "
                            "(it got the signal; the sandbox's limits still hold)",
                            EXEC_TERM_GRACE_MS / 1000, term_sig == SIGHUP ? "SIGHUP" : "SIGTERM");
                code = 128 + term_sig;
                break;
            }
        } else if (relay->src >= 0 ? !relay_until_readable(fd, relay)
                                   : poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, -1) < 0) {
            /* Waiting in poll, not in the receive (sg_seqpacket_recv_typed retries on
             * EINTR): a signal comes back here, to the grace above. */
            if (errno == EINTR)
                continue;
            sg_cli_sayf("exec", "poll: %s", strerror(errno));
            break;
        }
        ssize_t n = sg_seqpacket_recv_typed(fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n == -EINTR)
            continue;
        /* Reset before any answer: the dying supervisor never read the
         * request (sg_revive_unread), so the command never ran. */
        if (n < 0 && first && sg_revive_unread((int)n) && !relay->used && !signals_seen)
            return EXEC_RESEND;
        if (n < 0 || type == 0) {
            char line[320];
            code = exec_lost(false, line, sizeof line);
            sg_print_vis(2, "", "%s", line);
            break;
        }
        first = false;
        if (type != SG_CTL_ERROR) { /* not a refusal: what was read is the command's */
            relay->keep = false;
            sg_buf_free(&relay->kept);
        }
        if (exec_message(&call, type, buf, n, json, &code))
            break;
    }
    return code;
}

/* The request is sent: signals forwarded, the relay run to the end.
 * Returns the exit status, or EXEC_RESEND. */
static int exec_run(int fd, exec_opts *o, stdin_relay *relay, const char *id)
{
    ctl_fd_for_signals = fd;
    struct sigaction sa = {.sa_handler = o->tty ? tty_forward_signal : forward_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    exec_id_arg = id;
    int code = o->tty ? tty_relay(fd, o->interactive, o->json, &o->dk) : exec_wait(fd, relay, o->json);
    ctl_fd_for_signals = -1;
    if (!o->tty)
        relay_stop(relay);
    return code;
}

/* The request's payload at protocol version v. */
static char *exec_body(const sg_exec_req *e, int v)
{
    sg_ctl_req r = {.op = SG_OP_EXEC, .v = v, .u.exec = *e};
    return sg_ctl_req_dump(&r);
}

int sg_cmd_exec(int argc, char **argv)
{
    exec_opts o = {0};
    int rc = exec_parse(argc, argv, &o);
    if (rc == EXEC_GO)
        rc = exec_finish_request(&o);
    if (rc != EXEC_GO)
        return rc;
    const char *id = o.id;
    char full[SG_ID_LEN + 1];
    if (sg_rand_hex(o.req.rid, 32, NULL) < 0)
        o.req.rid[0] = '\0'; /* no randomness: the request goes without an id */
    sg_autofree char *body = exec_body(&o.req, SG_CTL_VERSION);
    if (!body)
        return exec_fail("arguments must be valid UTF-8");
    if (strlen(body) > SG_CTL_MSG_MAX - 1)
        return exec_fail("command line too long (at most 64 KiB with its environment)");
    /* A request the dying supervisor never read goes again to the one
     * that takes the sandbox over, once; under the same "rid": a copy of
     * one that was started after all is refused, never run twice. A
     * supervisor of protocol 0 gets it again without "v"
     * (EXEC_RESEND_V0), one of the build before "rid" without that. */
    bool resent = false, v0 = false;
    for (;;) {
        int fd = -1;
        rc = exec_connect(&id, full, &fd);
        if (rc != EXEC_GO)
            return rc;
        static stdin_relay relay = {.src = -1, .dst = -1};
        rc = exec_send(fd, body, o.tty, &relay);
        int code = rc;
        if (rc == EXEC_GO) {
            code = exec_run(fd, &o, &relay, id);
            close(fd);
        } else if (rc != EXEC_RESEND) {
            return rc;
        }
        bool refused = (code == EXEC_RESEND_V0 && !v0) || (code == EXEC_RESEND_NORID && o.req.rid[0]);
        if (refused && !relay.kept_lost) {
            v0 |= code == EXEC_RESEND_V0;
            o.req.rid[0] = '\0'; /* a supervisor of protocol 0 has no "rid" either */
            free(body);
            if (!(body = exec_body(&o.req, v0 ? 0 : SG_CTL_VERSION)))
                return exec_fail("out of memory");
            continue;
        }
        if (code == EXEC_RESEND && !resent) {
            resent = true;
            continue;
        }
        if (code == EXEC_RESEND)
            return exec_fail("the supervisor died twice before it read the command");
        return code == EXEC_RESEND_V0 || code == EXEC_RESEND_NORID ? EXEC_EXIT_INTERNAL : code;
    }
}

static int attach_once(const char **idp, const sg_ctl_req *req, sg_detach_keys *dk);

int sg_cmd_exec_attach(const char *id, long exec_num, const char *detach_keys)
{
    prog = "shell";
    sg_detach_keys dk;
    sg_err err = {0};
    if (sg_detach_keys_parse(detach_keys, &dk, &err) < 0)
        return exec_fail(err.msg);
    if (!isatty(0))
        return exec_fail("--attach needs a terminal on stdin (stdin is not a terminal)");
    if (!sg_valid_name(id))
        return exec_fail("invalid sandbox id");
    /* Sent at the supervisor's version (attach_once asks it first); a
     * refusal of "v" still makes it go again without. */
    sg_ctl_req req = {.op = SG_OP_ATTACH, .v = SG_CTL_VERSION,
                      .u.attach = {.exec = exec_num > 0 ? exec_num : 0, .winsz = sg_cli_tty_size(),
                                   .detachable = dk.n > 0}};
    int code = attach_once(&id, &req, &dk);
    if (code != EXEC_RESEND_V0)
        return code;
    req.v = 0; /* a supervisor of protocol 0 */
    code = attach_once(&id, &req, &dk);
    return code == EXEC_RESEND_V0 ? EXEC_EXIT_INTERNAL : code;
}

/* The control protocol the supervisor of sandbox id speaks (its ping's
 * "v": 0 from one of the build before versions), at most ours. A
 * supervisor of protocol 0 refuses an attach with "v", and keys typed
 * before its refusal is read may reset the connection first (they stay
 * unread in a socket it closes): the attach is sent at its version. */
static int attach_version(const char *id)
{
    sg_err err = {0};
    sg_autojson json_t *pong = sg_cli_request(id, &(sg_ctl_req){.op = SG_OP_PING}, &err);
    sg_ctl_ping_reply pr;
    if (!pong || sg_ctl_decode_ping_reply(pong, &pr, &err) < 0)
        return SG_CTL_VERSION; /* the attach says what is wrong */
    return pr.v < SG_CTL_VERSION ? pr.v : SG_CTL_VERSION;
}

/* One attach: connect, send, relay. */
static int attach_once(const char **idp, const sg_ctl_req *req, sg_detach_keys *dk)
{
    sg_err err = {0};
    const char *id = *idp;
    static char full[SG_ID_LEN + 1];
    int fd = -1;
    int rc = exec_connect(&id, full, &fd);
    if (rc != EXEC_GO)
        return rc;
    *idp = id;
    sg_ctl_req at = *req;
    if (at.v > 0)
        at.v = attach_version(id);
    sg_autofree char *body = sg_ctl_req_dump(&at);
    int r = body ? sg_seqpacket_send_typed(fd, SG_CTL_REQ, body, strlen(body), NULL, 0) : -ENOMEM;
    if (r < 0) {
        close(fd);
        errno = -r;
        sg_err_sys(&err, "cannot send the request to the supervisor");
        return exec_fail(err.msg);
    }
    exec_id_arg = id;
    ctl_fd_for_signals = fd;
    struct sigaction sa = {.sa_handler = tty_forward_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int code = tty_relay(fd, true, false, dk);
    ctl_fd_for_signals = -1;
    close(fd);
    return code;
}

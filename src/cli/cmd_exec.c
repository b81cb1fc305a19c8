/* sandglass exec: runs a command in a live sandbox. The caller's stdin is
 * handed to the command; its stdout and stderr come back through the
 * supervisor (which captures them and enforces the output limit); the exit
 * status is the command's (128+N for signal N). This is the hot path: it
 * touches no file but the control socket. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "cmds.h"
#include "common.h"
#include "ctl.h"
#include "jsonutil.h"
#include "limits.h"
#include "state.h"
#include "util.h"

#define EXEC_EXIT_INTERNAL 125 /* our own failure, not the command's */

static volatile sig_atomic_t ctl_fd_for_signals = -1;

static void forward_signal(int sig)
{
    int fd = ctl_fd_for_signals;
    if (fd >= 0) {
        unsigned char s = (unsigned char)sig;
        sg_ctl_send(fd, SG_CTL_SIGNAL, &s, 1, NULL, 0);
    }
}

static void exec_usage(FILE *f)
{
    fprintf(f, "usage: sandglass exec ID [--timeout S] [--cwd DIR] [--env K=V]... [--json] -- CMD [ARG...]\n");
}

static int exec_fail(const char *msg)
{
    fprintf(stderr, "sandglass exec: %s\n", msg);
    return EXEC_EXIT_INTERNAL;
}

int sg_cmd_exec(int argc, char **argv)
{
    static const struct option opts[] = {
        {"timeout", required_argument, NULL, 't'},
        {"cwd", required_argument, NULL, 'c'},
        {"env", required_argument, NULL, 'e'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    sg_err err = {0};
    sg_autojson json_t *req = json_pack("{s:s}", "op", "exec");
    json_t *env = NULL;
    bool json = false;
    int c;
    opterr = 0;
    /* "+" stops at the first non-option: the id, then more options. */
    const char *id = NULL;
    if (argc >= 2 && argv[1][0] != '-') {
        id = argv[1];
        argv++;
        argc--;
    }
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 't': {
            double t;
            if (sg_parse_seconds(optarg, 7 * 24 * 3600.0, &t, &err) < 0)
                return exec_fail(err.msg);
            json_object_set_new(req, "timeout", json_real(t));
            break;
        }
        case 'c':
            if (optarg[0] != '/')
                return exec_fail("--cwd must be an absolute path inside the sandbox");
            json_object_set_new(req, "cwd", json_string(optarg));
            break;
        case 'e':
            if (!strchr(optarg, '=') || optarg[0] == '=')
                return exec_fail("--env takes KEY=VALUE");
            if (!env) {
                env = json_array();
                json_object_set_new(req, "env", env);
            }
            json_array_append_new(env, json_string(optarg));
            break;
        case 'j': json = true; break;
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
    if (!id && optind < argc)
        id = argv[optind++];
    if (!id) {
        exec_usage(stderr);
        return exec_fail("missing sandbox id");
    }
    if (!sg_valid_name(id)) {
        char msg[256];
        snprintf(msg, sizeof msg, "invalid sandbox id '%.128s'", id);
        return exec_fail(msg);
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0 && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc)
        return exec_fail("missing command (sandglass exec ID -- CMD [ARG...])");
    json_t *av = json_array();
    for (int i = optind; i < argc; i++) {
        json_t *s = json_string(argv[i]);
        if (!s)
            return exec_fail("arguments must be valid UTF-8");
        json_array_append_new(av, s);
    }
    json_object_set_new(req, "argv", av);
    /* Without --json only the exit code is used: the supervisor sends it
     * alone (SG_CTL_EXIT), with no JSON to make or to parse. */
    if (!json)
        json_object_set_new(req, "result", json_string("code"));

    int fd = sg_ctl_connect(id, &err);
    if (fd < 0) {
        /* The supervisor died (crash, SIGKILL) but the sandbox may live on:
         * start a new supervisor that takes it over, then go on. */
        sg_sandbox_meta m;
        if (sg_sandbox_meta_load(id, &m, &err) < 0)
            return exec_fail(err.msg);
        bool revivable = !sg_state_pid_alive(m.supervisor_pid) && sg_state_pid_alive(m.init_pid);
        sg_sandbox_meta_clear(&m);
        if (revivable && sg_cli_start_supervisor(id, true, &err) == 0) {
            fprintf(stderr, "sandglass exec: the supervisor of sandbox %s had died; a new one took over\n", id);
            fd = sg_ctl_connect(id, &err);
        }
        if (fd < 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "the supervisor of sandbox %s is not running and the sandbox is gone "
                     "(run 'sandglass destroy %s' or 'sandglass gc')", id, id);
            return exec_fail(msg);
        }
    }
    sg_autofree char *body = sg_json_dump(req);
    if (strlen(body) > SG_CTL_MSG_MAX - 1) {
        close(fd);
        return exec_fail("command line too long (at most 64 KiB with its environment)");
    }
    int in = 0;
    int r = sg_ctl_send(fd, SG_CTL_REQ, body, strlen(body), &in, 1);
    if (r < 0) {
        close(fd);
        errno = -r;
        sg_err_sys(&err, "cannot send the request to the supervisor");
        return exec_fail(err.msg);
    }
    ctl_fd_for_signals = fd;
    struct sigaction sa = {.sa_handler = forward_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    static char buf[SG_CTL_MSG_MAX];
    char last_out = '\n';
    int code = EXEC_EXIT_INTERNAL;
    for (;;) {
        uint8_t type;
        ssize_t n = sg_ctl_recv(fd, &type, buf, sizeof buf - 1, NULL, NULL);
        if (n == -EINTR)
            continue;
        if (n < 0 || type == 0) {
            fprintf(stderr, "sandglass exec: lost the supervisor before the command finished\n");
            break;
        }
        if (type == SG_CTL_STDOUT) {
            sg_write_all(1, buf, (size_t)n);
            if (n > 0)
                last_out = buf[n - 1];
        } else if (type == SG_CTL_STDERR) {
            sg_write_all(2, buf, (size_t)n);
        } else if (type == SG_CTL_EXIT && !json) {
            int32_t c32;
            if (n != (ssize_t)sizeof c32) {
                fprintf(stderr, "sandglass exec: bad answer from the supervisor: an exit code of %zd bytes\n", n);
                break;
            }
            memcpy(&c32, buf, sizeof c32);
            code = c32;
            break;
        } else if (type == SG_CTL_RESULT || type == SG_CTL_ERROR) {
            sg_autojson json_t *res = sg_json_parse(buf, (size_t)n, &err);
            if (!res) {
                fprintf(stderr, "sandglass exec: bad answer from the supervisor: %s\n", err.msg);
                break;
            }
            if (type == SG_CTL_ERROR) {
                const char *m = json_string_value(json_object_get(res, "error"));
                fprintf(stderr, "sandglass exec: %s\n", m ? m : "failed");
                break;
            }
            code = (int)json_integer_value(json_object_get(res, "exit_code"));
            if (json) {
                sg_autofree char *s = sg_json_dump(res);
                if (last_out != '\n')
                    sg_write_all(1, "\n", 1);
                printf("%s\n", s);
            }
            break;
        }
    }
    ctl_fd_for_signals = -1;
    close(fd);
    return code;
}

/* sandglass cast: a shell session's recording (src/capture/asciicast.h),
 * kept by the supervisor under <state>/sb/<id>/casts/<exec>.cast while
 * the sandbox lives: the newest, or exec N's, on stdout; --list: the exec
 * numbers that have one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "state/state.h"

static void cast_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass cast ID [N] [--list]\n"
        "\n"
        "Prints the recording of a terminal session of sandbox ID (sandglass shell,\n"
        "exec -t) as an asciicast v3 file, for `asciinema play` or the asciinema\n"
        "player: the session of exec N, or the newest. --list prints the exec\n"
        "numbers that have one. Recordings live with the sandbox (destroy removes\n"
        "them).\n");
}

/* The exec numbers with a recording, ascending; returns how many. */
static size_t list_casts(const char *dir, unsigned long *out, size_t max)
{
    sg_autoclosedir DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        char *end;
        unsigned long v = strtoul(e->d_name, &end, 10);
        if (end != e->d_name && strcmp(end, ".cast") == 0)
            out[n++] = v;
    }
    for (size_t i = 1; i < n; i++) /* few: insertion sort */
        for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            unsigned long t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

int sg_cmd_cast(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--ingest", 8) == 0 || strncmp(argv[i], "--token", 7) == 0 ||
            strncmp(argv[i], "--secret", 8) == 0)
            return sg_cli_handoff("cast", argv); /* from the ingest's store: sandglassd cast */
    static const struct option opts[] = {
        {"list", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    bool list = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'l') {
            list = true;
        } else if (c == 'h') {
            cast_usage(stdout);
            return 0;
        } else {
            return sg_cli_usage("cast", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return sg_cli_usage("cast", "missing sandbox id");
    if (argc - optind > 2)
        return sg_cli_usage("cast", "too many arguments");
    char id[SG_ID_LEN + 1];
    sg_err err = {0};
    if (sg_state_resolve_id(argv[optind], id, &err) < 0) /* gone: the ingest may have it */
        return err.code == ENOENT ? sg_cli_handoff("cast", argv) : sg_cli_fail("cast", err.msg);
    sg_autofree char *dir = sg_state_sandbox_path(id, "casts");
    static unsigned long nums[65536];
    size_t n = list_casts(dir, nums, sizeof nums / sizeof nums[0]);
    if (list) {
        for (size_t i = 0; i < n; i++)
            printf("%lu\n", nums[i]);
        return 0;
    }
    unsigned long want;
    if (optind + 1 < argc) {
        char *end;
        errno = 0;
        want = strtoul(argv[optind + 1], &end, 10);
        if (errno || *end || end == argv[optind + 1])
            return sg_cli_usage("cast", "N must be an exec number, not '%.64s'", argv[optind + 1]);
    } else if (n) {
        want = nums[n - 1];
    } else {
        char m[128];
        snprintf(m, sizeof m, "sandbox %s has no terminal session recorded", id);
        return sg_cli_fail("cast", m);
    }
    char rel[64];
    snprintf(rel, sizeof rel, "casts/%lu.cast", want);
    sg_autofree char *path = sg_state_sandbox_path(id, rel);
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        char m[160];
        snprintf(m, sizeof m, "exec %lu of sandbox %s has no terminal session recorded", want, id);
        return sg_cli_fail("cast", m);
    }
    char buf[65536];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        if (sg_write_all(1, buf, (size_t)r) < 0)
            return SG_CLI_FAILED;
    return r < 0 ? sg_cli_fail("cast", strerror(errno)) : 0;
}

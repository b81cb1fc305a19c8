/* sandglass cp: a file or a tree copied into or out of a sandbox's
 * workspace. The supervisor copies (supervisor/sv_cp.h, sandbox/wscopy.h):
 * this side only opens the local directory the copy comes from or goes
 * into and sends it with the request, so that every workspace path is
 * resolved host-side beneath the workspace, and a copy in is recorded as
 * the operator's action, not a learner's command. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "state/state.h"

static void cp_usage(FILE *f)
{
    fprintf(f,
            "usage: sandglass cp [--json] LOCAL ID:PATH\n"
            "       sandglass cp [--json] ID:PATH LOCAL\n"
            "\n"
            "Copies a file or a directory tree into or out of a sandbox's workspace.\n"
            "PATH is under /workspace, absolute or relative to it; nothing outside the\n"
            "workspace is reached, and no symlink in it is followed (symlinks are copied\n"
            "as links; FIFOs, sockets and devices inside a tree are left out). Into an\n"
            "existing directory the copy goes under its own name. Files copied in are the\n"
            "sandbox user's; a captured sandbox records them as file_diff events whose\n"
            "cause is the operator's cp. Refused while the sandbox is aborted. ID may be\n"
            "a unique prefix of at least 4 characters. A local path with a ':' before\n"
            "any '/' is written ./NAME.\n"
            "\n"
            "  --json    print {\"path\", \"files\", \"dirs\", \"links\", \"bytes\", \"skipped\"}\n");
}

/* Whether arg names a sandbox's path ("ID:PATH"): a ':' before any '/'. */
static const char *remote_colon(const char *arg)
{
    const char *c = strchr(arg, ':');
    const char *s = strchr(arg, '/');
    return c && c != arg && (!s || c < s) ? c : NULL;
}

/* The local source: its directory opened into *dfd, its name into name. */
static int open_source(const char *arg, int *dfd, char *name, size_t n, sg_err *err)
{
    char real[PATH_MAX];
    if (!realpath(arg, real))
        return sg_err_sys(err, "%s", arg);
    if (strcmp(real, "/") == 0)
        return sg_err_set(err, EINVAL, "%s: cp does not copy the whole file system", arg);
    char *slash = strrchr(real, '/');
    snprintf(name, n, "%s", slash + 1);
    slash[slash == real ? 1 : 0] = '\0';
    if ((*dfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return sg_err_sys(err, "%s", real);
    return 0;
}

/* The local destination: an existing directory (the copy keeps its own
 * name: *name empty), else its parent directory and its name. */
static int open_dest(const char *arg, int *dfd, char *name, size_t n, sg_err *err)
{
    struct stat st;
    name[0] = '\0';
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        if ((*dfd = open(arg, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            return sg_err_sys(err, "%s", arg);
        return 0;
    }
    size_t l = strlen(arg);
    if (l == 0 || arg[l - 1] == '/')
        return sg_err_set(err, ENOENT, "%s: no such directory", arg);
    sg_autofree char *d = sg_xstrdup(arg), *b = sg_xstrdup(arg);
    const char *base = basename(b);
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        return sg_err_set(err, EINVAL, "%s: name the file to make", arg);
    snprintf(name, n, "%s", base);
    const char *dir = dirname(d);
    if ((*dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return sg_err_sys(err, "%s", dir);
    return 0;
}

static void print_copied(const char *id, bool out, const sg_ctl_cp_reply *r)
{
    char v[PATH_MAX];
    sg_vis(r->path ? r->path : "?", strlen(r->path ? r->path : "?"), v, sizeof v);
    long long nreg = r->files; /* (a count, not a name: check-raw-print.py reads "file" as one) */
    printf("copied %lld file%s, %lld director%s, %lld symlink%s (%lld bytes) %s %s:%s\n", nreg, nreg == 1 ? "" : "s",
           r->dirs, r->dirs == 1 ? "y" : "ies", r->links, r->links == 1 ? "" : "s", r->bytes, out ? "out of" : "into",
           id, v);
    if (r->skipped)
        printf("  left out %lld FIFO%s, socket%s or device%s\n", r->skipped, r->skipped == 1 ? "" : "s",
               r->skipped == 1 ? "" : "s", r->skipped == 1 ? "" : "s");
}

/* The copy, once the arguments are parsed: remote is "ID:PATH", local the other. */
static int cp_run(const char *remote, const char *local, bool out, bool json)
{
    sg_err err = {0};
    const char *colon = remote_colon(remote);
    sg_autofree char *prefix = strndup(remote, (size_t)(colon - remote));
    char id[SG_ID_LEN + 1], name[NAME_MAX + 1];
    if (!prefix || !sg_state_dir(&err) || sg_state_resolve_id(prefix, id, &err) < 0)
        return sg_cli_fail("cp", err.msg);
    sg_autoclose int dfd = -1;
    if ((out ? open_dest(local, &dfd, name, sizeof name, &err) : open_source(local, &dfd, name, sizeof name, &err)) < 0)
        return sg_cli_fail("cp", err.msg);
    sg_ctl_req req = {.op = SG_OP_CP, .u.cp = {.out = out, .path = (char *)colon + 1, .name = name[0] ? name : NULL}};
    sg_autojson json_t *res = sg_cli_request_fd(id, &req, dfd, &err);
    if (!res && strstr(err.msg, "unknown request op"))
        return sg_cli_failf("cp",
                            "the supervisor of %s is older than cp (a sandglass from before it): copy with "
                            "tar through exec, or create the sandbox again",
                            id);
    __attribute__((cleanup(sg_ctl_cp_reply_free))) sg_ctl_cp_reply r = {0};
    if (!res || sg_ctl_decode_cp_reply(res, &r, &err) < 0)
        return sg_cli_fail("cp", err.msg);
    if (json) {
        sg_autofree char *s = sg_json_dump(res);
        printf("%s\n", s);
    } else {
        print_copied(id, out, &r);
    }
    return 0;
}

int sg_cmd_cp(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    bool json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            sg_cli_json_errors(true);
            break;
        case 'h':
            cp_usage(stdout);
            return 0;
        default:
            return sg_cli_bad_option("cp", argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return sg_cli_usage("cp",
                            argc - optind < 2 ? "needs a source and a destination"
                                              : "takes exactly a source "
                                                "and a destination");
    const char *src = argv[optind], *dst = argv[optind + 1];
    bool rs = remote_colon(src) != NULL, rd = remote_colon(dst) != NULL;
    if (rs == rd)
        return sg_cli_usage("cp",
                            rs ? "both paths are a sandbox's: one must be local"
                               : "neither path is a sandbox's: write one as ID:PATH");
    return rs ? cp_run(src, dst, true, json) : cp_run(dst, src, false, json);
}

/* sandglass create: validates the options, writes the sandbox's record and
 * starts its supervisor (sandglass-supervisor), then waits until the
 * sandbox accepts execs. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/common.h"
#include "cli/config.h"
#include "cli/ingest_check.h"
#include "capture/ignore.h"
#include "cli/pool.h"
#include "cli/seedfrom.h"
#include "sandbox/disk.h"
#include "state/state.h"
#include "wire/revive.h"



static void create_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass create --learner L [--task T] [--workspace DIR] [--memory 512M]\n"
        "                        [--pids 256] [--cpus 1] [--timeout 600] [--output-limit 64M]\n"
        "                        [--rootfs DIR] [--ingest URL[,URL...]] [--ingest-ca FILE]\n"
        "                        [--secret FILE]\n"
        "                        [--max-wall S] [--max-execs N] [--max-cpu S] [--max-calls N]\n"
        "                        [--checkpoints exec|manual] [--disk 1G] [--overcommit] [--json]\n"
        "                        [--max-events-per-min N] [--max-bytes-per-min SIZE]\n"
        "                        [--max-checkpoints-per-min N] [--max-file-events N]\n"
        "                        [--capture-ignore PATTERN,...] [--capture-max-file SIZE]\n"
        "                        [--idle-timeout D] [--ttl D] [--expiry-warning D] [--keep D]\n"
        "                        [--from DIR|TARBALL|ID@CHECKPOINT]\n"
        "\n"
        "Creates a sandbox and prints its id.\n"
        "\n"
        "  --learner L          who works in it (required; 1-128 of A-Z a-z 0-9 . _ - @)\n"
        "  --task T             what for: with a task the session is captured and streamed\n"
        "                       to the ingest; without, nothing is captured\n"
        "  --workspace DIR      the directory mounted at /workspace (default: a fresh one in\n"
        "                       the state directory, removed with the sandbox); a root-owned\n"
        "                       one keeps its owners (an idmapped mount)\n"
        "  --memory SIZE        memory of the whole sandbox (default 512M, at least 4M)\n"
        "  --pids N             processes and threads (default 256)\n"
        "  --cpus C             CPU cores' worth of time (default 1, at most the host's CPUs)\n"
        "  --timeout S          wall time of each exec (default 600; a terminal session\n"
        "                       has none unless shell or exec -t gives one)\n"
        "  --output-limit SIZE  output bytes of each exec (default 64M)\n"
        "  --disk SIZE          the workspace's own file system (default 1G, 16M to 14T):\n"
        "                       writes past it fail with ENOSPC; not with --workspace; one\n"
        "                       that cannot be made, or that the state directory's file\n"
        "                       system has no room for, is an error\n"
        "  --overcommit         make the disk even when its image could outgrow the free space\n"
        "  --rootfs DIR         this directory as / instead of the host's system directories\n"
        "  --from SRC           seed the workspace before the session starts: a directory's\n"
        "                       tree, a tarball's entries (tar, gzip, xz, zstd, bzip2), or\n"
        "                       ID@CHECKPOINT, a checkpoint of another sandbox of this host;\n"
        "                       owned by the sandbox user, bounded as cp is, recorded as the\n"
        "                       session's start (`from`); not with --workspace\n"
        "  --ingest URL         where a captured session streams (default the config's url, else ws://127.0.0.1:7433)\n"
        "                       (URL,URL,...: up to 8 ingest nodes of one store, failed over in turn);\n"
        "                       wss://HOST:PORT for an ingest with TLS\n"
        "  --ingest-ca FILE     the CA file (PEM) a wss:// ingest's certificate is verified by\n"
        "                       (default the config's ca, else the system's trust store)\n"
        "  --secret FILE        the ingest's key for its tokens (default the config's secret, else <state>/ingest/secret)\n"
        "  --max-wall S, --max-execs N, --max-cpu S, --max-calls N\n"
        "                       caps: reaching one aborts the whole session (default: none)\n"
        "  --idle-timeout D     end the session after D with no input, no exec and no file\n"
        "                       change (default: none); a batch exec running is activity\n"
        "  --ttl D              end the session D after its creation (default: none)\n"
        "  --expiry-warning D   warn every attached terminal D before either ends it\n"
        "                       (default 60s, at most half the limit; off: no warning)\n"
        "  --keep D             on expiry, abort and keep the sandbox D for a rollback\n"
        "                       before the destroy (default: destroy at once)\n"
        "  --max-events-per-min N, --max-bytes-per-min SIZE, --max-checkpoints-per-min N\n"
        "                       a captured session's budgets per minute (defaults 100000,\n"
        "                       16M, 1500; 0: none): past one, the minute's further events\n"
        "                       are counted, not stored (one limit event says so)\n"
        "  --max-file-events N  file_diff events of one exec (default 1000, 0 to 1000000):\n"
        "                       the rest of its changes are listed in `bulk` events\n"
        "  --capture-ignore LIST  paths not reported one by one, comma-separated globs\n"
        "                       (`*.swp`, `__pycache__/`, `node_modules/.cache/`; '' for\n"
        "                       none): replaces the default list (docs/EVENTS.md); ignored\n"
        "                       files stay in checkpoints\n"
        "  --capture-max-file SIZE  files up to SIZE (default 1M) have their contents stored\n"
        "                       with the events; larger ones their size and sha256 only\n"
        "  --checkpoints MODE   exec: one before every exec (default); manual: only at create\n"
        "                       and on request\n"
        "  --json               print {id, learner, task, workspace, limits, caps, ...}\n"
        "Durations (S) are seconds or a number with s, m, h or d: 90, 90s, 15m, 2h, 7d.\n"
        "Every default above can be set in sandglass.conf(5) or a SANDGLASS_* variable\n"
        "(SANDGLASS_MEMORY=1G); a flag overrides both.\n"
        "Sizes take K, M, G or T: 512M, 1G.\n");
}

static int count_live(void)
{
    sg_autostrv char **ids = sg_state_list(NULL);
    int n = 0;
    for (char **p = ids; p && *p; p++) {
        sg_sandbox_meta m;
        if (sg_sandbox_meta_load(*p, &m, NULL) == 0) {
            /* A sandbox whose supervisor died lives on while its init does. */
            if (m.supervisor_pid == 0 || sg_state_supervisor_held(*p, NULL) == 1 || sg_state_pid_alive(m.init_pid))
                n++;
            sg_sandbox_meta_clear(&m);
        }
    }
    return n;
}

static int print_created(const char *id, bool json)
{
    sg_err err = {0};
    if (!json) {
        printf("%s\n", id);
        return 0;
    }
    sg_sandbox_meta fresh;
    if (sg_sandbox_meta_load(id, &fresh, &err) < 0)
        return sg_cli_fail("create", err.msg);
    sg_autojson json_t *j = sg_sandbox_meta_json(&fresh);
    sg_autofree char *s = sg_json_dump(j);
    printf("%s\n", s);
    sg_sandbox_meta_clear(&fresh);
    return 0;
}

/* Whether the state directory (where the checkpoint store lives) is the
 * directory dir or inside it. A state directory not made yet is judged by
 * its nearest existing ancestor. */
static bool state_inside(const char *dir)
{
    sg_err e = {0};
    const char *sd = sg_state_dir(&e);
    if (!sd)
        return false;
    char probe[PATH_MAX], real[PATH_MAX], rest[PATH_MAX] = "";
    snprintf(probe, sizeof probe, "%s", sd);
    while (!realpath(probe, real)) {
        char *slash = strrchr(probe, '/');
        if (!slash || slash == probe)
            return false;
        char tail[PATH_MAX];
        snprintf(tail, sizeof tail, "%s%s", slash, rest);
        snprintf(rest, sizeof rest, "%s", tail);
        *slash = '\0';
    }
    char full[2 * PATH_MAX];
    snprintf(full, sizeof full, "%s%s", real, rest);
    size_t n = strlen(dir);
    return strcmp(dir, "/") == 0 || (strncmp(full, dir, n) == 0 && (full[n] == '/' || full[n] == '\0'));
}

/* The sandbox user of the operator's --workspace: its owner, or for a
 * root-owned one a uid of the sandbox's own, the directory then mounted
 * idmapped (rootfs.h; init refuses, with a reason, where the file system
 * cannot). */
static int workspace_user(sg_sandbox_meta *m, sg_err *err)
{
    struct stat wst;
    if (stat(m->workspace, &wst) < 0)
        return sg_err_sys(err, "workspace '%s'", m->workspace);
    if (wst.st_uid != 0) {
        m->uid = wst.st_uid;
        m->gid = wst.st_gid;
        return 0;
    }
    uid_t uid;
    if (sg_state_uid_claim(m->id, &uid, err) < 0)
        return -1;
    m->uid = uid;
    m->gid = (gid_t)uid;
    m->idmap_workspace = true;
    return 0;
}

/* The workspace's own file system of m->disk bytes (disk.h), when the
 * state directory's file system has room for it to grow to its size (or
 * overcommit). 1: made; 0: none can be made here (no loop device, no
 * mkfs.ext4, not root) and the default size was asked for: a directory
 * instead, with a warning; -1: an error (a --disk given is honoured or
 * create fails: never a workspace with no limit in its place). */
static int own_disk(sg_sandbox_meta *m, bool disk_given, bool overcommit, sg_err *err)
{
    if (geteuid() == 0 && !overcommit && sg_disk_room(m->disk, err) < 0) {
        sg_err_prefix(err, "--disk %lluM cannot be honoured", (unsigned long long)(m->disk >> 20));
        return -1;
    }
    sg_autofree char *image = sg_state_sandbox_path(m->id, SG_DISK_IMAGE);
    sg_err derr = {0};
    if (sg_disk_make(image, m->disk, m->uid, m->gid, &m->workspace, &derr) == 0)
        return 1;
    if (disk_given) {
        *err = derr;
        sg_err_prefix(err, "--disk %lluM cannot be honoured", (unsigned long long)(m->disk >> 20));
        return -1;
    }
    sg_cli_sayf("create",
                "warning: no disk limit for this sandbox (%s): its workspace is a "
                "directory on the host's file system",
                derr.msg);
    m->disk = 0;
    return 0;
}

/* The workspace create makes, handed to a uid of the sandbox's own
 * (state.h): a file system of its own (own_disk), or a directory in the
 * state directory where none can be made and no --disk was given. */
static int own_workspace(sg_sandbox_meta *m, bool disk_given, bool overcommit, sg_err *err)
{
    m->own_workspace = true;
    if (geteuid() != 0) { /* rootless: the caller is the sandbox user */
        m->uid = geteuid();
        m->gid = getegid();
    } else {
        uid_t uid;
        if (sg_state_uid_claim(m->id, &uid, err) < 0)
            return -1;
        m->uid = uid;
        m->gid = (gid_t)uid;
    }
    int made = m->disk ? own_disk(m, disk_given, overcommit, err) : 0;
    if (made < 0 && geteuid() == 0)
        sg_state_uid_release(m->uid, m->id);
    if (made != 0)
        return made < 0 ? -1 : 0;
    /* Reachable by the sandbox user through the 0700 state dir: the bind
     * mount takes the directory itself, not the path. */
    m->workspace = sg_state_sandbox_path(m->id, "workspace");
    if (mkdir(m->workspace, 0755) < 0 || chown(m->workspace, m->uid, m->gid) < 0) {
        sg_err_sys(err, "cannot create the workspace directory");
        sg_state_uid_release(m->uid, m->id);
        return -1;
    }
    return 0;
}

#define CREATE_GO (-1)      /* from a step: carry on (else: the exit code) */
#define CREATE_UNKNOWN (-2) /* create_parse_limit: not one of its options */

/* What the command line asked for, besides the limits (in the meta). */
typedef struct create_opts {
    const char *learner, *task, *ws, *rootfs;
    const char *ingest, *ingest_ca, *secret;
    const char *capture_ignore; /* checked; copied into the meta at its save */
    sg_create_seed_fn seed_fn;          /* sandglass fork's (sg_cmd_create_from) */
    void *seed_ud;
    const char *forked_from;
    const char *from;                   /* --from */
    sg_seedfrom seed;                   /* --from, classified */
    bool json, spare, disk_given, overcommit;
    long online; /* CPUs online: --cpus is at most this */
    char wsreal[PATH_MAX], rootreal[PATH_MAX]; /* --workspace, --rootfs resolved */
    char careal[PATH_MAX];                     /* --ingest-ca resolved ("": none) */
} create_opts;

/* The budgets' long options (no short form). */
enum {
    OPT_EVENTS_PER_MIN = 0x100, OPT_BYTES_PER_MIN, OPT_CKPTS_PER_MIN, OPT_CAPTURE_IGNORE, OPT_MAX_FILE_EVENTS,
    OPT_CAPTURE_MAX_FILE,
    /* the session's lifecycle, in this order (create_parse_life) */
    OPT_IDLE_TIMEOUT, OPT_TTL, OPT_EXPIRY_WARNING, OPT_KEEP, OPT_FROM
};

/* --idle-timeout, --ttl, --expiry-warning, --keep: a duration, or off. */
static int create_parse_life(int c, const char *arg, sg_sandbox_meta *m, const char *name)
{
    double *const dst[] = {&m->idle_timeout_s, &m->ttl_s, &m->warning_s, &m->keep_s};
    int i = c - OPT_IDLE_TIMEOUT;
    sg_err err = {0};
    if (strcmp(arg, "off") == 0)
        *dst[i] = 0;
    else if (sg_parse_duration(arg, 365 * 24 * 3600.0, dst[i], &err) < 0)
        return sg_cli_usage("create", "%s: %s (or off)", name, err.msg);
    return CREATE_GO;
}

/* The budgets and the capture's options (create_parse_limit). */
static int create_parse_capture(int c, const char *arg, create_opts *o, sg_sandbox_meta *m, const char *name)
{
    sg_err err = {0};
    switch (c) {
    case OPT_EVENTS_PER_MIN:
    case OPT_CKPTS_PER_MIN:
        if (sg_parse_uint(arg, UINT32_MAX, c == OPT_EVENTS_PER_MIN ? &m->max_events_per_min
                                                                  : &m->max_checkpoints_per_min, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case OPT_BYTES_PER_MIN:
        if (sg_parse_size(arg, &m->max_bytes_per_min, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case OPT_MAX_FILE_EVENTS:
        if (sg_parse_uint(arg, SG_FILE_EVENTS_MAX, &m->max_file_events, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case OPT_CAPTURE_IGNORE: {
        sg_ignore *ig = sg_ignore_parse(arg, &err);
        if (!ig)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        sg_ignore_free(ig);
        o->capture_ignore = arg;
        return CREATE_GO;
    }
    case OPT_CAPTURE_MAX_FILE:
        if (sg_parse_size(arg, &m->capture_max_file, &err) < 0 || m->capture_max_file == 0 ||
            m->capture_max_file > (256u << 20))
            return sg_cli_usage("create", "%s: invalid size '%.32s': a size from 1 to 256M", name, arg);
        return CREATE_GO;
    case 'P':
        if (strcmp(arg, "exec") && strcmp(arg, "manual"))
            return sg_cli_usage("create", "%s: invalid value '%.32s': use exec (before every exec) or manual",
                                name, arg);
        m->manual_checkpoints = strcmp(arg, "manual") == 0;
        return CREATE_GO;
    default:
        return CREATE_UNKNOWN;
    }
}

/* One option that sets a limit or a policy in m, from a flag or the
 * config: name is the flag ("--memory") or the value's origin
 * ("FILE:7: memory"). Each value error names it and is a usage error (2). */
static int create_parse_limit(int c, const char *arg, create_opts *o, sg_sandbox_meta *m, const char *name)
{
    sg_err err = {0};
    switch (c) {
    case 'm':
        if (sg_parse_size(arg, &m->memory, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        if (m->memory < 4u << 20)
            return sg_cli_usage("create", "%s %s: at least 4M", name, arg);
        return CREATE_GO;
    case 'p':
        if (sg_parse_uint(arg, 1u << 22, &m->pids, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case 'o':
        if (sg_parse_size(arg, &m->output_limit, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case 'D':
        if (sg_disk_parse(arg, &m->disk, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        o->disk_given = true;
        return CREATE_GO;
    case 'c':
        if (sg_parse_seconds(arg, 1024, &m->cpus, &err) < 0)
            return sg_cli_usage("create", "invalid %s '%.32s': expected a positive number of cores", name, arg);
        if (m->cpus > (double)o->online)
            return sg_cli_usage("create", "invalid %s '%.32s': this host has %ld online CPU%s", name, arg,
                                o->online, o->online == 1 ? "" : "s");
        return CREATE_GO;
    case 'T':
        if (sg_parse_duration(arg, 7 * 24 * 3600.0, &m->timeout_s, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case 'W':
    case 'C':
        if (sg_parse_duration(arg, 365 * 24 * 3600.0, c == 'W' ? &m->max_wall_s : &m->max_cpu_s, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case 'E':
    case 'K':
        if (sg_parse_uint(arg, UINT32_MAX, c == 'E' ? &m->max_execs : &m->max_calls, &err) < 0)
            return sg_cli_usage("create", "%s: %s", name, err.msg);
        return CREATE_GO;
    case OPT_IDLE_TIMEOUT:
    case OPT_TTL:
    case OPT_EXPIRY_WARNING:
    case OPT_KEEP:
        return create_parse_life(c, arg, m, name);
    default:
        return create_parse_capture(c, arg, o, m, name);
    }
}

/* The config's key of each option create_parse_limit takes. */
static const struct {
    int c;
    sg_conf_key key;
} create_conf[] = {
    {'m', SG_CONF_MEMORY}, {'p', SG_CONF_PIDS}, {'c', SG_CONF_CPUS}, {'T', SG_CONF_TIMEOUT},
    {'o', SG_CONF_OUTPUT_LIMIT}, {'D', SG_CONF_DISK}, {'W', SG_CONF_MAX_WALL}, {'E', SG_CONF_MAX_EXECS},
    {'C', SG_CONF_MAX_CPU}, {'K', SG_CONF_MAX_CALLS}, {'P', SG_CONF_CHECKPOINTS},
    {OPT_EVENTS_PER_MIN, SG_CONF_MAX_EVENTS_PER_MIN}, {OPT_BYTES_PER_MIN, SG_CONF_MAX_BYTES_PER_MIN},
    {OPT_CKPTS_PER_MIN, SG_CONF_MAX_CHECKPOINTS_PER_MIN}, {OPT_MAX_FILE_EVENTS, SG_CONF_MAX_FILE_EVENTS},
    {OPT_CAPTURE_IGNORE, SG_CONF_CAPTURE_IGNORE}, {OPT_CAPTURE_MAX_FILE, SG_CONF_CAPTURE_MAX_FILE},
    {OPT_IDLE_TIMEOUT, SG_CONF_IDLE_TIMEOUT}, {OPT_TTL, SG_CONF_TTL}, {OPT_EXPIRY_WARNING, SG_CONF_EXPIRY_WARNING},
    {OPT_KEEP, SG_CONF_KEEP},
};

/* The config's defaults (environment, files) into m, before the flags
 * override them, each through the flag's own parser. A disk size from
 * the config is a default, not a --disk: it yields to --workspace. */
static int create_defaults(create_opts *o, sg_sandbox_meta *m)
{
    for (size_t i = 0; i < sizeof create_conf / sizeof *create_conf; i++) {
        const char *origin = NULL;
        const char *v = sg_config_get(create_conf[i].key, &origin);
        if (!v)
            continue;
        char name[PATH_MAX + 64];
        snprintf(name, sizeof name, "%s: %s", origin, sg_config_key_name(create_conf[i].key));
        if (strncmp(origin, "SANDGLASS_", 10) == 0) /* the variable alone says which */
            snprintf(name, sizeof name, "%s", origin);
        int rc = create_parse_limit(create_conf[i].c, v, o, m, name);
        if (rc != CREATE_GO)
            return rc;
    }
    o->disk_given = false;
    return CREATE_GO;
}

static int create_parse(int argc, char **argv, create_opts *o, sg_sandbox_meta *m)
{
    static const struct option opts[] = {
        {"learner", required_argument, NULL, 'l'},
        {"task", required_argument, NULL, 't'},
        {"workspace", required_argument, NULL, 'w'},
        {"memory", required_argument, NULL, 'm'},
        {"pids", required_argument, NULL, 'p'},
        {"cpus", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 'T'},
        {"output-limit", required_argument, NULL, 'o'},
        {"rootfs", required_argument, NULL, 'r'},
        {"ingest", required_argument, NULL, 'i'},
        {"secret", required_argument, NULL, 's'},
        {"ingest-ca", required_argument, NULL, 'A'},
        {"max-wall", required_argument, NULL, 'W'},
        {"max-execs", required_argument, NULL, 'E'},
        {"max-cpu", required_argument, NULL, 'C'},
        {"max-calls", required_argument, NULL, 'K'},
        {"checkpoints", required_argument, NULL, 'P'},
        {"max-events-per-min", required_argument, NULL, OPT_EVENTS_PER_MIN},
        {"max-bytes-per-min", required_argument, NULL, OPT_BYTES_PER_MIN},
        {"max-checkpoints-per-min", required_argument, NULL, OPT_CKPTS_PER_MIN},
        {"capture-ignore", required_argument, NULL, OPT_CAPTURE_IGNORE},
        {"max-file-events", required_argument, NULL, OPT_MAX_FILE_EVENTS},
        {"capture-max-file", required_argument, NULL, OPT_CAPTURE_MAX_FILE},
        {"disk", required_argument, NULL, 'D'},
        {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
        {"ttl", required_argument, NULL, OPT_TTL},
        {"expiry-warning", required_argument, NULL, OPT_EXPIRY_WARNING},
        {"keep", required_argument, NULL, OPT_KEEP},
        {"from", required_argument, NULL, OPT_FROM},
        {"json", no_argument, NULL, 'j'},
        {"overcommit", no_argument, NULL, 'O'},
        {"spare", no_argument, NULL, 'S'}, /* internal: a spare for the pool (pool.h) */
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c, idx = -1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+", opts, &idx)) != -1) {
        switch (c) {
        case 'l': o->learner = optarg; break;
        case 't': o->task = optarg; break;
        case 'w': o->ws = optarg; break;
        case 'r': o->rootfs = optarg; break;
        case 'i': o->ingest = optarg; break;
        case 's': o->secret = optarg; break;
        case 'A': o->ingest_ca = optarg; break;
        case 'j': o->json = true; break;
        case 'O': o->overcommit = true; break;
        case 'S': o->spare = true; break;
        case OPT_FROM: o->from = optarg; break;
        case 'h':
            create_usage(stdout);
            return 0;
        default: {
            char flag[64]; /* its whole name, also when abbreviated */
            snprintf(flag, sizeof flag, "--%s", idx >= 0 && c != '?' ? opts[idx].name : "?");
            int rc = create_parse_limit(c, optarg, o, m, flag);
            if (rc == CREATE_UNKNOWN)
                return sg_cli_usage("create", "unknown option, or one without its value: '%s'", argv[optind - 1]);
            if (rc != CREATE_GO)
                return rc;
        }
        }
    }
    if (optind < argc)
        return sg_cli_usage("create", "unexpected argument '%.64s' (create takes only options)", argv[optind]);
    return CREATE_GO;
}

/* The options together: learner, task, ingest (reachable, and taking
 * this learner's events). */
static int create_check(create_opts *o, sg_sandbox_meta *m)
{
    sg_err err = {0};
    if (!o->learner)
        return sg_cli_usage("create", "--learner is required");
    if (!sg_valid_name(o->learner))
        return sg_cli_usage("create", "invalid --learner: use 1-128 of A-Z a-z 0-9 . _ - @");
    if ((strcmp(o->learner, SG_POOL_LEARNER) == 0) != o->spare)
        return sg_cli_fail("create", "--learner " SG_POOL_LEARNER " is reserved for the pool's spares");
    /* The operator's own directory stays on its own file system. */
    if (o->ws && o->disk_given)
        return sg_cli_usage("create", "--disk sizes the workspace create makes: it does not apply to --workspace");
    if (o->ws)
        m->disk = 0;
    /* the operator's own directory is never written into by a seed */
    if (o->ws && o->from)
        return sg_cli_usage("create", "--from seeds the workspace create makes: it does not go with --workspace");
    if (o->from && !*o->from)
        return sg_cli_usage("create", "--from: give a directory, a tarball or ID@CHECKPOINT");
    if (o->task && !sg_valid_name(o->task))
        return sg_cli_usage("create", "invalid --task: use 1-128 of A-Z a-z 0-9 . _ - @");
    if ((o->ingest || o->secret || o->ingest_ca) && !o->task)
        return sg_cli_usage("create", "--ingest, --ingest-ca and --secret go with --task (only a captured sandbox "
                            "streams)");
    /* The config's, else the built-in ones (<state>/ingest/secret: NULL). */
    if (!o->ingest)
        o->ingest = sg_config_ingest();
    if (!o->secret)
        o->secret = sg_config_get(SG_CONF_SECRET, NULL);
    if (!o->ingest_ca)
        o->ingest_ca = sg_config_get(SG_CONF_INGEST_CA, NULL);
    const char *ingest = o->ingest;
    if (o->task) {
        char why[400];
        if (sg_cli_ingest_list_check(ingest, why, sizeof why) < 0 ||
            (o->secret && sg_cli_ingest_secret_check(o->secret, why, sizeof why) < 0) ||
            (o->ingest_ca && sg_cli_ingest_ca_check(o->ingest_ca, o->careal, sizeof o->careal, why, sizeof why) < 0))
            return sg_cli_usage("create", "%s", why);
    }
    if (!sg_state_dir(&err))
        return sg_cli_fail("create", err.msg);
    if (o->task) {
        char why[600];
        if (sg_cli_ingest_check(ingest, o->careal[0] ? o->careal : NULL, o->learner, o->task, o->secret, why,
                                sizeof why) < 0)
            return sg_cli_fail("create", why);
    }
    return CREATE_GO;
}

/* --workspace and --rootfs: existing directories, resolved. */
static int create_check_paths(create_opts *o)
{
    if (o->ws) {
        struct stat st;
        if (stat(o->ws, &st) < 0) {
            char msg[PATH_MAX + 64];
            snprintf(msg, sizeof msg, "workspace '%s' does not exist", o->ws);
            return sg_cli_fail("create", msg);
        }
        if (!S_ISDIR(st.st_mode)) {
            char msg[PATH_MAX + 64];
            snprintf(msg, sizeof msg, "workspace '%s' is not a directory", o->ws);
            return sg_cli_fail("create", msg);
        }
        if (!realpath(o->ws, o->wsreal))
            return sg_cli_fail("create", "cannot resolve the workspace path");
        if (state_inside(o->wsreal)) {
            char msg[PATH_MAX + 96];
            snprintf(msg, sizeof msg, "workspace '%s' contains the state directory (its checkpoints would "
                     "snapshot themselves): use a directory outside it", o->ws);
            return sg_cli_fail("create", msg);
        }
    }
    sg_err ferr = {0};
    if (o->from && sg_seedfrom_check(o->from, &o->seed, &ferr) < 0) {
        char msg[sizeof ferr.msg + 16];
        snprintf(msg, sizeof msg, "--from %s", ferr.msg);
        return sg_cli_fail("create", msg);
    }
    if (o->rootfs) {
        struct stat st;
        if (stat(o->rootfs, &st) < 0 || !S_ISDIR(st.st_mode)) {
            char msg[PATH_MAX + 64];
            snprintf(msg, sizeof msg, "rootfs '%s' is not a directory", o->rootfs);
            return sg_cli_fail("create", msg);
        }
        if (!realpath(o->rootfs, o->rootreal))
            return sg_cli_fail("create", "cannot resolve the rootfs path");
    }
    return CREATE_GO;
}

/* A spare from the pool, when one is ready and fits (pool.h): its result
 * when claimed, else CREATE_GO. m's strings are borrowed, and put back. */
static int create_from_pool(const create_opts *o, sg_sandbox_meta *m)
{
    if (o->ws || o->seed_fn || o->from || o->rootfs || o->spare || geteuid() != 0 || m->disk != SG_DISK_DEFAULT)
        return CREATE_GO;
    m->learner = (char *)o->learner;
    m->task = (char *)o->task;
    m->capture_ignore = (char *)o->capture_ignore;
    char *secret_path = NULL;
    if (o->task) {
        m->ingest_url = (char *)o->ingest;
        m->ingest_ca = o->careal[0] ? (char *)o->careal : NULL;
        secret_path = o->secret ? realpath(o->secret, NULL) : sg_config_secret();
        if (!secret_path)
            return sg_cli_fail("create", "--secret file does not exist");
        m->secret_file = secret_path;
    }
    m->workspace = (char *)"";
    sg_now_iso8601(m->created, sizeof m->created);
    char id[32];
    int claimed = sg_pool_claim(m, id);
    free(secret_path);
    m->learner = m->task = m->ingest_url = m->secret_file = m->workspace = m->capture_ignore = NULL;
    m->ingest_ca = NULL;
    /* A claim or a pool short of its size (one the config gave, never
     * filled yet) refills in the background. */
    sg_pool_refill_async();
    return claimed == 1 ? print_created(id, o->json) : CREATE_GO;
}

/* A fresh id in m and its state directory (*dir). */
static int create_state_dir(sg_sandbox_meta *m, char **dir)
{
    sg_err err = {0};
    sg_autofree char *sbroot = sg_state_path("sb");
    if (sg_mkdir_p(sbroot, 0700, &err) < 0)
        return sg_cli_fail("create", err.msg);
    for (int tries = 0;; tries++) {
        if (sg_rand_hex(m->id, SG_ID_LEN, &err) < 0)
            return sg_cli_fail("create", err.msg);
        free(*dir);
        *dir = sg_state_sandbox_path(m->id, NULL);
        if (mkdir(*dir, 0700) == 0)
            return CREATE_GO;
        if (errno != EEXIST || tries > 8)
            return sg_cli_fail("create", "cannot create the sandbox's state directory");
    }
}

/* A sandbox whose workspace and uid were made undone (its state
 * directory dir removed, m cleared), with create's message. */
static int create_undo(sg_sandbox_meta *m, const char *dir, const char *msg)
{
    sg_disk_remove_workspace(m);
    sg_state_uid_release(m->uid, m->id);
    sg_rm_rf(dir, NULL);
    sg_sandbox_meta_clear(m);
    return sg_cli_fail("create", msg);
}

/* Fills m (workspace, ingest) and saves it in dir; undoes it all on
 * failure. */
static int create_save_meta(const create_opts *o, sg_sandbox_meta *m, const char *dir)
{
    sg_err err = {0};
    m->learner = strdup(o->learner);
    m->task = o->task ? strdup(o->task) : NULL;
    m->capture_ignore = o->capture_ignore ? strdup(o->capture_ignore) : NULL;
    m->rootfs = o->rootfs ? strdup(o->rootreal) : NULL;
    m->forked_from = o->forked_from ? strdup(o->forked_from) : NULL;
    /* Who creates it (create, fork, mcp's and the pool's creates all come
     * here; a claimed spare's is its claimer's, sv_start.c): the uid the
     * control socket would see (SO_PEERCRED's is the effective one). */
    sg_autojson json_t *creator = sg_actor_json(geteuid(), getpid(), NULL);
    m->creator = creator ? json_dumps(creator, JSON_COMPACT) : NULL;
    if (o->ws) {
        m->workspace = strdup(o->wsreal);
        if (workspace_user(m, &err) < 0) {
            sg_rm_rf(dir, NULL);
            sg_sandbox_meta_clear(m);
            return sg_cli_fail("create", err.msg);
        }
    } else if (own_workspace(m, o->disk_given, o->overcommit, &err) < 0) {
        sg_rm_rf(dir, NULL);
        sg_sandbox_meta_clear(m);
        return sg_cli_fail("create", err.msg);
    }
    if (o->task) {
        m->ingest_url = strdup(o->ingest);
        m->ingest_ca = o->careal[0] ? strdup(o->careal) : NULL;
        m->secret_file = o->secret ? realpath(o->secret, NULL) : sg_config_secret();
        if (!m->secret_file) {
            sg_disk_remove_workspace(m);
            sg_state_uid_release(m->uid, m->id);
            sg_rm_rf(dir, NULL);
            sg_sandbox_meta_clear(m);
            return sg_cli_fail("create", "--secret file does not exist");
        }
    }
    sg_now_iso8601(m->created, sizeof m->created);
    if (sg_sandbox_meta_save(m, &err) < 0)
        return create_undo(m, dir, err.msg);
    return CREATE_GO;
}

/* A sandbox whose supervisor failed to start undone (m cleared). Its
 * cleanup hands a disk to the background reclaimer, which gives the uid
 * slot back when it finds the disk's mount: the workspace is removed here
 * only when that cleanup failed, else this removal could take the mount
 * from under the reclaimer first and the slot would never be given back. */
static void create_cleanup_dead(sg_sandbox_meta *m)
{
    sg_err e2 = {0};
    if (sg_cli_cleanup_dead(m->id, false, &e2) < 0)
        sg_disk_remove_workspace(m);
    sg_sandbox_meta_clear(m);
}

/* The workspace create made filled by o->seed_fn (fork's rebuild, written
 * into it directly: no copy of a tree made elsewhere) while the supervisor
 * sets the sandbox up: it waits on the seed pipe for "ok" before its
 * capture's seed and its first checkpoint read the workspace (so no
 * learner process exists before it is complete either: the sandbox's init
 * runs none until it is ready). On failure the pipe closes without "ok",
 * the supervisor's start fails and the sandbox is undone, as
 * create_start's. */
static int create_seed_start(const create_opts *o, sg_sandbox_meta *m, const char *dir)
{
    sg_err err = {0}, serr = {0};
    int sp[2];
    if (pipe2(sp, O_CLOEXEC) < 0) {
        sg_err_sys(&err, "pipe");
        return create_undo(m, dir, err.msg);
    }
    int rfd = sg_revive_spawn_supervisor(m->id, sp[0], &err);
    close(sp[0]);
    if (rfd < 0) {
        close(sp[1]);
        return create_undo(m, dir, err.msg);
    }
    sg_autoclose int dst = open(m->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dst < 0)
        sg_err_sys(&serr, "seed: open %s", m->workspace);
    else if (o->seed_fn(o->seed_ud, dst, m, &serr) < 0)
        sg_err_prefix(&serr, "seed");
    void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* a supervisor that failed already: its error follows */
    if (!serr.msg[0])
        sg_write_all(sp[1], "ok\n", 3);
    close(sp[1]);
    signal(SIGPIPE, old);
    if (sg_revive_wait_ready(rfd, &err) < 0 || serr.msg[0]) {
        create_cleanup_dead(m);
        return sg_cli_fail("create", serr.msg[0] ? serr.msg : err.msg);
    }
    return CREATE_GO;
}

/* --from: the workspace seeded and the record's `from` saved, before
 * the supervisor (and its capture and first checkpoint) starts; undoes
 * the sandbox on failure. */
static int create_from_seed(const create_opts *o, sg_sandbox_meta *m, const char *dir)
{
    sg_err err = {0};
    char v[256], msg[sizeof err.msg + 320];
    if (sg_seedfrom_run(&o->seed, m, &err) < 0 || sg_sandbox_meta_save(m, &err) < 0) {
        snprintf(msg, sizeof msg, "--from '%s': %s", sg_vis(o->from, strlen(o->from), v, sizeof v), err.msg);
        return create_undo(m, dir, msg);
    }
    return CREATE_GO;
}

/* Starts the sandbox's supervisor; a spare joins the pool. Clears m on
 * failure. */
static int create_start(const create_opts *o, sg_sandbox_meta *m)
{
    sg_err err = {0};
    if (sg_revive_start_supervisor(m->id, false, &err) < 0) {
        create_cleanup_dead(m);
        return sg_cli_fail("create", err.msg);
    }
    /* A spare is listed once its supervisor serves requests (its first
     * checkpoint and its ready child done): a claim then waits for nothing. */
    if (o->spare) {
        sg_autojson json_t *pong = sg_cli_request(m->id, &(sg_ctl_req){.op = SG_OP_PING}, &err);
        if (!pong) {
            sg_err e2 = {0};
            json_decref(sg_cli_request(m->id, &(sg_ctl_req){.op = SG_OP_DESTROY}, &e2));
            sg_sandbox_meta_clear(m);
            return sg_cli_fail("create", err.msg);
        }
    }
    if (o->spare && sg_pool_add(m->id, &err) < 0) {
        sg_sandbox_meta_clear(m);
        return sg_cli_fail("create", err.msg);
    }
    return CREATE_GO;
}

int sg_cmd_create(int argc, char **argv)
{
    return sg_cmd_create_from(argc, argv, NULL, NULL, NULL);
}

int sg_cmd_create_from(int argc, char **argv, sg_create_seed_fn seed, void *seed_ud, const char *forked_from)
{
    sg_sandbox_meta m = {0};
    m.memory = SG_DEFAULT_MEMORY;
    m.pids = SG_DEFAULT_PIDS;
    m.timeout_s = SG_DEFAULT_TIMEOUT_S;
    m.warning_s = SG_EXPIRY_WARNING_DEFAULT_S;
    m.output_limit = SG_DEFAULT_OUTPUT_LIMIT;
    m.disk = SG_DISK_DEFAULT;
    m.max_events_per_min = SG_BUDGET_EVENTS_DEFAULT;
    m.max_bytes_per_min = SG_BUDGET_BYTES_DEFAULT;
    m.max_checkpoints_per_min = SG_BUDGET_CHECKPOINTS_DEFAULT;
    m.max_file_events = SG_FILE_EVENTS_DEFAULT;
    create_opts o = {.online = sysconf(_SC_NPROCESSORS_ONLN), .seed_fn = seed, .seed_ud = seed_ud,
                     .forked_from = forked_from};
    if (o.online < 1)
        o.online = 1;
    m.cpus = SG_DEFAULT_CPUS < (double)o.online ? SG_DEFAULT_CPUS : (double)o.online;
    int rc = create_defaults(&o, &m);
    if (rc == CREATE_GO)
        rc = create_parse(argc, argv, &o, &m);
    if (rc == CREATE_GO)
        rc = create_check(&o, &m);
    if (rc == CREATE_GO)
        rc = create_check_paths(&o);
    if (rc != CREATE_GO)
        return rc;
    long maxsb = SG_MAX_SANDBOXES;
    const char *confmax = sg_config_get(SG_CONF_MAX_SANDBOXES, NULL); /* checked: 1 and up */
    if (confmax)
        maxsb = atol(confmax);
    rc = create_from_pool(&o, &m);
    if (rc != CREATE_GO)
        return rc;
    int live = count_live();
    if (live >= maxsb) {
        char msg[160];
        snprintf(msg, sizeof msg, "too many sandboxes: %d of at most %ld are alive (destroy some, or run 'sandglass gc')",
                 live, maxsb);
        return sg_cli_fail("create", msg);
    }
    sg_autofree char *dir = NULL;
    rc = create_state_dir(&m, &dir);
    if (rc == CREATE_GO)
        rc = create_save_meta(&o, &m, dir);
    if (rc == CREATE_GO && o.from)
        rc = create_from_seed(&o, &m, dir);
    if (rc == CREATE_GO)
        rc = o.seed_fn ? create_seed_start(&o, &m, dir) : create_start(&o, &m);
    if (rc != CREATE_GO)
        return rc;
    char id[32];
    snprintf(id, sizeof id, "%s", m.id);
    sg_sandbox_meta_clear(&m);
    return print_created(id, o.json);
}

/* sandglass create: validates the options, writes the sandbox's record and
 * starts its supervisor (sandglassd supervisor), then waits until the
 * sandbox accepts execs. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
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
#include "cli/pool.h"
#include "sandbox/disk.h"
#include "state/state.h"


/* --ingest: ws://HOST:PORT[/PATH] or wss://..., the ingest's WebSocket URL.
 * Fills host and port. A bad one is refused at create: a capture that
 * could never be delivered must not start in silence. */
static int check_ingest_url(const char *url, char *host, size_t hsize, int *port, char *why, size_t wsize)
{
    const char *p;
    if (strncmp(url, "ws://", 5) == 0) {
        p = url + 5;
    } else if (strncmp(url, "wss://", 6) == 0) {
        p = url + 6;
    } else {
        snprintf(why, wsize, strncmp(url, "http", 4) == 0
                 ? "invalid --ingest '%.200s': the capture streams over WebSocket: use ws://HOST:PORT "
                   "(http:// is the address of 'sandglass events')"
                 : "invalid --ingest '%.200s': expected ws://HOST:PORT or wss://HOST:PORT", url);
        return -1;
    }
    size_t hl;
    const char *colon;
    if (*p == '[') { /* [v6]:port */
        const char *end = strchr(p, ']');
        if (!end || end[1] != ':')
            goto bad;
        hl = (size_t)(end - p - 1);
        if (hl == 0 || hl >= hsize)
            goto bad;
        memcpy(host, p + 1, hl);
        colon = end + 1;
    } else {
        colon = strchr(p, ':');
        if (!colon)
            goto bad;
        hl = (size_t)(colon - p);
        if (hl == 0 || hl >= hsize)
            goto bad;
        memcpy(host, p, hl);
    }
    host[hl] = '\0';
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || v < 1 || v > 65535 || (*end && *end != '/'))
        goto bad;
    *port = (int)v;
    return 0;
bad:
    snprintf(why, wsize, "invalid --ingest '%.200s': expected ws://HOST:PORT with a port from 1 to 65535", url);
    return -1;
}

/* The stream tokens' key: 64 hex characters (32 bytes), in a regular file
 * readable by its owner only (wire/token.h). A missing default file is
 * made by the capture's first token; a given one must be valid now. */
static int check_secret(const char *path, char *why, size_t wsize)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        snprintf(why, wsize, "--secret %.200s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        snprintf(why, wsize, "--secret %.200s: must be a regular file of mode 0600 (it is the ingest's key)", path);
        return -1;
    }
    char buf[80];
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
    size_t len = n > 0 ? (size_t)n : 0;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    bool hex = len == 64;
    for (size_t i = 0; hex && i < len; i++)
        hex = (buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f') || (buf[i] >= 'A' && buf[i] <= 'F');
    if (!hex) {
        snprintf(why, wsize, "--secret %.200s: not a sandglass key (64 hex characters, as 'sandglass ingest' "
                 "makes in <state>/ingest/secret)", path);
        return -1;
    }
    return 0;
}

/* One line on stderr when nothing listens at the ingest's address: the
 * spool keeps every event until it does, but the operator should know.
 * Returns whether something listens. */
static bool warn_unreachable(const char *url, const char *host, int port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &ai);
    if (gr != 0) {
        fprintf(stderr, "sandglass create: warning: the ingest host '%s' of %s does not resolve (%s): events are "
                "kept in the spool until it can be reached\n", host, url, gai_strerror(gr));
        return false;
    }
    int err = ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        sg_autoclose int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
            err = errno;
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int soerr = ETIMEDOUT;
        socklen_t sl = sizeof soerr;
        if (poll(&pf, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
            freeaddrinfo(ai);
            return true;
        }
        err = soerr;
    }
    freeaddrinfo(ai);
    fprintf(stderr, "sandglass create: warning: the ingest at %s is not reachable (%s): events are kept in the "
            "spool and sent when it is (see 'sandglass flush')\n", url, strerror(err));
    return false;
}

#define TOKEN_CHECK_OUT_MAX 4096

/* Asks `sandglassd token --check` (this binary has no HMAC: no libcrypto)
 * whether the ingest takes the tokens of this key. Its JSON answer on
 * stdout, parsed; NULL when it gave none. */
static json_t *ask_token_check(const char *url, const char *learner, const char *task, const char *secret)
{
    char daemon[PATH_MAX];
    if (sg_cli_daemon_path(daemon, sizeof daemon) < 0)
        return NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return NULL;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return NULL;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(p[1], 1) < 0 || dup2(null, 2) < 0)
            _exit(127);
        /* The sandbox id is not chosen yet and no part of the check: the
         * ingest checks the key and the expiry. */
        execl(daemon, "sandglass", "token", "--learner", learner, "--task", task, "--sandbox", "create-check",
              "--check", url, secret ? "--secret" : (char *)NULL, secret, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char out[TOKEN_CHECK_OUT_MAX];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(p[0], out + have, sizeof out - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (have += (size_t)n) == sizeof out)
            break;
    }
    close(p[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return json_loadb(out, have, JSON_REJECT_DUPLICATES, NULL);
}

/* A captured sandbox's ingest, checked before anything is made: nothing
 * listening is a warning (the spool keeps everything, by design); an
 * ingest that rejects this key's tokens is a refusal (the capture could
 * never be delivered). Returns 0, or -1 with why. */
static int check_ingest(const char *url, const char *host, int port, const char *learner, const char *task,
                        const char *secret, char *why, size_t wsize)
{
    if (!warn_unreachable(url, host, port))
        return 0;
    sg_autojson json_t *ans = ask_token_check(url, learner, task, secret);
    const char *result = json_string_value(json_object_get(ans, "result"));
    const char *reason = json_string_value(json_object_get(ans, "reason"));
    char vbuf[256];
    const char *vr = sg_vis(reason ? reason : "", reason ? strlen(reason) : 0, vbuf, sizeof vbuf);
    if (result && strcmp(result, "rejected") == 0) {
        snprintf(why, wsize, "the ingest at %s rejects the tokens of the key %s (%s): give it its key with --secret",
                 url, secret ? secret : "<state>/ingest/secret", vr);
        return -1;
    }
    if (!result)
        fprintf(stderr, "sandglass create: warning: could not ask the ingest at %s whether it takes the tokens of "
                "the key %s (try 'sandglass token --check %s ...')\n", url,
                secret ? secret : "<state>/ingest/secret", url);
    else if (strcmp(result, "unreachable") == 0)
        fprintf(stderr, "sandglass create: warning: the ingest at %s did not answer (%s): events are kept in the "
                "spool and sent when it does (see 'sandglass flush')\n", url, vr);
    return 0;
}

static void create_usage(FILE *f)
{
    fprintf(f,
        "usage: sandglass create --learner L [--task T] [--workspace DIR] [--memory 512M]\n"
        "                        [--pids 256] [--cpus 1] [--timeout 600] [--output-limit 64M]\n"
        "                        [--rootfs DIR] [--ingest ws://HOST:PORT] [--secret FILE]\n"
        "                        [--max-wall S] [--max-execs N] [--max-cpu S] [--max-calls N]\n"
        "                        [--checkpoints exec|manual] [--disk 1G] [--json]\n"
        "\n"
        "Creates a sandbox and prints its id. Sizes take K, M, G; times are seconds.\n"
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
        "  --timeout S          wall time of each exec (default 600)\n"
        "  --output-limit SIZE  output bytes of each exec (default 64M)\n"
        "  --disk SIZE          the workspace's own file system (default 1G, 16M to 16T):\n"
        "                       writes past it fail with ENOSPC; not with --workspace\n"
        "  --rootfs DIR         this directory as / instead of the host's system directories\n"
        "  --ingest URL         where a captured session streams (default ws://127.0.0.1:7433)\n"
        "  --secret FILE        the ingest's key for its tokens (default <state>/ingest/secret)\n"
        "  --max-wall S, --max-execs N, --max-cpu S, --max-calls N\n"
        "                       caps: reaching one aborts the whole session (default: none)\n"
        "  --checkpoints MODE   exec: one before every exec (default); manual: only at create\n"
        "                       and on request\n"
        "  --json               print {id, learner, task, workspace, limits, caps, ...}\n");
}

static int count_live(void)
{
    sg_autostrv char **ids = sg_state_list(NULL);
    int n = 0;
    for (char **p = ids; p && *p; p++) {
        sg_sandbox_meta m;
        if (sg_sandbox_meta_load(*p, &m, NULL) == 0) {
            if (sg_state_pid_alive(m.supervisor_pid) || m.supervisor_pid == 0)
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

/* The workspace create makes, handed to a uid of the sandbox's own
 * (state.h): a file system of m->disk bytes of its own (disk.h), or, where
 * none can be made (no loop device, no mkfs.ext4, not root), a directory
 * in the state directory, with a warning: never a silent lack of a limit. */
static int own_workspace(sg_sandbox_meta *m, sg_err *err)
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
    if (m->disk) {
        sg_autofree char *image = sg_state_sandbox_path(m->id, SG_DISK_IMAGE);
        sg_err derr = {0};
        if (sg_disk_make(image, m->disk, m->uid, m->gid, &m->workspace, &derr) == 0)
            return 0;
        fprintf(stderr, "sandglass create: warning: no disk limit for this sandbox (%s): its workspace is a "
                "directory on the host's file system\n", derr.msg);
        m->disk = 0;
    }
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

int sg_cmd_create(int argc, char **argv)
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
        {"max-wall", required_argument, NULL, 'W'},
        {"max-execs", required_argument, NULL, 'E'},
        {"max-cpu", required_argument, NULL, 'C'},
        {"max-calls", required_argument, NULL, 'K'},
        {"checkpoints", required_argument, NULL, 'P'},
        {"disk", required_argument, NULL, 'D'},
        {"json", no_argument, NULL, 'j'},
        {"spare", no_argument, NULL, 'S'}, /* internal: a spare for the pool (pool.h) */
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    sg_err err = {0};
    sg_sandbox_meta m = {0};
    m.memory = SG_DEFAULT_MEMORY;
    m.pids = SG_DEFAULT_PIDS;
    m.timeout_s = SG_DEFAULT_TIMEOUT_S;
    m.output_limit = SG_DEFAULT_OUTPUT_LIMIT;
    m.disk = SG_DISK_DEFAULT;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1)
        online = 1;
    m.cpus = SG_DEFAULT_CPUS < (double)online ? SG_DEFAULT_CPUS : (double)online;
    const char *learner = NULL, *task = NULL, *ws = NULL, *rootfs = NULL;
    const char *ingest = NULL, *secret = NULL;
    bool json = false, spare = false, disk_given = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 'l': learner = optarg; break;
        case 't': task = optarg; break;
        case 'w': ws = optarg; break;
        case 'r': rootfs = optarg; break;
        case 'i': ingest = optarg; break;
        case 's': secret = optarg; break;
        case 'j': json = true; break;
        case 'S': spare = true; break;
        /* Each value error names its flag and is a usage error (2). */
        case 'm':
            if (sg_parse_size(optarg, &m.memory, &err) < 0)
                return sg_cli_usage("create", "--memory: %s", err.msg);
            if (m.memory < 4u << 20)
                return sg_cli_usage("create", "--memory %s: at least 4M", optarg);
            break;
        case 'p':
            if (sg_parse_uint(optarg, 1u << 22, &m.pids, &err) < 0)
                return sg_cli_usage("create", "--pids: %s", err.msg);
            break;
        case 'o':
            if (sg_parse_size(optarg, &m.output_limit, &err) < 0)
                return sg_cli_usage("create", "--output-limit: %s", err.msg);
            break;
        case 'D':
            if (sg_disk_parse(optarg, &m.disk, &err) < 0)
                return sg_cli_usage("create", "--disk: %s", err.msg);
            disk_given = true;
            break;
        case 'c':
            if (sg_parse_seconds(optarg, 1024, &m.cpus, &err) < 0)
                return sg_cli_usage("create", "invalid --cpus '%.32s': expected a positive number of cores", optarg);
            if (m.cpus > (double)online)
                return sg_cli_usage("create", "invalid --cpus '%.32s': this host has %ld online CPU%s", optarg,
                                    online, online == 1 ? "" : "s");
            break;
        case 'T':
            if (sg_parse_seconds(optarg, 7 * 24 * 3600.0, &m.timeout_s, &err) < 0)
                return sg_cli_usage("create", "--timeout: %s", err.msg);
            break;
        case 'W':
            if (sg_parse_seconds(optarg, 365 * 24 * 3600.0, &m.max_wall_s, &err) < 0)
                return sg_cli_usage("create", "--max-wall: %s", err.msg);
            break;
        case 'C':
            if (sg_parse_seconds(optarg, 365 * 24 * 3600.0, &m.max_cpu_s, &err) < 0)
                return sg_cli_usage("create", "--max-cpu: %s", err.msg);
            break;
        case 'E':
            if (sg_parse_uint(optarg, UINT32_MAX, &m.max_execs, &err) < 0)
                return sg_cli_usage("create", "--max-execs: %s", err.msg);
            break;
        case 'K':
            if (sg_parse_uint(optarg, UINT32_MAX, &m.max_calls, &err) < 0)
                return sg_cli_usage("create", "--max-calls: %s", err.msg);
            break;
        case 'P':
            if (strcmp(optarg, "exec") && strcmp(optarg, "manual"))
                return sg_cli_usage("create", "invalid --checkpoints '%.32s': use exec (before every exec) or manual",
                                    optarg);
            m.manual_checkpoints = strcmp(optarg, "manual") == 0;
            break;
        case 'h':
            create_usage(stdout);
            return 0;
        default:
            return sg_cli_usage("create", "unknown option, or one without its value: '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return sg_cli_usage("create", "unexpected argument '%.64s' (create takes only options)", argv[optind]);
    if (!learner)
        return sg_cli_usage("create", "--learner is required");
    if (!sg_valid_name(learner))
        return sg_cli_usage("create", "invalid --learner: use 1-128 of A-Z a-z 0-9 . _ - @");
    if ((strcmp(learner, SG_POOL_LEARNER) == 0) != spare)
        return sg_cli_fail("create", "--learner " SG_POOL_LEARNER " is reserved for the pool's spares");
    /* The operator's own directory stays on its own file system. */
    if (ws && disk_given)
        return sg_cli_usage("create", "--disk sizes the workspace create makes: it does not apply to --workspace");
    if (ws)
        m.disk = 0;
    if (task && !sg_valid_name(task))
        return sg_cli_usage("create", "invalid --task: use 1-128 of A-Z a-z 0-9 . _ - @");
    char ingest_host[256] = "";
    int ingest_port = 0;
    if ((ingest || secret) && !task)
        return sg_cli_usage("create", "--ingest and --secret go with --task (only a captured sandbox streams)");
    if (task) {
        char why[400];
        if (check_ingest_url(ingest ? ingest : SG_DEFAULT_INGEST_URL, ingest_host, sizeof ingest_host,
                             &ingest_port, why, sizeof why) < 0 ||
            (secret && check_secret(secret, why, sizeof why) < 0))
            return sg_cli_usage("create", "%s", why);
    }
    if (!sg_state_dir(&err))
        return sg_cli_fail("create", err.msg);
    if (task) {
        char why[600];
        if (check_ingest(ingest ? ingest : SG_DEFAULT_INGEST_URL, ingest_host, ingest_port, learner, task, secret,
                         why, sizeof why) < 0)
            return sg_cli_fail("create", why);
    }

    char wsreal[PATH_MAX] = "";
    if (ws) {
        struct stat st;
        if (stat(ws, &st) < 0) {
            char msg[PATH_MAX + 64];
            snprintf(msg, sizeof msg, "workspace '%s' does not exist", ws);
            return sg_cli_fail("create", msg);
        }
        if (!S_ISDIR(st.st_mode)) {
            char msg[PATH_MAX + 64];
            snprintf(msg, sizeof msg, "workspace '%s' is not a directory", ws);
            return sg_cli_fail("create", msg);
        }
        if (!realpath(ws, wsreal))
            return sg_cli_fail("create", "cannot resolve the workspace path");
        if (state_inside(wsreal)) {
            char msg[PATH_MAX + 96];
            snprintf(msg, sizeof msg, "workspace '%s' contains the state directory (its checkpoints would "
                     "snapshot themselves): use a directory outside it", ws);
            return sg_cli_fail("create", msg);
        }
    }
    char rootreal[PATH_MAX] = "";
    if (rootfs) {
        struct stat st;
        if (stat(rootfs, &st) < 0 || !S_ISDIR(st.st_mode)) {
            char msg[PATH_MAX + 64];
            snprintf(msg, sizeof msg, "rootfs '%s' is not a directory", rootfs);
            return sg_cli_fail("create", msg);
        }
        if (!realpath(rootfs, rootreal))
            return sg_cli_fail("create", "cannot resolve the rootfs path");
    }
    long maxsb = SG_MAX_SANDBOXES;
    const char *envmax = getenv("SANDGLASS_MAX_SANDBOXES");
    if (envmax && atol(envmax) > 0)
        maxsb = atol(envmax);
    /* A spare from the pool, when one is ready and fits (pool.h). */
    if (!ws && !rootfs && !spare && geteuid() == 0 && m.disk == SG_DISK_DEFAULT) {
        m.learner = (char *)learner;
        m.task = (char *)task;
        char *secret_path = NULL;
        if (task) {
            m.ingest_url = (char *)(ingest ? ingest : SG_DEFAULT_INGEST_URL);
            secret_path = secret ? realpath(secret, NULL) : sg_state_path("ingest/secret");
            if (!secret_path)
                return sg_cli_fail("create", "--secret file does not exist");
            m.secret_file = secret_path;
        }
        m.workspace = (char *)"";
        sg_now_iso8601(m.created, sizeof m.created);
        char id[32];
        int claimed = sg_pool_claim(&m, id);
        free(secret_path);
        m.learner = m.task = m.ingest_url = m.secret_file = m.workspace = NULL;
        if (claimed == 1) {
            sg_pool_refill_async();
            return print_created(id, json);
        }
    }
    int live = count_live();
    if (live >= maxsb) {
        char msg[160];
        snprintf(msg, sizeof msg, "too many sandboxes: %d of at most %ld are alive (destroy some, or run 'sandglass gc')",
                 live, maxsb);
        return sg_cli_fail("create", msg);
    }

    /* A fresh id and its state directory. */
    sg_autofree char *sbroot = sg_state_path("sb");
    if (sg_mkdir_p(sbroot, 0700, &err) < 0)
        return sg_cli_fail("create", err.msg);
    sg_autofree char *dir = NULL;
    for (int tries = 0;; tries++) {
        if (sg_rand_hex(m.id, SG_ID_LEN, &err) < 0)
            return sg_cli_fail("create", err.msg);
        free(dir);
        dir = sg_state_sandbox_path(m.id, NULL);
        if (mkdir(dir, 0700) == 0)
            break;
        if (errno != EEXIST || tries > 8)
            return sg_cli_fail("create", "cannot create the sandbox's state directory");
    }
    m.learner = strdup(learner);
    m.task = task ? strdup(task) : NULL;
    m.rootfs = rootfs ? strdup(rootreal) : NULL;
    if (ws) {
        m.workspace = strdup(wsreal);
        if (workspace_user(&m, &err) < 0) {
            sg_rm_rf(dir, NULL);
            sg_sandbox_meta_clear(&m);
            return sg_cli_fail("create", err.msg);
        }
    } else if (own_workspace(&m, &err) < 0) {
        sg_rm_rf(dir, NULL);
        sg_sandbox_meta_clear(&m);
        return sg_cli_fail("create", err.msg);
    }
    if (task) {
        m.ingest_url = strdup(ingest ? ingest : SG_DEFAULT_INGEST_URL);
        m.secret_file = secret ? realpath(secret, NULL) : sg_state_path("ingest/secret");
        if (!m.secret_file) {
            sg_disk_remove_workspace(&m);
            sg_state_uid_release(m.uid, m.id);
            sg_rm_rf(dir, NULL);
            sg_sandbox_meta_clear(&m);
            return sg_cli_fail("create", "--secret file does not exist");
        }
    }
    sg_now_iso8601(m.created, sizeof m.created);
    if (sg_sandbox_meta_save(&m, &err) < 0) {
        sg_disk_remove_workspace(&m);
        sg_state_uid_release(m.uid, m.id);
        sg_rm_rf(dir, NULL);
        sg_sandbox_meta_clear(&m);
        return sg_cli_fail("create", err.msg);
    }
    if (sg_cli_start_supervisor(m.id, false, &err) < 0) {
        sg_err e2 = {0};
        sg_cli_cleanup_dead(m.id, false, &e2);
        sg_disk_remove_workspace(&m);
        sg_sandbox_meta_clear(&m);
        return sg_cli_fail("create", err.msg);
    }
    /* A spare is listed once its supervisor serves requests (its first
     * checkpoint and its ready child done): a claim then waits for nothing. */
    if (spare) {
        sg_autojson json_t *ping = json_pack("{s:s}", "op", "ping");
        sg_autojson json_t *pong = sg_cli_request(m.id, ping, &err);
        if (!pong) {
            sg_err e2 = {0};
            sg_autojson json_t *d = json_pack("{s:s}", "op", "destroy");
            json_decref(sg_cli_request(m.id, d, &e2));
            sg_sandbox_meta_clear(&m);
            return sg_cli_fail("create", err.msg);
        }
    }
    if (spare && sg_pool_add(m.id, &err) < 0) {
        sg_sandbox_meta_clear(&m);
        return sg_cli_fail("create", err.msg);
    }
    char id[32];
    snprintf(id, sizeof id, "%s", m.id);
    sg_sandbox_meta_clear(&m);
    return print_created(id, json);
}

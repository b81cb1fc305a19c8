/* sandglass-init: the sandbox's pid 1 as its own small binary (libc and
 * libseccomp only), exec'd by the supervisor in the new namespaces. A fork
 * of the big supervisor would carry its whole address space into every
 * exec's clone; this one is small, so each exec starts faster and each
 * sandbox costs less memory.
 *
 *   sandglass-init WORKSPACE ROOTFS|"" HOSTNAME UID GID idmap|"" notify|""
 *   fds: 3 init.sock (listening), 4 ready pipe, 5 go pipe, 6 seccomp BPF (memfd;
 *   init loads it on itself, see sg_seccomp_build_init), and 7 if open:
 *   sandglass-exec (an execute-only memfd, see exec_main.c)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/init.h"

int main(int argc, char **argv)
{
    if (argc != 9) {
        dprintf(4, "error: sandglass-init: bad arguments (it is run by the supervisor)\n");
        return 2;
    }
    struct stat st;
    sg_seccomp_prog prog = {0};
    if (fstat(6, &st) < 0 || st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) ||
        st.st_size > (off_t)(65536 * sizeof(struct sock_filter))) {
        dprintf(4, "error: sandglass-init: no valid seccomp program on fd 6\n");
        return 2;
    }
    prog.insns = malloc((size_t)st.st_size);
    if (!prog.insns || pread(6, prog.insns, (size_t)st.st_size, 0) != st.st_size) {
        dprintf(4, "error: sandglass-init: cannot read the seccomp program: %s\n", strerror(errno));
        return 2;
    }
    prog.len = (size_t)st.st_size / sizeof(struct sock_filter);
    close(6);
    /* The arguments name host paths (the workspace, the state directory's
     * root): keep copies and blank the originals, which every process of
     * the sandbox can read in /proc/1/cmdline. */
    char *ws = strdup(argv[1]), *root = argv[2][0] ? strdup(argv[2]) : NULL, *host = strdup(argv[3]);
    if (!ws || (argv[2][0] && !root) || !host) {
        dprintf(4, "error: sandglass-init: out of memory\n");
        return 2;
    }
    uid_t uid = (uid_t)strtoul(argv[4], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[5], NULL, 10);
    bool idmap = strcmp(argv[6], "idmap") == 0;
    bool notify = strcmp(argv[7], "notify") == 0;
    char *lxcfs = argv[8][0] ? strdup(argv[8]) : NULL;
    for (int i = 1; i < argc; i++)
        memset(argv[i], 0, strlen(argv[i]));
    sg_init_config cfg = {
        .rootfs = {
            .workspace = ws, .rootfs = root, .hostname = host, .uid = uid, .gid = gid, .idmap = idmap,
            .lxcfs = lxcfs,
        },
        .seccomp = &prog, .listen_fd = 3, .ready_fd = 4, .go_fd = 5,
        .exec_stub_fd = fcntl(7, F_GETFD) >= 0 ? 7 : -1, .exec_notify = notify,
    };
    sg_init_main(&cfg);
}

/* procfs: what procevents reads of a sandbox process from /proc (the
 * host's), each bounded. dirfd is an open /proc/PID directory. */
#ifndef SG_PROCFS_H
#define SG_PROCFS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* /proc/PID as a directory fd, or -1. */
int sg_procfs_open(pid_t pid);
/* Reads the file name under dirfd into buf (at most len bytes). */
ssize_t sg_procfs_read_at(int dirfd, const char *name, char *buf, size_t len);
/* The innermost pid of status's NSpid (the sandbox's, for a process of the
 * sandbox), and its PPid (host) if ppid; 0 when unreadable. */
pid_t sg_procfs_nspid(int dirfd, pid_t *ppid);
/* status's Tgid: the process a thread belongs to; 0 when unreadable. */
pid_t sg_procfs_tgid(int dirfd);
/* cmdline as a JSON array, or {"argv": [...], "cut": true} past
 * SG_PROC_ARGV_MAX bytes; NULL when unreadable. */
json_t *sg_procfs_argv(int dirfd);
/* Whether it runs sandglass-exec (init's ready child's stub, a memfd). */
bool sg_procfs_is_exec_stub(int dirfd);
/* Whether it runs the same executable as pid (init's fresh clone). */
bool sg_procfs_same_exe(int dirfd, pid_t pid);

#endif

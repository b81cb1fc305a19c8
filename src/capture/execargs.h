/* execargs: what a held execve (sandbox/execnotify.h) asks to run, read
 * from its caller's memory with process_vm_readv while the kernel keeps it
 * stopped: the path and the argv, bounded (SG_PROC_ARGS_MAX arguments,
 * SG_PROC_ARGV_MAX bytes of them, SG_PROC_PATH_MAX of the path).
 *
 * Every pointer is the learner's: reads go a page at a time, so an
 * unmapped, huge or wrapping address ends the read where the memory ends
 * and never faults here. The caller checks afterwards that the
 * notification is still valid (the pid may have died and been reused
 * while we read). Another thread of the caller can still change the
 * memory after we read it and before the kernel does: what is recorded is
 * what the program showed at the notification (procevents.h says so). */
#ifndef SG_EXECARGS_H
#define SG_EXECARGS_H

#include <jansson.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct sg_execargs {
    json_t *argv;    /* array of strings (UTF-8, sanitized); NULL when unreadable */
    bool truncated;  /* past a bound, or cut where the memory ended */
    char *path;      /* the path given (execveat: relative to its fd); NULL: none (AT_EMPTY_PATH "") or unreadable */
} sg_execargs;

/* Reads the execve or execveat of d (the notification's data) from the
 * memory of tid (a thread id in our pid namespace). Returns 0, or -1 when d
 * is not one of those calls. */
int sg_execargs_read(pid_t tid, const struct seccomp_data *d, sg_execargs *out);
void sg_execargs_clear(sg_execargs *a);

#endif

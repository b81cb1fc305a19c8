/* sv_execnotify: the sandbox's held execve calls (sandbox/execnotify.h),
 * read for the process events and let go. */
#ifndef SG_SV_EXECNOTIFY_H
#define SG_SV_EXECNOTIFY_H

#include "supervisor/sv_sup.h"

/* Whether init should hold every execve for us (not rootless, a kernel that
 * can, SANDGLASS_EXEC_NOTIFY is not 0). */
bool sv_execnotify_wanted(const sv_sup *s);
/* init's SG_SPAWN_NOTIFY: fd (taken) is the listener to serve. */
void sv_execnotify_attach(sv_sup *s, int fd, int page_fd);
/* init's connection is gone: so is ours to the listener. */
void sv_execnotify_stop(sv_sup *s);
/* Held execve calls seen so far: a program ran since the count was last
 * read (a shell's prompt checkpoints, sv_tty.c). */
uint64_t sv_execnotify_held(const sv_sup *s);
/* Unmaps init's in-flight page (sv_execnotify_stop does too). */
void sv_execnotify_unmap(sv_sup *s);

#endif

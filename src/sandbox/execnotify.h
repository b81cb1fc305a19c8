/* execnotify: every execve/execveat in the sandbox held until the host has
 * read what it runs (seccomp user notification, SECCOMP_RET_USER_NOTIF).
 *
 * Init loads one more filter on itself, a few instructions that answer
 * execve and execveat with USER_NOTIF (every other syscall: allow; the
 * main filter still refuses what it refuses, and stacked filters give the
 * most restrictive answer). The kernel hands back a listener fd. Init
 * keeps it and sends a copy to each supervisor that connects (wire/spawn.h,
 * SG_SPAWN_NOTIFY); the supervisor reads the caller's argv and cwd
 * (capture/execargs.h, procevents.h) and answers CONTINUE: the kernel then
 * runs the execve as if there were no filter.
 *
 * Why init keeps a copy: when the last listener fd closes, the kernel
 * answers every held and every later execve of the sandbox with ENOSYS, for
 * good. Init outlives the supervisor, so while no supervisor is connected
 * (crash, takeover) init answers CONTINUE itself (unread: no capture runs
 * then anyway), and a new supervisor gets the listener again.
 *
 * A held process is killable (SIGKILL, cgroup.kill): no kill waits on an
 * answer. One the supervisor received but never answered (it died in
 * between) would stay held: the kernel gives a received notification to
 * no one else. Init answers it when the supervisor's connection closes
 * (the in-flight page below); sg_execnotify_release_stuck is the fallback
 * when the next one is received (ids are handed out in order, so they sit
 * just below it: best effort, a few dozen ids back).
 *
 * Needs Linux >= 5.5 (USER_NOTIF and the CONTINUE answer); elsewhere, and
 * when SANDGLASS_EXEC_NOTIFY=0, nothing is loaded and the process events
 * read argv from /proc after the fact (procevents.h says what that misses).
 * Async-signal-safe where init calls it (no malloc). */
#ifndef SG_EXECNOTIFY_H
#define SG_EXECNOTIFY_H

#include <linux/seccomp.h>
#include <stdbool.h>
#include <stdint.h>

/* The id a supervisor is answering, in one page init shares with it (a
 * memfd init sends beside the listener, SG_SPAWN_NOTIFY). The supervisor
 * writes each id it receives there before it works on it; init, as soon
 * as the supervisor's connection closes, answers that id and the few
 * after it still held (a SIGKILL between receive and answer would
 * otherwise hold the caller until the next execve, which a loop blocked in
 * that one never makes). Written with __atomic stores (id, then set). */
typedef struct sg_execnotify_inflight {
    uint64_t id;  /* the last id received */
    uint32_t set; /* 1 once id is meaningful */
} sg_execnotify_inflight;

/* Ids looked back at by sg_execnotify_release_stuck. */
#define SG_EXECNOTIFY_STUCK_SCAN 64

/* Whether this kernel can hold an execve and let it go on (>= 5.5). */
bool sg_execnotify_supported(void);
/* Loads the notify filter on the calling process (no_new_privs or
 * CAP_SYS_ADMIN in its user namespace needed, as for any filter): the
 * listener fd (close-on-exec), or -errno. */
int sg_execnotify_install(void);
/* One held execve, if the listener has one: 1 with *n filled, 0 when none
 * is waiting (or it went: its caller was killed), -errno on error. Never
 * blocks while this process is the listener's only reader. */
int sg_execnotify_recv(int fd, struct seccomp_notif *n);
/* Whether the notification id still waits for an answer: its caller is
 * alive and blocked in it, so what was read of it by pid was its. */
bool sg_execnotify_valid(int fd, uint64_t id);
/* Lets the held execve go on (the kernel runs it). -errno on failure
 * (ENOENT: its caller is gone). */
int sg_execnotify_continue(int fd, uint64_t id);
/* Answers notifications a dead reader took and never answered: the ids just
 * below first_id, the first one this reader got. */
void sg_execnotify_release_stuck(int fd, uint64_t first_id);

#endif

/* util: small parsing, file and time helpers with no heavy dependencies. */
#ifndef SG_UTIL_H
#define SG_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

/* "512M", "1G", "65536", "4k" -> bytes. Rejects junk, overflow, zero. */
int sg_parse_size(const char *s, uint64_t *out, sg_err *err);
/* "1.5" -> 1.5; positive, finite, at most max. */
int sg_parse_seconds(const char *s, double max, double *out, sg_err *err);
/* A duration: "90", "90s", "1.5m", "2h", "7d" -> seconds; positive,
 * finite, at most max seconds. Every duration option takes this form. */
int sg_parse_duration(const char *s, double max, double *out, sg_err *err);
/* Positive integer in [1, max]. */
int sg_parse_uint(const char *s, uint64_t max, uint64_t *out, sg_err *err);
/* Learner / task / sandbox names: [A-Za-z0-9._@-], 1..SG_NAME_MAX, not "." or "..". */
bool sg_valid_name(const char *s);

int sg_write_all(int fd, const void *buf, size_t len);
/* Reads until len bytes or end of file (EINTR retried): the bytes read, short
 * only at end of file; -1 with errno on error. */
ssize_t sg_read_all(int fd, void *buf, size_t len);
/* Reads fd to its end, at most max bytes (EFBIG past it); NUL-terminated;
 * *len optional. */
char *sg_read_fd(int fd, size_t max, size_t *len, sg_err *err);
/* Reads a whole (small) file; NUL-terminated; *len optional. */
char *sg_read_file(const char *path, size_t max, size_t *len, sg_err *err);
char *sg_read_file_at(int dirfd, const char *path, size_t max, size_t *len, sg_err *err);
/* Writes a string into an existing file (e.g. a cgroup knob), no O_CREAT. */
int sg_write_knob_at(int dirfd, const char *path, const char *value, sg_err *err);
/* Replaces a file atomically for its readers (tmp + rename) with the given
 * mode. Not synced: its users (sandbox records, the pool size) describe live
 * processes, which a power loss ends anyway; gc removes a record left
 * unreadable. Without the fsync, create no longer waits 1-15 ms for the
 * journal (the spool, which must survive, syncs on its own). */
int sg_write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode, sg_err *err);
int sg_mkdir_p(const char *path, mode_t mode, sg_err *err);
/* Removes a directory tree (no symlink following, no other file system
 * entered). Missing is fine. Any depth and any path length: it works
 * openat-relative, one directory fd at a time, without recursion. */
int sg_rm_rf(const char *path, sg_err *err);
/* The same for name in the directory dfd. */
int sg_rm_rf_at(int dfd, const char *name, sg_err *err);
/* openat2 of rel confined under dirfd (RESOLVE_BENEATH), with no symlink
 * anywhere in the path (RESOLVE_NO_SYMLINKS; O_NOFOLLOW and O_CLOEXEC
 * added): a learner's symlink never makes host-side code open a host file.
 * Without openat2, or for a path past PATH_MAX, the same rules one
 * component at a time. "." is dirfd itself; ".." anywhere is EXDEV. */
int sg_open_beneath(int dirfd, const char *rel, int flags);

/* Random lowercase hex string of n chars into buf (buf holds n+1). */
int sg_rand_hex(char *buf, size_t n, sg_err *err);

uint64_t sg_now_mono_ns(void);

/* A helper binary: $envname when set, else name in the directory of this
 * process's executable, else in its ../libexec (an installed CLI). 0 when
 * it is executable, -1 otherwise. */
int sg_sibling_exe(const char *envname, const char *name, char *buf, size_t len);
/* Current UTC time as RFC 3339 with microseconds, e.g. 2026-11-29T17:00:00.123456+00:00 */
void sg_now_iso8601(char *buf, size_t len);
/* The current wall-clock time in unix seconds. */
double sg_now_wall(void);
/* A duration for people, in its largest whole unit: "45s", "14m", "3h", "2d"
 * (seconds rounded up under 2 minutes, the rest to the nearest). */
void sg_fmt_duration(double seconds, char *buf, size_t len);

/* The out-of-memory policy (docs/ARCHITECTURE.md, "Out of memory"): a
 * small allocation whose size no learner or peer controls aborts the
 * process through sg_oom (each process is built to be restarted); a size
 * that input controls is bounded first and its failure is an error
 * (ENOMEM, base/buf.h). sg_oom: "out of memory" on stderr, then abort. */
void sg_oom(void) __attribute__((noreturn));
/* Allocators that end the process on OOM (sg_oom). */
void *sg_xrealloc(void *p, size_t n);
void *sg_xcalloc(size_t n, size_t size);
char *sg_xstrdup(const char *s);

/* The length of s's longest prefix of at most max bytes (s is len bytes)
 * that does not end inside a UTF-8 character. */
size_t sg_utf8_cut(const char *s, size_t len, size_t max);

/* printf into a fresh heap string (aborts on OOM, which we cannot handle). */
char *sg_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* s (len bytes) into buf (n bytes, NUL-terminated) with everything a
 * terminal would act on escaped: \t \r \n, \xHH for other control bytes,
 * DEL and invalid UTF-8, \uHHHH for C1 controls, line and paragraph
 * separators and bidirectional marks. Cut at n with "…". Learner-
 * controlled text (output, file names, labels with commands) is printed
 * for an operator only through it. Returns buf. */
const char *sg_vis(const char *s, size_t len, char *buf, size_t n);

#endif

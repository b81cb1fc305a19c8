/* counters: what a sandbox host counts for its metrics (the daemon of
 * `sandglass host`, docs/METRICS.md), kept in small files so that a scrape
 * never asks a supervisor anything.
 *
 *   <state>/sb/<id>/counters  one supervisor's counters and its sandbox's
 *                             state, rewritten in place by it after each
 *                             change (sv_metrics.c, sg_counters_write)
 *   <state>/host/retired      the sum of the counters of every sandbox that
 *                             is gone: sg_counters_retire folds a sandbox's
 *                             file into it as its state directory goes
 *   <state>/host/lock         flock: a retire (exclusive) against a scan
 *                             (shared), so that a scan sees a sandbox's
 *                             counters in exactly one place: the host's
 *                             totals never go down
 *
 * A file is text, one `key N N ...` line per figure (format 1; numbers 20
 * digits wide), then `sum H` (FNV-1a of the lines before), at most
 * SG_COUNTERS_FILE_MAX bytes: a longer or malformed one is skipped by a
 * scan and counted (`bad_files`). Counts only: no learner, task or any
 * other string a user chose is in a file. Writes are not fsync'ed: after a
 * power loss a file may be empty (skipped, counted as bad) and the
 * counters since its last write lost, which metrics may afford. */
#ifndef SG_STATE_COUNTERS_H
#define SG_STATE_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SG_COUNTERS_FILE_MAX 4096
#define SG_COUNTERS_BUCKETS 16 /* the histograms' bounds (sg_counters_bounds), +Inf apart */

/* How an exec ended: exit 0, another exit status, killed (a signal: ours
 * or the kernel's), or it could not start. */
typedef enum { SG_CTR_EXEC_OK, SG_CTR_EXEC_FAILED, SG_CTR_EXEC_KILLED, SG_CTR_EXEC_ERROR, SG_CTR_EXEC_N } sg_ctr_exec;
/* Why sandglass killed an exec (sv_exec.h's kill causes). */
typedef enum {
    SG_CTR_KILL_TIMEOUT, SG_CTR_KILL_OUTPUT, SG_CTR_KILL_MEMORY, SG_CTR_KILL_ABORT,
    SG_CTR_KILL_ROLLBACK, SG_CTR_KILL_OTHER, SG_CTR_KILL_N
} sg_ctr_kill;
/* A limit an exec or a session ran into. */
typedef enum {
    SG_CTR_LIMIT_MEMORY, SG_CTR_LIMIT_PIDS, SG_CTR_LIMIT_OUTPUT, SG_CTR_LIMIT_TIME,
    SG_CTR_LIMIT_CAP, SG_CTR_LIMIT_N
} sg_ctr_limit;
typedef enum { SG_CTR_EXPIRY_IDLE, SG_CTR_EXPIRY_TTL, SG_CTR_EXPIRY_N } sg_ctr_expiry;
/* A sandbox's state as its supervisor writes it; a scan adds "dead" (no
 * supervisor holds it). */
typedef enum {
    SG_CTR_STATE_RUNNING, SG_CTR_STATE_ABORTED, SG_CTR_STATE_EXPIRED, SG_CTR_STATE_SPARE,
    SG_CTR_STATE_DEAD, SG_CTR_STATE_N
} sg_ctr_state;

typedef struct sg_ctr_hist {
    uint64_t le[SG_COUNTERS_BUCKETS + 1]; /* per bucket, not cumulative; the last is +Inf */
    uint64_t count;
    uint64_t sum_ns;
} sg_ctr_hist;

typedef struct sg_counters {
    uint64_t execs[SG_CTR_EXEC_N];
    sg_ctr_hist exec_time;  /* an exec's wall time */
    uint64_t kills[SG_CTR_KILL_N];
    sg_ctr_hist kill_time;  /* from the decision to kill to the exec reaped */
    uint64_t ooms;          /* the kernel's OOM kills in the sandbox */
    uint64_t limits[SG_CTR_LIMIT_N];
    uint64_t expiries[SG_CTR_EXPIRY_N];
    sg_ctr_hist ckpt_time;  /* a checkpoint's time */
    /* gauges (not folded by a retire) */
    uint64_t state;         /* sg_ctr_state */
    uint64_t spool_events;  /* events spooled and not yet acknowledged */
    uint64_t spool_bytes;   /* bytes of the spool's segments that hold them */
} sg_counters;

/* The upper bounds of every histogram's buckets, in seconds. */
extern const double sg_counters_bounds[SG_COUNTERS_BUCKETS];
extern const char *const sg_ctr_exec_names[SG_CTR_EXEC_N];
extern const char *const sg_ctr_kill_names[SG_CTR_KILL_N];
extern const char *const sg_ctr_limit_names[SG_CTR_LIMIT_N];
extern const char *const sg_ctr_expiry_names[SG_CTR_EXPIRY_N];
extern const char *const sg_ctr_state_names[SG_CTR_STATE_N];

void sg_ctr_observe(sg_ctr_hist *h, uint64_t ns);
/* The kill cause's counter for a cause name of sv_exec_mark_killed. */
sg_ctr_kill sg_ctr_kill_of(const char *cause);

/* The file's text into buf (at least SG_COUNTERS_FILE_MAX); its length. */
size_t sg_counters_format(const sg_counters *c, char *buf, size_t size);
/* Parses a file's text (len bytes); -1 when it is not one. */
int sg_counters_parse(const char *text, size_t len, sg_counters *out);
/* Adds the counters (not the gauges) of b to a. */
void sg_counters_add(sg_counters *a, const sg_counters *b);

/* Sandbox id's file: save (atomic: a new file renamed over it; the
 * tests' way to make one), load (1 loaded, 0 none, -1 bad). */
int sg_counters_save(const char *id, const sg_counters *c, sg_err *err);
/* The supervisor's way: the file opened (made) once at its start, then
 * written in place (fixed-width numbers: the same length each time), so
 * that no file is ever made in the sandbox's directory while it lives (an
 * `rm -rf` of the state directory meets no new name). A read torn by a
 * write fails the file's sum and is read again. */
int sg_counters_open(const char *id, sg_err *err);
int sg_counters_write(int fd, const sg_counters *c, sg_err *err);
int sg_counters_load(const char *id, sg_counters *out);
/* Folds sandbox id's file into <state>/host/retired and removes it, under
 * the lock. Called just before a sandbox's state directory is removed; a
 * sandbox without a file (or a bad one) adds nothing. */
int sg_counters_retire(const char *id, sg_err *err);

/* The host's figures: a scan of the state directory. */
typedef struct sg_host_counters {
    sg_counters total;              /* retired + every sandbox's (its gauges summed) */
    uint64_t states[SG_CTR_STATE_N];
    uint64_t sandboxes;             /* sandboxes with a state directory */
    uint64_t bad_files;             /* counters files skipped (too long, malformed) */
    uint64_t undelivered;           /* spools of destroyed sandboxes kept for flush */
} sg_host_counters;
/* What one scan keeps for the next (the daemon's, between scrapes): each
 * sandbox's file as last read, by its identity (inode, size, mtime; a
 * file written less than a second before it was read is read again, since
 * a write in place may keep size and mtime), and its supervisor's pid as
 * last proven by its lock. A scan then costs a stat and a kill(pid, 0) a sandbox
 * whose file did not change, and the lock is looked at again every
 * SG_COUNTERS_PROOF_S. NULL: a scan that reads everything. */
#define SG_COUNTERS_PROOF_S 60
typedef struct sg_counters_cache sg_counters_cache;
sg_counters_cache *sg_counters_cache_new(void);
void sg_counters_cache_free(sg_counters_cache *cc);
int sg_counters_scan(sg_counters_cache *cc, sg_host_counters *out, sg_err *err);

#endif

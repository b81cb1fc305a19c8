/* limits: every bound a user or a peer can make us allocate against,
 * named in one place. */
#ifndef SG_BASE_BOUNDS_H
#define SG_BASE_BOUNDS_H

#define SG_NAME_MAX 128                 /* learner / task id length */
#define SG_ID_LEN 12                    /* sandbox id: hex chars */
#define SG_MAX_SANDBOXES 1024           /* live sandboxes per state dir */
#define SG_POOL_LEARNER "sandglass-pool" /* the learner of a pooled spare (cli/pool.c) */
#define SG_POOL_MAX 64                  /* spares kept ready at most */
#define SG_CTL_MSG_MAX (64 * 1024)      /* one control-socket message */
#define SG_EXEC_MAX_ARGS 4096           /* argv entries of one exec */
#define SG_EXEC_MAX_ENV 1024            /* --env entries of one exec */
#define SG_OUTPUT_CAPTURE_MAX (64 * 1024) /* tail of stdout/stderr kept per event */
#define SG_DEFAULT_OUTPUT_LIMIT (64ull * 1024 * 1024) /* bytes of output per exec */
#define SG_DEFAULT_MEMORY (512ull * 1024 * 1024)
#define SG_DEFAULT_PIDS 256
/* CPU per sandbox, in cores, when --cpus is not given: one core's worth of
 * time (cpu.max / the CFS quota), so that a fork bomb or a runaway build
 * in one sandbox leaves the rest of the host responsive on any machine
 * with two cores or more. Capped at the host's online CPUs. */
#define SG_DEFAULT_CPUS 1.0
/* The supervisor's own cgroup, beside its sandbox's (sandbox/cgroup.h):
 * what it may spend on one sandbox's behalf. One core is all one loop can
 * use (so the quota never throttles it); memory covers the watcher's tree
 * at its file limit and its text cache. */
#define SG_SUPERVISOR_MEMORY (256ull * 1024 * 1024)
#define SG_SUPERVISOR_CPUS 1.0
#define SG_DEFAULT_TIMEOUT_S 600.0      /* wall time per exec */
#define SG_EXPIRY_WARNING_DEFAULT_S 60.0 /* a session's end is told this long before (create --expiry-warning) */
#define SG_INGEST_RETRY_MIN_MS 100   /* a failed commit is retried after this... */
#define SG_INGEST_RETRY_MAX_MS 5000  /* ...doubling up to this */
#define SG_FRAME_MAX (1024 * 1024)      /* one WebSocket message at the ingest */
#define SG_DIFF_MAX_BYTES (64 * 1024)   /* files larger get no diff */
#define SG_WATCH_CACHE_MAX (8ull * 1024 * 1024) /* text kept for diffs, all files (the supervisor's RSS) */
#define SG_WATCH_MAX_FILES 500000     /* files tracked per workspace */
#define SG_WATCH_MAX_DIRS 100000      /* directories watched per workspace */
#define SG_WATCH_HASH_MAX (32ull * 1024 * 1024) /* larger files get no sha256 (the supervisor reads them: as SG_CKPT_FILE_MAX) */
/* The watcher's reads of a workspace's files (to hash and diff them), per
 * sandbox: a token bucket of bytes (a learner rewriting big files byte by
 * byte cannot keep the supervisor re-hashing flat out), and a slice per
 * loop turn (the kill path and every timer run between slices). Past
 * them a dirty file waits; its change comes later, never lost. */
#define SG_WATCH_READ_RATE (64ull * 1024 * 1024)  /* bytes per second */
#define SG_WATCH_READ_BURST (64ull * 1024 * 1024) /* bucket size */
#define SG_WATCH_READ_SLICE (8ull * 1024 * 1024)  /* bytes per loop turn */
/* ... and about this much time per loop turn: files resolved per turn are
 * sized by what one cost lately (its read, hash, diff and event), at least
 * one. */
#define SG_WATCH_TURN_US 10000
#define SG_WATCH_FLUSH_US 1000000 /* ... and a flush (an exec's end) at most this long */
#define SG_WATCH_FILE_COST 4096   /* bytes of the bucket a file read costs at least */
/* Dirty files a turn passes over without taking them (open writers not
 * yet at their cap): past them the rest of the list waits for a turn. */
#define SG_WATCH_WALK_SKIP 4096
/* A full rescan after an inotify overflow waits at least this long after
 * the last one, and at least 4x the last one's duration (so a learner who
 * overflows the queue again and again gets at most ~20% of a core). */
#define SG_WATCH_RESCAN_MIN_MS 500
/* The rescan goes in slices of SG_WATCH_TURN_US, one a loop turn; the
 * clock is read every this many entries. */
#define SG_WATCH_RESCAN_CHECK 64
#define SG_SPOOL_RECORD_MAX (1024 * 1024) /* one spool record */
#define SG_CG_MAX_DEPTH 8               /* nested cgroups walked below a sandbox cgroup */
#define SG_ROOTFS_COPY_MAX (256 * 1024) /* /etc files copied into the root; larger are bound */
#define SG_ROOTFS_MAX_ENTRIES 1024      /* entries mirrored from one --rootfs dir (or its etc/) */
#define SG_ROOTFS_ROOT_SIZE (16ull * 1024 * 1024) /* the root tmpfs skeleton */
#define SG_ROOTFS_DEFAULT_TMP_SIZE (256ull * 1024 * 1024) /* /tmp when not given */
#define SG_ROOTFS_HOME_SIZE (64ull * 1024 * 1024) /* /home: the sandbox user's private HOME */
#define SG_ROOTFS_SHM_SIZE (64ull * 1024 * 1024) /* /dev/shm */

#define SG_CKPT_MAX_ENTRIES (4u * 1024 * 1024) /* workspace entries walked by one checkpoint */
#define SG_CKPT_MAX_DEPTH 256           /* directory nesting walked in a workspace */
#define SG_CKPT_LABEL_MAX 256           /* bytes of a checkpoint label */
#define SG_CKPT_CACHE_MAX (1024ull * 1024 * 1024) /* stat cache file read at open */

#define SG_PROC_EVENTS_MAX 1000        /* process events per window (an exec, or between two) */
#define SG_PROC_LIVE_MAX 1024          /* recorded programs alive at once, per sandbox */
#define SG_PROC_TRACK_MAX 65536        /* processes tracked per sandbox (also bounded by its pids limit) */
#define SG_PROC_ARGV_MAX 4096          /* bytes of one program's argv kept */
#define SG_PROC_ARGS_MAX 256           /* arguments of one program kept (a held execve's) */
#define SG_PROC_PATH_MAX 4096          /* bytes of a held execve's path kept */

/* A captured session's per-minute budgets (capture/budget.h), the
 * defaults of create's --max-events-per-min, --max-bytes-per-min and
 * --max-checkpoints-per-min: ten times and more above the busiest
 * session measured, a shell typed at as fast as its prompts came (an
 * editor's saves, make -j2, a test suite): 7,600 events, 1.3 MB and 138
 * checkpoints a minute (docs/SECURITY.md, "A learner's terminal output"). */
#define SG_BUDGET_EVENTS_DEFAULT 100000
#define SG_BUDGET_BYTES_DEFAULT (16ull * 1024 * 1024)
#define SG_BUDGET_CHECKPOINTS_DEFAULT 1500

/* create's --max-file-events: file_diff events of one exec (or of the time
 * between two); the rest of its changes are listed in `bulk` events. */
#define SG_FILE_EVENTS_DEFAULT 1000
#define SG_FILE_EVENTS_MAX 1000000

#define SG_MCP_MSG_MAX (16u * 1024 * 1024) /* one MCP message line from the client */
#define SG_MCP_FILE_MAX (4u * 1024 * 1024) /* write_file content; file edited by edit_file */
#define SG_MCP_COMMAND_MAX (32u * 1024)  /* run_bash command */
#define SG_MCP_OUTPUT_MAX (128u * 1024)  /* stdout, and stderr, of a call kept for its result */
#define SG_MCP_READ_MAX (256u * 1024)    /* text one read_file returns */
#define SG_MCP_MAX_CALLS 64              /* tool calls in flight at once */
#define SG_MCP_CAPTURE_ARG_MAX 4096      /* bytes of one string argument in the captured tool call */

#endif

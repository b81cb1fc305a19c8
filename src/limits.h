/* limits: every bound a user or a peer can make us allocate against,
 * named in one place. */
#ifndef SG_LIMITS_H
#define SG_LIMITS_H

#define SG_NAME_MAX 128                 /* learner / task id length */
#define SG_ID_LEN 12                    /* sandbox id: hex chars */
#define SG_MAX_SANDBOXES 1024           /* live sandboxes per state dir */
#define SG_CTL_MSG_MAX (64 * 1024)      /* one control-socket message */
#define SG_EXEC_MAX_ARGS 4096           /* argv entries of one exec */
#define SG_EXEC_MAX_ENV 1024            /* --env entries of one exec */
#define SG_OUTPUT_CAPTURE_MAX (64 * 1024) /* tail of stdout/stderr kept per event */
#define SG_DEFAULT_OUTPUT_LIMIT (64ull * 1024 * 1024) /* bytes of output per exec */
#define SG_DEFAULT_MEMORY (512ull * 1024 * 1024)
#define SG_DEFAULT_PIDS 256
#define SG_DEFAULT_TIMEOUT_S 600.0      /* wall time per exec */
#define SG_FRAME_MAX (1024 * 1024)      /* one WebSocket message at the ingest */
#define SG_DIFF_MAX_BYTES (64 * 1024)   /* files larger get no diff */
#define SG_SPOOL_RECORD_MAX (1024 * 1024) /* one spool record */

#endif

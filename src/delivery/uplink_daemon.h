/* uplink_daemon: the per-host uplink daemon, sandglass-uplink. One process streams
 * every captured sandbox's spool to its ingest (src/uplink.c, one
 * libwebsockets client each, on one libuv loop), so that libwebsockets,
 * libssl and libcrypto are mapped once per host instead of once per
 * supervisor (~2.3 MiB RSS each: libcrypto's relocations alone are 1.5).
 *
 * Nothing is lost when it dies: it holds no event. The supervisor owns the
 * spool (append, fdatasync, ack file, trimming); the daemon reads it with a
 * read-only view (sg_spool_open_reader) up to the seq the supervisor
 * reports synced, and passes each ack of the ingest back to the supervisor,
 * which persists it and trims. After a crash of the daemon the supervisor
 * starts another and says hello again; the uplink replays from the ingest's
 * ack, as after any reconnect.
 *
 * Files in the state directory: uplink.sock (SOCK_SEQPACKET, 0600 in a
 * 0700 directory), uplink.lock (flock: one daemon per state directory; it
 * holds the daemon's pid), uplink.log (the daemon's stderr).
 *
 * Wire: one JSON object per message.
 *   supervisor -> daemon
 *     {"op":"hello","v":1,"sandbox":ID,"url":URL,"spool":DIR,"synced":N,
 *      "secret_file":PATH,"secret_create":BOOL,"learner":L,"task":T}
 *         first message; the daemon makes the token (token.h) and starts
 *     {"op":"synced","seq":N}      more records are durable
 *   daemon -> supervisor
 *     {"ack":N}                    the ingest committed everything <= N
 *     {"event":"connected"|"disconnected"|"refused"|"error","code":C,
 *      "reason":R,"retry_ms":M}    the uplink's events (uplink.h)
 *     {"error":MSG}                the session cannot start; then EOF
 * Acks and syncs are cumulative: one that cannot be sent at once (a full
 * socket) is dropped, the next one covers it.
 *
 * The daemon exits after SG_UPLINK_DAEMON_IDLE_MS with no session
 * ($SANDGLASS_UPLINK_IDLE_MS overrides it; tests use short ones). */
#ifndef SG_UPLINK_DAEMON_H
#define SG_UPLINK_DAEMON_H

#include "base/err.h"

#define SG_UPLINK_DAEMON_IDLE_MS 30000
#define SG_UPLINK_DAEMON_MAX_SESSIONS 4096

/* Runs the daemon for the state directory (sg_state_dir) until it has been
 * idle long enough. Returns 0, 1 when another daemon holds the lock (not
 * an error: it serves), or -1 with err. */
int sg_uplink_daemon_serve(sg_err *err);

#endif

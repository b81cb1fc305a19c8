/* sv_checkpoint: the workspace's checkpoints (by the worker), their labels,
 * rollback. */
#ifndef SG_SV_CHECKPOINT_H
#define SG_SV_CHECKPOINT_H

#include "supervisor/sv_sup.h"

void sv_ckpt_used(sv_sup *s);
int sv_ckpt_unified(void *ud, const char *path, const char *old, size_t old_len,
                const char *new_, size_t new_len, sg_diff_result *out, sg_err *err);
void sv_ckpt_flush_labels(sv_sup *s);
void sv_ckpt_emit(sv_sup *s, const char *id, const char *label, const sg_checkpoint_stats *st,
                     double ms, bool reused, json_t **info);
const char *sv_ckpt_take_ex(sv_sup *s, const char *label, bool reuse, json_t **info);
const char *sv_ckpt_take(sv_sup *s, const char *label, json_t **info);
void sv_ckpt_exec(sv_sup *s, const char *label);
/* The same at a shell's prompt; quiet_unchanged: an unchanged workspace
 * records nothing (no label, no event). */
void sv_ckpt_prompt(sv_sup *s, const char *label, bool quiet_unchanged);
void sv_ckpt_rollback(sv_sup *s, sv_client *c, const sg_ctl_rollback_req *req);
int sv_ckpt_open(sv_sup *s, sg_err *err);
void sv_ckpt_timer_init(sv_sup *s);
void sv_ckpt_kill(sv_sup *s);
void sv_ckpt_reap(sv_sup *s);
void sv_ckpt_free(sv_sup *s);

/* Who acted, for the operator's events (rollback, checkpoint, abort,
 * resume, destroy; docs/EVENTS.md): c's peer on the control socket
 * (SO_PEERCRED: uid, its user name, pid; "via": whom it acts for, its
 * request's, when given), else {"cap": cap} when a cap fired, else
 * {"supervisor": why}. New reference. */
json_t *sv_actor(const sv_client *c, const char *cap, const char *why);
/* An operator's op under way (abort): sv_actor_current is c's actor
 * until sv_actor_end; otherwise sv_actor(NULL, cap, why). */
void sv_actor_begin(const sv_client *c);
/* The same for a requester known by its credentials (the kill switch's
 * thread answered it; via as above, "" none); NULL: none known. */
void sv_actor_begin_cred(const struct ucred *who, const char *via);
void sv_actor_end(void);
json_t *sv_actor_current(const char *cap, const char *why);
/* The newest checkpoint's full id, or JSON null. */
json_t *sv_last_checkpoint(const sv_sup *s);

/* Its ops' handlers (sv_dispatch.c's table): the decoded request (a handler
 * may take over its op's fields, zeroing them; the table frees the rest). */
void sv_ckpt_op_take(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);
void sv_ckpt_op_list(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);
void sv_ckpt_op_rollback(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in);

#endif

/* sv_sup: what every object of the supervisor uses: the sandbox's record
 * (its events), its end (a hook into supervisor.c) and the exec ids. */
#include "supervisor/sv_sup.h"

#include "base/log.h"
#include "supervisor/sv_metrics.h"

void sv_sup_emit(sv_sup *s, sg_event_kind kind, json_t *payload)
{
    if (s->cap) {
        sg_capture_emit(s->cap, kind, payload);
        sv_metrics_spooled(s);
    } else
        json_decref(payload);
}

void sv_sup_destroy(sv_sup *s, sv_client *c)
{
    s->hooks.destroy(s, c);
}

/* Ids are reserved by blocks: one small write per block of execs. */
#define EXEC_IDS_BLOCK 1024

/* Keeps v below the saved bound, saving a higher one first: an id is
 * used only once a takeover would number past it. */
static uint32_t ids_cover(sv_sup *s, uint32_t v)
{
    if (v < s->exec.ids_until)
        return v;
    sg_err err = {0};
    s->exec.ids_until = v + EXEC_IDS_BLOCK;
    if (sg_state_exec_ids_save(s->meta.id, s->exec.ids_until, &err) < 0)
        sg_log(SG_LOG_ERROR, "%s (a takeover may reuse the ids)", err.msg);
    return v;
}

uint32_t sv_sup_exec_id_new(sv_sup *s)
{
    return ids_cover(s, ++s->exec.next_id);
}

uint32_t sv_sup_exec_num_new(sv_sup *s)
{
    return ids_cover(s, ++s->exec.num);
}

void sv_sup_expire_in(sv_sup *s, double after_s, uv_timer_cb cb)
{
    if (!s->expire_init) {
        uv_timer_init(&s->loop, &s->expire_timer);
        s->expire_timer.data = s;
        s->expire_init = true;
    }
    uv_timer_stop(&s->expire_timer);
    if (after_s >= 0)
        uv_timer_start(&s->expire_timer, cb, (uint64_t)(after_s * 1000.0), 0);
}


/* sv_metrics: the supervisor's counters for the host's metrics (sv_metrics.h). */
#include "supervisor/sv_metrics.h"

#include <string.h>
#include <unistd.h>

#include "base/bounds.h"
#include "base/log.h"

#define BACKLOG_LOOK_MS 1000 /* the spool's backlog is at most this old in the file */
/* A change is written this long after it: execs back to back (a grader's
 * loop) cost one write per period, not one each, and none of them waits
 * for one (a scrape every 15 s never sees the difference). */
#define CHANGE_WRITE_MS 100

static void write_now(sv_sup *s)
{
    sv_metrics_state *m = &s->metrics;
    sg_capture_backlog(s->cap, &m->c.spool_events, &m->c.spool_bytes);
    if (memcmp(&m->c, &m->written, sizeof m->c) == 0)
        return;
    sg_err err = {0};
    if (m->fd < 0 || sg_counters_write(m->fd, &m->c, &err) < 0) {
        sg_log(SG_LOG_WARN, "the host's metrics miss this sandbox's counters: %s", err.msg);
        return;
    }
    m->written = m->c;
}

static void on_timer(uv_timer_t *t)
{
    sv_sup *s = t->data;
    write_now(s);
    /* Acks come without an event: look again while some are pending. */
    if (s->metrics.c.spool_events && !s->destroying)
        uv_timer_start(&s->metrics.timer, on_timer, BACKLOG_LOOK_MS, 0);
}

/* A write within ms. */
static void arm(sv_sup *s, uint64_t ms)
{
    sv_metrics_state *m = &s->metrics;
    if (!m->on || s->destroying)
        return;
    if (!m->timer_init) {
        uv_timer_init(&s->loop, &m->timer);
        m->timer.data = s;
        m->timer_init = true;
    }
    /* An earlier write already due stays; a later one is brought forward. */
    if (uv_is_active((uv_handle_t *)&m->timer) && uv_timer_get_due_in(&m->timer) <= ms)
        return;
    uv_timer_start(&m->timer, on_timer, ms, 0);
}

void sv_metrics_start(sv_sup *s)
{
    sv_metrics_state *m = &s->metrics;
    if (sg_counters_load(s->meta.id, &m->c) != 1) /* a takeover goes on from its predecessor's */
        memset(&m->c, 0, sizeof m->c);
    sg_err err = {0};
    m->fd = sg_counters_open(s->meta.id, &err);
    if (m->fd < 0)
        sg_log(SG_LOG_WARN, "the host's metrics miss this sandbox's counters: %s", err.msg);
    m->c.state = s->life.expired ? SG_CTR_STATE_EXPIRED
                 : s->ks.aborted ? SG_CTR_STATE_ABORTED
                 : s->meta.learner && strcmp(s->meta.learner, SG_POOL_LEARNER) == 0 ? SG_CTR_STATE_SPARE
                                                                                     : SG_CTR_STATE_RUNNING;
    memset(&m->written, 0xff, sizeof m->written);
    m->on = true;
    write_now(s);
}

void sv_metrics_exec_end(sv_sup *s, sg_ctr_exec outcome, uint64_t wall_ns, const char *kill_cause,
                         uint64_t kill_ns, const bool limits[SG_CTR_LIMIT_N])
{
    sg_counters *c = &s->metrics.c;
    c->execs[outcome]++;
    if (outcome != SG_CTR_EXEC_ERROR)
        sg_ctr_observe(&c->exec_time, wall_ns);
    if (kill_cause && *kill_cause) {
        c->kills[sg_ctr_kill_of(kill_cause)]++;
        if (sg_ctr_kill_of(kill_cause) != SG_CTR_KILL_MEMORY) /* the kernel's: no decision of ours to time */
            sg_ctr_observe(&c->kill_time, kill_ns);
    }
    for (int i = 0; i < SG_CTR_LIMIT_N; i++)
        c->limits[i] += limits[i];
    arm(s, CHANGE_WRITE_MS);
}

void sv_metrics_oom_seen(sv_sup *s, uint64_t oom_kills)
{
    if (oom_kills <= s->exec.oom_seen)
        return;
    s->metrics.c.ooms += oom_kills - s->exec.oom_seen;
    s->metrics.c.limits[SG_CTR_LIMIT_MEMORY] += oom_kills - s->exec.oom_seen;
    s->exec.oom_seen = oom_kills;
    arm(s, CHANGE_WRITE_MS);
}

void sv_metrics_set_state(sv_sup *s, sg_ctr_state st)
{
    s->metrics.c.state = st;
    arm(s, CHANGE_WRITE_MS);
}

void sv_metrics_limit(sv_sup *s, sg_ctr_limit l)
{
    s->metrics.c.limits[l]++;
    arm(s, CHANGE_WRITE_MS);
}

void sv_metrics_expiry(sv_sup *s, sg_ctr_expiry e)
{
    s->metrics.c.expiries[e]++;
    s->metrics.c.state = SG_CTR_STATE_EXPIRED;
    arm(s, CHANGE_WRITE_MS);
}

void sv_metrics_checkpoint(sv_sup *s, double ms)
{
    sg_ctr_observe(&s->metrics.c.ckpt_time, ms > 0 ? (uint64_t)(ms * 1e6) : 0);
    arm(s, CHANGE_WRITE_MS);
}

void sv_metrics_spooled(sv_sup *s)
{
    arm(s, BACKLOG_LOOK_MS);
}

void sv_metrics_stop(sv_sup *s)
{
    if (!s->metrics.on)
        return;
    write_now(s);
    s->metrics.on = false;
    if (s->metrics.fd >= 0)
        close(s->metrics.fd);
    s->metrics.fd = -1;
}

/* sv_lifecycle: the session's idle timeout and time to live (sv_lifecycle.h). */
#include "supervisor/sv_lifecycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_killswitch.h"
#include "supervisor/sv_metrics.h"
#include "supervisor/sv_sup.h"

/* The record's created time (RFC 3339, UTC: sg_now_iso8601's form) as unix
 * seconds; 0 when it does not parse. */
static double created_wall(const sg_sandbox_meta *m)
{
    struct tm tm = {0};
    const char *rest = strptime(m->created, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        return 0;
    double frac = *rest == '.' ? strtod(rest, NULL) : 0;
    return (double)timegm(&tm) + frac;
}

static uint64_t secs_ns(double s)
{
    return s > 0 ? (uint64_t)(s * 1e9) : 0;
}

/* The next deadline (monotonic), why ("idle" or "ttl") and its limit;
 * 0 when there is none. */
static uint64_t life_deadline(const sv_sup *s, const char **why, double *limit)
{
    const sv_life_state *L = &s->life;
    uint64_t d = 0;
    if (s->meta.idle_timeout_s > 0) {
        d = L->last_ns + secs_ns(s->meta.idle_timeout_s);
        *why = "idle";
        *limit = s->meta.idle_timeout_s;
    }
    if (L->ttl_ns && (!d || L->ttl_ns <= d)) {
        d = L->ttl_ns;
        *why = "ttl";
        *limit = s->meta.ttl_s;
    }
    return d;
}

/* expiry.json, for `ls`: rewritten when the deadline moved by more than a
 * second (typing moves an idle deadline with the clock: at most once a
 * second then). */
static void life_save(sv_sup *s, uint64_t d, const char *why, uint64_t now)
{
    sv_life_state *L = &s->life;
    double at = sg_now_wall() + ((double)d - (double)now) / 1e9;
    if (at - L->saved_at <= 1.0 && L->saved_at - at <= 1.0)
        return;
    sg_err err = {0};
    if (sg_state_expiry_save(s->meta.id, at, why, &err) < 0)
        sg_log(SG_LOG_WARN, "%s (ls shows no expiry)", err.msg);
    L->saved_at = at;
}

/* A batch exec still running is activity; a terminal (a shell, exec -t)
 * is not: its input is. */
static bool batch_running(const sv_sup *s)
{
    for (size_t i = 0; i < s->exec.n; i++)
        if (!s->exec.list[i]->finished && !s->exec.list[i]->tty)
            return true;
    return false;
}

/* One line on every attached terminal, before the session ends. */
static void life_warn(sv_sup *s, const char *why, double limit, double left)
{
    char in[32], lim[32], msg[200];
    sg_fmt_duration(left, in, sizeof in);
    sg_fmt_duration(limit, lim, sizeof lim);
    if (strcmp(why, "idle") == 0)
        snprintf(msg, sizeof msg, "\r\n[sandglass] this session ends in %s: idle for %s\r\n", in, lim);
    else
        snprintf(msg, sizeof msg, "\r\n[sandglass] this session ends in %s: its time limit of %s\r\n", in, lim);
    size_t n = 0;
    for (size_t i = 0; i < s->exec.n; i++) {
        sv_exec *ex = s->exec.list[i];
        if (ex->tty && ex->cl && !ex->finished) {
            sv_client_send(ex->cl, SG_CTL_STDOUT, msg, strlen(msg));
            n++;
        }
    }
    sg_log(SG_LOG_INFO, "the session ends in %.1f s (%s, limit %g s): %zu terminal(s) warned", left, why, limit, n);
}

/* The keep after an expiry is over. */
static void on_keep_over(uv_timer_t *t)
{
    sv_sup *s = t->data;
    if (s->destroying)
        return;
    sg_log(SG_LOG_INFO, "the keep after the session expired is over: destroying the sandbox");
    sv_sup_destroy(s, NULL);
}

/* The session ends: its event, the abort (by: cap), then the destroy or
 * the keep. */
static void life_expire(sv_sup *s, const char *why, double limit)
{
    sv_life_state *L = &s->life;
    L->on = false;
    L->expired = true;
    uv_timer_stop(&L->timer);
    sg_log(SG_LOG_INFO, "the session expired (%s, limit %g s)", why, limit);
    sv_sup_emit(s, SG_EV_SANDBOX, json_pack("{s:s, s:s, s:f}", "state", "expired", "reason", why, "limit_s", limit));
    char reason[128];
    bool idle = strcmp(why, "idle") == 0;
    if (idle)
        snprintf(reason, sizeof reason, "the session expired: idle for %g s (--idle-timeout)", limit);
    else
        snprintf(reason, sizeof reason, "the session expired: its time to live of %g s passed (--ttl)", limit);
    sv_metrics_expiry(s, idle ? SG_CTR_EXPIRY_IDLE : SG_CTR_EXPIRY_TTL);
    json_decref(sv_killswitch_abort(s, "cap", reason));
    if (s->destroying)
        return;
    double keep = s->meta.keep_s;
    if (keep > 0) {
        sg_err err = {0};
        if (sg_state_expiry_save(s->meta.id, sg_now_wall() + keep, "keep", &err) < 0)
            sg_log(SG_LOG_WARN, "%s", err.msg);
        sv_sup_expire_in(s, keep, on_keep_over);
        return;
    }
    sv_sup_destroy(s, NULL);
}

/* The timer: at the warning or the deadline as last computed. Activity
 * since may have moved it: then it arms again for the new one. */
static void on_life_timer(uv_timer_t *t)
{
    sv_sup *s = t->data;
    sv_life_state *L = &s->life;
    if (!L->on || s->destroying)
        return;
    uint64_t now = sg_now_mono_ns();
    if (batch_running(s))
        L->last_ns = now;
    const char *why = NULL;
    double limit = 0;
    uint64_t d = life_deadline(s, &why, &limit);
    if (!d)
        return;
    life_save(s, d, why, now);
    if (now >= d && L->due) {
        life_expire(s, why, limit);
        return;
    }
    if (now >= d) {
        /* Once more after the loop's next poll (1 ms: a 0 would run in
         * this same pass of the timers): a supervisor kept off the CPU
         * runs its timers before it reads the input that waited. */
        L->due = true;
        uv_timer_start(&L->timer, on_life_timer, 1, 0);
        return;
    }
    L->due = false;
    /* the warning: at most half the limit before, once per deadline */
    uint64_t warn = secs_ns(s->meta.warning_s < limit / 2 ? s->meta.warning_s : limit / 2);
    if (warn && now + warn >= d && L->warned_ns != d) {
        life_warn(s, why, limit, (double)(d - now) / 1e9);
        L->warned_ns = d;
    }
    uint64_t next = !warn || L->warned_ns == d ? d : d - warn;
    uv_timer_start(&L->timer, on_life_timer, (next - now + 999999) / 1000000, 0);
}

void sv_life_arm(sv_sup *s)
{
    sv_life_state *L = &s->life;
    const sg_sandbox_meta *m = &s->meta;
    if (!L->timer_init) {
        uv_timer_init(&s->loop, &L->timer);
        L->timer.data = s;
        L->timer_init = true;
    }
    uv_timer_stop(&L->timer);
    L->on = !L->expired && (m->idle_timeout_s > 0 || m->ttl_s > 0);
    if (!L->on)
        return;
    uint64_t now = sg_now_mono_ns();
    double wall = sg_now_wall();
    /* A takeover goes on from what its predecessor recorded (a new
     * session has no record): an expired session's keep runs out... */
    double at;
    char why[16];
    bool rec = sg_state_expiry_load(m->id, &at, why, sizeof why) == 1;
    if (rec && strcmp(why, "keep") == 0) {
        L->on = false;
        L->expired = true;
        sv_sup_expire_in(s, at > wall ? at - wall : 0, on_keep_over);
        return;
    }
    /* ...and the idle clock resumes */
    L->last_ns = now;
    if (rec && m->idle_timeout_s > 0 && strcmp(why, "idle") == 0) {
        double idle_for = wall - (at - m->idle_timeout_s);
        uint64_t back = secs_ns(idle_for < m->idle_timeout_s ? idle_for : m->idle_timeout_s);
        if (back < now)
            L->last_ns = now - back;
    }
    /* and the ttl counts from the session's creation, whoever supervises */
    L->ttl_ns = 0;
    if (m->ttl_s > 0) {
        double created = created_wall(m);
        double left = (created > 0 ? created : wall) + m->ttl_s - wall;
        L->ttl_ns = now + secs_ns(left > 0 ? left : 1e-9);
    }
    L->warned_ns = 0;
    L->saved_at = 0;
    L->due = false;
    /* computed on the loop's first turn: never an abort before it serves */
    uv_timer_start(&L->timer, on_life_timer, 0, 0);
}

void sv_life_activity(sv_sup *s)
{
    sv_life_state *L = &s->life;
    if (!L->on)
        return;
    uint64_t now = sg_now_mono_ns();
    L->last_ns = now;
    const char *why = NULL;
    double limit = 0;
    uint64_t d = life_deadline(s, &why, &limit);
    if (d)
        life_save(s, d, why, now);
}

void sv_life_workspace_changed(void *sup_)
{
    sv_life_activity(sup_);
}

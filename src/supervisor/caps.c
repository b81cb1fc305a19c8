/* caps: a session's caps. See caps.h. */
#include "supervisor/caps.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

bool sg_caps_exec_reached(const sg_sandbox_meta *m, uint64_t execs, uint64_t calls, bool tool,
                          char *why, size_t n)
{
    if (m->max_execs && execs >= m->max_execs) {
        snprintf(why, n, "cap max_execs=%llu reached", (unsigned long long)m->max_execs);
        return true;
    }
    if (tool && m->max_calls && calls >= m->max_calls) {
        snprintf(why, n, "cap max_calls=%llu reached", (unsigned long long)m->max_calls);
        return true;
    }
    return false;
}

bool sg_caps_wall_reached(const sg_sandbox_meta *m, double wall_s, char *why, size_t n)
{
    if (m->max_wall_s <= 0 || wall_s < m->max_wall_s)
        return false;
    snprintf(why, n, "cap max_wall_s=%g reached", m->max_wall_s);
    return true;
}

bool sg_caps_cpu_reached(const sg_sandbox_meta *m, double cpu_s, char *why, size_t n)
{
    if (m->max_cpu_s <= 0 || cpu_s < m->max_cpu_s)
        return false;
    snprintf(why, n, "cap max_cpu_s=%g reached", m->max_cpu_s);
    return true;
}

bool sg_caps_timed(const sg_sandbox_meta *m)
{
    return m->max_wall_s > 0 || m->max_cpu_s > 0;
}

bool sg_caps_resumable(const char *by)
{
    return strcmp(by, "cap") != 0;
}

static json_t *cap_json(double limit, double value)
{
    return json_pack("{s:o, s:f}", "limit", limit > 0 ? json_real(limit) : json_null(), "value", value);
}

json_t *sg_caps_json(const sg_sandbox_meta *m, const sg_caps_usage *u)
{
    return json_pack("{s:o, s:o, s:o, s:o}",
        "max_wall_s", cap_json(m->max_wall_s, u->wall_s),
        "max_execs", cap_json((double)m->max_execs, (double)u->execs),
        "max_cpu_s", cap_json(m->max_cpu_s, u->cpu_s),
        "max_calls", cap_json((double)m->max_calls, (double)u->calls));
}

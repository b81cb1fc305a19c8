/* budget: a session's per-minute budgets. See budget.h. */
#include "capture/budget.h"

#include <string.h>

#define WINDOW_NS ((uint64_t)SG_BUDGET_WINDOW_S * 1000000000ull)

void sg_budget_init(sg_budget *b, uint64_t events, uint64_t bytes, uint64_t checkpoints)
{
    memset(b, 0, sizeof *b);
    b->limit[SG_BUDGET_EVENTS] = events;
    b->limit[SG_BUDGET_BYTES] = bytes;
    b->limit[SG_BUDGET_CHECKPOINTS] = checkpoints;
}

const char *sg_budget_name(sg_budget_kind k)
{
    static const char *names[] = {"events", "bytes", "checkpoints"};
    return k < SG_BUDGET_KINDS ? names[k] : "?";
}

bool sg_budget_roll(sg_budget *b, uint64_t now_ns, bool end, sg_budget_window *out)
{
    if (!end && b->window_ns && now_ns - b->window_ns < WINDOW_NS)
        return false;
    bool due = b->dropped_events || b->dropped_checkpoints;
    if (due && out) {
        memcpy(out->used, b->used, sizeof out->used);
        out->dropped_events = b->dropped_events;
        out->dropped_checkpoints = b->dropped_checkpoints;
        out->length_s = (double)(now_ns - b->window_ns) / 1e9;
    }
    memset(b->used, 0, sizeof b->used);
    memset(b->reached, 0, sizeof b->reached);
    b->dropped_events = b->dropped_checkpoints = 0;
    b->window_ns = now_ns ? now_ns : 1;
    return due;
}

static bool full(const sg_budget *b, sg_budget_kind k)
{
    return b->limit[k] && b->used[k] >= b->limit[k];
}

bool sg_budget_over(const sg_budget *b)
{
    return full(b, SG_BUDGET_EVENTS) || full(b, SG_BUDGET_BYTES);
}

void sg_budget_drop(sg_budget *b)
{
    b->dropped_events++;
}

sg_budget_kind sg_budget_stored(sg_budget *b, uint64_t bytes)
{
    b->used[SG_BUDGET_EVENTS]++;
    b->used[SG_BUDGET_BYTES] += bytes;
    for (sg_budget_kind k = SG_BUDGET_EVENTS; k <= SG_BUDGET_BYTES; k++)
        if (full(b, k) && !b->reached[SG_BUDGET_EVENTS] && !b->reached[SG_BUDGET_BYTES]) {
            b->reached[k] = true;
            return k;
        }
    return SG_BUDGET_KINDS;
}

bool sg_budget_checkpoint(sg_budget *b, bool *first)
{
    *first = false;
    if (!full(b, SG_BUDGET_CHECKPOINTS)) {
        b->used[SG_BUDGET_CHECKPOINTS]++;
        return true;
    }
    b->dropped_checkpoints++;
    *first = !b->reached[SG_BUDGET_CHECKPOINTS];
    b->reached[SG_BUDGET_CHECKPOINTS] = true;
    return false;
}

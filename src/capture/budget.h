/* budget: a captured session's per-minute budgets (sans-I/O): events and
 * payload bytes stored, and automatic checkpoints, each counted in a fixed
 * window of SG_BUDGET_WINDOW_S seconds that opens with the first event
 * after the last one closed. The limits are the operator's (create's
 * --max-events-per-min, --max-bytes-per-min, --max-checkpoints-per-min,
 * kept in the sandbox record); 0 is none.
 *
 * Past a budget, the rest of the window's droppable events are counted,
 * not stored (capture.c says which kinds are never dropped), and the
 * session records one `limit` {what: "budget"} as the budget is reached
 * and, if anything was dropped, one summing the window up when it closes:
 * a learner's terminal output (forged command marks, a write loop) costs
 * the host at most a budget a minute, whatever the per-command caps. */
#ifndef SG_BUDGET_H
#define SG_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "base/bounds.h" /* the defaults: SG_BUDGET_*_DEFAULT */

#define SG_BUDGET_WINDOW_S 60

typedef enum sg_budget_kind {
    SG_BUDGET_EVENTS = 0,
    SG_BUDGET_BYTES,
    SG_BUDGET_CHECKPOINTS,
    SG_BUDGET_KINDS
} sg_budget_kind;

typedef struct sg_budget {
    uint64_t limit[SG_BUDGET_KINDS]; /* 0: none */
    uint64_t window_ns;              /* when the window opened (monotonic); 0: none open */
    uint64_t used[SG_BUDGET_KINDS];  /* stored (taken) in this window */
    uint64_t dropped_events, dropped_checkpoints;
    bool reached[SG_BUDGET_KINDS];   /* reported in this window */
} sg_budget;

/* What a closed window was: its figures, when anything was dropped. */
typedef struct sg_budget_window {
    uint64_t used[SG_BUDGET_KINDS];
    uint64_t dropped_events, dropped_checkpoints;
    double length_s;
} sg_budget_window;

void sg_budget_init(sg_budget *b, uint64_t events, uint64_t bytes, uint64_t checkpoints);
const char *sg_budget_name(sg_budget_kind k);

/* Closes the window when SG_BUDGET_WINDOW_S passed since it opened, or
 * now when `end` (the session ends), and opens the next. True, with its
 * figures in *out, when the closed window dropped anything: its summary is
 * due. */
bool sg_budget_roll(sg_budget *b, uint64_t now_ns, bool end, sg_budget_window *out);

/* Whether the events budget or the bytes budget is reached in this
 * window: droppable events are then dropped (counted with
 * sg_budget_drop). */
bool sg_budget_over(const sg_budget *b);
void sg_budget_drop(sg_budget *b);

/* An event of `bytes` was stored: counted. Returns the budget this event
 * reached, or SG_BUDGET_KINDS for none: once per window for events and
 * bytes together (both drop the same events: one report says so). */
sg_budget_kind sg_budget_stored(sg_budget *b, uint64_t bytes);

/* An automatic checkpoint is wanted: true when the window has room (it
 * is counted); false when not (counted as dropped; *first is set the
 * first time in the window: the limit event is due). */
bool sg_budget_checkpoint(sg_budget *b, bool *first);

#endif

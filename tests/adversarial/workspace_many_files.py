#!/usr/bin/env python3
"""Attack: one exec makes more files than anyone reads (200k files gave
200k events). Now at most SG_CAPTURE_DIFFS_MAX (1000) file_diff events per
exec, and one `limit` event sums up the rest."""
from __future__ import annotations

from workspace_common import SLOW, events, new_env, sh, tap, wait_for

env = new_env()
try:
    sid = env.create_captured()
    p = sh(env, sid, "cd /workspace && i=0; while [ $i -lt 1300 ]; do : > f$i; i=$((i+1)); done")
    tap.eq(p.returncode, 0, "the learner makes 1300 files in one exec")
    # An exec's end reports its changes for SG_WATCH_FLUSH_US (1 s) at
    # most, the rest right after, in the loop's turns: on a slow host the
    # count is reached a little after the result, so it is waited for.
    def lim_events() -> list:
        return [e for e in events(env, sid, "limit") if e.get("what") == "file_diff"]
    wait_for(lambda: len(events(env, sid, "file_diff")) >= 1000 and lim_events(), SLOW)
    diffs = events(env, sid, "file_diff")
    lim = lim_events()
    tap.eq(len(diffs), 1000, "1000 file_diff events")
    tap.ok(len(lim) == 1 and lim[0].get("not_reported") == 300 and lim[0].get("limit") == 1000,
           "and one limit event for the other 300", repr(lim))
    sh(env, sid, "echo one > /workspace/next")
    wait_for(lambda: len(events(env, sid, "file_diff")) >= 1001, SLOW)
    tap.eq(len(events(env, sid, "file_diff")), 1001, "the next exec's changes are reported again")
    tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n", "the sandbox works")
finally:
    env.cleanup()
tap.done()

#!/usr/bin/env python3
"""Attack: directories nested 300 deep. Every checkpoint used to fail (a
line in supervisor.log only) and rollback failed with "directories nested
deeper than 256". Now a directory at SG_CKPT_MAX_DEPTH is recorded without
its contents (the checkpoint event says so), and a rollback to a checkpoint
from before the attack removes the whole tree."""
from __future__ import annotations

import os

from workspace_common import SLOW, deep_py, deep_script, events, new_env, sh, tap

env = new_env()
try:
    sid = env.create_captured()
    ws = env.workspace(sid)

    @tap.case("300 nested directories")
    def _deep():
        sh(env, sid, "echo before > /workspace/a")
        p = sh(env, sid, deep_script(300))
        tap.eq(p.returncode, 0, "the learner makes 300 nested directories")
        p = env.run("exec", sid, "--", "true", timeout=SLOW)
        tap.eq(p.returncode, 0, "the next exec runs")
        cks = events(env, sid, "checkpoint")
        last = cks[-1] if cks else {}
        tap.ok("error" not in last and last.get("id") and
               last.get("not_stored", {}).get("dirs_not_walked", 0) >= 1,
               "its checkpoint succeeds and says a directory's contents were not walked", repr(last))
        tap.ok(all("error" not in c for c in cks), "no checkpoint failed", repr(cks)[:800])
        before = [c for c in cks if c.get("label", "").startswith("before exec 2")]
        r = env.run("rollback", sid, "--to", before[0]["id"], "--yes", timeout=SLOW)
        tap.ok(r.returncode == 0, "a rollback to the checkpoint before the attack works",
               r.stderr.decode(errors="replace"))
        tap.eq(sorted(os.listdir(ws)), ["a"], "it removed the whole tree")

    @tap.case("abort --rollback")
    def _abort():
        sh(env, sid, deep_script(300))
        r = env.run("abort", sid, "--rollback", timeout=SLOW)
        tap.ok(r.returncode == 0, "abort --rollback works with the tree back", r.stderr.decode(errors="replace"))
        tap.eq(env.run("resume", sid, timeout=SLOW).returncode, 0, "resume")

    @tap.case("deeper than the watcher tracks")
    def _watch_depth():
        p = env.run("exec", sid, "--", *deep_py(1100, "w", "f", "x\n"), timeout=SLOW)
        tap.eq(p.returncode, 0, "the learner makes 1100 nested directories")
        lim = [e for e in events(env, sid, "limit") if e.get("what") == "watch_untracked"]
        tap.ok(len(lim) >= 1 and lim[-1].get("untracked", 0) >= 1,
               "the directories the watcher does not track are a limit event", repr(lim))
        r = env.run("exec", sid, "--", "rm", "-rf", "/workspace/w", timeout=SLOW)
        tap.eq(r.returncode, 0, "and the tree can be removed")

    tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n",
           "the sandbox still works")
finally:
    env.cleanup()
tap.done()

#!/usr/bin/env python3
"""Attack: a file at a path longer than PATH_MAX (40 directories of 120
characters). Its changes used to be invisible to the watcher (no file_diff),
and `destroy` printed "destroyed" but left the workspace, after which `gc`
failed with "Directory not empty". Now the change is reported and the tree
is removed (sg_rm_rf: openat-relative, no PATH_MAX)."""
from __future__ import annotations

import os

from workspace_common import SLOW, deep_py, events, new_env, tap, wait_for

NAME = "n" * 120
env = new_env()
try:
    sid = env.create_captured()
    ws = env.workspace(sid)
    p = env.run("exec", sid, "--", *deep_py(40, NAME, "leaf.txt", "one\n"), timeout=SLOW)
    tap.eq(p.returncode, 0, "the learner makes a file at a path of ~4.9 KB")
    diffs = [e for e in events(env, sid, "file_diff") if e.get("path", "").endswith("/leaf.txt")]
    tap.ok(len(diffs) == 1 and len(diffs[0]["path"]) > 4096 and diffs[0].get("change") == "created",
           "its creation is a file_diff", repr([len(d.get("path", "")) for d in diffs]))
    env.run("exec", sid, "--", *deep_py(40, NAME, "leaf.txt", "again\n", "a"), timeout=SLOW)
    diffs = [e for e in events(env, sid, "file_diff") if e.get("path", "").endswith("/leaf.txt")]
    tap.ok(len(diffs) == 2 and diffs[1].get("change") == "modified" and "+again" in diffs[1].get("diff", ""),
           "its change is a file_diff with a diff", repr([(d.get("change"), d.get("diff")) for d in diffs[1:]]))
    cks = events(env, sid, "checkpoint")
    tap.ok(cks and all("error" not in c for c in cks), "checkpoints keep working", repr(cks)[:600])
    r = env.destroy(sid)
    tap.ok(r.returncode == 0, "destroy succeeds", r.stderr.decode(errors="replace"))
    # destroy answers before a disk's release (the reclaimer's, after it)
    tap.ok(wait_for(lambda: not os.path.exists(ws), 60), "the workspace is gone")
    tap.ok(not os.path.exists(env.sbdir(sid)), "the sandbox's state directory is gone")
    g = env.run("gc", timeout=SLOW)
    tap.ok(g.returncode == 0, "gc has nothing left to fail on", g.stderr.decode(errors="replace"))
    sid2 = env.create_captured()
    tap.eq(env.run("exec", sid2, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n",
           "a new sandbox works")
finally:
    env.cleanup()
tap.done()

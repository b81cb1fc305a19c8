#!/usr/bin/env python3
"""Attack: many directories, to take the host's inotify watches (30k
directories took 30,307 of root's watches, a limit every sandbox and every
other inotify user of root shares). Now a sandbox takes at most its share
(SANDGLASS_WATCH_MAX_DIRS lowers it here, so the test needs few
directories); past it the watcher rescans at each exec's end, so changes in
the directories without a watch still come, and a `limit` event says so."""
from __future__ import annotations

from workspace_common import SLOW, events, new_env, sh, tap

BUDGET = 8
env = new_env(SANDGLASS_WATCH_MAX_DIRS=str(BUDGET))
try:
    sid = env.create_captured()
    p = sh(env, sid, "cd /workspace && for i in $(seq 40); do mkdir d$i && echo $i > d$i/f; done")
    tap.eq(p.returncode, 0, "the learner makes 40 directories")
    lim = [e for e in events(env, sid, "limit") if e.get("what") == "watches"]
    tap.ok(len(lim) == 1 and lim[0].get("limit") == BUDGET and lim[0].get("unwatched_dirs", 0) >= 1,
           "one limit event says the watches ran out", repr(lim))
    created = {e["path"] for e in events(env, sid, "file_diff") if e.get("change") == "created"}
    tap.eq(created, {f"d{i}/f" for i in range(1, 41)}, "every file made is reported")
    sh(env, sid, "for i in $(seq 40); do echo more >> /workspace/d$i/f; done")
    mod = {e["path"] for e in events(env, sid, "file_diff") if e.get("change") == "modified"}
    tap.eq(mod, {f"d{i}/f" for i in range(1, 41)}, "changes in directories without a watch are reported too")
    pid = int(open(env.sbdir(sid, "meta.json")).read().split('"supervisor_pid":')[1].split(",")[0])
    import os
    # The supervisor's own watches on the directories its record hangs
    # from (a removed state directory ends the sandbox) are fixed, three at
    # most, and are not the learner's to multiply: counted apart.
    own = {os.stat(d).st_ino for d in (os.path.join(env.state, "sb"), env.state, os.path.dirname(env.state))}
    n = mine = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith("inotify wd:"):
                    ino = int(line.split(" ino:")[1].split()[0], 16)
                    mine += ino in own
                    n += ino not in own
        except OSError:
            pass
    tap.ok(n <= BUDGET, "the supervisor holds no more workspace watches than its budget", f"{n} watches")
    tap.ok(mine <= 3, "and at most three of its own, on its record's directories", f"{mine} watches")
    tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n", "the sandbox works")
finally:
    env.cleanup()
tap.done()

#!/usr/bin/env python3
"""Never destroy what is not yours: `gc --orphan-cgroups` run with one state
directory used to remove the live sandboxes of every other state directory
on the host. Two state directories side by side: gc in one removes its own
orphan and leaves the other's sandbox running."""
from __future__ import annotations

import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, cgroup_dirs, cgroup_pids, pid_alive, tap, wait_for  # noqa: E402

a = Env()
b = Env()
try:
    other = b.create()
    mine = a.create()
    other_pids = cgroup_pids(other)
    tap.ok(len(other_pids) > 0, "the other state directory's sandbox has processes", repr(other_pids))

    # Lose the state of one of our own sandboxes: its supervisor dies and
    # its state directory goes, its init and cgroup stay (an orphan).
    meta = [sb for sb in a.ls() if sb["id"] == mine][0]
    sup = int(meta["supervisor_pid"])
    os.kill(sup, signal.SIGKILL)
    tap.ok(wait_for(lambda: not pid_alive(sup), 60), "our supervisor is gone")
    shutil.rmtree(os.path.join(a.state, "sb", mine))
    tap.ok(len(cgroup_pids(mine)) > 0, "our orphan's cgroup still holds its init")

    p = a.run("gc", "--orphan-cgroups", timeout=120)
    out = p.stdout.decode() + p.stderr.decode()
    tap.eq(p.returncode, 0, "gc --orphan-cgroups succeeds")
    tap.ok(not any(os.path.isdir(d) for d in cgroup_dirs(mine)), "our orphan's cgroup is removed", out)
    tap.eq(cgroup_pids(mine), set(), "nothing of our orphan runs")
    tap.ok(other_pids <= cgroup_pids(other), "the other state directory's processes all still run",
           f"before {other_pids}, after {cgroup_pids(other)}\n{out}")
    tap.eq(b.exec(other, "echo", "alive").stdout, b"alive\n", "the other sandbox still works")
    tap.ok(f"belongs to the state directory {b.state}" in out or other not in out,
           "gc says it left the other's cgroup alone (or never looked at it)", out)
finally:
    a.cleanup()
    b.cleanup()
tap.done()

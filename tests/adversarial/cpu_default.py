#!/usr/bin/env python3
"""A sandbox created without --cpus used to have no CPU limit: a fork bomb
took every core of the host until it was aborted. The default is now one
core's worth of CPU time (capped at the host's online CPUs), set on the
sandbox's cgroup; more CPUs than the host has is refused."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, tap  # noqa: E402


def quota_cores(sid: str) -> float | None:
    """The CPU limit of a sandbox's cgroup as the kernel holds it, in cores."""
    v2 = [f"/sys/fs/cgroup/sandglass/{sid}/cpu.max", f"/sys/fs/cgroup/unified/sandglass/{sid}/cpu.max"]
    for p in v2:
        if os.path.exists(p):
            q, period = open(p).read().split()
            return None if q == "max" else int(q) / int(period)
    d = f"/sys/fs/cgroup/cpu/sandglass/{sid}"
    if os.path.exists(f"{d}/cpu.cfs_quota_us"):
        q = int(open(f"{d}/cpu.cfs_quota_us").read())
        period = int(open(f"{d}/cpu.cfs_period_us").read())
        return None if q < 0 else q / period
    return None


env = Env()
try:
    online = os.sysconf("SC_NPROCESSORS_ONLN")
    want = min(1.0, float(online))
    p = env.run("create", "--learner", "t", "--json", check=True)
    info = json.loads(p.stdout)
    sid = info["id"]
    tap.eq(info["limits"]["cpus"], want, "create --json shows the default CPU limit")
    got = quota_cores(sid)
    tap.ok(got is not None and abs(got - want) < 0.01, "the sandbox's cgroup holds that limit",
           f"quota {got} cores, want {want}")
    p = env.run("create", "--learner", "t", "--cpus", str(online + 1))
    tap.ok(p.returncode != 0 and b"online CPU" in p.stderr,
           "more CPUs than the host has is refused, naming the host's count", p.stderr.decode())
finally:
    env.cleanup()
tap.done()

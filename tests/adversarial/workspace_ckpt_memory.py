#!/usr/bin/env python3
"""Issue 22: the checkpoint worker's memory was under the learner's memory
limit (it ran in the leaf <id>/ckpt): a learner holding its memory limit
left the worker no room, so a checkpoint either failed or made the OOM
killer take one of the learner's own processes.

Now the worker runs in <id>:supervisor/ckpt (sandbox/cgroup.h,
sg_cgroup_join_fds): the supervisor's account for that sandbox, under the
supervisor's own limits. With the learner at its limit (a process holding
all but 8 MiB of it), checkpoints succeed, the learner's process lives and
its cgroup counts no OOM kill; the worker's memory cgroup is the
supervisor's leaf, not the learner's; abort still kills a worker there
(the kill switch reaches it), and destroy removes the supervisor's cgroup
with its leaf."""
from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASS, Env, ckpt_worker, pid_alive, tap, wait_for  # noqa: E402

MiB = 1 << 20
LIMIT = 128 * MiB
HOG = r"""
import os, sys, time
# the interpreter's own resident pages count against the limit too: hold
# all but 8 MiB in total, not 8 MiB less on top of them
want = int(sys.argv[1]) - int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
chunks = []
while sum(len(c) for c in chunks) < want:
    chunks.append(bytearray(b'\1') * (1 << 20))
print('held', flush=True)
time.sleep(3600)
"""


def cgroup_paths(pid: int) -> dict[str, str]:
    """controller (or "" for v2) -> cgroup path of pid."""
    out = {}
    for line in open(f"/proc/{pid}/cgroup"):
        _n, ctrls, path = line.rstrip("\n").split(":", 2)
        for c in (ctrls.split(",") if ctrls else [""]):
            out[c] = path
    return out


def memory_path(pid: int) -> str:
    p = cgroup_paths(pid)
    return p.get("memory", p.get("", ""))


def oom_kills(sid: str) -> int:
    """OOM kills counted in the learner's memory cgroup (v1 or v2)."""
    for f, key in (("/sys/fs/cgroup/memory/sandglass/%s/memory.oom_control", "oom_kill"),
                   ("/sys/fs/cgroup/sandglass/%s/memory.events", "oom_kill")):
        try:
            for line in open(f % sid):
                k, v = line.split()
                if k == key:
                    return int(v)
        except OSError:
            continue
    return -1


env = Env()
env.env["SANDGLASS_CKPT_IDLE_MS"] = "600000"  # the worker stays up between checkpoints
hog = None
try:
    sid = env.create("--memory", str(LIMIT))
    rec = next(sb for sb in env.ls() if sb["id"] == sid)
    sup = rec["supervisor_pid"]
    # synced: the files' pages are then clean, reclaimable when the hog
    # below takes the learner to its limit (dirty ones wait for the loop
    # device's bounded writeback: an OOM of the learner that is not the
    # worker's doing)
    p = env.sh(sid, "mkdir -p /workspace/d && for i in $(seq 1 200); do head -c 65536 /dev/urandom "
                    "> /workspace/d/f$i; done && sync /workspace/d/*")
    tap.eq(p.returncode, 0, "the learner writes 200 files")
    kills0 = oom_kills(sid)
    tap.ok(kills0 >= 0, "the learner's cgroup counts its OOM kills", str(kills0))

    hog = subprocess.Popen([SANDGLASS, "exec", sid, "--", "python3", "-c", HOG, str(LIMIT - 8 * MiB)],
                           env=env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = hog.stdout.readline()
    tap.eq(line.strip(), b"held", "the learner holds all but 8 MiB of its memory limit")

    results = []
    ws = rec["workspace"]  # changed from the host: no exec (its ready child) in the learner's cgroup meanwhile
    for k in range(3):
        with open(os.path.join(ws, "d", "round"), "w") as f:
            f.write(f"round {k}\n")
        r = env.run("checkpoint", sid, "--label", f"at-limit-{k}", "--json", timeout=300)
        results.append((r.returncode, r.stderr.decode(errors="replace")[-300:]))
    tap.ok(all(rc == 0 for rc, _ in results), "three checkpoints succeed with the learner at its limit",
           repr(results))
    tap.ok(hog.poll() is None, "the learner's process lives")
    tap.eq(oom_kills(sid), kills0, "the learner's cgroup counts no OOM kill")

    w = ckpt_worker(sup)
    tap.ok(w > 0, "the checkpoint worker runs", str(w))
    mp = memory_path(w) if w else ""
    tap.ok(mp.endswith(f"/sandglass/{sid}:supervisor/ckpt"),
           "its memory is charged to the supervisor's leaf, not the learner's", mp)
    tap.ok(not any(v.startswith(f"/sandglass/{sid}/") or v == f"/sandglass/{sid}" for v in cgroup_paths(w).values())
           if w else False, "it is in none of the learner's cgroups", repr(cgroup_paths(w)) if w else "")

    # The kill switch reaches it where it lives now: abort kills the worker.
    p = env.run("abort", sid, timeout=120)
    tap.ok(p.returncode == 0, "abort", p.stderr.decode(errors="replace"))
    tap.ok(wait_for(lambda: not pid_alive(w), 30), "abort killed the checkpoint worker")
    hog.wait(timeout=60)
    r = env.run("checkpoint", sid, "--label", "after-abort", "--json", timeout=300)
    tap.ok(r.returncode == 0, "a checkpoint after the abort (a new worker)", r.stderr.decode(errors="replace"))
    sv_dirs = [f"/sys/fs/cgroup/{h}/sandglass/{sid}:supervisor" for h in ("memory", "pids", "cpu")] + \
              [f"/sys/fs/cgroup/sandglass/{sid}:supervisor"]
    p = env.run("destroy", sid, timeout=300)
    tap.ok(p.returncode == 0, "destroy", p.stderr.decode(errors="replace"))
    tap.ok(wait_for(lambda: not any(os.path.exists(d) for d in sv_dirs), 30),
           "destroy removes the supervisor's cgroup and its worker's leaf",
           repr([d for d in sv_dirs if os.path.exists(d)]))
finally:
    if hog is not None and hog.poll() is None:
        hog.kill()
        hog.wait()
    env.cleanup()
tap.done()

#!/usr/bin/env python3
"""`sandglass ls` of 1,000 sandboxes (issue 26: under 100 ms).

A state directory of its own (under a temporary directory) is filled with
N sandbox records (<state>/sb/ID/meta.json as create writes them, a spool
segment each, 50 learners, 7 tasks) whose supervisor has not started yet
(supervisor_pid 0: `starting`), so that what is timed is ls's own work:
reading and parsing every record, its abort and uplink records, the
newest spool and recording times, and printing the table or the JSON. The
supervisors' answers (EXECS) are asked of every supervisor at once with one
bound for all (300 ms), so a host's live sandboxes add at most that.
Then, each run with stdout to /dev/null, runs interleaved, best and median
of R runs:
  - cat of every meta.json (the anchor: the bytes ls must read);
  - sandglass ls; ls --json; ls --task T (a filter).
Prints the times and ratios and writes bench/results/ls.json. Asserts
nothing.

    bench/bench_ls.py [--sandboxes N] [--runs R] [--build DIR] [--before DIR]

With --before, the same with another build's CLI, interleaved, and the
ratio of the two builds' times.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def fill(state: str, n: int) -> list[str]:
    rng = random.Random(26)
    paths = []
    for i in range(n):
        sid = "%012x" % rng.getrandbits(48)
        d = os.path.join(state, "sb", sid)
        os.makedirs(os.path.join(d, "spool"))
        m = {"id": sid, "learner": f"learner{i % 50}", "task": f"task{i % 7}", "workspace": f"/run/ws/{sid}",
             "rootfs": None, "own_workspace": True,
             "limits": {"memory": 536870912, "pids": 256, "cpus": 1.0, "timeout_s": 600.0, "output": 67108864,
                        "disk": 1073741824},
             "caps": {"max_wall_s": 0.0, "max_execs": 0, "max_cpu_s": 0.0, "max_calls": 0, "checkpoints": "exec"},
             "uid": 0x70000000 + i, "gid": 0x70000000 + i, "supervisor_pid": 0, "init_pid": 0,
             "created": "2026-12-04T17:28:53.173086+00:00", "ingest": "ws://127.0.0.1:7433",
             "secret_file": "/var/lib/sandglass/ingest/secret"}
        p = os.path.join(d, "meta.json")
        with open(p, "w") as f:
            json.dump(m, f)
        with open(os.path.join(d, "spool", "seg-00000000000000000000.log"), "wb") as f:
            f.write(b"x" * 100)
        paths.append(p)
    return paths


def once(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandboxes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--before", help="another build directory: its ls side by side")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench_ls.")
    try:
        state = os.path.join(root, "s")
        metas = fill(state, a.sandboxes)
        env = dict(os.environ, SANDGLASS_STATE_DIR=state)
        cli = os.path.join(a.build, "sandglass")
        cmds = {"cat meta.json": ["cat", *metas], "ls": [cli, "ls"], "ls --json": [cli, "ls", "--json"],
                "ls --task task3": [cli, "ls", "--task", "task3"]}
        if a.before:
            old = os.path.join(a.before, "sandglass")
            cmds["before: ls"] = [old, "ls"]
            cmds["before: ls --json"] = [old, "ls", "--json"]
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for c in cmds.values():  # warm the page cache
            once(c, env)
        for _ in range(a.runs):
            for k, c in cmds.items():
                times[k].append(once(c, env))
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        res = {"sandboxes": a.sandboxes, "runs": a.runs, "load": load, "ms": {}}
        anchor = min(times["cat meta.json"])
        print(f"{a.sandboxes} sandboxes, {a.runs} runs, load average {' '.join(load)}")
        for k, v in times.items():
            best, med = min(v) * 1000, statistics.median(v) * 1000
            res["ms"][k] = {"best": round(best, 2), "median": round(med, 2)}
            print(f"  {k:18} best {best:7.1f} ms  median {med:7.1f} ms  ({min(v) / anchor:.1f}x cat)")
        if a.before:
            for k in ("ls", "ls --json"):
                r = min(times[k]) / min(times["before: " + k])
                res[f"{k} / before"] = round(r, 3)
                print(f"  {k}: {r:.2f}x the build before (best of each)")
        out = os.path.join(HERE, "results", "ls.json")
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        print(f"written {out}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

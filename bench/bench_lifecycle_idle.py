#!/usr/bin/env python3
"""What the session lifecycle's timers cost an idle supervisor (issue 26:
"nothing measurable"): N sandboxes (default 200) in a state directory of
its own, every other one created with `--idle-timeout 1h --ttl 2h` (their
supervisors arm the lifecycle timer; sv_lifecycle.c), the others without
(no timer armed: the build without them, as far as an idle supervisor can
tell). Nothing runs in them; no ingest (no --task: nothing captured, so no
uplink traffic either). After a settle, each supervisor's CPU time
(utime + stime of /proc/PID/stat, every thread) is read at the start and
the end of S seconds (default 60), and the two groups compared: total and
per-supervisor CPU ms per minute, and the ratio with timers / without.
Prints the figures and writes bench/results/lifecycle_idle.json. Asserts
nothing.

    bench/bench_lifecycle_idle.py [--sandboxes N] [--seconds S] [--build DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    """utime + stime of the whole process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandboxes", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    cli = os.path.join(a.build, "sandglass")
    tmp = tempfile.mkdtemp(prefix="sg-bench-life-")
    env = dict(os.environ, SANDGLASS_STATE_DIR=os.path.join(tmp, "state"), SANDGLASS_CONFIG="none")
    groups: dict[str, list[int]] = {"timers": [], "none": []}
    ids: list[str] = []
    try:
        for i in range(a.sandboxes):
            timed = i % 2 == 0
            cmd = [cli, "create", "--learner", f"l{i}", "--disk", "64M"]  # 200 images fit any disk
            if timed:
                cmd += ["--idle-timeout", "1h", "--ttl", "2h"]
            sid = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.strip()
            ids.append(sid)
            with open(os.path.join(tmp, "state", "sb", sid, "meta.json")) as f:
                groups["timers" if timed else "none"].append(int(json.load(f)["supervisor_pid"]))
        time.sleep(a.settle)  # the creates' own work done
        start = {g: [cpu_ticks(p) for p in pids] for g, pids in groups.items()}
        load0 = os.getloadavg()
        time.sleep(a.seconds)
        end = {g: [cpu_ticks(p) for p in pids] for g, pids in groups.items()}
        res: dict = {"sandboxes": a.sandboxes, "seconds": a.seconds, "clk_tck": TICK,
                     "load": [load0, os.getloadavg()]}
        for g in groups:
            d = [(e - s) * 1000.0 / TICK for s, e in zip(start[g], end[g])]
            per_min = 60.0 / a.seconds
            res[g] = {"supervisors": len(d), "cpu_ms_total": round(sum(d), 1),
                      "cpu_ms_per_min_each_mean": round(statistics.mean(d) * per_min, 3),
                      "cpu_ms_max": round(max(d), 1), "with_any_tick": sum(1 for x in d if x > 0)}
            print(f"{g:7s}: {len(d)} idle supervisors, {res[g]['cpu_ms_total']} ms of CPU in {a.seconds:.0f} s "
                  f"({res[g]['cpu_ms_per_min_each_mean']} ms a minute each, max {res[g]['cpu_ms_max']} ms, "
                  f"{res[g]['with_any_tick']} used any)", flush=True)
        t, n = res["timers"]["cpu_ms_total"], res["none"]["cpu_ms_total"]
        res["ratio_timers_to_none"] = round(t / n, 3) if n else None
        print(f"with timers / without: {res['ratio_timers_to_none'] if n else 'n/a (no CPU used without)'}; "
              f"one clock tick is {1000 / TICK:.0f} ms", flush=True)
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "lifecycle_idle.json"), "w") as f:
            json.dump(res, f, indent=2)
    finally:
        for sid in ids:
            subprocess.run([cli, "destroy", sid], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

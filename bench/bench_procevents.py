#!/usr/bin/env python3
"""What process events (src/capture/procevents.c) cost, side by side in one
run: two captured sandboxes, one with them (default) and one without
(SANDGLASS_PROCEVENTS=0 for its supervisor).

  1. exec latency: `sandglass exec ID -- true`, with against without, by
     farm-bench --vs (pairs A B A B ..., median ratio)
  2. a host-wide fork storm: N fork+exec+exit of /bin/true on the host,
     outside every sandbox; the CPU time each supervisor spent meanwhile
     (utime + stime from /proc/PID/stat): every supervisor with process
     events hears every host exec and exit (the kernel filter drops
     threads), and costs a hash lookup for each.

usage: bench_procevents.py [--build DIR] [--storm N] [--runs N]
writes bench/results/procevents.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))


def cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--storm", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=40)
    a = ap.parse_args()
    os.environ.setdefault("SANDGLASS_BIN", os.path.join(a.build, "sandglass"))
    os.environ.setdefault("SANDGLASSD_BIN", os.path.join(a.build, "sandglassd"))
    from test_capture import CapEnv  # noqa: E402
    env = CapEnv()
    try:
        with_pe = env.create_captured()
        env.env["SANDGLASS_PROCEVENTS"] = "0"
        without = env.create_captured()
        env.env.pop("SANDGLASS_PROCEVENTS")
        sup = {k: json.load(open(env.sbdir(s, "meta.json")))["supervisor_pid"]
               for k, s in (("with", with_pe), ("without", without))}
        sg = os.environ["SANDGLASS_BIN"]
        fb = subprocess.run(["farm-bench", "-n", str(a.runs), "--warmup", "3", "--timeout", "600",
                             "--vs", f"{sg} exec {without} -- true", "--", sg, "exec", with_pe, "--", "true"],
                            env=env.env, capture_output=True, text=True)
        before = {k: cpu_s(p) for k, p in sup.items()}
        t0 = time.monotonic()
        subprocess.run(["sh", "-c", f"i=0; while [ $i -lt {a.storm} ]; do /bin/true; i=$((i+1)); done"],
                       check=True)
        storm_s = time.monotonic() - t0
        time.sleep(0.5)  # the last events are read
        after = {k: cpu_s(p) for k, p in sup.items()}
        res = {
            "exec_true_farm_bench": fb.stdout,
            "storm_execs": a.storm, "storm_wall_s": round(storm_s, 3),
            "supervisor_cpu_s_during_storm": {k: round(after[k] - before[k], 3) for k in sup},
            "per_host_exec_us": round((after["with"] - before["with"]) / a.storm * 1e6, 2),
        }
        for s in (with_pe, without):
            env.destroy(s)
    finally:
        env.cleanup()
    out = HERE / "results" / "procevents.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where the time of `sandglass exec ID -- true` goes: a timeline from the
scheduler's tracepoints, median per step over N execs.

    python3 bench/exec_timeline.py [--build build] [--runs 300]

Records sched:sched_process_exec/exit and sched:sched_waking on all CPUs
with `perf record` (Debian's linux-perf; root) while a shell runs the execs
back to back, then marks in each run: the CLI's exec, its request waking the
supervisor, the supervisor waking the ready child (the hand-off), `true`'s
execve and exit, its exit waking init (SIGCHLD), init's report waking the
supervisor, the CLI woken with the answer, the CLI's exit.

perf itself takes CPU on this 2-CPU machine, so the steps come out slower
and differently placed than without it: use it to see the steps, and
hyperfine (bench_sandbox.py) to judge a change. Never a test.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

STEPS = ["cli_exec", "req_sent", "handoff", "true_exec", "true_exit", "sigchld", "init_reply",
         "cli_woken", "cli_exit"]
# The ready child: sandglass-exec once it waits as that, else a copy of init.
READY_COMMS = ("sandglass-ready", "sandglass-init")
LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")


def record(sg: str, runs: int, data: str) -> None:
    sid = subprocess.run([sg, "create", "--learner", "timeline"], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        for _ in range(20):
            subprocess.run([sg, "exec", sid, "--", "true"], check=True)
        loop = f"i=0; while [ $i -lt {runs} ]; do {sg} exec {sid} -- true; i=$((i+1)); done"
        subprocess.run(["perf", "record", "-q", "-o", data, "-a",
                        "-e", "sched:sched_process_exec,sched:sched_process_exit,sched:sched_waking",
                        "--", "sh", "-c", loop], check=True, stderr=subprocess.DEVNULL)
    finally:
        subprocess.run([sg, "destroy", sid], capture_output=True)


def runs_of(data: str, sg: str) -> list[dict]:
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,cpu,time,event,trace"],
                         capture_output=True, text=True).stdout
    runs, cur = [], None
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, _cpu, t, ev, tr = m.groups()
        t, pid, ev = float(t) * 1e6, int(pid), ev.split(":")[-1]
        if ev == "sched_process_exec" and f"filename={sg}" in tr:
            cur = {"cli_exec": t, "cli": pid}
            continue
        if cur is None:
            continue

        def mark(k: str) -> None:
            cur.setdefault(k, t)
        if ev == "sched_waking":
            w = re.search(r"comm=(\S+) pid=(\d+)", tr)
            wcomm, wpid = w.group(1), int(w.group(2))
            if pid == cur["cli"] and wcomm == "sg-supervisor":
                mark("req_sent")
            if comm == "sg-supervisor" and wcomm in READY_COMMS and "true_exec" not in cur:
                mark("handoff")
            if "true_exit" in cur and wcomm == "sandglass-init":
                mark("sigchld")
            if "true_exit" in cur and comm == "sandglass-init" and wcomm == "sg-supervisor":
                mark("init_reply")
            if "true_exit" in cur and wpid == cur["cli"]:
                mark("cli_woken")
        elif ev == "sched_process_exec" and tr.startswith("filename=/usr/bin/true"):
            mark("true_exec")
        elif ev == "sched_process_exit" and comm == "true":
            mark("true_exit")
        elif ev == "sched_process_exit" and pid == cur["cli"]:
            cur["cli_exit"] = t
            runs.append(cur)
            cur = None
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--runs", type=int, default=300)
    a = ap.parse_args()
    sg = os.path.realpath(os.path.join(a.build, "sandglass"))
    if not os.access(sg, os.X_OK):
        print(f"exec_timeline: no sandglass binary at {sg} (build first, or --build DIR)", file=sys.stderr)
        return 2
    if subprocess.run(["which", "perf"], capture_output=True).returncode != 0:
        print("exec_timeline: needs perf (apt-get install linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        record(sg, a.runs, data)
        runs = runs_of(data, sg)
    print(f"{len(runs)} execs; median (mean) per step, µs")
    for prev, step in zip(STEPS, STEPS[1:]):
        d = [r[step] - r[prev] for r in runs if step in r and prev in r and r[step] >= r[prev]]
        if d:
            print(f"  {prev:>10} -> {step:<10} {statistics.median(d):7.1f} ({statistics.mean(d):7.1f})  n={len(d)}")
    for prev, step in (("true_exit", "cli_woken"), ("cli_exec", "true_exec")):
        d = [r[step] - r[prev] for r in runs if step in r and prev in r and r[step] >= r[prev]]
        if d:
            print(f"  {prev:>10} => {step:<10} {statistics.median(d):7.1f} ({statistics.mean(d):7.1f})  n={len(d)}")
    total = [r["cli_exit"] - r["cli_exec"] for r in runs]
    if total:
        print(f"  whole exec, CLI exec to CLI exit: {statistics.median(total):.1f} ({statistics.mean(total):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

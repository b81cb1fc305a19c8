#!/usr/bin/env python3
"""Two builds of sandglass side by side, in one run, as ratios: what a
change of the code costs (issue 13: the security work; issue 14: the
redesign). Every figure is measured for both builds in alternation, round by
round, so that the drift of this VM's speed (+-20% within minutes) falls on
both alike.

    python3 bench/compare_builds.py --before /path/to/old/build --after build

Figures (each build with its own state directory and sandboxes):
  exec         `sandglass exec ID -- true` into a live sandbox (hyperfine)
  cycle        create + exec true + destroy, cold (no pool)
  pool_create  `sandglass create` served from a pool of spares
  memory       supervisor RSS and PSS with 10 sandboxes alive, after an exec
  checkpoint   `sandglass checkpoint ID` after one file of 1000 changed
  file_diff    write -> file_diff row in the ingest's store (bench_latency.py)
  kill         abort of a fork bomb until the cgroup is empty, p50 (bench_kill.py)
  ingest       events/s through the real ingest into SQLite (bench_ingest, built
               with `ninja -C BUILD bench_ingest`): higher is better

Prints a table (before, after, after/before) and writes
bench/results/compare.json. Never a test: it asserts nothing.
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
sys.path.insert(0, HERE)
from bench_sandbox import hyperfine, pss_kb, rss_kb  # noqa: E402


class Build:
    """One build's binaries and a state directory of its own."""

    def __init__(self, name: str, path: str):
        self.name = name
        self.path = os.path.abspath(path)
        self.cli = os.path.join(self.path, "sandglass")
        self.state = tempfile.mkdtemp(prefix=f"sg-cmp-{name}-", dir="/tmp")
        self.env = dict(os.environ, SANDGLASS_STATE_DIR=self.state)
        self.made: list[str] = []

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([self.cli, *args], env=self.env, check=check,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def create(self, *args: str) -> str:
        sid = self.run("create", "--learner", "bench", *args).stdout.strip()
        self.made.append(sid)
        return sid

    def supervisor_pid(self, sid: str) -> int:
        for s in json.loads(self.run("ls", "--json").stdout):
            if s["id"] == sid:
                return int(s.get("supervisor_pid") or 0)
        return 0

    def cleanup(self) -> None:
        for sid in self.made:
            self.run("destroy", sid, check=False)
        self.run("pool", "0", check=False)
        shutil.rmtree(self.state, ignore_errors=True)


def median_ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 3)


def alternate(builds: list[Build], rounds: int, one) -> dict[str, list[float]]:
    """Calls one(build) -> seconds for each build in turn, rounds times."""
    out: dict[str, list[float]] = {b.name: [] for b in builds}
    for i in range(rounds):
        order = builds if i % 2 == 0 else list(reversed(builds))
        for b in order:
            out[b.name].append(one(b))
    return out


def bench_exec(builds: list[Build], runs: int) -> dict:
    cmds = {}
    for b in builds:
        sid = b.create()
        b.run("exec", sid, "--", "true")
        cmds[b.name] = f"env SANDGLASS_STATE_DIR={b.state} {b.cli} exec {sid} -- true"
    r = hyperfine(cmds, runs, rounds=6)
    return {b.name: {"median_ms": round(r[b.name]["median_ms"], 3),
                     "mean_ms": round(r[b.name]["mean_ms"], 3)} for b in builds}


def bench_cycle(builds: list[Build], rounds: int) -> dict:
    def one(b: Build) -> float:
        t0 = time.perf_counter()
        sid = b.run("create", "--learner", "bench").stdout.strip()
        b.run("exec", sid, "--", "true")
        b.run("destroy", sid)
        return time.perf_counter() - t0
    r = alternate(builds, rounds, one)
    return {n: {"median_ms": median_ms(v)} for n, v in r.items()}


def pool_full(b: Build, size: int) -> bool:
    d = os.path.join(b.state, "pool")
    try:
        return len([f for f in os.listdir(d) if f != "size" and not f.startswith(".")]) >= size
    except OSError:
        return False


def bench_pool_create(builds: list[Build], rounds: int) -> dict:
    for b in builds:
        b.run("pool", "2")
    def one(b: Build) -> float:
        deadline = time.monotonic() + 60
        while not pool_full(b, 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.perf_counter()
        sid = b.run("create", "--learner", "bench").stdout.strip()
        dt = time.perf_counter() - t0
        b.run("destroy", sid)
        return dt
    r = alternate(builds, rounds, one)
    for b in builds:
        b.run("pool", "0", check=False)
    return {n: {"median_ms": median_ms(v)} for n, v in r.items()}


def bench_memory(builds: list[Build], n: int) -> dict:
    out = {}
    for b in builds:
        sids = [b.create() for _ in range(n)]
        for sid in sids:
            b.run("exec", sid, "--", "true")
        time.sleep(1)
        pids = [b.supervisor_pid(s) for s in sids]
        rss = [rss_kb(p) for p in pids if p]
        pss = [pss_kb(p) for p in pids if p]
        out[b.name] = {"supervisors": len(rss),
                       "rss_kib_median": statistics.median(rss) if rss else None,
                       "pss_kib_median": statistics.median(pss) if pss else None}
        for sid in sids:
            b.run("destroy", sid, check=False)
            b.made.remove(sid)
    return out


def bench_checkpoint(builds: list[Build], rounds: int) -> dict:
    sids = {}
    for b in builds:
        sid = b.create()
        b.run("exec", sid, "--", "sh", "-c",
              "mkdir -p /workspace/t && i=0; while [ $i -lt 1000 ]; do "
              "echo line $i > /workspace/t/f$i; i=$((i+1)); done")
        b.run("checkpoint", sid)
        sids[b.name] = sid
    counter = [0]
    def one(b: Build) -> float:
        counter[0] += 1
        sid = sids[b.name]
        b.run("exec", sid, "--", "sh", "-c", f"echo {counter[0]} >> /workspace/t/f7")
        t0 = time.perf_counter()
        b.run("checkpoint", sid)
        return time.perf_counter() - t0
    r = alternate(builds, rounds, one)
    return {n: {"median_ms": median_ms(v)} for n, v in r.items()}


def bench_script(builds: list[Build], script: str, args: list[str], rounds: int,
                 pick) -> dict:
    """Runs another bench script once per build and round, alternating; pick
    takes the figures from its JSON output."""
    out: dict[str, list] = {b.name: [] for b in builds}
    for i in range(rounds):
        order = builds if i % 2 == 0 else list(reversed(builds))
        for b in order:
            res = tempfile.mktemp(suffix=".json")
            p = subprocess.run([sys.executable, os.path.join(HERE, script), "--build", b.path,
                                "--out", res, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0 or not os.path.exists(res):
                print(f"  {script} failed for {b.name}:\n{p.stdout[-2000:]}", file=sys.stderr)
                continue
            with open(res) as f:
                out[b.name].append(pick(json.load(f)))
            os.unlink(res)
    return {n: {"median_ms": round(statistics.median(v), 3) if v else None, "rounds": v}
            for n, v in out.items()}


def bench_ingest(builds: list[Build], rounds: int, events: int = 50000) -> dict:
    """events/s of each build's bench_ingest against its own sandglassd."""
    out: dict[str, list[float]] = {b.name: [] for b in builds}
    for i in range(rounds):
        for b in (builds if i % 2 == 0 else list(reversed(builds))):
            exe = os.path.join(b.path, "bench_ingest")
            if not os.path.exists(exe):
                continue
            cwd = tempfile.mkdtemp(prefix="sg-cmp-ingest-")
            os.makedirs(os.path.join(cwd, "bench", "results"))
            p = subprocess.run([exe, os.path.join(b.path, "sandglassd"), str(events), "16"], cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=b.env)
            shutil.rmtree(cwd, ignore_errors=True)
            for line in p.stdout.splitlines():
                if line.startswith("ingest ") and "events/s" in line:
                    out[b.name].append(float(line.split("events/s")[0].split()[-1]))
    return {n: {"events_per_s": round(statistics.median(v)) if v else None, "rounds": v} for n, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="build directory of the old code")
    ap.add_argument("--after", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=600, help="exec runs per build")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of the slower figures")
    ap.add_argument("--only", default="", help="comma-separated figures to run")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
    a = ap.parse_args()
    builds = [Build("before", a.before), Build("after", a.after)]
    only = set(filter(None, a.only.split(",")))
    want = lambda k: not only or k in only  # noqa: E731
    res: dict = {"before": builds[0].path, "after": builds[1].path,
                 "machine": f"{os.cpu_count()} cpus", "figures": {}}
    try:
        if want("exec"):
            res["figures"]["exec"] = bench_exec(builds, a.runs)
        if want("cycle"):
            res["figures"]["cycle"] = bench_cycle(builds, a.rounds)
        if want("pool_create"):
            res["figures"]["pool_create"] = bench_pool_create(builds, a.rounds)
        if want("memory"):
            res["figures"]["memory"] = bench_memory(builds, 10)
        if want("checkpoint"):
            res["figures"]["checkpoint"] = bench_checkpoint(builds, a.rounds)
        if want("file_diff"):
            res["figures"]["file_diff_p50"] = bench_script(
                builds, "bench_latency.py", ["--samples", "50"], 3,
                lambda j: j["file_write_to_file_diff_row"]["ours"]["p50_ms"])
        if want("kill"):
            res["figures"]["kill"] = bench_script(
                builds, "bench_kill.py", ["--runs", "5"], 2,
                lambda j: j["ours"]["bomb"]["empty_ms"]["p50"])
        if want("ingest"):
            res["figures"]["ingest"] = bench_ingest(builds, 3)
    finally:
        for b in builds:
            b.cleanup()
    print(f"{'figure':<16} {'before':>12} {'after':>12} {'after/before':>13}")
    for k, v in res["figures"].items():
        for field in ("median_ms", "rss_kib_median", "pss_kib_median", "events_per_s"):
            x, y = v["before"].get(field), v["after"].get(field)
            if x is None or y is None:
                continue
            ratio = round(y / x, 3) if x else None
            v.setdefault("ratio_after_over_before", {})[field] = ratio
            print(f"{k + ' ' + field.split('_')[0]:<16} {x:>12} {y:>12} {ratio!s:>13}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"written {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

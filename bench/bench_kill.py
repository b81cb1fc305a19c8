#!/usr/bin/env python3
"""Kill latency: `sandglass abort` until the sandbox's cgroup holds no user
process, with 1 process, ~100 processes and a fork bomb running; side by side
in the same sandbox with the original's kill_in_flight (seed 000: `docker
exec CONTAINER pkill -INT python`, emulated as `sandglass exec ID -- pkill
-INT python`), as ratios. Writes bench/results/kill.json. Asserts nothing.

    python3 bench/bench_kill.py [--build build] [--runs 30] [--pids 256]

Per run, for ours:
  - proof.kill_ms: what the supervisor measured around its cgroup kill
    (the abort record's proof);
  - cmd_ms: wall time of the `sandglass abort --json` command;
  - empty_ms: from just before starting the abort command until this bench,
    polling the cgroup's cgroup.procs files itself, sees only the init left
    (and cgroup.events of every exec leaf says populated 0).
For the original's way: from just before starting the `pkill` exec until no
python process is left in the cgroup (or --orig-timeout), and what is left
running 200 ms later (processes that are not python survive SIGINT to
python: a `sleep` child, a setsid'd shell, the shell fork bomb...).
`sandglass resume` clears our abort between runs; leftovers of the
original's way are cleared with an (untimed) abort + resume.

Workloads, the same for both (every process runs as the sandbox user):
  one:  python3 sleeping
  many: python3 that forks 97 python children, starts one `sleep` and one
        setsid'd `sh -c 'sleep'` (101 processes)
  bomb: a python fork bomb (every child forks forever), bounded by --pids;
        (every python child keeps forking); the shell fork bomb of the
        kill-switch test (caught while it grows past half the limit) runs
        for ours only: it has no python process for the original to kill
"""
from __future__ import annotations

import argparse
import datetime
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
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from sgtest import comm  # noqa: E402

PY_ONE = "import time; time.sleep(1000)"
PY_MANY = r"""
import os, subprocess, time
subprocess.Popen(["sleep", "1000"])
subprocess.Popen(["setsid", "sh", "-c", "sleep 1000"])
for _ in range(97):
    if os.fork() == 0:
        time.sleep(1000)
        os._exit(0)
time.sleep(1000)
"""
PY_BOMB = r"""
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.001)
"""
SH_BOMB = "bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 1000"

WORKLOADS = {
    "one": (["python3", "-c", PY_ONE], 1),
    "many": (["python3", "-c", PY_MANY], 101),
    "bomb": (["python3", "-c", PY_BOMB], "full"),
    "sh_bomb": (["/bin/sh", "-c", SH_BOMB], "half"),
}


def pct(v: list[float], p: float) -> float:
    if not v:
        return float("nan")
    s = sorted(v)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(v: list[float]) -> dict:
    if not v:
        return {"n": 0, "p50": None, "p99": None, "max": None, "mean": None}
    return {"n": len(v), "p50": round(pct(v, 50), 3), "p99": round(pct(v, 99), 3),
            "max": round(max(v), 3) if v else None, "mean": round(statistics.fmean(v), 3) if v else None}


class Sandbox:
    def __init__(self, sg: str, env: dict, pids: int) -> None:
        self.sg, self.env = sg, env
        self.id = self.run("create", "--learner", "bench", "--pids", str(pids), "--memory", "2G",
                           "--timeout", "3600").stdout.decode().strip()
        with open(os.path.join(env["SANDGLASS_STATE_DIR"], "sb", self.id, "meta.json")) as f:
            self.init = json.load(f)["init_pid"]
        # the hierarchy that holds every process of the sandbox (v2 if any)
        cands = [os.path.join(b, "sandglass", self.id) for b in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup",
                                                                  "/sys/fs/cgroup/pids")]
        self.cg = next(c for c in cands if os.path.exists(os.path.join(c, "cgroup.procs"))
                       and str(self.init) in open(os.path.join(c, "cgroup.procs")).read().split())

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([self.sg, *args], capture_output=True, env=self.env, timeout=120)
        if check and p.returncode != 0:
            raise RuntimeError(f"sandglass {' '.join(args)}: {p.stderr.decode(errors='replace')}")
        return p

    def pids(self) -> set[int]:
        """Every process of the sandbox, read from the cgroup files."""
        out: set[int] = set()
        for root, _dirs, files in os.walk(self.cg):
            try:
                with open(os.path.join(root, "cgroup.procs")) as f:
                    out.update(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
        return out

    def user_pids(self) -> set[int]:
        return self.pids() - {self.init}

    def leaves_unpopulated(self) -> bool:
        for e in os.scandir(self.cg):
            try:
                with open(os.path.join(e.path, "cgroup.events")) as f:
                    if "populated 1" in f.read():
                        return False
            except OSError:  # not a directory, or a leaf removed meanwhile
                pass
        return True

    def start(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen([self.sg, "exec", self.id, "--", *argv], env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, want, pidmax: int) -> int:
        """Until the workload has `want` processes; a bomb: "full" (the pids
        limit is reached) or "half" (the shell bomb's processes exit as they
        fork, so it is caught while it grows), or 3 s passed."""
        end = time.monotonic() + (3 if isinstance(want, str) else 30)
        target = {"full": pidmax - 8, "half": pidmax // 2}.get(want, want)
        n = 0
        while time.monotonic() < end:
            n = len(self.user_pids())
            if n >= target:
                break
            time.sleep(0.01)
        return n

    def clear(self) -> None:
        """Untimed: back to an empty, not aborted sandbox."""
        if self.user_pids():
            self.run("abort", self.id, "--reason", "bench cleanup", "--json", check=False)
        self.run("resume", self.id, check=False)


def run_ours(sb: Sandbox, argv: list[str], want, pidmax: int) -> dict:
    ex = sb.start(argv)
    n = sb.wait_ready(want, pidmax)
    t0 = time.monotonic()
    ab = subprocess.Popen([sb.sg, "abort", sb.id, "--reason", "bench", "--json"], env=sb.env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t_empty = None
    while True:
        if not sb.user_pids():
            t_empty = time.monotonic()
            break
        if time.monotonic() - t0 > 10:
            break
        time.sleep(0.0002)
    out, err = ab.communicate(timeout=30)
    t_cmd = time.monotonic()
    rec = json.loads(out) if ab.returncode == 0 else {}
    unpop = sb.leaves_unpopulated()
    ex.wait(30)
    sb.run("resume", sb.id)
    proof = rec.get("proof", {})
    return {"procs": n, "kill_ms": proof.get("kill_ms"),
            "cmd_ms": (t_cmd - t0) * 1e3,
            "empty_ms": (t_empty - t0) * 1e3 if t_empty else None,
            "left": proof.get("processes_left"), "killed": rec.get("processes_killed"),
            "leaves_unpopulated": unpop, "error": err.decode(errors="replace").strip() or None}


def run_original(sb: Sandbox, argv: list[str], want, pidmax: int, timeout: float) -> dict:
    ex = sb.start(argv)
    n = sb.wait_ready(want, pidmax)
    t0 = time.monotonic()
    pk = subprocess.Popen([sb.sg, "exec", sb.id, "--", "pkill", "-INT", "python"], env=sb.env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t_gone = None
    while time.monotonic() - t0 < timeout:
        if not any(comm(p).startswith("python") for p in sb.user_pids()):
            t_gone = time.monotonic()
            break
        time.sleep(0.0005)
    _, perr = pk.communicate(timeout=60)
    time.sleep(0.2)
    left = sb.user_pids()
    names: dict[str, int] = {}
    for p in left:
        c = comm(p) or "?"
        names[c] = names.get(c, 0) + 1
    res = {"procs": n, "gone_ms": (t_gone - t0) * 1e3 if t_gone else None,
           "pkill_exit": pk.returncode, "pkill_error": perr.decode(errors="replace").strip()[:200] or None,
           "left": len(left), "left_by_name": names}
    sb.clear()
    ex.wait(30)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--pids", type=int, default=256, help="pids limit of the sandbox (bounds the fork bomb)")
    ap.add_argument("--orig-timeout", type=float, default=3.0,
                    help="how long to wait for the original's way to clear the python processes")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "kill.json"))
    a = ap.parse_args()
    sg = os.path.join(os.path.abspath(a.build), "sandglass")
    state = tempfile.mkdtemp(prefix="sgb-kill-", dir="/tmp")
    env = dict(os.environ)
    env["SANDGLASS_STATE_DIR"] = state
    env["SANDGLASSD"] = os.path.join(os.path.abspath(a.build), "sandglassd")
    sb = None
    results: dict = {"bench": "kill", "when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                     "kernel": os.uname().release, "nproc": os.cpu_count(), "runs": a.runs,
                     "pids_limit": a.pids, "unit": "ms", "loadavg_before": os.getloadavg(), "ours": {}, "original": {}}
    try:
        sb = Sandbox(sg, env, a.pids)
        results["cgroup"] = sb.cg
        for name, (argv, want) in WORKLOADS.items():
            rows = []
            for i in range(a.runs):
                rows.append(run_ours(sb, argv, want, a.pids))
            ok = [r for r in rows if r["empty_ms"] is not None and r["left"] == 0]
            results["ours"][name] = {
                "procs_p50": pct([r["procs"] for r in rows], 50),
                "kill_ms": summary([r["kill_ms"] for r in ok if r["kill_ms"] is not None]),
                "cmd_ms": summary([r["cmd_ms"] for r in ok]),
                "empty_ms": summary([r["empty_ms"] for r in ok]),
                "runs_not_emptied": len(rows) - len(ok),
                "leaves_unpopulated_after": all(r["leaves_unpopulated"] for r in rows),
                "errors": sorted({r["error"] for r in rows if r["error"]})[:3],
            }
            print(f"ours     {name:8s} {json.dumps(results['ours'][name])}", flush=True)
            if name == "sh_bomb":
                continue  # the original kills python only: nothing to compare
            rows = []
            for i in range(a.runs):
                rows.append(run_original(sb, argv, want, a.pids, a.orig_timeout))
            gone = [r["gone_ms"] for r in rows if r["gone_ms"] is not None]
            lefts = [r["left"] for r in rows]
            names: dict[str, int] = {}
            for r in rows:
                for k, v in r["left_by_name"].items():
                    names[k] = max(names.get(k, 0), v)
            results["original"][name] = {
                "procs_p50": pct([r["procs"] for r in rows], 50),
                "python_gone_ms": summary(gone),
                "runs_python_not_gone": len(rows) - len(gone),
                "left_running_p50": pct(lefts, 50), "left_running_max": max(lefts),
                "left_by_name_max": names,
                "pkill_failed_runs": sum(1 for r in rows if r["pkill_exit"] not in (0, 1)),
                "pkill_errors": sorted({r["pkill_error"] for r in rows if r["pkill_error"]})[:3],
            }
            print(f"original {name:8s} {json.dumps(results['original'][name])}", flush=True)
        ratios = {}
        for name in ("one", "many", "bomb"):
            o, g = results["ours"][name], results["original"][name]
            if g["python_gone_ms"]["n"] and o["empty_ms"]["n"]:
                ratios[name] = {"p50_original_over_ours": round(g["python_gone_ms"]["p50"] / o["empty_ms"]["p50"], 2),
                                "p99_original_over_ours": round(g["python_gone_ms"]["p99"] / o["empty_ms"]["p99"], 2)}
            else:
                ratios[name] = {"note": "the original's way never cleared the python processes"}
        results["ratios_empty_ms"] = ratios
        results["loadavg_after"] = os.getloadavg()
        worst = max(results["ours"][n]["empty_ms"]["p99"] for n in results["ours"])
        worst_kill = max(results["ours"][n]["kill_ms"]["p99"] for n in results["ours"])
        results["target"] = {"p99_ms": 50, "worst_p99_empty_ms": worst, "worst_p99_kill_ms": worst_kill,
                             "met_empty": worst <= 50, "met_kill": worst_kill <= 50}
        print(json.dumps({"ratios": ratios, "target": results["target"]}, indent=1))
    finally:
        if sb:
            sb.run("destroy", sb.id, check=False)
        shutil.rmtree(state, ignore_errors=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Sandbox start-up and exec speed, side by side with the anchors of issue 2,
in one run, as ratios; and memory per sandbox with 200 alive at once.

    python3 bench/bench_sandbox.py [--build build] [--many 200] [--runs 300]

Uses hyperfine (Debian package) for the timings. Writes the figures to
bench/results/sandbox.json and prints them. Never a test: it asserts nothing.
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
ROUNDS = 6  # interleaved hyperfine calls per comparison (see hyperfine())
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from sgtest import ckpt_worker, stop_uplink_daemon, uplink_daemon_pid  # noqa: E402


def hyperfine(cmds: dict[str, str], runs: int, warmup: int = 20,
              prepare: str | None = None, rounds: int = 1) -> dict[str, dict]:
    """Times each command with hyperfine. With rounds > 1 the runs are split
    into that many hyperfine calls, each running every command in turn, and
    the times are pooled: on this VM the speed of the machine drifts by
    +-20% within minutes, and one block of runs per command would compare
    different machines."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    per_round = max(1, runs // rounds)
    for _ in range(rounds):
        out = tempfile.mktemp(suffix=".json")
        args = ["hyperfine", "-N", "--style", "none", "--warmup", str(warmup), "--runs",
                str(per_round), "--export-json", out]
        if prepare:
            args += ["--prepare", prepare]
        for name, cmd in cmds.items():
            args += ["-n", name, cmd]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            for r in json.load(f)["results"]:
                times[r["command"]] += r["times"]
        os.unlink(out)
    return {name: {"mean_ms": statistics.mean(t) * 1e3, "median_ms": statistics.median(t) * 1e3,
                   "p_stddev_ms": statistics.pstdev(t) * 1e3, "runs": len(t)}
            for name, t in times.items()}


def shell_script(path: str, body: str) -> str:
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--many", type=int, default=200)
    ap.add_argument("--runs", type=int, default=600)
    a = ap.parse_args()
    sg = os.path.join(a.build, "sandglass")
    if not shutil.which("hyperfine"):
        print("bench: hyperfine is not installed (scripts/install-deps.sh installs it)")
        return 1
    state = tempfile.mkdtemp(prefix="sgb-", dir="/tmp")
    os.environ["SANDGLASS_STATE_DIR"] = state
    os.environ["SANDGLASS_MAX_SANDBOXES"] = str(a.many + 10)
    results: dict = {"machine": os.uname().release, "nproc": os.cpu_count()}
    made: list[str] = []

    def create(*extra: str) -> str:
        sid = subprocess.run([sg, "create", "--learner", "bench", *extra], check=True,
                             capture_output=True).stdout.decode().strip()
        made.append(sid)
        return sid

    ingest = None

    try:
        sid = create()
        meta = json.load(open(os.path.join(state, "sb", sid, "meta.json")))
        init_pid = meta["init_pid"]
        cmds = {
            "/bin/true": "/bin/true",
            "sandglass exec (live sandbox)": f"{sg} exec {sid} -- true",
            "nsenter into held namespaces": f"nsenter -t {init_pid} -m -u -i -n -p -r -w true",
            "unshare": "unshare --mount --pid --net --ipc --uts --fork true",
        }
        if shutil.which("bwrap"):
            cmds["bwrap"] = ("bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc "
                             "--dev /dev true")
        t = hyperfine(cmds, a.runs, rounds=ROUNDS)
        base, base_med = t["/bin/true"]["mean_ms"], t["/bin/true"]["median_ms"]
        results["exec"] = {k: dict(v, ratio_to_true=v["mean_ms"] / base,
                                   median_ratio_to_true=v["median_ms"] / base_med)
                           for k, v in t.items()}

        # create + exec true + destroy, against bwrap's one-shot sandbox
        script = shell_script(os.path.join(state, "cycle.sh"),
                              f"id=$({sg} create --learner bench) && {sg} exec $id -- true && "
                              f"{sg} destroy $id >/dev/null")
        cyc = {"sandglass create+exec+destroy": script,
               "sandglass create only": f"{sg} create --learner bench"}
        if shutil.which("bwrap"):
            cyc["bwrap"] = cmds["bwrap"]
        t2 = hyperfine(cyc, max(20, a.runs // 10), warmup=3)
        results["lifecycle"] = t2
        # The same with a pool of one spare (README: sandglass pool): create
        # claims the spare; the pool is refilled (in the background, off the
        # clock of the create) before each run.
        subprocess.run([sg, "pool", "1"], check=True, capture_output=True)
        wait = shell_script(os.path.join(state, "wait-pool.sh"),
                            f"for i in $(seq 1 1000); do {sg} pool --json | grep -q '\"ready\":1' "
                            f"&& exit 0; sleep 0.01; done; exit 1")
        pool_cyc = {"sandglass create+exec+destroy (pool)": script,
                    "sandglass create only (pool)": f"{sg} create --learner bench"}
        t4 = hyperfine(pool_cyc, max(20, a.runs // 10), warmup=3, prepare=wait)
        subprocess.run([sg, "pool", "0"], check=True, capture_output=True)
        results["lifecycle"].update(t4)
        if "bwrap" in t2:
            results["lifecycle_ratio_to_bwrap"] = {
                k: v["mean_ms"] / t2["bwrap"]["mean_ms"] for k, v in results["lifecycle"].items()}
        # 'create only' left sandboxes behind: collect them
        for s in json.loads(subprocess.run([sg, "ls", "--json"], capture_output=True).stdout):
            if s["id"] not in made:
                made.append(s["id"])

        # many sandboxes alive at once; a tenth of them captured (a task,
        # streaming to a real ingest), the rest not
        secret = os.path.join(state, "secret")
        ingest = subprocess.Popen([os.path.join(a.build, "sandglassd"), "ingest", "--listen",
                                   "127.0.0.1:0", "--store", f"sqlite:{state}/events.db",
                                   "--secret", secret], stdout=subprocess.PIPE, text=True)
        url = ingest.stdout.readline().split()[-1]
        n_cap = max(1, a.many // 10)
        t0 = time.monotonic()
        captured = {create("--task", "bench", "--ingest", url, "--secret", secret)
                    for _ in range(n_cap)}
        while len(made) < a.many:
            create()
        results["many"] = {"count": len(made), "captured": len(captured),
                           "create_all_s": time.monotonic() - t0}
        # Each supervisor's checkpoint worker exits after 10 s idle
        # (src/checkpoint/ckpt_client.h): measure the sandboxes at rest.
        time.sleep(12)
        rss, pss, init_rss, init_pss, ready_rss, ready_pss = [], [], [], [], [], []
        cap_rss, cap_pss, workers = [], [], 0
        for s in json.loads(subprocess.run([sg, "ls", "--json"], capture_output=True).stdout):
            workers += ckpt_worker(s["supervisor_pid"]) > 0
            if s["id"] in captured:
                cap_rss.append(rss_kb(s["supervisor_pid"]))
                cap_pss.append(pss_kb(s["supervisor_pid"]))
                continue
            rss.append(rss_kb(s["supervisor_pid"]))
            pss.append(pss_kb(s["supervisor_pid"]))
            init_rss.append(rss_kb(s["init_pid"]))
            init_pss.append(pss_kb(s["init_pid"]))
            # init's other child: the exec child made ready ahead (init.h)
            try:
                with open(f"/proc/{s['init_pid']}/task/{s['init_pid']}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            for k in kids[:1]:
                ready_rss.append(rss_kb(k))
                ready_pss.append(pss_kb(k))
        n = len(rss)
        results["many"].update({
            "supervisor_rss_kib_mean": sum(rss) / n, "supervisor_rss_kib_max": max(rss),
            "supervisor_pss_kib_mean": sum(pss) / n,
            "captured_supervisor_rss_kib_mean": sum(cap_rss) / len(cap_rss),
            "captured_supervisor_rss_kib_max": max(cap_rss),
            "captured_supervisor_pss_kib_mean": sum(cap_pss) / len(cap_pss),
            "checkpoint_workers_alive_at_rest": workers,
            "init_rss_kib_mean": sum(init_rss) / n, "init_pss_kib_mean": sum(init_pss) / n,
            "ready_children": len(ready_rss),
            "ready_child_rss_kib_mean": sum(ready_rss) / max(1, len(ready_rss)),
            "ready_child_pss_kib_mean": sum(ready_pss) / max(1, len(ready_pss)),
        })
        # the one uplink daemon that streams every captured sandbox (delivery/uplink_daemon.h)
        up = uplink_daemon_pid(state)
        if up:
            results["many"]["uplink_daemon_rss_kib"] = rss_kb(up)
            results["many"]["uplink_daemon_pss_kib"] = pss_kb(up)
            results["many"]["uplink_daemon_sessions"] = len(captured)
            results["many"]["captured_rss_kib_per_sandbox_with_daemon_share"] = (
                sum(cap_rss) / len(cap_rss) + rss_kb(up) / len(captured))
        t3 = hyperfine({"sandglass exec under load": f"{sg} exec {sid} -- true",
                        "/bin/true": "/bin/true"}, a.runs, rounds=ROUNDS)
        results["many"]["exec_under_load"] = t3
        # the worker that the execs above woke, while it is alive
        sup = json.load(open(os.path.join(state, "sb", sid, "meta.json")))["supervisor_pid"]
        w = ckpt_worker(sup)
        if w:
            results["many"]["checkpoint_worker_rss_kib"] = rss_kb(w)
            results["many"]["checkpoint_worker_pss_kib"] = pss_kb(w)
        results["many"]["exec_under_load_ratio_to_true"] = (
            t3["sandglass exec under load"]["mean_ms"] / t3["/bin/true"]["mean_ms"])
    finally:
        if ingest:
            ingest.terminate()
            ingest.wait()
        for s in made:
            subprocess.run([sg, "destroy", s], capture_output=True)
        subprocess.run([sg, "gc"], capture_output=True)
        stop_uplink_daemon(state)
        shutil.rmtree(state, ignore_errors=True)

    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "sandbox.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

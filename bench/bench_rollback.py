#!/usr/bin/env python3
"""Checkpoint and rollback through the real CLI and supervisor: a 10,000-file
workspace (made inside the sandbox, owned by its user), 10 files changed by a
shell command per round, then timed `sandglass checkpoint` and `sandglass
rollback --to BEFORE --yes` (wall time of the command and the took_ms the
supervisor reports); and what the automatic checkpoint before every exec adds
to `sandglass exec -- true` on that workspace versus an empty one. Writes
bench/results/rollback.json. Asserts nothing (bench/bench_checkpoint.c
measures the module alone, side by side with libgit2, cp and rsync).

    python3 bench/bench_rollback.py [--build build] [--files 10000] [--rounds 9] [--execs 30]

The rollback command's wall time includes what the CLI does around the
restore: a dry run for the plan (a diff), then the rollback request, in which
the supervisor diffs again for the record, takes the safety checkpoint
("before rollback"), then restores (took_ms is the restore alone).
rollback_10_changed.plan_only_cmd_p50 is the plan step alone.
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

MAKE_FILES = r"""
import os, sys
n = int(sys.argv[1])
per = 100
for i in range(n):
    d = "/workspace/d%03d" % (i // per)
    if i % per == 0:
        os.makedirs(d, exist_ok=True)
    with open("%s/f%05d.txt" % (d, i), "w") as f:
        f.write("file %d\n" % i * 8)
"""


def med(v: list[float]) -> float:
    return round(statistics.median(v), 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--changed", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--execs", type=int, default=30)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "rollback.json"))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    sg = os.path.join(build, "sandglass")
    state = tempfile.mkdtemp(prefix="sgb-rb-", dir=os.environ.get("SG_BENCH_DIR", "/var/tmp"))
    env = dict(os.environ, SANDGLASS_STATE_DIR=state, SANDGLASSD=os.path.join(build, "sandglassd"))
    made: list[str] = []

    def run(*args: str) -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.monotonic()
        p = subprocess.run([sg, *args], capture_output=True, env=env, timeout=600)
        ms = (time.monotonic() - t0) * 1e3
        if p.returncode != 0:
            raise RuntimeError(f"sandglass {' '.join(args[:3])}: {p.stderr.decode(errors='replace')}")
        return p, ms

    def create() -> str:
        sid = run("create", "--learner", "bench")[0].stdout.decode().strip()
        made.append(sid)
        return sid

    res: dict = {"bench": "rollback", "when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                 "kernel": os.uname().release, "nproc": os.cpu_count(), "loadavg_before": os.getloadavg(),
                 "files": a.files, "changed_per_round": a.changed, "rounds": a.rounds, "unit": "ms",
                 "state_dir_fs": subprocess.run(["stat", "-f", "-c", "%T", state], capture_output=True,
                                                text=True).stdout.strip()}
    try:
        big = create()
        _, ms = run("exec", big, "--", "python3", "-c", MAKE_FILES, str(a.files))
        res["populate_exec_ms"] = round(ms, 1)
        p, ms = run("checkpoint", big, "--label", "first", "--json")
        first = json.loads(p.stdout)
        res["first_checkpoint"] = {"cmd_ms": round(ms, 1), "took_ms": round(first["took_ms"], 1),
                                   "files": first["files"], "hashed": first["hashed"]}
        p, ms = run("checkpoint", big, "--json")
        res["checkpoint_unchanged"] = {"cmd_ms": round(ms, 1), "took_ms": round(json.loads(p.stdout)["took_ms"], 1)}

        ck_cmd, ck_took, rb_cmd, rb_took, rb_changed, exec_change = [], [], [], [], [], []
        plan_ms: list[float] = []
        step = max(1, a.files // a.changed)
        for r in range(a.rounds):
            base = json.loads(run("checkpoint", big, "--label", f"base {r}", "--json")[0].stdout)["id"]
            paths = " ".join("/workspace/d%03d/f%05d.txt" % (i // 100, i)
                             for i in range((r * 7) % step, a.files, step)[:a.changed])
            _, ms = run("exec", big, "--", "/bin/sh", "-c", f"for f in {paths}; do echo round {r} >> $f; done")
            exec_change.append(ms)
            time.sleep(0.06)  # past SG_CKPT_RACY_NS: the stat cache can trust what it sees
            p, ms = run("checkpoint", big, "--json")
            ck_cmd.append(ms)
            ck_took.append(json.loads(p.stdout)["took_ms"])
            # the plan alone (what the CLI asks first): without --yes and
            # without a terminal the CLI stops after showing it
            t0 = time.monotonic()
            p = subprocess.run([sg, "rollback", big, "--to", base], capture_output=True, env=env,
                               stdin=subprocess.DEVNULL, timeout=600)
            plan_ms.append((time.monotonic() - t0) * 1e3)
            if b"not a terminal" not in p.stderr:
                raise RuntimeError(f"rollback plan: {p.stderr.decode(errors='replace')}")
            p, ms = run("rollback", big, "--to", base, "--yes", "--json")
            rb = json.loads(p.stdout)
            rb_cmd.append(ms)
            rb_took.append(rb["took_ms"])
            rb_changed.append(len(rb["changes"]))
        res["checkpoint_after_10_changed"] = {"cmd_p50": med(ck_cmd), "cmd_max": round(max(ck_cmd), 3),
                                              "took_p50": med(ck_took), "took_max": round(max(ck_took), 3)}
        res["rollback_10_changed"] = {"cmd_p50": med(rb_cmd), "cmd_max": round(max(rb_cmd), 3),
                                      "took_p50": med(rb_took), "took_max": round(max(rb_took), 3),
                                      "changes_listed_p50": statistics.median(rb_changed),
                                      "plan_only_cmd_p50": med(plan_ms)}
        res["exec_changing_10_files_p50"] = med(exec_change)

        # What the automatic checkpoint before every exec adds.
        empty = create()
        for sid in (big, empty):
            run("exec", sid, "--", "true")  # warm up
        t_big, t_empty = [], []
        for _ in range(a.execs):
            t_big.append(run("exec", big, "--", "true")[1])
            t_empty.append(run("exec", empty, "--", "true")[1])
        res["exec_true"] = {"workspace_10k_p50": med(t_big), "workspace_empty_p50": med(t_empty),
                            "checkpoint_cost_p50": round(med(t_big) - med(t_empty), 3),
                            "ratio_10k_over_empty": round(med(t_big) / med(t_empty), 2)}
        res["targets"] = {"checkpoint_ms": 100, "rollback_ms": 100,
                          "checkpoint_cmd_met": res["checkpoint_after_10_changed"]["cmd_p50"] <= 100,
                          "checkpoint_took_met": res["checkpoint_after_10_changed"]["took_p50"] <= 100,
                          "rollback_cmd_met": res["rollback_10_changed"]["cmd_p50"] <= 100,
                          "rollback_took_met": res["rollback_10_changed"]["took_p50"] <= 100}
        res["loadavg_after"] = os.getloadavg()
    finally:
        for sid in made:
            subprocess.run([sg, "destroy", sid], capture_output=True, env=env, timeout=120)
        shutil.rmtree(state, ignore_errors=True)
    print(json.dumps(res, indent=1))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`sandglass events` of a 10,000-event session against `sqlite3` printing
the same rows (issue 25: at least 0.5x its speed).

A real ingest (sandglassd ingest, SQLite store) is started on a loopback
port; its store is filled with one session of N events shaped as a captured
session's (per command: stdin, activity, command, process, stdout,
run_result or test_result, activity, a checkpoint before it). Then, each
run with stdout to /dev/null, best of R runs:
  - sqlite3 DB "SELECT id,learner,task,sandbox,seq,kind,ts,received,payload
    FROM sg_events WHERE sandbox=... ORDER BY seq" (sqlite3's own list output);
  - sandglass events --sandbox ID --json (the same rows as JSON lines);
  - sandglass events --sandbox ID (the timeline) and --all.
Prints the times and the ratios (sqlite3's time / events' time: 1.0 is as
fast as sqlite3) and writes bench/results/events.json. Asserts nothing.

    bench/bench_events.py [--events N] [--runs R] [--build DIR] [--before DIR]

With --before, the same on another build's ingest and CLI, runs
interleaved, and the ratio of the two builds' times; and first the check
that both CLIs print the same bytes (--json, the timeline, --all) from the
before build's ingest: it exits 1 when they differ.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def fill(db: str, n: int, sid: str, table: str) -> None:
    con = sqlite3.connect(db)
    rows = []
    seq = 0
    ts0 = time.time() - 3600
    k = 0
    while seq < n:
        cmd = f"./run_tests --case {k}" if k % 3 == 0 else f"cc -o prog{k} prog.c && ./prog{k}"
        out = "".join(f"line {i} of command {k}\n" for i in range(12))
        kinds = [
            ("checkpoint", {"id": "%040x" % k, "label": f"before exec {k}: {cmd}", "files": 10, "bytes": 4096,
                            "changed": 1, "hashed": 1, "took_ms": 1.5}),
            ("stdin", {"line": cmd, "exec_id": k}),
            ("activity", {"state": "command", "unacked": 3}),
            ("command", {"cmd": cmd, "cwd": "/workspace", "exec_id": k}),
            ("process", {"pid": 3, "ppid": 1, "argv": ["sh", "-c", cmd], "exit_code": 0, "duration_s": 0.01,
                         "exec_id": k}),
            ("stdout", {"stream": "stdout", "data": out, "bytes": len(out), "truncated": False, "exec_id": k}),
            ("test_result" if k % 3 == 0 else "run_result",
             {"cmd": cmd, "exit_code": k % 2, "duration_s": 0.02, "timed_out": False, "exec_id": k}),
            ("activity", {"state": "idle", "unacked": 0}),
        ]
        for kind, payload in kinds:
            if seq >= n:
                break
            t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts0 + seq * 0.1)) + ".%03dZ" % (seq % 1000)
            rows.append(("ann", "bench", sid, seq, kind, t, t, json.dumps(payload)))
            seq += 1
        k += 1
    con.executemany(f"INSERT INTO {table} (learner, task, sandbox, seq, kind, ts, received, payload)"
                    " VALUES (?,?,?,?,?,?,?,?)", rows)
    con.commit()
    con.close()


def table(db: str) -> str:
    """The events table's name: sg_events since schema version 2, events before."""
    con = sqlite3.connect(db)
    try:
        return "sg_events" if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'sg_events'").fetchone() \
            else "events"
    finally:
        con.close()


def timed(args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    t = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{args[0]} failed: {p.stderr.decode(errors='replace')}")
    return t


class Setup:
    """One build's ingest on its own SQLite store, filled with the session."""

    def __init__(self, build: str, root: str, name: str, n: int, sid: str) -> None:
        sandglass, sandglassd = os.path.join(build, "sandglass"), os.path.join(build, "sandglassd")
        d = os.path.join(root, name)
        os.makedirs(d)
        self.env = dict(os.environ, SANDGLASS_STATE_DIR=os.path.join(d, "s"), SANDGLASSD=sandglassd, TZ="UTC")
        self.db, secret = os.path.join(d, "events.db"), os.path.join(d, "secret")
        argv = [sandglassd, "ingest", "--listen", "127.0.0.1:0", "--store", f"sqlite:{self.db}", "--secret", secret]
        # the build's ingest makes its schema; the session goes in while no
        # ingest runs (a build before 986e09a lost its SQLite locks to its
        # own second open, and another process's writes could then vanish
        # from its view)
        self.ing = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env, text=True)
        self.ing.stdout.readline()
        self.stop()
        self.table = table(self.db)
        fill(self.db, n, sid, self.table)
        self.ing = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env, text=True)
        port = int(self.ing.stdout.readline().rsplit(":", 1)[1])
        self.events = [sandglass, "events", "--sandbox", sid, "--ingest", f"http://127.0.0.1:{port}",
                       "--secret", secret]
        self.sql = ["sqlite3", self.db, f"SELECT id,learner,task,sandbox,seq,kind,ts,received,payload FROM {self.table}"
                    f" WHERE sandbox='{sid}' ORDER BY seq"]

    def stop(self) -> None:
        self.ing.terminate()
        self.ing.wait()


MODES = (("json", ["--json"]), ("timeline", []), ("timeline_all", ["--all"]))


def same_output(before: Setup, after_build: str) -> None:
    """Both builds' CLIs on the before build's ingest: the same bytes."""
    env = dict(before.env, SANDGLASSD=os.path.join(after_build, "sandglassd"))
    after_events = [os.path.join(after_build, "sandglass")] + before.events[1:]
    for m, extra in MODES:
        outs = [subprocess.run(argv + extra, stdout=subprocess.PIPE, env=e, check=True).stdout
                for argv, e in ((before.events, before.env), (after_events, env))]
        if outs[0] != outs[1]:
            sys.exit(f"events {' '.join(extra)}: the builds' outputs differ")
        print(f"events {' '.join(extra) or '(timeline)':10}: the same {len(outs[0])} bytes from both builds")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--before", help="another build, measured side by side (runs interleaved)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="sg-bench-events-")
    sid = "0123456789ab"
    builds = {"after": a.build} if not a.before else {"before": a.before, "after": a.build}
    setups: dict[str, Setup] = {}
    try:
        for name, b in builds.items():
            setups[name] = Setup(b, root, name, a.events, sid)
        if "before" in setups:
            same_output(setups["before"], a.build)
        best: dict[str, float] = {}
        for _ in range(a.runs):  # each run: every build and mode in turn
            for name, st in setups.items():
                for key, args in [("sqlite3", st.sql)] + [(m, st.events + x) for m, x in MODES]:
                    t = timed(args, st.env)
                    best[f"{name}:{key}"] = min(best.get(f"{name}:{key}", t), t)
        res = {"events": a.events, "runs": a.runs, "builds": builds}
        for name in setups:
            t_sql = best[f"{name}:sqlite3"]
            res[f"{name}_sqlite3_s"] = t_sql
            for m, extra in MODES:
                t = best[f"{name}:{m}"]
                res[f"{name}_events_{m}_s"], res[f"{name}_ratio_{m}"] = t, t_sql / t
                print(f"{name:6} events {' '.join(extra) or '(timeline)':10}: {t * 1000:7.1f} ms; sqlite3 "
                      f"{t_sql * 1000:6.1f} ms; speed {t_sql / t:.2f}x sqlite3's")
        if "before" in setups:
            for m, extra in MODES:
                r = best[f"after:{m}"] / best[f"before:{m}"]
                res[f"after_over_before_{m}"] = r
                print(f"events {' '.join(extra) or '(timeline)':10}: after/before time {r:.2f}x")
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "events.json"), "w") as f:
            json.dump(res, f, indent=1)
    finally:
        for st in setups.values():
            st.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

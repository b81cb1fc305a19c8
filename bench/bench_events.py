#!/usr/bin/env python3
"""`sandglass events` of a 10,000-event session against `sqlite3` printing
the same rows (issue 25: at least 0.5x its speed).

A real ingest (sandglassd ingest, SQLite store) is started on a loopback
port; its store is filled with one session of N events shaped as a captured
session's (per command: stdin, activity, command, process, stdout,
run_result or test_result, activity, a checkpoint before it). Then, each
run with stdout to /dev/null, best of R runs:
  - sqlite3 DB "SELECT id,learner,task,sandbox,seq,kind,ts,received,payload
    FROM events WHERE sandbox=... ORDER BY seq" (sqlite3's own list output);
  - sandglass events --sandbox ID --json (the same rows as JSON lines);
  - sandglass events --sandbox ID (the timeline) and --all.
Prints the times and the ratios (sqlite3's time / events' time: 1.0 is as
fast as sqlite3) and writes bench/results/events.json. Asserts nothing.

    bench/bench_events.py [--events N] [--runs R] [--build DIR]
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


def fill(db: str, n: int, sid: str) -> None:
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
    con.executemany("INSERT INTO events (learner, task, sandbox, seq, kind, ts, received, payload)"
                    " VALUES (?,?,?,?,?,?,?,?)", rows)
    con.commit()
    con.close()


def best(args: list[str], runs: int, env: dict) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            sys.exit(f"{args[0]} failed: {p.stderr.decode(errors='replace')}")
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    a = ap.parse_args()
    sandglass = os.path.join(a.build, "sandglass")
    sandglassd = os.path.join(a.build, "sandglassd")
    root = tempfile.mkdtemp(prefix="sg-bench-events-")
    env = dict(os.environ, SANDGLASS_STATE_DIR=os.path.join(root, "s"), SANDGLASSD=sandglassd, TZ="UTC")
    db, secret, sid = os.path.join(root, "events.db"), os.path.join(root, "secret"), "0123456789ab"
    ing = subprocess.Popen([sandglassd, "ingest", "--listen", "127.0.0.1:0", "--store", f"sqlite:{db}",
                            "--secret", secret], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           env=env, text=True)
    try:
        line = ing.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        fill(db, a.events, sid)
        ev = [sandglass, "events", "--sandbox", sid, "--ingest", f"http://127.0.0.1:{port}", "--secret", secret]
        sql = ("SELECT id,learner,task,sandbox,seq,kind,ts,received,payload FROM events"
               f" WHERE sandbox='{sid}' ORDER BY seq")
        t_sql = best(["sqlite3", db, sql], a.runs, env)
        res = {"events": a.events, "runs": a.runs, "sqlite3_s": t_sql}
        for name, extra in (("json", ["--json"]), ("timeline", []), ("timeline_all", ["--all"])):
            t = best(ev + extra, a.runs, env)
            res[f"events_{name}_s"] = t
            res[f"ratio_{name}"] = t_sql / t
            print(f"events {' '.join(extra) or '(timeline)'}: {t * 1000:.1f} ms; sqlite3 {t_sql * 1000:.1f} ms;"
                  f" speed {t_sql / t:.2f}x sqlite3's")
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "events.json"), "w") as f:
            json.dump(res, f, indent=1)
    finally:
        ing.terminate()
        ing.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

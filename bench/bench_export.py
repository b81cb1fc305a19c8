#!/usr/bin/env python3
"""`sandglass export` of N events (default 1,000,000) against the store's
own dumpers writing the same rows (issue 24: target >= 0.5x their speed):
  - SQLite: `sqlite3 -csv DB "SELECT ... ORDER BY learner, task, sandbox, seq"`
  - PostgreSQL: `psql -c "COPY (SELECT ... ORDER BY ...) TO STDOUT CSV"`
each to a file on the same disk, against `sandglass export --format jsonl`
and `--format csv` through a real ingest (sandglassd ingest on a loopback
port, an operator read token). The rows are put in the store directly (the
ingest's schema, made by the ingest itself): S streams of N/S events shaped
as a captured session's (command, file_diff with a diff, stdout,
run_result). Runs interleaved, best of R. Prints the figures and ratios and
writes bench/results/export.json. Asserts nothing.

--baseline DIR runs another build's ingest and export on the same store in
the same rounds (old against new, as ratios). --probe measures, during one
jsonl export of each build and with the ingest idle, what else the ingest
serves meanwhile: GET /healthz round trips and a stream's event-to-ack
round trips (one event at a time), their p50, p99 and max.

    bench/bench_export.py [--events N] [--streams S] [--runs R] [--build DIR] [--baseline DIR]
                          [--probe] [--no-pg]
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
ROOT = os.path.dirname(HERE)
PG = os.path.join(ROOT, "scripts", "pg-server.sh")
COLS = "learner, task, sandbox, seq, kind, ts, received, payload"


def rows(n: int, streams: int):
    per = n // streams
    for s in range(streams):
        learner, task, sb = f"learner{s % 37:03d}", f"task{s % 5}", f"sb{s:05d}"
        for i in range(per):
            k = i % 4
            ts = f"2026-12-03T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.{i % 1000000:06d}+00:00"
            if k == 0:
                kind, p = "command", {"exec_id": f"e{i}", "cmd": f"python3 calc.py {i}", "cwd": "/work"}
            elif k == 1:
                kind, p = "file_diff", {"exec_id": f"e{i - 1}", "path": "calc.py", "change": "modified",
                                        "diff": f"--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = {i - 1}\n+x = {i}\n",
                                        "added": 1, "removed": 1, "size": 10, "sha256": f"{i:064x}"}
            elif k == 2:
                kind, p = "stdout", {"exec_id": f"e{i - 2}", "stream": "stdout", "data": f"résultat {i}\n",
                                     "bytes": 12, "truncated": False}
            else:
                kind, p = "run_result", {"exec_id": f"e{i - 3}", "cmd": f"python3 calc.py {i}", "exit_code": 0,
                                         "duration_s": 0.012, "timed_out": False}
            yield (learner, task, sb, i, kind, ts, ts, json.dumps(p, separators=(",", ":"), ensure_ascii=False))


class Ingest:
    def __init__(self, sandglassd: str, state: str, store: str):
        env = dict(os.environ, SANDGLASS_STATE_DIR=state)
        self.proc = subprocess.Popen([sandglassd, "ingest", "--listen", "127.0.0.1:0", "--store", store],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on ws://127.0.0.1:"):
            raise RuntimeError(f"ingest did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def timed(cmd: list[str], env=None, out: str | None = None) -> float:
    t = time.perf_counter()
    if out:
        with open(out, "wb") as f:
            subprocess.run(cmd, check=True, env=env, stdout=f)
    else:
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def export_cmd(sandglassd: str, fmt: str, out: str, port: int) -> list[str]:
    return [sandglassd, "export", "--format", fmt, "--out", out, "--ingest", f"http://127.0.0.1:{port}"]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] * 1000, 2) if xs else float("nan")


def probe(port: int, state: str, sandglassd: str, busy, secret: str = "") -> dict:
    """Round trips of GET /healthz and of one event to its ack, in turn,
    while busy() runs (ms: p50, p99, max); the stream's token from secret
    (default: the state's)."""
    import threading
    import urllib.request
    from bench_stream import WS
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    sb = f"probe{port}-{time.monotonic_ns()}"
    tok = subprocess.run([sandglassd, "token", "--learner", "bench", "--task", "probe", "--sandbox", sb,
                          *(["--secret", secret] if secret else [])], env=env,
                         check=True, capture_output=True, text=True).stdout.strip()
    ws = WS(port, tok)
    acks = ws.acks()
    next(acks)  # the handshake's
    health, ack, seq = [], [], 0
    done = threading.Event()

    def run():
        busy()
        done.set()
    th = threading.Thread(target=run)
    th.start()
    while not done.is_set():
        t = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=60) as r:
            r.read()
        health.append(time.perf_counter() - t)
        t = time.perf_counter()
        ws.s.sendall(WS.frame(seq, "x"))
        while next(acks) < seq:
            pass
        ack.append(time.perf_counter() - t)
        seq += 1
        time.sleep(0.005)
    th.join()
    ws.s.close()
    return {"healthz_ms": [pct(health, 50), pct(health, 99), pct(health, 100)],
            "ack_ms": [pct(ack, 50), pct(ack, 99), pct(ack, 100)], "n": len(health)}


def compare(name: str, builds: dict, state: str, store: str, anchor: list[str], tmp: str, runs: int,
            probing: bool) -> dict:
    ings = {b: Ingest(bin_, state, store) for b, bin_ in builds.items()}
    fmts = [(b, f) for b in builds for f in ("jsonl", "csv")]
    best = {"anchor": 1e9, **{bf: 1e9 for bf in fmts}}
    sizes = {}
    try:
        for _ in range(runs):
            for what in ["anchor", *fmts]:
                out = os.path.join(tmp, "out")
                if what == "anchor":
                    t = timed(anchor, out=out)
                else:
                    b, f = what
                    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
                    t = timed(export_cmd(builds[b], f, out, ings[b].port), env=env)
                best[what] = min(best[what], t)
                sizes["anchor" if what == "anchor" else f"{what[0]} {what[1]}"] = os.path.getsize(out)
                os.unlink(out)
        probes = {}
        if probing:
            for b in builds:
                out = os.path.join(tmp, "out")
                env = dict(os.environ, SANDGLASS_STATE_DIR=state)
                probes[b] = {"idle": probe(ings[b].port, state, builds[b], lambda: time.sleep(3)),
                             "export": probe(ings[b].port, state, builds[b], lambda: subprocess.run(
                                 export_cmd(builds[b], "jsonl", out, ings[b].port), env=env, check=True))}
                os.unlink(out)
    finally:
        for i in ings.values():
            i.stop()
    a = best["anchor"]
    res = {"anchor_s": round(a, 3), "bytes": sizes}
    for b in builds:
        pre = "" if b == "new" else "baseline_"
        for f in ("jsonl", "csv"):
            res[f"{pre}{f}_s"] = round(best[(b, f)], 3)
            res[f"{pre}{f}_ratio"] = round(a / best[(b, f)], 3)
    line = (f"{name}: anchor {res['anchor_s']} s, export jsonl {res['jsonl_s']} s ({res['jsonl_ratio']}x its speed), "
            f"csv {res['csv_s']} s ({res['csv_ratio']}x)")
    if "base" in builds:
        line += (f"; baseline jsonl {res['baseline_jsonl_s']} s ({res['baseline_jsonl_ratio']}x), "
                 f"csv {res['baseline_csv_s']} s ({res['baseline_csv_ratio']}x)")
    print(line, flush=True)
    if probes:
        res["probe"] = probes
        for b, p in probes.items():
            print(f"  {name} {b}: while idle healthz p50/p99/max {p['idle']['healthz_ms']} ms, ack "
                  f"{p['idle']['ack_ms']} ms; during an export healthz {p['export']['healthz_ms']} ms, ack "
                  f"{p['export']['ack_ms']} ms ({p['export']['n']} probes)", flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline", help="another build directory, run side by side (old against new)")
    ap.add_argument("--probe", action="store_true", help="the ingest's healthz and ack round trips during an export")
    ap.add_argument("--no-pg", action="store_true")
    a = ap.parse_args()
    sandglassd = os.path.join(a.build, "sandglassd")
    builds = {"new": sandglassd}
    if a.baseline:
        builds["base"] = os.path.join(a.baseline, "sandglassd")
    tmp = tempfile.mkdtemp(prefix="sg-bench-export-")
    os.chmod(tmp, 0o711)
    state = os.path.join(tmp, "state")
    os.makedirs(state)
    results = {"events": a.events, "streams": a.streams, "runs": a.runs, "load": os.getloadavg(),
               "baseline": a.baseline}
    try:
        db = os.path.join(tmp, "events.db")
        Ingest(sandglassd, state, f"sqlite:{db}").stop()  # the schema, made by the ingest
        with sqlite3.connect(db) as c:
            c.executemany(f"INSERT INTO sg_events ({COLS}) VALUES (?,?,?,?,?,?,?,?)", rows(a.events, a.streams))
        q = f"SELECT {COLS} FROM sg_events ORDER BY learner, task, sandbox, seq"
        results["sqlite"] = compare("SQLite", builds, state, f"sqlite:{db}", ["sqlite3", "-csv", db, q], tmp,
                                    a.runs, a.probe)
        if not a.no_pg and subprocess.run(["bash", PG, "have"]).returncode == 0:
            pgdir = os.path.join(tmp, "pg")
            port = str(__import__("socket").create_server(("127.0.0.1", 0)).getsockname()[1])
            url = subprocess.run(["bash", PG, "start", pgdir, port], check=True, capture_output=True,
                                 text=True).stdout.strip()
            try:
                Ingest(sandglassd, state, url).stop()
                csvf = os.path.join(tmp, "load.csv")
                with open(csvf, "w", newline="", encoding="utf-8") as f:
                    import csv
                    csv.writer(f).writerows(rows(a.events, a.streams))
                subprocess.run(["psql", "-X", "-q", "-d", url, "-c",
                                f"\\copy sg_events ({COLS}) FROM '{csvf}' CSV"], check=True)
                os.unlink(csvf)
                pq = f"COPY (SELECT {COLS} FROM sg_events ORDER BY learner, task, sandbox, seq) TO STDOUT CSV"
                results["postgresql"] = compare("PostgreSQL", builds, state, url,
                                                ["psql", "-X", "-q", "-d", url, "-c", pq], tmp, a.runs, a.probe)
            finally:
                subprocess.run(["bash", PG, "stop", pgdir, port], capture_output=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    results["load_end"] = os.getloadavg()
    with open(os.path.join(HERE, "results", "export.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

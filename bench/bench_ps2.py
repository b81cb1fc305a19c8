#!/usr/bin/env python3
"""ProgSnap2 code states of a 10,000-event session written in under 10 s
(issue 24's target). A SQLite store (the ingest's own schema, made by the
ingest) is filled directly: one session of N events (default 10,000), a
quarter of them file_diffs over 10 files, each with a new content kept in
the store (sg_contents / sg_content_parts, as the ingest stores a blob),
the rest commands, outputs and results. Then `sandglass export --format
progsnap2` runs through a real ingest (sandglassd ingest on a loopback
port). Prints the seconds, the code states, the files written and the
ratio to the 10 s target, and writes bench/results/ps2.json. Asserts
nothing.

    bench/bench_ps2.py [--events N] [--runs R] [--build DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_export import COLS, Ingest, export_cmd, timed  # noqa: E402

TARGET_S = 10.0
FILES = 10


def session(n: int):
    """The session's rows and the contents its file_diffs name."""
    ev, contents = [], {}
    for i in range(n):
        k = i % 4
        ts = f"2026-12-03T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.000000+00:00"
        if k == 1:
            path = f"src/mod{(i // 4) % FILES}.py"
            data = (f"# version {i}\n" + "x = 1\n" * (200 + i % 50)).encode()
            sha = hashlib.sha256(data).hexdigest()
            contents[sha] = data
            kind, p = "file_diff", {"exec_id": f"e{i}", "path": path, "change": "modified" if i >= 4 * FILES else
                                    "created", "diff": "", "size": len(data), "sha256": sha,
                                    "content": {"type": "file", "sha256": sha, "size": len(data), "mode": 0o644,
                                                "stored": True}}
        elif k == 0:
            kind, p = "command", {"exec_id": f"e{i}", "cmd": f"python3 run.py {i}", "cwd": "/workspace"}
        elif k == 2:
            kind, p = "stdout", {"exec_id": f"e{i}", "stream": "stdout", "data": f"out {i}\n", "bytes": 8,
                                 "truncated": False}
        else:
            kind, p = "run_result", {"exec_id": f"e{i}", "cmd": f"python3 run.py {i}", "exit_code": 0,
                                     "duration_s": 0.01, "timed_out": False}
        ev.append(("learner", "task", "sb-ps2", i + 1, kind, ts, ts, json.dumps(p, separators=(",", ":"))))
    return ev, contents


def count_files(d: str) -> int:
    return sum(len(fs) for _, _, fs in os.walk(d))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    sandglassd = os.path.join(a.build, "sandglassd")
    tmp = tempfile.mkdtemp(prefix="sg-bench-ps2-")
    os.chmod(tmp, 0o711)
    state = os.path.join(tmp, "state")
    os.makedirs(state)
    res = {"events": a.events, "runs": a.runs, "load": os.getloadavg(), "target_s": TARGET_S}
    try:
        db = os.path.join(tmp, "events.db")
        Ingest(sandglassd, state, f"sqlite:{db}").stop()  # the schema, made by the ingest
        ev, contents = session(a.events)
        with sqlite3.connect(db) as c:
            c.executemany(f"INSERT INTO sg_events ({COLS}) VALUES (?,?,?,?,?,?,?,?)", ev)
            c.executemany("INSERT INTO sg_contents (sha256, size) VALUES (?,?)",
                          [(s, len(d)) for s, d in contents.items()])
            c.executemany("INSERT INTO sg_content_parts (sha256, off, data) VALUES (?,0,?)",
                          list(contents.items()))
        ing = Ingest(sandglassd, state, f"sqlite:{db}")
        best, states, files = 1e9, 0, 0
        try:
            env = dict(os.environ, SANDGLASS_STATE_DIR=state)
            for _ in range(a.runs):
                out = os.path.join(tmp, "ds")
                best = min(best, timed(export_cmd(sandglassd, "progsnap2", out, ing.port), env=env))
                cs = os.path.join(out, "CodeStates")
                states, files = len(os.listdir(cs)), count_files(cs)
                shutil.rmtree(out)
        finally:
            ing.stop()
        res.update({"seconds": round(best, 3), "code_states": states, "files": files,
                    "file_diffs": sum(1 for e in ev if e[4] == "file_diff"), "contents": len(contents),
                    "ratio_to_target": round(best / TARGET_S, 3)})
        print(f"ProgSnap2 of a {a.events}-event session: {res['seconds']} s (best of {a.runs}), "
              f"{states} code states, {files} files, {res['contents']} contents; "
              f"{res['ratio_to_target']}x the {TARGET_S:.0f} s target", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    res["load_end"] = os.getloadavg()
    with open(os.path.join(HERE, "results", "ps2.json"), "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

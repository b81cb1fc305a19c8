#!/usr/bin/env python3
"""The console's figures (issue 25), in headless chromium (Debian's, driven
by playwright-core: tests/node/console_bench.mjs):
  - first paint of a 10,000-event session: from the navigation to the
    first frame with its timeline on screen (target < 1 s);
  - the sessions list of 1,000 sessions: from the navigation to the first
    frame with the list on screen: all 1,000 in it (its count says so), the
    rows near the screen drawn (target < 300 ms);
  - a new event, from its send (and from its commit's ack) to the first
    frame showing it, one event at a time (target p99 <= 100 ms).
A real ingest (sandglassd ingest, SQLite store, on a loopback port) is
filled through its WebSocket (/v1/ingest, stream tokens), as the capture
fills it: one session of N events shaped as a captured session's (per
command: a checkpoint, stdin, activity, command, process, a file_diff,
stdout, run_result or test_result, activity), and S sessions of 8 events.
Prints the figures and writes bench/results/console.json. Asserts nothing.

    bench/bench_console.py [--events N] [--sessions S] [--runs R] [--live L] [--build DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_stream  # noqa: E402 (beside this file)
ROOT = os.path.dirname(HERE)
NODE_DIR = os.path.join(ROOT, "tests", "node")


class WS(bench_stream.WS):
    """bench_stream's bare /v1/ingest client, with frames of any kind."""

    @staticmethod
    def frame(seq: int, kind: str, payload: dict, ts: str) -> bytes:
        p = json.dumps({"seq": seq, "kind": kind, "payload": payload, "ts": ts}).encode()
        n = len(p)
        if n < 126:
            hdr = bytes([0x81, 0x80 | n])
        elif n < 65536:
            hdr = bytes([0x81, 0x80 | 126]) + struct.pack("!H", n)
        else:
            hdr = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", n)
        return hdr + b"\0\0\0\0" + p

    def wait_ack(self, want: int) -> None:
        for ack in self.acks():
            if ack >= want:
                return
        raise RuntimeError("the ingest closed the stream (a frame refused?)")


def session_events(n: int, t0: float):
    """A captured session's events, n of them."""
    seq, k = 0, 0
    while seq < n:
        cmd = f"./run_tests --case {k}" if k % 3 == 0 else f"cc -o prog{k} prog.c && ./prog{k}"
        out = "".join(f"line {i} of command {k}\n" for i in range(12))
        diff = f"--- a/prog.c\n+++ b/prog.c\n@@ -1,2 +1,2 @@\n int x;\n-int y = {k - 1};\n+int y = {k};\n"
        res = {"cmd": cmd, "exit_code": k % 2, "duration_s": 0.02, "timed_out": False, "exec_id": k}
        if k % 3 == 0:
            res.update({"outcome": "failed" if k % 2 else "passed", "parsed": True, "runner": "pytest",
                        "run": 3, "passed": 3 - k % 2, "failed": k % 2, "errors": 0, "skipped": 0,
                        "failing_tests": ["tests/test_prog.py::test_y"] if k % 2 else []})
        for kind, payload in [
            ("checkpoint", {"id": "%040x" % k, "label": f"before exec {k}: {cmd}", "files": 10, "changed": 1}),
            ("stdin", {"line": cmd, "exec_id": k}),
            ("activity", {"state": "command", "spooled": 3}),
            ("command", {"cmd": cmd, "cwd": "/workspace", "exec_id": k}),
            ("process", {"pid": 3, "ppid": 1, "argv": ["sh", "-c", cmd], "exit_code": 0, "duration_s": 0.01,
                         "exec_id": k}),
            ("file_diff", {"path": "prog.c", "change": "modified", "diff": diff, "added": 1, "removed": 1}),
            ("stdout", {"stream": "stdout", "data": out, "bytes": len(out), "truncated": False, "exec_id": k}),
            ("test_result" if k % 3 == 0 else "run_result", res),
            ("activity", {"state": "idle", "spooled": 0}),
        ]:
            if seq >= n:
                return
            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + seq * 0.1)) + ".%03d+00:00" % (seq % 1000)
            yield seq, kind, payload, ts
            seq += 1
        k += 1


def feed(port: int, token: str, events) -> int:
    ws = WS(port, token)
    ws.wait_ack(-1)
    blob, last = [], -1
    for seq, kind, payload, ts in events:
        blob.append(WS.frame(seq, kind, payload, ts))
        last = seq
        if len(blob) >= 500:
            ws.s.sendall(b"".join(blob))
            blob = []
            ws.wait_ack(last)
    if blob:
        ws.s.sendall(b"".join(blob))
        ws.wait_ack(last)
    ws.s.close()
    return last


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--live", type=int, default=100)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    sgd = os.path.join(a.build, "sandglassd")
    tmp = tempfile.mkdtemp(prefix="sg-bench-console-")
    env = dict(os.environ, SANDGLASS_STATE_DIR=os.path.join(tmp, "state"),
               SANDGLASS_WEB_DIR=os.path.join(ROOT, "web"))
    secret = os.path.join(tmp, "secret")
    ing = subprocess.Popen([sgd, "ingest", "--listen", "127.0.0.1:0", "--store", f"sqlite:{tmp}/events.db",
                            "--secret", secret], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                           text=True)
    try:
        port = int(ing.stdout.readline().strip().rstrip("/").rsplit(":", 1)[1])

        def tok(*args: str) -> str:
            return subprocess.run([sgd, "token", "--secret", secret, *args], capture_output=True, text=True,
                                  env=env, check=True).stdout.strip()

        t0 = time.time() - 86400
        big = ("ann", "bench", "big0000")
        stream_tok = tok("--learner", big[0], "--task", big[1], "--sandbox", big[2], "--ttl", "86400")
        t = time.perf_counter()
        last = feed(port, stream_tok, session_events(a.events, t0))
        print(f"filled: 1 session of {a.events} events in {time.perf_counter() - t:.1f} s", flush=True)
        t = time.perf_counter()
        for i in range(a.sessions - 1):
            feed(port, tok("--learner", f"learner{i:04d}", "--task", f"task{i % 10}", "--sandbox",
                           f"sb{i:05d}"), session_events(8, t0 + i))
        print(f"filled: {a.sessions - 1} sessions of 8 events in {time.perf_counter() - t:.1f} s", flush=True)
        rtok = tok("--read", "--ttl", "86400")
        api_ms = []
        for _ in range(a.runs):  # the list's answer alone, without a browser
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sessions?limit=1000",
                                         headers={"Authorization": f"Bearer {rtok}"})
            t = time.perf_counter()
            with urllib.request.urlopen(req, timeout=120) as f:
                f.read()
            api_ms.append((time.perf_counter() - t) * 1000)
        print(f"GET /v1/sessions of {a.sessions} sessions alone: median {pct(api_ms, 50):.0f} ms", flush=True)
        plan = {"base": f"http://127.0.0.1:{port}/", "token": rtok,
                "session": list(big), "runs": a.runs,
                "live": {"ws": f"ws://127.0.0.1:{port}/v1/ingest", "token": stream_tok, "first_seq": last + 1,
                         "n": a.live, "gap_ms": 20}}
        p = subprocess.run(["node", os.path.join(NODE_DIR, "console_bench.mjs"), chromium, json.dumps(plan)],
                           capture_output=True, text=True, cwd=NODE_DIR, timeout=1800)
        try:
            r = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            sys.exit(f"the browser side failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
        if not r.get("ok"):
            sys.exit(f"the browser side failed: {r.get('error')}")
    finally:
        ing.terminate()
        ing.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)

    fp, ls, lv, la = r["first_paint_ms"], r["list_ms"], r["live_ms"], r["live_ack_ms"]
    res = {
        "events": a.events, "sessions": a.sessions, "runs": a.runs, "live_events": a.live,
        "first_paint_ms": {"median": pct(fp, 50), "max": max(fp), "all": [round(x, 1) for x in fp]},
        "session_rows_rendered": r["session_nodes"],
        "list_ms": {"median": pct(ls, 50), "max": max(ls), "all": [round(x, 1) for x in ls]},
        "list_rows": r["list_rows"], "list_sessions": r.get("list_sessions"),
        "sessions_api_ms": {"median": pct(api_ms, 50), "all": [round(x, 1) for x in api_ms]},
        "live_send_to_screen_ms": {"p50": pct(lv, 50), "p99": pct(lv, 99), "max": max(lv)},
        "live_ack_to_screen_ms": {"p50": pct(la, 50), "p99": pct(la, 99), "max": max(la)},
        "loadavg": os.getloadavg()[0], "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"first paint of a {a.events}-event session: median {res['first_paint_ms']['median']:.0f} ms, "
          f"max {res['first_paint_ms']['max']:.0f} ms over {a.runs} runs (target < 1000 ms; "
          f"{r['session_nodes']} event elements on the first screen's page)")
    print(f"sessions list of {r.get('list_sessions')} sessions ({r['list_rows']} rows drawn, those near the screen): "
          f"median {res['list_ms']['median']:.0f} ms, "
          f"max {res['list_ms']['max']:.0f} ms (target < 300 ms); scrolled to its end, the last row drawn: "
          f"{r.get('list_scroll_end')}")
    print(f"a new event, send -> screen: p50 {pct(lv, 50):.0f} ms, p99 {pct(lv, 99):.0f} ms, max {max(lv):.0f} ms; "
          f"commit ack -> screen: p50 {pct(la, 50):.0f} ms, p99 {pct(la, 99):.0f} ms over {a.live} events "
          f"(target p99 <= 100 ms)")
    print("the session page's last load (marks, ms):", json.dumps(r.get("session_marks")))
    print("the list page's last load (name, start ms, end ms):", json.dumps(r.get("list_timeline")))
    print(f"load average {res['loadavg']:.2f} (a shared machine: the figures move with it)")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "console.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()

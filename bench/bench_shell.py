#!/usr/bin/env python3
"""The learner's terminal, side by side in one run (ratios):

  1. keystroke -> echo: one key typed into an idle interactive bash, the
     time until the terminal shows it; `sandglass shell ID -- bash` against
     the same bash on a bare PTY on the host (`script`), p50 and p99, and
     the latency sandglass adds;
  2. shell start: `sandglass shell ID -- true` (a terminal made inside the
     sandbox, relayed, recorded) against `sandglass exec ID -- true`, both
     started the same way, on a terminal of ours;
  3. output throughput: `cat` of a file through the terminal, against
     `script` on the host.

The sandbox is captured (the capture, its spool and the session's
recording on); no ingest listens, so its events stay in the spool.

Rounds alternate between the two sides, so drift hits both alike.

usage: bench_shell.py [--build DIR] [--samples N] [--mb M]
writes bench/results/shell.json
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def ms(xs: list[float]) -> dict:
    v = [x * 1000 for x in xs]
    return {"n": len(v), "p50_ms": round(pct(v, 50), 4), "p99_ms": round(pct(v, 99), 4),
            "mean_ms": round(statistics.fmean(v), 4)}


class Pty:
    """A program on a terminal of ours (the master end here)."""

    def __init__(self, argv: list[str], env: dict):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

        def ctty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                  start_new_session=True, preexec_fn=ctty)
        os.close(slave)
        self.buf = b""

    def read_until(self, pred, timeout: float = 30) -> bool:
        end = time.monotonic() + timeout
        while not pred(self.buf):
            left = end - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                try:
                    d = os.read(self.master, 1 << 16)
                except OSError:
                    return pred(self.buf)
                if not d:
                    return pred(self.buf)
                self.buf += d
        return True

    def drain(self, quiet: float = 0.3) -> None:
        while True:
            r, _, _ = select.select([self.master], [], [], quiet)
            if not r:
                return
            try:
                if not os.read(self.master, 1 << 16):
                    return
            except OSError:
                return

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        os.close(self.master)


def echo_latency(t: Pty, n: int) -> list[float]:
    """Types a key and waits for its echo, then erases it, n times."""
    out = []
    for _ in range(n):
        t.buf = b""
        t0 = time.perf_counter()
        os.write(t.master, b"x")
        t.read_until(lambda b: b"x" in b, 10)
        out.append(time.perf_counter() - t0)
        t.buf = b""
        os.write(t.master, b"\x7f")
        t.read_until(lambda b: b"\b" in b, 10)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--starts", type=int, default=30)
    ap.add_argument("--mb", type=int, default=100)
    a = ap.parse_args()
    sg = os.path.join(a.build, "sandglass")
    root = tempfile.mkdtemp(prefix="sgb-shell-")
    env = dict(os.environ, SANDGLASS_STATE_DIR=os.path.join(root, "s"), TERM="xterm-256color")
    env["SANDGLASSD"] = os.path.join(a.build, "sandglassd")
    os.makedirs(env["SANDGLASS_STATE_DIR"])
    # Captured (--task): the capture, its spool and the recording all run;
    # no ingest listens, so the events stay in the spool (create warns).
    sid = subprocess.run([sg, "create", "--learner", "bench", "--task", "bench", "--ingest", "ws://127.0.0.1:9"],
                         env=env, capture_output=True, check=True).stdout.decode().strip()
    res: dict = {}
    try:
        bash = ["bash", "--norc", "--noprofile", "-i"]
        ours = Pty([sg, "shell", sid, "--", *bash], env)
        bare = Pty(["script", "-qfc", " ".join(bash), "/dev/null"], env)
        for t in (ours, bare):
            os.write(t.master, b"PS1='P> '\r")
            t.read_until(lambda b: b"P> " in b.replace(b"'P> '", b""))
            t.drain()
        lat = {"sandglass": [], "script": []}
        for _ in range(max(1, a.samples // 50)):  # alternate in blocks of 50
            lat["sandglass"] += echo_latency(ours, 50)
            lat["script"] += echo_latency(bare, 50)
        ours.close()
        bare.close()
        res["echo"] = {k: ms(v) for k, v in lat.items()}
        e = res["echo"]
        res["echo"]["added_p50_ms"] = round(e["sandglass"]["p50_ms"] - e["script"]["p50_ms"], 4)
        res["echo"]["added_p99_ms"] = round(e["sandglass"]["p99_ms"] - e["script"]["p99_ms"], 4)
        res["echo"]["ratio_p50"] = round(e["sandglass"]["p50_ms"] / e["script"]["p50_ms"], 3)

        starts = {"shell -- true": [], "exec -- true": []}
        for _ in range(a.starts):
            t0 = time.perf_counter()
            t = Pty([sg, "shell", sid, "--", "true"], env)
            t.p.wait()
            starts["shell -- true"].append(time.perf_counter() - t0)
            t.close()
            # the same harness (a terminal of ours, the same spawn) for both
            t0 = time.perf_counter()
            t = Pty([sg, "exec", sid, "--", "true"], env)
            t.p.wait()
            starts["exec -- true"].append(time.perf_counter() - t0)
            t.close()
        res["start"] = {k: ms(v) for k, v in starts.items()}
        res["start"]["ratio_p50"] = round(res["start"]["shell -- true"]["p50_ms"] /
                                          res["start"]["exec -- true"]["p50_ms"], 3)

        # throughput: the same bytes through each terminal
        ws = json.loads(open(os.path.join(env["SANDGLASS_STATE_DIR"], "sb", sid, "meta.json")).read())["workspace"]
        big = os.path.join(root, "big")
        with open(big, "wb") as f:
            line = b"".join(b"%07d the quick brown fox jumps over the lazy dog\n" % i for i in range(1000))
            for _ in range(a.mb * (1 << 20) // len(line)):
                f.write(line)
        size = os.path.getsize(big)
        subprocess.run([sg, "exec", sid, "--", "sh", "-c", "cat > /tmp/big"], env=env, stdin=open(big, "rb"),
                       check=True)
        tp = {"sandglass": [], "script": []}
        for _ in range(3):
            for name, argv in (("sandglass", [sg, "exec", sid, "-t", "--", "cat", "/tmp/big"]),
                               ("script", ["script", "-qfc", f"cat {big}", "/dev/null"])):
                t0 = time.perf_counter()
                t = Pty(argv, env)
                got = 0
                while True:
                    try:
                        d = os.read(t.master, 1 << 16)
                    except OSError:
                        break
                    if not d:
                        break
                    got += len(d)
                t.p.wait()
                dt = time.perf_counter() - t0
                t.close()
                tp[name].append(got / dt / 1e6)
        res["throughput_MBps"] = {k: round(statistics.median(v), 1) for k, v in tp.items()}
        res["throughput_MBps"]["ratio"] = round(res["throughput_MBps"]["sandglass"] /
                                                res["throughput_MBps"]["script"], 3)
        res["throughput_MBps"]["file_bytes"] = size
        del ws
    finally:
        subprocess.run([sg, "destroy", sid], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", root])
    out = HERE / "results" / "shell.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    e = res["echo"]
    print(f"keystroke echo p50 {e['sandglass']['p50_ms']} ms vs script {e['script']['p50_ms']} ms "
          f"(x{e['ratio_p50']}), p99 added {e['added_p99_ms']} ms; shell start x{res['start']['ratio_p50']} "
          f"of exec -- true; throughput x{res['throughput_MBps']['ratio']} of script")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The sandbox host's /metrics scrape with N sandboxes (issue 26: under 10 ms
with 1,000).

A state directory of its own holds N sandboxes' counters files as their
supervisors write them (state/counters.h: every histogram filled, a spool
backlog), each sandbox's supervisor.lock held by this process (fcntl, as a
live supervisor holds it: the scan's "dead or alive" look is the real one),
a retired file and a few undelivered spools. `sandglassd host` serves
them; the bench scrapes it R times over HTTP (one connection each, as
Prometheus) and reports the scrape's time as the client sees it and the
daemon's own scan time (sandglass_host_scan_duration_seconds), median and
p99, beside the time of a bare GET of a 404 (the HTTP floor).

usage: bench_host_metrics.py [--build DIR] [--sandboxes N] [--scrapes R]
writes bench/results/host_metrics.json. Never a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUCKETS = 16


def counters_text(i: int) -> str:
    hist = " ".join(str((i + k) % 7) for k in range(BUCKETS + 1))
    return ("sandglass-counters 1\n"
            f"state {i % 3}\nexecs {i} {i // 2} {i % 5} 0\n"
            f"exec_time {hist} {i * 3} {i * 123456789}\n"
            "kills 1 0 0 1 0 0\n"
            f"kill_time {hist} 2 {i * 1000}\n"
            "ooms 0\nlimits 0 0 0 1 0\nexpiries 0 1\n"
            f"ckpt_time {hist} {i} {i * 999}\n"
            f"spool_events {i % 11}\nspool_bytes {i * 512}\n")


def populate(state: str, n: int) -> tuple[list, list]:
    sb = os.path.join(state, "sb")
    os.makedirs(sb)
    held, files = [], []
    for i in range(n):
        sid = secrets.token_hex(6)
        d = os.path.join(sb, sid)
        os.makedirs(d)
        with open(os.path.join(d, "counters"), "w") as f:
            f.write(counters_text(i))
        files.append(os.path.join(d, "counters"))
        fd = os.open(os.path.join(d, "supervisor.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(fd)
    os.makedirs(os.path.join(state, "host"))
    with open(os.path.join(state, "host", "retired"), "w") as f:
        f.write(counters_text(n))
    for k in range(5):
        os.makedirs(os.path.join(state, "undelivered", secrets.token_hex(6)))
    return held, files


def get(url: str) -> tuple[float, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    t0 = time.perf_counter()
    try:
        with opener.open(url, timeout=30) as r:
            body = r.read().decode()
    except urllib.error.HTTPError as e:
        body = e.read().decode()
    return time.perf_counter() - t0, body


def phase(url: str, scrapes: int, files: list) -> dict:
    """scrapes scrapes; with files, each one's mtime moved before each
    scrape (every sandbox's counters changed since the last: each is read)."""
    client, scan, floor = [], [], []
    lines = 0
    for k in range(scrapes):
        for i, path in enumerate(files):
            os.utime(path, ns=(k * 10**9 + i, k * 10**9 + i + 1))
        t, body = get(url)
        client.append(t * 1e3)
        scan.append(float(re.search(r"^sandglass_host_scan_duration_seconds (\S+)$", body, re.M).group(1)) * 1e3)
        lines = body.count("\n")
        floor.append(get(url.replace("/metrics", "/nothing"))[0] * 1e3)
    return {"lines": lines, "scrape_ms_p50": statistics.median(client), "scrape_ms_p99": pct(client, 0.99),
            "scan_ms_p50": statistics.median(scan), "scan_ms_p99": pct(scan, 0.99),
            "http_404_ms_p50": statistics.median(floor)}


def pct(v: list, p: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sandboxes", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "host_metrics.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sg-bench-host-")
    state = os.path.join(tmp, "state")
    held, files = populate(state, a.sandboxes)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDGLASS_")}
    env.update(SANDGLASS_STATE_DIR=state, SANDGLASS_CONFIG="none")
    p = subprocess.Popen([os.path.join(a.build, "sandglassd"), "host", "--metrics-listen", "127.0.0.1:0"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        m = re.match(r"metrics on (http://\S+)", p.stdout.readline())
        if not m:
            print("sandglassd host did not start", file=sys.stderr)
            return 1
        url = m.group(1)
        for _ in range(20):  # warm: the page cache, the daemon's first allocations
            get(url)
        res = {"sandboxes": a.sandboxes, "scrapes": a.scrapes, "target_ms": 10,
               "unchanged": phase(url, a.scrapes, []),
               "all_changed": phase(url, max(20, a.scrapes // 5), files),
               "loadavg_1m": os.getloadavg()[0]}
    finally:
        p.terminate()
        p.wait()
        for fd in held:
            os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{a.sandboxes} sandboxes ({res['unchanged']['lines']} lines a scrape), load average "
          f"{res['loadavg_1m']:.1f} on {os.cpu_count()} CPUs:")
    for name, r in (("no file changed since the last scrape", res["unchanged"]),
                    ("every file changed since the last scrape", res["all_changed"])):
        print(f"  {name}:")
        print(f"    scrape (client, HTTP included)  p50 {r['scrape_ms_p50']:.2f} ms  p99 {r['scrape_ms_p99']:.2f} ms")
        print(f"    scan of the counters (daemon)   p50 {r['scan_ms_p50']:.2f} ms  p99 {r['scan_ms_p99']:.2f} ms")
        print(f"    a 404 on the same server        p50 {r['http_404_ms_p50']:.2f} ms (the HTTP floor)")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

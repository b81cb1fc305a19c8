#!/usr/bin/env python3
"""Failover to another ingest node (issue 26: within 2 s of its death).

One throwaway PostgreSQL cluster, two `sandglassd ingest` nodes on it, a
captured sandbox with `--ingest ws://A,ws://B`. Each round SIGKILLs the
node the uplink is connected to, then, from that moment, runs an exec and
waits until its output is committed (read back through the other node):
the time from the node's death to that event in the store, which includes
the exec itself (its run alone is printed as the anchor). The dead node is
restarted before the next round. Median and max are printed.

Run from a build directory's environment (SANDGLASS_BIN, SANDGLASSD_BIN,
SANDGLASS_EXEC etc. as meson test sets them) or with the binaries on PATH:
    python3 bench/bench_failover.py [--rounds 10]"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from sgtest import IngestNode, PgCluster, have_pg  # noqa: E402
from test_capture import CapEnv  # noqa: E402
from test_failover import marks, stored, uplink_reason  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    rounds = ap.parse_args().rounds
    if not have_pg():
        print("PostgreSQL server binaries not found")
        return 1
    cluster = PgCluster("sg-bench-failover-")
    env = CapEnv()
    nodes: list[IngestNode] = []
    try:
        store = cluster.start()
        nodes = [IngestNode(env.env, store, env.secret) for _ in range(2)]
        sid = env.create("--task", "T", "--ingest", ",".join(n.ws for n in nodes), "--secret", env.secret)
        took, execs = [], []
        for r in range(rounds + 1):
            # the node connected to now
            end = time.monotonic() + 30
            cur = None
            while time.monotonic() < end and cur is None:
                reason = uplink_reason(env, sid)
                for i, n in enumerate(nodes):
                    if f"node {i + 1} of 2" in reason and reason.startswith("connected"):
                        cur = i
                time.sleep(0.01)
            if cur is None:
                print(f"round {r}: no connected node ({uplink_reason(env, sid)})")
                return 1
            other = nodes[1 - cur]
            t0 = time.monotonic()
            nodes[cur].kill()
            e0 = time.monotonic()
            env.sh(sid, f"echo mark-{r}")
            e1 = time.monotonic()
            while f"mark-{r}" not in marks(stored(env, other, sid)):
                if time.monotonic() - t0 > 60:
                    print(f"round {r}: not stored in 60 s")
                    return 1
                time.sleep(0.005)
            if r:  # the first round warms up
                took.append(time.monotonic() - t0)
                execs.append(e1 - e0)
            nodes[cur].start()
        ms = [t * 1000 for t in took]
        print(f"failover: node death -> next event committed through the other node, {rounds} rounds: "
              f"median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms "
              f"(the exec alone: median {statistics.median(execs) * 1000:.1f} ms); target 2000 ms")
        env.destroy(sid)
    finally:
        for n in nodes:
            n.kill()
        env.cleanup()
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

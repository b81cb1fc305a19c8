#!/usr/bin/env python3
"""abort and destroy of a sandbox on another host (through its serve)
beside the same on the host itself (issue 26, "Many hosts, one store").

Two state directories on this machine: host B runs `sandglass serve` and
`sandglass host --serve-url` (registering its sandboxes in a real
ingest's SQLite store); host A has only the CLI. 2N sandboxes on B; the
bench aborts N of them from B (local) and N from A (`--ingest`: the
store's lookup, an action token, POST /v1/abort to B's serve, which runs
B's own `sandglass abort --json`), interleaved, then destroys them the
same way, and reports each command's wall time as the operator sees it
(median, min, max) and the remote/local ratio.

usage: bench_remote.py [--build DIR] [-n N]
writes bench/results/remote.json. Never a test: it asserts nothing but
that the commands succeeded. Needs root (real sandboxes)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "remote.json"))
    a = ap.parse_args()
    os.environ["SANDGLASS_BIN"] = os.path.join(a.build, "sandglass")
    os.environ["SANDGLASSD_BIN"] = os.path.join(a.build, "sandglassd")
    os.environ["SG_BUILD_ROOT"] = a.build
    os.environ["SG_SOURCE_ROOT"] = ROOT
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    from sgtest import Env, wait_for  # noqa: E402
    from test_hosts import Host, Ingest, ls_json  # noqa: E402
    from test_remote import Serve  # noqa: E402

    ea, eb = Env(), Env()
    secret = os.path.join(ea.root, "secret")
    res = {}
    try:
        ing = Ingest(ea, f"sqlite:{os.path.join(ea.root, 'events.db')}", secret)
        srv = Serve(eb, secret)
        n = a.n
        sbs = [eb.create("--learner", "bench") for _ in range(2 * n)]
        host = Host(eb, ing, secret, "host-b", "--serve-url", srv.url)
        if not wait_for(lambda: set(sbs) <= {s["id"] for s in
                                             ls_json(ea, ing, secret).get("host-b", {}).get("sandboxes", [])}, 60):
            raise RuntimeError("host-b never listed its sandboxes")
        remote = ["--ingest", ing.url, "--secret", secret]

        def timed(env, *args) -> float:
            t = time.monotonic()
            p = env.run(*args, timeout=120)
            if p.returncode != 0:
                raise RuntimeError(f"{args}: {p.stderr.decode()}")
            return time.monotonic() - t

        for what in ("abort", "destroy"):
            loc, rem = [], []
            for i in range(n):
                loc.append(timed(eb, what, sbs[i]))
                rem.append(timed(ea, what, sbs[n + i], *remote))
            ms = lambda xs: {"median_ms": round(statistics.median(xs) * 1000, 1),  # noqa: E731
                             "min_ms": round(min(xs) * 1000, 1), "max_ms": round(max(xs) * 1000, 1)}
            res[what] = {"local": ms(loc), "remote": ms(rem),
                         "remote_over_local": round(statistics.median(rem) / statistics.median(loc), 2)}
            print(f"{what}: local {res[what]['local']}, remote {res[what]['remote']}, "
                  f"ratio {res[what]['remote_over_local']}")
        host.stop()
        srv.stop()
        ing.stop()
    finally:
        ea.cleanup()
        eb.cleanup()
    res["n"] = a.n
    res["load_average"] = os.getloadavg()[0]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

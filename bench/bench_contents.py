#!/usr/bin/env python3
"""Storing file contents (issue 24): the store's bytes against the bytes of
the distinct contents a session produced.

A captured sandbox writes files of mixed sizes (text and binary, 100 B to
900 KB), rewrites some to earlier contents (duplicates) and some twice;
then, from the ingest's SQLite store: the bytes the contents take on disk
(dbstat: every page of sg_contents, sg_content_parts and their indexes)
over the sum of the distinct contents' sizes. Target: at most 1.5.

Then the latency side by side: two captured sandboxes on the same ingest,
one with content capture and one without (SANDGLASS_CAPTURE_CONTENTS=0 at
its create), a writer in each, samples alternating between them: file
write -> its file_diff row committed (bench_latency.py's method), each
write a modification of a file made before the sampling. Target:
p50 and p99 with contents at most 1.2x without.

usage: bench_contents.py [--build DIR] [--files N] [--samples N]
writes bench/results/contents.json"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_latency import cap_env  # noqa: E402


# Each sample rewrites a file made before the samples (a "modified": the
# common edit). A new file would measure the watcher's hold instead: a file
# made since the baseline is read SG_WATCH_HOLD_MS (500 ms) after it
# appeared, so that an editor's temporary file renamed into place is never
# reported (capture/watch.h); bench_latency.py reports that figure.
WRITER = ("import sys, time\n"
          "for line in sys.stdin:\n"
          "    i = int(line)\n"
          "    t = time.monotonic()\n"
          "    with open(f'lat/f{i}.txt', 'w') as f: f.write(f'sample {i}\\n' * 20)\n"
          "    sys.stdout.write(f'{i} {t!r}\\n'); sys.stdout.flush()\n")


def latency(env, samples: int) -> dict:
    import subprocess
    import time
    sys.path.insert(0, str(HERE))
    from bench_latency import StoreTail, summary  # noqa: E402
    sids, writers, tails, got = {}, {}, {}, {"with_contents": [], "without_contents": []}
    for mode in got:
        if mode == "without_contents":
            env.env["SANDGLASS_CAPTURE_CONTENTS"] = "0"
        sids[mode] = env.create_captured()
        env.env.pop("SANDGLASS_CAPTURE_CONTENTS", None)
        # the files exist before sampling, so each sample is a modification: a
        # new file is held SG_WATCH_HOLD_MS (500 ms, capture/watch.h) for the
        # rest of an editor's save, which would be all of either side's figure
        env.sh(sids[mode], f"mkdir -p lat && cd lat && for i in $(seq 0 {samples - 1}); do echo init$i > f$i.txt; done")
        writers[mode] = subprocess.Popen([os.environ["SANDGLASS_BIN"], "exec", sids[mode], "--", "python3", "-S",
                                          "-c", WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         env=env.env, text=True, bufsize=1)
        tails[mode] = StoreTail(env.db, sids[mode])
    for mode, tail in tails.items():  # every file's creation stored before the first sample
        last = f"lat/f{samples - 1}.txt"
        t, _, _ = tail.wait(lambda k, p: k == "file_diff" and p.get("path") == last, timeout=120)
        assert t is not None, f"{mode}: the files' creation never reached the store"
    try:
        for i in range(samples):
            for mode in (got if i % 2 else reversed(list(got))):
                w = writers[mode]
                w.stdin.write(f"{i}\n")
                w.stdin.flush()
                path = f"lat/f{i}.txt"
                t1, pl, _ = tails[mode].wait(lambda k, p: k == "file_diff" and p.get("path") == path
                                             and p.get("change") == "modified")
                n, t_write = w.stdout.readline().split()
                if t1 is not None:
                    got[mode].append(t1 - float(t_write))
    finally:
        for w in writers.values():
            w.stdin.close()
            w.wait(timeout=60)
    res = {m: summary(v) for m, v in got.items()}
    on, off = res["with_contents"], res["without_contents"]
    res["ratio_p50"] = round(on["p50_ms"] / off["p50_ms"], 3)
    res["ratio_p99"] = round(on["p99_ms"] / off["p99_ms"], 3)
    res["target_ratio"] = 1.2
    res["target_met"] = res["ratio_p50"] <= 1.2 and res["ratio_p99"] <= 1.2
    for sid in sids.values():
        env.destroy(sid)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("SG_BUILD", "build"))
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--out", default=str(HERE / "results" / "contents.json"))
    a = ap.parse_args()
    env = cap_env(a.build)
    try:
        sid = env.create_captured()
        script = ("import os, random\n"
                  "random.seed(7)\n"
                  f"n = {a.files}\n"
                  "for i in range(n):\n"
                  "    size = random.choice([100, 2000, 30000, 200000, 900000])\n"
                  "    data = os.urandom(size) if i % 3 == 0 else (('line %d of file %d\\n' % (i, i)) * (size // 20)).encode()\n"
                  "    open('f%d.dat' % i, 'wb').write(data)\n"
                  "for i in range(0, n, 5):\n"
                  "    open('f%d.dat' % i, 'wb').write(open('f%d.dat' % (i + 1), 'rb').read())\n")
        p = env.exec(sid, "python3", "-S", "-c", script, timeout=600)
        assert p.returncode == 0, p.stderr
        env.run("checkpoint", sid, "--label", "end")
        env.wait_rows(sid, lambda r: any(x["payload"].get("label") == "end" for x in r
                                         if x["kind"] == "checkpoint"), 300)
        env.destroy(sid)
        con = sqlite3.connect(f"file:{env.db}?mode=ro", uri=True)
        distinct, n = con.execute("SELECT sum(size), count(*) FROM sg_contents").fetchone()
        pages = con.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'sg_content%'"
                            " OR name LIKE 'sqlite_autoindex_sg_content%'").fetchone()[0]
        con.close()
        res = {"contents": n, "distinct_content_bytes": distinct, "store_bytes": pages,
               "ratio": round(pages / distinct, 3) if distinct else None, "target_ratio": 1.5}
        res["target_met"] = res["ratio"] is not None and res["ratio"] <= 1.5
        res["latency"] = latency(env, a.samples)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res, indent=2))
        return 0
    finally:
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())

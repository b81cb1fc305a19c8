#!/usr/bin/env python3
"""Storing file contents (issue 24): the store's bytes against the bytes of
the distinct contents a session produced.

A captured sandbox writes files of mixed sizes (text and binary, 100 B to
900 KB), rewrites some to earlier contents (duplicates) and some twice;
then, from the ingest's SQLite store: the bytes the contents take on disk
(dbstat: every page of sg_contents, sg_content_parts and their indexes)
over the sum of the distinct contents' sizes. Target: at most 1.5.

usage: bench_contents.py [--build DIR] [--files N]
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("SG_BUILD", "build"))
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--out", default=str(HERE / "results" / "contents.json"))
    a = ap.parse_args()
    build = Path(a.build).resolve()
    os.environ.setdefault("SANDGLASS_BIN", str(build / "sandglass"))
    os.environ.setdefault("SANDGLASSD_BIN", str(build / "sandglassd"))
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from test_capture import CapEnv  # noqa: E402

    env = CapEnv()
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
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res, indent=2))
        return 0
    finally:
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())

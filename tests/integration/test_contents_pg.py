#!/usr/bin/env python3
"""Issue 24 on PostgreSQL: a captured sandbox against `sandglassd ingest
--store postgresql://...` (a throwaway cluster made by scripts/pg-server.sh):
its files' contents and its terminal recording reach the store, and
`sandglass workspace --at` / `sandglass cast` give them back after destroy.
Skipped (as test_ingest_pg.py) where the server binaries are missing. TAP."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import PG_SKIP, IngestNode, PgCluster, have_pg, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402
from test_contents import snapshot  # noqa: E402


def rebuilt(env: CapEnv, sid: str, where: str, out: str) -> dict:
    p = env.run("workspace", "--sandbox", sid, "--at", "1000000000", "--out", out,
                "--ingest", f"http://{where}", "--secret", env.secret)
    got = snapshot(out) if p.returncode == 0 else {}
    subprocess.run(["rm", "-rf", out])
    return got


def run(env: CapEnv, url: str) -> None:
    ing = IngestNode(env.env, url, env.secret)
    where = f"127.0.0.1:{ing.port}"
    try:
        sid = env.create("--task", "T", "--ingest", f"ws://{where}", "--secret", env.secret)
        env.sh(sid, "printf 'hello\\n' > a.txt; head -c 70000 /dev/urandom > b.bin; ln -s a.txt l;"
                    " mkdir d; printf '' > d/empty; printf x > gone; rm gone")
        subprocess.run(["script", "-qec", f"{os.environ.get('SANDGLASS_BIN', 'sandglass')} exec -t {sid} --"
                        " /bin/sh -c 'echo pg-cast'", "/dev/null"], env=env.env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, timeout=120)
        env.run("checkpoint", sid, "--label", "end")
        want = snapshot(env.workspace(sid))
        casts = sorted(os.listdir(env.sbdir(sid, "casts")))
        local = open(env.sbdir(sid, "casts/" + casts[-1]), "rb").read() if casts else b""
        out = os.path.join(env.root, "pg-out")
        end = time.monotonic() + 120
        got = {}
        while time.monotonic() < end and got != want:
            got = rebuilt(env, sid, where, out)
            time.sleep(0.2)
        tap.ok(got == want, "PostgreSQL: the workspace rebuilt from the store", repr((sorted(want), sorted(got))))
        env.destroy(sid)
        tap.ok(rebuilt(env, sid, where, out) == want, "PostgreSQL: the same after destroy", "")
        p = env.run("cast", sid, "--ingest", f"http://{where}", "--secret", env.secret)
        tap.ok(p.stdout == local and b"pg-cast" in local, "PostgreSQL: the recording after destroy, byte for byte",
               p.stderr.decode(errors="replace"))
    finally:
        ing.kill(signal.SIGTERM)


def main() -> int:
    if not have_pg():
        print(PG_SKIP)
        return 0
    cluster = PgCluster("sg-contents-pg-")
    env = CapEnv()
    try:
        run(env, cluster.start())
    finally:
        env.cleanup()
        cluster.close()
    tap.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())

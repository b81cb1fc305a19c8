#!/usr/bin/env python3
"""GET /v1/stream with two `sandglassd ingest` nodes on one PostgreSQL
(a throwaway cluster made by scripts/pg-server.sh).

Four writers stream at once, two through each node; a subscriber on each
node (no filter, and a filter spanning the four streams) must get every
committed event in id order, once, with none skipped: a row can never
become visible after a higher id (the store's commit order, store.h), and
each node hears the other's commits (LISTEN/NOTIFY). Then a commit through
node B alone reaches node A's subscriber, also after the database went
away and came back under it. Skips (TAP `1..0 # SKIP`) without the
PostgreSQL server binaries. Every wait is for a condition."""

import os
import subprocess
import sys
import tempfile
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import Ingest, check, check_sanitizers, token, run, wait_until  # noqa: E402
import test_ingest  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402
from test_stream import Follower, Writer, key, store_rows  # noqa: E402


def main():
    if subprocess.run(["bash", PG, "have"]).returncode != 0:
        where = os.environ.get("PGBIN") or "/usr/lib/postgresql/*/bin"
        print(f"1..0 # SKIP PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {where}: "
              "apt-get install postgresql (scripts/install-deps.sh does)")
        return 0
    tmp = tempfile.mkdtemp(prefix="sg-stream-pg-")
    os.chmod(tmp, 0o711)  # the server runs as `postgres` when we are root
    pgdir = os.path.join(tmp, "pg")
    port = free_port()
    followers = []
    try:
        url = pg("start", pgdir, port)
        state = os.path.join(tmp, "state")
        os.makedirs(state)
        a = Ingest(state, extra=("--store", url))
        b = Ingest(state, extra=("--store", url))
        rtok = run("token", "--read", state=state).stdout.strip()
        fa = Follower(lambda: a.port, rtok)
        fb = Follower(lambda: b.port, rtok, "task=pg")
        followers += [fa, fb]
        N = 1500
        writers = [Writer(lambda n=node: n.port, token(state, "ann", "pg", f"w{k}"), N,
                          {"data": "z" * 100})
                   for k, node in enumerate((a, b, a, b))]
        done = all(w.done.wait(600) for w in writers)
        check("four writers through two nodes at once: all acked", done, [w.acked for w in writers])
        want = [key(e) for e in store_rows(a, task="pg")]
        check("the store holds every event", len(want) == 4 * N, len(want))
        for name, f in (("node A's subscriber (no filter)", fa),
                        ("node B's subscriber (task filter)", fb)):
            f.wait_count(len(want), 300)
            got = [key(e) for e in f.events]
            check(f"{name}: every committed event, in id order, once, none skipped", got == want,
                  f"got {len(got)} want {len(want)}; missing {len(set(want) - set(got))}")

        # A commit through B alone: A hears it from the database.
        w = Writer(lambda: b.port, token(state, "ann", "pg", "only-b"), 10)
        w.done.wait(120)
        check("a commit on node B reaches node A's subscriber with no commit on A",
              fa.wait_count(len(want) + 10, 120), len(fa.events))

        pg("kill", pgdir, port)
        pg("start", pgdir, port)
        w = Writer(lambda: b.port, token(state, "ann", "pg", "after-outage"), 10)
        check("after the database went away and came back: B commits again", w.done.wait(300))
        check("and A's subscriber hears it (the notice connection is made anew)",
              fa.wait_count(len(want) + 20, 300), len(fa.events))
        final = [key(e) for e in store_rows(a)]
        fa_keys = [key(e) for e in fa.events]
        check("node A's subscriber equals the store, in order, once", fa_keys == final,
              f"{len(fa_keys)} vs {len(final)}")
    finally:
        for f in followers:
            f.close()
        for ing in Ingest.started:
            if ing.proc.poll() is None:
                ing.stop()
        try:
            pg("stop", pgdir, port)
        except Exception as e:  # noqa: BLE001
            print(f"# pg stop: {e}")
        check_sanitizers()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Issue 26: `--ingest URL,URL` fails over between ingest nodes of one store.

One throwaway PostgreSQL cluster (scripts/pg-server.sh) and two real
`sandglassd ingest --store postgresql://...` nodes on it; a captured
sandbox created with `--ingest ws://A,ws://B` runs execs. Node A is killed
(SIGKILL, by pid): the events that follow reach the store through B and
`ls` names node 2. A is restarted and B killed: they come back through A.
In the end every event is in the store exactly once, in order (seqs 0..N
with no gap and no duplicate, each exec's mark once), and `sandglass
events --ingest http://DEAD,http://ALIVE` reads through the node that
answers. Skips (as test_ingest_pg.py) where the PostgreSQL server binaries
are missing. Every wait is for a condition. TAP."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import PG_SKIP, IngestNode, PgCluster, await_true, have_pg, read_token, stored_events, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402


def stored(env: CapEnv, node: IngestNode, sid: str) -> list[dict]:
    """Every stored event of the sandbox, read through node."""
    return stored_events(node.http, read_token(env.env, env.secret), sid)


def marks(events: list[dict]) -> list[str]:
    """The marks the execs printed, in store order (one stdout event each)."""
    got = []
    for e in events:
        if e.get("kind") == "stdout":
            text = json.dumps(e.get("payload", e))
            got += [w for w in text.replace("\\n", " ").replace('"', " ").split() if w.startswith("mark-")]
    return got


def uplink_reason(env: CapEnv, sid: str) -> str:
    for sb in env.ls():
        if sb["id"] == sid:
            u = sb.get("uplink") or {}
            return f"{u.get('state')}: {u.get('reason')}"
    return ""


def run(env: CapEnv, store: str) -> None:
    a = IngestNode(env.env, store, env.secret)
    b = IngestNode(env.env, store, env.secret)
    nodes = [a, b]
    try:
        sid = env.create("--task", "T", "--ingest", f"{a.ws},{b.ws}", "--secret", env.secret)
        n = 0

        def execs(k: int, node: IngestNode, what: str) -> None:
            nonlocal n
            first = n
            for _ in range(k):
                p = env.sh(sid, f"echo mark-{n}")
                if p.returncode != 0:
                    tap.ok(False, f"{what}: exec mark-{n}", p.stderr.decode(errors="replace"))
                n += 1
            want = [f"mark-{i}" for i in range(first, n)]
            await_true(lambda: all(m in marks(stored(env, node, sid)) for m in want),
                       f"{what}: execs mark-{first}..mark-{n - 1} stored through {node.ws}", timeout=60,
                       diag=lambda: repr(marks(stored(env, node, sid))[-10:]))

        execs(3, a, "both nodes up")
        await_true(lambda: "connected: connected to node 1 of 2" in uplink_reason(env, sid),
                   "ls: connected to node 1 of 2", timeout=30, diag=lambda: uplink_reason(env, sid))
        ls_text = env.run("ls").stdout.decode(errors="replace")
        tap.ok(f"connected to node 1 of 2 (127.0.0.1:{a.port})" in ls_text, "ls (text) names the node",
               ls_text)

        a.kill()
        execs(3, b, "node 1 killed")
        await_true(lambda: "connected to node 2 of 2" in uplink_reason(env, sid), "ls: connected to node 2 of 2",
                   timeout=30, diag=lambda: uplink_reason(env, sid))

        a.start()
        b.kill()
        execs(3, a, "node 1 back, node 2 killed")
        await_true(lambda: "connected to node 1 of 2" in uplink_reason(env, sid),
                   "ls: connected to node 1 of 2 again", timeout=30, diag=lambda: uplink_reason(env, sid))

        # REST reads try the list's other node when one is down (B is).
        p = env.run("events", "--sandbox", sid, "--ingest", f"{b.http},{a.http}", "--secret", env.secret,
                    "--json")
        out = p.stdout.decode(errors="replace")
        tap.ok(p.returncode == 0 and "mark-0" in out and f"mark-{n - 1}" in out,
               "events --ingest DEAD,ALIVE reads through the node that answers",
               f"rc {p.returncode}: {p.stderr.decode(errors='replace')[-400:]}")

        b.start()
        d = env.destroy(sid)  # delivers what is left, through either node
        tap.ok(d.returncode == 0, "destroy delivers the rest", d.stderr.decode(errors="replace"))
        ev = stored(env, b, sid)
        seqs = [e["seq"] for e in ev]
        tap.ok(seqs == list(range(len(seqs))) and len(seqs) > 0,
               f"every event stored exactly once, in order (seqs 0..{len(seqs) - 1})",
               repr([s for i, s in enumerate(seqs) if s != i][:10]))
        got = marks(ev)
        tap.ok(got == [f"mark-{i}" for i in range(n)], f"each of the {n} execs' output stored once, in order",
               repr(got))
        tap.ok(ev == stored(env, a, sid), "both nodes read the same store", "")
    finally:
        for nd in nodes:
            nd.kill()


def main() -> int:
    if not have_pg():
        print(PG_SKIP)
        return 0
    cluster = PgCluster("sg-failover-")
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

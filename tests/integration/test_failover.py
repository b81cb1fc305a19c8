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
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASSD, await_true, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402


class Node:
    """An ingest node on the shared store, restartable on its port."""

    def __init__(self, env: CapEnv, store: str) -> None:
        self.env, self.store, self.port = env, store, free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, deadline_s: float = 20.0) -> None:
        end = time.monotonic() + deadline_s
        while True:
            p = subprocess.Popen([SANDGLASSD, "ingest", "--listen", f"127.0.0.1:{self.port}", "--store",
                                  self.store, "--secret", self.env.secret],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env.env, text=True)
            line = p.stdout.readline()
            if line.startswith("listening on ws://127.0.0.1:"):
                self.proc = p
                return
            p.wait()
            if time.monotonic() > end:  # the old listener's port may be held a moment
                raise RuntimeError(f"ingest did not start on port {self.port}: {line!r}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def stored(env: CapEnv, node: Node, sid: str) -> list[dict]:
    """Every stored event of the sandbox, read through node, page by page."""
    tok = subprocess.run([SANDGLASSD, "token", "--read", "--secret", env.secret], capture_output=True,
                         text=True, env=env.env, check=True).stdout.strip()
    out, after = [], -1
    while True:
        q = urllib.parse.urlencode({"sandbox": sid, "after_seq": after, "limit": 1000})
        req = urllib.request.Request(f"{node.http}/v1/events?{q}", headers={"Authorization": f"Bearer {tok}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            page = json.loads(r.read())["events"]
        if not page:
            return out
        out += page
        after = page[-1]["seq"]


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
    a = Node(env, store)
    b = Node(env, store)
    nodes = [a, b]
    try:
        sid = env.create("--task", "T", "--ingest", f"{a.ws},{b.ws}", "--secret", env.secret)
        n = 0

        def execs(k: int, node: Node, what: str) -> None:
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
    if subprocess.run(["bash", PG, "have"]).returncode != 0:
        print("1..0 # SKIP PostgreSQL server binaries not found (scripts/install-deps.sh installs them)")
        return 0
    tmp = tempfile.mkdtemp(prefix="sg-failover-")
    os.chmod(tmp, 0o711)  # the server runs as `postgres` when we are root
    pgdir, port = os.path.join(tmp, "pg"), free_port()
    env = CapEnv()
    try:
        run(env, pg("start", pgdir, port))
    finally:
        env.cleanup()
        try:
            pg("stop", pgdir, port)
        except RuntimeError:
            pass
        subprocess.run(["rm", "-rf", tmp])
    tap.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Attack: take over a stream's seqs through a second ingest node. Several
nodes share one PostgreSQL database; the order rule (a seq is the stream's
next, or an identical resend) must come from the database inside the
transaction, not from one node's memory. A forger on node B, connected
before the real client's events reached node A, tries to rewrite them and
to skip ahead; the real client then goes on through either node. Skips
without the PostgreSQL server binaries."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, read_token, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

ROOT = os.environ.get("SG_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG = os.path.join(ROOT, "scripts", "pg-server.sh")
FAKE = {"data": "===== 42 passed =====", "stream": "stdout"}


def real(i):
    return {"data": f"real {i}", "stream": "stdout"}


if subprocess.run(["bash", PG, "have"], capture_output=True).returncode != 0:
    print("1..0 # SKIP PostgreSQL server binaries not found (scripts/install-deps.sh installs them)")
    sys.exit(0)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
tmp = tempfile.mkdtemp(prefix="sg-adv-pg-")
os.chmod(tmp, 0o711)  # the server runs as `postgres` when we are root
pgdir = os.path.join(tmp, "pg")
state = os.path.join(tmp, "state")
os.makedirs(state)
nodes = []
try:
    p = subprocess.run(["bash", PG, "start", pgdir, str(port)], capture_output=True, text=True, timeout=120)
    url = p.stdout.strip()
    tap.ok(p.returncode == 0 and url.startswith("postgresql://"), "a throwaway PostgreSQL cluster", p.stderr)
    a = Ingest(state, extra=("--store", url))
    nodes.append(a)
    b = Ingest(state, extra=("--store", url))
    nodes.append(b)
    tok = token(state, "learner", "task", "pgsb")
    forger = connect(b, tok)
    tap.eq(forger.wait_ack(None), -1, "the forger connects to node B before the stream starts")
    client = connect(a, tok)
    client.wait_ack(None)
    for i in range(10):
        client.send_event(i, "stdout", real(i))
    tap.eq(client.wait_ack(9), 9, "the real client stores 0..9 through node A")
    forger.send_event(3, "stdout", FAKE)  # node B's memory has nothing of 0..9
    tap.eq(forger.wait_close(), 1008, "rewriting seq 3 through node B: refused (the database has it)")
    forger.close()
    forger = connect(b, tok)
    tap.eq(forger.wait_ack(None), 9, "a new forger connection on B sees ack 9")
    forger.send_event(50, "stdout", FAKE)
    tap.eq(forger.wait_close(), 1008, "skipping ahead through node B: refused")
    forger.close()
    # The client moves to node B for 10..14, and comes back on its old
    # connection to A for 15 (A's memory still says 10).
    moved = connect(b, tok)
    moved.wait_ack(None)
    for i in range(10, 15):
        moved.send_event(i, "stdout", real(i))
    tap.eq(moved.wait_ack(14), 14, "10..14 through node B")
    moved.close()
    client.send_event(15, "stdout", real(15))
    tap.eq(client.wait_ack(15), 15, "15 on the old connection to A: the next seq comes from the database")
    client.close()
    code, body = http(a.port, "/v1/events?sandbox=pgsb", read_token(state))
    tap.eq([e["payload"]["data"] for e in body["events"]], [f"real {i}" for i in range(16)],
           "the stream holds the real events only, once each")
    tap.ok(still_serving(a, state, "alive-a") and still_serving(b, state, "alive-b"), "both nodes still serve")
finally:
    for n in nodes:
        n.stop()
    subprocess.run(["bash", PG, "stop", pgdir, str(port)], capture_output=True, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)
tap.done()

#!/usr/bin/env python3
"""Two real `sandglassd ingest --store postgresql://...` nodes sharing one
PostgreSQL database (a throwaway cluster made by scripts/pg-server.sh).

A client streams half its events to node A, moves to node B and replays
from B's ack: every event stored exactly once, in order, acks only after
commit, both nodes see everything. Then both nodes take the same stream at
once, and the database goes away and comes back under a running node.
Skips (TAP `1..0 # SKIP`, with the reason) when the PostgreSQL server
binaries are not installed; CI installs them and counts that skip as a
failure. No check depends on the machine's speed: every wait is for a
condition, with a generous timeout."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import Ingest, check, connect, token, wait_until  # noqa: E402
import test_ingest  # noqa: E402

# The cluster's script and its helpers live in sgtest (shared with the
# failover and deployment tests and benches); these names stay importable
# from here for the tests that take them from this file.
from sgtest import PG, ROOT, free_port, pg  # noqa: E402,F401


def all_events(ing, sandbox):
    seqs, after = [], -1
    while True:
        page = ing.events(sandbox, after_seq=after)
        if not page:
            return seqs
        seqs += [e["seq"] for e in page]
        after = page[-1]["seq"]


def committed_range(ing, sandbox, lo, hi):
    """True if seqs lo..hi are all readable (committed) through ing."""
    after, want = lo - 1, lo
    while want <= hi:
        page = ing.events(sandbox, after_seq=after)
        got = [e["seq"] for e in page if e["seq"] <= hi]
        if not got or got != list(range(want, want + len(got))):
            return False
        want += len(got)
        after = got[-1]
    return True


def raw_get(port, path, tok):
    """A GET sent on a connection of its own, its answer left unread."""
    s = socket.create_connection(("127.0.0.1", port), timeout=test_ingest.T)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n\r\n".encode())
    return s


def raw_status(s):
    """The status of the answer on s (None: closed before one came)."""
    data = b""
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return None
        data += chunk
    return int(data.split(b" ", 2)[1])


def pages_off_the_loop(a, url, tok):
    """/v1/events on PostgreSQL (ingest_pages.c): a page waiting for the
    database holds one of the node's two readers, never its loop; 64 more
    wait, past that 503; clients that go away or never read their answers
    hold no reader."""
    lock = subprocess.Popen(["psql", "-X", "-q", "-d", url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    held = []
    try:
        lock.stdin.write("BEGIN;\nLOCK TABLE sg_events IN ACCESS EXCLUSIVE MODE;\n\\echo locked\n")
        lock.stdin.flush()
        check("a session holds sg_events locked", lock.stdout.readline().strip() == "locked")
        held = [raw_get(a.port, "/v1/events?sandbox=move", tok) for _ in range(2 + 64)]

        def stats():
            return a.http("/v1/stats")[1]
        check("two pages wait on the database, 64 wait for a reader, and the loop answers meanwhile",
              wait_until(lambda: (stats()["pages_reading"], stats()["pages_waiting"]) == (2, 64)), stats())
        waiting = subprocess.run(["psql", "-X", "-At", "-d", url, "-c",
                                  "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                  " AND application_name = 'sandglass-ingest'"],
                                 capture_output=True, text=True).stdout.strip()
        check("the node holds two database connections for its pages, not one a request", waiting == "2", waiting)
        code, body = a.http("/v1/events?sandbox=move")
        check("one more page is refused with 503, saying why",
              code == 503 and "too many reads" in body.get("error", ""), f"{code} {body}")
        code, body = a.http("/v1/sandboxes")
        check("and so is the list of sandboxes, read the same way",
              code == 503 and "too many reads" in body.get("error", ""), f"{code} {body}")
        for s in held[40:]:
            s.close()  # lws sees it when it writes their answers: thrown away then
        lock.stdin.write("ROLLBACK;\n")
        lock.stdin.flush()
        check("with the table free every page is read, while their clients have read nothing",
              wait_until(lambda: (stats()["pages_reading"], stats()["pages_waiting"]) == (0, 0)), stats())
        codes = [raw_status(s) for s in held[:40]]
        check("and each waiting client gets its page", codes == [200] * 40, codes)
        check("the node reads pages as before", all_events(a, "move") == list(range(4000)))
        code, body = a.http("/v1/events?sandbox=move&after_seq=1999&limit=1000")
        check("a full page with rows after it says more",
              code == 200 and len(body["events"]) == 1000 and body["more"] is True
              and body.get("next_after_seq") == 2999, {k: body.get(k) for k in ("more", "next_after_seq")})
        code, body = a.http("/v1/events?sandbox=move&after_seq=2999&limit=1000")
        check("a full page that ends the stream says no more",
              code == 200 and len(body["events"]) == 1000 and body["more"] is False
              and "next_after_seq" not in body, {k: body.get(k) for k in ("more", "next_after_seq")})
        code, body = a.http("/v1/sandboxes?prefix=move")
        check("and lists the sandboxes a prefix names", code == 200
              and [s["sandbox"] for s in body["sandboxes"]] == ["move"], f"{code} {body}")
    finally:
        for s in held:
            s.close()
        lock.stdin.close()
        lock.wait(timeout=test_ingest.T)


class AckReader:
    """Collects a connection's acks on a thread; checks each one against the
    database through the other node the moment it arrives."""

    def __init__(self, ws, verify=None, sandbox=None):
        self.ws, self.verify, self.sandbox = ws, verify, sandbox
        self.acks, self.bad = [], []
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        import json
        while not self.stop.is_set():
            try:
                op, p = self.ws.recv(0.2)
            except TimeoutError:
                continue
            except (ConnectionError, OSError, ValueError):
                return
            if op == 0x8:
                return
            if op == 0x1:
                a = json.loads(p)["ack"]
                prev = self.acks[-1] if self.acks else -1
                self.acks.append(a)
                # What this ack adds must already be committed.
                if self.verify and a > prev and \
                        not committed_range(self.verify, self.sandbox, prev + 1, a):
                    self.bad.append(a)

    def last(self):
        return self.acks[-1] if self.acks else None

    def wait(self, want, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.acks and self.acks[-1] >= want:
                return True
            time.sleep(0.01)
        return False

    def close(self):
        self.stop.set()
        self.ws.close()
        self.th.join(timeout=2)


def main():
    if subprocess.run(["bash", PG, "have"]).returncode != 0:
        where = os.environ.get("PGBIN") or "/usr/lib/postgresql/*/bin"
        print(f"1..0 # SKIP PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {where}: "
              "apt-get install postgresql (scripts/install-deps.sh does)")
        return 0
    tmp = tempfile.mkdtemp(prefix="sg-ingest-pg-")
    os.chmod(tmp, 0o711)  # the server runs as `postgres` when we are root
    pgdir = os.path.join(tmp, "pg")
    port = free_port()
    nodes = []
    try:
        url = pg("start", pgdir, port)
        check("throwaway PostgreSQL cluster started", url.startswith("postgresql://"), url)
        state = os.path.join(tmp, "state")  # one secret for both nodes
        os.makedirs(state)
        a = Ingest(state, extra=("--store", url))
        nodes.append(a)
        b = Ingest(state, extra=("--store", url))
        nodes.append(b)
        check("two ingest nodes on one database", a.port != b.port and a.port > 0 and b.port > 0)

        # ---- half to A, move to B, replay from B's ack
        N = 4000
        tok = token(state, "lena", "t1", "move")
        ca = connect(a, tok)
        ra = AckReader(ca, verify=b, sandbox="move")
        payload = {"data": "tab\there \\ nl\n é " + "x" * 50}
        for i in range(N // 2):
            ca.send_event(i, "stdout", dict(payload, i=i))
        check("node A acks the first half", ra.wait(N // 2 - 1), f"last ack {ra.last()}")
        ra.close()  # an abrupt end: the client goes elsewhere
        cb = connect(b, tok)
        rb = AckReader(cb, verify=a, sandbox="move")
        check("node B's first ack is what node A committed (read from the table)",
              rb.wait(-1) and rb.acks[0] == ra.last(),
              f"A's last ack {ra.last()}, B's first {rb.acks[:1]}")
        start = rb.acks[0] + 1 if rb.acks else 0
        for i in range(start, N):
            cb.send_event(i, "stdout", dict(payload, i=i))
        done = rb.wait(N - 1, timeout=300)
        rb.close()
        check("node B acks the whole stream", done, f"last ack {rb.last()}")
        check("every ack came after its rows were committed (seen through the other node)",
              not ra.bad and not rb.bad and len(ra.acks) > 1 and len(rb.acks) > 1,
              f"bad A {ra.bad[:5]} bad B {rb.bad[:5]}")
        sa, sb = all_events(a, "move"), all_events(b, "move")
        check("every event exactly once, in order, seen from node A", sa == list(range(N)),
              f"n={len(sa)}")
        check("and the same from node B", sb == sa)
        ev = a.events("move", after_seq=9)[0]
        check("payload and identity intact", ev["seq"] == 10 and ev["payload"]["i"] == 10
              and ev["payload"]["data"] == payload["data"] and ev["learner"] == "lena"
              and ev["task"] == "t1", ev)
        code, body = b.http("/v1/sandboxes")
        mv = [s for s in body.get("sandboxes", []) if s["sandbox"] == "move"]
        check("GET /v1/sandboxes on B: count and acked_seq", code == 200 and len(mv) == 1
              and mv[0]["events"] == N and mv[0]["acked_seq"] == N - 1, mv)

        # ---- the same stream through both nodes at once (overlapping replays)
        M = 3000
        tok2 = token(state, "lena", "t1", "both")
        c1, c2 = connect(a, tok2), connect(b, tok2)
        r1, r2 = AckReader(c1), AckReader(c2)
        r1.wait(-1)
        r2.wait(-1)

        def send(ws, order):
            for i in order:
                ws.send_event(i, "command", {"cmd": f"echo {i}"})

        # A sends everything ascending; B sends the first half, then
        # replays all from 0 (each frame the stream's next seq or an
        # identical resend: sending ahead is refused, see test_ingest.py).
        t1 = threading.Thread(target=send, args=(c1, range(M)))
        t2 = threading.Thread(target=send, args=(c2, list(range(M // 2)) + list(range(M))))
        t1.start()
        t2.start()
        t1.join()
        t2.join()
        ok1, ok2 = r1.wait(M - 1, 300), r2.wait(M - 1, 300)
        r1.close()
        r2.close()
        both = all_events(b, "both")
        check("two nodes writing one stream at once: both ack the end", ok1 and ok2,
              f"A {r1.last()} B {r2.last()}")
        check("two nodes writing one stream at once: one row per seq", both == list(range(M)),
              f"n={len(both)}")
        check("acks never go backwards on a connection",
              all(x <= y for x, y in zip(r1.acks, r1.acks[1:])) and
              all(x <= y for x, y in zip(r2.acks, r2.acks[1:])))

        pages_off_the_loop(a, url, a.read_token)

        # ---- the database goes away under a running node, then comes back
        tok3 = token(state, "lena", "t1", "outage")
        c3 = connect(a, tok3)
        r3 = AckReader(c3)
        for i in range(100):
            c3.send_event(i)
        check("acks up to 99 with the database up", r3.wait(99), f"acks {r3.acks[-5:]}")
        pg("kill", pgdir, port)
        mark = len(a.stderr)

        def failures():
            return sum("commit failed" in line for line in a.stderr[mark:])
        for i in range(100, 200):
            c3.send_event(i)
        # Wait for the node to have tried (and failed) to commit them, then
        # for a retry to fail too: acks come only after a commit, so none
        # past 99 may have come.
        check("the node tries the commit and retries it while the database is down",
              wait_until(lambda: failures() >= 3), "".join(a.stderr[mark:])[-600:])
        check("no ack past what was committed while the database is down",
              r3.last() == 99, f"acks {r3.acks[-5:]}")
        # README: retried with backoff, 100 ms doubling up to 5 s (each
        # failure logs the delay before the next try).
        delays = [int(m) for m in re.findall(r"commit failed \(retrying in (\d+) ms\)", "".join(a.stderr[mark:]))]
        check("the retries back off: 100 ms, doubling, at most 5 s",
              delays[:3] == [100, 200, 400] and all(d <= 5000 for d in delays)
              and all(b in (2 * x, 5000) for x, b in zip(delays, delays[1:])), f"delays {delays}")
        code, body = a.http("/v1/events?sandbox=outage")
        msg = (body or {}).get("error", "")
        check("HTTP answers 500 with the server address in the error",
              code == 500 and f"127.0.0.1:{port}" in msg, f"{code} {body}")
        logs = "".join(a.stderr)
        check("the node logs the failed commit with the server address",
              "commit failed" in logs and f"127.0.0.1:{port}" in logs, logs[-600:])
        check("node A is still running", a.proc.poll() is None)
        pg("start", pgdir, port)
        # The node keeps the accepted rows and retries by itself: with no new
        # frame from the client, the rows it held get committed and acked.
        check("once the database is back the node's own retry commits the rows it kept (ack 199, "
              "no frame resent)", r3.wait(199), f"acks {r3.acks[-5:]}")
        r3.close()
        # A client that reconnects resumes from the stored ack.
        c4 = connect(a, tok3)
        r4 = AckReader(c4)
        r4.wait(-1)
        first = r4.acks[0] if r4.acks else None
        for i in range((first if first is not None else -1) + 1, 200):
            c4.send_event(i)
        ok = r4.wait(199)
        r4.close()
        out = all_events(b, "outage")
        check("after the database is back the same node commits again; a reconnecting client "
              "resumes from the stored ack; every event exactly once",
              first == 199 and ok and out == list(range(200)),
              f"first ack {first}, last {r4.last()}, n={len(out)}")

        # ---- the outage while the client goes away: its first ack on
        # reconnect is 99 or 199 (or between), depending on whether the
        # node's retry committed the kept rows first; every such outcome is
        # correct as long as it is what the table holds, and the replay
        # completes exactly once.
        tok5 = token(state, "lena", "t1", "outage2")
        c5 = connect(a, tok5)
        r5 = AckReader(c5)
        for i in range(100):
            c5.send_event(i)
        check("outage 2: acks up to 99", r5.wait(99), f"acks {r5.acks[-5:]}")
        pg("kill", pgdir, port)
        mark = len(a.stderr)
        for i in range(100, 200):
            c5.send_event(i)
        check("outage 2: the commit fails while the database is down", wait_until(lambda: failures() >= 1))
        check("outage 2: no ack past 99", r5.last() == 99, f"acks {r5.acks[-5:]}")
        r5.close()
        pg("start", pgdir, port)
        c6 = connect(a, tok5)
        r6 = AckReader(c6)
        r6.wait(-1)
        first = r6.acks[0] if r6.acks else None
        check("outage 2: the first ack after reconnecting is in 99..199 and that prefix is committed",
              first is not None and 99 <= first <= 199 and committed_range(b, "outage2", 0, first),
              f"first ack {first}")
        for i in range((first if first is not None else -1) + 1, 200):
            c6.send_event(i)
        ok = r6.wait(199)
        r6.close()
        out = all_events(b, "outage2")
        check("outage 2: the replay completes exactly once", ok and out == list(range(200)),
              f"last {r6.last()}, n={len(out)}")

        for n in nodes:
            rc = n.stop()
            check(f"node on port {n.port} stops cleanly", rc == 0, "".join(n.stderr)[-500:])
        nodes = []
    except Exception:  # noqa: BLE001 - report, then clean up
        import traceback
        check("raised", False, traceback.format_exc())
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait()
        try:
            pg("stop", pgdir, port)
        except Exception as e:  # noqa: BLE001
            print(f"# stopping PostgreSQL: {e}")
        shutil.rmtree(tmp, ignore_errors=True)
    test_ingest.check_sanitizers()
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GET /v1/stream, the ingest's pushed event stream (Server-Sent Events),
read by an independent client: an SSE parser written here on the socket
module (stdlib only).

- bad requests: 400 with a message; no token 401; out of scope 403;
  subscribers past the per-address cap 429;
- scope: a read token for learner A sees nothing of B;
- the ingest SIGKILLed (by pid, an ingest this test started) and restarted
  mid-stream while a writer streams: the client resumes with
  Last-Event-ID, and its events equal the store's, in order, once;
- clients that keep reading are not closed by a writer's burst (8,000
  events sent at once: the writer commits thousands of rows at a time);
- a client that stops reading: the ingest keeps storing, the client is
  closed with an "overflow" event naming the id to resume after, and
  resumes without a gap;
- `sandglass events --follow` across an ingest restart.

No check depends on speed: every wait is for a condition, with a generous
bound. TAP output."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import Ingest, T, check, check_sanitizers, connect, token, wait_until, run  # noqa: E402
import test_ingest  # noqa: E402

BIN = os.environ.get("SANDGLASSD_BIN", "sandglassd")


class SSE:
    """One GET /v1/stream connection. status, and for 200 the messages:
    next() -> dict(event, id, data) or None at the end of the stream."""

    def __init__(self, port, tok=None, query="", last_id=None, timeout=T, raw_headers="",
                 rcvbuf=None):
        self.sock = socket.socket()
        if rcvbuf:  # before connect: no window autotuning past it
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        req = f"GET /v1/stream{'?' + query if query else ''} HTTP/1.1\r\nHost: x\r\n"
        if tok:
            req += f"Authorization: Bearer {tok}\r\n"
        if last_id is not None:
            req += f"Last-Event-ID: {last_id}\r\n"
        self.sock.sendall((req + raw_headers + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            c = self.sock.recv(65536)
            if not c:
                break
            self.buf += c
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        first = head.split(b"\r\n")[0].split()
        self.status = int(first[1]) if len(first) > 1 else 0
        self.headers = head.decode("latin-1").lower()
        self.body = None
        if self.status != 200:
            # the body's length, when given: the server keeps the
            # connection for the next request (5 s), EOF would wait for it
            m = re.search(r"content-length:\s*(\d+)", self.headers)
            want = int(m.group(1)) if m else None
            try:
                while want is None or len(self.buf) < want:
                    c = self.sock.recv(65536)
                    if not c:
                        break
                    self.buf += c
            except OSError:
                pass
            self.body = json.loads(self.buf or b"null")
            self.sock.close()

    def next(self, timeout=T):
        deadline = time.monotonic() + timeout
        while True:
            while b"\n\n" in self.buf:
                block, _, self.buf = self.buf.partition(b"\n\n")
                msg = {"event": "message", "id": None, "data": None}
                for line in block.decode().split("\n"):
                    if line.startswith(":"):
                        continue
                    k, _, v = line.partition(":")
                    v = v[1:] if v.startswith(" ") else v
                    if k in ("event", "id", "data"):
                        msg[k] = v
                if msg["data"] is not None:
                    msg["data"] = json.loads(msg["data"])
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                c = self.sock.recv(1 << 20)
            except (ConnectionError, OSError) as e:
                if isinstance(e, socket.timeout):
                    raise TimeoutError from e
                c = b""
            if not c:
                return None
            self.buf += c

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def key(e):
    return (e["id"], e["learner"], e["task"], e["sandbox"], e["seq"], e["kind"])


def store_rows(ing, **filters):
    """Every stored row, by id, through /v1/events."""
    out, after = [], 0
    while True:
        q = dict(filters, after_id=after, limit=1000)
        code, body = ing.http("/v1/events?" + urllib.parse.urlencode(q))
        assert code == 200, body
        out += body["events"]
        if not body["more"]:
            return out
        after = body["events"][-1]["id"]


class Follower:
    """A client that reads the stream from after=0 and resumes with
    Last-Event-ID whenever the stream ends (the ingest restarting): what a
    service would do."""

    def __init__(self, port_fn, tok, query=""):
        self.port_fn, self.tok, self.query = port_fn, tok, query
        self.events, self.overflows, self.reconnects = [], [], 0
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        last = 0
        while not self.stop.is_set():
            try:
                s = SSE(self.port_fn(), self.tok, self.query, last_id=last, timeout=5)
            except OSError:
                time.sleep(0.05)
                continue
            if s.status != 200:
                s.close()
                time.sleep(0.05)
                continue
            try:
                while not self.stop.is_set():
                    try:
                        m = s.next(0.2)
                    except TimeoutError:
                        continue
                    if m is None:
                        break
                    if m["event"] == "message":
                        self.events.append(m["data"])
                        last = int(m["id"])
                    elif m["event"] == "overflow":
                        self.overflows.append(m["data"])
            finally:
                s.close()
            self.reconnects += 1

    def wait_count(self, n, timeout=120):
        return wait_until(lambda: len(self.events) >= n, timeout)

    def close(self):
        self.stop.set()
        self.th.join(T)


class Writer:
    """Streams seqs 0..n-1 of one stream, resuming from the first ack after
    each reconnect (as the uplink does): the ingest may die under it."""

    def __init__(self, port_fn, tok, n, payload=None, gate=None, gate_at=None):
        self.port_fn, self.tok, self.n = port_fn, tok, n
        self.payload = payload or {}
        self.gate, self.gate_at = gate, gate_at  # stop at gate_at acked until gate is set
        self.at_gate = threading.Event()
        self.done = threading.Event()
        self.acked = -1
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while self.acked < self.n - 1:
            try:
                ws = test_ingest.WS(self.port_fn(), "/v1/ingest",
                                    headers={"Authorization": f"Bearer {self.tok}"}, timeout=10)
                self.acked = ws.wait_ack(None, timeout=10)
                end = self.n
                if self.gate and not self.gate.is_set():
                    end = self.gate_at
                for i in range(self.acked + 1, end):
                    ws.send_event(i, "stdout", dict(self.payload, i=i))
                last = ws.wait_ack(end - 1, timeout=T)
                if last is not None:
                    self.acked = last
                if end < self.n and self.acked >= end - 1:
                    self.at_gate.set()
                    self.gate.wait()
                    ws.close()
                    continue  # then through a new connection (the ingest was restarted)
                if last is not None:
                    self.acked = last
                ws.close()
            except (OSError, ConnectionError, TimeoutError, test_ingest.HandshakeError, ValueError):
                time.sleep(0.05)
        self.done.set()


def bad_requests(ing, state):
    rtok = run("token", "--read", state=state).stdout.strip()
    cases = [
        ("foo=1", None, "unknown query parameter 'foo'"),
        ("after=abc", None, "bad value for after"),
        ("after=-1", None, "bad value for after"),
        ("after_seq=1x", None, "bad value for after_seq"),
        ("learner=a&learner=b", None, "learner: empty, too long or given twice"),
        ("learner=", None, "learner: empty"),
        ("", "x1", "bad Last-Event-ID"),
    ]
    for q, lid, want in cases:
        s = SSE(ing.port, rtok, q, last_id=lid)
        check(f"GET /v1/stream?{q}{' Last-Event-ID ' + lid if lid else ''}: 400 naming the fault",
              s.status == 400 and want in (s.body or {}).get("error", ""), (s.status, s.body))
    s = SSE(ing.port, None, "")
    check("no token: 401", s.status == 401, (s.status, s.body))
    stok = token(state, "ann", "t", "sb")
    s = SSE(ing.port, stok, "")
    check("a stream (write) token: 401", s.status == 401, (s.status, s.body))
    atok = run("token", "--read", "--learner", "ann", state=state).stdout.strip()
    s = SSE(ing.port, atok, "learner=bob")
    check("a token scoped to learner ann asking for bob: 403", s.status == 403, (s.status, s.body))
    s = SSE(ing.port, None, "token=" + urllib.parse.quote(rtok))
    check("?token= (EventSource cannot send headers): 200, text/event-stream",
          s.status == 200 and "content-type: text/event-stream" in s.headers, (s.status, s.headers))
    s.close()


def caps(ing, state):
    rtok = run("token", "--read", state=state).stdout.strip()
    # the earlier requests' connections are gone first (closed by us, noticed by it)
    wait_until(lambda: ing.http("/v1/stats")[1].get("subscribers") == 0)
    subs = []
    try:
        for _ in range(128):
            subs.append(SSE(ing.port, rtok, ""))
        ok = all(s.status == 200 for s in subs)
        extra = SSE(ing.port, rtok, "")
        check("128 subscribers from one address are taken; the 129th gets 429",
              ok and extra.status == 429 and "too many" in extra.body.get("error", ""),
              (extra.status, extra.body, [s.status for s in subs if s.status != 200]))
        extra.close()
    finally:
        for s in subs:
            s.close()
    code, st = ing.http("/v1/stats")
    check("closed subscribers are let go (/v1/stats)", wait_until(
        lambda: ing.http("/v1/stats")[1].get("subscribers") == 0), st)


def scope(ing, state):
    atok = run("token", "--read", "--learner", "ann", state=state).stdout.strip()
    fa = Follower(lambda: ing.port, atok)
    wa = Writer(lambda: ing.port, token(state, "ann", "scope", "a1"), 200)
    wb = Writer(lambda: ing.port, token(state, "bob", "scope", "b1"), 200)
    wa.done.wait(T)
    wb.done.wait(T)
    want = [key(e) for e in store_rows(ing, learner="ann")]
    got_all = fa.wait_count(len(want))
    time.sleep(0.2)  # not a timing check: only gives a wrongly pushed event a chance to show
    fa.close()
    check("a token scoped to learner ann gets ann's events", got_all and len(want) >= 200,
          f"{len(fa.events)} of {len(want)}")
    check("and nothing of bob's", all(e["learner"] == "ann" for e in fa.events),
          [e["learner"] for e in fa.events if e["learner"] != "ann"][:3])
    check("ann's events equal the store's, in order, once", [key(e) for e in fa.events] == want)
    s = SSE(ing.port, atok, "sandbox=a1&after_seq=150&after=0")
    got = []
    while True:
        m = s.next(T)
        if m is None or m["event"] == "live":
            break
        got.append(m["data"]["seq"])
    s.close()
    check("sandbox=a1&after_seq=150: that stream's seqs 151..199", got == list(range(151, 200)), got)


def restart(state):
    ing = Ingest(state)
    box = {"ing": ing, "port": ing.port}
    port = ing.port
    rtok = run("token", "--read", state=state).stdout.strip()
    before = len(store_rows(ing))
    f = Follower(lambda: box["port"], rtok, "task=restart")
    N = 3000
    gate = threading.Event()
    ws = [Writer(lambda: box["port"], token(state, "ann", "restart", f"r{k}"), N, {"data": "x" * 64},
                 gate=gate, gate_at=N // 2)
          for k in range(2)]
    got_some = f.wait_count(300, 300)
    check("the client gets events while the writers stream", got_some, len(f.events))
    check("the writers reach half way", all(w.at_gate.wait(300) for w in ws))
    pid = ing.proc.pid
    os.kill(pid, signal.SIGKILL)  # our own child
    ing.proc.wait(T)
    mid = len(f.events)
    try:
        ing2 = Ingest(state, port=port)
    except RuntimeError:  # another program took the port meanwhile: clients move
        ing2 = Ingest(state)
    box["ing"], box["port"] = ing2, ing2.port
    gate.set()
    done = all(w.done.wait(300) for w in ws)
    check("the writers finish through the restarted ingest", done, [w.acked for w in ws])
    want = [key(e) for e in store_rows(ing2, task="restart")]
    f.wait_count(len(want))
    time.sleep(0.2)
    f.close()
    got = [key(e) for e in f.events]
    check("killed mid-stream: the client had part, not all",
          0 < mid < 2 * N, f"{mid} of {2 * N} before the kill")
    check("the client reconnected after the kill", f.reconnects >= 1, f.reconnects)
    check("after the restart the client's events equal the store's, in order, once",
          got == want and len(want) == 2 * N, f"got {len(got)} want {len(want)}; "
          f"dups {len(got) - len(set(got))}")
    check("ids strictly increase", all(a[0] < b[0] for a, b in zip(got, got[1:])))
    check("every writer's seqs 0..N-1 once", sorted((e[3], e[4]) for e in got) ==
          sorted((f"r{k}", i) for k in range(2) for i in range(N)))
    return ing2, before


def burst(ing, state):
    """Two readers that keep up, one writer's 8,000 events sent at once:
    the fan-out waits for their queues to drain rather than closing them
    (it read 4,000 rows a turn into 4,096-event queues before any write,
    and closed both after a few hundred events)."""
    rtok = run("token", "--read", state=state).stdout.strip()
    before = ing.http("/v1/stats")[1].get("stream_overflows", 0)
    fs = [Follower(lambda: ing.port, rtok, "task=burst") for _ in range(2)]
    check("two subscribers of task=burst", wait_until(lambda: ing.http("/v1/stats")[1].get("subscribers", 0) >= 2))
    N = 8000
    w = Writer(lambda: ing.port, token(state, "ann", "burst", "b1"), N)
    check("the writer's burst is stored", w.done.wait(300), w.acked)
    got_all = all(f.wait_count(N, 300) for f in fs)
    for f in fs:
        f.close()
    want = [key(e) for e in store_rows(ing, task="burst")]
    check("each reader got every event, in order, once, on its first connection",
          got_all and all([key(e) for e in f.events] == want and f.reconnects <= 1 and not f.overflows for f in fs)
          and len(want) == N, [(len(f.events), f.reconnects, f.overflows[:1]) for f in fs])
    check("no reader was closed for overflow", ing.http("/v1/stats")[1].get("stream_overflows", 0) == before,
          ing.http("/v1/stats")[1])


def slow_consumer(ing, state):
    rtok = run("token", "--read", state=state).stdout.strip()
    s = SSE(ing.port, rtok, "task=slow", rcvbuf=4096)  # from now on; not read until told
    big = {"data": "y" * 4000}
    N = 8000  # past the subscriber's queue (4096 events, 16 MiB) and the socket buffers
    w = Writer(lambda: ing.port, token(state, "ann", "slow", "s1"), N, big)
    other = Writer(lambda: ing.port, token(state, "bob", "other", "o1"), 500)
    check("the ingest stores everything while a subscriber does not read",
          w.done.wait(300) and other.done.wait(300), (w.acked, other.acked))
    check("the stuck subscriber overflowed (/v1/stats)",
          wait_until(lambda: ing.http("/v1/stats")[1].get("stream_overflows", 0) >= 1, 120),
          ing.http("/v1/stats")[1])
    got, over, last = [], None, 0
    while True:
        m = s.next(T)
        if m is None:
            break
        if m["event"] == "overflow":
            over = m["data"]
        elif m["event"] == "message":
            got.append(m["data"])
            last = int(m["id"])
    s.close()
    check("it is closed with an overflow event naming the last id it was sent",
          over is not None and over.get("after") == last and got, (over, last, len(got)))
    check("it had part of the stream only", 0 < len(got) < N, len(got))
    s2 = SSE(ing.port, rtok, "task=slow", last_id=last)
    while True:
        m = s2.next(T)
        if m is None or m["event"] == "live":
            break
        if m["event"] == "message":
            got.append(m["data"])
    s2.close()
    want = [key(e) for e in store_rows(ing, task="slow")]
    check("resumed with Last-Event-ID: no gap, no duplicate",
          [key(e) for e in got] == want and len(want) == N, f"{len(got)} vs {len(want)}")


def follow_cli(state):
    ing = Ingest(state)
    port = ing.port
    p = subprocess.Popen([BIN, "events", "--follow", "--json", "--task", "cli",
                          "--ingest", f"http://127.0.0.1:{port}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, SANDGLASS_STATE_DIR=state))
    lines = []
    reader = threading.Thread(target=lambda: [lines.append(json.loads(l)) for l in p.stdout],
                              daemon=True)
    reader.start()
    w = Writer(lambda: port, token(state, "ann", "cli", "c1"), 500)
    w.done.wait(T)
    check("events --follow prints events as they come", wait_until(lambda: len(lines) >= 500),
          len(lines))
    os.kill(ing.proc.pid, signal.SIGKILL)
    ing.proc.wait(T)
    ing2 = Ingest(state, port=port)
    w2 = Writer(lambda: port, token(state, "ann", "cli", "c2"), 500)
    w2.done.wait(T)
    ok = wait_until(lambda: len(lines) >= 1000, 120)
    alive = p.poll() is None
    p.send_signal(signal.SIGTERM)
    p.wait(T)
    reader.join(T)
    err = p.stderr.read()
    want = [key(e) for e in store_rows(ing2, task="cli")]
    check("events --follow survives an ingest restart and resumes", ok and alive, (len(lines), err))
    check("its events equal the store's, in order, once", [key(e) for e in lines] == want,
          f"{len(lines)} vs {len(want)}")
    check("it said on stderr that it resumed", "resuming after event id" in err, err)
    return ing2


def main():
    tmp = tempfile.TemporaryDirectory(prefix="sg-stream-test-")
    state = tmp.name
    # The stall (a reader that does not drain within 1 s is the slow one)
    # pushed far out for the burst: its readers keep up, and whether they
    # are scheduled within a second on a loaded machine is not the test's
    # question. The slow consumer below meets the real one.
    ing = Ingest(state, env={"SANDGLASS_STREAM_STALL_MS": "600000"})
    bad_requests(ing, state)
    caps(ing, state)
    scope(ing, state)
    burst(ing, state)
    ing.stop()
    ing2, _ = restart(state)
    slow_consumer(ing2, state)
    ing2.stop()
    ing3 = follow_cli(state)
    ing3.stop()
    check_sanitizers()
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())

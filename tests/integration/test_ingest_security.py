#!/usr/bin/env python3
"""The ingest's network surface (issue 13): it binds exactly the address
asked for; every read needs a read token, scoped; one client cannot lock it
out; a stream token holder cannot take over seqs; pages are bounded by
bytes; `sandglass events` prints no learner-controlled control character;
a custom --store file is 0600. Real `sandglassd ingest` on loopback, stdlib
clients. TAP output."""
from __future__ import annotations

import atexit
import errno
import json
import os
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "adversarial"))
from ingest_common import (T, HandshakeError, Ingest, connect, http, new_state,  # noqa: E402
                           read_token, run, still_serving, tcp_listeners, token, wait_until)
from sgtest import tap  # noqa: E402

BIN = os.environ.get("SANDGLASSD_BIN", "sandglassd")


def frame(seq, kind="command", payload=None, ts="2026-01-01T00:00:00.000000+00:00"):
    return json.dumps({"seq": seq, "kind": kind, "ts": ts,
                       "payload": payload if payload is not None else {"cmd": f"echo {seq}"}})


def seqs(ing, state, sandbox):
    code, body = http(ing.port, f"/v1/events?sandbox={sandbox}", read_token(state))
    return [e["seq"] for e in body["events"]] if code == 200 else None


tmp = new_state()
state = tmp.name
os.umask(0o022)
ing = Ingest(state)
atexit.register(lambda: ing.proc.poll() is None and ing.proc.kill())  # whatever raises


@tap.case("bind")
def _bind():
    ls = tcp_listeners(ing.port)
    tap.eq(ls, [("tcp", "0100007F")], "the listener is bound to 127.0.0.1 only (not [::] or 0.0.0.0)")
    s = socket.socket()
    s.settimeout(T)
    r = s.connect_ex(("127.0.0.2", ing.port))
    s.close()
    tap.eq(r, errno.ECONNREFUSED, "another local address (127.0.0.2) is refused")
    p = subprocess.run([BIN, "ingest", "--listen", "localhost:0"], capture_output=True, text=True,
                       env=dict(os.environ, SANDGLASS_STATE_DIR=state), timeout=T)
    tap.ok(p.returncode == 2 and "IPv4 address or [IPv6]" in p.stderr,
           "a name for --listen is refused (it could stand for several addresses)", p.stderr)


@tap.case("reads need a read token")
def _reads():
    a = connect(ing, token(state, "alice", "t1", "sa"))
    a.wait_ack(None)
    for i in range(3):
        a.send_event(i)
    tap.eq(a.wait_ack(2), 2, "alice's stream stored")
    a.close()
    b = connect(ing, token(state, "bob", "t2", "sbob"))
    b.wait_ack(None)
    b.send_event(0)
    tap.eq(b.wait_ack(0), 0, "bob's stream stored")
    b.close()

    for path in ("/v1/events", "/v1/events?sandbox=sa", "/v1/sandboxes", "/v1/stats", "/nope"):
        code, body = http(ing.port, path)
        tap.ok(code == 401 and "read token" in (body or {}).get("error", ""),
               f"{path} without a token: 401 with a reason", f"{code} {body}")
    code, body = http(ing.port, "/healthz")
    tap.ok(code == 200 and body.get("ok") is True, "/healthz needs no token", f"{code} {body}")
    stream_tok = token(state, "alice", "t1", "sa")
    code, body = http(ing.port, "/v1/events?sandbox=sa", stream_tok)
    tap.ok(code == 401 and "stream token cannot read" in body.get("error", ""),
           "a stream token cannot read", f"{code} {body}")
    op = read_token(state)
    code, body = http(ing.port, "/v1/events", op)
    tap.ok(code == 200 and {e["learner"] for e in body["events"]} >= {"alice", "bob"},
           "an operator read token reads everything", f"{code} {body}")
    try:
        connect(ing, op).close()
        refused = None
    except HandshakeError as e:
        refused = e
    tap.ok(refused is not None and refused.status == 401 and "read token cannot stream" in refused.body,
           "a read token cannot open /v1/ingest", refused and refused.body)

    la = read_token(state, "--learner", "alice")
    code, body = http(ing.port, "/v1/events", la)
    tap.ok(code == 200 and body["events"] and {e["learner"] for e in body["events"]} == {"alice"},
           "a learner-scoped token sees only that learner's events", f"{code} {body}")
    code, body = http(ing.port, "/v1/events?learner=bob", la)
    tap.ok(code == 403 and "scoped to learner alice" in body.get("error", ""),
           "asking another learner with a learner-scoped token: 403", f"{code} {body}")
    code, body = http(ing.port, "/v1/sandboxes", la)
    tap.ok(code == 200 and [s["learner"] for s in body["sandboxes"]] == ["alice"],
           "/v1/sandboxes lists only the token's scope", f"{code} {body}")
    sb = read_token(state, "--sandbox", "sbob")
    code, body = http(ing.port, "/v1/events", sb)
    tap.ok(code == 200 and [e["sandbox"] for e in body["events"]] == ["sbob"],
           "a sandbox-scoped token sees only that sandbox", f"{code} {body}")
    code, body = http(ing.port, "/v1/stats", la)
    tap.eq(code, 403, "/v1/stats needs an operator token")

    code, body = http(ing.port, "/v1/events?learner=" + "a" * 200, op)
    tap.ok(code == 400, "a filter value longer than a name is refused (400), not dropped", f"{code}")
    code, body = http(ing.port, "/v1/events?learner=" + "a" * 5000, op)
    tap.ok(code in (400, 431), "a filter value longer than the header buffer is refused", f"{code}")
    code, body = http(ing.port, "/v1/events?learner=alice&learner=bob", op)
    tap.eq(code, 400, "a filter given twice is refused (400)")

    other = os.path.join(state, "other-secret")
    with open(other, "w") as f:
        f.write("ab" * 32)
    os.chmod(other, 0o600)
    code, body = http(ing.port, "/v1/events", read_token(state, secret=other))
    tap.ok(code == 401 and "bad signature" in body.get("error", ""),
           "a read token from another secret: 401", f"{code} {body}")
    exp = read_token(state, "--ttl", "1")
    time.sleep(1.2)  # the token's own expiry: the clock is the subject here
    code, body = http(ing.port, "/v1/events", exp)
    tap.ok(code == 401 and "expired" in body.get("error", ""), "an expired read token: 401", f"{code} {body}")


@tap.case("seq order")
def _seqs():
    tok = token(state, "carol", "t3", "sq")
    evil = connect(ing, tok)
    tap.eq(evil.wait_ack(None), -1, "a second holder of the token connects")
    evil.send_text(frame(5, "stdout", {"data": "===== 42 passed =====", "stream": "stdout"}))
    tap.eq(evil.wait_close(), 1008, "a seq ahead of the stream (5 before 0) is refused with 1008")
    tap.ok("seq 5" in (evil.close_reason or ""), "with a reason", evil.close_reason)
    evil.close()
    real = connect(ing, tok)
    real.wait_ack(None)
    for i in range(8):
        real.send_event(i)
    tap.eq(real.wait_ack(7), 7, "the real stream 0..7 is acked")
    code, body = http(ing.port, "/v1/events?sandbox=sq", read_token(state))
    tap.ok(code == 200 and [e["payload"].get("cmd") for e in body["events"]] == [f"echo {i}" for i in range(8)],
           "the real events are stored, no forgery", f"{body}")
    # identical resends (the at-least-once replay) are accepted, also with a fresh ts
    for i in range(8):
        real.send_text(frame(i, ts="2026-02-02T10:00:00Z"))
    real.send_event(8)
    tap.eq(real.wait_ack(8), 8, "identical resends are accepted (ts may differ), the stream goes on")
    real.send_event(3, payload={"cmd": "rm -rf / # rewritten"})
    tap.eq(real.wait_close(), 1008, "a resend with other content is refused with 1008")
    tap.ok("seq 3" in (real.close_reason or ""), "with a reason", real.close_reason)
    real.close()
    code, body = http(ing.port, "/v1/events?sandbox=sq", read_token(state))
    tap.eq([e["payload"].get("cmd") for e in body["events"]], [f"echo {i}" for i in range(9)],
           "the stored event 3 is unchanged")
    r2 = connect(ing, tok)
    tap.eq(r2.wait_ack(None), 8, "a reconnect gets ack 8")
    r2.send_event(2**63 - 1)
    tap.eq(r2.wait_close(), 1008, "seq 2^63-1 is refused")
    r2.close()
    for bad_ts in ("not a time", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-01-01T00:00:00",
                   "2026-01-01T24:00:00Z", "2026-01-01T00:00:00.1234567890Z"):
        c = connect(ing, tok)
        c.wait_ack(None)
        c.send_text(frame(9, ts=bad_ts))
        tap.eq(c.wait_close(), 1007, f"ts {bad_ts!r} is refused with 1007")
        c.close()
    c = connect(ing, tok)
    c.wait_ack(None)
    # the C capture's form, the Python agent's (isoformat, with and without
    # microseconds), and JavaScript's toISOString
    for i, ts in enumerate(("2026-12-02T02:04:59.123456+00:00", "2026-12-02T02:04:59+00:00",
                            "2026-12-02T02:04:59.123Z", "2024-02-29T23:59:60.5-05:30"), start=9):
        c.send_text(frame(i, ts=ts))
    tap.eq(c.wait_ack(12), 12, "the clients' RFC 3339 forms are accepted")
    c.close()
    code, body = http(ing.port, "/v1/stats", read_token(state))
    tap.ok(code == 200 and body["seq_refused"] >= 3, "the refusals are counted (/v1/stats)", f"{body}")
    tap.ok(wait_until(lambda: any("refused a frame of carol/t3/sq" in l for l in ing.stderr)),
           "and logged", "".join(ing.stderr[-20:]))


@tap.case("bounded pages")
def _pages():
    # 40 events of ~360 KB of JSON each: one page of them would be ~14 MB
    tok = token(state, "dave", "t4", "big")
    c = connect(ing, tok)
    c.wait_ack(None)
    n = 40
    for i in range(n):
        c.send_event(i, "file_diff", {"path": f"f{i}", "change": "created", "diff": "\x01" * 60000})
    tap.eq(c.wait_ack(n - 1), n - 1, "40 large events stored")
    c.close()
    code, body = http(ing.port, "/v1/events?sandbox=big", read_token(state))
    tap.ok(code == 200 and 0 < len(body["events"]) < n and body["more"] is True
           and body["next_after_seq"] == body["events"][-1]["seq"],
           "/v1/events answers a byte-bounded page with more=true and where to go on",
           f"{code} {len(body['events']) if isinstance(body, dict) and 'events' in body else body}")
    code, body2 = http(ing.port, f"/v1/events?sandbox=big&after_seq={body['next_after_seq']}", read_token(state))
    tap.ok(code == 200 and body2["events"][0]["seq"] == body["next_after_seq"] + 1,
           "the next page starts after it", f"{code}")
    p = run("events", "--sandbox", "big", "--json", "--ingest", f"http://127.0.0.1:{ing.port}", state=state)
    got = [json.loads(l)["seq"] for l in p.stdout.splitlines()]
    tap.ok(p.returncode == 0 and got == list(range(n)), "sandglass events pages through all of them",
           f"rc {p.returncode} {p.stderr} {got[:5]}..{len(got)}")
    p = run("events", "--json", "--ingest", f"http://127.0.0.1:{ing.port}", state=state)
    got = [json.loads(l) for l in p.stdout.splitlines()]
    tap.ok(p.returncode == 0 and [e["seq"] for e in got if e["sandbox"] == "big"] == list(range(n)),
           "so does the global timeline", f"rc {p.returncode} {p.stderr}")
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    f = subprocess.Popen([BIN, "events", "--sandbox", "big", "--follow", "--json", "--ingest",
                          f"http://127.0.0.1:{ing.port}"], stdout=subprocess.PIPE, env=env, text=True)
    seen = []
    try:
        while len(seen) < n:
            line = f.stdout.readline()
            if not line:
                break
            seen.append(json.loads(line)["seq"])
    finally:
        f.kill()
        f.wait()
    tap.eq(seen, list(range(n)), "and --follow")


@tap.case("terminal escapes")
def _escapes():
    tok = token(state, "erin", "t5", "esc")
    c = connect(ing, tok)
    c.wait_ack(None)
    c.send_event(0, "command", {"cmd": "echo \x1b]0;owned\x07hi\u009b2J"})
    c.send_event(1, "stdout", {"data": "\x1b]0;pwned title\x07\rPASS 42 passed\x1b[2K\u202eevil", "stream": "stdout"})
    c.send_event(2, "file_diff", {"path": "a\x1b[31m\r\x07b\u2028.py", "change": "created",
                                  "diff": "+x\n"})
    c.send_event(3, "limit", {"x\x1b": "\x1b\x7f\u0085"})
    tap.eq(c.wait_ack(3), 3, "events with control characters stored")
    c.close()
    for args in (["--sandbox", "esc"], []):
        p = subprocess.run([BIN, "events", *args, "--ingest", f"http://127.0.0.1:{ing.port}"],
                           capture_output=True, env=dict(os.environ, SANDGLASS_STATE_DIR=state), timeout=T)
        out = p.stdout
        text = out.decode("utf-8", "replace")
        bad = sorted({b for b in out if (b < 0x20 and b != 0x0A) or b == 0x7F})
        c1 = [ch for ch in text if 0x80 <= ord(ch) <= 0x9F or ch in "\u202e\u2028"]
        tap.ok(p.returncode == 0 and not bad and not c1 and "\\x1b" in text,
               f"the timeline ({' '.join(args) or 'global'}) prints no raw control character, shows them escaped",
               f"rc {p.returncode} bad bytes {bad} c1 {c1!r}\n{text}")
    p = run("events", "--sandbox", "esc", "--json", "--ingest", f"http://127.0.0.1:{ing.port}", state=state)
    evs = [json.loads(l) for l in p.stdout.split("\n") if l]
    tap.ok(len(evs) == 4 and evs[1]["payload"]["data"].startswith("\x1b]0;pwned title\x07\r")
           and evs[2]["payload"]["path"] == "a\x1b[31m\r\x07b\u2028.py",
           "--json keeps the exact strings (escaped by JSON)", p.stdout[:500])


@tap.case("limits")
def _limits():
    # Its own ingest with small limits: 40 per address, 100 in all.
    st2 = new_state()
    lim = Ingest(st2.name, extra=("--max-conns-per-addr", "40", "--max-conns", "100"))
    socks = []
    op = read_token(st2.name)
    try:
        def half_open(src):
            s = socket.create_connection(("127.0.0.1", lim.port), timeout=T, source_address=(src, 0))
            socks.append(s)
            try:
                s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            except OSError:
                pass  # already closed by the server
            return s

        def closed_by_server(s, timeout=T):
            s.settimeout(timeout)
            try:
                return s.recv(1) == b""
            except (ConnectionResetError, BrokenPipeError):
                return True
            except socket.timeout:
                return False

        def ws_open(src, tok):
            """A WebSocket handshake from src; the socket, or None if refused."""
            s = socket.create_connection(("127.0.0.1", lim.port), timeout=T, source_address=(src, 0))
            socks.append(s)
            s.sendall((f"GET /v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {tok}\r\n\r\n").encode())
            buf = b""
            try:
                while b"\r\n\r\n" not in buf:
                    c = s.recv(4096)
                    if not c:
                        break
                    buf += c
            except OSError:
                pass
            return s if buf.startswith(b"HTTP/1.1 101") else None

        # One address, 200 half-open requests: what passes its cap is closed at once.
        mine = [half_open("127.0.0.2") for _ in range(200)]
        tap.ok(all(closed_by_server(s) for s in mine[40:]),
               "connections over the per-address cap (40) are closed")
        code, body = http(lim.port, "/healthz")
        tap.ok(code == 200, "/healthz answers another address meanwhile", f"{code} {body}")
        code, body = http(lim.port, "/healthz", src="127.0.0.2")
        tap.ok(code != 200, "that address itself gets no 41st connection", f"{code} {body}")
        # Slow handshakes are timed out by the server.
        tap.ok(all(closed_by_server(s) for s in mine[:40]),
               "half-open connections are closed by the server (handshake timeout)")
        tap.ok(wait_until(lambda: http(lim.port, "/v1/stats", op)[1].get("connections", 99) <= 1),
               "their slots are given back")
        # Fill the total with streams from several addresses (authenticated,
        # no timeout): 40 + 40 + 20 = 100.
        tok = token(st2.name, "g", "t", "many")
        held = [ws_open(src, tok) for src, k in (("127.0.0.3", 40), ("127.0.0.4", 40), ("127.0.0.5", 20))
                for _ in range(k)]
        tap.ok(all(held), "100 streams from three addresses are accepted", f"{sum(1 for h in held if h)}")
        tap.eq(ws_open("127.0.0.6", tok), None, "a 101st stream is refused (the total cap)")
        code, body = http(lim.port, "/healthz", src="127.0.0.7")
        tap.ok(code == 200 and body.get("ok") is True,
               "with the total cap full, /healthz still answers (the reserve)", f"{code} {body}")
        code, body = http(lim.port, "/v1/events", op, src="127.0.0.8")
        tap.ok(code == 503, "the reserve answers nothing but /healthz", f"{code} {body}")
        for h in held:
            if h:
                h.close()
        tap.ok(wait_until(lambda: http(lim.port, "/v1/stats", op)[1].get("connections", 99) <= 1),
               "closed streams give their slots back")
        code, body = http(lim.port, "/v1/stats", op)
        tap.ok(code == 200 and body["conn_refused"] >= 161, "refused connections are counted", f"{body}")
        tap.ok(still_serving(lim, st2.name, "after-limits"), "the ingest serves normally afterwards")
    finally:
        for s in socks:
            s.close()
        lim.stop()
        st2.cleanup()


@tap.case("store mode")
def _store_mode():
    st3 = new_state()
    db = os.path.join(st3.name, "custom", "learners.db")
    os.makedirs(os.path.dirname(db))
    i3 = Ingest(st3.name, extra=("--store", f"sqlite:{db}"))
    try:
        c = connect(i3, token(st3.name, "f", "t", "s"))
        c.wait_ack(None)
        c.send_event(0)
        tap.eq(c.wait_ack(0), 0, "an event stored in the custom store")
        c.close()
        modes = {p: stat.S_IMODE(os.stat(p).st_mode) for p in (db, db + "-wal", db + "-shm") if os.path.exists(p)}
        tap.ok(len(modes) == 3 and set(modes.values()) == {0o600},
               "the custom --store file and its -wal/-shm are 0600 (umask 022)", repr({k: oct(v) for k, v in modes.items()}))
    finally:
        i3.stop()
        st3.cleanup()


tap.ok(still_serving(ing, state, "after-all"), "the main ingest still serves")
tap.eq(ing.stop(), 0, "the ingest exits 0")
tmp.cleanup()
tap.done()

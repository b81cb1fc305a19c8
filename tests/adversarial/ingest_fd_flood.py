#!/usr/bin/env python3
"""Attack: lock everyone out of the ingest from one address. 19,990
connections each sending half a header filled its file descriptors and
/healthz failed. Now one address holds at most --max-conns-per-addr (here
50) and what passes it is closed at once, half-open requests are timed out,
and /healthz keeps answering. Bounded: 400 connections, loopback only."""
from __future__ import annotations

import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import T, Ingest, http, new_state, read_token, still_serving, wait_until  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

st = new_state()
ing = Ingest(st.name, extra=("--max-conns-per-addr", "50"))
socks = []
try:
    def half_open():
        s = socket.create_connection(("127.0.0.1", ing.port), timeout=T, source_address=("127.0.0.9", 0))
        socks.append(s)
        try:
            s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: x\r\nX-Half: ")
        except OSError:
            pass
        return s

    def closed(s):
        s.settimeout(T)
        try:
            return s.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    flood = [half_open() for _ in range(400)]
    code, body = http(ing.port, "/healthz")
    tap.ok(code == 200, "/healthz answers during the flood", f"{code} {body}")
    tap.ok(all(closed(s) for s in flood[50:]), "the 350 connections over the cap are closed")
    tap.ok(all(closed(s) for s in flood[:50]), "the 50 half-open ones are timed out")
    op = read_token(st.name)
    tap.ok(wait_until(lambda: http(ing.port, "/v1/stats", op)[1].get("connections", 99) <= 1),
           "their slots are given back")
    code, body = http(ing.port, "/v1/stats", op)
    tap.ok(code == 200 and body["conn_refused"] >= 350, "the refusals are counted", f"{body}")
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    for s in socks:
        s.close()
    ing.stop()
    st.cleanup()
tap.done()

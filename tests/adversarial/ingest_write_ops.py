#!/usr/bin/env python3
"""Attack (issue 24): the ingest's two write endpoints, POST /v1/import and
POST /v1/purge, from a network client without the operator's write token:
erase a victim's record (no token, a stream token, an operator read token, a
forged token), plant rows in it (the same, with a body of rows naming the
victim), or hold the ingest with bodies it must not take (a Content-Length
of 2^40, none at all, a body cut short). Every one is refused with a message
(401, 411, 413, 400), the victim's events stay exactly as they were, no row
is planted, and the ingest still serves everyone."""
from __future__ import annotations

import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, new_state, read_token, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402


def victim_rows(ing: Ingest, state: str) -> list:
    code, body = http(ing.port, "/v1/events?learner=victim", read_token(state))
    return [(e["sandbox"], e["seq"], e["kind"]) for e in body["events"]] if code == 200 else [("error", code)]


def message(body) -> bool:
    return isinstance(body, dict) and bool(body.get("error"))


st = new_state()
ing = Ingest(st.name)
try:
    c = connect(ing, token(st.name, "victim", "task", "v1"))
    c.wait_ack(None)
    for i in range(3):
        c.send_event(i, "stdout", {"data": f"victim's line {i}", "stream": "stdout"})
    tap.eq(c.wait_ack(2), 2, "the victim's events stored")
    c.close()
    before = victim_rows(ing, st.name)
    planted = "\n".join(json.dumps({"learner": "victim", "task": "task", "sandbox": "v1", "seq": 3 + i,
                                    "kind": "stdout", "ts": "2026-01-01T00:00:00.000Z",
                                    "received": "2026-01-01T00:00:00.000Z",
                                    "payload": {"data": "planted", "stream": "stdout"}}) for i in range(2000))
    body = (planted + "\n").encode()
    toks = {"no token": None, "a stream token": token(st.name, "victim", "task", "v1"),
            "an operator read token": read_token(st.name), "a forged token": "sg1.AAAA.BBBB"}
    for what, tok in toks.items():
        code, ans = http(ing.port, "/v1/purge?learner=victim", tok, method="POST", body=b"")
        tap.ok(code == 401 and message(ans), f"purge with {what}: 401 with a message", f"{code} {ans}")
        code, ans = http(ing.port, "/v1/import", tok, method="POST", body=body)
        tap.ok(code == 401 and message(ans), f"import of {len(body)} bytes with {what}: 401 with a message",
               f"{code} {ans}")
    code, ans = http(ing.port, "/v1/import", method="POST", headers=f"Content-Length: {1 << 40}\r\n")
    tap.ok(code == 413 and message(ans), "a Content-Length of 2^40: 413 at once, nothing read", f"{code} {ans}")
    code, ans = http(ing.port, "/v1/import", method="POST", headers="Transfer-Encoding: chunked\r\n")
    tap.ok(code in (400, 411) and message(ans), "a body without a Content-Length: refused", f"{code} {ans}")
    # A body cut short: the connection closes mid-body; the ingest lets it go.
    s = socket.create_connection(("127.0.0.1", ing.port), timeout=30)
    s.sendall(f"POST /v1/import HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 20}\r\n\r\n".encode() + b"x" * 1000)
    s.close()
    tap.ok(victim_rows(ing, st.name) == before, "the victim's events exactly as they were, nothing planted",
           repr(victim_rows(ing, st.name)[:5]))
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    ing.stop()
    st.cleanup()
tap.done()

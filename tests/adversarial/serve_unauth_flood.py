#!/usr/bin/env python3
"""Attack (issue 22, medium): serve's connection slots were free to take.
A WebSocket held a terminal slot from its handshake on, token or not:
64 held open (each refreshed after the 5 s token timeout) kept every real
learner out, with no token at all.

Now a connection without a token holds no terminal slot; one address has
at most 8 of them (--max-unauth-per-addr) and 32 WebSockets in all
(--max-conns-per-addr), every address together 256 (--max-unauth). The
test floods from 127.0.0.1 and from 20 more loopback addresses; a learner
from 127.0.0.2 still gets a terminal. Refusals say why (1013, try again).
A second serve with --max-unauth 16 shows the cap in all."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import WS, Closed, healthz, key_file, open_terminal, start_serve  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, tap, wait_for  # noqa: E402

env = Env()
secret = key_file(os.path.join(env.root, "secret"), "a1")
sid = env.create("--task", "flood")
tok = env.run("token", "--secret", secret, "--terminal", "--sandbox", sid, check=True).stdout.decode().strip()


def flood(port: int, src: str, n: int) -> tuple[list[WS], int]:
    """n WebSockets from src that never send a token: the ones whose
    handshake succeeded, and how many were refused at the handshake."""
    opened, refused = [], 0
    for _ in range(n):
        try:
            opened.append(WS(port, src=src, timeout=30))
        except (OSError, Closed):
            refused += 1
    return opened, refused


def try_again(ws: WS) -> bool:
    return ws.close_code == 1013


def pump_all(socks: list[WS]) -> None:
    for w in socks:
        w.pump(0)


serve, port = start_serve(env, secret)
held: list[WS] = []
try:
    mine, refused = flood(port, "127.0.0.1", 100)
    held += mine
    # At once, while they are held (a token's 5 s have not passed).
    ws, why = open_terminal(port, tok, src="127.0.0.2")
    tap.ok(not why, "a learner from another address gets a terminal during the flood", why)
    if ws:
        ws.close()
    # Held: every connection from the address but 8 was refused, each
    # either at the handshake (past 32 WebSockets) or after it with 1013.
    tap.ok(wait_for(lambda: (pump_all(mine), sum(not try_again(w) for w in mine) <= 8)[1], 30),
           "one address holds at most 8 connections without a token",
           f"{len(mine)} opened, {refused} refused at the handshake, "
           f"{sum(try_again(w) for w in mine)} closed 1013")
    tap.ok(len(mine) <= 32 and refused >= 100 - 32, "and at most 32 WebSockets",
           f"{len(mine)} opened, {refused} refused at the handshake")
    said = [w for w in mine if try_again(w)]
    tap.ok(said and all("too many connections from your address" in w.close_reason and
                        any("too many connections from your address" in t for t in w.texts) for w in said),
           "a refusal after the handshake says why, as {\"error\"} and as the close reason",
           repr([(w.close_reason, w.texts) for w in said[:2]]))
    for i in range(20):
        more, _ = flood(port, f"127.0.0.{10 + i}", 10)
        held += more
    ws, why = open_terminal(port, tok, src="127.0.0.2")
    tap.ok(not why, "and still with 20 more addresses flooding (168 connections without a token)", why)
    if ws:
        ws.binary(b"exit 0\r")
        ws.wait(lambda w: w.close_code is not None, 30)
        ws.close()
    h = healthz(port, 10)
    tap.ok(h is not None and h.get("ok"), "/healthz answers", repr(h))
finally:
    for w in held:
        w.close()
    serve.terminate()
    serve.wait(timeout=30)
tap.eq(serve.returncode, 0, "serve stops cleanly")

# The cap in all, small enough to reach from three addresses.
serve, port = start_serve(env, secret, "--max-unauth", "16")
held = []
try:
    for src in ("127.0.0.3", "127.0.0.4"):
        more, _ = flood(port, src, 8)
        held += more
    pump_all(held)
    tap.ok(len(held) == 16 and not any(w.close_code for w in held), "16 connections without a token from two addresses",
           f"{len(held)} opened, closed: {[w.close_code for w in held if w.close_code]}")
    try:
        w = WS(port, src="127.0.0.5", timeout=30)
        held.append(w)
        w.wait(lambda w: w.close_code is not None, 30)
        tap.ok(w.close_code == 1013 and "too many connections are waiting to send a token" in w.close_reason,
               "a 17th from a third address is refused: 1013 with the reason", f"{w.close_code} {w.close_reason!r}")
    except (OSError, Closed) as e:
        tap.ok(False, "a 17th from a third address is refused: 1013 with the reason", repr(e))
    for w in held:
        w.close()
    # Once they are gone (closed, or timed out without a token) there is room.
    ws, why = None, "not tried"
    if wait_for(lambda: (healthz(port, 10) or {}).get("connections") == 0, 60):
        ws, why = open_terminal(port, tok, src="127.0.0.5")
    tap.ok(not why, "once they are gone, that address gets a terminal", why)
    if ws:
        ws.close()
finally:
    for w in held:
        w.close()
    serve.terminate()
    serve.wait(timeout=30)
    env.cleanup()
tap.done()

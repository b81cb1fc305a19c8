#!/usr/bin/env python3
"""Attack: with a stream's token, take over its future seqs. Pre-sending
seqs ahead of the real stream with fake output made the store keep the
forgeries and silently drop the real events (INSERT OR IGNORE). Also:
rewriting a stored seq, seq 2^63-1, and a ts that is not a time. Each is
refused (1008 / 1007) and not stored; the real stream, resends included,
goes through."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, new_state, read_token, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

FAKE = {"data": "===== 42 passed in 0.01s =====", "stream": "stdout"}

st = new_state()
ing = Ingest(st.name)
try:
    tok = token(st.name, "learner", "task", "sb")
    evil = connect(ing, tok)
    evil.wait_ack(None)
    for seq in range(0 + 3, 20):  # ahead of a stream that has sent nothing yet
        evil.send_event(seq, "stdout", FAKE)
    tap.eq(evil.wait_close(), 1008, "seqs ahead of the stream: refused with 1008")
    evil.close()
    real = connect(ing, tok)
    real.wait_ack(None)
    for seq in range(20):
        real.send_event(seq, "stdout", {"data": f"real {seq}", "stream": "stdout"})
    tap.eq(real.wait_ack(19), 19, "the real stream 0..19 is acked")
    real.close()
    op = read_token(st.name)

    def stored():
        code, body = http(ing.port, "/v1/events?sandbox=sb", op)
        return [e["payload"]["data"] for e in body["events"]]

    tap.eq(stored(), [f"real {i}" for i in range(20)], "every real event is stored, no forgery")
    evil = connect(ing, tok)
    tap.eq(evil.wait_ack(None), 19, "a second holder connects at ack 19")
    evil.send_event(7, "stdout", FAKE)
    tap.eq(evil.wait_close(), 1008, "rewriting stored seq 7: refused with 1008")
    evil.close()
    for name, text, code in (
            ("seq 2^63-1", json.dumps({"seq": 2**63 - 1, "kind": "stdout", "payload": FAKE,
                                       "ts": "2026-01-01T00:00:00Z"}), 1008),
            ("ts 'not a time'", json.dumps({"seq": 20, "kind": "stdout", "payload": FAKE,
                                            "ts": "not a time"}), 1007)):
        c = connect(ing, tok)
        c.wait_ack(None)
        c.send_text(text)
        tap.eq(c.wait_close(), code, f"{name}: refused with {code}")
        c.close()
    tap.eq(stored(), [f"real {i}" for i in range(20)], "the stream is unchanged")
    # The real client reconnects and replays from 0 (at-least-once): accepted.
    real = connect(ing, tok)
    real.wait_ack(None)
    for seq in range(21):
        real.send_event(seq, "stdout", {"data": f"real {seq}", "stream": "stdout"})
    tap.eq(real.wait_ack(20), 20, "the real client's replay and next event are accepted")
    real.close()
    # After the handshake's ack (where the stream is), an ack covers only the
    # connection's own frames: a client that resends seq 0 learns that 0 is
    # stored, not that 1..20 (which another holder may have sent) are its own.
    c = connect(ing, tok)
    tap.eq(c.wait_ack(None), 20, "a reconnecting client is told the stream is at 20")
    c.send_event(0, "stdout", {"data": "real 0", "stream": "stdout"})
    tap.eq(c.wait_ack(0), 0, "its identical resend of seq 0 is acked as 0, not as 20")
    c.close()
    code, body = http(ing.port, "/v1/stats", op)
    tap.ok(code == 200 and body["seq_refused"] >= 2, "the refusals are counted", f"{body}")
    tap.ok(any("refused a frame of learner/task/sb" in l for l in ing.stderr), "and logged")
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    ing.stop()
    st.cleanup()
tap.done()

#!/usr/bin/env python3
"""Attack (issue 22): a stream that sends faster than a session's budgets
let a supervisor send (a forged stream from elsewhere, with a stream's
token). The ingest's per-stream rate (--max-stream-rate) holds it back
by back-pressure: past its rate the ingest stops reading that connection
until its rate allows the next frame, so its acks come later and its
sender keeps what is not acked. Nothing is dropped and no gap is made:
every event is stored, in order; the throttling is counted in /v1/stats
and logged. Another stream at the same time is stored whole too."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, new_state, read_token, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

RATE = 200   # frames a second per stream
N = 2000     # ten times the rate's burst: most of it waits for the rate
SLOW = 180   # generous: a loaded machine is slow, not broken

st = new_state()
ing = Ingest(st.name, extra=("--max-stream-rate", str(RATE)))
try:
    op = read_token(st.name)
    fast = connect(ing, token(st.name, "learner", "task", "fast"))
    tap.eq(fast.wait_ack(None), -1, "a new stream: ack -1")
    for seq in range(N):
        fast.send_event(seq, "stdout", {"data": f"fast {seq}", "stream": "stdout"})
    # Another stream at the same time, within its rate.
    calm = connect(ing, token(st.name, "learner", "task", "calm"))
    calm.wait_ack(None)
    for seq in range(50):
        calm.send_event(seq, "stdout", {"data": f"calm {seq}", "stream": "stdout"})
    tap.eq(calm.wait_ack(49, timeout=SLOW), 49, "the other stream is acked whole")
    tap.eq(fast.wait_ack(N - 1, timeout=SLOW), N - 1, f"the fast stream is acked to {N - 1}, in the end")
    fast.close()
    calm.close()
    seqs = ing.all_seqs("fast")
    tap.eq(seqs, list(range(N)), "every event of the fast stream is stored, in order, no gap")
    data = [e["payload"]["data"] for e in ing.events("fast", after_seq=N - 11)]
    tap.eq(data, [f"fast {i}" for i in range(N - 10, N)], "its last events are the ones sent")
    tap.eq(ing.all_seqs("calm"), list(range(50)), "the other stream is stored whole")
    code, body = http(ing.port, "/v1/stats", op)
    # The first RATE frames are the burst; the rest waited for the rate,
    # which paused the stream again and again.
    tap.ok(code == 200 and body.get("throttled", 0) >= 1, "the throttling is counted in /v1/stats", f"{body}")
    tap.eq(body.get("inserted"), N + 50, "every frame inserted once")
    tap.ok(any("stream learner/task/fast throttled" in line for line in ing.stderr), "and logged",
           "".join(ing.stderr)[-600:])
    tap.ok(not any("/calm throttled" in line for line in ing.stderr), "the other stream was never throttled")
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    ing.stop()
    st.cleanup()
tap.done()

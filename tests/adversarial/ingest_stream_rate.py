#!/usr/bin/env python3
"""Attack (issue 22): a stream that sends faster than a session's budgets
let a supervisor send (a forged stream from elsewhere, with a stream's
token). The ingest's per-stream rate (--max-stream-rate) holds it back
by back-pressure: past its rate the ingest stops reading that connection
until its rate allows the next frame, so its acks come later and its
sender keeps what is not acked. Nothing is dropped and no gap is made:
every event is stored, in order; the throttling is counted in /v1/stats
and logged. Another stream at the same time is stored whole too. Then a
real sandbox's uplink against a slow rate: its spool keeps what is not
acked, and every event reaches the store in the end, no gap."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, new_state, read_token, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASSD, tap, wait_for  # noqa: E402
from test_capture import CapEnv  # noqa: E402

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

# A real uplink against a slow rate: 600 file_diff events at 100 a second.
UPLINK_RATE = 100
env = CapEnv()
try:
    env.ingest.kill(signal.SIGTERM)
    port = env.ingest.port
    logf = open(env.ingest.log, "a")
    for _ in range(200):  # the old listener's port may be held for a moment
        p = subprocess.Popen([SANDGLASSD, "ingest", "--listen", f"127.0.0.1:{port}", "--store", f"sqlite:{env.db}",
                              "--secret", env.secret, "--max-stream-rate", str(UPLINK_RATE)],
                             stdout=subprocess.PIPE, stderr=logf, env=env.env, text=True)
        if p.stdout.readline().startswith("listening on"):
            break
        p.wait()
        time.sleep(0.05)
    logf.close()
    env.ingest.proc = p
    sid = env.create_captured()
    r = env.run("exec", sid, "--", "/bin/sh", "-c",
                "i=0; while [ $i -lt 600 ]; do echo $i > /workspace/f$i; i=$((i+1)); done", timeout=SLOW)
    tap.eq(r.returncode, 0, "a sandbox writes 600 files")
    # spooled whatever the ingest's rate (an exec's end reports its changes
    # for 1 s at most, the rest right after: waited for on a slow host)
    def spooled_diffs() -> int:
        return sum(fr.get("kind") == "file_diff" for _, fr in env.spool_records(sid))
    wait_for(lambda: spooled_diffs() >= 600, SLOW)
    spooled = max(seq for seq, _ in env.spool_records(sid))
    tap.ok(spooled_diffs() == 600 and spooled >= 600, "its events are spooled, not held back by the ingest's rate",
           f"last spooled seq {spooled}, {spooled_diffs()} file_diff")
    rows = env.wait_rows(sid, lambda rs: len(rs) > spooled, SLOW)
    tap.eq([x["seq"] for x in rows][:spooled + 1], list(range(spooled + 1)),
           "the uplink delivers every one in the end, in order, no gap")
    tap.eq(sum(x["kind"] == "file_diff" for x in rows), 600, "all 600 file_diff events stored")
    stats = env.ingest.http("/v1/stats")
    tap.ok(stats.get("throttled", 0) >= 1, "the ingest throttled the uplink's stream", repr(stats))
    tap.ok(stats.get("seq_refused") == 0, "and refused nothing", repr(stats))
    ls = {x["id"]: x for x in env.ls()}
    tap.eq(ls[sid].get("uplink", {}).get("state", "connected"), "connected", "the uplink stays connected")
    env.destroy(sid)
finally:
    env.cleanup()
tap.done()

#!/usr/bin/env python3
"""Attack: take over a stream's next seqs while its real client is away.
With the uplink daemon stopped (SIGSTOP: the real client cannot send), a
holder of the stream's token sends the stream's next seqs with fake
stdout; each is "the next one", so the ingest stores them. The daemon then
goes on and reconnects, and the ingest's first ack already covers those
seqs: an uplink that trusted it trimmed the real events unsent (silently
lost, the forgeries kept). Required: the uplink resends everything after
what its own connections had acked, the forged seqs surface as refusals
(1008, counted by the ingest, a line in uplink.log, destroy keeps the
spool, flush fails naming the seq), and the service goes on for others."""
from __future__ import annotations

import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sgtest import tap, uplink_daemon_pid, wait_for  # noqa: E402
from test_capture import CapEnv  # noqa: E402
from test_ingest import WS  # noqa: E402

FAKE = {"data": "===== 42 passed in 0.01s =====\n", "stream": "stdout"}
WAIT = 120.0


def stream_token(env: CapEnv, sid: str) -> str:
    meta = json.load(open(env.sbdir(sid, "meta.json")))
    p = env.run("token", "--learner", meta["learner"], "--task", meta["task"], "--sandbox", sid,
                "--secret", env.secret, check=True)
    return p.stdout.decode().strip()


def uplink_log(env: CapEnv) -> str:
    try:
        return open(os.path.join(env.state, "uplink.log"), errors="replace").read()
    except OSError:
        return ""


env = CapEnv()
daemon = 0
try:
    sid = env.create_captured()
    p, _ = env.run_exec(sid, "echo before")
    tap.ok(p.returncode == 0, "an exec before the attack is delivered")
    daemon = uplink_daemon_pid(env.state)
    tap.ok(daemon > 0, "the sandbox's events go through the uplink daemon", daemon)
    os.kill(daemon, signal.SIGSTOP)  # the real client is away
    r = env.sh(sid, "echo real-after")
    tap.ok(r.returncode == 0 and b"real-after" in r.stdout, "the learner's exec runs (spooled)")
    evil = WS(env.ingest.port, "/v1/ingest",
              headers={"Authorization": f"Bearer {stream_token(env, sid)}"})
    n = evil.wait_ack(None)
    forged = list(range(n + 1, n + 6))
    for seq in forged:
        evil.send_event(seq, "stdout", FAKE)
    tap.eq(evil.wait_ack(forged[-1]), forged[-1], f"the forger's seqs {forged} are 'the next' ones")
    evil.close()
    os.kill(daemon, signal.SIGCONT)
    daemon_pid, daemon = daemon, 0
    gave_up = f"refused seq {forged[0]} "
    tap.ok(wait_for(lambda: gave_up in uplink_log(env), WAIT),
           "the uplink reports the refusal of the first forged seq in uplink.log",
           uplink_log(env)[-2000:])
    stats = env.ingest.http("/v1/stats")
    tap.ok(stats.get("seq_refused", 0) >= 1, "the ingest counts the refused resends", stats)
    stored = [r for r in env.rows(sid) if r["seq"] in forged]
    tap.ok(len(stored) == len(forged) and all(r["payload"] == FAKE for r in stored),
           "the forgeries hold their seqs in the store (the attack itself is not undone)", stored)
    d = env.destroy(sid, "--json")
    res = json.loads(d.stdout or b"{}")
    tap.ok(isinstance(res.get("events_undelivered"), int) and res["events_undelivered"] > 0,
           "destroy reports the real events as undelivered, not delivered", d.stdout + d.stderr)
    kept = os.path.join(env.state, "undelivered", sid, "spool")
    tap.ok(os.path.isdir(kept), "their spool is kept for an operator")
    f = env.run("flush", sid, "--timeout", "60", timeout=120)
    out = (f.stdout + f.stderr).decode(errors="replace")
    tap.ok(f.returncode != 0 and f"seq {forged[0]}" in out and "other content" in out,
           "flush fails, naming the forged seq and why", out)
    tap.ok(os.path.isdir(kept), "and keeps the spool")
    other = env.create_captured()
    p, span = env.run_exec(other, "echo other-works")
    tap.ok(p.returncode == 0 and any(e["kind"] == "run_result" for e in span),
           "another sandbox's events are still delivered", span)
    env.destroy(other)
finally:
    if daemon:
        os.kill(daemon, signal.SIGCONT)
    env.cleanup()
tap.done()

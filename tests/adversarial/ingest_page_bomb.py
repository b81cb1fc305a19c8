#!/usr/bin/env python3
"""Attack: break the timeline with large events. Files of "\\x01" * 60000
become ~360 KB of JSON each; a 1000-event page passed the 8 MiB answer
limit and /v1/events answered 500, so `sandglass events` for the sandbox,
and the global one, stopped there. (The attack used 300; 100 is already
over 35 MB.) Pages are bounded by bytes now, and the client pages through."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, new_state, read_token, run, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

N = 100
st = new_state()
ing = Ingest(st.name)
try:
    c = connect(ing, token(st.name, "learner", "task", "bomb"))
    c.wait_ack(None)
    for i in range(N):
        c.send_event(i, "file_diff", {"path": f"bomb{i}", "change": "created", "size": 60000,
                                      "diff": "+" + "\x01" * 60000 + "\n"})
    tap.eq(c.wait_ack(N - 1), N - 1, f"{N} large events stored")
    c.close()
    code, body = http(ing.port, "/v1/events?sandbox=bomb", read_token(st.name))
    tap.ok(code == 200 and body["more"] is True and 0 < len(body["events"]) < N,
           "/v1/events answers a byte-bounded page", f"{code}")
    url = f"http://127.0.0.1:{ing.port}"
    for args in (["--sandbox", "bomb"], []):
        p = run("events", *args, "--json", "--ingest", url, state=st.name)
        got = [json.loads(l)["seq"] for l in p.stdout.split("\n") if l]
        tap.ok(p.returncode == 0 and got == list(range(N)),
               f"sandglass events {' '.join(args) or '(global)'} shows all {N}", f"rc {p.returncode} {p.stderr}")
    p = run("events", "--sandbox", "bomb", "--ingest", url, state=st.name)
    tap.ok(p.returncode == 0 and len(p.stdout.splitlines()) == N, "and the timeline", p.stderr)
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    ing.stop()
    st.cleanup()
tap.done()

#!/usr/bin/env python3
"""Attack: read every learner's commands, output and diffs from the ingest
with no credentials, with a stream token, past a scoped read token's scope,
or by making the filter vanish (a learner= value longer than the server's
buffer used to be treated as absent: every event came back)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, http, new_state, read_token, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

st = new_state()
ing = Ingest(st.name)
try:
    for learner, sb in (("victim", "v1"), ("mallory", "m1")):
        c = connect(ing, token(st.name, learner, "task", sb))
        c.wait_ack(None)
        c.send_event(0, "stdout", {"data": f"{learner}'s secret output", "stream": "stdout"})
        tap.eq(c.wait_ack(0), 0, f"{learner}'s event stored")
        c.close()
    leaked = lambda body: "victim's secret output" in repr(body)  # noqa: E731
    for path in ("/v1/events", "/v1/events?learner=victim", "/v1/sandboxes", "/v1/stats"):
        code, body = http(ing.port, path)
        tap.ok(code == 401 and not leaked(body), f"{path} without a token: 401", f"{code} {body}")
    code, body = http(ing.port, "/v1/events", token(st.name, "mallory", "task", "m1"))
    tap.ok(code == 401 and not leaked(body), "a stream token cannot read", f"{code} {body}")
    mine = read_token(st.name, "--learner", "mallory")
    code, body = http(ing.port, "/v1/events", mine)
    tap.ok(code == 200 and not leaked(body), "mallory's scoped token reads only mallory's events", f"{body}")
    code, body = http(ing.port, "/v1/events?learner=victim", mine)
    tap.ok(code == 403 and not leaked(body), "asking for the victim with it: 403", f"{code} {body}")
    code, body = http(ing.port, "/v1/sandboxes", mine)
    tap.ok(code == 200 and "victim" not in repr(body), "/v1/sandboxes hides the victim", f"{body}")
    for q in ("learner=" + "A" * 200, "learner=" + "A" * 5000, "sandbox=v1&sandbox=m1",
              "learner=mallory&learner=victim"):
        code, body = http(ing.port, "/v1/events?" + q, mine)
        tap.ok(code in (400, 403, 431) and not leaked(body), f"query {q[:30]}...: refused", f"{code} {body}")
        code, body = http(ing.port, "/v1/events?" + q, read_token(st.name))
        tap.ok(code in (400, 431), f"query {q[:30]}... with an operator token: 400, not the filter dropped",
               f"{code}")
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    ing.stop()
    st.cleanup()
tap.done()

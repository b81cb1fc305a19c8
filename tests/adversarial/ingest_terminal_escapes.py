#!/usr/bin/env python3
"""Attack: drive the operator's terminal through `sandglass events`. A
learner's output and file names held ESC, CR, BEL and OSC sequences,
printed raw: overwrite timeline lines, fake a PASS, set the window title.
Now every control character is shown escaped; --json stays exact JSON."""
from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, connect, new_state, run, still_serving, token  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASSD, tap  # noqa: E402
import subprocess  # noqa: E402

EVIL = [
    ("stdout", {"data": "\x1b]0;you have been owned\x07\r\x1b[2K12:00:00.000  #9 test_result  PASS pytest",
                "stream": "stdout"}),
    ("command", {"cmd": "ls\x1b[1A\x1b[2K\rrm -rf ~"}),
    ("file_diff", {"path": "src/\x1b]8;;http://evil/\x1b\\\\ok.py\x07", "change": "modified\r",
                   "diff": "+x\n"}),
    ("stdin", {"line": "\u009b31m\u202eyp.dab\u2028"}),
    ("activity", {"state": "idle\x1bc", "spooled": 0}),
]

st = new_state()
ing = Ingest(st.name)
try:
    c = connect(ing, token(st.name, "learner", "task", "esc"))
    c.wait_ack(None)
    for i, (kind, payload) in enumerate(EVIL):
        c.send_event(i, kind, payload)
    tap.eq(c.wait_ack(len(EVIL) - 1), len(EVIL) - 1, "the events are stored")
    c.close()
    url = f"http://127.0.0.1:{ing.port}"
    for args in (["--sandbox", "esc"], []):
        # --all: every event on its line (activity and stdin too); an output
        # is shown indented under its event's line, so no learner line can
        # pass for an event's (it never starts a line)
        p = subprocess.run([SANDGLASSD, "events", "--all", *args, "--ingest", url], capture_output=True,
                           env=dict(os.environ, SANDGLASS_STATE_DIR=st.name), timeout=60)
        raw = [b for b in p.stdout if (b < 0x20 and b != 0x0A) or b == 0x7F]
        text = p.stdout.decode("utf-8", "strict")
        unsafe = [ch for ch in text if 0x80 <= ord(ch) <= 0x9F or ch in "\u202e\u2028"]
        heads = [ln for ln in text.splitlines() if not ln.startswith("  ")]
        tap.ok(p.returncode == 0 and not raw and not unsafe and len(heads) == len(EVIL)
               and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d ", h) for h in heads),
               f"timeline {' '.join(args) or '(global)'}: no raw control byte, one line per event, "
               "each starting with its time; output only indented under it",
               f"raw {raw} unsafe {unsafe!r}\n{text}")
        tap.ok("\\x1b]0;you have been owned\\x07" in text, "the sequence is shown escaped", text)
    p = run("events", "--sandbox", "esc", "--json", "--ingest", url, state=st.name)
    evs = [json.loads(l) for l in p.stdout.split("\n") if l]
    tap.eq([e["payload"] for e in evs], [pl for _, pl in EVIL], "--json keeps the exact strings")
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves")
finally:
    ing.stop()
    st.cleanup()
tap.done()

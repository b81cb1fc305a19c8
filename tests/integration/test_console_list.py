#!/usr/bin/env python3
"""Issue 25, the console's list of sessions: GET /v1/sessions answers from
summaries the ingest keeps in memory and brings up to date at each request
from the rows committed since (src/ingest/ingest_sessions.c). Checked here
against the store's own query (the SQL of store_sqlite.c's sessions, run by
Python's sqlite3 on the same file), field for field, after each of several
rounds of writes between requests: new sessions, more events in old ones,
test results whose exit_code is an integer, a string of one, a float or
missing, sandbox states, an abort; with filters and paging. With
PostgreSQL (two nodes, when its binaries are here), node B's list counts
what was written through node A."""

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import Ingest, check, check_sanitizers, connect, token  # noqa: E402
import test_ingest  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402

LAST = ("(SELECT json_extract(t.payload, '$.{w}') FROM sg_events t WHERE t.learner = e.learner"
        " AND t.task = e.task AND t.sandbox = e.sandbox AND t.kind = '{k}' ORDER BY t.seq DESC LIMIT 1)")
SQL = ("SELECT learner, task, sandbox, min(id), count(*), min(ts), max(ts),"
       " sum(kind IN ('run_result', 'test_result')), sum(kind = 'session_abort'), "
       + LAST.format(w="exit_code", k="test_result") + ", " + LAST.format(w="state", k="sandbox") +
       " FROM sg_events e GROUP BY learner, task, sandbox ORDER BY min(id)")


def expected(db):
    out = []
    con = sqlite3.connect(db)
    for (l, t, sb, cur, n, st, last, cmds, aborts, tex, state) in con.execute(SQL):
        over = state in ("destroyed", "expired")
        try:
            ex = int(tex) if tex is not None and str(tex).lstrip("-").isdigit() else None
        except ValueError:
            ex = None
        out.append({"learner": l, "task": t, "sandbox": sb, "cursor": cur, "events": n, "started": st,
                    "last_activity": last, "commands": cmds, "aborted": aborts > 0,
                    "state": state if over else "aborted" if aborts > 0 else "active", "last_test_exit": ex})
    con.close()
    return out


class Streams:
    def __init__(self, ing, state):
        self.ing, self.state, self.next = ing, state, {}

    def write(self, learner, task, sb, events):
        c = connect(self.ing, token(self.state, learner, task, sb))
        seq = self.next.get((learner, task, sb), 0)
        for kind, payload in events:
            c.send_event(seq, kind, payload)
            seq += 1
        c.wait_ack(seq - 1)
        c.close()
        self.next[(learner, task, sb)] = seq


ROUNDS = [
    [("ann", "t1", "a1", [("command", {"cmd": "ls"}), ("run_result", {"exit_code": 0})]),
     ("bob", "t1", "b1", [("test_result", {"exit_code": 1})])],
    [("ann", "t1", "a1", [("test_result", {"exit_code": "3"}), ("sandbox", {"state": "running"})]),
     ("cy", "t2", "c1", [("session_abort", {"reason": "x"}), ("test_result", {"exit_code": 1.5})])],
    [("bob", "t1", "b1", [("test_result", {}), ("sandbox", {"state": "destroyed"})]),
     ("ann", "t1", "a2", [("sandbox", {"state": 7}), ("test_result", {"exit_code": 0})]),
     ("ann", "t1", "a1", [("sandbox", {"state": "expired"}), ("test_result", {"exit_code": 2})])],
]


def main():
    tmp = tempfile.mkdtemp(prefix="sg-console-list-")
    os.chmod(tmp, 0o711)
    try:
        state = os.path.join(tmp, "sqlite")
        os.makedirs(state)
        db = os.path.join(tmp, "events.db")
        a = Ingest(state, extra=("--store", f"sqlite:{db}"))
        w = Streams(a, state)
        for i, rnd in enumerate(ROUNDS):
            for learner, task, sb, evs in rnd:
                w.write(learner, task, sb, evs)
            st, got = a.http("/v1/sessions")
            want = expected(db)
            check(f"SQLite round {i + 1}: /v1/sessions equals the store's query, field for field",
                  st == 200 and got["sessions"] == want, json.dumps({"got": got, "want": want}, indent=1))
        want = expected(db)
        st, got = a.http("/v1/sessions?learner=ann&limit=1")
        check("a filter and a limit", st == 200 and got["sessions"] == [s for s in want if s["learner"] == "ann"][:1]
              and got["more"], got)
        cur = got["sessions"][0]["cursor"]
        st, got = a.http(f"/v1/sessions?learner=ann&after={cur}")
        check("the next page after its cursor", got["sessions"] == [s for s in want if s["learner"] == "ann"][1:],
              got)
        st, got = a.http("/v1/sessions?before=0&limit=2")
        check("before=0: newest first", st == 200 and got["sessions"] == want[::-1][:2] and got["more"], got)
        st, got = a.http(f"/v1/sessions?before={got['sessions'][-1]['cursor']}&limit=5")
        check("before=its cursor: the next older ones", got["sessions"] == want[::-1][2:], got)
        st, got = a.http("/v1/sessions?before=0&learner=ann")
        check("before= with a filter", got["sessions"] == [s for s in want if s["learner"] == "ann"][::-1], got)
        check("after= and before= together: 400", a.http("/v1/sessions?before=0&after=1")[0] == 400)
        st, got = a.http("/v1/sessions?task=t2&sandbox=c1")
        check("task and sandbox filters", got["sessions"] == [s for s in want if s["sandbox"] == "c1"], got)
        a.stop()
        b = Ingest(state, extra=("--store", f"sqlite:{db}"))
        st, got = b.http("/v1/sessions")
        check("a new ingest on the same store: the same list (read whole once)", got["sessions"] == want, got)
        b.stop()

        if subprocess.run(["bash", PG, "have"]).returncode != 0:
            check("# SKIP PostgreSQL: server binaries not found", True)
        else:
            pgdir, port = os.path.join(tmp, "pg"), free_port()
            url = pg("start", pgdir, port)
            try:
                state = os.path.join(tmp, "pg-state")
                os.makedirs(state)
                a = Ingest(state, extra=("--store", url))
                b = Ingest(state, extra=("--store", url))
                w = Streams(a, state)
                w.write(*ROUNDS[0][0])
                before = b.http("/v1/sessions")[1]["sessions"]
                for rnd in ROUNDS:
                    for args in rnd:
                        w.write(*args)
                ga, gb = a.http("/v1/sessions")[1]["sessions"], b.http("/v1/sessions")[1]["sessions"]
                check("PostgreSQL: node B's list counts what node A wrote since B's last answer",
                      len(before) == 1 and ga == gb and len(gb) == 4 and
                      [s["events"] for s in gb] == [8, 3, 2, 2], json.dumps([ga, gb]))
                a.stop()
                b.stop()
            finally:
                pg("stop", pgdir, port)
        check_sanitizers()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())

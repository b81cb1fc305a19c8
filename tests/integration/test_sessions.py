#!/usr/bin/env python3
"""GET /v1/sessions and `sandglass sessions` (issue 25): the sessions a read
token may see, with their state, start, last activity, commands, whether
the last test passed, and aborted or not, computed by SQL over the events
table, on SQLite and on PostgreSQL (a throwaway cluster made by
scripts/pg-server.sh; that half skips when its binaries are not installed).

Streams are written through a real ingest's /v1/ingest: one with a failing
then a passing test, one aborted, one destroyed, one of another learner.
Checked: every field, the token's scope (a learner's token sees only that
learner's; asking for another is 403), paging (limit=1, then after=the
cursor), bad values (400), the CLI's table and --json; and /v1/events's
kind= filter (validated: an unknown kind is 400)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import Ingest, check, check_sanitizers, connect, run, token  # noqa: E402
import test_ingest  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402


def write(ing, state, learner, task, sb, events):
    c = connect(ing, token(state, learner, task, sb))
    c.wait_ack(None)
    for i, (kind, payload) in enumerate(events):
        c.send_event(i, kind, payload)
    c.wait_ack(len(events) - 1)
    c.close()


def res(kind, cmd, code):
    return (kind, {"cmd": cmd, "exit_code": code, "duration_s": 0.1, "timed_out": False})


def scenario(ing, state, where):
    write(ing, state, "ann", "t1", "sbpass", [
        ("sandbox", {"state": "created"}), ("command", {"cmd": "pytest"}), res("test_result", "pytest", 1),
        ("command", {"cmd": "vi a.py"}), res("run_result", "vi a.py", 0),
        ("command", {"cmd": "pytest"}), res("test_result", "pytest", 0)])
    write(ing, state, "ann", "t1", "sbabort", [
        ("sandbox", {"state": "created"}), ("command", {"cmd": "pytest"}), res("test_result", "pytest", 2),
        ("session_abort", {"aborted": True, "by": "operator", "reason": "operator: stop"})])
    write(ing, state, "ann", "t2", "sbgone", [
        ("sandbox", {"state": "created"}), ("command", {"cmd": "ls"}), res("run_result", "ls", 0),
        ("sandbox", {"state": "destroyed"})])
    write(ing, state, "bob", "t1", "sbbob", [("sandbox", {"state": "created"})])

    code, body = ing.http("/v1/sessions")
    rows = {r["sandbox"]: r for r in body.get("sessions", [])}
    check(f"{where}: /v1/sessions lists the four sessions in the order they began",
          code == 200 and [r["sandbox"] for r in body["sessions"]] == ["sbpass", "sbabort", "sbgone", "sbbob"]
          and body["more"] is False, body)
    p = rows.get("sbpass", {})
    check(f"{where}: a session whose last test passed: active, 3 commands, last test exit 0",
          p.get("state") == "active" and p.get("commands") == 3 and p.get("last_test_exit") == 0
          and p.get("aborted") is False and p.get("events") == 7 and p.get("learner") == "ann"
          and p.get("task") == "t1" and p.get("started", "") <= p.get("last_activity", ""), p)
    a = rows.get("sbabort", {})
    check(f"{where}: an aborted session: aborted, its test failing",
          a.get("state") == "aborted" and a.get("aborted") is True and a.get("last_test_exit") == 2, a)
    g = rows.get("sbgone", {})
    check(f"{where}: a destroyed session without tests: destroyed, last test exit null",
          g.get("state") == "destroyed" and g.get("last_test_exit") is None and g.get("commands") == 1, g)

    code, body = ing.http("/v1/sessions?limit=1")
    code2, body2 = ing.http(f"/v1/sessions?limit=1&after={body['sessions'][0]['cursor']}")
    check(f"{where}: paged: limit=1 says more, after=its cursor gives the next",
          code == 200 and body["more"] is True and code2 == 200
          and [r["sandbox"] for r in body2["sessions"]] == ["sbabort"], (body, body2))
    code, body = ing.http("/v1/sessions?task=t1&learner=ann")
    check(f"{where}: filtered by learner and task",
          code == 200 and [r["sandbox"] for r in body["sessions"]] == ["sbpass", "sbabort"], body)
    for q in ("after=x", "limit=0", "limit=-3", "after=1&after=2"):
        code, body = ing.http(f"/v1/sessions?{q}")
        check(f"{where}: ?{q} is 400 with the reason", code == 400 and "bad value" in body.get("error", ""), body)

    code, body = ing.http("/v1/events?kind=test_result,session_abort")
    check(f"{where}: /v1/events?kind=test_result,session_abort: those rows only",
          code == 200 and sorted(e["kind"] for e in body["events"]) == ["session_abort"] + ["test_result"] * 3,
          body)
    for q in ("kind=bogus", "kind=", "kind=command,,stdout", "kind=command&kind=stdout"):
        code, body = ing.http(f"/v1/events?{q}")
        check(f"{where}: /v1/events?{q} is 400 with the reason", code == 400 and "kind" in body.get("error", ""), body)

    bob = run("token", "--read", "--learner", "bob", state=state).stdout.strip()
    code, body = ing.http("/v1/sessions", read_token=bob)
    check(f"{where}: bob's read token sees bob's session only",
          code == 200 and [r["sandbox"] for r in body["sessions"]] == ["sbbob"], body)
    code, body = ing.http("/v1/sessions?learner=ann", read_token=bob)
    check(f"{where}: and asking for ann's is 403", code == 403, body)

    url = f"http://127.0.0.1:{ing.port}"
    p = run("sessions", "--json", "--ingest", url, state=state)
    got = [json.loads(ln) for ln in p.stdout.splitlines()]
    check(f"{where}: sessions --json: one JSON line a session",
          p.returncode == 0 and [r["sandbox"] for r in got] == ["sbpass", "sbabort", "sbgone", "sbbob"], p)
    p = run("sessions", "--utc", "--ingest", url, state=state)
    lines = p.stdout.splitlines()
    ab = [ln for ln in lines if "sbabort" in ln]
    check(f"{where}: sessions: a header and a line each, with state, times and tests",
          p.returncode == 0 and lines[0].startswith("LEARNER") and len(lines) == 5 and ab
          and "aborted" in ab[0] and "failing" in ab[0] and "+00:00" in ab[0]
          and "passing" in [ln for ln in lines if "sbpass" in ln][0], p.stdout + p.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="sg-sessions-")
    os.chmod(tmp, 0o711)  # the PostgreSQL server runs as `postgres` when we are root
    state = os.path.join(tmp, "state")
    os.makedirs(state)
    ing = Ingest(state, extra=("--store", f"sqlite:{os.path.join(tmp, 'events.db')}"))
    pgdir, port = os.path.join(tmp, "pg"), None
    try:
        scenario(ing, state, "SQLite")
        ing.stop()
        if subprocess.run(["bash", PG, "have"]).returncode != 0:
            check("PostgreSQL # SKIP server binaries not found (scripts/install-deps.sh installs them)", True)
        else:
            port = free_port()
            url = pg("start", pgdir, port)
            state2 = os.path.join(tmp, "state2")
            os.makedirs(state2)
            ing = Ingest(state2, extra=("--store", url))
            scenario(ing, state2, "PostgreSQL")
            ing.stop()
    finally:
        if ing.proc.poll() is None:
            ing.stop()
        if port:
            pg("stop", pgdir, port)
    check_sanitizers()
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())

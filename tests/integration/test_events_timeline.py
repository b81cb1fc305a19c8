#!/usr/bin/env python3
"""`sandglass events` for a person (issue 25): the readable timeline of a
real captured session.

A captured sandbox runs commands (output with a CR-LF and a progress bar's
CRs, a hostile escape sequence, a failing test), takes a checkpoint and is
aborted; then:
- the timeline's lines carry a date, a time and a zone; one line a command
  with its result, its output below it, CRs resolved, learner bytes escaped;
- checkpoints and aborts read as sentences, not JSON; activity, process,
  stdin and per-exec checkpoints are hidden, and --all shows them;
- --kind, --since and --until filter; --json is the rows as before;
- /v1/events?except_kind= (what the timeline leaves in the store): every
  row but those kinds, in order; an unknown kind is a 400;
- --sandbox takes a unique prefix of 4 characters (found without --ingest,
  from the sandbox's record), a shorter one is an error naming it;
- an unknown learner, task or sandbox is one line and a non-zero exit;
- `sandglass sessions` shows the session aborted, with its failing test.
"""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, read_token, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402

DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d  ")


def main() -> None:
    env = CapEnv()
    try:
        run(env)
    finally:
        env.cleanup()
    tap.done()


def events(env: CapEnv, *args: str, ingest: bool = True, tz: str = "UTC"):
    a = ["events", *args]
    if ingest:
        a += ["--ingest", env.ingest.http_base, "--secret", env.secret]
    else:
        a += ["--secret", env.secret]
    p = env.run(*a, env={"TZ": tz})
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def run(env: CapEnv) -> None:
    sid = env.create_captured("--learner", "ann", task="tl")
    env.run_exec(sid, "printf 'one\\r\\ntwo\\r\\n'; printf '10%%\\r50%%\\r100%%\\n'")
    env.run_exec(sid, "printf 'evil \\033]0;pwned\\007 \\033[31mred\\n'")
    env.run_exec(sid, "printf '#!/bin/sh\\necho 3 passed, 1 failed\\nexit 1\\n' > run_tests; chmod +x run_tests")
    env.run_exec(sid, "./run_tests")
    p = env.run("checkpoint", sid, "--label", "mine")
    tap.ok(p.returncode == 0, "a checkpoint by hand", p.stderr.decode(errors="replace"))
    p = env.run("abort", sid, "--reason", "the test ends it")
    tap.ok(p.returncode == 0, "the session is aborted", p.stderr.decode(errors="replace"))
    env.wait_rows(sid, lambda r: any(x["kind"] == "session_abort" for x in r))

    rc, out, err = events(env, "--sandbox", sid)
    lines = out.splitlines()
    tap.eq(rc, 0, "events of the session: exit 0")
    heads = [ln for ln in lines if not ln.startswith("  ")]
    tap.ok(heads and all(DATE.match(ln) for ln in heads),
           "every event line starts with a date, a time and a zone", "\n".join(heads[:10]))
    tap.ok(all("+00:00" in ln for ln in heads), "TZ=UTC: the zone is +00:00")
    rc2, out2, _ = events(env, "--sandbox", sid, tz="America/New_York")
    tap.ok(rc2 == 0 and "-05:00" in out2 and "+00:00" not in out2,
           "local time with its zone (America/New_York: -05:00)", out2[:300])
    rc3, out3, _ = events(env, "--sandbox", sid, "--utc", tz="America/New_York")
    tap.ok(rc3 == 0 and "+00:00" in out3 and "-05:00" not in out3, "--utc: UTC whatever TZ says")

    cmd = [ln for ln in heads if "$ ./run_tests" in ln]
    tap.ok(len(cmd) == 1 and "tests FAIL" in cmd[0] and "exit 1" in cmd[0] and " s" in cmd[0],
           "the failing test: one line with its command, FAIL, its exit status and duration", "\n".join(cmd))
    tap.ok("  | 3 passed, 1 failed" in lines, "its output below it, in full", out)
    i = lines.index("  | one") if "  | one" in lines else -1
    tap.ok(any(re.search(r"  ~ \+3 -0 run_tests \(created\)$", ln) for ln in lines),
           "a file the command made: under it, with its line counts", out)
    tap.ok(i >= 0 and lines[i + 1] == "  | two" and lines[i + 2] == "  | 100%",
           "a CR-LF ends a line; after a progress bar's CRs its last state stands", "\n".join(lines[i - 1:i + 4]))
    tap.ok("\r" not in out and "\x1b" not in out and "\x07" not in out,
           "no raw CR, ESC or BEL reaches the terminal")
    tap.ok(any("\\x1b]0;pwned\\x07" in ln and "\\x1b[31mred" in ln for ln in lines),
           "hostile output is shown escaped", out)
    ck = [ln for ln in heads if 'checkpoint' in ln and '"mine"' in ln]
    tap.ok(len(ck) == 1 and "{" not in ck[0], "a checkpoint by hand is a sentence", "\n".join(ck))
    ab = [ln for ln in heads if "SESSION ABORTED" in ln]
    tap.ok(len(ab) == 1 and "the test ends it" in ab[0] and "{" not in ab[0],
           "the abort is a sentence with its reason", out)
    hidden = [ln for ln in heads if re.search(r"  #\d+ +(activity|typed|command) |pid \d+ <-|before exec", ln)]
    tap.eq(hidden, [], "activity, process, stdin, command and per-exec checkpoints are hidden")

    rc, out_all, _ = events(env, "--sandbox", sid, "--all")
    tap.ok(rc == 0 and "activity idle" in out_all and "before exec" in out_all and "typed " in out_all,
           "--all shows the plumbing", out_all[:400])

    rc, outk, _ = events(env, "--sandbox", sid, "--kind", "test_result,session_abort")
    kl = outk.splitlines()
    tap.ok(rc == 0 and len([ln for ln in kl if not ln.startswith("  ")]) == 2
           and "$ ./run_tests" in kl[0] and "SESSION ABORTED" in kl[-1],
           "--kind test_result,session_abort: those two events", outk)
    rc, outj, _ = events(env, "--sandbox", sid, "--kind", "checkpoint", "--json")
    rows = [json.loads(ln) for ln in outj.splitlines()]
    tap.ok(rc == 0 and rows and all(r["kind"] == "checkpoint" for r in rows)
           and {"id", "seq", "ts", "payload"} <= set(rows[0]), "--kind with --json: the rows as JSON", outj[:300])
    tok = read_token(env.env, env.secret)

    def get(q):
        req = urllib.request.Request(f"{env.ingest.http_base}/v1/events?{urllib.parse.urlencode(q)}",
                                     headers={"Authorization": f"Bearer {tok}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
    code, page = get({"sandbox": sid, "except_kind": "activity,process,stdin", "limit": 1000})
    want = [(r["seq"], r["kind"]) for r in env.rows(sid) if r["kind"] not in ("activity", "process", "stdin")]
    got = [(r["seq"], r["kind"]) for r in page.get("events", [])]
    tap.ok(code == 200 and got == want and len(want) < len(env.rows(sid)),
           "/v1/events?except_kind=activity,process,stdin: every other row, in order", (code, got[:5], want[:5]))
    code, page = get({"sandbox": sid, "except_kind": "activity,nosuchkind"})
    tap.ok(code == 400 and "nosuchkind" in page.get("error", ""), "except_kind= with an unknown kind: 400", page)

    rc, outs, _ = events(env, "--sandbox", sid, "--since", "1h")
    tap.ok(rc == 0 and outs == out, "--since 1h: all of it")
    rc, outs, _ = events(env, "--sandbox", sid, "--until", "2h")
    tap.ok(rc == 0 and outs == "", "--until 2h (ago): none of it", outs[:200])
    rc, outs, _ = events(env, "--sandbox", sid, "--since", "2099-01-01")
    tap.ok(rc == 0 and outs == "", "--since a date to come: none of it")
    rc, _, e = events(env, "--sandbox", sid, "--since", "yesterday-ish")
    tap.ok(rc == 2 and "--since" in e, "--since that is not a time: a usage error", e)

    rc, outp, e = events(env, "--sandbox", sid[:5], ingest=False)
    tap.ok(rc == 0 and outp == out, "a 5-character prefix, without --ingest (the sandbox's record names it)", e)
    rc, outp, e = events(env, "--learner", "ann")
    tap.ok(rc == 0 and sid in outp and "$ ./run_tests" in outp, "--learner ann", e)
    for args, what in ((["--learner", "nobody"], "learner"), (["--task", "nope"], "task"),
                       (["--sandbox", "ffffffffffff"], "sandbox")):
        rc, o, e = events(env, *args)
        tap.ok(rc != 0 and o == "" and len(e.strip().splitlines()) == 1 and what in e,
               f"an unknown {what}: one line, exit {rc}", e)
    def on_tty(extra_env):
        """events on a terminal (a pty): its output bytes."""
        m, sl = pty.openpty()
        e = dict(env.env, TZ="UTC", **extra_env)
        pr = subprocess.Popen([SANDGLASS, "events", "--sandbox", sid, "--ingest", env.ingest.http_base,
                               "--secret", env.secret], stdout=sl, stderr=subprocess.DEVNULL, env=e)
        os.close(sl)
        got = b""
        while True:
            try:
                b = os.read(m, 65536)
            except OSError:
                break
            if not b:
                break
            got += b
        pr.wait(60)
        os.close(m)
        return got
    tty = on_tty({})
    tap.ok(b"\x1b[1m$ ./run_tests" in tty and b"\x1b[31m" in tty,
           "on a terminal: colour (the command bold, a failure red)", tty[:400])
    tap.ok(b"\\x1b]0;pwned" in tty and b"\x1b]0;pwned" not in tty, "and the learner's escapes still escaped")
    tap.ok(b"\x1b[" not in on_tty({"NO_COLOR": "1"}), "NO_COLOR: none")
    tap.ok("\x1b[" not in out, "not a terminal: no colour")

    p = env.run("sessions", "--json", "--ingest", env.ingest.http_base, "--secret", env.secret)
    rows = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
    me = [r for r in rows if r["sandbox"] == sid]
    tap.ok(p.returncode == 0 and len(me) == 1 and me[0]["aborted"] is True and me[0]["state"] == "aborted"
           and me[0]["commands"] == 4 and me[0]["last_test_exit"] == 1 and me[0]["learner"] == "ann",
           "sessions --json: the session, aborted, 4 commands, its last test failing", p.stdout + p.stderr)
    p = env.run("sessions", "--learner", "ann", "--ingest", env.ingest.http_base, "--secret", env.secret)
    sl = p.stdout.decode().splitlines()
    tap.ok(p.returncode == 0 and len(sl) == 2 and sid in sl[1] and "aborted" in sl[1] and "failing" in sl[1],
           "sessions: its line in the table", p.stdout + p.stderr)
    rc, o, e = events(env, "--sandbox", sid[:3])
    tap.ok(rc != 0 and "4 characters" in e and len(e.strip().splitlines()) == 1,
           "a prefix under 4 characters: an error", e)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 24: every CodeStateID's files in a ProgSnap2 export equal
`sandglass workspace` at that event. A captured sandbox streaming to a real
ingest (SQLite) runs a scripted session: text and binary files, a rename, a
delete, a directory delete, a name that is not UTF-8, a symlink, a
checkpoint and a rollback, one command making 120 files (past the
per-exec limit, set to 40 for the sandbox: a `bulk` event), a later edit. The export's every distinct
CodeStateID, at the first row's Order (its seq), is compared with
`workspace --at SEQ` byte for byte (names, contents, link targets). The
rollback's rows and the file changes it made say EventInitiator
InstructorDirectAction. TAP output."""
from __future__ import annotations

import csv
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402
from test_fork import tree  # noqa: E402


def ok(cond, name: str, diag="") -> bool:
    return tap.ok(bool(cond), name, diag if isinstance(diag, str) else repr(diag))


LIMIT, BIG = 40, 120  # the sandbox's --max-file-events; the files of a bulk command

SCRIPT = [
    "printf 'hello\\n' > a.txt && head -c 4096 /dev/urandom > b.bin && mkdir -p d/sub"
    " && printf 'x\\n' > d/sub/x.py && printf 'y' > d/y.txt && ln -s a.txt link",
    "mv a.txt renamed.txt && rm b.bin && printf 'raw' > \"$(printf 'n\\377.txt')\"",
    "rm -r d && printf 'more\\n' >> renamed.txt",
]


def main() -> None:
    env = CapEnv()
    try:
        run(env)
    finally:
        env.cleanup()
    tap.done()


def run(env: CapEnv) -> None:
    # the per-exec file_diff limit at 40 (an option, default 1000): a bulk
    # event from 120 files, where every file_diff is a code state of its own
    sid = env.create_captured("--max-file-events", str(LIMIT))
    for s in SCRIPT:
        p = env.sh(sid, s)
        ok(p.returncode == 0, f"ran: {s[:40]}", p.stderr)
    c = env.run("checkpoint", sid, "--label", "before-big", "--json")
    ok(c.returncode == 0, "checkpoint", c.stderr)
    ck = json.loads(c.stdout)["id"] if c.returncode == 0 else "none"
    p = env.sh(sid, f"mkdir big && cd big && for i in $(seq {BIG}); do echo $i > f$i; done")
    ok(p.returncode == 0, f"one command made {BIG} files", p.stderr)
    env.wait_rows(sid, lambda r: any(x["kind"] == "bulk" for x in r), 120)
    p = env.run("rollback", sid, "--to", ck, "--yes")
    ok(p.returncode == 0, "rollback to the checkpoint", p.stderr)
    p = env.sh(sid, f"mkdir big2 && cd big2 && for i in $(seq {BIG}); do echo $i > g$i; done")
    ok(p.returncode == 0, f"a second {BIG}-file command, kept", p.stderr)
    p = env.sh(sid, "printf 'last\\n' > last.txt && printf 'edit\\n' >> renamed.txt")
    ok(p.returncode == 0, "a later edit", p.stderr)
    rows = env.wait_rows(sid, lambda r: any(x["kind"] == "file_diff" and x["payload"].get("path") == "last.txt"
                                            for x in r), 120)
    ok(any(x["kind"] == "bulk" for x in rows), "a bulk event was emitted",
       sorted({x["kind"] for x in rows}))
    ok(any(x["kind"] == "rollback" for x in rows), "a rollback event was stored")

    out = os.path.join(env.root, "ps2")
    p = env.run("export", "--format", "progsnap2", "--out", out, "--sandbox", sid,
                "--ingest", env.ingest.http_base, "--secret", env.secret, timeout=120)
    ok(p.returncode == 0, "export --format progsnap2", p.stderr)
    with open(os.path.join(out, "MainTable.csv"), newline="", encoding="utf-8") as f:
        main_rows = list(csv.DictReader(f))
    first = {}
    for r in main_rows:
        first.setdefault(r["CodeStateID"], int(r["Order"]))
    # each state a file_diff passes through mid-command (thousands here) is
    # checked at the events between commands, where a state is held: the
    # states in force at each event that is not a file_diff (bulk included)
    held = {r["CodeStateID"] for r in main_rows if r["X-Kind"] != "file_diff"} | {main_rows[-1]["CodeStateID"]}
    first = {k: v for k, v in first.items() if k in held}
    ok(len(first) >= 5, "the export has the session's code states", len(first))
    bad = {}
    for csid, seq in sorted(first.items(), key=lambda kv: kv[1]):
        d = tempfile.mkdtemp(dir=env.root)
        os.rmdir(d)
        w = env.run("workspace", "--sandbox", sid, "--at", str(seq), "--out", d,
                    "--ingest", env.ingest.http_base, "--secret", env.secret, timeout=120)
        want = tree(d, modes=False) if w.returncode in (0, 3) else {"error": w.stderr}
        got = tree(os.path.join(out, "CodeStates", csid), modes=False)
        if got != want:
            bad[f"{csid}@{seq}"] = {"only_ps2": sorted(set(got) - set(want))[:5],
                                    "only_ws": sorted(set(want) - set(got))[:5],
                                    "differ": [k for k in got if k in want and got[k] != want[k]][:5]}
    ok(not bad, f"every CodeStates/ID/ ({len(first)}) equals workspace --at its first Order (the states held between commands)", bad)
    big = [csid for csid in first if os.path.isdir(os.path.join(out, "CodeStates", csid, "big2"))]
    ok(big and len(os.listdir(os.path.join(out, "CodeStates", big[-1], "big2"))) == BIG,
       f"the bulk event's {BIG} files are in the code state")
    hexname = os.fsencode("n") + b"\xff.txt"
    ok(any(os.path.exists(os.path.join(os.fsencode(out), b"CodeStates", c.encode(), hexname)) for c in first),
       "the name that is not UTF-8 is written under its own bytes")

    seqs = {x["seq"] for x in rows if x["kind"] == "rollback"
            or (x["kind"] == "file_diff" and isinstance(x["payload"].get("operator"), dict))}
    init = {r["Order"]: r["EventInitiator"] for r in main_rows if int(r["Order"]) in seqs}
    ok(seqs and set(init.values()) == {"InstructorDirectAction"},
       "the rollback and its file changes: EventInitiator InstructorDirectAction", init)
    learner = {r["EventInitiator"] for r in main_rows if r["X-Kind"] in ("command", "run_result")}
    ok(learner == {"UserDirectAction"}, "the learner's commands: UserDirectAction", learner)


if __name__ == "__main__":
    main()

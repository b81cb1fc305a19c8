#!/usr/bin/env python3
"""sandglass export, import and purge (issue 24: exports for research,
retention and erasure), on SQLite and on PostgreSQL (a throwaway cluster
made by scripts/pg-server.sh; that half skips when its binaries are not
installed).

Streams are written through a real ingest's /v1/ingest (unicode, a path
with a comma, quote and newline, a binary/truncated file_diff, a test
result with failing tests, two learners). Checked: JSONL export is
deterministic (byte-identical twice), imported into a fresh store it gives
the same rows (compared row by row) and exports again byte for byte; CSV
read back by Python's csv and by pandas; ProgSnap2 MainTable read back by
both (required columns, EventIDs unique, Order consistent with
ServerTimestamp within a session); a learner's read token exports that
learner only and another is refused; bad input is refused with a clear
message (a bad import line is named and nothing is imported); purge
removes every event of the learner and nothing of the others; the
ingest's retention setting is exercised through purge --older-than-days.
Also: CSV, the ProgSnap2 tree and asciicast byte-identical twice; each
filter (learner, task, sandbox, since, until, combined) exports exactly
the store's rows it selects; ProgSnap2's fields (task, sandbox, UTC,
version, Resources/, the README's X- types) and its keyed SubjectID (no
raw learner id in any file); a 3,000-file session in three formats; an
export SIGKILLed while its temporary output grows leaves no OUT, only
OUT.tmp-PID, and the next completes; two PostgreSQL nodes export the
same bytes."""
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import Ingest, check, check_sanitizers, connect, run, token  # noqa: E402
import test_ingest  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402

BIN = test_ingest.BIN
try:
    import pandas  # noqa: F401 (Debian's python3-pandas, scripts/install-deps.sh)
except ImportError:  # a python3 of the same version beside Debian's: its packages
    sys.path.append(f"/usr/lib/python3/dist-packages")


def write(ing, state, learner, task, sb, events):
    c = connect(ing, token(state, learner, task, sb))
    c.wait_ack(None)
    for i, (kind, payload) in enumerate(events):
        c.send_event(i, kind, payload)
    c.wait_ack(len(events) - 1)
    c.close()


def sx(state, *args, timeout=120, input_file=None):
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    if input_file:
        with open(input_file, "rb") as f:
            return subprocess.run([BIN, *args], stdin=f, capture_output=True, text=True, env=env, timeout=timeout)
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=timeout)


ODD_PATH = 'dir/a,b "q"\nz.py'


def scenario_events():
    diff = "--- a/é.py\n+++ b/é.py\n@@ -0,0 +1 @@\n+print('héllo ✓')\n"
    return {
        ("ann", "t1", "sbann1"): [
            ("sandbox", {"state": "created"}),
            ("stdin", {"exec_id": "e1", "data": "vim é.py\n"}),
            ("command", {"exec_id": "e1", "cmd": "vim é.py", "cwd": "/work"}),
            ("file_diff", {"exec_id": "e1", "path": "é.py", "change": "created", "diff": diff, "added": 1,
                           "removed": 0, "size": 18, "sha256": "a" * 64}),
            ("file_diff", {"exec_id": "e1", "path": ODD_PATH, "change": "created", "size": 3, "sha256": "b" * 64,
                           "diff": "+x\r\n"}),
            ("file_diff", {"exec_id": "e1", "path": "blob.bin", "change": "modified", "binary": True,
                           "truncated": True, "size": 999999, "sha256": "c" * 64}),
            ("file_diff", {"exec_id": "e1", "path": "z.py", "old_path": "é.py", "change": "renamed",
                           "sha256": "a" * 64, "size": 18}),
            ("stdout", {"exec_id": "e1", "stream": "stdout", "data": "héllo ✓\n\x1b[31mred\x1b[0m", "bytes": 20,
                        "truncated": False}),
            ("test_result", {"exec_id": "e1", "cmd": "pytest", "exit_code": 1, "duration_s": 0.25,
                             "timed_out": False, "runner": "pytest", "parsed": True, "run": 3, "passed": 1,
                             "failed": 2, "errors": 0, "skipped": 0, "outcome": "failed",
                             "failing_tests": ["t.py::test_a", "t.py::test_b"], "failing_tests_truncated": True,
                             "partial": True, "source": "junit", "report": "reports/r,1.xml", "cpu_s": 0.125,
                             "memory_peak": 4096, "oom_killed": False, "output_bytes": 20,
                             "killed_by": {"cause": "timeout"}, "extra": {"nested": [1, 2]}}),
            ("run_result", {"exec_id": "e2", "cmd": "python3 z.py", "exit_code": 0, "duration_s": 0.1,
                            "timed_out": False}),
            ("file_diff", {"exec_id": "e2", "path": "blob.bin", "change": "deleted"}),
            ("sandbox", {"state": "destroyed"}),
        ],
        ("ann", "t2", "sbann2"): [("sandbox", {"state": "created"}), ("command", {"cmd": "ls"})],
        # more than two pages of /v1/events (1000 rows each)
        ("cy", "t3", "sbmany"): [("command", {"cmd": f"echo {i}", "exec_id": f"e{i}"}) for i in range(2345)],
        ("bob", "t1", "sbbob"): [
            ("sandbox", {"state": "created"}),
            ("command", {"exec_id": "e1", "cmd": "echo bob"}),
            ("file_diff", {"exec_id": "e1", "path": "shared.py", "change": "created", "size": 18,
                           "sha256": "a" * 64}),
            ("run_result", {"exec_id": "e1", "cmd": "echo bob", "exit_code": 0, "duration_s": 0.1,
                            "timed_out": False}),
        ],
    }


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def check_csv(where, path, rows):
    import pandas as pd
    with open(path, newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    want_cols = {"learner", "task", "sandbox", "seq", "kind", "ts", "received", "path", "cmd", "payload_other"}
    check(f"{where}: csv: one row per event, the row's fields and payload columns (csv module)",
          len(got) == len(rows) and want_cols <= set(got[0]) and
          [(r["learner"], r["sandbox"], int(r["seq"]), r["kind"]) for r in got] ==
          [(r["learner"], r["sandbox"], r["seq"], r["kind"]) for r in rows], got[:3])
    odd = [r for r in got if r["path"] == ODD_PATH]
    check(f"{where}: csv: a path with comma, quote and newline and unicode survive quoting",
          len(odd) == 1 and any(r["path"] == "é.py" for r in got), [r["path"] for r in got])
    tr = [r for r in got if r["kind"] == "test_result"][0]
    check(f"{where}: csv: lists as JSON, unknown fields in payload_other",
          json.loads(tr["failing_tests"]) == ["t.py::test_a", "t.py::test_b"] and
          json.loads(tr["payload_other"]) == {"extra": {"nested": [1, 2]}}, tr)
    # test_result's documented fields (docs/EVENTS.md) each in a column of its own
    check(f"{where}: csv: test_result's source, report, partial, truncation and resources have columns",
          (tr.get("source"), tr.get("report"), tr.get("partial"), tr.get("failing_tests_truncated"),
           tr.get("cpu_s"), tr.get("memory_peak"), tr.get("oom_killed"), tr.get("output_bytes"),
           tr.get("killed_by")) ==
          ("junit", "reports/r,1.xml", "true", "true", "0.125", "4096", "false", "20", '{"cause":"timeout"}'), tr)
    check(f"{where}: csv: pandas reads the same table",
          len(df) == len(got) and list(df.columns) == list(got[0].keys()) and
          list(df["path"]) == [r["path"] for r in got], df.head())


def check_ps2(where, d, rows):
    import pandas as pd
    names = sorted(os.listdir(d))
    check(f"{where}: progsnap2: DatasetMetadata.csv, MainTable.csv, CodeStates/, Resources/, README.md",
          {"DatasetMetadata.csv", "MainTable.csv", "CodeStates", "Resources", "README.md"} <= set(names), names)
    with open(os.path.join(d, "DatasetMetadata.csv"), newline="") as f:
        meta = {r["Property"]: r["Value"] for r in csv.DictReader(f)}
    check(f"{where}: progsnap2: metadata names the version, ordering and code state representation",
          meta.get("Version") and meta.get("EventOrderScope") == "Restricted" and
          meta.get("EventOrderScopeColumns") == "SessionID" and meta.get("CodeStateRepresentation") == "Directory",
          meta)
    with open(os.path.join(d, "MainTable.csv"), newline="", encoding="utf-8") as f:
        mt = list(csv.DictReader(f))
    df = pd.read_csv(os.path.join(d, "MainTable.csv"), dtype=str, keep_default_na=False)
    req = {"EventType", "EventID", "SubjectID", "ToolInstances", "CodeStateID", "Order", "SessionID",
           "ServerTimestamp", "ServerTimezone"}
    check(f"{where}: progsnap2: the required columns (pandas)", req <= set(df.columns), list(df.columns))
    check(f"{where}: progsnap2: EventIDs unique", df["EventID"].is_unique and len(df) == len(mt),
          df["EventID"].tolist())
    ok = True
    for sid, g in df.groupby("SessionID"):
        g = g.assign(o=g["Order"].astype(int))
        ok = ok and list(g.sort_values("o", kind="stable")["ServerTimestamp"]) == sorted(g["ServerTimestamp"])
    check(f"{where}: progsnap2: Order consistent with ServerTimestamp within each session", ok)
    types = {r["EventID"]: r for r in mt}
    ann = [r for r in mt if r["SessionID"] == "sbann1"]
    check(f"{where}: progsnap2: standard event types where one fits",
          [r["EventType"] for r in ann][:1] == ["Session.Start"] and ann[-1]["EventType"] == "Session.End" and
          "File.Create" in {r["EventType"] for r in ann} and "File.Rename" in {r["EventType"] for r in ann} and
          "File.Delete" in {r["EventType"] for r in ann} and "Run.Program" in {r["EventType"] for r in ann},
          [r["EventType"] for r in ann])
    tests = [r for r in ann if r["EventType"] == "Run.Test"]
    check(f"{where}: progsnap2: a test run and one Run.Test per failing test under one ExecutionID",
          len(tests) == 3 and len({r["ExecutionID"] for r in tests}) == 1 and tests[0]["Score"] == "0.3333"
          and tests[0]["ExecutionResult"] == "TestFailed" and [r["TestID"] for r in tests[1:]] ==
          ["t.py::test_a", "t.py::test_b"], tests)
    ren = [r for r in ann if r["EventType"] == "File.Rename"][0]
    check(f"{where}: progsnap2: a rename names both sections",
          ren["CodeStateSection"] == "é.py" and ren["DestinationCodeStateSection"] == "z.py", ren)
    cs = [r["CodeStateID"] for r in ann]
    check(f"{where}: progsnap2: a CodeStateID on every event, new at each change, reused between",
          all(cs) and cs[0] == cs[1] and cs[3] != cs[2] and cs[7] == cs[6] and
          all(os.path.isdir(os.path.join(d, "CodeStates", c)) for c in set(cs)), cs)
    out = [r for r in ann if r["ProgramOutput"]]
    check(f"{where}: progsnap2: output in Resources/, named by ProgramOutput",
          len(out) == 1 and open(os.path.join(d, out[0]["ProgramOutput"]), encoding="utf-8").read() ==
          "héllo ✓\n\x1b[31mred\x1b[0m", out)
    check(f"{where}: progsnap2: ToolInstances names sandglass", all(r["ToolInstances"].startswith("sandglass ")
                                                                    for r in mt), types and mt[0])
    ver = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.split()
    check(f"{where}: progsnap2: ToolInstances is `sandglass VERSION`, the CLI's version",
          len(ver) >= 2 and {r["ToolInstances"] for r in mt} == {f"sandglass {ver[1]}"},
          (ver, {r["ToolInstances"] for r in mt}))
    want = {(r["sandbox"], r["seq"]): r for r in rows}
    base = [r for r in mt if not r["EventID"].rsplit("-", 1)[-1].startswith("t")]
    check(f"{where}: progsnap2: AssignmentID = ProblemID = task, SessionID = sandbox, Order = seq, UTC",
          len(base) == len(rows) and all(
              (r["AssignmentID"], r["ProblemID"], r["ServerTimezone"]) ==
              (want[(r["SessionID"], int(r["Order"]))]["task"],) * 2 + ("UTC",) and
              r["EventID"] == f'{r["SessionID"]}-{r["Order"]}' for r in base), base[:2])
    inp = [r for r in ann if r["ProgramInput"]]
    check(f"{where}: progsnap2: input in Resources/, named by ProgramInput",
          len(inp) == 1 and inp[0]["ProgramInput"].startswith("Resources/") and
          open(os.path.join(d, inp[0]["ProgramInput"]), encoding="utf-8").read() == "vim é.py\n", inp)
    refs = {r[c] for r in mt for c in ("ProgramInput", "ProgramOutput", "ProgramErrorOutput") if r[c]}
    res = {"Resources/" + n for n in os.listdir(os.path.join(d, "Resources"))}
    check(f"{where}: progsnap2: Resources/ holds exactly the files MainTable names", refs == res and refs,
          (refs, res))
    readme = open(os.path.join(d, "README.md"), encoding="utf-8").read()
    xt = {r["EventType"] for r in mt if r["EventType"].startswith("X-")}
    check(f"{where}: progsnap2: the dataset's README names every X- type used",
          {"X-Command", "X-Input", "X-Output"} <= xt and all(t in readme for t in xt), (xt, readme[:300]))


def tree_bytes(d):
    """Every entry under d: relative path -> bytes (a link -> its target,
    a directory -> None)."""
    out = {}
    for r, ds, fs in os.walk(d):
        for n in ds + fs:
            f = os.path.join(r, n)
            out[os.path.relpath(f, d)] = ("link", os.readlink(f)) if os.path.islink(f) else \
                None if os.path.isdir(f) else open(f, "rb").read()
    return out


def filters_check(where, ing, state, tmp, store_rows):
    """Each filter, and filters combined, export exactly the store's rows
    they select; a ps2 pseudonymized dataset holds no raw learner id."""
    from datetime import datetime
    url = f"http://127.0.0.1:{ing.port}"
    c = connect(ing, token(state, RAW, "t5", "sbtime"))
    c.wait_ack(None)
    for i in range(6):
        c.send_event(i, "command", {"cmd": f"echo {i}"}, ts=f"2026-03-0{i + 1}T00:00:00.000000+00:00")
    c.wait_ack(5)
    c.close()
    rows = [r[:6] for r in store_rows()]

    def t(x):
        return datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()
    S, U = "2026-03-02T00:00:00Z", "2026-03-04T00:00:00Z"
    cases = [
        (["--learner", "bob"], lambda r: r[0] == "bob"),
        (["--task", "t1"], lambda r: r[1] == "t1"),
        (["--sandbox", "sbann2"], lambda r: r[2] == "sbann2"),
        (["--since", S], lambda r: t(r[5]) >= t(S)),
        (["--until", U], lambda r: t(r[5]) <= t(U)),
        (["--since", S, "--until", U], lambda r: t(S) <= t(r[5]) <= t(U)),
        (["--learner", "ann", "--task", "t1"], lambda r: r[:2] == ("ann", "t1")),
        (["--task", "t5", "--since", S, "--until", U], lambda r: r[1] == "t5" and t(S) <= t(r[5]) <= t(U)),
        (["--learner", "ann", "--sandbox", "sbbob"], lambda r: False),
    ]
    for i, (args, sel) in enumerate(cases):
        o = os.path.join(tmp, f"{where}-filter{i}.jsonl")
        p = sx(state, "export", "--format", "jsonl", "--out", o, "--ingest", url, *args)
        got = [(r["learner"], r["task"], r["sandbox"], r["seq"]) for r in read_jsonl(o)] if p.returncode == 0 \
            else None
        want = [tuple(r[:4]) for r in rows if sel(r)]
        check(f"{where}: export {' '.join(args)}: exactly the store's rows it selects",
              got == want and (want or "sbbob" in args), (p.stderr, (got or [])[:5], want[:5]))
    # ProgSnap2's SubjectID: a keyed hash; no raw id anywhere in the dataset
    subj = {}
    for name, key in (("k1", "k1"), ("k1b", "k1"), ("k2", "k2")):
        d = os.path.join(tmp, f"{where}-ps2-{name}")
        p = sx(state, "export", "--format", "progsnap2", "--out", d, "--ingest", url, "--learner", RAW,
               "--pseudonymize", "--key", os.path.join(tmp, f"{where}-{key}.key"))
        subj[name], leaks = {"failed": p.stderr}, ["export failed"]
        if p.returncode == 0:
            with open(os.path.join(d, "MainTable.csv"), newline="") as f:
                subj[name] = {r["SubjectID"] for r in csv.DictReader(f)}
            leaks = [n for n, b in tree_bytes(d).items() if RAW.encode() in n.encode() or
                     (isinstance(b, bytes) and RAW.encode() in b)]
        check(f"{where}: progsnap2 --pseudonymize ({name}): the raw learner id in no file of the dataset",
              not leaks and len(subj[name]) == 1, (leaks, p.stderr))
    s1, s1b, s2 = subj["k1"], subj["k1b"], subj["k2"]
    check(f"{where}: progsnap2 --pseudonymize: SubjectID a keyed hash, same key same id, another key another",
          s1 == s1b and s1 != s2 and all(x.startswith("p-") and x != RAW for x in s1 | s2), subj)


RAW = "rawid-q7x"
BIG = 15000  # rows of about 2 KB: 15 pages, three times what an export holds ahead


def many_files_check(where, ing, state, tmp):
    """A session of 3,000 distinct files: every format holds every row, and
    the last CodeState's manifest lists every file with its hash."""
    url = f"http://127.0.0.1:{ing.port}"
    n = 3000
    evs = [("sandbox", {"state": "created"})] + [
        ("file_diff", {"path": f"d{i % 7}/f{i}.txt", "change": "created", "size": 2, "sha256": f"{i:064x}"})
        for i in range(n)]
    write(ing, state, "many", "t7", "sbfiles3k", evs)
    j, c, d = (os.path.join(tmp, f"{where}-3k{x}") for x in (".jsonl", ".csv", "-ps2"))
    ps = [sx(state, "export", "--format", f, "--out", o, "--ingest", url, "--sandbox", "sbfiles3k")
          for f, o in (("jsonl", j), ("csv", c), ("progsnap2", d))]
    ok = all(p.returncode == 0 for p in ps)
    rows = read_jsonl(j) if ok else []
    with open(c, newline="", encoding="utf-8") if ok else io.StringIO("") as f:
        crows = list(csv.DictReader(f))
    with open(os.path.join(d, "MainTable.csv"), newline="") if ok else io.StringIO("") as f:
        mt = list(csv.DictReader(f))
    check(f"{where}: {n} files: jsonl, csv and progsnap2 hold every row",
          ok and [r["seq"] for r in rows] == list(range(n + 1)) and [int(r["seq"]) for r in crows] ==
          list(range(n + 1)) and [int(r["Order"]) for r in mt] == list(range(n + 1)) and
          {r["path"] for r in crows[1:]} == {f"d{i % 7}/f{i}.txt" for i in range(n)},
          [p.stderr for p in ps])
    last = mt[-1]["CodeStateID"] if mt else ""
    man = os.path.join(d, "X-CodeStateManifests", f"{last}.tsv")
    lines = open(man, encoding="utf-8").read().splitlines() if os.path.exists(man) else []
    check(f"{where}: {n} files: the last CodeState's manifest lists every file, path and sha256",
          sorted(lines) == sorted(f"d{i % 7}/f{i}.txt\t{i:064x}" for i in range(n)) and
          len({r["CodeStateID"] for r in mt}) == n + 1, (last, lines[:3], len(lines)))


def nodes_check(where, ing, state, tmp, store_url):
    """Two ingest nodes on one PostgreSQL: the export through either is the
    same bytes (jsonl and the ProgSnap2 tree)."""
    ing2 = Ingest(state, extra=("--store", store_url))
    try:
        outs = {}
        for k, node in (("1", ing), ("2", ing2)):
            url = f"http://127.0.0.1:{node.port}"
            j, d = os.path.join(tmp, f"{where}-node{k}.jsonl"), os.path.join(tmp, f"{where}-node{k}-ps2")
            ps = [sx(state, "export", "--format", f, "--out", o, "--ingest", url) for f, o in
                  (("jsonl", j), ("progsnap2", d))]
            outs[k] = (open(j, "rb").read(), tree_bytes(d)) if all(p.returncode == 0 for p in ps) else \
                [p.stderr for p in ps]
        check(f"{where}: the export through node 1 and node 2 is byte-identical (jsonl, progsnap2 tree)",
              isinstance(outs["1"], tuple) and outs["1"] == outs["2"] and len(outs["1"][0]) > 1000,
              (outs["1"] if not isinstance(outs["1"], tuple) else "", outs["2"] if not isinstance(outs["2"], tuple)
               else ""))
    finally:
        ing2.stop()


def interrupt_check(where, ing, state, tmp, store_url):
    """An export SIGKILLed mid-way (its temporary output seen growing, the
    ingest then stopped so that it cannot finish) leaves no OUT, only its
    OUT.tmp-PID; a second export completes beside the leftover."""
    import signal
    src = os.path.join(tmp, f"{where}-bigsrc.jsonl")
    from datetime import datetime, timezone
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000000+00:00")  # kept by the retention checks
    with open(src, "w") as f:
        for i in range(BIG):
            f.write(json.dumps({"learner": "big", "task": "t6", "sandbox": "sbbig", "seq": i, "kind": "command",
                                "ts": "2026-02-01T00:00:00.000000+00:00",
                                "received": now, "payload": {"cmd": f"echo {i} " + "x" * 2000}}) + "\n")
    p = sx(state, "import", src, "--store", store_url)
    check(f"{where}: interrupt: {BIG} rows imported for it", p.returncode == 0, p.stdout + p.stderr)
    url = f"http://127.0.0.1:{ing.port}"
    for fmt, name, grows in (("jsonl", "big.jsonl", ""), ("progsnap2", "big-ps2", "MainTable.csv")):
        out = os.path.join(tmp, f"{where}-{name}")
        env = dict(os.environ, SANDGLASS_STATE_DIR=state)
        cli = subprocess.Popen([BIN, "export", "--format", fmt, "--out", out, "--ingest", url, "--sandbox", "sbbig"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        tmpname = os.path.join(f"{out}.tmp-{cli.pid}", grows) if grows else f"{out}.tmp-{cli.pid}"

        def size():
            try:
                return os.path.getsize(tmpname)
            except OSError:
                return 0
        wait = test_ingest.wait_until
        first = wait(lambda: size() > 0 or cli.poll() is not None, timeout=120, step=0.001) and size()
        grew = first and wait(lambda: size() > first or cli.poll() is not None, timeout=120, step=0.001) \
            and cli.poll() is None
        ing.proc.send_signal(signal.SIGSTOP)  # no more pages: it cannot finish now
        try:
            cli.kill()
            cli.wait(timeout=60)
            cli.stderr.close()
        finally:
            ing.proc.send_signal(signal.SIGCONT)
        left = sorted(n for n in os.listdir(tmp) if n.startswith(f"{where}-{name}"))
        check(f"{where}: interrupt {fmt}: SIGKILLed while OUT.tmp-PID grew: no {name}, the temporary one left",
              grew and not os.path.exists(out) and left == [os.path.basename(out) + f".tmp-{cli.pid}"],
              (first, size(), left))
        p = sx(state, "export", "--format", fmt, "--out", out, "--ingest", url, "--sandbox", "sbbig")
        n = (len(read_jsonl(out)) if fmt == "jsonl" else
             len(list(csv.DictReader(open(os.path.join(out, "MainTable.csv"), newline=""))))) \
            if p.returncode == 0 else -1
        check(f"{where}: interrupt {fmt}: a second export completes, whole", n == BIG, (n, p.stderr))


def exports(where, ing, state, tmp, rows):
    url = f"http://127.0.0.1:{ing.port}"
    j1, j2 = os.path.join(tmp, f"{where}-1.jsonl"), os.path.join(tmp, f"{where}-2.jsonl")
    p1 = sx(state, "export", "--format", "jsonl", "--out", j1, "--ingest", url)
    p2 = sx(state, "export", "--format", "jsonl", "--out", j2, "--ingest", url)
    check(f"{where}: jsonl export runs", p1.returncode == 0 and p2.returncode == 0, p1.stderr + p2.stderr)
    got = read_jsonl(j1)
    key = [(r["learner"], r["task"], r["sandbox"], r["seq"]) for r in got]
    check(f"{where}: jsonl: every event, streams sorted, each in seq order, no store ids",
          key == sorted(key) and len(got) == len(rows) and all("id" not in r for r in got), key[:20])
    check(f"{where}: jsonl: a stream of several pages whole, in order",
          [r["seq"] for r in got if r["sandbox"] == "sbmany"] == list(range(2345)))
    check(f"{where}: jsonl: deterministic (byte-identical twice)", open(j1, "rb").read() == open(j2, "rb").read())
    check(f"{where}: jsonl: no temporary file left", not [n for n in os.listdir(tmp) if ".tmp-" in n],
          os.listdir(tmp))
    want = {(r["learner"], r["sandbox"], r["seq"]): r for r in rows}
    check(f"{where}: jsonl: lossless (kind, ts, received, payload as the ingest serves them)",
          all(want[(r["learner"], r["sandbox"], r["seq"])] == dict(r, id=want[(r["learner"], r["sandbox"],
                                                                                 r["seq"])]["id"]) for r in got))
    p = sx(state, "export", "--format", "jsonl", "--out", j1, "--ingest", url)
    check(f"{where}: an existing output is refused, not replaced", p.returncode != 0 and "exists" in p.stderr,
          p.stderr)
    c = os.path.join(tmp, f"{where}.csv")
    p = sx(state, "export", "--format", "csv", "--out", c, "--ingest", url)
    check(f"{where}: csv export runs", p.returncode == 0, p.stderr)
    check_csv(where, c, got)
    # the text path (rows written from the ingest's text) and the tree path
    # (taken with --pseudonymize) give the same fields
    cp = os.path.join(tmp, f"{where}-pseudo.csv")
    p = sx(state, "export", "--format", "csv", "--out", cp, "--ingest", url, "--pseudonymize")
    with open(c, newline="", encoding="utf-8") as f1, open(cp, newline="", encoding="utf-8") as f2:
        a = [dict(r, learner=None) for r in csv.DictReader(f1)]
        b = [dict(r, learner=None) for r in csv.DictReader(f2)]
    check(f"{where}: csv: written from the rows' text and from their trees, the same fields",
          p.returncode == 0 and a == b, [(x, y) for x, y in zip(a, b) if x != y][:2])
    d = os.path.join(tmp, f"{where}-ps2")
    p = sx(state, "export", "--format", "progsnap2", "--out", d, "--ingest", url)
    check(f"{where}: progsnap2 export runs", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        check_ps2(where, d, got)
    c2, d2 = c + "2", d + "2"
    p1 = sx(state, "export", "--format", "csv", "--out", c2, "--ingest", url)
    check(f"{where}: csv: deterministic (byte-identical twice)",
          p1.returncode == 0 and open(c, "rb").read() == open(c2, "rb").read(), p1.stderr)
    p1 = sx(state, "export", "--format", "progsnap2", "--out", d2, "--ingest", url)
    check(f"{where}: progsnap2: deterministic (the whole tree byte for byte twice)",
          p1.returncode == 0 and tree_bytes(d) == tree_bytes(d2) and len(tree_bytes(d)) > 4, p1.stderr)
    return j1


def scope(where, ing, state, tmp):
    url = f"http://127.0.0.1:{ing.port}"
    tok = sx(state, "token", "--read", "--learner", "bob").stdout.strip()
    o = os.path.join(tmp, f"{where}-bob.jsonl")
    p = sx(state, "export", "--format", "jsonl", "--out", o, "--ingest", url, "--token", tok)
    got = read_jsonl(o) if p.returncode == 0 else []
    check(f"{where}: a learner's read token exports that learner's events only",
          got and {r["learner"] for r in got} == {"bob"}, p.stderr)
    p = sx(state, "export", "--format", "jsonl", "--out", o + "2", "--ingest", url, "--token", tok,
           "--learner", "ann")
    check(f"{where}: ... and asking for another learner exports nothing",
          p.returncode == 0 and read_jsonl(o + "2") == [], p.stderr)
    ps = os.path.join(tmp, f"{where}-pseudo.jsonl")
    p = sx(state, "export", "--format", "jsonl", "--out", ps, "--ingest", url, "--pseudonymize")
    got = read_jsonl(ps) if p.returncode == 0 else []
    ls = {r["learner"] for r in got}
    check(f"{where}: --pseudonymize: learner ids replaced by a keyed hash, stable per learner",
          len(ls) == 3 and not ls & {"ann", "bob", "cy"} and all(x.startswith("p-") for x in ls), ls)


def bad_input(state, tmp, url):
    cases = [
        (["export", "--format", "xml", "--out", "x"], "--format"),
        (["export", "--format", "jsonl"], "--out"),
        (["export", "--format", "jsonl", "--out", "y", "--since", "yesterday"], "--since"),
        (["export", "--format", "progsnap2", "--out", "-"], "directory"),
        (["purge"], "--learner"),
        (["purge", "--learner", "a/b"], "not a valid name"),
        (["import"], "FILE"),
        (["import", "x.jsonl", "--store", "sqlite:x.db", "--ingest", url], "not both"),
        (["purge", "--learner", "a", "--store", "sqlite:x.db", "--ingest", url], "not both"),
        (["purge", "--learner", "a", "--secret", "s"], "go with --ingest"),
    ]
    for args, msg in cases:
        p = sx(state, *args)
        check(f"bad input refused with a clear message: {' '.join(args)}", p.returncode == 2 and msg in p.stderr,
              p.stderr)
    p = sx(state, "export", "--format", "jsonl", "--out", os.path.join(tmp, "bad.jsonl"), "--ingest", url,
           "--token", "not.a.token")
    check("a bad token: refused, and no output file", p.returncode != 0 and "ingest answered HTTP 401" in p.stderr
          and not os.path.exists(os.path.join(tmp, "bad.jsonl")), p.stderr)


def import_check(where, state, tmp, jsonl, fresh_url, fresh_store_rows):
    bad = os.path.join(tmp, f"{where}-bad.jsonl")
    lines = open(jsonl, encoding="utf-8").read().splitlines()
    with open(bad, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:3] + ['{"learner":"x","task":"t","sandbox":"s","seq":-1,"kind":"command",'
                                       '"ts":"t","received":"r","payload":{}}'] + lines[3:]) + "\n")
    p = sx(state, "import", bad, "--store", fresh_url)
    check(f"{where}: import: a bad line is named and nothing is imported",
          p.returncode == 1 and "line 4" in p.stderr and "seq" in p.stderr and fresh_store_rows() == [], p.stderr)
    # a bad line past the first batches (1000 rows each, streamed into the
    # one transaction): rolled back, still nothing imported
    late = len(lines) - 1
    assert late > 2000
    with open(bad, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:late] + ['{"learner":"x"}'] + lines[late:]) + "\n")
    p = sx(state, "import", bad, "--store", fresh_url)
    check(f"{where}: import: a bad line after {late} rows is named and nothing is imported",
          p.returncode == 1 and f"line {late + 1}" in p.stderr and fresh_store_rows() == [], p.stderr)
    p = sx(state, "import", jsonl, "--store", fresh_url)
    check(f"{where}: import runs in one go", p.returncode == 0 and "imported" in p.stdout, p.stderr)
    src = [(r["learner"], r["task"], r["sandbox"], r["seq"], r["kind"], r["ts"], r["received"],
            json.dumps(r["payload"], sort_keys=True)) for r in read_jsonl(jsonl)]
    got = fresh_store_rows()
    check(f"{where}: import: the fresh store holds the same rows, row by row", got == src,
          f"{len(got)} vs {len(src)}")
    p = sx(state, "import", jsonl, "--store", fresh_url)
    check(f"{where}: import again: every row already there, nothing doubled",
          p.returncode == 0 and f"imported 0 events ({len(src)} already" in p.stdout and
          len(fresh_store_rows()) == len(src), p.stdout + p.stderr)


def op_post(url, path, token, body=b""):
    """POST path to the ingest with Authorization: Bearer token: (status, JSON)."""
    import urllib.request
    import urllib.error
    req = urllib.request.Request(url + path, data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def op_token(state, op):
    """An operator write token made here from the ingest's secret as
    wire/token.c makes it (the CLI makes one per request, never prints it)."""
    import base64
    import hashlib
    import hmac
    import time
    secret = bytes.fromhex(open(os.path.join(state, "ingest", "secret")).read().strip())
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    claims = b64(json.dumps({"o": op, "n": os.urandom(16).hex(), "exp": int(time.time()) + 60},
                            separators=(",", ":")).encode())
    return claims + "." + b64(hmac.new(secret, claims.encode(), hashlib.sha256).digest())


PG_LOCK_PUT = 358049591668  # store_pg.c's: every insert takes it, an import's too


def held_import(where, state, ing, jsonl, op_url, op_rows):
    """An import through the ingest that waits on the store (a session
    holding the store's insert lock): meanwhile the ingest answers /healthz
    and reads (its loop is free), and nothing of the import is visible; let
    go, it completes. Returns the import's CompletedProcess."""
    def psql(sql):
        return subprocess.run(["psql", "-X", "-At", "-d", op_url, "-c", sql], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    holder = subprocess.Popen(["psql", "-X", "-q", "-d", op_url, "-c",
                               f"SELECT pg_advisory_lock({PG_LOCK_PUT}); SELECT pg_sleep(600)"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    cli = None
    try:
        held = test_ingest.wait_until(lambda: psql(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory'"
            " AND l.granted AND a.query LIKE '%pg_sleep(600)%'") == "1", timeout=60)
        cli = subprocess.Popen([BIN, "import", jsonl, "--ingest", f"http://127.0.0.1:{ing.port}"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waiting = test_ingest.wait_until(lambda: psql(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") not in ("", "0"), timeout=60)
        code, _ = ing.http("/healthz")
        code2, body2 = ing.http("/v1/stats")
        check(f"{where}: an import waiting on the store: the ingest still answers (/healthz, /v1/stats), "
              "nothing of it visible", held and waiting and code == 200 and code2 == 200 and op_rows() == [] and
              cli.poll() is None, (held, waiting, code, code2, body2))
    finally:
        # its backend sleeps on after its client is gone: ended from here
        psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%'"
             " AND pid <> pg_backend_pid()")
        holder.kill()
        holder.wait(timeout=60)
    try:
        out, err = cli.communicate(timeout=300) if cli else ("", "")
    except subprocess.TimeoutExpired:
        cli.kill()
        out, err = cli.communicate()
    return subprocess.CompletedProcess(cli.args if cli else [], cli.returncode if cli else 1, out, err)


def ingest_op_check(where, state, tmp, jsonl, op_url, op_rows, fresh_rows):
    """import and purge through the ingest (POST /v1/import, /v1/purge),
    with the operator write token the CLI makes from the ingest's secret:
    on an ingest of its own over an empty store, the same rows as the direct
    import; a read token, an import token at /v1/purge refused with a
    message; a bad line named and nothing imported; a purge removes the
    learner's events only; each action logged by the ingest; its streams
    still taken after."""
    ing = Ingest(state, extra=("--store", op_url))
    url = f"http://127.0.0.1:{ing.port}"
    try:
        read = sx(state, "token", "--read").stdout.strip()
        code, body = op_post(url, "/v1/import", read, open(jsonl, "rb").read())
        code2, body2 = op_post(url, "/v1/purge?learner=ann", read)
        check(f"{where}: via the ingest: a read token is refused (import and purge), saying why, nothing stored",
              code == 401 and code2 == 401 and "not an operator write token" in (body or {}).get("error", "") and
              "not an operator write token" in (body2 or {}).get("error", "") and op_rows() == [], (code, body, code2, body2))
        lines = open(jsonl, encoding="utf-8").read().splitlines()
        bad = os.path.join(tmp, f"{where}-opbad.jsonl")
        late = len(lines) - 1
        with open(bad, "w", encoding="utf-8") as f:
            f.write("\n".join(lines[:late] + ['{"learner":"x\u001b[2J"}'] + lines[late:]) + "\n")
        p = sx(state, "import", bad, "--ingest", url)
        check(f"{where}: via the ingest: a bad line after {late} rows is named (HTTP 400) and nothing is imported",
              p.returncode == 1 and f"line {late + 1}" in p.stderr and "HTTP 400" in p.stderr and
              "nothing imported" in p.stderr and op_rows() == [], p.stderr)
        if not op_url.startswith("sqlite:"):
            p = held_import(where, state, ing, jsonl, op_url, op_rows)
        else:
            p = sx(state, "import", jsonl, "--ingest", url)
        got, want = op_rows(), fresh_rows()
        check(f"{where}: import --ingest: the same rows as the direct import, row by row",
              p.returncode == 0 and f"imported {len(want)} events (0 already" in p.stdout and got == want and want,
              (p.stdout, p.stderr, len(got), len(want)))
        p = sx(state, "import", "-", "--ingest", url, input_file=jsonl)
        check(f"{where}: import - --ingest (stdin): every row already there, nothing doubled",
              p.returncode == 0 and f"imported 0 events ({len(want)} already" in p.stdout and op_rows() == want,
              p.stdout + p.stderr)
        logged = test_ingest.wait_until(
            lambda: any(f"import from 127.0.0.1 (token " in ln and f"{len(want)} events imported" in ln
                        for ln in ing.stderr) and
            any("import from 127.0.0.1" in ln and f"failed, nothing imported: line {late + 1}" in ln
                for ln in ing.stderr), timeout=60)
        check(f"{where}: the ingest logs each import: peer, token id, counts; the failed one with its line",
              logged and not any("\x1b" in ln for ln in ing.stderr), "".join(ing.stderr))
        code, body = op_post(url, "/v1/purge?learner=ann&tsk=t1", "x")
        check(f"{where}: via the ingest: a purge without a valid token is refused 401",
              code == 401 and "error" in body, (code, body))
        code, body = op_post(url, "/v1/purge?learner=ann", op_token(state, "import"))
        code2, body2 = op_post(url, "/v1/purge?learner=ann&tsk=t1", op_token(state, "purge"))
        check(f"{where}: via the ingest: an import token at /v1/purge is 403, a misspelt filter 400, nothing removed",
              code == 403 and "for import, not purge" in body.get("error", "") and code2 == 400 and
              "unknown query parameter 'tsk'" in body2.get("error", "") and op_rows() == want,
              (code, body, code2, body2))
        tok = op_token(state, "purge")
        code, body = op_post(url, "/v1/purge?learner=nobody", tok)
        code2, body2 = op_post(url, "/v1/purge?learner=nobody", tok)
        check(f"{where}: via the ingest: an operator write token is good for one operation (a replay is 401)",
              code == 200 and body.get("removed") == 0 and code2 == 401 and "already used" in body2.get("error", ""),
              (code, body, code2, body2))
        p = sx(state, "purge", "--learner", "ann", "--ingest", url)
        after = op_rows()
        check(f"{where}: purge --ingest: the learner's events gone, the others' kept",
              p.returncode == 0 and "removed" in p.stdout and after == [r for r in want if r[0] != "ann"] and after
              and len(after) < len(want), (p.stdout, p.stderr))
        logged = test_ingest.wait_until(
            lambda: any("purge from 127.0.0.1 (token " in ln and "learner=ann task=* sandbox=*" in ln and
                        "events removed" in ln for ln in ing.stderr), timeout=60)
        check(f"{where}: the ingest logs the purge: peer, token id, filter, count", logged, "".join(ing.stderr))
        write(ing, state, "zed", "t9", "sbzed", [("sandbox", {"state": "created"}), ("command", {"cmd": "ls"})])
        check(f"{where}: the ingest still takes a stream after an import and a purge",
              [r[0] for r in op_rows()].count("zed") == 2)
    finally:
        ing.stop()


BLOB_TABLES = [
    "CREATE TABLE IF NOT EXISTS sg_contents (sha256 text PRIMARY KEY, size bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sg_content_parts (sha256 text NOT NULL, off bigint NOT NULL,"
    " data {blob} NOT NULL, PRIMARY KEY (sha256, off))",
    "CREATE TABLE IF NOT EXISTS sg_casts (learner text NOT NULL, task text NOT NULL, sandbox text NOT NULL,"
    " session text NOT NULL, off bigint NOT NULL, data {blob} NOT NULL, PRIMARY KEY (learner, task, sandbox,"
    " session, off))",
]


CAST = '{"version":3,"term":{"cols":80,"rows":24}}\n[0.5,"o","h\u00e9llo \\u001b[1m\\r\\n"]\n'.encode()


def asciicast_check(where, ing, state):
    """The recordings kept by the ingest (helper blobs' /v1/casts), one file
    each; an ingest without them is refused with a message that says so."""
    d = os.path.join(os.path.dirname(state), f"{where}-casts")
    p = sx(state, "export", "--format", "asciicast", "--out", d, "--ingest", f"http://127.0.0.1:{ing.port}")
    code, _ = ing.http("/v1/casts?sandbox=sbann1")
    if code == 404:
        check(f"{where}: asciicast: an ingest without recordings is refused, saying so",
              p.returncode == 1 and "/v1/casts" in p.stderr and not os.path.exists(d), p.stderr)
        return
    files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs) if p.returncode == 0 else []
    check(f"{where}: asciicast: one v3 file per recording, and an index", p.returncode == 0 and
          files == ["index.csv", "sbann1/1.cast", "sbbob/1.cast"] and
          open(os.path.join(d, "sbann1", "1.cast"), "rb").read() == CAST and
          json.loads(CAST.split(b"\n")[0])["version"] == 3, (p.stderr, files))
    p2 = sx(state, "export", "--format", "asciicast", "--out", d + "2", "--ingest", f"http://127.0.0.1:{ing.port}")
    check(f"{where}: asciicast: deterministic (the whole directory byte for byte twice)",
          p.returncode == 0 and p2.returncode == 0 and tree_bytes(d) == tree_bytes(d + "2"), p2.stderr)


def purge_check(where, ing, state, store_url, rows_of, sql, query):
    # the contents and recordings tables (helper blobs' schema 3), filled:
    # a shared by ann and bob, b and c ann's only, d named by no event yet
    blob = "bytea" if "PostgreSQL" in where else "blob"
    byte = "decode('78', 'hex')" if blob == "bytea" else "X'78'"
    cast = CAST.hex()
    cast_sql = f"decode('{cast}', 'hex')" if blob == "bytea" else f"X'{cast}'"
    for t in BLOB_TABLES:
        sql(t.format(blob=blob))
    for h in "abcd":
        sql(f"INSERT INTO sg_contents VALUES ('{h * 64}', 1)")
        sql(f"INSERT INTO sg_content_parts VALUES ('{h * 64}', 0, {byte})")
    for l, sb in (("ann", "sbann1"), ("bob", "sbbob")):
        sql(f"INSERT INTO sg_casts VALUES ('{l}', 't1', '{sb}', '1', 0, {cast_sql})")
    asciicast_check(where, ing, state)
    before = rows_of()
    code, body = ing.http("/v1/sessions")  # the ingest keeps a summary per session from here on
    check(f"{where}: before the purge the session list names the learner",
          code == 200 and "ann" in {x["learner"] for x in body["sessions"]}, body)
    p = sx(state, "purge", "--learner", "ann", "--store", store_url)
    after = rows_of()
    kept = [set(query(f"SELECT sha256 FROM {t}")) for t in ("sg_contents", "sg_content_parts")]
    check(f"{where}: purge: the contents only the learner's events named go, shared and unnamed ones stay",
          all({"a" * 64, "d" * 64} <= k and not {"b" * 64, "c" * 64} & k for k in kept), kept)
    check(f"{where}: purge: the learner's recordings go, the others' stay",
          query("SELECT learner FROM sg_casts") == ["bob"], query("SELECT learner FROM sg_casts"))
    check(f"{where}: purge --learner: every event of the learner gone, logged",
          p.returncode == 0 and "removed" in p.stdout and "purged learner=ann" in p.stderr and
          not [r for r in after if r[0] == "ann"], p.stdout + p.stderr)
    check(f"{where}: purge --learner: nothing of the others lost",
          after == [r for r in before if r[0] != "ann"] and after, after)
    code, body = ing.http("/v1/events?learner=ann")
    code2, body2 = ing.http("/v1/sandboxes")
    code3, body3 = ing.http("/v1/sessions")
    check(f"{where}: purge: nothing of the learner readable through the ingest",
          code == 200 and body["events"] == [] and "ann" not in {s["learner"] for s in body2["sandboxes"]} and
          code3 == 200 and "ann" not in {x["learner"] for x in body3["sessions"]} and body3["sessions"],
          (body, body2, body3))
    p = sx(state, "purge", "--older-than-days", "1", "--store", store_url)
    check(f"{where}: retention: sessions newer than the age kept", p.returncode == 0 and rows_of() == after,
          p.stdout + p.stderr)
    p = sx(state, "purge", "--older-than-days", "0", "--store", store_url)
    check(f"{where}: retention: 0 days (every session) refused", p.returncode == 2 and
          "1..100000" in p.stderr and rows_of() == after, p.stdout + p.stderr)
    sql("UPDATE sg_events SET received = '2020-01-01T00:00:00.000000+00:00'")
    p = sx(state, "purge", "--older-than-days", "1", "--store", store_url)
    check(f"{where}: retention: sessions older than the age removed", p.returncode == 0 and rows_of() == [],
          p.stdout + p.stderr)


def contents_check(where, ing, state, tmp, sql):
    """ProgSnap2's CodeStates hold the files whose contents the store keeps
    (helper blobs' sg_contents, GET /v1/contents): each state's files equal
    the contents its file_diffs named, hard links to one copy; a file over
    the size limit and a path out of the state are left out. Runs where the
    ingest has the contents' API."""
    code, _ = ing.http("/v1/casts?sandbox=sbann1")
    if code == 404:
        check(f"{where}: CodeStates with files # SKIP this ingest keeps no contents (GET /v1/contents)", True)
        return
    import hashlib
    blob = "bytea" if "PostgreSQL" in where else "blob"
    data = {"a1": b"print(1)\n", "a2": b"print('\xc3\xa9')\n", "bin": bytes(range(256))}
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in data.items()}
    for k, v in data.items():
        lit = f"decode('{v.hex()}', 'hex')" if blob == "bytea" else f"X'{v.hex()}'"
        sql(f"INSERT INTO sg_contents VALUES ('{sha[k]}', {len(v)}) ON CONFLICT DO NOTHING")
        sql(f"INSERT INTO sg_content_parts VALUES ('{sha[k]}', 0, {lit}) ON CONFLICT DO NOTHING")

    def fd(path, change, k, stored=True):
        return ("file_diff", {"path": path, "change": change, "sha256": sha.get(k, k),
                              "content": {"type": "file", "sha256": sha.get(k, k), "stored": stored}})
    write(ing, state, "dee", "t4", "sbfiles", [
        ("sandbox", {"state": "created"}), fd("a.py", "created", "a1"), fd("d/b.bin", "created", "bin"),
        fd("a.py", "modified", "a2"), fd("big.dat", "created", "f" * 64, stored=False),
        fd("../out", "created", "a1"),
        ("file_diff", {"path": "empty/sub", "change": "created", "dir": True,
                       "content": {"type": "dir", "mode": 493, "size": 0, "stored": False}})])
    d = os.path.join(tmp, f"{where}-files")
    p = sx(state, "export", "--format", "progsnap2", "--out", d, "--sandbox", "sbfiles", "--ingest",
           f"http://127.0.0.1:{ing.port}")
    with open(os.path.join(d, "MainTable.csv"), newline="") as f:
        cs = [r["CodeStateID"] for r in csv.DictReader(f)]

    def tree(c):
        root = os.path.join(d, "CodeStates", c)
        return {os.path.relpath(os.path.join(r, n), root): open(os.path.join(r, n), "rb").read()
                for r, _, ns in os.walk(root) for n in ns}
    check(f"{where}: CodeStates hold each state's files as the store kept them",
          p.returncode == 0 and tree(cs[0]) == {} and tree(cs[1]) == {"a.py": data["a1"]} and
          tree(cs[3]) == {"a.py": data["a2"], os.path.join("d", "b.bin"): data["bin"]} and
          tree(cs[5]) == tree(cs[3]) and not os.path.exists(os.path.join(d, ".contents")),
          (p.stderr, [tree(c) for c in cs]))
    check(f"{where}: CodeStates hold an empty directory as `workspace` makes it",
          len(cs) > 6 and tree(cs[6]) == tree(cs[5]) and
          os.path.isdir(os.path.join(d, "CodeStates", cs[6], "empty", "sub")), cs)


def retain_check(where, ing, state, store_url, rows_of, age):
    """The ingest's --retain-days: a session idle for longer is removed at
    start (and hourly), a recent one kept; the removal is logged."""
    write(ing, state, "old", "t1", "sbold", [("sandbox", {"state": "created"}), ("command", {"cmd": "ls"})])
    write(ing, state, "new", "t1", "sbnew", [("sandbox", {"state": "created"})])
    ing.stop()
    age("UPDATE sg_events SET received = '2020-01-01T00:00:00.000000+00:00' WHERE learner = 'old'")
    ing2 = Ingest(state, extra=("--store", store_url, "--retain-days", "30"))
    gone = test_ingest.wait_until(lambda: not [r for r in rows_of() if r[0] == "old"], timeout=60)
    logged = test_ingest.wait_until(lambda: any("retention: removed 2 events" in ln for ln in ing2.stderr),
                                    timeout=60)
    check(f"{where}: ingest --retain-days: a session idle for longer is removed at start, logged",
          gone and logged, "".join(ing2.stderr))
    check(f"{where}: ingest --retain-days: a recent session kept", [r[0] for r in rows_of()] == ["new"],
          rows_of())
    ing2.stop()
    p = sx(state, "ingest", "--retain-days", "0")
    check(f"{where}: ingest --retain-days 0 refused", p.returncode == 2 and "--retain-days" in p.stderr, p.stderr)


def scenario(where, ing, state, tmp, store_url, store_rows, fresh_url, fresh_rows, age, query, op_store):
    for (l, t, s), evs in scenario_events().items():
        write(ing, state, l, t, s, evs)
    rows = []
    for (l, t, s) in sorted(scenario_events()):
        after = -1
        while page := ing.events(s, after_seq=after):
            rows += page
            after = page[-1]["seq"]
    jsonl = exports(where, ing, state, tmp, rows)
    scope(where, ing, state, tmp)
    filters_check(where, ing, state, tmp, store_rows)
    if where == "SQLite":
        many_files_check(where, ing, state, tmp)
        interrupt_check(where, ing, state, tmp, store_url)
    else:
        nodes_check(where, ing, state, tmp, store_url)
    contents_check(where, ing, state, tmp, age)
    import_check(where, state, tmp, jsonl, fresh_url, fresh_rows)
    ingest_op_check(where, state, tmp, jsonl, op_store[0], op_store[1], fresh_rows)
    # the imported store exports the same bytes
    ing2 = Ingest(state, extra=("--store", fresh_url))
    again = os.path.join(tmp, f"{where}-again.jsonl")
    p = sx(state, "export", "--format", "jsonl", "--out", again, "--ingest", f"http://127.0.0.1:{ing2.port}")
    check(f"{where}: the imported store exports byte for byte what the first did",
          p.returncode == 0 and open(again, "rb").read() == open(jsonl, "rb").read(), p.stderr)
    ing2.stop()
    purge_check(where, ing, state, store_url, store_rows, age, query)
    retain_check(where, ing, state, store_url, store_rows, age)


def sqlite_rows(path):
    def rows():
        if not os.path.exists(path):
            return []
        with sqlite3.connect(path) as db:
            return [(a, b, c, d, e, f, g, json.dumps(json.loads(h), sort_keys=True)) for a, b, c, d, e, f, g, h in
                    db.execute("SELECT learner, task, sandbox, seq, kind, ts, received, payload FROM sg_events"
                               " ORDER BY learner, task, sandbox, seq")]
    return rows


def sqlite_exec(path, sql):
    with sqlite3.connect(path) as db:
        db.execute(sql)


def sqlite_query(path, sql):
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute(sql)]


def pg_rows(url):
    def rows():
        p = subprocess.run(["psql", "-X", "-At", "-d", url, "-c",
                            "SELECT json_build_array(learner, task, sandbox, seq, kind, ts, received, payload)"
                            " FROM sg_events ORDER BY learner COLLATE \"C\", task COLLATE \"C\","
                            " sandbox COLLATE \"C\", seq"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(p.stderr)
        out = []
        for line in p.stdout.splitlines():
            a = json.loads(line)
            out.append(tuple(a[:7]) + (json.dumps(json.loads(a[7]), sort_keys=True),))
        return out
    return rows


def main():
    tmp = tempfile.mkdtemp(prefix="sg-export-")
    os.chmod(tmp, 0o711)  # the PostgreSQL server runs as `postgres` when we are root
    state = os.path.join(tmp, "state")
    os.makedirs(state)
    db = os.path.join(tmp, "events.db")
    ing = Ingest(state, extra=("--store", f"sqlite:{db}"))
    pgdir, port = os.path.join(tmp, "pg"), None
    try:
        bad_input(state, tmp, f"http://127.0.0.1:{ing.port}")
        fresh = os.path.join(tmp, "fresh.db")
        scenario("SQLite", ing, state, tmp, f"sqlite:{db}", sqlite_rows(db), f"sqlite:{fresh}", sqlite_rows(fresh),
                 lambda sql: sqlite_exec(db, sql), lambda sql: sqlite_query(db, sql),
                 (f"sqlite:{os.path.join(tmp, 'opimport.db')}", sqlite_rows(os.path.join(tmp, "opimport.db"))))
        ing.stop()
        if subprocess.run(["bash", PG, "have"]).returncode != 0:
            check("PostgreSQL # SKIP server binaries not found (scripts/install-deps.sh installs them)", True)
        else:
            port = free_port()
            url = pg("start", pgdir, port)
            fresh_url = url.rsplit("/", 1)[0] + "/fresh"
            op_url = url.rsplit("/", 1)[0] + "/opimport"
            for name in ("fresh", "opimport"):
                subprocess.run(["psql", "-X", "-q", "-d", url, "-c", f"CREATE DATABASE {name}"], check=True,
                               capture_output=True)
            op_rows = pg_rows(op_url)
            ing = Ingest(state, extra=("--store", url))
            tmp2 = os.path.join(tmp, "pgout")
            os.makedirs(tmp2)
            fresh_rows = pg_rows(fresh_url)
            scenario("PostgreSQL", ing, state, tmp2, url, pg_rows(url), fresh_url,
                     lambda: fresh_rows() if _has_table(fresh_url) else [],
                     lambda sql: subprocess.run(["psql", "-X", "-q", "-d", url, "-c", sql], check=True,
                                                capture_output=True),
                     lambda sql: subprocess.run(["psql", "-X", "-At", "-d", url, "-c", sql], check=True,
                                                capture_output=True, text=True).stdout.split(),
                     (op_url, lambda: op_rows() if _has_table(op_url) else []))
            ing.stop()
    finally:
        if ing.proc.poll() is None:
            ing.stop()
        if port:
            pg("stop", pgdir, port)
    check_sanitizers()
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


def _has_table(url):
    p = subprocess.run(["psql", "-X", "-At", "-d", url, "-c", "SELECT to_regclass('sg_events') IS NOT NULL"],
                       capture_output=True, text=True, timeout=60)
    return p.stdout.strip() == "t"


if __name__ == "__main__":
    sys.exit(main())

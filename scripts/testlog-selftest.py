#!/usr/bin/env python3
"""The harness cannot go green by accident: each rule of scripts/testlog.py
shown failing on a deliberately broken test program (a meson testlog.json
entry as meson writes it for that program), and passing on a good one.
TAP output."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTLOG = os.path.join(HERE, "testlog.py")
n = failed = 0


def check(cond, name, diag=""):
    global n, failed
    n += 1
    print(f"{'ok' if cond else 'not ok'} {n} - {name}", flush=True)
    if not cond:
        failed += 1
        for line in str(diag).splitlines()[:30]:
            print(f"#   {line}")


def run(programs, *args, listed=None, allowed=None):
    """testlog.py on a log of programs [(name, meson result, stdout)]:
    (exit status, (passed, failed, skipped) or None, output)."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "testlog.json")
        with open(log, "w") as f:
            for name, result, out in programs:
                f.write(json.dumps({"name": f"sandglass:x / {name}", "result": result,
                                    "duration": 0.1, "stdout": out}) + "\n")
        lst = os.path.join(d, "list.txt")
        with open(lst, "w") as f:
            for name in (listed if listed is not None else [p[0] for p in programs]):
                f.write(f"sandglass:x / {name}\n")
        cmd = [sys.executable, TESTLOG, log, "self", "--expect", lst, *args]
        if allowed is not None:
            al = os.path.join(d, "allowed.txt")
            with open(al, "w") as f:
                f.write(allowed)
            cmd += ["--allowed", al]
        p = subprocess.run(cmd, capture_output=True, text=True)
        last = p.stdout.strip().splitlines()[-1:] or [""]
        try:
            counts = tuple(int(x) for x in last[0].split())
        except ValueError:
            counts = None
        return p.returncode, counts, p.stdout + p.stderr


GOOD = "1..2\nok 1 - a\nok 2 - b\n"

rc, c, out = run([("good", "OK", GOOD)])
check(rc == 0 and c == (2, 0, 0), "a good program: its 2 checks pass", out)

rc, c, out = run([("noplan", "OK", "ok 1 - a\nok 2 - b\n")])
check(c is not None and c[1] >= 1 and "no TAP plan" in out,
      "ok lines and exit 0 without a plan (an early sys.exit(0)) fail", out)

rc, c, out = run([("short", "OK", "ok 1 - a\nok 2 - b\n1..3\n")])
check(c is not None and c[1] >= 1 and "plan 1..3 but 2" in out, "a plan its checks do not match fails", out)

rc, c, out = run([("silent", "SKIP", "")])
check(c is not None and c[1] >= 1, "a program that prints nothing and exits 0 (meson's SKIP) fails", out)

rc, c, out = run([("empty", "SKIP", "1..0\n")])
check(c is not None and c[1] >= 1, "a plan of 0 checks without a named skip fails", out)

rc, c, out = run([("skipped", "OK", "1..2\nok 1 - a\nok 2 - b # SKIPPED no frobnicator\n")])
check(c == (1, 0, 1), "a SKIPPED directive is a skip, never a pass", out)

rc, c, out = run([("skipped", "OK", "1..1\nok 1 - b # SKIP no frobnicator\n")], "--strict", "--build", "plain",
                 allowed="")
check(c is not None and c[1] == 1 and c[2] == 0, "in CI (--strict) a skip nothing excuses fails", out)

ALLOWED = "asan: no frobnicator -- only the sanitizer build lacks it\n"
rc, c, out = run([("skipped", "OK", "1..1\nok 1 - b # SKIP no frobnicator here\n")], "--strict", "--build", "plain",
                 allowed=ALLOWED)
check(c is not None and c[1] == 1, "a skip excused in another build (asan) fails in this one (plain)", out)
rc, c, out = run([("skipped", "OK", "1..1\nok 1 - b # SKIP no frobnicator here\n")], "--strict", "--build", "asan",
                 allowed=ALLOWED)
check(c == (0, 0, 1), "and is a counted, named skip in the build it names", out)

rc, c, out = run([("wholeskip", "SKIP", "1..0 # SKIP no frobnicator at all\n")], "--strict", "--build", "asan",
                 allowed=ALLOWED)
check(c == (0, 0, 1), "a plan of 0 with a SKIP directive and a reason is one counted, named skip", out)

rc, c, out = run([("skipped", "OK", "1..1\nok 1 - b # SKIP no frobnicator\n")], "--strict",
                 allowed="no frobnicator -- a line without its builds\n")
check(c is not None and c[1] >= 1 and "builds" in out, "an allowed skip that names no build fails the run", out)

rc, c, out = run([("good", "OK", GOOD)], listed=["good", "never-ran"])
check(c is not None and c[1] == 1 and "never-ran" in out,
      "a program meson test --list names that is not in the log fails (a killed meson)", out)

rc, c, out = run([("good", "OK", GOOD), ("stray", "OK", GOOD)], listed=["good"])
check(c is not None and c[1] == 1 and "stray" in out, "a program in the log that the list does not name fails", out)

rc, c, out = run([("good", "OK", GOOD)], "--meson-status", "1")
check(c is not None and c[1] == 1, "meson test failing while every program passed fails", out)

rc, c, out = run([("bad", "FAIL", "1..2\nok 1 - a\nnot ok 2 - b\n")])
check(c == (1, 1, 0), "a not ok is a failure, its passing check still a pass", out)

rc, c, out = run([("crashed", "ERROR", "1..3\nok 1 - a\n")])
check(c is not None and c[1] >= 1, "a program that died mid-run fails", out)

with tempfile.TemporaryDirectory() as d:
    log = os.path.join(d, "testlog.json")
    with open(log, "w") as f:
        f.write("{not json\n")
    p = subprocess.run([sys.executable, TESTLOG, log, "self"], capture_output=True, text=True)
    check(p.returncode != 0, "testlog.py fails (non-zero) on a log it cannot read: run_suite then fails the run",
          p.stdout + p.stderr)

print(f"1..{n}")
sys.exit(1 if failed else 0)

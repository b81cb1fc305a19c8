#!/usr/bin/env python3
"""Reads meson's testlog.json and counts what really ran.

    testlog.py LOG LABEL [--strict] [--allowed FILE] [--build KIND]
               [--expect LIST] [--meson-status N]

Prints one line per test program ("  [LABEL] RESULT NAME (Ns) ...") and one
line per skipped check with its reason, then a last line
"PASSED FAILED SKIPPED" counted over the TAP checks inside each program:
a program that passed with 40 checks adds 40 to PASSED; a program that
failed, timed out or crashed without a single "not ok" line still adds 1
to FAILED. A skip ("ok N - name # SKIP why", "# SKIPPED" alike, or a whole
"1..0 # SKIP why") is never a pass.

A run cannot go green by accident (each rule below fails it, and
scripts/testlog-selftest.py shows each one failing):
- a program without a TAP plan, or whose plan is not the number of checks
  it printed (an early exit of a Python test, which prints its plan last);
- a program that printed no check and no named skip (meson's silent SKIP);
- --expect: the programs in the log differ from that list (the output of
  `meson test --list` for the same selection: a killed meson, a lost log);
- --meson-status: meson failed and no program in the log says why.

--strict (CI): a skip is a failure unless a line of the allowed file
(tests/allowed-skips.txt) excuses it in this build (--build). Each line:
"BUILDS: SUBSTRING -- why", BUILDS a comma-separated list of plain, asan,
valgrind; SUBSTRING a part of the skip's reason.
"""
import argparse
import json
import re
import sys

BUILDS = ("plain", "asan", "valgrind")
SKIP_RE = re.compile(r"^ok\b[^#]*#\s*SKIP\S*:?\s*(.*)$", re.IGNORECASE)
PLAN_RE = re.compile(r"^1\.\.(\d+)\s*(?:#\s*(.*))?$")
PLAN_SKIP_RE = re.compile(r"^SKIP\S*:?\s*(.*)$", re.IGNORECASE)
OK_RE = re.compile(r"^ok\b")
NOT_OK_RE = re.compile(r"^not ok\b")


class AllowedError(Exception):
    pass


def allowed_patterns(path):
    """[(builds, substring)] from the allowed file; a line naming no build
    or an unknown one is an error (an excuse must say where it holds)."""
    pats = []
    if not path:
        return pats
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            head, sep, rest = line.partition(":")
            builds = [b.strip() for b in head.split(",")]
            if not sep or not all(b in BUILDS for b in builds):
                raise AllowedError(f"{path}:{n}: does not start with the builds it is allowed in "
                                   f"({', '.join(BUILDS)}), then ':'")
            pat = rest.split(" -- ", 1)[0].strip()
            if not pat:
                raise AllowedError(f"{path}:{n}: no reason substring")
            pats.append((set(builds), pat))
    return pats


def parse_tap(out):
    """(ok, not_ok, skips, plans) of one program's stdout: plans is a list of
    (count, skip reason or None)."""
    ok = not_ok = 0
    skips, plans = [], []
    for tl in out.splitlines():
        tl = tl.strip()
        m = PLAN_RE.match(tl)
        if m:
            sm = PLAN_SKIP_RE.match(m.group(2) or "")
            plans.append((int(m.group(1)), (sm.group(1).strip() or "(no reason given)") if sm else None))
            continue
        m = SKIP_RE.match(tl)
        if m:
            skips.append(m.group(1).strip() or "(no reason given)")
        elif NOT_OK_RE.match(tl):
            not_ok += 1
        elif OK_RE.match(tl):
            ok += 1
    return ok, not_ok, skips, plans


def program_problems(j, ok, not_ok, skips, plans):
    """Why a program failed although meson may call it OK or SKIP ([] when
    it did not)."""
    why = []
    if j["result"] not in ("OK", "SKIP"):
        why.append(f"meson says {j['result']}")
    if not_ok:
        why.append(f"{not_ok} check(s) not ok")
    if len(plans) != 1:
        why.append("no TAP plan (1..N)" if not plans else f"{len(plans)} TAP plans")
        return why
    count, plan_skip = plans[0]
    ran = ok + not_ok + len(skips)
    if count == 0 and plan_skip is None and ran == 0:
        why.append("no check ran and no named skip (1..0 without '# SKIP why')")
    elif count != ran:
        why.append(f"plan 1..{count} but {ran} check(s) printed")
    return why


def count_program(j, a, allowed, totals):
    out = j.get("stdout") or ""
    ok, not_ok, skips, plans = parse_tap(out)
    if len(plans) == 1 and plans[0][1] is not None and ok + not_ok + len(skips) == 0:
        skips = [plans[0][1]]  # "1..0 # SKIP why": the whole program, one named skip
        plans = [(1, None)]
    why = program_problems(j, ok, not_ok, skips, plans)
    result = j["result"] if not why or j["result"] not in ("OK", "SKIP") else "FAIL"
    print(f"  [{a.label}] {result:<8} {j['name']} ({j['duration']:.1f}s)"
          f" {ok} ok, {not_ok} not ok, {len(skips)} skipped")
    for w in why:
        print(f"  [{a.label}] FAIL     {j['name']}: {w}")
    totals[0] += ok  # in a failed program, the checks that passed still passed
    totals[1] += max(not_ok, 1) if why else 0
    for reason in skips:
        excused = any(a.build in builds and pat in reason for builds, pat in allowed)
        if a.strict and not excused:
            totals[1] += 1
            print(f"  [{a.label}] SKIP-FAIL {j['name']}: {reason}"
                  f" (a required check skipped in the {a.build} build; see tests/allowed-skips.txt)")
        else:
            totals[2] += 1
            print(f"  [{a.label}] SKIP     {j['name']}: {reason}")


def expected_names(path):
    """Test names from `meson test --list` ("project:suite / name")."""
    names = set()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if " / " in line:
                names.add(line.split(" / ", 1)[1].strip())
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("label")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--allowed")
    ap.add_argument("--build", choices=BUILDS, default="plain")
    ap.add_argument("--expect", help="`meson test --list` output for the same selection")
    ap.add_argument("--meson-status", type=int, default=0)
    a = ap.parse_args()
    try:
        allowed = allowed_patterns(a.allowed)
    except (AllowedError, OSError) as e:
        print(f"  [{a.label}] FAIL     {e}")
        print(0, 1, 0)
        return 0

    totals = [0, 0, 0]
    seen = []
    with open(a.log) as f:
        for line in f:
            j = json.loads(line)
            seen.append(j["name"].split(" / ", 1)[-1])  # "project:suite / name"
            count_program(j, a, allowed, totals)
    failed_before = totals[1]
    if a.expect is not None:
        want = expected_names(a.expect)
        for name in sorted(want - set(seen)):
            totals[1] += 1
            print(f"  [{a.label}] FAIL     {name}: listed by meson test --list but never ran")
        for name in sorted(set(seen) - want):
            totals[1] += 1
            print(f"  [{a.label}] FAIL     {name}: ran but is not in meson test --list")
        for name in sorted({n for n in seen if seen.count(n) > 1}):
            totals[1] += 1
            print(f"  [{a.label}] FAIL     {name}: ran {seen.count(name)} times")
        if not want:
            totals[1] += 1
            print(f"  [{a.label}] FAIL     meson test --list listed no program")
    if a.meson_status != 0 and totals[1] == failed_before == 0:
        totals[1] += 1
        print(f"  [{a.label}] FAIL     meson test exited {a.meson_status} and no program says why")
    print(*totals)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Reads meson's testlog.json and counts what really ran.

    testlog.py LOG LABEL [--strict] [--allowed FILE]

Prints one line per test program ("  [LABEL] RESULT NAME (Ns) ...") and one
line per skipped check with its reason, then a last line
"PASSED FAILED SKIPPED" counted over the TAP checks inside each program:
a program that passed with 40 checks adds 40 to PASSED; a program that
failed, timed out or crashed without a single "not ok" line still adds 1
to FAILED. A skip ("ok N - name # SKIP why", or a whole "1..0 # SKIP why")
is never a pass.

--strict (CI): a skip whose reason matches no line of the allowed file is
a failure too. The allowed file (tests/allowed-skips.txt) lists, one per
line, a substring of a skip reason that is expected on every machine, with
the reason why after " -- ".
"""
import argparse
import json
import re
import sys

SKIP_RE = re.compile(r"^ok\b[^#]*#\s*SKIP\b:?\s*(.*)$", re.IGNORECASE)
PLAN_SKIP_RE = re.compile(r"^1\.\.0\s*#\s*SKIP\b:?\s*(.*)$", re.IGNORECASE)
OK_RE = re.compile(r"^ok\b")
NOT_OK_RE = re.compile(r"^not ok\b")


def allowed_patterns(path):
    pats = []
    if not path:
        return pats
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pats.append(line.split(" -- ", 1)[0].strip())
    return pats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("label")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--allowed")
    a = ap.parse_args()
    allowed = allowed_patterns(a.allowed)

    passed = failed = skipped = 0
    with open(a.log) as f:
        for line in f:
            j = json.loads(line)
            out = j.get("stdout") or ""
            ok = not_ok = 0
            skips = []
            for tl in out.splitlines():
                tl = tl.strip()
                m = PLAN_SKIP_RE.match(tl) or SKIP_RE.match(tl)
                if m:
                    skips.append(m.group(1).strip() or "(no reason given)")
                elif NOT_OK_RE.match(tl):
                    not_ok += 1
                elif OK_RE.match(tl):
                    ok += 1
            good = j["result"] in ("OK", "EXPECTEDFAIL", "SKIP")
            if good and not_ok:
                good = False  # cannot happen with TAP, but never hide it
            file_failed = 0 if good else max(not_ok, 1)
            print(f"  [{a.label}] {j['result']:<8} {j['name']} ({j['duration']:.1f}s)"
                  f" {ok} ok, {not_ok} not ok, {len(skips)} skipped")
            passed += ok  # in a failed program, the checks that passed still passed
            failed += file_failed
            for why in skips:
                excused = any(p in why for p in allowed)
                if a.strict and not excused:
                    failed += 1
                    print(f"  [{a.label}] SKIP-FAIL {j['name']}: {why}"
                          " (a required check skipped; see tests/allowed-skips.txt)")
                else:
                    skipped += 1
                    print(f"  [{a.label}] SKIP     {j['name']}: {why}")
    print(passed, failed, skipped)


if __name__ == "__main__":
    sys.exit(main())

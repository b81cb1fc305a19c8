#!/usr/bin/env python3
"""Reads meson's testlog.json: prints one line per test and the counts.

    testlog.py LOG LABEL  -> lines "  [LABEL] RESULT NAME (Ns)", then "PASSED FAILED"
"""
import json
import sys

ok_results = {"OK", "EXPECTEDFAIL", "SKIP"}
passed = failed = 0
with open(sys.argv[1]) as f:
    for line in f:
        j = json.loads(line)
        good = j["result"] in ok_results
        passed += good
        failed += not good
        print(f"  [{sys.argv[2]}] {j['result']:<8} {j['name']} ({j['duration']:.1f}s)")
print(passed, failed)

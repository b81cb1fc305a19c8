#!/usr/bin/env python3
"""Every test program under tests/ is registered in tests/meson.build: a
file that is not would never run, and nothing would say so.

    check-tests-registered.py TESTS_DIR

Test programs: unit/test_*.c (each in unit_tests' sources),
integration/test_*.py (integration_tests), adversarial/*.py but the
*_common.py helpers (adversarial_tests), node/*.mjs (a test of its own in
meson.build, or a peer that a registered Python test or a bench/*.py runs by
name: a bench's peer lives here to share tests/node's npm packages).
TAP output: one check per file.
"""
import os
import re
import sys


def quoted(block):
    return set(re.findall(r"'([^']+)'", block))


def array(text, name):
    m = re.search(rf"^{name}\s*=\s*\[(.*?)^\]", text, re.S | re.M)
    return quoted(m.group(1)) if m else set()


def main():
    tests = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests")
    with open(os.path.join(tests, "meson.build")) as f:
        # without comments: an apostrophe in one would pair the quotes wrongly
        text = "".join(line.split("#", 1)[0] + "\n" for line in f)
    m = re.search(r"^unit_tests\s*=\s*\{(.*?)^\}", text, re.S | re.M)
    unit = {x[len("unit/"):] for x in quoted(m.group(1) if m else "") if x.startswith("unit/")}
    integ = array(text, "integration_tests")
    adv = array(text, "adversarial_tests")
    node_direct = set(re.findall(r"files\('node/([^']+\.mjs)'\)", text))
    checks = []
    # the unit test sources, then the scripts
    for f in sorted(os.listdir(os.path.join(tests, "unit"))):
        if f.startswith("test_") and f.endswith(".c"):
            checks.append((f"unit/{f}", f in unit))
    for f in sorted(os.listdir(os.path.join(tests, "integration"))):
        if f.startswith("test_") and f.endswith(".py"):
            checks.append((f"integration/{f}", f in integ))
    for f in sorted(os.listdir(os.path.join(tests, "adversarial"))):
        if f.endswith(".py") and not f.endswith("_common.py"):
            checks.append((f"adversarial/{f}", f in adv))
    # node peers run by a registered Python test count as registered
    runners = ""
    for d, names in (("integration", integ), ("adversarial", adv)):
        for n in names:
            try:
                with open(os.path.join(tests, d, n)) as f:
                    runners += f.read()
            except OSError:
                pass
    bench = os.path.join(tests, "..", "bench")
    for f in sorted(os.listdir(bench)) if os.path.isdir(bench) else []:
        if f.endswith(".py"):
            with open(os.path.join(bench, f)) as fh:
                runners += fh.read()
    for f in sorted(os.listdir(os.path.join(tests, "node"))):
        if f.endswith(".mjs"):
            checks.append((f"node/{f}", f in node_direct or f in runners))
    print(f"1..{len(checks)}")
    bad = 0
    for i, (name, ok) in enumerate(checks, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name} is registered in tests/meson.build")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_result's counts (issue 24): real test runners, run by `sandglass
exec` inside a captured sandbox, and the counts, failing tests' names and
outcome the store's test_result holds. The runners are Debian's (the
sandbox's root is the host's system directories, read-only): pytest
(python3-pytest), unittest, go test (golang-go), cargo test (cargo, offline,
a crate without dependencies), rspec (ruby-rspec); and npm's jest, vitest
and mocha, pinned in tests/node/package.json, whose packages are copied
into the sandbox's /tmp (sandboxes are offline) and linked as the
project's node_modules. A runner whose program is not on the host is
skipped with why (scripts/install-deps.sh and scripts/test.sh install
them). TAP output.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import tap  # noqa: E402
from test_capture import CapEnv, ok  # noqa: E402


def put(env: CapEnv, sid: str, files: dict[str, str]) -> None:
    """Writes files into the workspace, as the sandbox's user."""
    cmds = []
    for path, text in files.items():
        b = base64.b64encode(text.encode()).decode()
        cmds.append(f"mkdir -p \"$(dirname '{path}')\" && echo {b} | base64 -d > '{path}'")
    p = env.sh(sid, " && ".join(cmds))
    assert p.returncode == 0, p


def result(env: CapEnv, sid: str, script: str, timeout: float = 300) -> dict:
    p, ev = env.run_exec(sid, script, timeout=timeout)
    tr = [r["payload"] for r in ev if r["kind"] == "test_result"]
    return tr[0] if len(tr) == 1 else {"events": [r["kind"] for r in ev], "exit": p.returncode}


def counts(tr: dict) -> tuple:
    return tuple(tr.get(k) for k in ("runner", "parsed", "outcome", "run", "passed", "failed", "errors", "skipped"))


PY_TESTS = """\
import pytest

def test_one():
    assert 1 + 1 == 2

def test_two():
    assert 1 + 1 == 3

@pytest.mark.skip(reason="later")
def test_three():
    pass

def test_four():
    pass
"""

UT_TESTS = """\
import unittest

class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(1, 1)

    def test_fail(self):
        self.assertEqual(1, 2)

    def test_error(self):
        raise RuntimeError("boom")

    @unittest.skip("later")
    def test_skip(self):
        pass
"""

GO_TESTS = """\
package m

import "testing"

func TestAdd(t *testing.T) {}

func TestSub(t *testing.T) { t.Fatal("wrong") }

func TestSkip(t *testing.T) { t.Skip("later") }
"""

RS_LIB = """\
pub fn add(a: i32, b: i32) -> i32 { a + b }

#[cfg(test)]
mod tests {
    #[test]
    fn adds() { assert_eq!(super::add(1, 1), 2); }
    #[test]
    fn fails() { assert_eq!(super::add(1, 1), 3); }
    #[test]
    #[ignore]
    fn later() {}
}
"""

# A runner that writes what a hostile learner's would: its JUnit report
# (--junitxml=P) or its output, as the last word says.
HOSTILE_RUNNER = r"""#!/usr/bin/env python3
import os
import sys
rep = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--junitxml=")][0]
mode = sys.argv[-1]
os.makedirs(os.path.dirname(rep) or ".", exist_ok=True)
if mode == "sparse":
    with open(rep, "wb") as f:
        f.truncate(10 << 30)
elif mode == "xml":
    names = ["bidi\u202egnp.exe", "csi\u009b2J\u009b31mred", "c1\u0085osc\u009d0;pwned\u009c",
             "nl&#10;FAILED forged&#13;x", "big" + "A" * 1000000] + ["t%d" % i for i in range(60)]
    cases = "".join('<testcase classname="c" name="%s"><failure message="m"/></testcase>' % n for n in names)
    with open(rep, "w", encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="s">%s</testsuite></testsuites>'
                % cases)
elif mode == "out":
    for i in range(60):
        sys.stdout.write("FAILED t.py::esc\x1b]0;pwned\x07osc\x1b[2Jcsi\u202ebidi\u009b31m%d - boom\n" % i)
    sys.stdout.write("FAILED t.py::big" + "B" * 30000 + " - boom\n")
    sys.stdout.write("==== 61 failed in 0.10s ====\n")
sys.exit(1)
"""


NODE_MODULES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node", "node_modules")


def node_closure(nm: str, roots: list[str]) -> list[str]:
    """The folders under nm (tests/node's node_modules) that roots need, by
    node's lookup (a package's own node_modules, then its parents')."""
    seen: set[str] = set()
    todo = [(nm, r) for r in roots]
    while todo:
        frm, name = todo.pop()
        d, hit = frm, None
        while d.startswith(nm):
            c = os.path.join(d if d.endswith("node_modules") else os.path.join(d, "node_modules"), name)
            if os.path.isfile(os.path.join(c, "package.json")):
                hit = c
                break
            d = os.path.dirname(d)
        if not hit or hit in seen:
            continue
        seen.add(hit)
        with open(os.path.join(hit, "package.json")) as f:
            pj = json.load(f)
        todo += [(hit, dep) for k in ("dependencies", "optionalDependencies") for dep in pj.get(k) or {}]
    return sorted({os.path.relpath(p, nm).split("/node_modules/")[0] for p in seen})


def node_setup(env: CapEnv, sid: str, runners: list[str]) -> None:
    """The runners' packages into the sandbox's /tmp (a tar through the
    exec's stdin: sandboxes are offline, and node_modules in the workspace
    would be thousands of file events), and node_modules/.bin for them."""
    tar = subprocess.run(["tar", "-C", NODE_MODULES, "-c", *node_closure(NODE_MODULES, runners),
                          *(f".bin/{r}" for r in runners)],
                         capture_output=True, check=True).stdout
    p = env.sh(sid, "mkdir -p /tmp/nm/node_modules && tar -C /tmp/nm/node_modules -x", input=tar, timeout=300)
    assert p.returncode == 0, p


JEST_TESTS = """\
test('adds', () => { expect(1 + 1).toBe(2); });
test('subtracts wrong', () => { expect(2 - 1).toBe(3); });
test('multiplies wrong', () => { expect(2 * 2).toBe(5); });
test.skip('later', () => {});
"""

RSPEC_TESTS = """\
RSpec.describe "calc" do
  it("adds") { expect(1 + 1).to eq(2) }
  it("subtracts wrong") { expect(2 - 1).to eq(3) }
  it("multiplies wrong") { expect(2 * 2).to eq(5) }
  it("later") { skip "later" }
end
"""

MOCHA_TESTS = """\
describe('calc', function () {
  it('adds', function () {});
  it('subtracts wrong', function () { throw new Error('wrong'); });
  it('multiplies wrong', function () { throw new Error('wrong'); });
  it.skip('later', function () {});
});
"""


def no_raw_controls(b: bytes) -> list[str]:
    """What of a terminal's controls is in b raw: ESC and other C0 bytes
    but newline, C1 controls, bidi controls."""
    t = b.decode("utf-8", errors="replace")
    return sorted({repr(c) for c in t if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) < 0xa0
                   or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069 or c in "\u2028\u2029\u200e\u200f"})


def hostile_names(env: CapEnv, sid: str) -> None:
    """Failing tests' names a learner chose: escape sequences, C1 and bidi
    controls, newlines, a 1 MB name, 60 of them (from a JUnit report and
    from the output), and a sparse 10 GB report: the record keeps at most
    50 names of at most 200 bytes, `events` prints them escaped, the huge
    report is refused by the size cap, and the sandbox works on."""
    put(env, sid, {"hb/pytest": HOSTILE_RUNNER})
    env.sh(sid, "chmod +x hb/pytest")

    def bounded(tr: dict, what: str) -> None:
        names = tr.get("failing_tests") or []
        ok(0 < len(names) <= 50 and all(len(n.encode()) <= 200 for n in names),
           f"{what}: at most 50 failing names, each at most 200 bytes", [len(n.encode()) for n in names])

    tr = result(env, sid, "PATH=/workspace/hb:$PATH pytest --junitxml=hr/r.xml xml")
    tap.eq((tr.get("source"), tr.get("failed"), tr.get("outcome")), ("junit", 65, "failed"),
           "hostile JUnit report: read, every testcase counted")
    bounded(tr, "hostile JUnit report")
    names = tr.get("failing_tests") or []
    ok(any("\u202e" in n for n in names) and any("\n" in n for n in names),
       "hostile JUnit report: the names are kept as written (bidi, newline) in the record", names[:5])
    tr = result(env, sid, "PATH=/workspace/hb:$PATH pytest --junitxml=hr/o.xml out")
    tap.eq((tr.get("runner"), tr.get("failed"), tr.get("outcome")), ("pytest", 61, "failed"),
           "hostile output: its summary counted")
    bounded(tr, "hostile output")
    tr = result(env, sid, "PATH=/workspace/hb:$PATH pytest --junitxml=hr/s.xml sparse")
    ok(tr.get("source") is None and tr.get("outcome") == "failed",
       "a sparse 10 GB report: refused by the size cap, the exit status decides", tr)
    fd = [r["payload"] for r in env.rows(sid) if r["kind"] == "file_diff"
          and r["payload"].get("path") == "hr/s.xml"]
    ok(fd and (fd[-1].get("content") or {}).get("size") == 10 << 30
       and (fd[-1].get("content") or {}).get("stored") is False,
       "a sparse 10 GB report: recorded by its size, its content not stored", fd[-1:] and fd[-1].get("content"))
    p = env.sh(sid, "rm -f hr/s.xml && echo alive")
    ok(p.returncode == 0 and b"alive" in p.stdout, "the sandbox works on", p)
    p = env.run("events", "--sandbox", sid, "--kind", "test_result", "--ingest", env.ingest.http_base,
                "--secret", env.secret)
    out = p.stdout
    ok(p.returncode == 0 and out.count(b"failed: ") >= 20 and b"more failing" in out, "events: the hostile suites' names are listed",
       out[-2000:])
    tap.eq(no_raw_controls(out), [], "events: no raw escape, C1 or bidi control reaches stdout")
    ok(b"\\u202e" in out and b"\\u009b" in out and b"\\n" in out,
       "events: the controls are shown escaped (\\u202e, \\u009b, \\n)", out[-4000:])
    ok(all(len(ln) < 2000 for ln in out.splitlines()), "events: a 1 MB name is cut",
       max(len(ln) for ln in out.splitlines()) if out else 0)
    tap.eq([ln for ln in out.splitlines() if ln.lstrip().startswith(b"FAILED forged")], [],
           "events: a newline in a name does not make a line of its own")


def run_tests(env: CapEnv) -> None:
    sid = env.create_captured()

    @tap.case("pytest: failing, passing, no tests")
    def _():
        if not shutil.which("pytest-3") and not os.path.exists("/usr/lib/python3/dist-packages/pytest"):
            tap.skip("pytest", "python3-pytest is not installed")
            return
        put(env, sid, {"py/test_calc.py": PY_TESTS, "py/ok/test_ok.py": "def test_a():\n    pass\n",
                       "py/none/README": "no tests here\n"})
        tr = result(env, sid, "cd py && python3 -m pytest -p no:cacheprovider test_calc.py")
        tap.eq(counts(tr), ("pytest", True, "failed", 3, 2, 1, 0, 1), "pytest: counts of a failing suite")
        tap.eq(tr.get("failing_tests"), ["test_calc.py::test_two"], "pytest: the failing test's name")
        tap.eq(tr.get("exit_code"), 1, "pytest: exit status kept")
        tr = result(env, sid, "cd py/ok && python3 -m pytest -q -p no:cacheprovider")
        tap.eq(counts(tr), ("pytest", True, "passed", 1, 1, 0, 0, 0), "pytest -q: a passing suite")
        tr = result(env, sid, "cd py/none && python3 -m pytest -p no:cacheprovider")
        tap.eq(counts(tr)[:4], ("pytest", True, "no_tests", 0), "pytest: no tests ran is not a pass")
        tap.eq(tr.get("exit_code"), 5, "pytest: exit 5 for no tests")
        # The runner's JUnit XML report, when the command asks for one: its
        # counts and names (classname.name), and where it was read.
        tr = result(env, sid, "cd py && python3 -m pytest -p no:cacheprovider --junitxml=reports/r.xml test_calc.py")
        tap.eq(counts(tr), ("pytest", True, "failed", 3, 2, 1, 0, 1), "pytest --junitxml: counts from the report")
        tap.eq((tr.get("source"), tr.get("report")), ("junit", "py/reports/r.xml"),
               "pytest --junitxml: the report was read")
        tap.eq(tr.get("failing_tests"), ["test_calc.test_two"], "pytest --junitxml: the failing test's name")
        # A report left from an earlier run says nothing of this one.
        tr = result(env, sid, "cd py/none && python3 -m pytest -p no:cacheprovider --junit-xml ../reports/r.xml "
                              "--collect-only -q nothing.py; touch -d 2000-01-01 ../reports/r.xml")
        tap.eq(tr.get("source"), None, "pytest --junit-xml: a report older than the run is not read")

    @tap.case("unittest: failing, passing, no tests")
    def _():
        put(env, sid, {"ut/test_m.py": UT_TESTS, "ut2/test_p.py":
                       "import unittest\n\nclass P(unittest.TestCase):\n    def test_p(self):\n        pass\n",
                       "ut3/README": "none\n"})
        tr = result(env, sid, "cd ut && python3 -m unittest")
        tap.eq(counts(tr), ("unittest", True, "failed", 3, 1, 1, 1, 1), "unittest: counts of a failing suite")
        names = tr.get("failing_tests") or []
        ok(len(names) == 2 and any(n.startswith("test_fail") for n in names)
           and any(n.startswith("test_error") for n in names), "unittest: FAIL and ERROR names", names)
        tr = result(env, sid, "cd ut2 && python3 -m unittest")
        tap.eq(counts(tr), ("unittest", True, "passed", 1, 1, 0, 0, 0), "unittest: a passing suite")
        tr = result(env, sid, "cd ut3 && python3 -m unittest")
        tap.eq(counts(tr)[:4], ("unittest", True, "no_tests", 0), "unittest: Ran 0 tests is not a pass")
        # the timeline shows the runner's counts and the failing names
        p = env.run("events", "--sandbox", sid, "--kind", "test_result", "--ingest", env.ingest.http_base,
                    "--secret", env.secret)
        out = p.stdout.decode(errors="replace")
        line = [ln for ln in out.splitlines() if "cd ut &&" in ln]
        ok(p.returncode == 0 and line and "tests FAIL 1 passed, 1 failed, 1 errors, 1 skipped" in line[0],
           "events: a failing suite's line carries its counts", out)
        ok("failed: test_fail" in out and "failed: test_error" in out, "events: and its failing tests' names", out)
        ok(any("cd ut3" in ln and "tests NONE RAN" in ln for ln in out.splitlines()),
           "events: Ran 0 tests reads NONE RAN, not PASS", out)

    @tap.case("go test: failing (plain and -v), passing, no tests")
    def _():
        if not os.path.exists("/usr/bin/go"):
            tap.skip("go test", "golang-go is not installed")
            return
        put(env, sid, {"go1/go.mod": "module example.com/m\n\ngo 1.19\n", "go1/m_test.go": GO_TESTS,
                       "go2/go.mod": "module example.com/p\n\ngo 1.19\n",
                       "go2/p_test.go": 'package p\n\nimport "testing"\n\nfunc TestP(t *testing.T) {}\n',
                       "go3/go.mod": "module example.com/n\n\ngo 1.19\n", "go3/n.go": "package n\n"})
        goenv = "GOCACHE=/tmp/gocache GOPATH=/tmp/gopath GOPROXY=off GOTOOLCHAIN=local HOME=/tmp"
        tr = result(env, sid, f"cd go1 && {goenv} go test -v ./...")
        tap.eq(counts(tr), ("go", True, "failed", 2, 1, 1, 0, 1), "go test -v: counts of a failing suite")
        tap.eq(tr.get("failing_tests"), ["TestSub"], "go test -v: the failing test's name")
        tr = result(env, sid, f"cd go1 && {goenv} go test ./...")
        ok(counts(tr)[:3] == ("go", True, "failed") and tr.get("failed") == 1
           and tr.get("failing_tests") == ["TestSub"], "go test: failures without -v", tr)
        tr = result(env, sid, f"cd go2 && {goenv} go test -v ./...")
        tap.eq(counts(tr), ("go", True, "passed", 1, 1, 0, 0, 0), "go test -v: a passing suite")
        tr = result(env, sid, f"cd go3 && {goenv} go test ./...")
        tap.eq(counts(tr)[:4], ("go", True, "no_tests", 0), "go test: no test files is not a pass")

    @tap.case("cargo test: failing, passing (offline, no dependencies)")
    def _():
        if not os.path.exists("/usr/bin/cargo"):
            tap.skip("cargo test", "cargo is not installed")
            return
        toml = '[package]\nname = "{n}"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'
        put(env, sid, {"rs1/Cargo.toml": toml.format(n="rs1"), "rs1/src/lib.rs": RS_LIB,
                       "rs2/Cargo.toml": toml.format(n="rs2"),
                       "rs2/src/lib.rs": "#[cfg(test)]\nmod t {\n    #[test]\n    fn ok() {}\n}\n"})
        cenv = "CARGO_HOME=/tmp/cargo HOME=/tmp CARGO_TERM_COLOR=never"
        tr = result(env, sid, f"cd rs1 && {cenv} cargo test --offline --lib")
        tap.eq(counts(tr), ("cargo", True, "failed", 2, 1, 1, 0, 1), "cargo test: counts of a failing suite")
        tap.eq(tr.get("failing_tests"), ["tests::fails"], "cargo test: the failing test's name")
        # --lib: building the crate's rlib (for its doc tests) fails in the sandbox's workspace
        # with rustc 1.63 ("failed to write ....rmeta: Invalid cross-device link"), reported apart
        tr = result(env, sid, f"cd rs2 && {cenv} cargo test --offline --lib")
        tap.eq(counts(tr), ("cargo", True, "passed", 1, 1, 0, 0, 0), "cargo test: a passing suite")
        tr = result(env, sid, f"cd rs2 && {cenv} cargo test --offline --lib nothing_matches")
        tap.eq(counts(tr)[:4], ("cargo", True, "no_tests", 0), "cargo test: a filter that matches no test")

    @tap.case("jest, vitest, mocha (npm, tests/node): failing, passing, no tests")
    def _():
        if not all(os.path.isdir(os.path.join(NODE_MODULES, r)) for r in ("jest", "vitest", "mocha")):
            tap.skip("jest, vitest, mocha", "tests/node's node_modules lacks them (npm install in tests/node)")
            return
        node_setup(env, sid, ["jest", "vitest", "mocha"])
        pkg = '{"name": "calc", "private": true}\n'
        put(env, sid, {"js/package.json": pkg, "js/calc.test.js": JEST_TESTS, "js/test/calc.spec.cjs": MOCHA_TESTS,
                       "js/ok/package.json": pkg, "js/ok/ok.test.js": "test('ok', () => {});\n",
                       "js/none/package.json": pkg})
        env.sh(sid, "ln -s /tmp/nm/node_modules js/node_modules && ln -s ../node_modules js/ok/node_modules"
                    " && ln -s ../node_modules js/none/node_modules")
        jenv = "HOME=/tmp CI=true"
        jest = f"{jenv} node_modules/.bin/jest --ci --no-watchman --cacheDirectory=/tmp/jc"
        vitest = f"{jenv} node_modules/.bin/vitest run --globals"
        for runner, cmd, names, none in (
                ("jest", jest, ["multiplies wrong", "subtracts wrong"], "no tests found"),
                ("vitest", vitest, ["calc.test.js > multiplies wrong", "calc.test.js > subtracts wrong"],
                 "no test files")):
            tr = result(env, sid, f"cd js && {cmd} calc.test.js")
            tap.eq(counts(tr), (runner, True, "failed", 3, 1, 2, 0, 1), f"{runner}: counts of a failing suite")
            tap.eq(sorted(tr.get("failing_tests") or []), names, f"{runner}: the failing tests' names")
            tr = result(env, sid, f"cd js/ok && {cmd}")
            tap.eq(counts(tr), (runner, True, "passed", 1, 1, 0, 0, 0), f"{runner}: a passing suite")
            tr = result(env, sid, f"cd js/none && {cmd}")
            tap.eq(counts(tr)[:4], (runner, True, "no_tests", 0), f"{runner}: {none} is not a pass")
        tr = result(env, sid, f"cd js && {vitest} --reporter=junit --outputFile.junit=reports/v.xml calc.test.js")
        tap.eq((tr.get("source"), tr.get("report"), tr.get("failed"), tr.get("outcome")),
               ("junit", "js/reports/v.xml", 2, "failed"), "vitest --reporter=junit: counts from the report")
        tr = result(env, sid, f"cd js && {jenv} node_modules/.bin/mocha")
        tap.eq(counts(tr), ("mocha", True, "failed", 3, 1, 2, 0, 1), "mocha: counts of a failing suite")
        tap.eq(sorted(tr.get("failing_tests") or []), ["calc multiplies wrong", "calc subtracts wrong"],
               "mocha: the failing tests' names")
        tr = result(env, sid, f"cd js && {jenv} node_modules/.bin/mocha --grep adds")
        tap.eq(counts(tr), ("mocha", True, "passed", 1, 1, 0, 0, 0), "mocha: a passing run")

    @tap.case("rspec: failing, passing, no examples")
    def _():
        if not os.path.exists("/usr/bin/rspec"):
            tap.skip("rspec", "ruby-rspec is not installed")
            return
        put(env, sid, {"rb/spec/calc_spec.rb": RSPEC_TESTS, "rb0/spec/README": "none\n"})
        tr = result(env, sid, "cd rb && HOME=/tmp rspec")
        tap.eq(counts(tr), ("rspec", True, "failed", 3, 1, 2, 0, 1), "rspec: counts of a failing suite")
        tap.eq(sorted(tr.get("failing_tests") or []), ["./spec/calc_spec.rb:3 # calc subtracts wrong",
                                                      "./spec/calc_spec.rb:4 # calc multiplies wrong"],
               "rspec: the failing examples' names")
        tr = result(env, sid, "cd rb && HOME=/tmp rspec -e adds")
        tap.eq(counts(tr), ("rspec", True, "passed", 1, 1, 0, 0, 0), "rspec: a passing run")
        tr = result(env, sid, "cd rb0 && HOME=/tmp rspec")
        tap.eq(counts(tr)[:4], ("rspec", True, "no_tests", 0), "rspec: 0 examples is not a pass")

    @tap.case("hostile test names: bounded, and escaped in the timeline")
    def _():
        hostile_names(env, sid)

    @tap.case("nothing parses: the exit status decides, parsed false")
    def _():
        put(env, sid, {"bin/pytest": "#!/bin/sh\necho all good\nexit 0\n"})
        env.sh(sid, "chmod +x bin/pytest")
        tr = result(env, sid, "PATH=/workspace/bin:$PATH pytest")
        tap.eq((tr.get("parsed"), tr.get("outcome"), tr.get("runner")), (False, "passed", None),
               "an unparsed test command: parsed false, outcome from its exit")

    env.destroy(sid)


def main() -> None:
    env = CapEnv()
    try:
        run_tests(env)
    finally:
        env.cleanup()
    tap.done()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Editor saves, ignored files and bulk events (issue 24, "Each change tied
to what caused it"): real editors run inside captured sandboxes, and what
the store holds for each save.

- vim (Debian's, interactive on a pty, with its defaults and with
  backupcopy=no and =yes), nano (on a pty; skipped with why when Debian's
  nano is not installed: scripts/install-deps.sh installs it), emacs's save
  pattern (lock symlink `.#f`, backup by rename to `f~`, a new `f`: a script
  does it, Debian's emacs-nox is 70 MB), a VS Code-style and a Python atomic
  write (temporary file renamed over the target), `sed -i`: each gives ONE
  `modified` file_diff with the diff of the real edit, and nothing for the
  backups, swap files and temporary files.
- The default ignore list (`*.swp`, `*~`, `.#*`, `__pycache__/`, `*.pyc`,
  `node_modules/.cache/`...): those files are not reported; create's
  --capture-ignore replaces the list; a bad list is a usage error.
- Ignored files stay in the checkpoints: rollback restores them.
- A command changing 3,000 files: --max-file-events (default 1,000)
  file_diff events, one limit event, and `bulk` events listing every other
  path with its change, size and sha256, each under the frame limit.

The editors run while their exec runs, so the watcher resolves their saves
on its loop (the exec's end flushes whatever is left). TAP output.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402

env = CapEnv()


def eq(got, want, name: str, diag: str = "") -> bool:
    return tap.ok(got == want, name, f"got {got!r}\nwant {want!r}\n{diag}"[:3000])

CALC = "def add(a, b):\n    return a + b\n\nx = 1\nprint(add(x, 2))\n"

# A pty for an interactive editor inside the sandbox: the keys are written
# to it (the editor reads them as typeahead whenever it is ready), then the
# editor's exit is awaited (bounded; killed past it: the test then fails).
PTY_DRIVER = r'''
import os, pty, select, sys, time
keys = bytes.fromhex(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm"
    os.execvp(sys.argv[2], sys.argv[2:])
def drain(t):
    end = time.monotonic() + t
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                os.read(fd, 65536)
            except OSError:
                return
drain(0.5)
for i in range(0, len(keys), 16):
    os.write(fd, keys[i:i + 16])
    drain(0.1)
end = time.monotonic() + 60
while time.monotonic() < end:
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        sys.exit(0 if os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0 else 3)
    drain(0.1)
os.kill(pid, 9)
sys.exit(4)
'''


def shq(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def seed(sid: str, name: str = "calc.py", text: str = CALC) -> None:
    p = env.sh(sid, f"printf %s {shq(text)} > {name}")
    assert p.returncode == 0, p


def diffs(ev: list[dict]) -> list[dict]:
    return [r["payload"] for r in ev if r["kind"] == "file_diff"]


def brief(ds: list[dict]) -> str:
    return repr([(d.get("path"), d.get("change"), d.get("old_path")) for d in ds])


def one_modified(ds: list[dict], name: str, minus: str, plus: str, what: str) -> None:
    """The save is one `modified` of name, with the real edit's diff."""
    eq([(d.get("path"), d.get("change")) for d in ds], [(name, "modified")],
           f"{what}: one file_diff, `modified {name}`", brief(ds))
    d = ds[0] if len(ds) == 1 else {}
    diff = d.get("diff", "")
    tap.ok(f"\n-{minus}" in diff and f"\n+{plus}" in diff and d.get("added") == 1 and d.get("removed") == 1,
           f"{what}: its diff is the one-line edit", repr(d)[:600])


# The end of an editing script: it runs on until the test closes the exec's
# stdin (run_exec's hold), once the save is stored, so that the watcher's
# loop (not the exec's end, which flushes whatever is left) resolved it.
HOLD = "cat >/dev/null"


def in_pty(keys: bytes, *argv: str) -> str:
    """The sh script running argv on a pty with keys typed, then HOLD."""
    drv = f"cat > /tmp/sg_pty.py <<'EOF'\n{PTY_DRIVER}\nEOF\n"
    return drv + f"python3 /tmp/sg_pty.py {keys.hex()} {' '.join(shq(a) for a in argv)}; rc=$?; {HOLD}; exit $rc"


def exec_saving(sid: str, script: str, name: str, what: str):
    """run_exec of script (ending in HOLD), its stdin held until the save
    of name is stored."""
    p, ev = env.run_exec(sid, script, hold=lambda rows: any(
        r["kind"] == "file_diff" and r["payload"].get("path") == name for r in rows))
    tap.ok(env.held, f"{what}: the save is stored while the exec still runs (the watcher's loop resolved it)")
    return p, ev


sid = env.create_captured()


@tap.case("vim (Debian's defaults: writebackup, backup by rename), on a pty")
def _vim_default():
    seed(sid)
    keys = b":%s/x = 1/x = 2/\r:wq\r"
    p, ev = exec_saving(sid, in_pty(keys, "vim", "-i", "NONE", "calc.py"), "calc.py", "vim")
    eq(p.returncode, 0, "vim ran and saved", p.stderr.decode(errors="replace")[-400:])
    one_modified(diffs(ev), "calc.py", "x = 1", "x = 2", "vim")


class Pane:
    """`sandglass shell` in a tmux pane of our own (its own socket): the
    learner's terminal, typed at as a learner types."""

    def __init__(self, sb: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="sgtmux-", dir=env.root)
        conf = os.path.join(self.dir, "tmux.conf")
        with open(conf, "w") as f:
            f.write("set -g default-terminal xterm-256color\nset -g escape-time 0\n")
        self.base = ["tmux", "-S", os.path.join(self.dir, "sock"), "-f", conf]
        self.tmux("new-session", "-d", "-x", "100", "-y", "30", "-s", "t", SANDGLASS, "shell", sb,
                  env=dict(env.env, TERM="xterm-256color"))

    def tmux(self, *args: str, env: dict | None = None) -> str:
        p = subprocess.run([*self.base, *args], capture_output=True, timeout=30, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {p.stderr.decode(errors='replace')}")
        return p.stdout.decode(errors="replace")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def pane(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def await_pane(self, pattern: str, timeout: float = 60) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if re.search(pattern, self.pane(), re.M):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        try:
            self.tmux("kill-server")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


PROMPT = r"^sandbox@sandglass:/workspace\$\s*$"


def _all_after(s: str, script: str) -> list[dict]:
    rows = env.rows(s)
    st = [i for i, r in enumerate(rows) if r["kind"] == "stdin" and r["payload"].get("line") == script]
    return rows[st[-1]:] if st else rows[-40:]


@tap.case("vim in a terminal session (sandglass shell in tmux), as the issue saw it")
def _vim_terminal():
    if not shutil.which("tmux"):
        tap.skip("vim in tmux: one modified", "tmux is not installed (scripts/install-deps.sh installs it)")
        return
    st = env.create_captured()  # its own sandbox: a terminal session outlives its client
    seed(st, "term.py")
    t = Pane(st)
    try:
        tap.ok(t.await_pane(PROMPT), "the sandbox shell's prompt in tmux", t.pane())
        t.keys("vim -i NONE term.py", "Enter")
        tap.ok(t.await_pane(r'"term\.py"'), "vim draws its screen", t.pane())
        t.keys(":%s/x = 1/x = 12/", "Enter", ":wq", "Enter")
        tap.ok(t.await_pane(PROMPT), "vim saved and quit: the prompt again", t.pane())
        t.keys("echo done > term.done", "Enter")

        def span(rows):  # from the vim line's command to the marker's file_diff
            start = [i for i, r in enumerate(rows) if r["kind"] == "command" and
                     "vim -i NONE term.py" in str(r["payload"].get("cmd", ""))]
            end = [i for i, r in enumerate(rows) if r["kind"] == "file_diff" and r["payload"].get("path") == "term.done"]
            return rows[start[-1]:end[-1]] if start and end and end[-1] > start[-1] else None
        rows = env.wait_rows(st, lambda r: span(r) is not None, timeout=120)
        ds = [r["payload"] for r in (span(rows) or []) if r["kind"] == "file_diff"]
        one_modified(ds, "term.py", "x = 1", "x = 12", "vim in a terminal")
        t.keys("exit", "Enter")
    finally:
        t.close()
        env.destroy(st)


@tap.case("vim with backupcopy=no (rename) and backupcopy=yes (copy)")
def _vim_backupcopy():
    for mode, old, new in (("no", "x = 2", "x = 3"), ("yes", "x = 3", "x = 4")):
        keys = f":set backup writebackup backupcopy={mode}\r:%s/{old}/{new}/\r:wq\r".encode()
        script = in_pty(keys, "vim", "-i", "NONE", "calc.py")
        p, ev = exec_saving(sid, script, "calc.py", f"vim backupcopy={mode}")
        eq(p.returncode, 0, f"vim backupcopy={mode} ran and saved", p.stderr.decode(errors="replace")[-400:])
        one_modified(diffs(ev), "calc.py", old, new, f"vim backupcopy={mode} (backup kept: calc.py~ ignored)")
        if len(diffs(ev)) != 1:
            print("# rows: " + repr([(r["seq"], r["kind"], r["payload"].get("path") or r["payload"].get("cmd") or r["payload"].get("state")) for r in _all_after(sid, script)])[:3000], flush=True)
    p = env.sh(sid, "test -f calc.py~ && rm -f calc.py~")
    eq(p.returncode, 0, "vim's kept backup calc.py~ is in the workspace (ignored, not reported)")


@tap.case("vim -es (ex mode, swap file and backup by rename within one burst)")
def _vim_ex():
    seed(sid, "ex.py")
    p, ev = exec_saving(sid, f"vim -i NONE -es -c '%s/x = 1/x = 5/' -c 'wq' ex.py; {HOLD}", "ex.py", "vim -es")
    eq(p.returncode, 0, "vim -es ran", p.stderr.decode(errors="replace")[-400:])
    one_modified(diffs(ev), "ex.py", "x = 1", "x = 5", "vim -es")


@tap.case("nano on a pty")
def _nano():
    if not any(os.access(os.path.join(d, "nano"), os.X_OK) for d in ("/usr/bin", "/bin")):
        tap.skip("nano: one modified", "Debian's nano is not installed (scripts/install-deps.sh installs it)")
        return
    seed(sid, "n.py")
    # ^\ replace: x = 1 -> x = 6, all; ^O Enter: write; ^X: exit
    keys = b"\x1c" + b"x = 1\r" + b"x = 6\r" + b"a" + b"\x0f\r" + b"\x18"
    p, ev = exec_saving(sid, in_pty(keys, "nano", "--ignorercfiles", "n.py"), "n.py", "nano")
    eq(p.returncode, 0, "nano ran and saved", p.stderr.decode(errors="replace")[-400:])
    one_modified(diffs(ev), "n.py", "x = 1", "x = 6", "nano")


EMACS_SAVE = r'''
import os
os.symlink("learner@sandbox.1:1", ".#e.py")           # emacs's lock file
os.rename("e.py", "e.py~")                              # backup by rename (first save)
with open("e.py", "w") as f:
    f.write(open("e.py~").read().replace("x = 1", "x = 7"))
os.unlink(".#e.py")
'''


@tap.case("emacs's save pattern (a script: lock symlink, backup by rename, a new file)")
def _emacs():
    seed(sid, "e.py")
    p, ev = exec_saving(sid, f"python3 -c {shq(EMACS_SAVE)}; {HOLD}", "e.py", "emacs pattern")
    eq(p.returncode, 0, "the emacs-pattern script ran", p.stderr.decode(errors="replace")[-400:])
    one_modified(diffs(ev), "e.py", "x = 1", "x = 7", "emacs pattern")


VSCODE_SAVE = r'''
import os
new = open("v.py").read().replace("x = 1", "x = 8")
tmp = ".v.py.vsctmp-1234"                                # write to a temporary file,
with open(tmp, "w") as f:
    f.write(new)
    f.flush()
    os.fsync(f.fileno())
os.rename(tmp, "v.py")                                   # then rename it over the file
'''

PY_ATOMIC = r'''
import os, tempfile
new = open("a.py").read().replace("x = 1", "x = 9")
fd, tmp = tempfile.mkstemp(dir=".", prefix="a.py.", suffix=".tmp")
with os.fdopen(fd, "w") as f:
    f.write(new)
    f.flush()
    os.fsync(f.fileno())
os.chmod(tmp, 0o644)
os.replace(tmp, "a.py")
'''


@tap.case("VS Code-style and Python atomic writes, sed -i")
def _atomic():
    for name, script, new, what in (("v.py", VSCODE_SAVE, "x = 8", "VS Code-style atomic write"),
                                    ("a.py", PY_ATOMIC, "x = 9", "Python atomic write (mkstemp, os.replace)")):
        seed(sid, name)
        p, ev = exec_saving(sid, f"python3 -c {shq(script)}; {HOLD}", name, what)
        eq(p.returncode, 0, f"{what}: ran", p.stderr.decode(errors="replace")[-400:])
        one_modified(diffs(ev), name, "x = 1", new, what)
    seed(sid, "s.py")
    p, ev = exec_saving(sid, f"sed -i 's/x = 1/x = 10/' s.py; {HOLD}", "s.py", "sed -i")
    eq(p.returncode, 0, "sed -i ran")
    one_modified(diffs(ev), "s.py", "x = 1", "x = 10", "sed -i")


IGNORED = ["__pycache__/m.cpython-311.pyc", "pkg/__pycache__/n.pyc", "stray.pyc", ".notes.txt.swp",
           "draft.md~", ".#lockfile", "node_modules/.cache/babel/x.json", "app/node_modules/.cache/y"]


def write_all(paths: list[str], tag: str) -> str:
    return " && ".join(f"mkdir -p \"$(dirname '{p}')\" && echo {tag} > '{p}'" for p in paths)


@tap.case("the default ignore list: swap, backup and cache files are not reported")
def _ignored():
    shown = ["kept.py", "node_modules/lib.js", "pkg/mod.py"]
    p, ev = env.run_exec(sid, write_all(IGNORED + shown, "one"))
    eq(p.returncode, 0, "the files were written")
    eq(sorted(d["path"] for d in diffs(ev)), sorted(shown),
           "only the files off the list are reported (node_modules itself is)", brief(diffs(ev)))
    p, ev = env.run_exec(sid, write_all(IGNORED, "two") + " && rm -rf __pycache__ stray.pyc")
    eq(diffs(ev), [], "changing and deleting ignored files reports nothing", brief(diffs(ev)))
    p, ev = env.run_exec(sid, "mv draft.md~ draft.md && mv kept.py kept.py~")
    got = sorted((d["path"], d["change"]) for d in diffs(ev))
    eq(got, [("draft.md", "created"), ("kept.py", "deleted")],
           "renamed off the list: created; renamed onto it: deleted", brief(diffs(ev)))


@tap.case("--capture-ignore replaces the default list; a bad list is a usage error")
def _operator_list():
    s2 = env.create_captured("--capture-ignore", "*.log,build/,/top.txt")
    rec = json.load(open(env.sbdir(s2, "meta.json")))
    eq(rec["caps"].get("capture_ignore"), "*.log,build/,/top.txt", "the list is kept in the sandbox record")
    files = ["a.swp", "b~", "x.log", "sub/y.log", "build/o.txt", "sub/build/p.txt", "top.txt", "sub/top.txt", "c.txt"]
    p, ev = env.run_exec(s2, write_all(files, "z"))
    eq(p.returncode, 0, "the files were written")
    eq(sorted(d["path"] for d in diffs(ev)), sorted(["a.swp", "b~", "sub/top.txt", "c.txt"]),
           "the operator's list only: the default's *.swp and *~ are reported, /top.txt is anchored",
           brief(diffs(ev)))
    s3 = env.create_captured("--capture-ignore", "")
    p, ev = env.run_exec(s3, write_all(["q.swp", "__pycache__/r.pyc"], "z"))
    eq(sorted(d["path"] for d in diffs(ev)), ["__pycache__/r.pyc", "q.swp"],
           "an empty list ignores nothing", brief(diffs(ev)))
    for bad in ("a,,b", "../x", "ok,\x01", "a/./b"):
        p = env.run("create", "--learner", "t", "--task", "T", "--ingest", env.ingest.ws, "--secret", env.secret,
                    "--capture-ignore", bad)
        tap.ok(p.returncode == 2 and b"--capture-ignore" in p.stderr,
               f"--capture-ignore {bad!r} is a usage error naming the flag", p.stderr.decode(errors="replace"))
    for s in (s2, s3):
        env.destroy(s)


@tap.case("ignored files stay in the checkpoints: rollback restores them")
def _rollback():
    p = env.sh(sid, "mkdir -p __pycache__ && echo cache > __pycache__/keep.pyc && echo swap > .w.swp && "
                    "echo bak > w.txt~")
    eq(p.returncode, 0, "ignored files written")
    cp = json.loads(env.run("checkpoint", sid, "--label", "with-ignored", "--json", check=True).stdout)
    p = env.sh(sid, "rm -rf __pycache__ .w.swp w.txt~ && echo changed > .w.swp")
    eq(p.returncode, 0, "ignored files removed and changed")
    p = env.run("rollback", sid, "--to", cp["id"], "--yes", timeout=120)
    eq(p.returncode, 0, "rollback to the checkpoint", p.stderr.decode(errors="replace"))
    ws = env.workspace(sid)
    got = {}
    for rel in ("__pycache__/keep.pyc", ".w.swp", "w.txt~"):
        try:
            got[rel] = open(os.path.join(ws, rel)).read()
        except OSError as e:
            got[rel] = repr(e)
    eq(got, {"__pycache__/keep.pyc": "cache\n", ".w.swp": "swap\n", "w.txt~": "bak\n"},
           "rollback restored the ignored files as they were at the checkpoint")


def bulk_check(s: str, n: int, limit: int) -> None:
    script = (f"mkdir -p many && i=0; while [ $i -lt {n} ]; do i=$((i+1)); echo $i > many/f$i; done")
    p, _ = env.run_exec(s, script, timeout=300)
    eq(p.returncode, 0, f"{n} files written")
    want = {f"many/f{i}": str(i) + "\n" for i in range(1, n + 1)}

    def after(rows):  # this exec's rows and what followed (the loop may report after a flush's bound)
        start = max(i for i, r in enumerate(rows) if r["kind"] == "stdin" and r["payload"].get("line") == script)
        return rows[start:]

    def covered(rows):
        got = set()
        for r in after(rows):
            if r["kind"] == "file_diff":
                got.add(r["payload"]["path"])
            elif r["kind"] == "bulk":
                got.update(f["path"] for f in r["payload"].get("files", []))
        return got >= set(want)
    ev = after(env.wait_rows(s, covered, timeout=120))
    ds = [r["payload"] for r in ev if r["kind"] == "file_diff" and r["payload"]["path"].startswith("many/")]
    bulks = [r for r in ev if r["kind"] == "bulk"]
    limits = [r["payload"] for r in ev if r["kind"] == "limit" and r["payload"].get("what") == "file_diff"]
    eq(len(ds), limit, f"{limit} file_diff events (--max-file-events)")
    listed, bad, entries = {}, [], 0
    for b in bulks:
        pl = b["payload"]
        if pl.get("count") != len(pl.get("files", [])) or pl.get("limit") != limit:
            bad.append(("count/limit", pl.get("count"), pl.get("limit")))
        for f in pl.get("files", []):
            listed[f["path"]] = f  # a file read while its writer was at it changes twice: the last counts
            entries += 1
    tap.ok(len(limits) == 1 and limits[0].get("not_reported") == entries and limits[0].get("limit") == limit,
           "one limit event counts the changes the bulk events list", repr(limits) + f" entries={entries}")
    for path, f in listed.items():
        body = want.get(path, "").encode()
        if (f.get("change") not in ("created", "modified") or f.get("size") != len(body) or
                f.get("sha256") != hashlib.sha256(body).hexdigest()):
            bad.append((path, f))
    tap.ok(len(bulks) >= 1 and not bad, f"{len(bulks)} bulk event(s): every entry has its change, size and sha256",
           repr(bad[:5]))
    named = {d["path"] for d in ds}
    eq(sorted(set(want) - named - set(listed)), [], "the bulk events list every path the file_diff events do not")
    seen = set(listed) | named
    eq(seen, set(want), f"no path of the {n} is missing from the record",
           repr(sorted(set(want) - seen)[:10]))
    rows = env._query("SELECT length(payload) FROM sg_events WHERE sandbox=? AND kind='bulk'", (s,))
    tap.ok(rows and max(r[0] for r in rows) < 1024 * 1024, "each bulk event is under the frame limit (1 MiB)",
           repr([r[0] for r in rows][:10]))


@tap.case("a command creating 3,000 files: 1,000 file_diff, a limit, bulk events for the rest")
def _bulk():
    bulk_check(sid, 3000, 1000)


@tap.case("--max-file-events sets the limit; bulk events split by bytes")
def _bulk_opt():
    s4 = env.create_captured("--max-file-events", "10")
    rec = json.load(open(env.sbdir(s4, "meta.json")))
    eq(rec["caps"].get("max_file_events"), 10, "the limit is kept in the sandbox record")
    bulk_check(s4, 4000, 10)
    n = len(env._query("SELECT seq FROM sg_events WHERE sandbox=? AND kind='bulk'", (s4,)))
    tap.ok(n >= 2, "3,990 entries of long enough paths take more than one bulk event", str(n))
    p = env.run("events", "--sandbox", s4, "--ingest", env.ingest.http_base, "--secret", env.secret,
                "--kind", "bulk", timeout=60)
    out = p.stdout.decode(errors="replace")
    lines = [ln for ln in out.splitlines() if "more files changed" in ln]
    tap.ok(p.returncode == 0 and len(lines) == n and "many/f" in lines[0] and "(created)" in lines[0],
           "sandglass events shows each bulk event on one line, its files listed", out[-1500:])
    p = env.run("create", "--learner", "t", "--max-file-events", "x")
    eq(p.returncode, 2, "a bad --max-file-events is a usage error")
    env.destroy(s4)


env.destroy(sid)
env.cleanup()
tap.done()

#!/usr/bin/env python3
"""Each change, program and output names its cause (issue 24): the exec and,
in a shell, the typed line (one command however many ';', '&&' or pipes it
holds), a background job's line, a foreground program's line; operators'
actions (checkpoint, rollback, abort, resume, destroy) carry the full
checkpoint id and who acted. Real bash shells on a real terminal, a real
ingest and store."""
from __future__ import annotations

import fcntl
import json
import os
import pwd
import re
import select
import struct
import subprocess
import termios
import time

from sgtest import SANDGLASS, tap
from test_capture import CapEnv

env = CapEnv()
PROMPT_END = b"\x1b]133;B\x07"


class Term:
    """The CLI on a terminal of ours: `out` is everything it printed."""

    def __init__(self, args: list[str]):
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        slave = self.slave

        def ctty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen([SANDGLASS, *args], stdin=slave, stdout=slave, stderr=slave,
                                     env=dict(env.env, TERM="xterm-256color"), start_new_session=True,
                                     preexec_fn=ctty)
        env.procs.append(self.proc)
        self.out = b""

    def read(self, timeout: float) -> int:
        r, _, _ = select.select([self.master], [], [], timeout)
        if not r:
            return 0
        try:
            d = os.read(self.master, 65536)
        except OSError:
            return -1
        self.out += d
        return len(d) if d else -1

    def expect(self, pattern: bytes, start: int = 0, timeout: float = 30) -> bool:
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.out[start:]):
                return True
            if self.read(0.2) <= 0 and self.proc.poll() is not None:
                return bool(re.search(pattern, self.out[start:]))
        return False

    def line(self, data: bytes) -> bool:
        """Types a line and waits for the next prompt."""
        mark = len(self.out)
        os.write(self.master, data + b"\r")
        return self.expect(re.escape(PROMPT_END), mark)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def diff_of(rows: list[dict], name: str) -> list[dict]:
    return [r["payload"] for r in rows if r["kind"] == "file_diff" and
            os.path.basename(r["payload"].get("path", "")) == name]


def command_ids(rows: list[dict]) -> dict[str, int]:
    """A typed line's command_id, by its text."""
    return {r["payload"]["cmd"]: r["payload"].get("command_id") for r in rows if r["kind"] == "command"}


ME = os.getuid()
ME_NAME = pwd.getpwuid(ME).pw_name

sb = env.create_captured()
LINES = [b"true; echo x > f1.txt", b"echo a > a1.txt; echo b > b1.txt", b"echo hi; false",
         b"echo out | cat"]
BG = b"sleep 1 && touch bg.txt &"
FG = b"python3 -c \"print('rea' + 'dy', flush=True); input(); open('fg.txt', 'w').write('y')\""

t = Term(["shell", sb])
try:
    steps = [t.expect(re.escape(PROMPT_END))]
    for ln in LINES:
        steps.append(t.line(ln))
    # a foreground program that writes after reading a line
    mark = len(t.out)
    os.write(t.master, FG + b"\r")
    steps.append(t.expect(rb"ready\r\n", mark))  # it reads now (typed ahead, readline's raw mode would keep the CR)
    os.write(t.master, b"go\r")
    steps.append(t.expect(re.escape(PROMPT_END), mark))
    steps.append(t.line(BG))
    # at the prompt until the job's change is in the store
    rows = env.wait_rows(sb, lambda r: bool(diff_of(r, "bg.txt")), timeout=60)
    t.line(b"exit")
    t.proc.wait(timeout=30)
finally:
    t.close()
tap.ok(all(steps), "the shell answered each line with a prompt", repr(steps))

want = [ln.decode() for ln in LINES] + [FG.decode(), BG.decode()]
rows = env.wait_rows(sb, lambda r: all(c in command_ids(r) for c in want) and
                     any(x["kind"] == "run_result" and x["payload"].get("cmd") == "exit" for x in r),
                     timeout=60)
ids = command_ids(rows)
shell_exec = next((r["payload"]["exec_id"] for r in rows if r["kind"] == "command" and
                   r["payload"]["cmd"] == "/bin/sh /etc/sandglass/shell"), None)
seq_of = {r["seq"]: r for r in rows}


@tap.case("a typed line is one command, its id the seq of its command event")
def _():
    cmds = [r["payload"]["cmd"] for r in rows if r["kind"] == "command" and r["payload"].get("command_id")]
    tap.ok(cmds == want + ["exit"], "one command per typed line, none per simple command", repr(cmds))
    tap.ok(all(seq_of.get(ids[c], {}).get("payload", {}).get("cmd") == c for c in want),
           "command_id is the seq of that command's own event", repr(ids))
    res = {r["payload"]["cmd"]: r["payload"] for r in rows if r["kind"] == "run_result"}
    tap.eq(res.get("echo hi; false", {}).get("exit_code"), 1, "echo hi; false: one result, the line's status 1")
    tap.eq(res.get("echo hi; false", {}).get("command_id"), ids.get("echo hi; false"), "its result names it")
    outs = [r["payload"] for r in rows if r["kind"] == "stdout" and r["payload"].get("command_id") ==
            ids.get("echo out | cat")]
    tap.ok(outs and outs[0]["data"] == "out\r\n" and outs[0]["exec_id"] == shell_exec,
           "a command's output names its exec and command", repr(outs))


@tap.case("each file_diff names the exec and the typed line it happened in")
def _():
    f1 = diff_of(rows, "f1.txt")
    tap.ok(len(f1) == 1 and f1[0].get("exec_id") == shell_exec and
           f1[0].get("command_id") == ids.get("true; echo x > f1.txt"),
           "true; echo x > f1.txt: the change is that line's", repr(f1))
    ab = diff_of(rows, "a1.txt") + diff_of(rows, "b1.txt")
    tap.ok(len(ab) == 2 and all(d.get("command_id") == ids.get("echo a > a1.txt; echo b > b1.txt") for d in ab),
           "echo a > a1.txt; echo b > b1.txt: both changes under the one line", repr(ab))
    fg = diff_of(rows, "fg.txt")
    tap.ok(len(fg) == 1 and fg[0].get("command_id") == ids.get(FG.decode()) and not fg[0].get("background"),
           "a change made by a foreground program is its line's", repr(fg))


procs_available = not any(r["kind"] == "limit" and r["payload"].get("what") == "process" and
                          r["payload"].get("state") == "unavailable" for r in rows)


@tap.case("a background job's change and programs are the line that started it")
def _():
    bg = diff_of(rows, "bg.txt")
    if not procs_available:
        tap.ok(len(bg) == 1 and bg[0].get("exec_id") == shell_exec, "no process events: the shell's exec", repr(bg))
        return
    tap.ok(len(bg) == 1 and bg[0].get("exec_id") == shell_exec and bg[0].get("command_id") == ids.get(BG.decode())
           and bg[0].get("background") is True, "the job's change names its line, background", repr(bg))


@tap.case("process events name their typed line")
def _():
    if not procs_available:
        tap.ok(True, "# SKIP no process events here (rootless)")
        return
    got = env.wait_rows(sb, lambda r: any(x["kind"] == "process" and (x["payload"].get("argv") or [""])[0] == "touch"
                                          for x in r), timeout=30)
    procs = [r["payload"] for r in got if r["kind"] == "process"]
    by_prog = {}
    for p in procs:
        by_prog.setdefault((p.get("argv") or ["?"])[0], []).append(p)
    py = by_prog.get("python3", [])
    tap.ok(py and all(p.get("command_id") == ids.get(FG.decode()) and p.get("exec_id") == shell_exec for p in py),
           "python3: its line's command_id and the shell's exec", repr(py))
    cat = by_prog.get("cat", [])
    tap.ok(cat and cat[0].get("command_id") == ids.get("echo out | cat"), "cat in a pipe: its line's", repr(cat))
    bgp = by_prog.get("sleep", []) + by_prog.get("touch", [])
    tap.ok(len(bgp) == 2 and all(p.get("command_id") == ids.get(BG.decode()) for p in bgp) and
           any(p.get("background") for p in by_prog.get("touch", [])),
           "sleep and touch of the job: its line's; touch ran after the line ended (background)", repr(bgp))


@tap.case("operators' actions: full checkpoint ids and who acted")
def _():
    op = env.create_captured()
    env.sh(op, "echo one > keep.txt", check=True)
    cp = json.loads(env.run("checkpoint", op, "--label", "mine", "--json", check=True).stdout)
    full = cp.get("id", "")
    env.sh(op, "echo two > keep.txt", check=True)
    p = env.run("rollback", op, "--to", full[:6], "--yes", "--json")
    tap.ok(p.returncode == 0, "rollback to a 6-character prefix", p.stderr.decode())
    env.run("abort", op, "--reason", "cause test", check=True)
    env.run("resume", op, check=True)
    got = env.wait_rows(op, lambda r: any(x["kind"] == "rollback" for x in r) and
                        any(x["kind"] == "activity" and x["payload"].get("state") == "resumed" for x in r))
    me = {"user": ME_NAME, "uid": ME}

    def who(a):
        return {k: (a or {}).get(k) for k in ("user", "uid")}
    ck = [r["payload"] for r in got if r["kind"] == "checkpoint" and r["payload"].get("label") == "mine"]
    tap.ok(ck and ck[0]["id"] == full and who(ck[0].get("actor")) == me, "checkpoint: its id and the operator",
           repr(ck))
    auto = [r["payload"] for r in got if r["kind"] == "checkpoint" and r["payload"].get("label") != "mine"]
    tap.ok(auto and all(a.get("actor") for a in auto), "every checkpoint says who (automatic ones too)",
           repr([a.get("actor") for a in auto]))
    rb = [r["payload"] for r in got if r["kind"] == "rollback"]
    tap.ok(rb and rb[0]["to"] == full and len(full) >= 40 and rb[0].get("asked") == full[:6] and
           who(rb[0].get("actor")) == me, "rollback: the full id, the prefix asked, the operator", repr(rb))
    restored = [d for d in diff_of(got, "keep.txt") if d.get("operator")]
    tap.ok(restored and restored[-1]["operator"].get("action") == "rollback" and
           who(restored[-1]["operator"].get("actor")) == me,
           "the rollback's change names the operator's action, not an exec", repr(diff_of(got, "keep.txt")))
    ab = [r["payload"] for r in got if r["kind"] == "session_abort"]
    tap.ok(ab and who(ab[0].get("actor")) == me and len(ab[0].get("checkpoint") or "") >= 40,
           "abort: the operator and the full id of the last checkpoint", repr(ab))
    rs = [r["payload"] for r in got if r["kind"] == "activity" and r["payload"].get("state") == "resumed"]
    tap.ok(rs and who(rs[0].get("actor")) == me, "resume: the operator", repr(rs))
    env.destroy(op)
    got = env.wait_rows(op, lambda r: any(x["kind"] == "sandbox" and x["payload"].get("state") == "destroyed"
                                          for x in r))
    ds = [r["payload"] for r in got if r["kind"] == "sandbox" and r["payload"].get("state") == "destroyed"]
    tap.ok(ds and who(ds[0].get("actor")) == me and len(ds[0].get("checkpoint") or "") >= 40,
           "destroy: the operator and the last checkpoint's full id", repr(ds))


@tap.case("an abort a cap fired names the cap")
def _():
    cb = env.create_captured("--max-execs", "1")
    env.sh(cb, "true")
    p = env.sh(cb, "true")
    tap.ok(p.returncode != 0, "the second exec is refused: the cap fired", p.stderr.decode())
    got = env.wait_rows(cb, lambda r: any(x["kind"] == "session_abort" for x in r))
    ab = [r["payload"] for r in got if r["kind"] == "session_abort"]
    tap.ok(ab and "execs" in ((ab[0].get("actor") or {}).get("cap") or "") and "uid" not in ab[0]["actor"],
           "session_abort's actor is the cap that fired, with its reason", repr(ab))


env.cleanup()
tap.done()

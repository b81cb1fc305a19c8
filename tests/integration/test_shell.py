"""Issue 16: `sandglass shell` and `exec -t`, driven through real terminals
(Python's pty): the CLI runs on the slave of a PTY this test holds the
master of, as a user's terminal would hold it."""
from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import time

from sgtest import SANDGLASS, tap
from test_capture import CapEnv

env = CapEnv()  # an Env with a real ingest and its store
PROMPT_END = b"\x1b]133;B\x07"
MARK = re.compile(rb"\x1b\]133;[^\x07]*\x07")


def plain(b: bytes) -> bytes:
    """Output without the shell integration's marks."""
    return MARK.sub(b"", b)


class Term:
    """The CLI on a terminal of ours: `out` is everything it printed."""

    def __init__(self, args: list[str], rows: int = 30, cols: int = 100, extra_env: dict | None = None):
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.before = termios.tcgetattr(self.slave)
        e = dict(env.env, TERM="xterm-256color")
        e.update(extra_env or {})
        slave = self.slave

        def ctty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen([SANDGLASS, *args], stdin=slave, stdout=slave, stderr=slave,
                                     env=e, start_new_session=True, preexec_fn=ctty)
        env.procs.append(self.proc)
        self.out = b""

    def read(self, timeout: float) -> int:
        """Reads what came within timeout: its length, 0 for none, -1 at
        the end (no process holds the terminal any more)."""
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
        """Waits until pattern (a regex) appears in the output after start."""
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.out[start:]):
                return True
            if self.read(0.2) <= 0 and self.proc.poll() is not None:
                return bool(re.search(pattern, self.out[start:]))
        return False

    def type(self, data: bytes) -> int:
        mark = len(self.out)
        os.write(self.master, data)
        return mark

    def resize(self, rows: int, cols: int) -> None:
        # The kernel sends the CLI (the terminal's foreground job) SIGWINCH.
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def wait(self, timeout: float = 30) -> int | None:
        end = time.time() + timeout
        while time.time() < end and self.proc.poll() is None:
            self.read(0.1)
        while self.read(0.05) > 0 and len(self.out) < 1 << 22:
            pass
        return self.proc.poll()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


ANSWERED = "sg-answered"


def comms(sb: str) -> list[str] | None:
    """The names of the processes in the sandbox (seen from another exec),
    or None when that exec failed: a dead sandbox runs nothing, but that is
    no proof that a process ended."""
    p = env.exec(sb, "sh", "-c", f"cat /proc/[0-9]*/comm 2>/dev/null; echo {ANSWERED}")
    names = p.stdout.decode(errors="replace").split()
    return names if p.returncode == 0 and names[-1:] == [ANSWERED] else None


def running(sb: str, comm: str) -> bool:
    """Whether a process named comm runs in the sandbox."""
    names = comms(sb)
    return names is not None and comm in names


def gone(sb: str, comm: str) -> bool:
    """Whether the sandbox answers and runs no process named comm."""
    names = comms(sb)
    return names is not None and comm not in names


def await_running(sb: str, comm: str) -> bool:
    end = time.time() + 30
    while time.time() < end:
        if running(sb, comm):
            return True
        time.sleep(0.05)
    return False


def await_foreground(sb: str, comm: str) -> bool:
    """Waits until a process named comm runs (not stopped) as its terminal's
    foreground job (/proc/PID/stat: its pgrp is the terminal's tpgid)."""
    end = time.time() + 30
    while time.time() < end:
        p = env.exec(sb, "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null")
        for line in p.stdout.decode(errors="replace").splitlines():
            head, _, rest = line.rpartition(")")
            f = rest.split()
            if head.endswith("(" + comm) and len(f) > 5 and f[0] in "RS" and f[2] == f[5]:
                return True
        time.sleep(0.05)
    return False


def text(t: Term) -> str:
    return t.out.decode(errors="replace")


sid = env.create()


@tap.case("shell: a prompt, two commands' outputs and statuses, a real terminal with TERM and size")
def _():
    t = Term(["shell", sid])
    try:
        tap.ok(t.expect(re.escape(PROMPT_END)), "the prompt appears (with the shell integration's mark)", text(t))
        m = t.type(b"echo hi; false; echo st=$?\r")
        tap.ok(t.expect(rb"hi\r\n.*st=1", m), "echo hi; false: both run, false's status is 1", text(t)[-2000:])
        tap.ok(t.expect(rb"(?s)133;C;[^\x07]*cmd=echo hi; false; echo st=\$\?\x07.*133;D;0\x07", m) and
               len(re.findall(rb"133;C;", t.out[m:])) == 1,
               "the typed line is one command, marked once, ended with the line's status",
               repr(t.out[m:]))
        m = t.type(b"tty; echo term=$TERM; stty size; echo home=$HOME\r")
        t.expect(rb"home=/home/sandbox", m)
        tap.ok(re.search(rb"/dev/pts/\d+\r\nterm=xterm-256color\r\n30 100\r\nhome=/home/sandbox",
                         plain(t.out[m:])) is not None,
               "a tty inside, TERM and the size of the caller's terminal, a private HOME", repr(t.out[m:]))
        m = t.type(b"exit 3\r")
        tap.eq(t.wait(), 3, "the shell's exit status is the CLI's")
    finally:
        t.close()
    p = env.exec(sid, "sh", "-c", "ls -A /workspace; echo ---; ls -A /home/sandbox")
    ws, _, home = p.stdout.partition(b"---")
    tap.ok(b".bash_history" not in ws and b".bash_history" in home,
           "the history is in HOME, not in the workspace", p.stdout.decode())


@tap.case("shell: Ctrl-C stops the foreground job only; a resize reaches stty")
def _():
    t = Term(["shell", sid])
    try:
        t.expect(re.escape(PROMPT_END))
        m = t.type(b"sleep 100\r")
        # Ctrl-C is typed once sleep runs: before, it would reach bash.
        tap.ok(t.expect(rb"cmd=sleep 100\x07", m) and await_foreground(sid, "sleep"), "sleep runs",
               repr(t.out[m:]))
        m = t.type(b"\x03")
        tap.ok(t.expect(rb"133;D;130\x07.*" + re.escape(PROMPT_END), m), "Ctrl-C ends sleep (130), a new prompt",
               repr(t.out[m:]))
        m = t.type(b"echo alive\r")
        tap.ok(t.expect(rb"alive\r\n", m), "the shell survived Ctrl-C", repr(t.out[m:]))
        tap.ok(gone(sid, "sleep"), "sleep is gone (and the sandbox answers)")
        t.expect(re.escape(PROMPT_END), m)
        t.resize(40, 120)
        # The resize travels CLI -> supervisor -> the sandbox's terminal; a
        # command typed after it can be read before it lands, so ask again
        # until it shows (bounded).
        ok = False
        for _ in range(50):
            m = t.type(b"stty size\r")
            t.expect(re.escape(PROMPT_END), m)
            if b"40 120\r\n" in t.out[m:]:
                ok = True
                break
        tap.ok(ok, "stty size follows the caller's resize", repr(t.out[-500:]))
        t.type(b"exit\r")
        tap.eq(t.wait(), 0, "exit ends the shell")
    finally:
        t.close()


@tap.case("shell: job control (Ctrl-Z, jobs, fg)")
def _():
    t = Term(["shell", sid])
    try:
        t.expect(re.escape(PROMPT_END))
        m = t.type(b"sleep 101\r")
        tap.ok(t.expect(rb"cmd=sleep 101\x07", m) and await_running(sid, "sleep"), "sleep runs")
        m = t.type(b"\x1a")
        tap.ok(t.expect(rb"Stopped.*sleep 101", m) and t.expect(re.escape(PROMPT_END), m),
               "Ctrl-Z stops it, a prompt comes back", repr(t.out[m:]))
        m = t.type(b"jobs\r")
        tap.ok(t.expect(rb"\[1\]\+\s+Stopped\s+sleep 101", m), "jobs lists it", repr(t.out[m:]))
        m = t.type(b"fg\r")
        # Ctrl-C is typed once sleep has the terminal again: before, it
        # would reach bash, which is handing it over.
        tap.ok(t.expect(rb"sleep 101\r\n", m) and await_foreground(sid, "sleep"), "fg resumes it",
               repr(t.out[m:]))
        m = t.type(b"\x03")
        tap.ok(t.expect(re.escape(PROMPT_END), m), "Ctrl-C ends it, a prompt comes back", repr(t.out[m:]))
        m = t.type(b"exit 0\r")
        tap.eq(t.wait(), 0, "exit")
    finally:
        t.close()


def raw_now(t: Term) -> bool:
    return not (termios.tcgetattr(t.slave)[3] & termios.ICANON)


@tap.case("abort during sleep: one line says why, the caller's terminal is restored")
def _():
    sb = env.create()
    t = Term(["shell", sb])
    try:
        t.expect(re.escape(PROMPT_END))
        tap.ok(raw_now(t), "the caller's terminal is in raw mode during the shell")
        m = t.type(b"sleep 100\r")
        t.expect(rb"cmd=sleep 100\x07", m)
        await_running(sb, "sleep")
        p = env.run("abort", sb)
        tap.eq(p.returncode, 0, "abort")
        code = t.wait()
        tap.ok(code not in (None, 0), "the CLI ends with a failure status", f"code {code}")
        tap.ok(re.search(rb"killed: .*abort", t.out[m:]) is not None, "one line says it was aborted",
               repr(t.out[m:]))
        tap.eq(termios.tcgetattr(t.slave), t.before, "the terminal's settings are as before")
    finally:
        t.close()


@tap.case("destroy under a running shell: the terminal is restored, one line says so")
def _():
    sb = env.create()
    t = Term(["shell", sb])
    try:
        t.expect(re.escape(PROMPT_END))
        tap.ok(raw_now(t), "raw during the shell")
        m = t.type(b"sleep 100\r")
        t.expect(rb"cmd=sleep 100\x07", m)
        await_running(sb, "sleep")
        tap.eq(env.run("destroy", sb).returncode, 0, "destroy")
        code = t.wait()
        tap.ok(code not in (None, 0), "the CLI ends with a failure status", f"code {code}")
        tail = plain(t.out[m:]).decode(errors="replace")
        tap.ok(re.search(r"\nsandglass [^\n]*\n$", tail) is not None, "its last line says why", repr(tail[-300:]))
        tap.eq(termios.tcgetattr(t.slave), t.before, "the terminal's settings are as before")
    finally:
        t.close()


@tap.case("SIGTERM and SIGHUP to the CLI restore the terminal")
def _():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        t = Term(["shell", sid])
        try:
            t.expect(re.escape(PROMPT_END))
            tap.ok(raw_now(t), f"raw before {sig.name}")
            t.proc.send_signal(sig)
            code = t.wait()
            tap.ok(code is not None and code != 0, f"the CLI leaves at {sig.name}", f"code {code}")
            tap.eq(termios.tcgetattr(t.slave), t.before, f"{sig.name}: the terminal's settings are as before")
        finally:
            t.close()


@tap.case("exec -t: a terminal for one command; without -i this terminal stays cooked")
def _():
    t = Term(["exec", sid, "-t", "--", "sh", "-c", "tty; stty size; echo $TERM"], rows=25, cols=70)
    try:
        code = t.wait()
        tap.eq(code, 0, "exec -t runs")
        tap.ok(re.search(rb"/dev/pts/\d+\r\n25 70\r\nxterm-256color", t.out) is not None,
               "a terminal of the caller's size", repr(t.out))
        tap.eq(termios.tcgetattr(t.slave), t.before, "the terminal's settings are as before")
    finally:
        t.close()


@tap.case("bad input: -t without a terminal, an unknown id")
def _():
    p = env.run("exec", sid, "-t", "--", "true", input=b"")
    tap.eq(p.returncode, 125, "exec -t without a terminal: 125")
    tap.ok(p.stderr.decode().count("\n") == 1 and "terminal" in p.stderr.decode(), "one line says so",
           p.stderr.decode())
    p = env.run("shell", sid, input=b"")
    tap.eq(p.returncode, 125, "shell without a terminal: 125")
    t = Term(["shell", "nosuchsandbox"])
    try:
        code = t.wait()
        tap.eq(code, 125, "shell with an unknown id: 125")
        tap.ok(b"nosuchsandbox" in t.out and t.out.count(b"\n") == 1, "one line names it", repr(t.out))
    finally:
        t.close()
    sb = env.create()
    tap.eq(env.run("abort", sb, "--reason", "exam over").returncode, 0, "abort a sandbox")
    for args in (["shell", sb], ["shell", sb, "--attach"], ["exec", sb, "-t", "-i", "--", "true"]):
        t = Term(args)
        try:
            code = t.wait()
            tap.eq(code, 125, f"{' '.join(args[:1] + args[2:])} on an aborted sandbox: 125")
            tap.ok(t.out.count(b"\n") == 1 and b"aborted" in t.out and b"exam over" in t.out,
                   "one line says why", repr(t.out))
            tap.eq(termios.tcgetattr(t.slave), t.before, "the terminal's settings are as before")
        finally:
            t.close()


def commands(rows: list[dict], after: int) -> list[tuple[str, str]]:
    """(kind, cmd) of the command and result events after seq `after`."""
    return [(r["kind"], r["payload"].get("cmd", "")) for r in rows if r["seq"] > after and
            r["kind"] in ("command", "run_result", "test_result")]


def captured_with_test() -> tuple[str, int]:
    """A captured sandbox with a unittest file, and the seq its events are up to."""
    sb = env.create_captured()
    env.exec(sb, "sh", "-c", "printf 'import unittest\\nclass T(unittest.TestCase):\\n"
             "    def test_ok(self): pass\\n' > test_x.py")
    first = env.wait_rows(sb, lambda r: any(x["kind"] == "run_result" for x in r))
    return sb, max(r["seq"] for r in first)


@tap.case("capture: each command typed is captured as an exec is, and the session is recorded")
def _():
    sb, base = captured_with_test()
    t = Term(["shell", sb])
    try:
        t.expect(re.escape(PROMPT_END))
        m = t.type(b"echo hi; false\r")
        t.expect(re.escape(PROMPT_END), m)
        m = t.type(b"echo made > made.txt\r")
        t.expect(re.escape(PROMPT_END), m)
        m = t.type(b"python3 -m unittest -q\r")
        t.expect(re.escape(PROMPT_END), m)
        t.type(b"exit\r")
        tap.eq(t.wait(), 0, "the shell ends")
    finally:
        t.close()
    want = [("command", "/bin/sh /etc/sandglass/shell"),
            ("command", "echo hi; false"), ("run_result", "echo hi; false"),
            ("command", "echo made > made.txt"), ("run_result", "echo made > made.txt"),
            ("command", "python3 -m unittest -q"), ("test_result", "python3 -m unittest -q"),
            ("command", "exit"), ("run_result", "exit"),
            ("run_result", "/bin/sh /etc/sandglass/shell")]
    rows = env.wait_rows(sb, lambda r: commands(r, base) == want, timeout=30)
    tap.eq(commands(rows, base), want, "the shell, then each command and its result, in order")
    res = {r["payload"]["cmd"]: r["payload"] for r in rows if r["seq"] > base and
           r["kind"] in ("run_result", "test_result")}
    tap.eq(res.get("echo hi; false", {}).get("exit_code"), 1, "echo hi; false: one command, status 1")
    ut = res.get("python3 -m unittest -q", {})
    tap.eq(tuple(ut.get(k) for k in ("runner", "parsed", "outcome", "run", "passed", "failed")),
           ("unittest", True, "passed", 1, 1, 0), "a test typed in the shell: its runner's counts, from the terminal")
    outs = [r["payload"]["data"] for r in rows if r["seq"] > base and r["kind"] == "stdout"]
    tap.ok(any(o == "hi\r\n" for o in outs), "echo hi's stdout is its own output", repr(outs))
    made = [r for r in rows if r["kind"] == "file_diff" and r["payload"].get("path", "").endswith("made.txt")]
    tap.ok(len(made) == 1, "the file a command made is one file_diff", repr(made))
    if made:
        order = [(r["kind"], r["payload"].get("cmd", "")) for r in rows if r["seq"] > base]
        i = next(k for k, r in enumerate(rows) if r is made[0])
        before = [r for r in rows[:i] if r["seq"] > base and r["kind"] == "command"]
        after = [r for r in rows[i:] if r["kind"] in ("run_result", "test_result")]
        tap.ok(before and before[-1]["payload"]["cmd"] == "echo made > made.txt" and after and
               after[0]["payload"]["cmd"] == "echo made > made.txt",
               "its file_diff comes between that command and its result", repr(order))
    p = env.run("cast", sb)
    lines = p.stdout.decode().splitlines()
    hdr = json.loads(lines[0]) if lines else {}
    evs = [json.loads(x) for x in lines[1:]]
    tap.ok(hdr.get("version") == 3 and hdr.get("term", {}).get("cols") == 100 and
           hdr.get("term", {}).get("type") == "xterm-256color", "cast: an asciicast v3 header", lines[:1])
    codes = [e[1] for e in evs]
    tap.ok({"o", "i", "m", "x"} <= set(codes) and evs[-1] == [evs[-1][0], "x", "0"],
           "cast: output, input, markers, the exit", repr(codes[-5:]))
    tap.ok(["m", "echo hi; false"] in [e[1:] for e in evs],
           "cast: a marker at each command")
    out = "".join(e[2] for e in evs if e[1] == "o")
    tap.ok("hi\r\n" in out and "exit\r\n" in out, "cast: the output replays the session")


SH_PROMPT_END = b"\x1b]133;B;cmdline=echo\x07"
# sh as the launcher runs it where the sandbox has no bash (this one has).
SH = ["--", "env", "ENV=/etc/sandglass/shrc", "sh", "-i"]


def sh_prompt(t: Term, m: int) -> bool:
    return t.expect(re.escape(SH_PROMPT_END), m)


def shell_commands(rows: list[dict], after: int, shell: str) -> list[tuple[str, str]]:
    """commands(), of the exec whose command is `shell` only (not of the
    execs the test ran beside it)."""
    ids = {r["payload"].get("exec_id") for r in rows if r["seq"] > after and r["kind"] == "command" and
           r["payload"].get("cmd") == shell}
    return commands([r for r in rows if r["payload"].get("exec_id") in ids], after)


@tap.case("capture under sh: each command line is read from the terminal's echo")
def _():
    sb, base = captured_with_test()
    t = Term(["shell", sb, *SH])
    try:
        tap.ok(sh_prompt(t, 0), "sh's prompt ends with B;cmdline=echo", repr(t.out[-300:]))
        # each line is typed once the prompt is there, as a person would
        for line in (b"echo hi; false", b"true", b"echo x > f.txt", b"python3 -m unittest -q",
                     b"", b"echo nevr\x7fer\x03", b"for i in 1 2; do", b"echo n$i", b"done"):
            if line.endswith(b"\x03"):  # keys one at a time: the kernel drops echoes pending at ^C
                for k in line[:-1]:
                    m = t.type(bytes([k]))
                    t.expect(rb"\x08 \x08$" if k == 0x7f else re.escape(bytes([k])) + b"$", m)
                m = t.type(b"\x03")
            else:
                m = t.type(line + b"\r")
            if line in (b"for i in 1 2; do", b"echo n$i"):
                t.expect(rb"\r\n> $", m)  # PS2: the line goes on
            else:
                tap.ok(sh_prompt(t, m), f"{line!r}: the prompt comes back", repr(t.out[m:][-300:]))
        tap.ok(b"echo nevr\b \ber^C" in t.out, "the erase and the interrupt were echoed", repr(t.out[-600:]))
        # typed ahead while a command runs: echoed then, read by sh later
        # without an echo after its prompt: not taken for a command
        m = t.type(b"while [ ! -e go ]; do sleep 0.05; done\r")
        tap.ok(await_foreground(sb, "sleep"), "the loop runs")
        t.type(b"echo ahead\r")
        tap.ok(t.expect(rb"echo ahead\r\n", m), "the line typed ahead is echoed", repr(t.out[m:]))
        env.exec(sb, "touch", "go")
        tap.ok(t.expect(rb"\x07ahead\r\n.*" + re.escape(SH_PROMPT_END), m), "sh runs it after the loop",
               repr(t.out[m:]))
        m = t.type(b"exit\r")
        tap.eq(t.wait(), 0, "the shell ends")
    finally:
        t.close()
    want = [("command", "env ENV=/etc/sandglass/shrc sh -i"),
            ("command", "echo hi; false"), ("run_result", "echo hi; false"),
            ("command", "true"), ("run_result", "true"),
            ("command", "echo x > f.txt"), ("run_result", "echo x > f.txt"),
            ("command", "python3 -m unittest -q"), ("test_result", "python3 -m unittest -q"),
            ("command", "for i in 1 2; do"), ("run_result", "for i in 1 2; do"),
            ("command", "while [ ! -e go ]; do sleep 0.05; done"),
            ("run_result", "while [ ! -e go ]; do sleep 0.05; done"),
            ("command", "exit"), ("run_result", "exit"),
            ("run_result", "env ENV=/etc/sandglass/shrc sh -i")]
    rows = env.wait_rows(sb, lambda r: shell_commands(r, base, want[0][1]) == want, timeout=30)
    tap.eq(shell_commands(rows, base, want[0][1]), want, "the shell, then each command line and its result, in order: no command "
           "for the empty line, the interrupted one, PS2's lines or the one typed ahead")
    res = {r["payload"]["cmd"]: r["payload"] for r in rows if r["seq"] > base and
           r["kind"] in ("run_result", "test_result")}
    tap.eq([res.get(c, {}).get("exit_code") for c in ("echo hi; false", "true", "python3 -m unittest -q")],
           [1, 0, 0], "the statuses: D's at the next prompt")
    cwd = [r["payload"].get("cwd") for r in rows if r["seq"] > base and r["kind"] == "command"]
    tap.ok(cwd and all(c == "/workspace" for c in cwd[1:]), "each command's cwd is its prompt's", repr(cwd))
    outs, cur = {}, None
    for r in rows:  # a stdout event is its command's: between its command and result events
        if r["seq"] > base and r["kind"] == "command":
            cur = r["payload"]["cmd"]
        elif r["seq"] > base and r["kind"] == "stdout":
            outs[cur] = r["payload"]["data"]
    tap.eq(outs.get("echo hi; false"), "hi\r\n", "a command's stdout is what followed its line, no echo")
    loop = outs.get("for i in 1 2; do", "")
    tap.ok("n1\r\n" in loop and "n2\r\n" in loop, "PS2's lines belong to the command they continue", repr(loop))
    made = [r for r in rows if r["kind"] == "file_diff" and r["payload"].get("path", "").endswith("f.txt")]
    tap.ok(len(made) == 1, "the file a command made is one file_diff", repr(made))
    if made:
        i = next(k for k, r in enumerate(rows) if r is made[0])
        before = [r for r in rows[:i] if r["seq"] > base and r["kind"] == "command"]
        after = [r for r in rows[i:] if r["kind"] in ("run_result", "test_result")]
        tap.ok(before and before[-1]["payload"]["cmd"] == "echo x > f.txt" and after and
               after[0]["payload"]["cmd"] == "echo x > f.txt", "its file_diff comes between that command and its result",
               repr([(r["kind"], r["payload"].get("cmd", r["payload"].get("path"))) for r in rows if r["seq"] > base]))
    evs = [json.loads(x) for x in env.run("cast", sb).stdout.decode().splitlines()[1:]]
    marks = [e[2] for e in evs if e[1] == "m"]
    tap.ok("echo hi; false" in marks and "true" in marks, "cast: a marker at each command", repr(marks))


@tap.case("vi on the terminal: opens, edits, saves: one file_diff")
def _():
    sb = env.create_captured()
    t = Term(["shell", sb])
    try:
        t.expect(re.escape(PROMPT_END))
        m = t.type(b"vi -u NONE notes.txt\r")
        # vi has drawn its screen once it shows the empty file's name
        tap.ok(t.expect(rb"notes\.txt", m + 40), "vi draws its screen", repr(t.out[m:][-300:]))
        t.type(b"ihello from vi\x1b")
        m = t.type(b":wq\r")
        tap.ok(t.expect(re.escape(PROMPT_END), m), "vi saves and quits, the prompt is back", repr(t.out[m:][-300:]))
        t.type(b"exit\r")
        t.wait()
    finally:
        t.close()
    p = env.exec(sb, "cat", "notes.txt")
    tap.eq(p.stdout, b"hello from vi\n", "the file holds what was typed")
    rows = env.wait_rows(sb, lambda r: any(x["kind"] == "run_result" and x["payload"].get("cmd") == "cat notes.txt"
                                             for x in r))
    diffs = [r for r in rows if r["kind"] == "file_diff" and r["payload"].get("path", "").endswith("notes.txt")]
    tap.eq(len(diffs), 1, "one file_diff for the save")
    seq_vi = [r["seq"] for r in rows if r["kind"] == "command" and r["payload"].get("cmd", "").startswith("vi ")]
    tap.ok(seq_vi and diffs and diffs[0]["seq"] > seq_vi[0], "after vi's command event", repr(seq_vi))


@tap.case("a learner who removes the shell integration still leaves the recording and the file diffs")
def _():
    sb = env.create_captured()
    env.exec(sb, "sh", "-c", "echo a > a.txt; echo b > b.txt")
    t = Term(["shell", sb])
    try:
        t.expect(re.escape(PROMPT_END))
        bare_prompt = rb"(?:\r|\n|\x1b\[\?2004h)x$"  # PS1=x, no marks
        m = t.type(b"unset PROMPT_COMMAND PS0; trap - DEBUG; PS1=x\r")  # the whole integration
        tap.ok(t.expect(bare_prompt, m), "the bare prompt", repr(t.out[m:]))
        m = t.type(b"rm -rf *\r")
        tap.ok(t.expect(bare_prompt, m) and b"133;" not in t.out[m:], "rm runs, no mark any more",
               repr(t.out[m:]))
        t.type(b"exit\r")
        tap.eq(t.wait(), 0, "the shell ends")
    finally:
        t.close()
    rows = env.wait_rows(sb, lambda r: len([x for x in r if x["kind"] == "file_diff" and
                                            x["payload"].get("change") == "deleted"]) >= 2)
    gone = sorted(r["payload"]["path"] for r in rows if r["kind"] == "file_diff" and
                  r["payload"].get("change") == "deleted")
    tap.ok(any(g.endswith("a.txt") for g in gone) and any(g.endswith("b.txt") for g in gone),
           "both deletions are file_diff events", repr(gone))
    evs = [json.loads(x) for x in env.run("cast", sb).stdout.decode().splitlines()[1:]]
    typed = "".join(e[2] for e in evs if e[1] == "i")
    shown = "".join(e[2] for e in evs if e[1] == "o")
    tap.ok("rm -rf *" in typed and "rm -rf *" in shown, "the recording has the command, typed and shown")


@tap.case("detach and attach: Ctrl-P Ctrl-Q and a closed terminal leave the shell running; --attach takes it up")
def _():
    sb = env.create_captured()
    t = Term(["shell", sb])
    try:
        tap.ok(t.expect(re.escape(PROMPT_END)), "the prompt")
        m = t.type(b"X=kept; echo one\r")
        t.expect(rb"one\r\n", m)
        t.expect(re.escape(PROMPT_END), m)
        # a command still running when the terminal leaves
        m = t.type(b"sleep 1; echo while-$((6*7))-detached\r\x10\x11")
        tap.eq(t.wait(), 0, "the detach keys end the CLI with status 0")
        tap.ok(re.search(rb"detached; the shell \(exec \d+\) runs on: sandglass shell \S+ --attach", t.out[m:])
               is not None, "one line says it is detached and how to attach", repr(t.out[m:]))
        tap.eq(termios.tcgetattr(t.slave), t.before, "the terminal's settings are as before")
    finally:
        t.close()
    rows = env.wait_rows(sb, lambda r: any(x["kind"] == "stdout" and "while-42-detached" in
                                           json.dumps(x["payload"]) for x in r))
    tap.ok(any(x["kind"] == "stdout" and "while-42-detached" in json.dumps(x["payload"]) for x in rows),
           "output printed while detached is captured")
    tap.ok(any(x["kind"] == "activity" and x["payload"].get("state") == "detached" for x in rows),
           "the detach is an activity event")

    a = Term(["shell", sb, "--attach"])
    try:
        tap.ok(a.expect(rb"while-42-detached"), "attach replays the recent output", repr(a.out[-500:]))
        m = a.type(b"echo $X-again\r")
        tap.ok(a.expect(rb"kept-again\r\n", m), "it is the same shell (its variable is still set)", repr(a.out[m:]))
        a.expect(re.escape(PROMPT_END), m)
        second = Term(["shell", sb, "--attach"])
        try:
            tap.eq(second.wait(), 125, "a second attach is refused: 125")
            tap.ok(re.search(rb"^sandglass shell: the shell of exec \d+ already has a terminal attached[^\n]*\r?\n$",
                             second.out) is not None, "in one line", repr(second.out))
        finally:
            second.close()
        m = a.type(b"echo still-here\r")
        tap.ok(a.expect(rb"still-here\r\n", m), "the attached terminal is undisturbed", repr(a.out[m:]))
        a.expect(re.escape(PROMPT_END), m)
        a.proc.send_signal(signal.SIGHUP)  # the terminal window closes
        a.wait()
        tap.eq(termios.tcgetattr(a.slave), a.before, "SIGHUP: the terminal's settings are as before")
    finally:
        a.close()
    b = Term(["shell", sb, "--attach"])
    try:
        m = b.type(b"echo $X-third\r")
        tap.ok(b.expect(rb"kept-third\r\n", m), "after SIGHUP the shell ran on and attaches again", repr(b.out[-500:]))
        b.type(b"exit 5\r")
        tap.eq(b.wait(), 5, "the shell's exit status reaches the attached terminal")
    finally:
        b.close()
    rows = env.wait_rows(sb, lambda r: any(x["kind"] == "command" and "$X-third" in x["payload"].get("cmd", "")
                                           for x in r))
    tap.ok(any(x["kind"] == "command" and "$X-again" in x["payload"].get("cmd", "") for x in rows),
           "commands typed at an attached terminal are captured", repr([x["payload"].get("cmd") for x in rows
                                                                       if x["kind"] == "command"]))
    none = Term(["shell", sb, "--attach"])
    try:
        tap.eq(none.wait(), 125, "attach with no shell running: 125")
        tap.ok(b"no detached shell" in none.out and none.out.count(b"\n") == 1, "one line says so", repr(none.out))
    finally:
        none.close()


@tap.case("detach keys: '' turns detaching off (a closed terminal hangs up); a bad key is one line")
def _():
    sb = env.create()
    t = Term(["shell", sb, "--detach-keys", ""])
    try:
        t.expect(re.escape(PROMPT_END))
        m = t.type(b"\x10\x11\x15echo still-$((6*7))\r")  # Ctrl-U: whatever Ctrl-P recalled goes
        tap.ok(t.expect(rb"still-42\r\n", m) and t.proc.poll() is None,
               "Ctrl-P Ctrl-Q go to the shell: still attached", repr(t.out[m:]))
        t.proc.send_signal(signal.SIGHUP)
        t.wait()
    finally:
        t.close()
    end = time.time() + 30
    while time.time() < end and not gone(sb, "bash"):
        time.sleep(0.05)
    tap.ok(gone(sb, "bash"), "without detach keys SIGHUP hangs the shell up (and the sandbox answers)")
    a = Term(["shell", sb, "--attach"])
    try:
        tap.eq(a.wait(), 125, "nothing to attach")
    finally:
        a.close()
    for bad in (["--detach-keys", "ctrl-1"], ["--attach", "x"], ["--attach", "--cwd", "/tmp"]):
        p = Term(["shell", sb, *bad])
        try:
            tap.eq(p.wait(), 125, f"{bad}: 125")
            tap.ok(p.out.count(b"\n") == 1 and b"sandglass shell:" in p.out, f"{bad}: one line", repr(p.out))
        finally:
            p.close()
    p = env.run("exec", sb, "--detach-keys", "ctrl-a", "--", "true")
    tap.ok(p.returncode == 125 and b"-t -i" in p.stderr, "exec --detach-keys without -t -i: refused",
           p.stderr.decode())


@tap.case("exit statuses other than 0 and 1: each command's, the shell's, a signal's")
def _():
    sb, base = captured_with_test()
    t = Term(["shell", sb])
    try:
        tap.ok(t.expect(re.escape(PROMPT_END)), "the prompt")
        for line, code in ((b"sh -c 'exit 3'", 3), (b"no-such-command-sg", 127), (b"sh -c 'kill -TERM $$'", 143)):
            m = t.type(line + b"\r")
            tap.ok(t.expect(rb"133;D;%d\x07.*" % code + re.escape(PROMPT_END), m),
                   f"{line.decode()}: its end mark says {code}", repr(t.out[m:][-300:]))
        m = t.type(b"sleep 100\r")
        tap.ok(t.expect(rb"cmd=sleep 100\x07", m) and await_foreground(sb, "sleep"), "sleep runs")
        m = t.type(b"\x03")
        tap.ok(t.expect(rb"133;D;130\x07.*" + re.escape(PROMPT_END), m), "Ctrl-C: 130", repr(t.out[m:]))
        t.type(b"exit 7\r")
        tap.eq(t.wait(), 7, "the shell's exit status 7 is the CLI's")
    finally:
        t.close()
    want = {"sh -c 'exit 3'": (3, None), "no-such-command-sg": (127, None), "sh -c 'kill -TERM $$'": (143, 15),
            "sleep 100": (130, 2), "exit 7": (None, None), "/bin/sh /etc/sandglass/shell": (7, None)}
    shell = "/bin/sh /etc/sandglass/shell"

    def results(rows: list[dict]) -> dict:
        ids = {r["payload"].get("exec_id") for r in rows if r["seq"] > base and r["kind"] == "command" and
               r["payload"].get("cmd") == shell}
        return {r["payload"].get("cmd"): (r["payload"].get("exit_code"), r["payload"].get("signal"))
                for r in rows if r["seq"] > base and r["kind"] == "run_result" and r["payload"].get("exec_id") in ids}
    # "exit 7" has no status of its own: the shell ends before its end mark
    rows = env.wait_rows(sb, lambda r: shell in results(r))
    got = results(rows)
    tap.eq(got, want, "each captured result has its command's status (and the signal for 128+N)")
    evs = [json.loads(x) for x in env.run("cast", sb).stdout.decode().splitlines()[1:]]
    tap.eq(evs[-1][1:] if evs else None, ["x", "7"], "the recording ends with the shell's status 7")
    t = Term(["exec", sb, "-t", "--", "sh", "-c", "echo up; kill -TERM $$"])
    try:
        tap.eq(t.wait(), 143, "a terminal's command killed by SIGTERM: 143")
    finally:
        t.close()
    evs = [json.loads(x) for x in env.run("cast", sb).stdout.decode().splitlines()[1:]]
    tap.eq(evs[-1][1:] if evs else None, ["x", "143"], "its recording ends with 143")


@tap.case("a terminal session outlives the sandbox's per-exec time limit; --timeout still bounds it")
def _():
    sb = env.create("--timeout", "3")
    t = Term(["shell", sb])
    try:
        tap.ok(t.expect(re.escape(PROMPT_END)), "the prompt")
        # the shell started before this command: when DONE comes it has
        # lived past the 3 s limit
        m = t.type(b"sleep 5; echo DONE-$((6*7))\r")
        tap.ok(t.expect(rb"DONE-42\r\n.*" + re.escape(PROMPT_END), m, timeout=120),
               "a command that ends after the limit prints, a prompt comes back", repr(t.out[m:][-300:]))
        m = t.type(b"echo still-$((6*7))\r")
        tap.ok(t.expect(rb"still-42\r\n", m) and t.proc.poll() is None, "the shell is still alive",
               repr(t.out[m:]))
        tap.ok(b"time limit" not in t.out, "nothing was killed", repr(t.out[-300:]))
        t.type(b"exit 4\r")
        tap.eq(t.wait(), 4, "it ends when it exits")
    finally:
        t.close()
    t = Term(["exec", sb, "-t", "--", "sh", "-c", "sleep 5; echo DONE-$((6*7))"])
    try:
        tap.eq(t.wait(timeout=120), 0, "exec -t: past the limit, exit 0")
        tap.ok(b"DONE-42" in t.out and b"time limit" not in t.out, "its output came", repr(t.out))
    finally:
        t.close()
    p = env.exec(sb, "sleep", "100")
    tap.eq(p.returncode, 137, "a batch exec still ends at the sandbox's limit: 137")
    tap.ok(b"time limit of 3 s" in p.stderr, "one line says so", p.stderr.decode())
    for args in (["shell", sb, "--timeout", "3"], ["exec", sb, "-t", "-i", "--timeout", "3", "--", "sleep", "100"]):
        t = Term(args)
        try:
            if args[0] == "shell":
                t.expect(re.escape(PROMPT_END))
                t.type(b"sleep 100\r")
            tap.eq(t.wait(timeout=120), 137, f"{' '.join(args[:1] + args[2:5])}: ends at its own limit, 137")
            tap.ok(b"killed: it ran into its time limit of 3 s" in t.out, "one line says so", repr(t.out[-300:]))
            tap.eq(termios.tcgetattr(t.slave), t.before, "the terminal's settings are as before")
        finally:
            t.close()


class Tmux:
    """A tmux server of our own (its own socket) with one 100x30 pane
    running sh: a real terminal that answers what it is asked."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sgtmux-", dir=env.root)
        conf = os.path.join(self.dir, "tmux.conf")
        with open(conf, "w") as f:
            f.write("set -g default-terminal xterm-256color\nset -g escape-time 0\n")
        rc = os.path.join(self.dir, "shrc")
        with open(rc, "w") as f:
            f.write("PS1='outer$ '\n")
        self.base = ["tmux", "-S", os.path.join(self.dir, "sock"), "-f", conf]
        e = dict(env.env, ENV=rc, TERM="xterm-256color")
        self.tmux("new-session", "-d", "-x", "100", "-y", "30", "-s", "t", "sh", "-i", env=e)

    def tmux(self, *args: str, env: dict | None = None) -> str:
        p = subprocess.run([*self.base, *args], capture_output=True, timeout=30, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {p.stderr.decode(errors='replace')}")
        return p.stdout.decode(errors="replace")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def pane(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def await_pane(self, pattern: str, timeout: float = 30) -> bool:
        end = time.time() + timeout
        while time.time() < end:
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


PANE_PROMPT = r"^sandbox@sandglass:/workspace\$\s*$"
ANSWER = re.compile(r"\x1b\[[0-9;?>]*[Rcn]|\x1b\][0-9]+;rgb:|\x1bP[01]?[+$]r|\x1b\[\?[0-9;]*\$y")


@tap.case("attach in a real terminal (tmux) after vim and terminal queries: no answer is typed")
def _():
    if not tap.ok(shutil.which("tmux") is not None, "tmux is installed (scripts/install-deps.sh installs it)"):
        return
    sb = env.create_captured()
    editor = "vim" if env.exec(sb, "sh", "-c", "command -v vim").returncode == 0 else "vi"
    t = Tmux()
    try:
        # typed before the outer shell's prompt, the line would stand above
        # it and our prompt after "outer$ " on its line (seen in CI)
        t.await_pane(r"^outer\$\s*$")
        t.keys(f"{SANDGLASS} shell {sb}", "Enter")
        tap.ok(t.await_pane(PANE_PROMPT), "the shell's prompt in tmux", t.pane())
        t.keys("tty > /tmp/shell-tty; clear", "Enter")
        tap.ok(t.await_pane(r"\A" + PANE_PROMPT[1:]), "the prompt, cleared", t.pane())
        t.keys(f"{editor} -u NONE notes.txt", "Enter")
        tap.ok(t.await_pane(r'^"notes\.txt" \[New'), f"{editor} draws its screen (and asks tmux what it asks)",
               t.pane())
        t.keys("Escape", ":q", "Enter")
        tap.ok(t.await_pane(PANE_PROMPT), f"{editor} quits: the prompt", t.pane())
        t.keys("C-p", "C-q")
        tap.ok(t.await_pane(r"detached; the shell \(exec \d+\) runs on"), "detached", t.pane())
        # Queries that reach the terminal while nobody is attached: kept
        # for the replay, never answered (the kinds the issue names).
        p = env.sh(sb, "printf '\\033[6n\\033[c\\033[>c\\033[>q\\033]11;?\\007\\033]10;?\\033\\\\"
                   "\\033P$qm\\033\\\\\\033P+q544e\\033\\\\\\033[?2004$p\\033[18tDETACHED-OUT\\n' > $(cat /tmp/shell-tty)")
        tap.ok(p.returncode == 0, "queries printed to the detached terminal", p.stderr.decode())
        t.keys("clear", "Enter")
        tap.ok(t.await_pane(r"^outer\$\s*$"), "the outer shell, cleared", t.pane())
        t.keys(f"{SANDGLASS} shell {sb} --attach", "Enter")
        tap.ok(t.await_pane(r"DETACHED-OUT"), "attach replays the output", t.pane())
        t.keys("echo CHECK-$((6*7))", "Enter")
        tap.ok(t.await_pane(r"^CHECK-42$"), "echo CHECK's output shows", t.pane())
        t.keys("exit", "Enter")
        tap.ok(t.await_pane(r"^outer\$\s*$"), "the shell ends", t.pane())
        tap.ok("command not found" not in t.pane(), "no typed answer reached the shell", t.pane())
    finally:
        t.close()
    evs = [json.loads(x) for x in env.run("cast", sb).stdout.decode().splitlines()[1:]]
    last_r = max((i for i, e in enumerate(evs) if e[1] == "r"), default=-1)
    typed = "".join(e[2] for e in evs[last_r + 1:] if e[1] == "i")
    tap.ok(last_r >= 0 and ANSWER.search(typed) is None and "echo CHECK-$((6*7))" in typed,
           "the recording's input after the attach holds what was typed and no answer", repr(typed))
    rows = env.wait_rows(sb, lambda r: any(x["kind"] == "command" and "CHECK" in x["payload"].get("cmd", "")
                                           for x in r))
    cmds = [x["payload"].get("cmd", "") for x in rows if x["kind"] == "command" and "CHECK" in x["payload"].get("cmd", "")]
    tap.eq(cmds, ["echo CHECK-$((6*7))"], "the captured command is what was typed")


@tap.case("--no-record-input: the recording has no keys")
def _():
    t = Term(["shell", sid, "--no-record-input"])
    try:
        t.expect(re.escape(PROMPT_END))
        m = t.type(b"echo secret-typed\r")
        t.expect(re.escape(PROMPT_END), m)
        t.type(b"exit\r")
        t.wait()
    finally:
        t.close()
    evs = [json.loads(x) for x in env.run("cast", sid).stdout.decode().splitlines()[1:]]
    tap.ok(evs and not any(e[1] == "i" for e in evs), "no input event", repr(evs[:3]))
    tap.ok(any(e[1] == "o" and "secret-typed" in e[2] for e in evs), "the echo of what was typed is output")


env.cleanup()
tap.done()

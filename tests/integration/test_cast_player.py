"""Issue 16: a shell session's recording (`sandglass cast`, asciicast v3)
is played back by the real asciinema player (npm asciinema-player) in
Debian's chromium (tests/node/cast_player.mjs): the session is a real
`sandglass shell` on a terminal of ours (Python's pty); the player must load
the exported file without error, play it to its end, and show on its screen
what the shell computed, with a marker per command and the resizes; a broken
file must make the player fail (so these checks can fail).

Issue 24: the sandbox is captured through a real ingest (its SQLite store),
and `sandglass export --format asciicast` of that store, after the sandbox
is destroyed, writes the same recording, which the player plays too."""
from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import termios
import time

from sgtest import SANDGLASS, SANDGLASSD, Env, tap, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_DIR = os.path.join(ROOT, "tests", "node")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PROMPT_END = rb"\x1b\]133;B\x07"  # the shell integration's end of a prompt

env = Env()
secret = os.path.join(env.root, "secret")
with open(os.path.join(env.root, "ingest.log"), "a") as log:
    ing = subprocess.Popen([SANDGLASSD, "ingest", "--listen", "127.0.0.1:0", "--store",
                            f"sqlite:{env.root}/events.db", "--secret", secret],
                           stdout=subprocess.PIPE, stderr=log, env=env.env, text=True)
env.procs.append(ing)
ingest_url = "http://127.0.0.1:" + ing.stdout.readline().strip().rstrip("/").rsplit(":", 1)[1]
sid = env.create("--learner", "ada", "--task", "t1", "--ingest", ingest_url.replace("http", "ws"),
                 "--secret", secret)


def session(steps: list, rows: int = 20, cols: int = 90) -> int | None:
    """Runs `sandglass shell` on a PTY of ours through steps: ("type", keys,
    a pattern to await in what follows or None), ("resize", rows, cols) or
    ("until", a condition to await); returns the CLI's exit status."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([SANDGLASS, "shell", sid], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(env.env, TERM="xterm-256color"), start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    env.procs.append(proc)
    out = bytearray()

    def drain(timeout: float) -> None:
        if select.select([master], [], [], timeout)[0]:
            out.extend(os.read(master, 65536))

    def await_(pattern: bytes, start: int) -> bool:
        end = time.monotonic() + 60
        while time.monotonic() < end and not re.search(pattern, bytes(out[start:])) and proc.poll() is None:
            drain(0.2)
        return bool(re.search(pattern, bytes(out[start:])))
    try:
        if not await_(PROMPT_END, 0):
            raise RuntimeError(f"no prompt: {bytes(out)[-300:]!r}")
        for step in steps:
            if step[0] == "resize":  # the kernel sends the CLI SIGWINCH
                fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", step[1], step[2], 0, 0))
            elif step[0] == "until":
                if not wait_for(step[1], 60, 0.05):
                    raise RuntimeError(f"never: {step[2]}")
            else:
                mark = len(out)
                os.write(master, step[1])
                if step[2] and not await_(step[2], mark):
                    raise RuntimeError(f"after {step[1]!r}, no {step[2]!r}: {bytes(out[mark:])[-300:]!r}")
        end = time.monotonic() + 60
        while time.monotonic() < end and proc.poll() is None:
            drain(0.1)
        return proc.poll()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        os.close(slave)


def exported(path: str) -> list:
    """The newest recording of the sandbox, once complete (its exit event
    written), saved to path: its header and events."""
    def complete() -> bool:
        p = env.run("cast", sid)
        lines = p.stdout.decode().splitlines()
        if p.returncode or not lines or not lines[-1].startswith("[") or json.loads(lines[-1])[1] != "x":
            return False
        with open(path, "wb") as f:
            f.write(p.stdout)
        return True
    if not wait_for(complete, 60):
        raise RuntimeError(f"no complete recording: {env.run('cast', sid).stdout[-300:]!r}")
    with open(path) as f:
        return [json.loads(line) for line in f]


def play(path: str, expect: str = "") -> dict:
    p = subprocess.run(["node", os.path.join(NODE_DIR, "cast_player.mjs"), path, CHROMIUM, expect],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, cwd=NODE_DIR)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": f"no answer from the player's driver: {p.stdout[-500:]!r} {p.stderr[-1500:]!r}"}


def lines(screen: str) -> list[str]:
    return [x.rstrip() for x in screen.splitlines()]


ready = os.path.exists(os.path.join(NODE_DIR, "node_modules", "asciinema-player")) and \
    os.path.exists(os.path.join(NODE_DIR, "node_modules", "playwright-core"))
tap.ok(ready, "asciinema-player and playwright-core are installed (npm install in tests/node)")
tap.ok(os.access(CHROMIUM, os.X_OK), f"Debian's chromium is installed ({CHROMIUM})")
typed = "echo cast-play-$((6*7))"
good = os.path.join(env.root, "session.cast")


@tap.case("the player plays a shell session: the computed output on its screen, a marker per command")
def _():
    code = session([("type", typed.encode() + b"\r", rb"cast-play-42\r\n[\s\S]*" + PROMPT_END),
                    ("type", b"exit\r", None)])
    tap.eq(code, 0, "the shell ends")
    rec = exported(good)
    hdr, evs = rec[0], rec[1:]
    tap.ok(hdr.get("version") == 3 and hdr.get("term", {}).get("cols") == 90 and hdr["term"].get("rows") == 20,
           "the export is an asciicast v3 file of the session's size", repr(hdr))
    r = play(good, "cast-play-42")
    tap.ok(r.get("ok") and r.get("ended") and not r.get("error") and not r.get("error_overlay"),
           "the player loads it and plays it to the end, without error", json.dumps(r)[:1500])
    screen = lines(r.get("screen", ""))
    tap.ok("cast-play-42" in screen, "its screen shows the computed output on a line of its own",
           r.get("screen", ""))
    tap.ok(any(typed in x for x in screen), "and the command as it was typed", r.get("screen", ""))
    tap.eq(r.get("size"), {"cols": 90, "rows": 20}, "the player's terminal has the session's size")
    in_file = [e[2] for e in evs if e[1] == "m"]
    tap.eq(in_file, [typed, "exit"], "the file has a marker per command")
    tap.eq([m[1] for m in r.get("markers") or []], in_file, "the player parsed those markers")
    tap.eq(r.get("reached"), in_file, "and crossed each while playing")
    times = [m[0] for m in r.get("markers") or []]
    tap.ok(times == sorted(times) and all(0 <= t <= (r.get("duration") or 0) for t in times),
           "in order, within the recording", repr((times, r.get("duration"))))


@tap.case("the player plays a session with a resize: the new size, and the shell's view of it")
def _():
    # The resize travels CLI -> supervisor -> the sandbox's terminal: its
    # event in the recording says it landed (the terminal first, then the
    # recording), so the command typed after it sees the new size.
    landed = lambda: '"r", "120x30"]' in env.run("cast", sid).stdout.decode()  # noqa: E731
    code = session([("resize", 30, 120), ("until", landed, "the resize in the recording"),
                    ("type", b"stty size\r", rb"30 120\r\n[\s\S]*" + PROMPT_END), ("type", b"exit\r", None)])
    tap.eq(code, 0, "the shell ends")
    path = os.path.join(env.root, "resized.cast")
    evs = exported(path)[1:]
    tap.ok(["r", "120x30"] in [e[1:] for e in evs], "the file has the resize", repr([e for e in evs if e[1] == "r"]))
    r = play(path, "30 120")
    tap.ok(r.get("ok") and r.get("ended") and not r.get("error"), "the player plays it to the end, without error",
           json.dumps(r)[:1500])
    tap.ok({"cols": 120, "rows": 30} in (r.get("resizes") or []), "the player resized its terminal",
           repr(r.get("resizes")))
    tap.eq(r.get("size"), {"cols": 120, "rows": 30}, "its terminal ends at the new size")
    tap.ok("30 120" in lines(r.get("screen", "")), "its screen shows stty's answer", r.get("screen", ""))


@tap.case("a broken recording makes the player fail")
def _():
    data = open(good, "rb").read().splitlines(keepends=True)
    cut = os.path.join(env.root, "cut.cast")
    o = next(i for i, x in enumerate(data) if x.startswith(b'[') and b'"o"' in x and i > 1)
    with open(cut, "wb") as f:  # an event line cut in its middle (a recording copied while written)
        f.writelines(data[:o])
        f.write(data[o][:len(data[o]) // 2] + b"\n")
    r = play(cut, "cast-play-42")
    tap.ok(not r.get("ok") and r.get("error") and r.get("error_overlay"),
           "an event cut in its middle: the player reports an error and shows its error state", json.dumps(r)[:1500])
    headless = os.path.join(env.root, "headless.cast")
    with open(headless, "wb") as f:
        f.writelines(data[1:])
    r = play(headless, "cast-play-42")
    tap.ok(not r.get("ok") and r.get("error") and r.get("error_overlay"),
           "no header: the player reports an error", json.dumps(r)[:1500])


@tap.case("the ingest's export of the recordings, after destroy, plays the same")
def _():
    want = open(good, "rb").read()
    env.run("destroy", sid, check=True)  # waits for delivery: the recordings are in the store
    out = os.path.join(env.root, "casts")
    p = env.run("export", "--format", "asciicast", "--out", out, "--ingest", ingest_url, "--secret", secret)
    tap.eq(p.returncode, 0, "export --format asciicast succeeds: " + p.stderr.decode()[-300:])
    files = sorted(os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs
                   if f.endswith(".cast"))
    tap.eq(len(files), 2, "one file per shell session of the sandbox: " + repr(files))
    same = [f for f in files if open(os.path.join(out, f), "rb").read() == want]
    tap.eq(len(same), 1, "one of them is byte for byte what `sandglass cast` gave while it lived")
    r = play(os.path.join(out, same[0]) if same else os.path.join(out, files[0]), "cast-play-42")
    tap.ok(r.get("ok") and r.get("ended") and not r.get("error") and not r.get("error_overlay"),
           "the player plays the exported file to the end, without error", json.dumps(r)[:1500])
    tap.ok("cast-play-42" in lines(r.get("screen", "")), "its screen shows the computed output",
           r.get("screen", ""))
    tap.eq([m[1] for m in r.get("markers") or []], [typed, "exit"], "with a marker per command")


env.cleanup()
tap.done()

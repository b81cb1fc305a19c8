"""Issue 25, the console's replay: a real `sandglass shell` session on a
terminal of ours (Python's pty) is recorded by the supervisor; the ingest
(sharing the sandboxes' state directory) lists it (GET /v1/casts) and
serves it (GET /v1/cast) under the read token's scope; the console's
replay page (replay.html, the vendored asciinema player) plays it in
Debian's chromium (tests/node/browser_replay.mjs) with one command per
marker beside it, each label text only (a hostile one included), and a
click on a command seeks the player to that marker's time (what the
player itself reports). No CSP violation, no page error, no dialog.
The recordings are read where `sandglass cast` reads them (the store's
recordings, helper blobs' work, are not in this branch)."""
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
import urllib.request

from sgtest import SANDGLASS, SANDGLASSD, Env, tap, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_DIR = os.path.join(ROOT, "tests", "node")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PROMPT_END = rb"\x1b\]133;B\x07"  # the shell integration's end of a prompt
STAGED = os.path.join(os.path.dirname(os.path.abspath(SANDGLASSD if os.path.isabs(SANDGLASSD)
                                                       else shutil.which(SANDGLASSD) or SANDGLASSD)), "web")

env = Env()
env.env["SANDGLASS_WEB_DIR"] = STAGED  # the staged web/ (vendor/ holds the player)
secret = os.path.join(env.root, "secret")
with open(os.path.join(env.root, "ingest.log"), "a") as log:
    ing = subprocess.Popen([SANDGLASSD, "ingest", "--listen", "127.0.0.1:0", "--store",
                            f"sqlite:{env.root}/events.db", "--secret", secret],
                           stdout=subprocess.PIPE, stderr=log, env=env.env, text=True)
env.procs.append(ing)
port = int(ing.stdout.readline().strip().rstrip("/").rsplit(":", 1)[1])
base = f"http://127.0.0.1:{port}/"
sid = env.create("--learner", "ada", "--task", "t1", "--ingest", f"ws://127.0.0.1:{port}", "--secret", secret)


def token(*args: str) -> str:
    return env.run("token", "--secret", secret, *args, check=True).stdout.decode().strip()


def shell(typed: list[bytes], rows: int = 20, cols: int = 90) -> int | None:
    """`sandglass shell` on a PTY of ours: each line typed after the
    prompt came back, then exit; the CLI's exit status."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([SANDGLASS, "shell", sid], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(env.env, TERM="xterm-256color"), start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    env.procs.append(proc)
    out = bytearray()

    def prompt_after(start: int) -> bool:
        end = time.monotonic() + 60
        while time.monotonic() < end and not re.search(PROMPT_END, bytes(out[start:])) and proc.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                out.extend(os.read(master, 65536))
        return bool(re.search(PROMPT_END, bytes(out[start:])))
    try:
        if not prompt_after(0):
            raise RuntimeError(f"no prompt: {bytes(out)[-300:]!r}")
        for line in typed + [b"exit"]:
            mark = len(out)
            os.write(master, line + b"\r")
            if line != b"exit" and not prompt_after(mark):
                raise RuntimeError(f"no prompt after {line!r}: {bytes(out[mark:])[-300:]!r}")
        end = time.monotonic() + 60
        while time.monotonic() < end and proc.poll() is None:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    break
        return proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        os.close(slave)


def get(path: str, tok: str) -> tuple[int, bytes]:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {tok}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def markers(text: str) -> list:
    out, t = [], 0.0
    for line in text.splitlines()[1:]:
        ev = json.loads(line)
        t += ev[0]
        if ev[1] == "m":
            out.append([t, ev[2]])
    return out


HOSTILE = "echo '<img src=x onerror=alert(1)>' \u202eabc"
typed = [b"echo replay-$((6*7))", b"ls -a /", HOSTILE.encode()]
rtok = token("--read")
cast_text = ""


@tap.case("a shell session is recorded and listed by the ingest, under the token's scope")
def _():
    global cast_text
    tap.eq(shell(typed), 0, "the shell ends")

    def complete() -> bool:
        global cast_text
        st, body = get(f"v1/casts?sandbox={sid}", rtok)
        casts = json.loads(body).get("casts", []) if st == 200 else []
        if not casts:
            return False
        st, body = get(f"v1/cast?sandbox={sid}&session={casts[-1]['session']}", rtok)
        text = body.decode()
        if st != 200 or not text.rstrip().splitlines()[-1].startswith("[") or \
                json.loads(text.rstrip().splitlines()[-1])[1] != "x":
            return False
        cast_text = text
        return True
    tap.ok(wait_for(complete, 60), "GET /v1/casts lists it and GET /v1/cast serves it whole")
    tap.eq(cast_text.encode(), env.run("cast", sid).stdout, "the bytes `sandglass cast` prints")
    m = markers(cast_text)
    tap.ok(len(m) >= 3 and any("replay-" in x[1] for x in m), "a marker per command", repr(m))
    tap.eq(get(f"v1/casts?sandbox={sid}", "")[0], 401, "without a token: 401")
    bob = token("--read", "--learner", "bob")
    st, body = get(f"v1/casts?sandbox={sid}", bob)
    tap.ok(st == 200 and json.loads(body)["casts"] == [], "a token scoped to another learner sees none", body)
    tap.eq(get(f"v1/cast?sandbox={sid}&session=0", bob)[0], 404, "and cannot read one")
    tap.eq(get(f"v1/casts?sandbox={sid}&learner=bob", token("--read", "--learner", "ada"))[0], 403,
           "asking for another learner than the token's: 403")
    st, body = get(f"v1/casts?sandbox={sid}", token("--read", "--learner", "ada"))
    tap.ok(st == 200 and len(json.loads(body)["casts"]) >= 1, "the learner's own scoped token: listed")
    tap.eq(get(f"v1/cast?sandbox={sid}&session=../../x", rtok)[0], 400, "a session that is not a number: 400")


@tap.case("the replay page plays it in chromium; clicking a command seeks the player to its marker")
def _():
    plan = {"base": base, "token": rtok, "route": ["ada", "t1", sid], "click": 1, "from_timeline": "ls -a /"}
    p = subprocess.run(["node", os.path.join(NODE_DIR, "browser_replay.mjs"), CHROMIUM, json.dumps(plan)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, cwd=NODE_DIR)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        r = {"ok": False, "error": f"{p.stdout[-800:]} {p.stderr[-1500:]}"}
    tap.ok(r.get("ok"), "the page loaded and played", r.get("error", ""))
    m = markers(cast_text)
    tap.eq(r.get("labels"), [x[1].replace("\u202e", "\\u202e") for x in m],
           "one command per marker, its label as text (a bidi override shown as an escape)")
    tap.ok(r.get("player_markers") == len(m), "the player parsed the same markers", r.get("player_markers"))
    want = m[plan["click"]][0]
    got = r.get("seconds")
    tap.ok(isinstance(got, (int, float)) and abs(got - want) < 0.05,
           "the click seeked the player to that command's marker (the player's own time)", f"{got} vs {want}")
    labels = [x[1] for x in m]
    tap.ok(r.get("timeline_label") == "ls -a /" and labels[r.get("timeline_marker", -1)] == "ls -a /",
           "a command's 'replay' link in the session's timeline opens the replay seeked to that command's marker",
           f"{r.get('timeline_marker')} {r.get('timeline_label')!r} {labels}")
    tap.eq(r.get("hostile_elements"), 0, "no element made from a label (no <img>)")
    tap.eq(r.get("dialogs"), 0, "no dialog")
    tap.eq(r.get("violations"), [], "no CSP violation")
    tap.eq(r.get("page_errors"), [], "no page error")


tap.done()

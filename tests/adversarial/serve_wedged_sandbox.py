#!/usr/bin/env python3
"""Attack (issue 22, high): one learner freezes every learner's terminal.
`sandglass serve` connected to a supervisor with a blocking connect(): with
a supervisor that does not accept (here stopped with SIGSTOP) and its
listen backlog full (a learner's own opened-and-closed terminals stay in
it, unaccepted), the next terminal of that sandbox blocked serve's one
loop: /healthz timed out and no other learner's terminal opened.

Now the connect is non-blocking and retried until SG_SERVE_CONNECT_TIMEOUT_S,
then refused with 1013 and a reason (a connection the stopped supervisor
took but never answers: after SG_SERVE_ANSWER_TIMEOUT_S, the same way);
meanwhile /healthz answers and another sandbox's terminal opens and runs. The per-sandbox limit counts
the terminals still connecting. After SIGCONT the sandbox opens again."""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common  # noqa: E402
from serve_common import WS, Closed, healthz, key_file, start_serve  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, cmdline, comm, pid_alive, tap, wait_for  # noqa: E402

env = Env()
secret = key_file(os.path.join(env.root, "secret"), "ef")
wedged = env.create("--task", "wedge")
other = env.create("--task", "wedge")
serve, port = start_serve(env, secret)


def token(sid: str) -> str:
    return env.run("token", "--secret", secret, "--terminal", "--sandbox", sid, check=True).stdout.decode().strip()


def supervisor_of(sid: str) -> int:
    for d in os.listdir("/proc"):
        if d.isdigit() and comm(int(d)) == "sg-supervisor" and f"supervisor {sid}" in cmdline(int(d)):
            return int(d)
    return 0


def open_terminal(sid: str) -> tuple[WS | None, str]:
    return serve_common.open_terminal(port, token(sid))


def fill_backlog(sid: str) -> int:
    """Connects to the stopped supervisor and closes, until its listen
    backlog is full (EAGAIN): the connections a learner's closed terminals
    leave there. Returns how many it took, 0 if it never filled."""
    path = os.path.join(env.state, "sb", sid, "ctl.sock")
    for n in range(1, 20000):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
        try:
            s.connect(path)
        except BlockingIOError:
            return n
        except OSError as e:
            if e.errno == errno.EAGAIN:
                return n
            raise
        finally:
            s.close()
    return 0


def opens_again(what: str) -> None:
    """After SIGCONT: the wedged sandbox's terminal opens, runs, exits."""
    ws, why = open_terminal(wedged)
    tap.ok(not why, f"after SIGCONT: the sandbox's terminal opens again{what}", why)
    if ws:
        ws.binary(b"exit 0\r")
        ws.wait(lambda w: w.close_code is not None, 30)
        ws.close()


sup = supervisor_of(wedged)
tap.ok(sup > 0, "the wedged sandbox's supervisor is found", wedged)
held: list[WS] = []
try:
    ws, why = open_terminal(wedged)
    tap.ok(not why, "before: the sandbox's terminal opens", why)
    if ws:
        ws.close()
    os.kill(sup, signal.SIGSTOP)
    n = fill_backlog(wedged)
    tap.ok(n > 0, "the stopped supervisor's backlog is full", f"after {n} connections")
    # The learner's next terminals on the wedged sandbox: each connects in
    # vain. The first four hold the sandbox's terminal slots meanwhile.
    # Their tokens made first: the fifth comes right after them, while
    # they still connect (SG_SERVE_CONNECT_TIMEOUT_S), also on a slow host.
    tokens = [token(wedged) for _ in range(5)]
    try:
        for i in range(4):
            w = WS(port, timeout=30)
            w.auth(tokens[i])
            held.append(w)
    except (OSError, Closed):
        pass
    tap.eq(len(held), 4, "four terminals of the wedged sandbox open their WebSockets (and send the token)")
    try:
        fifth = WS(port, timeout=30)
        fifth.auth(tokens[4])
        fifth.wait(lambda w: w.close_code is not None, 30)
        tap.ok(fifth.close_code == 1013 and "too many terminals open on this sandbox" in fifth.close_reason,
               "a fifth terminal of the wedged sandbox is refused: the four still connecting count",
               f"{fifth.close_code} {fifth.close_reason!r}")
        fifth.close()
    except (OSError, Closed) as e:
        tap.ok(False, "a fifth terminal of the wedged sandbox is refused", repr(e))
    tap.ok(healthz(port, 10) is not None, "/healthz answers while they wait")
    ws, why = open_terminal(other)
    tap.ok(not why, "another sandbox's terminal opens and runs a command meanwhile", why)
    if ws:
        ws.close()
    for i, w in enumerate(held):
        w.wait(lambda w: w.close_code is not None, 60)
        tap.ok(w.close_code == 1013 and "busy" in w.close_reason and
               any("busy" in t for t in w.texts),
               f"wedged terminal {i + 1}: refused in the end, 1013 with the reason",
               f"{w.close_code} {w.close_reason!r} {w.texts}")
    h = healthz(port, 10)
    tap.ok(h is not None and h.get("terminals") == 0, "/healthz: no terminal slot left held", repr(h))
finally:
    for w in held:
        w.close()
    if sup:
        os.kill(sup, signal.SIGCONT)
opens_again("")


def stopped(pid: int) -> bool:
    """Every thread of pid stopped: a SIGSTOP takes effect thread by thread."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return all(open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] == "T" for t in tasks)
    except OSError:
        return False


def unaccepted(sid: str) -> int:
    """Connections waiting in the supervisor's listen backlog (ss's Recv-Q
    of a listening socket), -1 without the socket."""
    path = os.path.join(env.state, "sb", sid, "ctl.sock")
    out = subprocess.run(["ss", "-xlH"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) > 4 and f[4] == path:
            return int(f[2])
    return -1


# A supervisor stopped with room in its backlog (as the one above may
# still accept a few before all its threads stop): the terminal connects,
# sends the shell's request, and no answer comes. Refused after
# SG_SERVE_ANSWER_TIMEOUT_S, busy, its slot free at once.
os.kill(sup, signal.SIGSTOP)
try:
    tap.ok(wait_for(lambda: stopped(sup), 30), "the supervisor is stopped again, every thread")
    mute = WS(port, timeout=30)
    mute.auth(token(wedged))
    tap.ok(wait_for(lambda: unaccepted(wedged) == 1, 30),
           "a terminal connects to the stopped supervisor (one connection in its backlog)", unaccepted(wedged))
    tap.eq((healthz(port, 10) or {}).get("terminals"), 1, "it holds a slot while the answer is awaited")
    mute.wait(lambda w: w.close_code is not None, 120)
    tap.ok(mute.close_code == 1013 and "busy" in mute.close_reason and any("busy" in t for t in mute.texts),
           "no answer: refused in the end, 1013 with the reason",
           f"{mute.close_code} {mute.close_reason!r} {mute.texts}")
    tap.eq((healthz(port, 10) or {}).get("terminals"), 0, "/healthz: its slot is free")
    mute.close()
finally:
    os.kill(sup, signal.SIGCONT)
opens_again(", the refused one's request ignored")

# A dead supervisor: serve's terminal takes the sandbox over, which waits
# (the revive lock, then the new supervisor's start) on the thread pool,
# not on serve's loop. The test holds the lock a while, as a slow
# takeover by another client would.
sup2 = supervisor_of(other)
os.kill(sup2, signal.SIGKILL)
tap.ok(wait_for(lambda: not pid_alive(sup2), 30), "another sandbox's supervisor is killed")
lock = os.open(os.path.join(env.state, "sb", other, "revive.lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(lock, fcntl.LOCK_EX)
try:
    taking = WS(port, timeout=30)
    taking.auth(token(other))
    # The token taken (a terminal slot held) and /healthz still answering:
    # serve's loop went on past the takeover it started.
    tap.ok(wait_for(lambda: (healthz(port, 10) or {}).get("terminals") == 1, 60),
           "/healthz answers while the takeover waits", repr(healthz(port, 10)))
    ws, why = open_terminal(wedged)
    tap.ok(not why, "the first sandbox's terminal opens meanwhile", why)
    if ws:
        ws.close()
except (OSError, Closed) as e:
    taking = None
    tap.ok(False, "a terminal of the sandbox with a dead supervisor", repr(e))
finally:
    fcntl.flock(lock, fcntl.LOCK_UN)
    os.close(lock)
tap.ok(taking is not None and taking.wait(lambda w: b"$ " in w.output, 60),
       "then the takeover ends and that terminal opens",
       f"{taking.close_code} {taking.close_reason!r} {taking.texts}" if taking else "")
if taking:
    taking.close()
with open(os.path.join(env.root, "serve.log")) as f:
    tap.ok("a new one took over" in f.read(), "serve says it took the sandbox over")
tap.ok(serve.poll() is None, "serve still runs")
serve.terminate()
serve.wait(timeout=30)
tap.eq(serve.returncode, 0, "and stops cleanly")
env.cleanup()
tap.done()

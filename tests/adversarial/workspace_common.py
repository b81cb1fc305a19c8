"""Shared by the tests/adversarial/workspace_*.py attacks (and
tests/integration/test_workspace_limits.py): the learner controls the
workspace that the host-side workers (the watcher in the supervisor, the
checkpoint worker) read. A captured sandbox, so the events the host made of
an attack can be read back from its spool."""
from __future__ import annotations

import array
import ctypes
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import termios
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sgtest import SANDGLASS, ckpt_worker, pid_alive, tap, wait_for  # noqa: E402,F401
from test_capture import CapEnv  # noqa: E402

# Generous: a loaded machine is slow, not broken. Before the fixes these
# attacks took 10 minutes (sparse file) or never ended (a stuck worker).
SLOW = 180


def new_env(**extra: str) -> CapEnv:
    env = CapEnv()
    # The worker stays up between execs (the tests stop and find it).
    env.env["SANDGLASS_CKPT_IDLE_MS"] = "600000"
    env.env.update(extra)
    return env


def sh(env: CapEnv, sid: str, script: str, timeout: float = SLOW):
    return env.run("exec", sid, "--", "/bin/sh", "-c", script, timeout=timeout)


def events(env: CapEnv, sid: str, kind: str | None = None) -> list[dict]:
    """The sandbox's events as spooled (made durable before an exec's
    result returns), oldest first: payloads with "kind" added."""
    out = []
    for _seq, fr in env.spool_records(sid):
        if kind is None or fr.get("kind") == kind:
            p = dict(fr.get("payload") or {})
            p["kind"] = fr.get("kind")
            out.append(p)
    return out


def supervisor_pid(env: CapEnv, sid: str) -> int:
    return int(json.load(open(env.sbdir(sid, "meta.json")))["supervisor_pid"])


def store_bytes(env: CapEnv, sid: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(env.sbdir(sid, "checkpoints.git")):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def queued_to(pid: int) -> int:
    """Bytes waiting unread in the sockets of process pid (a stopped
    worker's): each socket is taken with pidfd_getfd(2) and asked FIONREAD.
    -1 when they cannot be read."""
    libc = ctypes.CDLL(None, use_errno=True)
    total = 0
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return -1
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    continue
            except OSError:
                continue
            dup = libc.syscall(438, pidfd, int(fd), 0)  # pidfd_getfd: the same number on every arch
            if dup < 0:
                return -1
            try:
                buf = array.array("i", [0])
                fcntl.ioctl(dup, termios.FIONREAD, buf, True)
                total += buf[0]
            finally:
                os.close(dup)
    finally:
        os.close(pidfd)
    return total


def stuck_in_worker(env: CapEnv, sid: str, trigger: tuple[str, ...] = ("exec", "--", "echo", "late")):
    """Makes the supervisor block in a checkpoint call that never ends: its
    worker is SIGSTOPped and a request (by default an exec, whose
    checkpoint comes first; or "checkpoint") is started here in the
    background. Returns (worker pid, the request's Popen) once the
    supervisor's call waits unread in the stopped worker's socket (the
    supervisor then waits for its answer): a supervisor merely out of its
    epoll (making a ready child, say) is not yet that, and a CLI killed
    before its request reached the supervisor would leave nothing stuck."""
    sup = supervisor_pid(env, sid)
    # A changed workspace: the exec's checkpoint must go to the worker.
    sh(env, sid, "echo $$ > /workspace/changed")
    w = ckpt_worker(sup)
    if not w:
        raise RuntimeError("no checkpoint worker runs")
    os.kill(w, signal.SIGSTOP)
    if queued_to(w) != 0:
        raise RuntimeError(f"the stopped worker has {queued_to(w)} bytes queued before any request")
    p = env.spawn([SANDGLASS, trigger[0], sid, *trigger[1:]],
                  stdout=open(os.devnull, "wb"), stderr=open(os.devnull, "wb"))
    if not wait_for(lambda: queued_to(w) > 0 and pid_alive(sup), 60):
        raise RuntimeError(f"the supervisor never sent its worker a call ({queued_to(w)} bytes queued)")
    return w, p


def deep_py(levels: int, name: str, leaf: str, text: str, mode: str = "w") -> list[str]:
    """argv of a python3 run inside the sandbox that goes down `levels`
    directories called name (making them), one relative chdir at a time
    (the shell's cd fails past PATH_MAX), and writes text to leaf."""
    code = ("import os,sys\n"
            "os.chdir('/workspace')\n"
            f"for i in range({levels}):\n"
            f"    os.makedirs({name!r}, exist_ok=True); os.chdir({name!r})\n"
            f"open({leaf!r}, {mode!r}).write({text!r})\n")
    return ["python3", "-c", code]


def deep_script(levels: int, name: str = "d", leaf: str = "f") -> str:
    """Shell that makes `levels` nested directories one cd at a time (so no
    path handed to a syscall is long) and a file at the bottom."""
    return (f"cd /workspace && i=0; while [ $i -lt {levels} ]; do mkdir {name} && cd {name} || exit 1; "
            f"i=$((i+1)); done; echo bottom > {leaf}")


def run_on_terminal(env, args: list[str], limit: float, on_output=None) -> tuple[int | None, bytes]:
    """The CLI on a terminal of ours, its output read as it comes (a
    terminal nobody reads would hold the loop back); its status (None when
    it did not end within limit) and its last 4 KiB. on_output(total, tail)
    is called after each read with the bytes read so far and that tail."""
    master, slave = os.openpty()
    p = subprocess.Popen([SANDGLASS, *args], stdin=slave, stdout=slave, stderr=slave,
                         env=dict(env.env, TERM="xterm"), start_new_session=True)
    env.procs.append(p)
    tail, total = b"", 0
    end = time.monotonic() + limit
    try:
        while time.monotonic() < end and p.poll() is None:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    d = os.read(master, 65536)
                except OSError:
                    break
                total += len(d)
                tail = (tail + d)[-4096:]
                if on_output:
                    on_output(total, tail)
        return p.poll(), tail
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
        os.close(slave)

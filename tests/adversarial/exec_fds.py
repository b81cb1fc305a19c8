#!/usr/bin/env python3
"""Attacks on what crosses into a sandbox with an exec: the caller's file
descriptors, the control connection, and the processes of other execs.

Each attack is run exactly as a learner (or the caller's environment) would
run it; each check asserts the attack failed and the sandbox still works.
"""
from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASS, Env, tap, wait_for  # noqa: E402

env = Env()


def cli(*args, stdin=None, timeout=60):
    """Runs the CLI with an arbitrary stdin (an fd, or None for /dev/null)."""
    return subprocess.run([SANDGLASS, *args], stdin=stdin if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, env=env.env)


def put(sid, path, text):
    p = env.run("exec", sid, "--", "/bin/sh", "-c", f"cat > {path}", input=text.encode())
    assert p.returncode == 0, p.stderr


sid = env.create()


@tap.case("a terminal on stdin stays the caller's")
def _tty():
    master, slave = pty.openpty()
    try:
        p = cli("exec", sid, "--", "/bin/sh", "-c",
                "test -t 0 && echo TTY || echo NOTTY; readlink /proc/self/fd/0", stdin=slave)
        out = p.stdout.decode().split()
        tap.eq(p.returncode, 0, "exec with a terminal on stdin runs")
        tap.eq(out[:1], ["NOTTY"], "the command's stdin is not a terminal")
        tap.ok(len(out) > 1 and out[1].startswith("pipe:"), "the command's stdin is a pipe", repr(out))
        # A background process keeps the stdin of its exec and reads on.
        p = cli("exec", sid, "--", "/bin/sh", "-c",
                "exec 3<&0; (cat <&3 > /workspace/stolen; echo done > /workspace/stolen.end) & exit 0",
                stdin=slave)
        tap.eq(p.returncode, 0, "the exec that leaves a reader behind returns")
        tap.ok(wait_for(lambda: env.exec(sid, "test", "-f", "/workspace/stolen.end").returncode == 0, 60),
               "the reader it left got EOF when the exec ended")
        # The operator types the next line: it must reach the operator's
        # next reader (us), not the sandbox.
        os.write(master, b"hunter2-operator-password\n")
        got = b""
        while select.select([slave], [], [], 10)[0]:
            got += os.read(slave, 4096)
            if b"\n" in got:
                break
        tap.ok(b"hunter2-operator-password" in got, "the typed line stayed in the terminal", repr(got))
        stolen = env.exec(sid, "cat", "/workspace/stolen").stdout
        tap.eq(stolen, b"", "nothing typed after the exec reached the sandbox")
    finally:
        os.close(master)
        os.close(slave)


@tap.case("a directory on stdin is no way out")
def _dir():
    host = tempfile.mkdtemp(prefix="sg-hostdir-", dir=env.root)
    with open(os.path.join(env.root, "HOST-SECRET-MARKER"), "w") as f:
        f.write("x")
    fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY)
    try:
        script = ("import os\n"
                  "try:\n"
                  "    d = os.open('..', os.O_RDONLY, dir_fd=0)\n"
                  "    print('LISTED', os.listdir(d))\n"
                  "except OSError as e:\n"
                  "    print('REFUSED', e.errno)\n")
        p = cli("exec", sid, "--", "python3", "-c", script, stdin=fd)
        out = p.stdout.decode()
        tap.ok("REFUSED" in out and "HOST-SECRET-MARKER" not in out,
               "openat(0, \"..\") does not reach the host", out + p.stderr.decode())
        tap.ok(b"cannot read stdin" in p.stderr, "the CLI says it could not relay the directory",
               p.stderr.decode())
    finally:
        os.close(fd)


@tap.case("a closed stdin does not hand over the control socket")
def _closed():
    script = ("import json, os, socket, stat\n"
              "m = os.fstat(0).st_mode\n"
              "print('SOCKET' if stat.S_ISSOCK(m) else 'NOTSOCK', os.readlink('/proc/self/fd/0'))\n"
              "try:\n"
              "    s = socket.socket(fileno=os.dup(0))\n"
              "    s.send(b'\\x01' + json.dumps({'op': 'destroy'}).encode())\n"
              "    print('SENT')\n"
              "except OSError as e:\n"
              "    print('REFUSED', e.errno)\n")
    p = subprocess.run([SANDGLASS, "exec", sid, "--", "python3", "-c", script], stdin=None,
                       capture_output=True, timeout=60, env=env.env,
                       preexec_fn=lambda: os.close(0))
    out = p.stdout.decode()
    tap.ok(out.startswith("NOTSOCK /dev/null"), "fd 0 inside is /dev/null, not the CLI's socket",
           out + p.stderr.decode())
    tap.ok("SENT" not in out, "no control request could be sent from inside", out)
    tap.eq(env.exec(sid, "true").returncode, 0, "the sandbox still works")


def ctl_connect(sid_):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.path.join(env.state, "sb", sid_, "ctl.sock"))
    s.settimeout(60)
    return s


def ctl_req(s, obj, fds=()):
    body = b"\x01" + json.dumps(obj).encode()
    if fds:
        socket.send_fds(s, [body], list(fds))
    else:
        s.send(body)


def ctl_until_end(s):
    """Reads messages until RESULT (4), ERROR (5) or EXIT (8); returns (type, payload)."""
    while True:
        m = s.recv(1 << 20)
        if not m:
            return 0, b""
        if m[0] in (4, 5, 8):
            return m[0], m[1:]


@tap.case("an exec's connection takes only that exec's signals")
def _ctl_scope():
    s = ctl_connect(sid)
    # stdin a pipe kept open: the command waits in read (with none it would
    # read /dev/null's EOF and end, closing the connection, before the
    # second request is sent)
    r, w = os.pipe()
    try:
        ctl_req(s, {"op": "exec", "argv": ["/bin/sh", "-c", "read x; echo got-$x"]}, fds=[r])
        os.close(r)
        ctl_req(s, {"op": "destroy"})
        t, body = ctl_until_end(s)
        tap.eq(t, 5, "a second request on an exec's connection is an error")
        tap.ok(b"signals only" in body, "the error says why", body.decode(errors="replace"))
    finally:
        s.close()
        os.close(w)
    tap.ok(any(sb["id"] == sid for sb in env.ls()), "the sandbox was not destroyed")
    tap.eq(env.exec(sid, "true").returncode, 0, "the sandbox still works")


@tap.case("the supervisor refuses a stdin that is not a pipe")
def _ctl_stdin():
    for what, path, flags in (("a directory", "/", os.O_RDONLY | os.O_DIRECTORY),
                              ("a regular file", "/etc/hostname", os.O_RDONLY)):
        fd = os.open(path, flags)
        s = ctl_connect(sid)
        try:
            ctl_req(s, {"op": "exec", "argv": ["true"]}, fds=[fd])
            t, body = ctl_until_end(s)
            tap.eq(t, 5, f"an exec with {what} as stdin is refused")
            tap.ok(b"must be a pipe" in body, f"the error names the rule ({what})",
                   body.decode(errors="replace"))
        finally:
            s.close()
            os.close(fd)
    r, w = os.pipe()
    s = ctl_connect(sid)
    try:
        ctl_req(s, {"op": "exec", "argv": ["true"], "result": "code"}, fds=[w])
        t, body = ctl_until_end(s)
        tap.eq(t, 5, "an exec with a pipe's write end as stdin is refused")
    finally:
        s.close()
        os.close(r)
        os.close(w)


def ctl_call(obj, fds=()):
    """One request on its own connection: (type, decoded payload)."""
    s = ctl_connect(sid)
    try:
        ctl_req(s, obj, fds)
        t, body = ctl_until_end(s)
        return t, json.loads(body) if t in (4, 5) else body
    finally:
        s.close()


@tap.case("a request the supervisor cannot read is refused by name, before it acts")
def _ctl_strict():
    t, ans = ctl_call({"op": "ping"})
    tap.ok(t == 4 and ans.get("pong") is True and isinstance(ans.get("v"), int) and ans["v"] >= 1,
           "ping answers with the supervisor's protocol version", repr(ans))
    t, info = ctl_call({"op": "info"})
    tap.ok(t == 4 and info.get("v") == ans.get("v"), "info carries the same version", repr(info.get("v")))
    future = ans.get("v", 1) + 98
    for req in ({"op": "abort", "v": future, "reason": "from the future"}, {"op": "destroy", "v": future}):
        t, err = ctl_call(req)
        msg = err.get("error", "") if isinstance(err, dict) else ""
        tap.ok(t == 5 and f"protocol {future}" in msg and "use the sandglass that created the sandbox" in msg,
               f"{req['op']} of a future version is refused, saying what to do", repr(err))
    r, w = os.pipe()
    try:
        t, err = ctl_call({"op": "exec", "v": future, "argv": ["true"]}, fds=[r])
        tap.ok(t == 5 and "use the sandglass" in err.get("error", ""), "exec of a future version too",
               repr(err))
    finally:
        os.close(r)
    os.close(w)
    i = ctl_call({"op": "info"})[1]
    tap.eq(i.get("state"), "running", "none of them aborted or destroyed the sandbox")
    for req, field in (({"op": "expire", "after_s": "soon"}, "after_s"),
                       ({"op": "checkpoint", "label": 5}, "label"),
                       ({"op": "rollback", "dry_run": "yes"}, "dry_run"),
                       ({"op": "abort", "reason": ["x"]}, "reason"),
                       ({"op": "attach", "tty": {"rows": "24", "cols": 80}}, "tty"),
                       ({"op": "claim", "meta": "spare"}, "meta"),
                       ({"op": "info", "verbose": True}, "verbose"),
                       ({"op": "exec", "argv": ["true"], "timeout": "1h"}, "timeout")):
        t, err = ctl_call(req)
        msg = err.get("error", "") if isinstance(err, dict) else ""
        tap.ok(t == 5 and f'"{field}"' in msg, f"{req['op']}: a malformed field is named ({field})", repr(err))
    t, err = ctl_call({"op": "frobnicate"})
    tap.eq(err, {"error": "unknown request op 'frobnicate'"}, "an unknown op keeps its message")
    tap.eq(ctl_call({"op": "info"})[1].get("state"), "running", "the sandbox is still running")
    tap.eq(env.exec(sid, "true").returncode, 0, "and still works")


ATTACK = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
res = []
target = None
end = time.time() + 120
while time.time() < end and target is None:
    for p in os.listdir('/proc'):
        if p.isdigit() and int(p) != os.getpid():
            try:
                if b'victim-marker' in open(f'/proc/{p}/cmdline', 'rb').read():
                    target = int(p)
                    break
            except OSError:
                pass
    time.sleep(0.01)
if target is None:
    res.append('no-target')
else:
    for name, path, flags in (('proc-fd', f'/proc/{target}/fd/1', os.O_WRONLY),
                              ('proc-mem', f'/proc/{target}/mem', os.O_RDWR),
                              ('environ', f'/proc/{target}/environ', os.O_RDONLY)):
        try:
            fd = os.open(path, flags)
            res.append(name + ':OPENED')
            if name == 'proc-fd':
                os.write(fd, b'===== 42 passed (FORGED) =====\n')
        except OSError as e:
            res.append(name + ':' + str(e.errno))
    pidfd = libc.syscall(434, target, 0)
    fd = libc.syscall(438, pidfd, 1, 0) if pidfd >= 0 else -1
    if fd >= 0:
        os.write(fd, b'===== 42 passed (FORGED) =====\n')
        res.append('pidfd_getfd:OPENED')
    else:
        res.append('pidfd_getfd:' + str(ctypes.get_errno()))
open('/workspace/attack.tmp', 'w').write(' '.join(res) + '\n')
os.rename('/workspace/attack.tmp', '/workspace/attack-result')
"""


@tap.case("a process left by an earlier exec cannot reach a later exec")
def _reach():
    put(sid, "/workspace/attack.py", ATTACK)
    p = env.exec(sid, "/bin/sh", "-c", "python3 /workspace/attack.py >/dev/null 2>&1 &")
    tap.eq(p.returncode, 0, "the attacker is left running")
    victim = env.exec(sid, "/bin/sh", "-c",
                      "i=0; while [ ! -f /workspace/attack-result ] && [ $i -lt 1200 ]; do "
                      "sleep 0.1; i=$((i+1)); done; echo real output", "victim-marker")
    result = env.exec(sid, "cat", "/workspace/attack-result").stdout.decode().split()
    tap.ok(result and "no-target" not in result, "the attacker found the later exec", repr(result))
    tap.eq(victim.stdout, b"real output\n", "the later exec's output is its own")
    tap.ok("pidfd_getfd:1" in result, "pidfd_getfd is refused (EPERM)", repr(result))
    tap.ok(not any(r.endswith(":OPENED") for r in result),
           "neither /proc/PID/fd, /proc/PID/mem nor /proc/PID/environ of a later exec opens",
           repr(result))


env.cleanup()
tap.done()

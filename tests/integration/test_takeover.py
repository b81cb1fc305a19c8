#!/usr/bin/env python3
"""A supervisor's death never looks like a lost sandbox (issue 21).

After a SIGKILL of a sandbox's supervisor, every client — exec, abort,
resume, checkpoint, ls, gc, destroy, two clients at once — reaches a new
supervisor that took the sandbox over, and only a sandbox whose init died
too is called gone. The clients run at once after the SIGKILL, while the
killed supervisor may still be exiting (alive by its pid, its socket
already closed): the old code said "the sandbox is gone" there. An exec
in flight at the death ends with 122 and one line; so does a terminal,
whose recording is kept. A supervisor whose state directory is removed
ends its sandbox (no immortal sandbox).

TAP, stdlib only. No check depends on timing: every wait is for a
condition, bounded generously.
"""
from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import (SANDGLASS, Env, cgroup_dirs, cgroup_pids, cmdline, comm, pid_alive,  # noqa: E402
                    tap, wait_for)

WAIT = 60.0
env = Env()


def rec(sid: str) -> dict:
    with open(os.path.join(env.state, "sb", sid, "meta.json")) as f:
        return json.load(f)


def kill_sup(sid: str, wait: bool = False) -> int:
    """SIGKILLs the sandbox's supervisor; with wait, until it has exited."""
    pid = rec(sid)["supervisor_pid"]
    os.kill(pid, signal.SIGKILL)
    if wait:
        tap.ok(wait_for(lambda: not pid_alive(pid), WAIT), f"supervisor {pid} was SIGKILLed")
    return pid


def supervisors_of(sid: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and comm(int(d)) == "sg-supervisor" and f"supervisor {sid}" in cmdline(int(d)):
            out.append(int(d))
    return out


def took_over(p) -> bool:
    return b"a new one took over" in p.stderr


try:
    sid = env.create()
    tap.eq(env.sh(sid, "echo kept > work.txt").returncode, 0, "a learner's file is written")

    @tap.case("exec at once after each of 10 SIGKILLs")
    def _exec():
        bad = []
        for i in range(10):
            kill_sup(sid)
            p = env.sh(sid, f"cat work.txt; echo {i}")
            if p.returncode != 0 or p.stdout != f"kept\n{i}\n".encode() or not took_over(p):
                bad.append((i, p.returncode, p.stdout, p.stderr))
        tap.ok(not bad, "every exec reaches a new supervisor, never 'gone'", repr(bad))

    @tap.case("abort, resume, checkpoint, rollback list at once after a SIGKILL")
    def _requests():
        for args in (("abort", sid, "--reason", "r"), ("resume", sid), ("checkpoint", sid),
                     ("checkpoints", sid)):
            kill_sup(sid)
            p = env.run(*args, timeout=WAIT)
            tap.ok(p.returncode == 0 and took_over(p), f"{args[0]}: a new supervisor took over and answered",
                   (p.stdout + p.stderr).decode())

    @tap.case("ls after a SIGKILL")
    def _ls():
        old = kill_sup(sid, wait=True)
        p = env.run("ls", "--json", timeout=WAIT)
        row = [r for r in json.loads(p.stdout or b"[]") if r["id"] == sid]
        tap.ok(p.returncode == 0 and row and row[0]["state"] == "running" and took_over(p),
               "ls: running (taken over), never dead while init lives", (p.stdout + p.stderr).decode())
        tap.ok(row and row[0]["supervisor_pid"] not in (0, old) and pid_alive(row[0]["supervisor_pid"]),
               "ls shows the new supervisor", repr(row))

    @tap.case("gc after a SIGKILL")
    def _gc():
        kill_sup(sid, wait=True)
        p = env.run("gc", timeout=WAIT)
        out = (p.stdout + p.stderr).decode()
        tap.ok(p.returncode == 0 and "took it over" in out and os.path.exists(os.path.join(env.state, "sb", sid)),
               "gc does not destroy a sandbox whose init lives: a new supervisor takes it over", out)
        p = env.sh(sid, "cat work.txt")
        tap.ok(p.returncode == 0 and p.stdout == b"kept\n", "the learner's work is there", p.stderr.decode())

    @tap.case("two clients at once make one supervisor")
    def _two():
        kill_sup(sid)
        procs = [subprocess.Popen([SANDGLASS, "exec", sid, "--", "echo", str(i)], env=env.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
        outs = [p.communicate(timeout=WAIT) for p in procs]
        tap.ok(all(p.returncode == 0 for p in procs), "both execs succeed", repr(outs))
        tap.eq(sum(b"took over" in e for _o, e in outs), 1, "one of them took the sandbox over")
        tap.eq(len(supervisors_of(sid)), 1, "one supervisor serves the sandbox")

    @tap.case("an exec in flight at the supervisor's death")
    def _in_flight():
        proc = subprocess.Popen([SANDGLASS, "exec", sid, "--", "sleep", "300"], env=env.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        env.procs.append(proc)
        tap.ok(wait_for(lambda: any(comm(x) == "sleep" for x in cgroup_pids(sid)), WAIT), "the command runs")
        kill_sup(sid)
        _out, err = proc.communicate(timeout=WAIT)
        lines = err.decode().splitlines()
        tap.ok(proc.returncode == 122 and len(lines) == 1 and "died while the command ran" in lines[0]
               and "lives on" in lines[0], "it ends with 122 and one line: the supervisor died, the sandbox lives",
               f"{proc.returncode} {err!r}")
        p = env.sh(sid, "cat work.txt")
        tap.ok(p.returncode == 0 and took_over(p), "the next exec takes the sandbox over", p.stderr.decode())

    @tap.case("a terminal at its supervisor's death")
    def _tty():
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(SANDGLASS, [SANDGLASS, "exec", "-t", "-i", sid, "--", "/bin/sh"], env.env)
        got = b""

        def read_until(pred, timeout=WAIT):
            nonlocal got
            end = time.monotonic() + timeout
            while not pred(got) and time.monotonic() < end:
                r, _, _ = select.select([fd], [], [], 1.0)
                if r:
                    try:
                        chunk = os.read(fd, 4096)
                    except OSError:
                        return pred(got)
                    if not chunk:
                        return pred(got)
                    got += chunk
            return pred(got)

        os.write(fd, b"echo MARK_$((40+2))\n")
        tap.ok(read_until(lambda g: b"MARK_42" in g), "the terminal works", got.decode(errors="replace"))
        num = max(int(f.split(".")[0]) for f in os.listdir(os.path.join(env.state, "sb", sid, "casts")))
        cast = os.path.join(env.state, "sb", sid, "casts", f"{num}.cast")
        kill_sup(sid)
        read_until(lambda g: b"the terminal ended" in g and g.endswith(b"\n"))
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        text = got.decode(errors="replace")
        tap.ok(text.count("the terminal ended") == 1 and "run the command again" in text,
               "it ends with one clear line", text[-400:])
        tap.eq(os.waitstatus_to_exitcode(status), 122, "and exit status 122")
        tap.ok(os.path.exists(cast) and "MARK_42" in open(cast, errors="replace").read(),
               "its recording is kept", cast)
        p = env.sh(sid, "cat work.txt")
        tap.ok(p.returncode == 0 and took_over(p), "the sandbox lives on", p.stderr.decode())

    @tap.case("MCP after a SIGKILL")
    def _mcp():
        m = subprocess.Popen([SANDGLASS, "mcp", "--sandbox", sid], env=env.env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        env.procs.append(m)

        def call(i, method, params):
            m.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n")
            m.stdin.flush()
            while True:
                line = m.stdout.readline()
                if not line:
                    return {}
                msg = json.loads(line)
                if msg.get("id") == i:
                    return msg
        call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "sgtest", "version": "1"}})
        m.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        kill_sup(sid)
        r = call(2, "tools/call", {"name": "run_bash", "arguments": {"command": "cat work.txt"}})
        text = json.dumps(r.get("result", r))
        tap.ok("kept" in text and not r.get("result", {}).get("isError"),
               "an MCP tool call reaches a new supervisor", text)
        m.stdin.close()
        m.wait(timeout=WAIT)
        tap.ok(b"a new one took over" in m.stderr.read(), "and mcp says it took the sandbox over")

    @tap.case("destroy after a SIGKILL")
    def _destroy():
        init = rec(sid)["init_pid"]
        kill_sup(sid)
        p = env.run("destroy", sid, timeout=WAIT)
        tap.ok(p.returncode == 0 and took_over(p) and "cleaning up from here" not in p.stderr.decode(),
               "a new supervisor takes it over and destroys it itself", (p.stdout + p.stderr).decode())
        tap.ok(wait_for(lambda: not pid_alive(init), WAIT) and not os.path.exists(os.path.join(env.state, "sb", sid))
               and not any(os.path.exists(c) for c in cgroup_dirs(sid)), "nothing of it is left")

    @tap.case("a sandbox whose init died too is gone, and says why")
    def _gone():
        g = env.create()
        r = rec(g)
        os.kill(r["supervisor_pid"], signal.SIGKILL)
        os.kill(r["init_pid"], signal.SIGKILL)
        tap.ok(wait_for(lambda: not pid_alive(r["init_pid"]), WAIT), "its init is dead")
        p = env.exec(g, "true")
        tap.ok(p.returncode == 125 and b"is gone" in p.stderr and b"init" in p.stderr,
               "exec: the sandbox is gone, its init is dead", p.stderr.decode())
        p = env.run("gc", timeout=WAIT)
        tap.ok(p.returncode == 0 and not os.path.exists(os.path.join(env.state, "sb", g)),
               "gc removes it", (p.stdout + p.stderr).decode())

    @tap.case("no immortal sandbox: its state directory removed")
    def _orphan():
        other = Env()
        try:
            o = other.create()
            r = json.load(open(os.path.join(other.state, "sb", o, "meta.json")))
            other.sh(o, "(sleep 1000 &); exit 0")
            tap.ok(wait_for(lambda: any(comm(x) == "sleep" for x in cgroup_pids(o)), WAIT), "a background job runs")
            shutil.rmtree(other.state)
            tap.ok(wait_for(lambda: not pid_alive(r["supervisor_pid"]), WAIT), "its supervisor notices and exits")
            tap.ok(wait_for(lambda: not pid_alive(r["init_pid"]) and not cgroup_pids(o), WAIT),
                   "every process of the sandbox is gone")
            tap.ok(wait_for(lambda: not any(os.path.exists(c) for c in cgroup_dirs(o)), WAIT),
                   "its cgroups are removed", repr([c for c in cgroup_dirs(o) if os.path.exists(c)]))
            tap.ok(not any(r["workspace"] in ln for ln in open("/proc/mounts")), "its workspace is unmounted")
            base = 0x70000000  # SG_UID_BASE (state.h): uid = base + slot
            slot = os.path.join("/run/sandglass-uids", str(r["uid"] - base)) if r["uid"] >= base else ""
            tap.ok(slot and not os.path.exists(slot), "its uid slot (host-wide, not in the state directory) is freed",
                   f"uid {r['uid']}: {slot}")
        finally:
            other.cleanup()
finally:
    env.cleanup()
tap.done()

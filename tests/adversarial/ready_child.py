#!/usr/bin/env python3
"""Attacks on the ready child (the process init prepares ahead for the next
exec, waiting as sandglass-exec in the sandbox user's name) and on init's
visible state.

- SIGSTOP of the ready child used to make every later exec wait out the
  hand-off's timeout and fall back to a fresh clone: the supervisor now
  continues it at the hand-off, so the exec still goes to it.
- /proc/1/cmdline showed the host paths init was started with.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, exec_stub_built, tap, wait_for  # noqa: E402

env = Env()
try:
    sid = env.create()
    ws = [sb for sb in env.ls() if sb["id"] == sid][0]["workspace"]

    @tap.case("init shows no host path")
    def _cmdline():
        out = env.exec(sid, "cat", "/proc/1/cmdline").stdout
        tap.ok(out.split(b"\0")[0].endswith(b"sandglass-init"), "pid 1 is sandglass-init", repr(out))
        tap.ok(ws.encode() not in out and env.state.encode() not in out,
               "/proc/1/cmdline names neither the workspace nor the state directory", repr(out))
        if os.path.exists("/proc/config.gz"):
            got = env.exec(sid, "/bin/sh", "-c", "wc -c < /proc/config.gz").stdout.strip()
            tap.eq(got, b"0", "/proc/config.gz (the host kernel's configuration) reads empty")
        ps = env.exec(sid, "ps", "-eo", "args").stdout
        tap.ok(ps and ws.encode() not in ps, "ps shows no host path", ps.decode(errors="replace"))

    @tap.case("a stopped ready child still takes the next exec")
    def _stop():
        # The ready child of the next exec, seen from inside: the process
        # named sandglass-ready (sandglass-exec names itself so).
        def ready_pid():
            out = env.exec(sid, "/bin/sh", "-c",
                           "for p in /proc/[0-9]*; do "
                           "[ \"$(cat $p/comm 2>/dev/null)\" = sandglass-ready ] && echo ${p#/proc/}; "
                           "done; true").stdout.split()
            return [int(x) for x in out]
        if not exec_stub_built():
            # The sanitizer build has no sandglass-exec (it is built with
            # musl only; meson says which builds make it): the ready child
            # waits as a copy of init there.
            tap.skip("a stopped ready child", "no sandglass-exec in this build (ASan builds have none)")
            return
        # The build makes it: a ready child that is not it fails.
        if not tap.ok(wait_for(lambda: len(ready_pid()) == 1, 60),
                      "the ready child waits as sandglass-exec (named sandglass-ready)", repr(ready_pid())):
            return
        # Stop it from inside, as the learner can, and look at the state.
        # The ready child for the exec after this one is made while this
        # one starts: wait for it to appear (it is this exec's own process
        # that was the ready child a moment ago).
        p = env.exec(sid, "/bin/sh", "-c",
                     "i=0; while [ $i -lt 1200 ]; do for p in /proc/[0-9]*; do "
                     "[ \"$(cat $p/comm 2>/dev/null)\" = sandglass-ready ] && kill -STOP ${p#/proc/} && "
                     "echo ${p#/proc/} $(cut -d' ' -f3 $p/stat) && exit 0; done; sleep 0.05; i=$((i+1)); "
                     "done; exit 1")
        words = p.stdout.split()
        tap.ok(len(words) == 2, "the learner stopped the ready child", repr(p.stdout))
        if len(words) != 2:
            return
        stopped = int(words[0])
        # The exec after that goes to it all the same: its shell's pid is
        # the ready child's (a fallback clone would have another pid).
        got = env.exec(sid, "/bin/sh", "-c", "echo $$").stdout.strip()
        tap.eq(got, str(stopped).encode(), "the next exec ran in the stopped ready child")
        tap.eq(env.exec(sid, "echo", "ok").stdout, b"ok\n", "execs go on")
finally:
    env.cleanup()
tap.done()

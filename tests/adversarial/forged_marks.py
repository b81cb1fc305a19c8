#!/usr/bin/env python3
"""Attack (issue 22): a program in a terminal writes the shell
integration's prompt mark, ESC ] 133 ; A BEL, in a tight loop. Each mark
used to make the supervisor take a checkpoint decision at once (a
workspace fingerprint, a label queued, every 256 labels a send to the
checkpoint worker whose answers were never read): within seconds the
supervisor and the worker blocked sending to each other, the exec's time
limit did not fire, and the store gathered an alias per mark. Now a mark
is a hint: it leads to a checkpoint decision only when a program ran (a
held execve) or input was typed since the last one, at most one per
read of the terminal; the worker's answers are read before the next
request is sent. A program that runs before each mark makes a decision
once a second at most, and an unchanged workspace then records nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from workspace_common import SLOW, events, new_env, tap
from workspace_common import run_on_terminal as terminal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sgtest import cgroup_pids  # noqa: E402

MARKS = 1_000_000  # far more than the 5 s limit lets through: the limit must end it
# Builtins only: no program runs between the marks (a `sleep` at the end
# keeps the exec alive past its limit if the loop ends first).
LOOP = f"i=0; while [ $i -lt {MARKS} ]; do printf '\\033]133;A\\007'; i=$((i+1)); done; sleep 600"
# A program per mark, and the workspace changed before each: a program ran
# (a held execve) at every prompt, but nothing was typed.
LOOP_RAN = (f"i=0; while [ $i -lt {MARKS} ]; do echo $i > /workspace/f; /usr/bin/printf '\\033]133;A\\007'; "
            "i=$((i+1)); done; sleep 600")

env = new_env()


def run_on_terminal(args: list[str], limit: float,
                    flowing: threading.Event | None = None) -> tuple[int | None, bytes]:
    """workspace_common's, flowing set once 64 KiB came."""
    return terminal(env, args, limit,
                    lambda total, tail: flowing.set() if flowing and total >= 1 << 16 else None)


try:
    for kind, loop in (("captured", LOOP), ("plain", LOOP), ("captured, a program per mark", LOOP_RAN)):
        sid = env.create() if kind == "plain" else env.create_captured()

        @tap.case(f"{kind}: forged prompt marks on a terminal")
        def _forged():
            before = len(json.loads(env.run("checkpoints", sid, "--json", check=True).stdout))
            rc, tail = run_on_terminal(["exec", sid, "-t", "--timeout", "5", "--", "sh", "-c", loop], 60)
            tap.ok(rc == 137, "the exec's 5 s time limit ends it (within 60 s)", f"rc {rc}: {tail[-300:]!r}")
            tap.ok(b"time limit of 5 s" in tail, "one line says so", repr(tail[-300:]))
            try:
                r = env.run("abort", sid, "--json", timeout=20)
            except subprocess.TimeoutExpired:
                r = None
            tap.ok(r is not None and r.returncode == 0, "abort answers within 20 s",
                   r.stderr.decode(errors="replace") if r else "no answer")
            rec = json.loads(r.stdout or b"{}") if r else {}
            tap.ok(rec.get("proof", {}).get("cgroup_holds_only_init") is True, "its proof holds", repr(rec)[:600])
            tap.ok(len(cgroup_pids(sid)) <= 1, "the cgroup holds init alone", repr(cgroup_pids(sid)))
            tap.eq(env.run("resume", sid, timeout=SLOW).returncode, 0, "resume")
            cps = json.loads(env.run("checkpoints", sid, "--json", timeout=SLOW, check=True).stdout)
            print(f"# {kind}: {len(cps) - before} new checkpoint(s) listed", flush=True)
            tap.ok(len(cps) - before < 50, "a handful of checkpoints listed, not one per mark",
                   f"{len(cps) - before} new")
            if kind != "plain":
                n = len(events(env, sid, "checkpoint"))
                tap.ok(n < 50, "a handful of checkpoint events, not one per mark", f"{n} events")
            tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n", "the sandbox works")

    # The kill switch while the marks flow, with 4,000 files in the
    # workspace (a fingerprint per mark kept the supervisor busy: abort
    # had no answer after 180 s, destroy none after 90 s).
    sid = env.create_captured()
    env.run("exec", sid, "--", "/bin/sh", "-c", "mkdir -p /workspace/d && cd /workspace/d && i=0; "
            "while [ $i -lt 4000 ]; do : > f$i; i=$((i+1)); done", timeout=SLOW, check=True)

    @tap.case("4,000 files: abort and destroy while the marks flow")
    def _kill_switch():
        flowing = threading.Event()
        res: list = []
        th = threading.Thread(target=lambda: res.append(run_on_terminal(
            ["exec", sid, "-t", "--", "sh", "-c", LOOP], 120, flowing)))
        th.start()
        tap.ok(flowing.wait(60), "the marks flow")
        try:
            r = env.run("abort", sid, "--json", timeout=20)
        except subprocess.TimeoutExpired:
            r = None
        tap.ok(r is not None and r.returncode == 0, "abort answers within 20 s while they flow",
               r.stderr.decode(errors="replace") if r else "no answer")
        rec = json.loads(r.stdout or b"{}") if r else {}
        tap.ok(rec.get("proof", {}).get("cgroup_holds_only_init") is True, "its proof holds", repr(rec)[:600])
        th.join(150)
        tap.ok(bool(res) and res[0][0] is not None, "the exec ends with the abort", repr(res)[:300])
        tap.eq(env.run("resume", sid, timeout=SLOW).returncode, 0, "resume")
        flowing2 = threading.Event()
        th2 = threading.Thread(target=lambda: run_on_terminal(["exec", sid, "-t", "--", "sh", "-c", LOOP], 120,
                                                              flowing2))
        th2.start()
        tap.ok(flowing2.wait(60), "the marks flow again")
        try:
            r = env.run("destroy", sid, timeout=20)
        except subprocess.TimeoutExpired:
            r = None
        tap.ok(r is not None and r.returncode == 0, "destroy answers within 20 s while they flow",
               r.stderr.decode(errors="replace") if r else "no answer")
        th2.join(150)
finally:
    env.cleanup()
tap.done()

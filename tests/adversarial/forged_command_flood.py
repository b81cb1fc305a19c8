#!/usr/bin/env python3
"""Attack (issue 22): a program in a terminal writes the shell
integration's command marks, ESC ] 133 ; C and ESC ] 133 ; D, 100,000
times, with a file written between them. Each forged command used to
restart the per-exec caps (1,000 file diffs, 1,000 programs) and make its
own stdin, command, activity, stdout and run_result events, each made
durable (an fdatasync) and sent: 600,033 stored events and +130 MB of
SQLite in 38 s. Now the session's per-minute budgets (capture/budget.h:
events, bytes, checkpoints) bound what it stores, one `limit` event
{what: budget} says so, another sandbox's session at the same time is
recorded whole, and the abort still works."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

from workspace_common import SLOW, new_env, tap
from workspace_common import run_on_terminal as terminal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sgtest import cgroup_pids, wait_for  # noqa: E402

COMMANDS = 100_000
EVENTS_PER_MIN = 20000  # the flooded session's budget (the default, 100000, is far above a real session's)
# Builtins only between the marks: a write of the workspace, then the
# forged command's end; a `sleep` keeps the exec alive for the abort.
FLOOD = (f"i=0; while [ $i -lt {COMMANDS} ]; do printf '\\033]133;C;cmd=forged %d\\007' $i; "
         "echo $i > /workspace/f$((i % 7)); printf '\\033]133;D;0\\007'; i=$((i+1)); done; "
         "echo FLOOD-DONE; sleep 600")
OTHER = 20  # execs of the other sandbox, while the flood runs

env = new_env()


def budget_limits(sid: str) -> list[dict]:
    """The stored `limit` {what: budget} events of a sandbox (a busy
    store is asked again)."""
    try:
        got = env._query("SELECT payload FROM sg_events WHERE sandbox=? AND kind='limit'", (sid,))
    except sqlite3.OperationalError:
        return []
    return [p for p in (json.loads(x) for (x,) in got) if p.get("what") == "budget"]


def run_on_terminal(args: list[str], limit: float, done: threading.Event) -> tuple[int | None, bytes]:
    """workspace_common's, done set once the flood's last line came."""
    return terminal(env, args, limit, lambda total, tail: done.set() if b"FLOOD-DONE" in tail else None)


try:
    t0 = time.monotonic()
    def create_with(opt: str, value: str, task: str = "T") -> str:
        """A captured sandbox with a budget option; on a build without
        budgets, one without it (a failed check), so that the flood is
        measured all the same."""
        try:
            got = env.create_captured(opt, value, task=task)
            tap.ok(True, f"create takes {opt}")
            return got
        except RuntimeError as e:
            tap.ok(False, f"create takes {opt}", str(e)[-300:])
            return env.create_captured(task=task)

    sid = create_with("--max-events-per-min", str(EVENTS_PER_MIN))
    rec = json.load(open(env.sbdir(sid, "meta.json")))
    tap.eq(rec.get("caps", {}).get("max_events_per_min"), EVENTS_PER_MIN, "the record keeps the budget")
    # The other sandbox is a spare of the pool: the claim carries the budgets.
    p = env.run("pool", "1", timeout=SLOW)
    spares = set(os.listdir(os.path.join(env.state, "pool"))) if p.returncode == 0 else set()
    other = create_with("--max-checkpoints-per-min", "1234", task="other")
    tap.ok(other in spares, "the other sandbox is a claimed spare", f"{other} not in {spares}: {p.stderr!r}")
    orec = json.load(open(env.sbdir(other, "meta.json")))
    tap.eq((orec["caps"].get("max_checkpoints_per_min"), orec["caps"].get("max_events_per_min")), (1234, 100000),
           "the claim gives it the creator's budgets (the rest default)")
    env.run("pool", "0", timeout=SLOW)

    @tap.case("100,000 forged commands on a terminal, another session beside it")
    def _flood():
        done = threading.Event()
        res: list = []
        th = threading.Thread(target=lambda: res.append(run_on_terminal(["exec", sid, "-t", "--", "sh", "-c", FLOOD],
                                                                        600, done)))
        th.start()
        # The other sandbox works while the flood runs: every exec recorded.
        bad = []
        for i in range(OTHER):
            r = env.run("exec", other, "--", "/bin/sh", "-c", f"echo {i} > /workspace/g{i}; echo out{i}",
                        timeout=SLOW)
            if r.returncode != 0 or r.stdout != f"out{i}\n".encode():
                bad.append((i, r.returncode, r.stdout[-200:], r.stderr[-200:]))
        tap.ok(not bad, f"the other sandbox's {OTHER} execs run while the flood goes on", repr(bad)[:600])
        tap.ok(done.wait(SLOW * 2), "the flood ends")
        reached = wait_for(lambda: budget_limits(sid), 60, 0.5)
        tap.ok(reached, "a limit event {what: budget} is stored")
        try:
            r = env.run("abort", sid, "--json", timeout=20)
        except subprocess.TimeoutExpired:
            r = None
        tap.ok(r is not None and r.returncode == 0, "abort answers within 20 s",
               r.stderr.decode(errors="replace") if r else "no answer")
        rec = json.loads(r.stdout or b"{}") if r else {}
        tap.ok(rec.get("proof", {}).get("cgroup_holds_only_init") is True, "its proof holds", repr(rec)[:600])
        tap.ok(len(cgroup_pids(sid)) <= 1, "the cgroup holds init alone", repr(cgroup_pids(sid)))
        th.join(120)
        tap.ok(bool(res) and res[0][0] is not None, "the exec ends with the abort", repr(res)[:300])

        # What was spooled before the abort reaches the store.
        rows = env.wait_rows(sid, lambda rs: any(x["kind"] == "session_abort" for x in rs), SLOW)
        elapsed = time.monotonic() - t0
        windows = int(elapsed // 60) + 2  # windows the session can have opened, at most
        # Past the budget only the kinds never dropped are stored: the
        # sandbox's life, the exec op's own events, checkpoints, limits.
        bound = EVENTS_PER_MIN * windows + 200
        print(f"# {len(rows)} events stored for the flooded session in {elapsed:.0f} s "
              f"({windows} windows at most, bound {bound})", flush=True)
        tap.ok(len(rows) <= bound, "the flooded session's stored events are bounded by its budget",
               f"{len(rows)} > {bound}")
        lim = [x["payload"] for x in rows if x["kind"] == "limit" and x["payload"].get("what") == "budget"]
        first = next((p for p in lim if p.get("state") == "reached"), {})
        tap.ok(first.get("budget") in ("events", "bytes") and isinstance(first.get("count"), int)
               and first.get("limit") and first.get("window_s") == 60,
               "the limit event names the budget, its count and window", repr(lim)[:600])
        tap.ok(len(lim) <= 3 * windows, "a few limit events, not one per dropped event", f"{len(lim)}")
        tap.ok(any(x["kind"] == "session_abort" for x in rows), "the abort is recorded")
        seqs = [x["seq"] for x in rows]
        tap.eq(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "no gap in the stored seqs")

        # The other session: every exec and its file change, in its store.
        orows = env.wait_rows(other, lambda rs: sum(x["kind"] == "run_result" for x in rs) >= OTHER, SLOW)
        results = [x for x in orows if x["kind"] == "run_result"]
        diffs = {x["payload"].get("path") for x in orows if x["kind"] == "file_diff"}
        tap.eq(len(results), OTHER, "the other session's results are all stored")
        tap.ok(all(any((p or "").endswith(f"g{i}") for p in diffs) for i in range(OTHER)),
               "the other session's file changes are all stored", repr(sorted(p or "" for p in diffs))[:400])
        tap.ok(not any(x["kind"] == "limit" and x["payload"].get("what") == "budget" for x in orows),
               "the other session met no budget")
        sb = [x["payload"] for x in orows if x["kind"] == "sandbox"]
        tap.ok(bool(sb) and sb[-1].get("budgets_per_min", {}).get("checkpoints") == 1234,
               "its sandbox event names its budgets", repr(sb)[:400])
        tap.eq(env.run("resume", sid, timeout=SLOW).returncode, 0, "resume")
        tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n", "the sandbox works")

    @tap.case("the checkpoint budget: automatic checkpoints stop, one limit event says so")
    def _checkpoints():
        t1 = time.monotonic()
        sb = create_with("--max-checkpoints-per-min", "2")
        for i in range(6):
            env.run("exec", sb, "--", "/bin/sh", "-c", f"echo {i} > /workspace/c{i}", timeout=SLOW, check=True)
        rows = env.wait_rows(sb, lambda rs: sum(x["kind"] == "run_result" for x in rs) >= 6, SLOW)
        windows = int((time.monotonic() - t1) // 60) + 2
        before = [x["payload"] for x in rows if x["kind"] == "checkpoint"
                  and x["payload"].get("label", "").startswith("before exec")]
        tap.ok(1 <= len(before) <= 2 * windows, "at most the budget's checkpoints before execs",
               f"{len(before)} in at most {windows} windows")
        lim = [x["payload"] for x in rows if x["kind"] == "limit" and x["payload"].get("budget") == "checkpoints"]
        tap.ok(len(lim) >= 1 and lim[0].get("limit") == 2 and lim[0].get("state") == "reached",
               "a limit event {budget: checkpoints} says so", repr(lim)[:400])
        tap.eq(sum(x["kind"] == "run_result" for x in rows), 6, "every exec still runs and is recorded")
        tap.eq(env.run("checkpoint", sb, timeout=SLOW).returncode, 0, "a checkpoint on request is still taken")
finally:
    env.cleanup()
tap.done()

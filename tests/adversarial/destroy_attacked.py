#!/usr/bin/env python3
"""A destroy while the learner keeps the supervisor's loop busy (issue 22:
"no kill waits on an answer"): the kill switch's thread kills at once, the
loop's turn gives way to the request it took (the watcher stops between
pieces of its work: ks_kill_waiting), and the destroy is carried out on the
loop as ever: it answers with its proof, nothing of the sandbox is left
(state, cgroups, supervisor, workspace mount), and its record is written
exactly once. Run under each attack that holds the loop: an inotify
overflow storm (130,000 files) and big files re-hashed."""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attack_common as ac  # noqa: E402
from attack_common import tap  # noqa: E402
from sgtest import cgroup_dirs, pid_alive, wait_for  # noqa: E402

# How long the attack runs before the destroy: the supervisor deep in it.
WARM_S = 2.0


def mounted(path: str) -> bool:
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(ln.split()[4] == path for ln in f)


def destroyed_records(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["kind"] == "sandbox" and r["payload"].get("state") == "destroyed"]


def case(env, name: str) -> None:
    sid = env.create_captured("--timeout", "600")
    m = ac.meta(env, sid)
    sup, init = m["supervisor_pid"], m["init_pid"]
    ws = env.workspace(sid)
    ex = ac.start_attack(env, sid, name)
    try:
        time.sleep(WARM_S)
        tap.ok(ex.poll() is None and ac.user_pids(sid, init), f"{name}: the attack runs")
        t0 = time.monotonic()
        rd = env.destroy(sid, "--json")
        took = time.monotonic() - t0
        print(f"# {name}: destroy answered in {took * 1e3:.0f} ms", flush=True)
        proof = {}
        try:
            proof = json.loads(rd.stdout)
        except ValueError:
            pass
        tap.ok(rd.returncode == 0 and proof.get("destroyed") == sid, f"{name}: destroy answers while attacked",
               rd.stderr.decode(errors="replace")[-400:])
        tap.ok(proof.get("cgroup_empty") is True and proof.get("cgroup_removed") is True
               and proof.get("processes_left", 0) == 0, f"{name}: its proof: the cgroup emptied and removed",
               json.dumps(proof))
        ex.wait(60)
        tap.ok(ex.returncode not in (None, 0), f"{name}: the attack's exec ended killed", f"exit {ex.returncode}")
        ex = None
        tap.ok(not os.path.exists(env.sbdir(sid)), f"{name}: the sandbox's state is gone")
        tap.ok(not any(os.path.isdir(d) for d in cgroup_dirs(sid) + ac.supervisor_cgroup_dirs(sid)),
               f"{name}: its cgroups are gone (the sandbox's and the supervisor's)")
        tap.ok(wait_for(lambda: not pid_alive(sup), 30), f"{name}: its supervisor exited")
        # released after the answer, by the disk's reclaimer (disk.h)
        tap.ok(wait_for(lambda: not mounted(ws), 120), f"{name}: its workspace is unmounted", ws)
        ls = env.run("ls", "--json")
        tap.ok(ls.returncode == 0 and sid.encode() not in ls.stdout, f"{name}: ls no longer lists it")
        rows = env.wait_rows(sid, lambda r: bool(destroyed_records(r)))
        recs = destroyed_records(rows)
        tap.eq(len(recs), 1, f"{name}: the destroy is recorded exactly once")
        tap.ok(recs and recs[0]["payload"].get("proof", {}).get("cgroup_empty") is True,
               f"{name}: its record carries the proof", json.dumps(recs[:1])[:400])
    finally:
        if ex is not None:
            ex.kill()
            ex.wait()


def main() -> None:
    from test_capture import CapEnv  # noqa: E402
    env = CapEnv()
    try:
        for name in ("overflow", "rehash"):
            case(env, name)
    finally:
        env.cleanup()
    tap.done()


if __name__ == "__main__":
    main()

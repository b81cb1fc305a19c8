#!/usr/bin/env python3
"""The host-side work done for a sandbox is bounded and charged to it
(checkpoint.h: limits; sandbox/cgroup.h: sg_cgroup_join_fds; watch.h): the
checkpoint worker runs in the sandbox's supervisor's cgroup (its leaf
<id>:supervisor/ckpt, never under the learner's limits) on every layout
and dies with the kill switch, the store's cap stops storing content with an event
saying so, a failed checkpoint is an event, and rollback to an earlier good
checkpoint still works after one. The attacks themselves are in
tests/adversarial/workspace_*.py."""
from __future__ import annotations

import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "adversarial"))
from workspace_common import (SLOW, ckpt_worker, events, new_env, pid_alive, sh,  # noqa: E402
                              store_bytes, supervisor_pid, tap, wait_for)


def cgroup_lines(pid: int) -> dict[str, str]:
    """controller list -> path, from /proc/PID/cgroup ("" for v2)."""
    out = {}
    for line in open(f"/proc/{pid}/cgroup"):
        _id, ctrls, path = line.rstrip("\n").split(":", 2)
        out[ctrls] = path
    return out


def layout_case(layout: str) -> None:
    """The worker joins its sandbox's supervisor's cgroup: on each
    hierarchy the sandbox uses, its path is the supervisor's ckpt leaf
    (its memory and pids charged to that sandbox's supervisor account,
    never to the learner's limits)."""
    env = new_env(SANDGLASS_CGROUP_LAYOUT=layout) if layout else new_env()
    try:
        sid = env.create_captured()
        sh(env, sid, "echo x > /workspace/x")
        sup = supervisor_pid(env, sid)
        w = ckpt_worker(sup)
        tap.ok(w > 0, f"[{layout or 'auto'}] a checkpoint worker runs")
        if not w:
            return
        mine = cgroup_lines(w)
        init = cgroup_lines(int(json.load(open(env.sbdir(sid, "meta.json")))["init_pid"]))
        base = f"/sandglass/{sid}"
        leaf = f"/sandglass/{sid}:supervisor/ckpt"
        # Wherever the sandbox's init is in a sandglass cgroup, the worker
        # is in the supervisor's ckpt leaf of that hierarchy.
        checked = [k for k, v in init.items() if v.startswith(base)]
        tap.ok(len(checked) > 0, f"[{layout or 'auto'}] the sandbox has cgroups", repr(init))
        bad = {k: mine.get(k) for k in checked if mine.get(k) != leaf}
        tap.ok(not bad, f"[{layout or 'auto'}] the worker is in the supervisor's ckpt leaf on every hierarchy",
               f"worker {mine}\ninit {init}")
        for k in ("memory", "pids"):
            ctl = [c for c in checked if k in c.split(",")]
            if ctl:
                tap.ok(mine[ctl[0]] == leaf, f"[{layout or 'auto'}] its {k} is charged to the supervisor's account",
                       repr(mine))
        r = env.run("abort", sid, "--json", timeout=SLOW)
        rec = json.loads(r.stdout or b"{}")
        tap.ok(rec.get("proof", {}).get("cgroup_holds_only_init") is True,
               f"[{layout or 'auto'}] abort's proof holds with the worker in the cgroup", repr(rec)[:600])
        tap.ok(wait_for(lambda: not pid_alive(w), 60), f"[{layout or 'auto'}] abort killed the worker")
        r = env.run("rollback", sid, "--yes", timeout=SLOW)
        tap.ok(r.returncode == 0, f"[{layout or 'auto'}] a rollback after the abort works (a new worker)",
               r.stderr.decode(errors="replace"))
    finally:
        env.cleanup()


def v2_controllers() -> set[str]:
    for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        try:
            return set(open(os.path.join(base, "cgroup.controllers")).read().split())
        except OSError:
            pass
    return set()


def v1_mounted() -> bool:
    return os.path.isdir("/sys/fs/cgroup/memory") or os.path.isdir("/sys/fs/cgroup/pids")


# The host's own layout always ("auto"), then each forced layout the host
# has: v1 where v1 hierarchies are mounted (a split or a v1 host), v2 where
# the v2 hierarchy holds the limits' controllers. A layout the host lacks
# is not a case here (nothing of it to check; the comment line says which
# ran), except v2 without its controllers, whose skip is the excused one of
# tests/allowed-skips.txt (a split host: limits on v1).
layouts = [""] + (["v1"] if v1_mounted() else [])
print(f"# cgroup layouts checked on this host: auto{', v1' if v1_mounted() else ''}"
      f"{', v2' if {'memory', 'pids'} <= v2_controllers() else ''}", flush=True)
for lay in layouts:
    tap.case(f"worker cgroup, layout {lay or 'auto'}")(lambda lay=lay: layout_case(lay))
if {"memory", "pids"} <= v2_controllers():
    tap.case("worker cgroup, layout v2")(lambda: layout_case("v2"))
else:
    tap.skip("worker cgroup, layout v2", "no memory/pids controller on this host's v2 hierarchy")


@tap.case("the store's cap")
def _store_cap():
    env = new_env(SANDGLASS_CKPT_STORE_MAX=str(1 << 20))
    try:
        sid = env.create_captured()
        sh(env, sid, "head -c 700000 /dev/urandom > /workspace/one")
        sh(env, sid, "head -c 700000 /dev/urandom > /workspace/two")
        sh(env, sid, "echo small > /workspace/three")
        cks = events(env, sid, "checkpoint")
        full = [c for c in cks if c.get("not_stored", {}).get("store_full")]
        tap.ok(len(full) >= 1 and all("error" not in c for c in cks),
               "past the store's cap a checkpoint still succeeds and says the store is full", repr(cks)[:900])
        tap.ok(store_bytes(env, sid) < 4 << 20, "the store stays near its cap", f"{store_bytes(env, sid)} bytes")
        first = [c for c in cks if c.get("label") == "create"][0]
        r = env.run("rollback", sid, "--to", first["id"], "--yes", timeout=SLOW)
        tap.ok(r.returncode == 0, "a rollback to a checkpoint from before works", r.stderr.decode(errors="replace"))
        ws = env.workspace(sid)
        left = sorted(os.listdir(ws))
        # "two" was recorded by size only: rollback leaves what is there.
        tap.ok("one" not in left and "three" not in left, "what was stored is rolled back", repr(left))
    finally:
        env.cleanup()


@tap.case("a failed checkpoint is an event")
def _failed():
    env = new_env()
    try:
        sid = env.create_captured()
        sh(env, sid, "echo a > /workspace/a")
        good = [c for c in events(env, sid, "checkpoint") if c.get("id")][-1]
        ref = os.path.join(env.sbdir(sid, "checkpoints.git"), "refs", "heads", "checkpoints")
        saved = ref + ".h4"
        shutil.copy(ref, saved)
        with open(ref, "w") as f:
            f.write("not an object id\n")
        sh(env, sid, "echo b > /workspace/b")
        errs = [c for c in events(env, sid, "checkpoint") if "error" in c]
        tap.ok(len(errs) == 1 and errs[0].get("label", "").startswith("before exec 2") and not errs[0].get("id"),
               "a checkpoint that fails is a checkpoint event with the error", repr(errs))
        os.replace(saved, ref)
        r = env.run("rollback", sid, "--to", good["id"], "--yes", timeout=SLOW)
        tap.ok(r.returncode == 0, "rollback to the earlier good checkpoint works",
               r.stderr.decode(errors="replace"))
        tap.eq(sorted(os.listdir(env.workspace(sid))), [], "the workspace is as it was then")
    finally:
        env.cleanup()


tap.done()

"""The supervisor's helpers: the checkpoint worker (sandglass-ckpt, the
only process that maps libgit2) and the per-host uplink daemon
(sandglass-uplink, the only process of a captured sandbox's that maps
libwebsockets and OpenSSL).

Checks, on real sandboxes: the worker serves checkpoints and rollbacks,
stops when idle (and the supervisor then maps neither libgit2 nor
libwebsockets nor OpenSSL), comes back for the next exec, is replaced when
killed, dies with a SIGKILLed supervisor and is gone after destroy; a missing
worker is a clear error that leaves nothing behind. TAP output.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import (Env, await_true, cgroup_dirs, children, ckpt_worker, comm, pid_alive, tap,  # noqa: E402
                    uplink_daemon_pid, wait_for)
from test_capture import CapEnv  # noqa: E402

# Long enough that "right after an exec" finds the worker on a loaded
# machine, short enough for the idle exits the test waits for.
IDLE_MS = "5000"
# SG_CKPT_RACY_NS (src/checkpoint/checkpoint.h): a change this recent makes the
# workspace's fingerprint untrusted.
RACY_NS = 50 * 1000 * 1000
HEAVY = ("libgit2", "libwebsockets", "libcrypto", "libssl")


def mapped(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1].rsplit("/", 1)[-1] for line in f if "/" in line}


def heavy_maps(pid: int) -> list[str]:
    return sorted(m for m in mapped(pid) if m.startswith(HEAVY))


env = Env()
env.env["SANDGLASS_CKPT_IDLE_MS"] = IDLE_MS


def sup_pid(sid: str) -> int:
    return next(s for s in env.ls() if s["id"] == sid)["supervisor_pid"]


@tap.case("the worker serves, idles out, and comes back")
def _lifecycle():
    sid = env.create()
    sp = sup_pid(sid)
    p = env.sh(sid, "echo one > /workspace/one")
    tap.eq(p.returncode, 0, "an exec runs (its checkpoint taken by the worker)")
    w = ckpt_worker(sp)
    tap.ok(w > 0, "right after it the supervisor has a sandglass-ckpt child",
           f"children: {[(c, comm(c)) for c in children(sp)]}")
    tap.ok(wait_for(lambda: ckpt_worker(sp) == 0, 60), f"the worker exits after {IDLE_MS} ms idle")
    tap.ok(w > 0 and wait_for(lambda: not os.path.exists(f"/proc/{w}"), 60),
           "and is reaped (not left a zombie)")
    tap.eq(heavy_maps(sp), [], "an idle uncaptured supervisor maps no libgit2, libwebsockets or OpenSSL")
    p = env.sh(sid, "echo two > /workspace/two")
    tap.eq(p.returncode, 0, "the next exec runs (a fresh worker)")
    cps = env.run("checkpoints", sid, "--json", check=True).stdout.decode()
    tap.ok("before exec 2" in cps, "its checkpoint was taken", cps[-400:])
    tap.ok(wait_for(lambda: ckpt_worker(sp) == 0, 60), "the worker idles out again")
    p = env.run("rollback", sid, "--yes")
    tap.eq(p.returncode, 0, "a rollback after the idle exit works")
    ws = next(s for s in env.ls() if s["id"] == sid)["workspace"]
    tap.ok(os.path.exists(os.path.join(ws, "one")) and not os.path.exists(os.path.join(ws, "two")),
           "the rollback undid the second exec only", repr(os.listdir(ws)))
    w = ckpt_worker(sp)
    tap.ok(w > 0, "the rollback ran in a worker, which still runs", f"children: {[(c, comm(c)) for c in children(sp)]}")
    env.run("destroy", sid, check=True)
    tap.ok(wait_for(lambda: not pid_alive(sp), 60), "destroy ends the supervisor")
    tap.ok(w > 0 and wait_for(lambda: not pid_alive(w), 60), "and its worker")


def with_worker() -> tuple[str, int, int]:
    """A sandbox right after an exec: its id, supervisor and worker."""
    sid = env.create()
    sp = sup_pid(sid)
    env.sh(sid, "true")
    w = ckpt_worker(sp)
    tap.ok(w > 0, "a worker runs after an exec")
    return sid, sp, w


@tap.case("an unchanged workspace needs no worker")
def _unchanged():
    sid = env.create()
    sp = sup_pid(sid)
    env.sh(sid, "echo x > /workspace/x")
    # Past the racy window of the write (checkpoint/fingerprint.h): the clock, not a sleep.
    ws = next(s for s in env.ls() if s["id"] == sid)["workspace"]
    newest = max(max(st.st_mtime_ns, st.st_ctime_ns) for st in
                 [os.lstat(ws)] + [os.lstat(os.path.join(d, f)) for d, ds, fs in os.walk(ws) for f in ds + fs])
    await_true(lambda: time.time_ns() > newest + 2 * RACY_NS, "the write is older than the racy window",
               timeout=60, step=0.01)
    env.sh(sid, "true")  # the worker takes it; the supervisor keeps the fingerprint
    tap.ok(wait_for(lambda: ckpt_worker(sp) == 0, 60), "the worker idles out")
    for _ in range(3):
        tap.eq(env.sh(sid, "cat /workspace/x").stdout, b"x\n", "an exec in the unchanged workspace runs")
    tap.eq(ckpt_worker(sp), 0, "and the worker was not woken for their checkpoints")
    cps = json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)
    labels = [c["label"] for c in cps]
    tap.eq([l.split(":")[0] for l in labels if l.startswith("before exec")],
           [f"before exec {n}" for n in range(1, 6)], "yet every exec's label is listed, in order")
    tap.eq(len({c["id"] for c in cps if c["label"].startswith("before exec 3")} |
               {c["id"] for c in cps if c["label"].startswith("before exec 5")}), 1,
           "the unchanged execs name the same checkpoint")
    env.sh(sid, "echo y > /workspace/x")
    p = env.run("rollback", sid, "--yes")
    tap.eq(p.returncode, 0, "a rollback after them works")
    ws = next(s for s in env.ls() if s["id"] == sid)["workspace"]
    tap.eq(open(os.path.join(ws, "x")).read(), "x\n", "and restores the state before the last exec")
    env.run("destroy", sid, check=True)


@tap.case("a killed worker is replaced")
def _killed():
    sid, sp, w = with_worker()
    if not w:
        return
    os.kill(w, signal.SIGKILL)
    p = env.sh(sid, "echo after > /workspace/after")
    tap.eq(p.returncode, 0, "the next exec runs after the worker was SIGKILLed")
    cps = env.run("checkpoints", sid, "--json", check=True).stdout.decode()
    tap.ok("before exec 2" in cps, "its checkpoint was taken by a new worker", cps[-400:])
    w2 = ckpt_worker(sp)
    tap.ok(w2 > 0 and w2 != w, "a new worker runs", f"{w} -> {w2}")
    env.run("destroy", sid, check=True)


@tap.case("the worker dies with a SIGKILLed supervisor")
def _orphan():
    sid, sp, w = with_worker()
    if not w:
        return
    os.kill(sp, signal.SIGKILL)
    tap.ok(wait_for(lambda: not pid_alive(w), 60), "the worker is gone (no orphan)")
    await_true(lambda: not pid_alive(sp), "the supervisor is gone", timeout=60)
    p = env.run("destroy", sid)
    tap.eq(p.returncode, 0, "destroy of that sandbox works")
    tap.eq([d for d in cgroup_dirs(sid) if os.path.exists(d)], [], "its cgroups are gone")


@tap.case("a missing worker is a clear error")
def _missing():
    before = {s["id"] for s in env.ls()}
    p = env.run("create", "--learner", "wk", env={"SANDGLASS_CKPT": "/nonexistent/sandglass-ckpt"})
    err = p.stderr.decode()
    tap.ok(p.returncode != 0 and "sandglass-ckpt" in err and len(err.strip().splitlines()) == 1,
           "create without the checkpoint worker fails with one line naming it", err)
    tap.eq({s["id"] for s in env.ls()}, before, "and leaves no sandbox behind")


env.cleanup()

cap = CapEnv()
cap.env["SANDGLASS_CKPT_IDLE_MS"] = IDLE_MS


@tap.case("a captured sandbox's supervisor maps no uplink library; the uplink daemon streams; diffs come from the worker")
def _captured():
    sid = cap.create_captured()
    sp = next(s for s in cap.ls() if s["id"] == sid)["supervisor_pid"]
    m = mapped(sp)
    tap.eq(sorted(x for x in m if x.startswith(HEAVY)), [],
           "the captured supervisor maps no libgit2, libwebsockets or OpenSSL")
    tap.ok(wait_for(lambda: uplink_daemon_pid(cap.state) > 0, 60),
           "one uplink daemon serves the state directory")
    up = uplink_daemon_pid(cap.state)
    um = mapped(up) if up else set()
    tap.ok(any(x.startswith("libwebsockets") for x in um) and any(x.startswith("libcrypto") for x in um),
           "it maps libwebsockets and OpenSSL", repr(sorted(um)))
    tap.ok(up > 0 and up not in children(sp), "and is not the supervisor's child (it serves every sandbox)",
           f"daemon {up}, supervisor's children {children(sp)}")
    sid2 = cap.create_captured()
    cap.sh(sid2, "echo second")
    tap.eq(uplink_daemon_pid(cap.state), up, "a second captured sandbox uses the same daemon")
    cap.destroy(sid2)
    p = cap.sh(sid, "printf 'a\\nb\\n' > /workspace/f.txt")
    tap.eq(p.returncode, 0, "an exec writes a file")
    ok = wait_for(lambda: any(r["kind"] == "file_diff" and r["payload"].get("path") == "f.txt"
                              and "+b" in r["payload"].get("diff", "") for r in cap.rows(sid)), 60)
    tap.ok(ok, "the store has its file_diff with the unified diff (made by the worker)",
           repr([r for r in cap.rows(sid) if r["kind"] == "file_diff"][-3:]))
    cap.destroy(sid)


cap.cleanup()
tap.done()

#!/usr/bin/env python3
"""Destroy's answer does not wait for the disk's release (issue 22: "the
kill switch never waits"). Under a rehash attack on a host mounted with
`discard`, destroy took 4-98 s: it waited for the workspace's unmount (the
learner's pages written back) and ext4's discards of the image on unlink.
Now the image is renamed into <state>/reclaim/ at once and a detached
reclaimer (sandglass-supervisor reclaim, in sandglass/:host) detaches the
mount, frees the loop device, gives the uid slot back and unlinks the image
(sandbox/disk.h).

Held by SANDGLASS_TEST_RECLAIM_HOLD (while that file exists), the reclaimer shows the
order: destroy has answered and the record is gone while the image sits in
the reclaim directory and the mount and the uid slot are still held; let
go, everything is given back. A reclaimer killed mid-way (a crash) leaves
its entry, and `sandglass gc` reclaims it."""
from __future__ import annotations

import errno
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, loop_backing, mounts, pid_alive, tap, wait_for  # noqa: E402

UID_DIR = "/run/sandglass-uids"


def reclaimers(hold: str) -> list[int]:
    """The live reclaimers of this test (their command line and the hold
    in their environment)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv[:2] == [b"sandglass-supervisor", b"reclaim"] and pid_alive(int(p)):
                with open(f"/proc/{p}/environ", "rb") as f:
                    if f"SANDGLASS_TEST_RECLAIM_HOLD={hold}".encode() in f.read().split(b"\0"):
                        out.append(int(p))
        except OSError:
            pass
    return out


def hold_on(hold: str) -> None:
    open(hold, "w").close()


def release(hold: str) -> None:
    try:
        os.unlink(hold)
    except FileNotFoundError:
        pass


def slot_held(uid: int) -> bool:
    return os.path.exists(os.path.join(UID_DIR, str(uid - 0x70000000)))


env = Env()
hold = os.path.join(env.root, "hold")
# in the environment of create: the supervisor starts the reclaimer
env.env["SANDGLASS_TEST_RECLAIM_HOLD"] = hold
try:
    def make(label: str) -> tuple[str, dict]:
        sid = env.create("--disk", "32M")
        rec = next(sb for sb in env.ls() if sb["id"] == sid)
        rec["uid"] = int(env.uid_of(sid))
        p = env.sh(sid, "dd if=/dev/urandom of=/workspace/blob bs=1M count=8 status=none && sync && "
                        "rm /workspace/blob && dd if=/dev/urandom of=/workspace/keep bs=1M count=4 status=none")
        tap.ok(p.returncode == 0, f"{label}: the learner wrote to its disk", p.stderr.decode(errors="replace"))
        return sid, rec

    # --- destroy answers; the release waits for the held reclaimer ---
    a, ra = make("held")
    ws, uid = ra["workspace"], ra["uid"]
    entry = os.path.join(env.state, "reclaim", a)
    hold_on(hold)
    p = env.run("destroy", a)
    tap.ok(p.returncode == 0, "destroy answers while the reclaimer is held", p.stderr.decode(errors="replace"))
    tap.ok(not os.path.exists(os.path.join(env.state, "sb", a)), "the sandbox's record and state are gone")
    tap.ok(a not in [sb["id"] for sb in env.ls()], "ls no longer lists it")
    tap.ok(os.path.isfile(entry) and os.stat(entry).st_size > 0, "its image sits in the reclaim directory",
           repr(os.listdir(os.path.dirname(entry)) if os.path.isdir(os.path.dirname(entry)) else None))
    tap.ok(f" {ws} " in mounts(), "its file system is still mounted (the reclaimer's to detach)")
    tap.ok(slot_held(uid), "its uid slot is still held: no other sandbox mounts there before the release")
    tap.ok(wait_for(lambda: len(reclaimers(hold)) == 1, 30), "one reclaimer waits on the hold",
           repr(reclaimers(hold)))
    pids = reclaimers(hold)
    if pids:
        cg = open(f"/proc/{pids[0]}/cgroup").read()
        tap.ok("/sandglass/:host" in cg, "the reclaimer is charged to sandglass/:host, not the caller", cg)
    else:
        tap.ok(False, "the reclaimer is charged to sandglass/:host, not the caller")
    release(hold)
    tap.ok(wait_for(lambda: not any(pid_alive(p) for p in pids), 30), "let go, the reclaimer ends")
    tap.ok(wait_for(lambda: not os.path.exists(entry), 60), "its image is unlinked")
    tap.ok(f" {ws} " not in mounts() and not os.path.exists(ws), "its mount is detached and its mount point removed")
    tap.ok(wait_for(lambda: not any(x.startswith(entry) or x.startswith(os.path.join(env.state, "sb", a))
                                    for x in loop_backing()), 30),
           "its loop device is freed", repr(loop_backing()))
    tap.ok(not slot_held(uid), "its uid slot is given back")

    # --- the CLI's cleanup of a sandbox whose supervisor and init died:
    # the same release, and destroy's output ends with destroy (the
    # reclaimer, its grandchild, holds none of its fds) ---
    c, rc_ = make("dead supervisor")
    entry_c = os.path.join(env.state, "reclaim", c)
    os.kill(rc_["supervisor_pid"], signal.SIGKILL)
    os.kill(rc_["init_pid"], signal.SIGKILL)
    tap.ok(wait_for(lambda: not pid_alive(rc_["supervisor_pid"]) and not pid_alive(rc_["init_pid"]), 30),
           "dead supervisor: its supervisor and init are killed")
    hold_on(hold)
    p = env.run("destroy", c, timeout=60)
    tap.ok(p.returncode == 0, "dead supervisor: destroy answers (its output closed) while the reclaimer is held",
           p.stderr.decode(errors="replace"))
    tap.ok(os.path.isfile(entry_c) and f" {rc_['workspace']} " in mounts(),
           "dead supervisor: its image sits in the reclaim directory, still mounted")
    tap.ok(wait_for(lambda: len(reclaimers(hold)) == 1, 30), "dead supervisor: its reclaimer waits")
    pids = reclaimers(hold)
    release(hold)
    tap.ok(wait_for(lambda: not any(pid_alive(p) for p in pids) and not os.path.exists(entry_c), 60)
           and f" {rc_['workspace']} " not in mounts(), "dead supervisor: let go, its disk is released")

    # --- a reclaimer killed mid-way (a crash): gc reclaims its entry ---
    b, rb = make("crashed")
    wsb = rb["workspace"]
    entry_b = os.path.join(env.state, "reclaim", b)
    hold_on(hold)
    p = env.run("destroy", b)
    tap.ok(p.returncode == 0, "destroy of the second sandbox", p.stderr.decode(errors="replace"))
    tap.ok(wait_for(lambda: len(reclaimers(hold)) == 1, 30), "its reclaimer waits on the hold")
    for pid in reclaimers(hold):
        os.kill(pid, signal.SIGKILL)
    tap.ok(wait_for(lambda: not reclaimers(hold), 30), "the reclaimer is killed")
    release(hold)
    tap.ok(os.path.isfile(entry_b) and f" {wsb} " in mounts(), "its entry and its mount are left behind")
    p = env.run("gc", timeout=120)
    out = p.stdout.decode(errors="replace")
    tap.ok(p.returncode == 0 and "1 disk(s) of destroyed sandboxes reclaimed" in out, "gc reclaims the leftover",
           out + p.stderr.decode(errors="replace"))
    tap.ok(not os.path.exists(entry_b), "its image is unlinked")
    tap.ok(f" {wsb} " not in mounts() and not os.path.exists(wsb), "its mount is detached")
    tap.ok(wait_for(lambda: not any(x.startswith(entry_b) for x in loop_backing()), 30),
           "its loop device is freed", repr(loop_backing()))
    tap.ok(not slot_held(rb["uid"]), "its uid slot is given back")
    tap.ok(not os.listdir(os.path.join(env.state, "reclaim")), "the reclaim directory is empty")
finally:
    release(hold)  # a reclaimer still held is let go; the cleanup's are not held
    env.cleanup()
tap.done()

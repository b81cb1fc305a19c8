#!/usr/bin/env python3
"""The disk was not the sandbox's: `fallocate -l 20G` inside took 20 GB of
the host's free space. A workspace create makes is now a file system of its
own of --disk bytes (sandbox/disk.h): fallocate, dd and a sparse file
filled in place get ENOSPC at that size, the host keeps its space, the
sandbox and the service go on working, two sandboxes' disks are
independent, a rollback on a full disk still restores, and destroy gives
everything back (mount, loop device, image)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, loop_backing, mounts, pid_alive, tap, wait_for  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
ENOSPC = b"No space left on device"

SPARSE_FILL = r"""
import os
fd = os.open('/workspace/sparse', os.O_WRONLY | os.O_CREAT, 0o644)
os.ftruncate(fd, 1 << 40)
buf = b'x' * (1 << 20)
try:
    for i in range(4096):
        os.pwrite(fd, buf, i * (1 << 28))
    print('NOERR')
except OSError as e:
    print('ERR', e.errno)
"""


def host_free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def record(env: Env, sid: str) -> dict:
    return next(sb for sb in env.ls() if sb["id"] == sid)


env = Env()
workspaces: list[str] = []
try:
    # --- the attack as it was run: a default sandbox, fallocate -l 20G ---
    a = env.create()
    ra = record(env, a)
    workspaces.append(ra["workspace"])
    tap.eq(ra["limits"].get("disk"), GiB, "ls --json records the default disk limit (1 GiB)")
    free0 = host_free(env.state)
    p = env.sh(a, "fallocate -l 20G /workspace/big")
    tap.ok(p.returncode != 0 and ENOSPC in p.stderr, "fallocate -l 20G fails with ENOSPC",
           f"rc={p.returncode} {p.stderr[-200:]!r}")
    # Other processes share this disk: the margin is wide, 20 GB is not.
    tap.ok(free0 - host_free(env.state) < 4 * GiB, "the host's free space was not taken",
           f"{(free0 - host_free(env.state)) / GiB:.2f} GiB")
    env.sh(a, "rm -f /workspace/big")
    tap.eq(env.exec(a, "echo", "alive").stdout, b"alive\n", "the sandbox works after it")

    # --- two small disks: dd, a sparse file filled in place; independence ---
    b = env.create("--disk", "64M")
    c = env.create("--disk", "64M")
    rb, rc_ = record(env, b), record(env, c)
    workspaces += [rb["workspace"], rc_["workspace"]]
    tap.eq(rb["limits"].get("disk"), 64 * MiB, "--disk 64M is recorded")
    img_b = os.path.join(env.state, "sb", b, "disk.img")
    p = env.sh(b, "dd if=/dev/urandom of=/workspace/fill bs=1M count=300")
    tap.ok(p.returncode != 0 and ENOSPC in p.stderr, "dd past the disk fails with ENOSPC",
           f"rc={p.returncode} {p.stderr[-200:]!r}")
    size = int(env.sh(b, "stat -c %s /workspace/fill").stdout or b"0")
    tap.ok(56 * MiB <= size <= 68 * MiB, "the learner got about the 64 MiB asked for", f"{size / MiB:.1f} MiB")
    used = os.stat(img_b).st_blocks * 512
    tap.ok(used <= 64 * MiB * 1.15, "on the host it takes no more than its disk", f"{used / MiB:.1f} MiB")
    p = env.exec(b, "python3", "-c", "import os; os.remove('/workspace/fill')\n" + SPARSE_FILL)
    tap.eq(p.stdout.strip(), b"ERR 28", "a 1 TiB sparse file filled in place gets ENOSPC")
    p = env.sh(b, "truncate -s 0 /workspace/sparse && echo still > /workspace/ok && cat /workspace/ok")
    tap.eq((p.returncode, p.stdout), (0, b"still\n"), "the full sandbox recovers once it frees space")
    p = env.sh(c, "dd if=/dev/urandom of=/workspace/mine bs=1M count=32 2>/dev/null && stat -c %s /workspace/mine")
    tap.eq((p.returncode, p.stdout.strip()), (0, str(32 * MiB).encode()), "another sandbox's disk is its own")

    # --- rollback when the disk is full: restored as root, from its reserve ---
    p = env.sh(c, "rm -f /workspace/mine; for f in k1 k2; do head -c 20000000 /dev/urandom > /workspace/$f; done; "
                  "sha256sum /workspace/k1 /workspace/k2")
    want = p.stdout
    p = env.run("checkpoint", c, "--label", "kept", "--json")
    tap.ok(p.returncode == 0, "a checkpoint of 40 MB", p.stderr.decode(errors="replace"))
    cp = json.loads(p.stdout)["id"] if p.returncode == 0 else ""
    p = env.sh(c, "rm /workspace/k1 /workspace/k2; dd if=/dev/urandom of=/workspace/fill bs=1M count=300")
    tap.ok(ENOSPC in p.stderr, "then the learner fills the disk")
    p = env.run("rollback", c, "--to", cp, "--yes")
    tap.ok(p.returncode == 0, "rollback to it on a full disk succeeds", p.stderr.decode(errors="replace"))
    tap.eq(env.sh(c, "sha256sum /workspace/k1 /workspace/k2").stdout, want, "every file is back, byte for byte")
    tap.eq(env.sh(c, "test -e /workspace/fill; echo $?").stdout, b"1\n", "and the fill is gone")

    # --- destroy gives back the mount, the loop device and the image ---
    p = env.run("destroy", b)
    tap.eq(p.returncode, 0, "destroy of the full sandbox")
    # after destroy's answer, by the disk's reclaimer (sandbox/disk.h)
    reclaim_b = os.path.join(env.state, "reclaim", b)
    tap.ok(wait_for(lambda: f" {rb['workspace']} " not in mounts(), 60), "its file system is unmounted")
    tap.ok(wait_for(lambda: not os.path.exists(img_b) and not os.path.exists(reclaim_b), 60),
           "its image is removed")
    tap.ok(wait_for(lambda: not any(x.startswith(img_b) for x in loop_backing()), 30),
           "its loop device is detached", repr(loop_backing()))
    tap.eq(env.exec(c, "echo", "alive").stdout, b"alive\n", "the other sandbox goes on")

    # --- gc: a sandbox whose supervisor and init died gives its disk back
    # too (one whose init lives is taken over, never removed: issue 21) ---
    g = env.create("--disk", "16M")
    rg = record(env, g)
    workspaces.append(rg["workspace"])
    img_g = os.path.join(env.state, "sb", g, "disk.img")
    os.kill(rg["supervisor_pid"], signal.SIGKILL)
    os.kill(rg["init_pid"], signal.SIGKILL)
    tap.ok(wait_for(lambda: not pid_alive(rg["supervisor_pid"]) and not pid_alive(rg["init_pid"]), 30),
           "its supervisor and its init are killed")
    p = env.run("gc", timeout=120)
    # the release is the reclaimer's (gc starts one, and finishes what none
    # holds): it may end just after gc does (CI saw the mount a moment later)
    tap.ok(p.returncode == 0 and wait_for(lambda: f" {rg['workspace']} " not in mounts(), 60) and
           not os.path.exists(img_g), "gc removes its mount and its image", p.stderr.decode(errors="replace"))

    # --- a record lost (meta.json gone): gc still finds the disk, by the
    # uid's slot ---
    k = env.create("--disk", "16M")
    rk = record(env, k)
    workspaces.append(rk["workspace"])
    os.kill(rk["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(rk["supervisor_pid"]), 30)
    os.unlink(os.path.join(env.state, "sb", k, "meta.json"))
    p = env.run("gc", timeout=120)
    tap.ok(p.returncode == 0 and f" {rk['workspace']} " not in mounts(),
           "gc of a sandbox without its record detaches its disk", (p.stdout + p.stderr).decode(errors="replace"))

    # --- a state directory removed under a live sandbox: rm -rf never
    # reaches its mount (it lives outside); the supervisor notices and ends
    # the sandbox, detaching its disk (issue 21: no immortal sandbox), and
    # gc --orphan-cgroups of that state directory finds nothing left ---
    env2 = Env()
    try:
        h = env2.create("--disk", "16M")
        wh = record(env2, h)["workspace"]
        workspaces.append(wh)
        sbh = os.path.join(env2.state, "sb", h)
        # (its checkpoint worker may be writing there meanwhile: again until gone)
        wait_for(lambda: shutil.rmtree(sbh, ignore_errors=True) or not os.path.exists(sbh), 30)
        tap.ok(not wh.startswith(env2.state), "rm -rf of the sandbox's state went nowhere near its mount", wh)
        tap.ok(wait_for(lambda: f" {wh} " not in mounts(), 60),
               "its supervisor ends the sandbox and detaches its disk", mounts())
        p = env2.run("gc", "--orphan-cgroups", timeout=120)
        tap.ok(p.returncode == 0 and f" {wh} " not in mounts(),
               "gc --orphan-cgroups of a sandbox whose state is gone leaves no disk",
               (p.stdout + p.stderr).decode(errors="replace"))
    finally:
        env2.cleanup()

    # --- the pool: a spare has the default disk; another --disk builds anew ---
    env.run("pool", "1", check=True)
    ready = lambda: json.loads(env.run("pool", "--json").stdout or b"{}").get("ready") == 1  # noqa: E731
    tap.ok(wait_for(ready, 120), "a spare is ready")
    spares = [f for f in os.listdir(os.path.join(env.state, "pool")) if f != "size"]
    d = env.create("--disk", "32M")
    workspaces.append(record(env, d)["workspace"])
    tap.ok(d not in spares and record(env, d)["limits"].get("disk") == 32 * MiB,
           "create --disk 32M does not take the spare (its disk is 1 GiB)", repr((d, spares)))
    e = env.create()
    workspaces.append(record(env, e)["workspace"])
    tap.ok(e in spares and record(env, e)["limits"].get("disk") == GiB,
           "a create with the default disk claims it", repr((e, spares)))
    env.run("pool", "0", check=True)

    # --- bad --disk values: one line, usage error, nothing made ---
    before = len(env.ls())
    for args, why in ((["--disk", "1Q"], "a bad size"), (["--disk", "8M"], "under 16M"),
                      (["--disk", "17T"], "over 16T")):
        p = env.run("create", "--learner", "t", *args)
        tap.ok(p.returncode == 2 and b"--disk" in p.stderr and p.stderr.count(b"\n") == 1,
               f"--disk: {why} is refused in one line", p.stderr.decode(errors="replace"))
    with tempfile.TemporaryDirectory() as ws:
        p = env.run("create", "--learner", "t", "--workspace", ws, "--disk", "64M")
        tap.ok(p.returncode == 2 and b"--workspace" in p.stderr, "--disk with --workspace is refused",
               p.stderr.decode(errors="replace"))
    tap.eq(len(env.ls()), before, "none of them made a sandbox")
finally:
    env.cleanup()
# Nothing left on the host by this test's sandboxes (a fresh CI machine
# must not collect mounts or loop devices).
left = [w for w in workspaces if f" {w} " in mounts()]
tap.eq(left, [], "no mount is left after the test")
tap.done()

#!/usr/bin/env python3
"""Fail closed (issue 22): a --disk that cannot be honoured is an error, not
a workspace with no limit. Before: `create --disk 16T`, inside the
documented range, failed to make its template (its image passes ext4's
16 TiB file limit) and fell back to a directory with no limit at all, with
one warning; create never asked whether the host had the space its images
may grow to. Now the range ends at 14T (the image stays under 16 TiB); a
--disk whose image could outgrow the state directory's file system, beside
what the other sandboxes' images may still grow by, is refused unless
--overcommit; and a --disk given that cannot be made (rootless: no loop
device) fails create, leaving nothing. The state directory here is a small
tmpfs of its own, so the free space is known and real."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from workspace_common import SANDGLASS, SLOW, new_env, tap

MiB = 1 << 20
FS = 96  # MiB: the state directory's file system


def mounts() -> str:
    return open("/proc/self/mounts").read()


def one_line(p: subprocess.CompletedProcess) -> bool:
    return p.stderr.count(b"\n") == 1


env = new_env()
tmpfs = os.path.join(env.root, "small")
os.makedirs(tmpfs)
made: list[str] = []
try:
    p = env.run("create", "--learner", "t", "--disk", "16T")
    tap.ok(p.returncode == 2 and b"14T" in p.stderr and one_line(p),
           "--disk 16T (its image would pass ext4's 16 TiB file limit) is a usage error",
           p.stderr.decode(errors="replace"))

    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS}M,mode=0700", "tmpfs", tmpfs], check=True)
    env.env["SANDGLASS_STATE_DIR"] = tmpfs
    p = env.run("create", "--learner", "t", "--disk", "128M", timeout=SLOW)
    tap.ok(p.returncode == 1 and b"cannot be honoured" in p.stderr and b"--overcommit" in p.stderr
           and one_line(p), f"--disk 128M on a {FS} MiB state file system is refused, in one line",
           p.stderr.decode(errors="replace"))
    tap.eq(os.listdir(os.path.join(tmpfs, "sb")) if os.path.isdir(os.path.join(tmpfs, "sb")) else [], [],
           "and leaves no sandbox behind")
    p = env.run("create", "--learner", "t", "--disk", "32M", "--json", timeout=SLOW)
    first = json.loads(p.stdout)["id"] if p.returncode == 0 else ""
    made += [first] if first else []
    tap.ok(p.returncode == 0 and json.loads(p.stdout)["limits"].get("disk") == 32 * MiB,
           "--disk 32M fits and is made", p.stderr.decode(errors="replace"))
    p = env.run("create", "--learner", "t", "--disk", "64M", timeout=SLOW)
    tap.ok(p.returncode == 1 and b"promised to the images of the other sandboxes" in p.stderr,
           "--disk 64M is refused: with what the first image may still grow by, it would not fit",
           p.stderr.decode(errors="replace"))
    p = env.run("create", "--learner", "t", "--disk", "64M", "--overcommit", "--json", timeout=SLOW)
    second = json.loads(p.stdout)["id"] if p.returncode == 0 else ""
    made += [second] if second else []
    tap.ok(p.returncode == 0 and json.loads(p.stdout)["limits"].get("disk") == 64 * MiB,
           "with --overcommit it is made, its limit the one asked for", p.stderr.decode(errors="replace"))
    for sid in made:
        r = env.destroy(sid)
        tap.ok(r.returncode == 0, f"destroy {sid}", r.stderr.decode(errors="replace"))

    # rootless: no loop device, so no disk can be made
    state = tempfile.mkdtemp(prefix="sgfc-", dir=env.root)
    os.chmod(env.root, 0o755)
    shutil.chown(state, "nobody", "nogroup")
    e = {"SANDGLASS_STATE_DIR": state, "SANDGLASS_INGEST": env.ingest_url, "PATH": os.environ["PATH"],
         "SANDGLASSD": env.env["SANDGLASSD"]}
    p = subprocess.run(["runuser", "-u", "nobody", "--", "env", "-i", *(f"{k}={v}" for k, v in e.items()),
                        SANDGLASS, "create", "--learner", "t", "--disk", "64M"],
                       capture_output=True, timeout=SLOW)
    tap.ok(p.returncode == 1 and b"cannot be honoured" in p.stderr and one_line(p),
           "rootless, a --disk given is an error (no workspace without its limit)",
           p.stderr.decode(errors="replace"))
    tap.eq(os.listdir(os.path.join(state, "sb")) if os.path.isdir(os.path.join(state, "sb")) else [], [],
           "and leaves no sandbox behind")
finally:
    # whatever a broken create left (the old code's fallbacks) goes too
    env.env["SANDGLASS_STATE_DIR"] = tmpfs
    sb = os.path.join(tmpfs, "sb")
    for sid in os.listdir(sb) if os.path.isdir(sb) else []:
        if sid not in made:
            env.run("destroy", sid, timeout=SLOW)
    env.cleanup()
    if f" {tmpfs} " in mounts():
        subprocess.run(["umount", tmpfs], check=False)
tap.done()

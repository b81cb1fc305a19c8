#!/usr/bin/env python3
"""Every sandbox used to run as uid 65534, so sandboxes shared the kernel's
per-user limits: 128 inotify instances held in one sandbox made
inotify_init fail with EMFILE in another. Each sandbox now runs as a uid of
its own (state.h: SG_UID_BASE + a slot claimed host-wide); the slot is
given back at destroy."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, tap, wait_for  # noqa: E402

HOG = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
open('/workspace/hog.tmp', 'w').write(f'{len(fds)} {ctypes.get_errno()}\n')
os.rename('/workspace/hog.tmp', '/workspace/hog')
while True:
    signal.pause()
"""
PROBE = ("import ctypes; l = ctypes.CDLL(None, use_errno=True); fd = l.inotify_init1(0); "
         "print('OK' if fd >= 0 else 'ERR %d' % ctypes.get_errno())")

env = Env()
try:
    a, b = env.create(), env.create()
    ids = {}
    for sid in (a, b):
        out = env.exec(sid, "id", "-u").stdout.strip()
        ids[sid] = int(out) if out.isdigit() else -1
    tap.ok(ids[a] != ids[b], "two sandboxes run as two uids", repr(ids))
    tap.ok(65534 not in ids.values() and 0 not in ids.values(), "neither is nobody nor root", repr(ids))
    slot_files = [os.path.join("/run/sandglass-uids", str(u - 0x70000000)) for u in ids.values()]
    tap.ok(all(os.path.exists(f) for f in slot_files), "each uid's slot is claimed on the host", repr(slot_files))

    p = env.exec(a, "/bin/sh", "-c", "cat > /workspace/hog.py", input=HOG.encode())
    tap.eq(p.returncode, 0, "the hog is in place")
    env.exec(a, "/bin/sh", "-c", "python3 /workspace/hog.py >/dev/null 2>&1 &")
    tap.ok(wait_for(lambda: env.exec(a, "test", "-f", "/workspace/hog").returncode == 0, 60),
           "sandbox A holds every inotify instance its user may have")
    n, errno_ = env.exec(a, "cat", "/workspace/hog").stdout.split()
    tap.ok(int(n) > 0 and int(errno_) == 24, "A's user hit its limit (EMFILE)", f"{n} {errno_}")
    # The control: the limit is the user's, so A itself is out of them
    # while the hog holds them (else the check below proves nothing).
    tap.eq(env.exec(a, "python3", "-c", PROBE).stdout.strip(), b"ERR 24",
           "another process of A's user gets none (the limit is per user)")
    tap.eq(env.exec(b, "python3", "-c", PROBE).stdout.strip(), b"OK",
           "sandbox B still gets an inotify instance")

    env.run("destroy", a, check=True)
    # destroy answers before its disk's release; the reclaimer gives the
    # slot back once the mount is gone
    tap.ok(wait_for(lambda: not os.path.exists(slot_files[0]), 60), "destroy gives the uid's slot back")
finally:
    env.cleanup()
tap.done()

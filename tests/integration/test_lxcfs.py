#!/usr/bin/env python3
"""LXCFS (issue 26): with a running LXCFS (Debian's lxcfs, started here on
a directory of the test's own), a sandbox's /proc/meminfo, /proc/uptime
and `free` show the sandbox's own memory limit and age, not the host's;
the files are read-only; with SANDGLASS_LXCFS=off (or no LXCFS) /proc
shows the host's totals, as docs/SANDBOX.md says; its teardown removes no
cgroup but its sandboxes' (LXCFS's mount shows the host's cgroup v1
hierarchies under cgroup/: LXCFS is stopped and unmounted before the
state directory goes). Skips, with its reason, without the lxcfs program
or /dev/fuse. TAP."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from sgtest import Env, cgroup_dirs, tap

PLAN = 7


def meminfo_kb(text: str, key: str = "MemTotal") -> int:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return -1


def host_kb() -> int:
    return meminfo_kb(open("/proc/meminfo").read())


lxcfs = shutil.which("lxcfs")
if not lxcfs or not os.path.exists("/dev/fuse") or os.geteuid() != 0:
    why = "no lxcfs program (Debian's lxcfs)" if not lxcfs else \
        "no /dev/fuse" if not os.path.exists("/dev/fuse") else "needs root"
    for i in range(PLAN):
        tap.skip(f"LXCFS check {i + 1}", why)
    tap.done()
    raise SystemExit(0)


def stop_lxcfs(proc: subprocess.Popen, mnt: str) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)


# An empty cgroup of ours, as a sandbox's is between its mkdir and its
# init's move into it: LXCFS shows it under <mnt>/cgroup/, where an rmdir
# removes the host's (an rm -r of the state directory over the live mount
# did, beside other tests' creates). The teardown must leave it. Made
# once the first sandbox has made the sandglass/ roots.
sentinel: list[str] = []


def make_sentinel() -> None:
    for d in cgroup_dirs(f"lxcfs-sentinel-{os.getpid()}"):
        if os.path.isdir(os.path.dirname(d)):
            os.mkdir(d)
            sentinel.append(d)


env = Env()
mnt = os.path.join(env.root, "lxcfs")
os.makedirs(mnt)
proc = subprocess.Popen([lxcfs, "-p", os.path.join(env.root, "lxcfs.pid"), mnt], stdout=subprocess.DEVNULL,
                        stderr=open(os.path.join(env.root, "lxcfs.log"), "wb"))
try:
    end = time.monotonic() + 60
    while time.monotonic() < end and proc.poll() is None and not os.path.exists(os.path.join(mnt, "proc", "meminfo")):
        time.sleep(0.05)
    up = proc.poll() is None and os.path.exists(os.path.join(mnt, "proc", "meminfo"))
    tap.ok(up, "lxcfs runs on the test's own mount point", open(os.path.join(env.root, "lxcfs.log")).read()[-800:])

    env.env["SANDGLASS_LXCFS"] = mnt
    sid = env.create("--memory", "256M")
    make_sentinel()
    p = env.exec(sid, "/bin/sh", "-c", "cat /proc/meminfo; echo ==; free -m; echo ==; cat /proc/uptime")
    meminfo, free, uptime = (p.stdout.decode(errors="replace").split("==\n") + ["", "", ""])[:3]
    tap.eq(meminfo_kb(meminfo), 256 * 1024, "/proc/meminfo inside: MemTotal is the sandbox's 256 MiB")
    mem_row = [line.split() for line in free.splitlines() if line.startswith("Mem:")]
    tap.ok(bool(mem_row) and mem_row[0][1] == "256", "free -m inside says 256", free)
    host_up = float(open("/proc/uptime").read().split()[0])
    tap.ok(uptime.split() and float(uptime.split()[0]) < host_up,
           "/proc/uptime inside is the sandbox's age, not the host's", f"{uptime!r} host {host_up}")
    # mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...
    mi = env.exec(sid, "cat", "/proc/self/mountinfo").stdout.decode(errors="replace")
    binds = {f[4]: f[5].split(",") for f in (line.split() for line in mi.splitlines()) if len(f) > 5}
    tap.ok(all("ro" in binds.get(f"/proc/{n}", []) for n in ("meminfo", "cpuinfo", "stat", "uptime", "loadavg")),
           "LXCFS's files are bound over /proc's, read-only", mi[-1500:])
    env.run("destroy", sid, check=True)

    env.env["SANDGLASS_LXCFS"] = "off"
    sid = env.create("--memory", "256M")
    p = env.exec(sid, "cat", "/proc/meminfo")
    tap.eq(meminfo_kb(p.stdout.decode(errors="replace")), host_kb(),
           "without LXCFS /proc/meminfo shows the host's total (the kernel's)")
    env.run("destroy", sid, check=True)
finally:
    # LXCFS first: nothing of the state directory's removal may go
    # through its mount (a sandbox left by a failure is destroyed without it)
    stop_lxcfs(proc, mnt)
    env.cleanup()
    gone = [d for d in sentinel if not os.path.isdir(d)]
    for d in sentinel:
        try:
            os.rmdir(d)
        except OSError:
            pass
tap.ok(sentinel != [] and gone == [], "the teardown removed no cgroup but its own (an empty one of ours stays)",
       f"made {sentinel}, gone {gone}")
tap.done()
